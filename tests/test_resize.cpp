// Tests for interpolate, pixel_shuffle/unshuffle and the 1-d pools (ops/resize.h, nn/vision.h): PyTorch 2.15's values and
// gradients (tests/golden/resize.safetensors), the modules, autocast and errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "amp/autocast.h"
#include "core/serialize.h"
#include "gradcheck.h"
#include "nn/nn.h"
#include "ops/index.h"
#include "test_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {

const TensorDict& golden() {
  static const TensorDict g = load_tensors(mpx::testing::test_data_dir() + "/golden/resize.safetensors");
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

// interpolate along one dim written out with index_select, from PyTorch's coordinate rules in f64: the reference the
// kernels' one-pass forms are held to (its gradients come from index_select's backward).
Tensor ref_axis(const Tensor& x, int64_t dim, int64_t out, std::optional<double> factor, const std::string& mode, bool ac) {
  const int64_t in = x.size(dim);
  const bool linear = mode != "nearest" && mode != "nearest-exact";
  const double scale = linear && ac ? (out > 1 ? double(in - 1) / double(out - 1) : 0.0)
                       : factor      ? 1.0 / *factor
                                     : double(in) / double(out);
  std::vector<int64_t> lo(static_cast<size_t>(out)), hi(lo.size());
  std::vector<double> l1(lo.size());
  for (int64_t j = 0; j < out; ++j) {
    const size_t k = static_cast<size_t>(j);
    if (!linear) {
      const double src = mode == "nearest-exact" ? (double(j) + 0.5) * scale : double(j) * scale;
      lo[k] = hi[k] = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), in - 1);
      continue;
    }
    const double src = ac ? double(j) * scale : std::max(scale * (double(j) + 0.5) - 0.5, 0.0);
    lo[k] = std::min<int64_t>(static_cast<int64_t>(src), in - 1);
    hi[k] = lo[k] + (lo[k] < in - 1 ? 1 : 0);
    l1[k] = std::min(std::max(src - double(lo[k]), 0.0), 1.0);
  }
  const Tensor a = index_select(x, dim, tensor<int64_t>(lo, {out}));
  if (!linear) return a;
  IntList ws(static_cast<size_t>(x.dim()), 1);
  ws[static_cast<size_t>(dim)] = out;
  std::vector<double> w0(l1.size());
  for (size_t k = 0; k < l1.size(); ++k) w0[k] = 1.0 - l1[k];
  return a * tensor<double>(w0, ws) + index_select(x, dim, tensor<int64_t>(hi, {out})) * tensor<double>(l1, ws);
}

}  // namespace

TEST_CASE("interpolate's one-pass kernels equal the per-dim index_select definition, values and gradients",
          "[resize]") {
  struct Case {
    IntList shape, size;
    std::vector<double> factor;
    std::string mode;
    bool ac;
  };
  // Enough output rows for many parallel chunks, up and down along each dim, every mode.
  const std::vector<Case> cases = {
      {{4, 8, 40, 30}, {150, 70}, {}, "nearest", false},
      {{4, 8, 40, 30}, {13, 71}, {}, "nearest-exact", false},
      {{4, 8, 40, 30}, {}, {3.7, 0.45}, "nearest", false},
      {{4, 8, 40, 30}, {150, 70}, {}, "bilinear", false},
      {{4, 8, 40, 30}, {13, 71}, {}, "bilinear", true},
      {{4, 8, 40, 30}, {}, {0.3, 2.5}, "bilinear", false},
      {{4, 8, 40, 30}, {40, 61}, {}, "bilinear", false},  // H kept
      {{6, 5, 300}, {}, {1.9}, "linear", false},
      {{2, 3, 7, 9, 8}, {12, 4, 15}, {}, "trilinear", false},  // depth up: the plane pass first
      {{2, 3, 7, 9, 8}, {3, 20, 5}, {}, "trilinear", true},    // depth down: the depth pass first
      {{2, 3, 7, 9, 8}, {}, {0.6}, "nearest", false},
  };
  for (const Case& c : cases) {
    INFO(c.mode << " from " << shape_str(c.shape) << " to " << (c.size.empty() ? "factors" : shape_str(c.size))
                << " align_corners " << c.ac);
    manual_seed(3);
    Tensor x = randn(c.shape, TensorOptions(kFloat64)).set_requires_grad(true);
    Tensor xr = x.detach().clone().set_requires_grad(true);
    const bool linear = c.mode != "nearest" && c.mode != "nearest-exact";
    const Tensor y = interpolate(x, c.size, c.factor, c.mode, linear ? std::optional<bool>(c.ac) : std::nullopt);
    Tensor yr = xr;
    for (int64_t k = 0; k + 2 < x.dim(); ++k) {
      const size_t i = static_cast<size_t>(k);
      std::optional<double> f;
      int64_t out;
      if (c.size.empty()) {
        f = c.factor[c.factor.size() == 1 ? 0 : i];
        out = static_cast<int64_t>(std::floor(double(x.size(k + 2)) * *f));
      } else {
        out = c.size[i];
      }
      if (out != x.size(k + 2) || f) yr = ref_axis(yr, k + 2, out, f, c.mode, c.ac);
    }
    REQUIRE(y.sizes() == yr.sizes());
    CHECK(testing::max_abs_diff(y, yr) < 1e-12);
    const Tensor gy = randn(y.sizes(), TensorOptions(kFloat64));
    sum(y * gy).backward();
    sum(yr * gy).backward();
    CHECK(testing::max_abs_diff(x.grad(), xr.grad()) < 1e-12);
  }
}

TEST_CASE("interpolate in f16 and bf16 computes in f32 and rounds once, nearest copies inf and NaN", "[resize]") {
  for (DType dt : {kBFloat16, kFloat16}) {
    for (const std::string mode : {"nearest", "bilinear"}) {
      INFO(dtype_name(dt) << " " << mode);
      manual_seed(4);
      Tensor x = randn({2, 3, 9, 14}).to(dt).set_requires_grad(true);
      Tensor x32 = x.detach().to(kFloat32).set_requires_grad(true);
      const Tensor y = interpolate(x, {20, 5}, {}, mode);
      const Tensor y32 = interpolate(x32, {20, 5}, {}, mode);
      CHECK(y.dtype() == dt);
      CHECK(testing::same_values(y, y32.to(dt)));
      const Tensor gy = randn(y.sizes()).to(dt);
      sum(y * gy).backward();
      sum(y32 * gy.to(kFloat32)).backward();
      CHECK(testing::same_values(x.grad(), x32.grad().to(dt)));
    }
  }
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const Tensor special = tensor<double>({inf, -inf, nan, 1.0}, {1, 1, 2, 2});
  const Tensor up = interpolate(special, {}, {2.0}, "nearest");
  CHECK(testing::same_values(up.select(2, 0).select(0, 0).select(0, 0), tensor<double>({inf, inf, -inf, -inf})));
  CHECK(testing::same_values(up.select(2, 3).select(0, 0).select(0, 0), tensor<double>({nan, nan, 1.0, 1.0})));
}

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
  for (const std::string mode : {"nearest", "bilinear"}) {
    INFO(mode);
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
