// Tests for interpolate, pixel_shuffle/unshuffle and the 1-d pools (ops/resize.h, nn/vision.h): PyTorch 2.15's values and
// gradients (tests/golden/resize.safetensors), the modules, autocast and errors.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <string>

#include "amp/autocast.h"
#include "core/serialize.h"
#include "gradcheck.h"
#include "nn/nn.h"
#include "test_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {

const TensorDict& golden() {
  static const TensorDict g = load_tensors(std::string(MPX_TEST_DATA) + "/golden/resize.safetensors");
  return g;
}

using Op = std::function<Tensor(const Tensor&)>;
// Each golden case as mpx spells it (gen_golden.py's gen_resize).
const std::map<std::string, Op>& cases() {
  using IO = nn::InterpolateFuncOptions;
  static const std::map<std::string, Op> c = {
      {"nearest_size", [](const Tensor& x) { return F::interpolate(x, IO().size(IntList{8, 11})); }},
      {"nearest_scale", [](const Tensor& x) { return F::interpolate(x, IO().scale_factor(std::vector<double>{2.0, 1.5})); }},
      {"nearest_down", [](const Tensor& x) { return F::interpolate(x, IO().size(IntList{3, 4})); }},
      {"nearest_exact", [](const Tensor& x) { return F::interpolate(x, IO().size(IntList{8, 4}).mode("nearest-exact")); }},
      {"bilinear",
       [](const Tensor& x) { return F::interpolate(x, IO().size(IntList{8, 11}).mode("bilinear").align_corners(false)); }},
      {"bilinear_ac",
       [](const Tensor& x) { return F::interpolate(x, IO().size(IntList{3, 13}).mode("bilinear").align_corners(true)); }},
      {"bilinear_scale",
       [](const Tensor& x) { return interpolate(x, {}, {1.7, 0.6}, "bilinear"); }},
      {"linear", [](const Tensor& x) { return interpolate(x, {14}, {}, "linear"); }},
      {"trilinear", [](const Tensor& x) { return interpolate(x, {}, {2.0}, "trilinear", true); }},
      {"nearest_1d_scale", [](const Tensor& x) { return interpolate(x, {}, {2.5}); }},
      {"pixel_shuffle", [](const Tensor& x) { return F::pixel_shuffle(x, 2); }},
      {"pixel_unshuffle", [](const Tensor& x) { return F::pixel_unshuffle(x, 2); }},
      {"max_pool1d", [](const Tensor& x) { return F::max_pool1d(x, nn::MaxPool1dOptions(3).stride(2).padding(1)); }},
      {"avg_pool1d",
       [](const Tensor& x) {
         return F::avg_pool1d(x, nn::AvgPool1dOptions(4).stride(2).padding(2).count_include_pad(false).ceil_mode(true));
       }},
      {"adaptive_avg_pool1d", [](const Tensor& x) { return F::adaptive_avg_pool1d(x, 4); }},
  };
  return c;
}

}  // namespace

TEST_CASE("interpolate, pixel_shuffle and the 1-d pools match PyTorch's values and gradients", "[resize][golden]") {
  const TensorDict& g = golden();
  for (const auto& [name, op] : cases()) {
    for (DType dt : {kFloat64, kFloat32}) {
      INFO(name << " in " << dtype_name(dt));
      Tensor x = g.at(name + ".x").to(dt).detach().clone().set_requires_grad(true);
      const Tensor y = op(x);
      const Tensor& want = g.at(name + ".y");
      REQUIRE(y.sizes() == want.sizes());
      const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
      CHECK(testing::max_abs_diff(y, want) < tol);
      sum(y * g.at(name + ".gy").to(dt)).backward();
      REQUIRE(x.grad().defined());
      CHECK(testing::max_abs_diff(x.grad(), g.at(name + ".gx")) < tol * 10);
    }
  }
}

