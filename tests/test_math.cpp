// Tests of the rounding, logarithmic, trigonometric, hyperbolic and division-like elementwise ops (ops/formulas_math.h):
// PyTorch 2.15's values, edge values and gradients (tests/golden/math.safetensors), integer division, lerp, logit,
// the Tensor methods, f16/bf16 rounding and autocast.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "amp/autocast.h"
#include "core/serialize.h"
#include "gradcheck.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "test_util.h"

using namespace mpx;

namespace {

const TensorDict& golden() {
  static const TensorDict g = load_tensors(mpx::testing::test_data_dir() + "/golden/math.safetensors");
  return g;
}

// Equal within rel (relative to 1 + |want|), NaN where want has NaN, and the same infinities.
bool close(const Tensor& got, const Tensor& want, double rel) {
  if (got.sizes() != want.sizes()) return false;
  const Tensor a = got.to(kFloat64).contiguous(), b = want.to(kFloat64).contiguous();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data_ptr<double>()[i], y = b.data_ptr<double>()[i];
    if (std::isnan(y) ? !std::isnan(x) : std::isinf(y) ? x != y : !(std::abs(x - y) <= rel * (1.0 + std::abs(y)))) {
      UNSCOPED_INFO("element " << i << ": " << x << ", want " << y);
      return false;
    }
  }
  return true;
}

using Unary = std::function<Tensor(const Tensor&)>;
const std::map<std::string, Unary>& unary_ops() {
  static const std::map<std::string, Unary> m = {
      {"floor", [](const Tensor& x) { return floor(x); }},   {"ceil", [](const Tensor& x) { return ceil(x); }},
      {"round", [](const Tensor& x) { return round(x); }},   {"trunc", [](const Tensor& x) { return trunc(x); }},
      {"frac", [](const Tensor& x) { return frac(x); }},     {"log1p", [](const Tensor& x) { return log1p(x); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }},   {"log2", [](const Tensor& x) { return log2(x); }},
      {"log10", [](const Tensor& x) { return log10(x); }},   {"exp2", [](const Tensor& x) { return exp2(x); }},
      {"tan", [](const Tensor& x) { return tan(x); }},       {"atan", [](const Tensor& x) { return atan(x); }},
      {"asin", [](const Tensor& x) { return asin(x); }},     {"acos", [](const Tensor& x) { return acos(x); }},
      {"sinh", [](const Tensor& x) { return sinh(x); }},     {"cosh", [](const Tensor& x) { return cosh(x); }},
      {"asinh", [](const Tensor& x) { return asinh(x); }},   {"acosh", [](const Tensor& x) { return acosh(x); }},
      {"atanh", [](const Tensor& x) { return atanh(x); }},   {"erfc", [](const Tensor& x) { return erfc(x); }},
      {"erfinv", [](const Tensor& x) { return erfinv(x); }},
  };
  return m;
}

using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
const std::map<std::string, Binary>& binary_ops() {
  static const std::map<std::string, Binary> m = {
      {"atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); }},
      {"hypot", [](const Tensor& a, const Tensor& b) { return hypot(a, b); }},
      {"logaddexp", [](const Tensor& a, const Tensor& b) { return logaddexp(a, b); }},
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }},
      {"floor_divide", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); }},
  };
  return m;
}

}  // namespace

TEST_CASE("unary math ops match PyTorch's values, edge values and gradients in f64 and f32", "[math][golden]") {
  const TensorDict& g = golden();
  for (const auto& [name, op] : unary_ops()) {
    INFO(name);
    Tensor x = g.at(name + ".x").detach().clone().set_requires_grad(true);
    const Tensor y = op(x);
    CHECK(close(y, g.at(name + ".y"), 1e-13));
    CHECK(close(op(g.at(name + ".edge_x")), g.at(name + ".edge_y"), 1e-13));
    // f32 in the C library's f32 functions: within a few ulps of PyTorch's vectorized ones.
    CHECK(close(op(g.at(name + ".x").to(kFloat32)), g.at(name + ".f32_y"), 2e-6));
    sum(y * g.at(name + ".gy")).backward();
    CHECK(close(x.grad(), g.at(name + ".gx"), 1e-12));
  }
}

TEST_CASE("binary math ops match PyTorch's values, edge values and broadcast gradients", "[math][golden]") {
  const TensorDict& g = golden();
  for (const auto& [name, op] : binary_ops()) {
    INFO(name);
    Tensor a = g.at(name + ".a").detach().clone().set_requires_grad(true);
    Tensor b = g.at(name + ".b").detach().clone().set_requires_grad(true);
    const Tensor y = op(a, b);
    CHECK(close(y, g.at(name + ".y"), 1e-13));
    CHECK(close(op(g.at("edge_a"), g.at("edge_b")), g.at(name + ".edge_y"), 1e-13));
    sum(y * g.at(name + ".gy")).backward();
    if (name == "floor_divide") {
      CHECK(max(abs(a.grad())).item<double>() == 0.0);  // zero, as PyTorch's
      continue;
    }
    CHECK(close(a.grad(), g.at(name + ".ga"), 1e-12));
    CHECK(close(b.grad(), g.at(name + ".gb"), 1e-12));
  }
}

