// Row norms: layer_norm and rms_norm on their fused kernels against f64 loops and the composite of
// differentiable ops, gradchecks (first and second order), autocast, nn::RMSNorm and amp's f32 norms.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include <mpx/mpx.h>

#include "gradcheck.h"
#include "test_util.h"

using namespace mpx;
using testing::gradcheck;
using testing::gradgradcheck;
using testing::leaf;
namespace F = nn::functional;

namespace {

// f64 loops: y[r, :] over rows of D from x's values; w, b may be undefined.
Tensor reference(bool rms, const Tensor& x, int64_t D, const Tensor& w, const Tensor& b, double eps) {
  NoGradGuard ng;
  const Tensor xd = x.to(kFloat64).contiguous();
  const Tensor wd = w.defined() ? w.to(kFloat64).contiguous() : Tensor(), bd = b.defined() ? b.to(kFloat64).contiguous() : Tensor();
  Tensor y = empty(x.sizes(), TensorOptions(kFloat64));
  const double* px = xd.data_ptr<double>();
  double* py = y.data_ptr<double>();
  for (int64_t r = 0; r < x.numel() / D; ++r) {
    double m = 0, q = 0;
    for (int64_t i = 0; i < D; ++i) m += px[r * D + i];
    m = rms ? 0.0 : m / D;
    for (int64_t i = 0; i < D; ++i) q += (px[r * D + i] - m) * (px[r * D + i] - m);
    const double rs = 1.0 / std::sqrt(q / D + eps);
    for (int64_t i = 0; i < D; ++i) {
      double v = (px[r * D + i] - m) * rs;
      if (wd.defined()) v *= wd.data_ptr<double>()[i];
      if (bd.defined()) v += bd.data_ptr<double>()[i];
      py[r * D + i] = v;
    }
  }
  return y;
}

// The composite of differentiable ops (what layer_norm was before the fused kernels), in f64.
Tensor composite(bool rms, const Tensor& x, int64_t D, const Tensor& w, const Tensor& b, double eps) {
  Tensor xf = x.to(kFloat64).reshape({-1, D}), y;
  if (rms) y = xf * rsqrt(mean(xf * xf, {1}, true) + eps);
  else y = (xf - mean(xf, {1}, true)) * rsqrt(var(xf, {1}, false, true) + eps);
  if (w.defined()) y = y * w.to(kFloat64).reshape({D});
  if (b.defined()) y = y + b.to(kFloat64).reshape({D});
  return y.reshape(x.sizes());
}

Tensor run(bool rms, const Tensor& x, const IntList& ns, const Tensor& w, const Tensor& b, double eps) {
  return rms ? rms_norm(x, ns, w, eps) : layer_norm(x, ns, w, b, eps);
}

Tensor seeded(const IntList& shape, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  NoGradGuard ng;
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64)) * scale + shift;
}

// Tolerance of a dtype's result against the f64 reference, relative to max |ref| (min 1).
double tol(DType dt) {
  switch (dt) {
    case kFloat64: return 1e-12;
    case kFloat32: return 2e-6;
    case kFloat16: return 2e-3;
    default: return 1.6e-2;
  }
}

}  // namespace

TEST_CASE("layer_norm and rms_norm: fused kernels match f64 loops and the composite in every dtype", "[row_norm]") {
  for (bool rms : {false, true}) {
    for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
      // A row mean far from zero checks the one-pass statistics for cancellation.
      for (const auto& [shape, ns, shift] : std::vector<std::tuple<IntList, IntList, double>>{
               {{4, 10}, {10}, 0.0}, {{3, 5, 37}, {37}, 3.0}, {{2, 3, 4, 6}, {4, 6}, -1.0}, {{6, 1}, {1}, 0.0}}) {
        INFO((rms ? "rms_norm " : "layer_norm ") << dtype_name(dt) << " " << shape_str(shape));
        int64_t D = 1;
        for (int64_t s : ns) D *= s;
        const Tensor x = seeded(shape, 1, 2.0, shift).to(dt);
        const Tensor w = seeded(ns, 2).to(dt), b = seeded(ns, 3).to(dt);
        const Tensor y = run(rms, x, ns, w, b, 1e-5);
        CHECK(y.dtype() == dt);
        const Tensor ref = reference(rms, x, D, w, rms ? Tensor() : b, 1e-5);
        CHECK(testing::close(y, ref, tol(dt), 0.0, 1.0));
        CHECK(testing::close(y, composite(rms, x, D, w, rms ? Tensor() : b, 1e-5), tol(dt), 0.0, 1.0));
        // No affine parameters, and a strided input.
        CHECK(testing::close(run(rms, x, ns, {}, {}, 1e-5), reference(rms, x, D, {}, {}, 1e-5), tol(dt), 0.0, 1.0));
        if (x.dim() >= 3 && ns.size() == 1) {
          const Tensor xt = x.transpose(0, 1);
          CHECK(testing::close(run(rms, xt, ns, w, b, 1e-5), reference(rms, xt, D, w, rms ? Tensor() : b, 1e-5),
                               tol(dt), 0.0, 1.0));
        }
      }
    }
  }
}