TEST_CASE("Upsample, PixelShuffle and the 1-d pooling modules, interpolate in f32 under autocast, errors", "[resize]") {
  const TensorDict& g = golden();
  nn::Upsample up(nn::UpsampleOptions().size(IntList{8, 11}).mode("bilinear"));
  CHECK(testing::max_abs_diff(up(g.at("bilinear.x")), g.at("bilinear.y")) < 1e-12);
  CHECK(up->name() == "Upsample");
  nn::PixelShuffle ps(2);
  nn::PixelUnshuffle pu(2);
  const Tensor s = g.at("pixel_shuffle.x");
  CHECK(testing::max_abs_diff(pu(ps(s)), s) == 0.0);
  nn::MaxPool1d mp(nn::MaxPool1dOptions(3).stride(2).padding(1));
  CHECK(testing::max_abs_diff(mp(g.at("max_pool1d.x")), g.at("max_pool1d.y")) == 0.0);
  // Unbatched [C, L] input pools like a batch of one.
  CHECK(testing::max_abs_diff(mp(g.at("max_pool1d.x").select(0, 1)), g.at("max_pool1d.y").select(0, 1)) == 0.0);
  nn::AdaptiveAvgPool1d ap(4);
  CHECK(ap(g.at("adaptive_avg_pool1d.x")).sizes() == IntList{2, 3, 4});
  {
    amp::AutocastGuard ac(kBFloat16);
    CHECK(F::interpolate(g.at("bilinear.x").to(kBFloat16), nn::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0}))
              .dtype() == kFloat32);
  }
  const Tensor x = g.at("bilinear.x");
  // f32/f64 run on the CPU's resampling kernels; bf16 (no kernel here, as on devices without one) on gathers.
  for (const std::string mode : {"nearest", "bilinear"}) {
    INFO(mode);
    const Tensor ref = interpolate(x.to(kFloat32), {}, {1.7, 2.0}, mode);
    CHECK(testing::max_abs_diff(interpolate(x.to(kBFloat16), {}, {1.7, 2.0}, mode), ref) < 0.05);
    CHECK(testing::gradcheck([mode](const tensor_list& t) { return interpolate(t[0], {4, 3}, {}, mode); },
                             {testing::leaf({1, 2, 3, 5})}) == "");
    CHECK(testing::gradgradcheck([mode](const tensor_list& t) { return interpolate(t[0] * t[0], {}, {2.0}, mode); },
                                 {testing::leaf({1, 1, 2, 3})}) == "");
  }
  CHECK_THROWS_WITH(interpolate(x, {4, 4}, {2.0}), Catch::Contains("either size or scale_factor"));
  CHECK_THROWS_WITH(interpolate(x, {}, {}), Catch::Contains("either size or scale_factor"));
  CHECK_THROWS_WITH(interpolate(x, {4, 4, 4}), Catch::Contains("3 sizes or factors for 2 spatial dims"));
  CHECK_THROWS_WITH(interpolate(x, {4, 4}, {}, "linear"), Catch::Contains("needs 3-d input"));
  CHECK_THROWS_WITH(interpolate(x, {4, 4}, {}, "bicubic"), Catch::Contains("unknown mode \"bicubic\""));
  CHECK_THROWS_WITH(interpolate(x, {4, 4}, {}, "nearest", true), Catch::Contains("align_corners only applies"));
  CHECK_THROWS_WITH(interpolate(x, {}, {0.1}), Catch::Contains("both must be positive"));
  CHECK_THROWS_WITH(interpolate(x.select(0, 0).select(0, 0), {4}), Catch::Contains("[N, C, W]"));
  CHECK_THROWS_WITH(pixel_shuffle(ones({1, 3, 2, 2}), 2), Catch::Contains("C r^2"));
  CHECK_THROWS_WITH(pixel_unshuffle(ones({1, 1, 3, 2}), 2), Catch::Contains("H r, W r"));
  CHECK_THROWS_WITH(F::max_pool1d(x, nn::MaxPool1dOptions(2)), Catch::Contains("[N, C, L] or [C, L]"));
}