TEST_CASE("integer fmod, remainder and floor_divide follow PyTorch's signs, refuse a zero divisor, and keep the "
          "dtype", "[math]") {
  const TensorDict& g = golden();
  const Tensor a = g.at("int_a"), b = g.at("int_b");
  CHECK(testing::same_values(fmod(a, b), g.at("int_fmod")));
  CHECK(testing::same_values(remainder(a, b), g.at("int_remainder")));
  CHECK(testing::same_values(floor_divide(a, b), g.at("int_floor_divide")));
  CHECK(testing::same_values(a.to(kInt32) % b.to(kInt32), g.at("int_remainder").to(kInt32)));
  CHECK(testing::same_values(arange(10) % 3.0, tensor<int64_t>({0, 1, 2, 0, 1, 2, 0, 1, 2, 0})));
  CHECK(testing::same_values(arange(-3, 4).floor_divide(2.0), tensor<int64_t>({-2, -1, -1, 0, 0, 1, 1})));
  // A fractional number makes the result floating, as PyTorch's wrapped scalars do.
  CHECK(fmod(arange(4), 1.5).dtype() == kFloat32);
  CHECK(atan2(arange(3), arange(3)).dtype() == kFloat32);
  CHECK_THROWS_WITH(remainder(a, zeros({8}, TensorOptions(kInt64))), Catch::Contains("integer division by zero"));
  CHECK_THROWS_WITH(floor_divide(a, 0.0), Catch::Contains("integer division by zero"));
  CHECK_THROWS_WITH(fmod(a, Tensor()), Catch::Contains("undefined"));
  // Floating division by zero is IEEE's, as PyTorch's.
  CHECK(std::isinf(floor_divide(ones({1}), 0.0).item<double>()));
  CHECK(std::isnan(fmod(ones({1}), 0.0).item<double>()));
}

TEST_CASE("f16 and bf16 math computes in f32 and rounds once, under autocast as PyTorch's lists say", "[math]") {
  const TensorDict& g = golden();
  for (DType dt : {kBFloat16, kFloat16}) {
    for (const auto& [name, op] : unary_ops()) {
      INFO(dtype_name(dt) << " " << name);
      const Tensor x = g.at(name + ".x").to(dt);
      const Tensor y = op(x);
      CHECK(y.dtype() == dt);
      CHECK(testing::same_values(y, op(x.to(kFloat32)).to(dt)));
    }
    for (const auto& [name, op] : binary_ops()) {
      INFO(dtype_name(dt) << " " << name);
      const Tensor a = g.at(name + ".a").to(dt), b = g.at(name + ".b").to(dt);
      CHECK(testing::same_values(op(a, b), op(a.to(kFloat32), b.to(kFloat32)).to(dt)));
    }
  }
  amp::AutocastGuard ac(kBFloat16);
  const Tensor x = full({3}, 0.5, TensorOptions(kBFloat16));
  for (const auto& name : {"log1p", "expm1", "log2", "log10", "tan", "asin", "acos", "sinh", "cosh", "erfinv"}) {
    INFO(name);
    CHECK(unary_ops().at(name)(x).dtype() == kFloat32);
  }
  for (const auto& name : {"floor", "round", "atan", "erfc", "exp2"}) {
    INFO(name);
    CHECK(unary_ops().at(name)(x).dtype() == kBFloat16);
  }
}

TEST_CASE("lerp and logit match PyTorch, lerp_ updates an EMA in place, the math Tensor methods", "[math][golden]") {
  const TensorDict& g = golden();
  const Tensor a = g.at("atan2.a"), b = g.at("atan2.b").expand({6, 5});
  CHECK(close(lerp(a, b, g.at("lerp.w")), g.at("lerp.y"), 1e-15));
  CHECK(close(lerp(a, b, 0.75), g.at("lerp.y_scalar"), 1e-15));
  CHECK(testing::same_values(lerp(a, b, 1.0), b.contiguous()));  // weight 1 gives the end exactly
  CHECK(close(logit(g.at("logit.x")), g.at("logit.y"), 1e-14));
  CHECK(close(logit(g.at("logit.x"), 1e-3), g.at("logit.y_eps"), 1e-14));
  CHECK(testing::gradcheck([](const tensor_list& t) { return lerp(t[0], t[1], t[2]); },
                           {testing::leaf({3, 4}), testing::leaf({4}), testing::leaf({3, 4})}) == "");
  // The EMA update of a parameter copy, in place, without recording.
  Tensor ema = zeros({4});
  const Tensor w = full({4}, 2.0);
  {
    NoGradGuard ng;
    for (int i = 0; i < 3; ++i) ema.lerp_(w, 1.0 - 0.9);
  }
  CHECK(ema.select(0, 0).item<double>() == Approx(2.0 * (1.0 - std::pow(0.9, 3))));
  // Methods forward to the free functions.
  const Tensor x = g.at("tan.x");
  CHECK(testing::same_values(x.tan(), tan(x)));
  CHECK(testing::same_values(x.floor(), floor(x)));
  CHECK(testing::same_values(x.erfc(), erfc(x)));
  CHECK(testing::same_values(x.square(), x * x));
  CHECK(testing::same_values(x.remainder(0.5), remainder(x, 0.5)));
  CHECK(testing::same_values(x.roll({2}), x.roll({2}, {0})));
  CHECK(x.unbind().size() == static_cast<size_t>(x.size(0)));
  CHECK(x.repeat_interleave(2).size(0) == 2 * x.size(0));
}

TEST_CASE("math ops' second derivatives (gradgradcheck)", "[math]") {
  for (const std::string name : {"log1p", "tan", "asin", "sinh", "erfinv", "atanh"}) {
    INFO(name);
    const Unary op = unary_ops().at(name);
    CHECK(testing::gradgradcheck([op](const tensor_list& t) { return op(t[0] * 0.3); }, {testing::leaf({5})}) == "");
  }
  CHECK(testing::gradgradcheck([](const tensor_list& t) { return atan2(t[0], t[1] + 4.0); },
                               {testing::leaf({5}), testing::leaf({5})}) == "");
  CHECK(testing::gradgradcheck([](const tensor_list& t) { return logaddexp(t[0], t[1]); },
                               {testing::leaf({5}), testing::leaf({5})}) == "");
}