TEST_CASE("layer_norm and rms_norm: fused backward matches the composite's gradients in every dtype", "[row_norm]") {
  // [300, 200]: rows split into several chunks, whose parameter-gradient partials are summed.
  for (const auto& [shape, D] : std::vector<std::pair<IntList, int64_t>>{{{3, 4, 19}, 19}, {{300, 200}, 200}})
  for (bool rms : {false, true})
    for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
      INFO((rms ? "rms_norm " : "layer_norm ") << dtype_name(dt) << " " << shape_str(shape));
      const IntList ns{D};
      // f32 parameters beside low-precision activations, as amp keeps them.
      const DType pd = dt == kFloat64 ? kFloat64 : kFloat32;
      Tensor x = seeded(shape, 4, 1.5, 0.5).to(dt).set_requires_grad(true);
      Tensor w = seeded(ns, 5).to(pd).set_requires_grad(true), b = seeded(ns, 6).to(pd).set_requires_grad(true);
      const Tensor g = seeded(shape, 7).to(dt);
      Tensor y = run(rms, x, ns, w, rms ? Tensor() : b, 1e-5);
      y.backward(g);
      Tensor xr = x.detach().to(kFloat64).set_requires_grad(true), wr = w.detach().to(kFloat64).set_requires_grad(true),
             br = b.detach().to(kFloat64).set_requires_grad(true);
      composite(rms, xr, D, wr, rms ? Tensor() : br, 1e-5).backward(g.to(kFloat64));
      CHECK(x.grad().dtype() == dt);
      CHECK(w.grad().dtype() == pd);
      CHECK(testing::close(x.grad(), xr.grad(), tol(dt) * 2, 0.0, 1.0));
      CHECK(testing::close(w.grad(), wr.grad(), tol(dt) * 2, 0.0, 1.0));
      if (rms) CHECK_FALSE(b.grad().defined());
      else CHECK(testing::close(b.grad(), br.grad(), tol(dt) * 2, 0.0, 1.0));
    }
}

TEST_CASE("layer_norm and rms_norm gradchecks: input, weight, bias, and second order", "[row_norm][gradcheck]") {
  manual_seed(11);
  Tensor x = leaf({3, 2, 5}), w = leaf({5}), b = leaf({5});
  auto ln = [](const tensor_list& t) { return layer_norm(t[0], {5}, t[1], t[2]); };
  auto rn = [](const tensor_list& t) { return rms_norm(t[0], {5}, t[1], 1e-6); };
  CHECK(gradcheck(ln, {x, w, b}) == "");
  CHECK(gradcheck(rn, {x, w}) == "");
  CHECK(gradcheck([](const tensor_list& t) { return layer_norm(t[0], {2, 5}); }, {x}) == "");
  CHECK(gradcheck([](const tensor_list& t) { return rms_norm(t[0], {2, 5}); }, {x}) == "");
  // A strided input reaches the kernels through a recorded copy.
  Tensor xs = leaf({5, 3});
  CHECK(gradcheck([](const tensor_list& t) { return layer_norm(t[0].t(), {5}, t[1], t[2]); }, {xs, w, b}) == "");
  // create_graph: the recorded backward is the differentiable formula.
  Tensor x2 = leaf({2, 4}), w2 = leaf({4}), b2 = leaf({4});
  CHECK(gradgradcheck([](const tensor_list& t) { return layer_norm(t[0], {4}, t[1], t[2]); }, {x2, w2, b2}) == "");
  CHECK(gradgradcheck([](const tensor_list& t) { return rms_norm(t[0], {4}, t[1], 1e-6); }, {x2, w2}) == "");
}

TEST_CASE("rms_norm: eps defaults to the dtype's machine epsilon, and the RMSNorm module and F::rms_norm", "[row_norm]") {
  const Tensor x = seeded({4, 8}, 12, 1e-3);  // tiny values: eps matters
  CHECK(testing::close(rms_norm(x, {8}), reference(true, x, 8, {}, {}, std::numeric_limits<double>::epsilon()), 1e-12));
  const Tensor xf = x.to(kFloat32);
  CHECK(testing::close(rms_norm(xf, {8}), reference(true, xf, 8, {}, {}, std::numeric_limits<float>::epsilon()), 2e-6));
  CHECK_FALSE(testing::close(rms_norm(xf, {8}), reference(true, xf, 8, {}, {}, 1e-5), 1e-3));
  const Tensor xh = seeded({4, 8}, 13).to(kFloat16);
  CHECK(testing::close(rms_norm(xh, {8}), reference(true, xh, 8, {}, {}, 0.0009765625), 2e-3, 0.0, 1.0));

  nn::RMSNorm m(nn::RMSNormOptions({8}));
  REQUIRE(m->named_parameters().keys() == std::vector<std::string>{"weight"});
  CHECK(m->weight.sizes() == IntList{8});
  CHECK(max(abs(m->weight - 1.0)).item<double>() == 0.0);
  {
    NoGradGuard ng;
    m->weight.uniform_(0.5, 1.5);
  }
  CHECK(testing::max_abs_diff(m(xf), F::rms_norm(xf, F::RMSNormFuncOptions({8}).weight(m->weight))) == 0.0);
  nn::RMSNorm m2(nn::RMSNormOptions({8}).eps(0.5).elementwise_affine(false));
  CHECK(m2->parameters().empty());
  CHECK(testing::close(m2(xf), reference(true, xf, 8, {}, {}, 0.5), 2e-6));
  std::ostringstream os;
  os << *m2;
  CHECK(os.str() == "RMSNorm([8], eps=0.5, elementwise_affine=false)");
}

