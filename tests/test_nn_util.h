// Shared by the nn tests (test_nn.cpp: module mechanics; test_nn_layers.cpp: layers, init, functional): the API.md example model and value helpers.
#pragma once
#include "nn/nn.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"

namespace mpx::testing {

namespace F = mpx::nn::functional;

// The example of API.md, verbatim apart from the sizes.
struct ApiNetImpl : mpx::nn::Module {
  ApiNetImpl() {
    conv = register_module("conv", mpx::nn::Conv2d(mpx::nn::Conv2dOptions(1, 4, 3).padding(1)));
    bn = register_module("bn", mpx::nn::BatchNorm2d(4));
    fc = register_module("fc", mpx::nn::Linear(4 * 4 * 4, 10));
  }
  mpx::Tensor forward(mpx::Tensor x) {
    x = F::max_pool2d(F::relu(bn(conv(x))), 2);
    return fc(x.flatten(1));
  }
  mpx::nn::Conv2d conv{nullptr};
  mpx::nn::BatchNorm2d bn{nullptr};
  mpx::nn::Linear fc{nullptr};
};
MPX_MODULE(ApiNet);

inline double max_abs(const Tensor& t) { return mpx::max(mpx::abs(t.detach().to(kFloat64))).item<double>(); }
/// Largest |a - b| (broadcasting), in f64.
inline double max_diff(const Tensor& a, const Tensor& b) {
  return max_abs(a.detach().to(kFloat64) - b.detach().to(kFloat64));
}

}  // namespace mpx::testing
