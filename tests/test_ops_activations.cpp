// Tests for the activations users reach for beyond relu (gelu in both forms, silu, hardswish, prelu): PyTorch's values and gradients.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "ops/activation.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/formulas.h"
#include "test_util.h"

using namespace mpx;
using testing::gradcheck;
using testing::gradgradcheck;

namespace {

// The points PyTorch's formulas are evaluated at: both signs, the kinks' neighbourhoods and the tails.
const std::vector<double> kPoints = {-6.0, -3.5, -3.0, -2.5, -1.0, -0.3, 0.0, 0.2, 1.0, 2.9, 3.0, 4.0, 7.5};

// PyTorch's definitions, written out in f64 (torch.nn.functional docs).
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
double hardswish_ref(double x) { return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }

// Checks op against ref at kPoints in f64 (to 1e-12) and f32 (to 1e-6 relative).
void check_values(const std::function<Tensor(const Tensor&)>& op, const std::function<double(double)>& ref) {
  for (DType dt : {kFloat64, kFloat32}) {
    Tensor y = op(tensor(kPoints, {}, TensorOptions(kFloat64)).to(dt)).to(kFloat64);
    for (size_t i = 0; i < kPoints.size(); ++i) {
      const double want = ref(kPoints[i]);
      INFO(dtype_name(dt) << " x " << kPoints[i]);
      CHECK(std::abs(y.data_ptr<double>()[i] - want) <= (dt == kFloat64 ? 1e-12 : 1e-6) * (1.0 + std::abs(want)));
    }
  }
}

// First and second derivatives against finite differences, at points away from any kink.
void check_grads(const std::function<Tensor(const Tensor&)>& op) {
  Tensor x = tensor(std::vector<double>{-3.7, -2.2, -0.9, -0.1, 0.4, 1.3, 2.6, 4.1}, {}, TensorOptions(kFloat64));
  x.set_requires_grad(true);
  testing::Fn f = [op](const tensor_list& in) { return op(in[0]); };
  CHECK(gradcheck(f, {x}) == "");
  CHECK(gradgradcheck(f, {x}) == "");
}

}  // namespace

TEST_CASE("gelu matches PyTorch in both forms, with gradients", "[ops][activation]") {
  check_values([](const Tensor& x) { return gelu(x); }, gelu_ref);
  check_values([](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref);
  // torch.nn.functional.gelu(torch.tensor(1.0, dtype=torch.float64)) and approximate="tanh".
  CHECK(gelu(full({}, 1.0, kFloat64)).item<double>() == Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(gelu(full({}, 1.0, kFloat64), "tanh").item<double>() == Approx(0.8411919906082768).epsilon(1e-14));
  check_grads([](const Tensor& x) { return gelu(x); });
  check_grads([](const Tensor& x) { return gelu(x, "tanh"); });
  CHECK_THROWS_WITH(gelu(zeros({2}), "fast"), Catch::Contains("approximate"));
}

TEST_CASE("gelu's exact form in f32 over its whole range: f64's values, a negative tail that keeps its digits, PyTorch's at infinities",
          "[ops][activation]") {
  // Every 1e-5 from -13 (where e^{-x^2/2} leaves f32) to 12, against f64 on the same f32 inputs.
  const Tensor x = linspace(-13.0, 12.0, 2500001, TensorOptions(kFloat32));
  const Tensor y = gelu(x), dy = gelu_backward(ones_like(x), x, 0.0);
  const float *px = x.data_ptr<float>(), *py = y.data_ptr<float>(), *pd = dy.data_ptr<float>();
  double value_err = 0.0, tail_rel = 0.0, grad_err = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = px[i], cdf = 0.5 * std::erfc(-v / std::sqrt(2.0)), want = v * cdf;
    value_err = std::max(value_err, std::abs(py[i] - want));
    if (v < -4.0) tail_rel = std::max(tail_rel, std::abs(py[i] - want) / std::abs(want));
    grad_err = std::max(grad_err, std::abs(pd[i] - (cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI))));
  }
  // PyTorch 2.15's CPU GELU is within 3.8e-7 here; 0.5 x (1 + erf(x / sqrt 2)) in f32 loses every digit
  // below about -5.5, where 1 + erf cancels (torch gives 0 at -6, -5.9e-9 in f64).
  CHECK(value_err < 4.5e-7);
  CHECK(tail_rel < 1e-2);
  CHECK(grad_err < 3e-7);
  // PyTorch: gelu(-inf) = nan, gelu(inf) = inf, and both derivatives nan; 0 far below zero.
  const Tensor s = tensor(std::vector<double>{-INFINITY, INFINITY, NAN, -20.0}, {}, TensorOptions(kFloat64)).to(kFloat32);
  const Tensor gs = gelu(s), ds = gelu_backward(ones_like(s), s, 0.0);
  CHECK(std::isnan(gs.data_ptr<float>()[0]));
  CHECK(gs.data_ptr<float>()[1] == INFINITY);
  CHECK(std::isnan(gs.data_ptr<float>()[2]));
  CHECK(gs.data_ptr<float>()[3] == 0.0f);
  CHECK(std::isnan(ds.data_ptr<float>()[0]));
  CHECK(std::isnan(ds.data_ptr<float>()[1]));
  CHECK(ds.data_ptr<float>()[3] == 0.0f);
}