TEST_CASE("layer_norm with f16 parameters (O3) and on an empty input", "[row_norm]") {
  Tensor x = seeded({4, 12}, 20).to(kFloat16).set_requires_grad(true);
  Tensor w = seeded({12}, 21).to(kFloat16).set_requires_grad(true), b = seeded({12}, 22).to(kFloat16).set_requires_grad(true);
  Tensor y = layer_norm(x, {12}, w, b);
  CHECK(testing::close(y, reference(false, x, 12, w, b, 1e-5), 2e-3, 0.0, 1.0));
  sum(y * seeded({4, 12}, 23).to(kFloat16)).backward();
  CHECK(w.grad().dtype() == kFloat16);
  CHECK(b.grad().dtype() == kFloat16);
  CHECK(x.grad().dtype() == kFloat16);
  // No rows: the composite defines the (empty) result and its gradient.
  Tensor e = zeros({0, 5}).set_requires_grad(true);
  Tensor ye = layer_norm(e, {5}, ones({5}), zeros({5}));
  CHECK(ye.sizes() == IntList{0, 5});
  CHECK(rms_norm(e, {5}).sizes() == IntList{0, 5});
}

TEST_CASE("layer_norm and rms_norm run in f32 under autocast and error on bad input", "[row_norm]") {
  const Tensor x = seeded({2, 6}, 14).to(kFloat16), w = ones({6});
  {
    amp::AutocastGuard ac(kFloat16);
    CHECK(layer_norm(x, {6}, w, zeros({6})).dtype() == kFloat32);
    CHECK(rms_norm(x, {6}, w).dtype() == kFloat32);
  }
  CHECK(layer_norm(x, {6}).dtype() == kFloat16);
  CHECK_THROWS_WITH(layer_norm(x, {5}), Catch::Contains("layer_norm") && Catch::Contains("trailing dims"));
  CHECK_THROWS_WITH(rms_norm(x, {}), Catch::Contains("rms_norm") && Catch::Contains("non-empty"));
  CHECK_THROWS_WITH(rms_norm(x, {6}, ones({3})), Catch::Contains("rms_norm: weight"));
  CHECK_THROWS_WITH(layer_norm(x, {6}, w, ones({2, 3})), Catch::Contains("layer_norm: bias"));
  CHECK_THROWS_WITH(rms_norm(ones({2, 6}, TensorOptions(kInt64)), {6}), Catch::Contains("floating point"));
  CHECK_THROWS_WITH(layer_norm(x, {6}, ones({6}, TensorOptions(kInt32))), Catch::Contains("floating point"));
  CHECK_THROWS_WITH(layer_norm(Tensor(), {6}), Catch::Contains("undefined"));
}

namespace {
struct NormNetImpl : nn::Module {
  NormNetImpl() {
    fc = register_module("fc", nn::Linear(8, 8));
    ln = register_module("ln", nn::LayerNorm(nn::LayerNormOptions({8})));
    rn = register_module("rn", nn::RMSNorm(nn::RMSNormOptions({8})));
  }
  Tensor forward(const Tensor& x) { return rn(ln(fc(x))); }
  nn::Linear fc{nullptr};
  nn::LayerNorm ln{nullptr};
  nn::RMSNorm rn{nullptr};
};
MPX_MODULE(NormNet);
}  // namespace

TEST_CASE("amp O2 keeps LayerNorm and RMSNorm f32, as batch norms, and O3 casts them", "[row_norm][amp]") {
  for (const char* level : {"O2", "O3"}) {
    INFO(level);
    amp::reset();
    manual_seed(15);
    NormNet net;
    {
      NoGradGuard ng;
      net->rn->weight.uniform_(0.5, 1.5);
    }
    const Tensor rw = net->rn->weight.detach().clone();
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
    amp::initialize(net, opt, amp::Options().opt_level(level).verbosity(0));
    const bool o2 = std::string(level) == "O2";
    CHECK(net->fc->weight.dtype() == kFloat16);
    CHECK(net->ln->weight.dtype() == (o2 ? kFloat32 : kFloat16));
    CHECK(net->ln->bias.dtype() == (o2 ? kFloat32 : kFloat16));
    CHECK(net->rn->weight.dtype() == (o2 ? kFloat32 : kFloat16));
    if (o2) CHECK(testing::max_abs_diff(net->rn->weight, rw) == 0.0);
    Tensor y = net(seeded({3, 8}, 16).to(kFloat32));
    CHECK(y.dtype() == kFloat32);
    CHECK(std::isfinite(sum(y).item<double>()));
  }
  amp::reset();
}