TEST_CASE("silu matches PyTorch, with gradients", "[ops][activation]") {
  check_values([](const Tensor& x) { return silu(x); }, silu_ref);
  check_grads([](const Tensor& x) { return silu(x); });
}

TEST_CASE("hardswish matches PyTorch, with gradients", "[ops][activation]") {
  check_values([](const Tensor& x) { return hardswish(x); }, hardswish_ref);
  // torch.nn.functional.hardswish at -1 and 4: -1/3 and 4.
  CHECK(hardswish(full({}, -1.0, kFloat64)).item<double>() == Approx(-1.0 / 3.0).epsilon(1e-15));
  CHECK(hardswish(full({}, 4.0, kFloat64)).item<double>() == 4.0);
  check_grads([](const Tensor& x) { return hardswish(x); });
  // PyTorch's gradient at the kinks: both take the middle branch, x / 3 + 1/2: -1/2 at -3, 3/2 at 3.
  Tensor k = tensor(std::vector<double>{-3.0, 3.0}, {}, TensorOptions(kFloat64));
  k.set_requires_grad(true);
  sum(hardswish(k)).backward();
  CHECK(k.grad().data_ptr<double>()[0] == Approx(-0.5));
  CHECK(k.grad().data_ptr<double>()[1] == Approx(1.5));
}

TEST_CASE("prelu matches PyTorch for one slope and a slope per channel, with gradients in both", "[ops][activation]") {
  Tensor x = tensor(std::vector<double>{-2, -0.5, 1, 3, -1, 0.25}, {1, 2, 3}, TensorOptions(kFloat64));
  CHECK(allclose(prelu(x, full({1}, 0.25, kFloat64)),
                 tensor(std::vector<double>{-0.5, -0.125, 1, 3, -0.25, 0.25}, {1, 2, 3}, TensorOptions(kFloat64))));
  Tensor w = tensor(std::vector<double>{0.1, 0.5}, {}, TensorOptions(kFloat64));
  CHECK(allclose(prelu(x, w), tensor(std::vector<double>{-0.2, -0.05, 1, 3, -0.5, 0.25}, {1, 2, 3}, TensorOptions(kFloat64))));
  Tensor xl = (x + 0.05).detach().set_requires_grad(true), wl = w.detach().set_requires_grad(true);
  CHECK(gradcheck([](const tensor_list& in) { return prelu(in[0], in[1]); }, {xl, wl}) == "");
  CHECK_THROWS_WITH(prelu(x, zeros({3}, kFloat64)), Catch::Contains("prelu"));
}

TEST_CASE("gelu_backward is gelu's derivative times grad in one kernel, and differentiable in both inputs", "[ops][activation]") {
  for (double form : {0.0, 1.0}) {
    INFO("form " << form);
    Tensor x = tensor(std::vector<double>{-3.7, -2.2, -0.9, -0.1, 0.4, 1.3, 2.6, 4.1}, {}, TensorOptions(kFloat64));
    Tensor g = tensor(std::vector<double>{0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 3.0, -2.0}, {}, TensorOptions(kFloat64));
    // The derivative by central differences of the f64 reference.
    const auto ref = form == 0.0 ? gelu_ref : gelu_tanh_ref;
    for (DType dt : {kFloat64, kFloat32}) {
      const Tensor got = gelu_backward(g.to(dt), x.to(dt), form).to(kFloat64);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double xi = x.data_ptr<double>()[i], h = 1e-5;
        const double want = g.data_ptr<double>()[i] * (ref(xi + h) - ref(xi - h)) / (2 * h);
        INFO(dtype_name(dt) << " x " << xi);
        CHECK(std::abs(got.data_ptr<double>()[i] - want) <= (dt == kFloat64 ? 1e-8 : 1e-5) * (1.0 + std::abs(want)));
      }
    }
    g.set_requires_grad(true);
    x.set_requires_grad(true);
    testing::Fn f = [form](const tensor_list& in) { return gelu_backward(in[0], in[1], form); };
    CHECK(gradcheck(f, {g, x}) == "");
  }
}

TEST_CASE("gelu, silu and hardswish keep the input dtype under autocast, as PyTorch's CUDA autocast lists do", "[ops][activation]") {
  // None is on PyTorch's fp32 list (exp, log, softplus, pow, ... are): they run as they come.
  CHECK(op_policy(OpId::gelu) == CastPolicy::none);
  CHECK(op_policy(OpId::silu) == CastPolicy::none);
  CHECK(op_policy(OpId::hardswish) == CastPolicy::none);
  CHECK(op_policy(OpId::prelu) == CastPolicy::lower);  // on PyTorch's lower-precision list
}

TEST_CASE("the host's branch-free f32 exp, tanh and erf stay within 3 ulp of the f64 functions", "[ops][activation]") {
  // They replace libm's scalar calls so that the loops over them vectorize (GELU, softmax, the RNN cells).
  auto ulps = [](float got, double want) {
    const float w = static_cast<float>(want);
    if (std::isinf(w)) return got == w ? 0.0 : 1e9;
    const double aw = std::abs(static_cast<double>(w));
    const double ulp = std::max(static_cast<double>(std::nextafter(std::abs(w), INFINITY)) - aw, std::ldexp(1.0, -149));
    return std::abs(static_cast<double>(got) - want) / ulp;
  };
  double worst_exp = 0, worst_tanh = 0, worst_erf = 0;
  std::vector<float> xs;
  for (double x = -12.0; x <= 12.0; x += 1.0 / 4096) xs.push_back(static_cast<float>(x));
  for (double x = 1e-30; x < 1.0; x *= 1.1) xs.push_back(static_cast<float>(x)), xs.push_back(static_cast<float>(-x));
  for (float x : xs) {
    worst_tanh = std::max(worst_tanh, ulps(formulas::tanh(x), std::tanh(static_cast<double>(x))));
    worst_erf = std::max(worst_erf, ulps(formulas::erf(x), std::erf(static_cast<double>(x))));
  }
  for (double x = -87.0; x <= 88.0; x += 1.0 / 1024)
    worst_exp = std::max(worst_exp, ulps(formulas::exp(static_cast<float>(x)), std::exp(static_cast<double>(static_cast<float>(x)))));
  INFO("exp " << worst_exp << " ulp, tanh " << worst_tanh << " ulp, erf " << worst_erf << " ulp");
  CHECK(worst_exp <= 3.0);
  CHECK(worst_tanh <= 3.0);
  CHECK(worst_erf <= 3.0);
  // Infinities and NaN pass as libm's do.
  CHECK(formulas::erf(INFINITY) == 1.0f);
  CHECK(formulas::erf(-INFINITY) == -1.0f);
  CHECK(std::isnan(formulas::erf(NAN)));
  CHECK(formulas::erf(0.0f) == 0.0f);
}
