// Tests for per-channel sums and means of NCHW and channels-last data (reduced in place): values against f64 loops, every dtype, any thread count.
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/random.h"
#include "amp/autocast.h"
#include "nn/functional.h"
#include "nn/modules.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/reduction.h"
#include "gradcheck.h"
#include "test_util.h"

using namespace mpx;

namespace {

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// The sum over every dim but those in [k0, k1) of a contiguous tensor, in f64 loops.
std::vector<double> channel_sums(const Tensor& x, int64_t k0, int64_t k1) {
  const Tensor d = x.to(kFloat64).contiguous();
  int64_t outer = 1, rows = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) (i < k0 ? outer : i < k1 ? rows : inner) *= x.size(i);
  std::vector<double> s(static_cast<size_t>(rows), 0.0);
  const double* p = d.data_ptr<double>();
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < inner; ++b) s[r] += p[(a * rows + r) * inner + b];
  return s;
}

}  // namespace

TEST_CASE("sum over N, H, W of NCHW and channels-last data equals f64 loops in every dtype, on any thread count",
          "[ops][reduction]") {
  manual_seed(11);
  const int saved = omp_get_max_threads();
  // Inner runs of 1 (a 1x1 feature map), 3, 49 and 784 take both of the kernel's loops.
  for (int64_t hw : {1, 3, 7, 28}) {
    const int64_t w = hw == 3 ? 1 : hw;
    Tensor base = randn({5, 37, hw, w}) * 3.0 + 0.5;
    for (DType dt : {kFloat32, kBFloat16, kFloat16, kFloat64})
    for (bool cl : {false, true}) {
      INFO("hw " << hw << " " << dtype_name(dt) << (cl ? " channels-last" : ""));
      // Channels-last: the sums run down the columns of its [N x H x W, C] memory, in place.
      const Tensor x = cl ? base.to(dt).contiguous(MemoryFormat::ChannelsLast) : base.to(dt);
      const std::vector<double> want = channel_sums(x, 1, 2);
      const double tol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-6 : 1e-2;
      std::vector<double> first;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        const Tensor s = sum(x, {0, 2, 3});
        REQUIRE(s.sizes() == IntList{37});
        CHECK(s.dtype() == dt);
        const std::vector<double> got = values(s);
        for (size_t c = 0; c < want.size(); ++c) CHECK(got[c] == Approx(want[c]).epsilon(tol).margin(tol));
        if (threads == 1) first = got;
        else CHECK(got == first);  // the same bits on any thread count
        const Tensor m = mean(x, {0, 2, 3}, true);
        REQUIRE(m.sizes() == IntList{1, 37, 1, 1});
        const std::vector<double> mv = values(m);
        const double n = static_cast<double>(5 * hw * w);
        for (size_t c = 0; c < want.size(); ++c) CHECK(mv[c] == Approx(want[c] / n).epsilon(tol).margin(tol));
      }
      omp_set_num_threads(saved);
    }
  }
}

TEST_CASE("sums keeping a run of middle dims, integer sums, and non-contiguous inputs agree with the copying path",
          "[ops][reduction]") {
  manual_seed(12);
  Tensor x = randn({4, 3, 5, 6, 2});
  // Kept dims 1..2: outer 4, rows 15, inner 12.
  const std::vector<double> want = channel_sums(x, 1, 3);
  const std::vector<double> got = values(sum(x, {0, 3, 4}));
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6).margin(1e-6));
  CHECK(sum(x, {0, 3, 4}, true).sizes() == IntList{1, 3, 5, 1, 1});
  // Integers sum exactly.
  Tensor xi = arange(4 * 3 * 5, TensorOptions(kInt64)).view({4, 3, 5});
  CHECK(sum(xi, {0, 2}).dtype() == kInt64);
  CHECK(values(sum(xi, {0, 2})) == channel_sums(xi, 1, 2));
  // A transposed (non-contiguous) input takes the copying path and gives the same sums.
  Tensor t = randn({6, 4, 5}).transpose(0, 2);  // [5, 4, 6]
  REQUIRE_FALSE(t.is_contiguous());
  const std::vector<double> tw = channel_sums(t.contiguous(), 1, 2), tg = values(sum(t, {0, 2}));
  for (size_t i = 0; i < tw.size(); ++i) CHECK(tg[i] == Approx(tw[i]).epsilon(1e-6).margin(1e-6));
  // Kept dims that are not adjacent (0 and 2) still reduce correctly.
  const Tensor nk = sum(x, {1, 3, 4});
  REQUIRE(nk.sizes() == IntList{4, 5});
  CHECK(nk.select(0, 2).select(0, 3).item<double>() ==
        Approx(x.select(0, 2).select(1, 3).sum().item<double>()).epsilon(1e-6));
}

TEST_CASE("cumsum equals f64 running sums along every dim, integers in i64, and its gradient is the reversed sum",
          "[reduction]") {
  manual_seed(3);
  const Tensor x64 = randn({3, 4, 5}, TensorOptions(kFloat64));
  const auto xv = values(x64);
  for (int64_t dim = 0; dim < 3; ++dim)
    for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
      INFO("dim " << dim << " " << dtype_name(dt));
      const Tensor x = x64.to(dt);
      const Tensor y = cumsum(x, dim);
      CHECK(y.dtype() == dt);
      // The reference from the rounded inputs, summed in f64 and rounded once, as the kernel.
      const auto rv = values(x);
      std::vector<double> ref(rv.size());
      const int64_t st[3] = {20, 5, 1};
      for (int64_t i = 0; i < 60; ++i) {
        const int64_t pos = (i / st[dim]) % x.size(dim);
        double acc = 0;
        for (int64_t k = 0; k <= pos; ++k) acc += rv[static_cast<size_t>(i - (pos - k) * st[dim])];
        ref[static_cast<size_t>(i)] = acc;
      }
      CHECK(testing::max_abs_diff(y, tensor<double>(ref).reshape({3, 4, 5}).to(dt).to(kFloat64)) == 0.0);
    }
  CHECK(testing::same_values(cumsum(x64.transpose(0, 2), 1), cumsum(x64, 1).transpose(0, 2)));
  CHECK(testing::same_values(cumsum(x64, -1), cumsum(x64, 2)));
  CHECK(testing::same_values(x64.cumsum(1), cumsum(x64, 1)));
  CHECK(testing::same_values(x64.logsumexp({1}, true), logsumexp(x64, {1}, true)));
  // Integers and bools sum in i64 (a mask's running count).
  const Tensor mask = tensor<int64_t>({1, 1, 0, 1, 0}).to(kBool);
  const Tensor counts = cumsum(mask, 0);
  CHECK(counts.dtype() == kInt64);
  CHECK(testing::same_values(counts, tensor<int64_t>({1, 2, 2, 3, 3})));
  CHECK(cumsum(tensor<int32_t>({2, 3}), 0).dtype() == kInt64);
  CHECK(cumsum(zeros({2, 0}), 1).sizes() == IntList{2, 0});
  CHECK(cumsum(full({}, 2.5), 0).item<double>() == 2.5);
  CHECK_THROWS_WITH(cumsum(x64, 3), Catch::Contains("cumsum: dim"));
  // The backward (a reversed running sum) and its own backward.
  CHECK(testing::gradcheck([](const tensor_list& t) { return cumsum(t[0], 1); }, {testing::leaf({3, 6})}) == "");
  CHECK(testing::gradgradcheck([](const tensor_list& t) { return cumsum(t[0], 0) * cumsum(t[0], 0); },
                               {testing::leaf({4, 2})}) == "");
  // Autocast runs it in f32, as PyTorch.
  amp::AutocastGuard ac(kBFloat16);
  CHECK(cumsum(x64.to(kBFloat16), 0).dtype() == kFloat32);
}

TEST_CASE("var_mean and std_mean: var, std and mean over dims, keepdim, unbiased or not, gradients, one dtype under "
          "autocast", "[reduction]") {
  manual_seed(6);
  const Tensor x = randn({4, 5, 6}, TensorOptions(kFloat64));
  for (bool unbiased : {true, false})
    for (bool keepdim : {false, true})
      for (const IntList& dims : {IntList{1}, IntList{0, 2}, IntList{}}) {
        INFO("unbiased " << unbiased << " keepdim " << keepdim << " dims " << shape_str(dims));
        const auto [v, m] = var_mean(x, dims, unbiased, keepdim);
        const auto [s, m2] = std_mean(x, dims, unbiased, keepdim);
        CHECK(testing::max_abs_diff(v, var(x, dims, unbiased, keepdim)) < 1e-14);
        CHECK(testing::max_abs_diff(s, sqrt(var(x, dims, unbiased, keepdim))) < 1e-14);
        CHECK(testing::max_abs_diff(m, mean(x, dims, keepdim)) < 1e-14);
        CHECK(testing::same_values(m, m2));
      }
  CHECK(testing::gradcheck(
            [](const tensor_list& t) {
              auto [v, m] = var_mean(t[0], {1});
              return v + m * m;
            },
            {testing::leaf({3, 5})}) == "");
  CHECK(testing::gradcheck(
            [](const tensor_list& t) {
              auto [s, m] = std_mean(t[0], {0}, false);
              return s * m;
            },
            {testing::leaf({4, 3})}) == "");
  amp::AutocastGuard ac(kBFloat16);
  const auto [v, m] = var_mean(x.to(kBFloat16), {1});
  CHECK(v.dtype() == kFloat32);
  CHECK(m.dtype() == kFloat32);
}

TEST_CASE("logsumexp: no overflow, -inf and +inf slices as PyTorch, several dims, its gradient is softmax",
          "[reduction]") {
  manual_seed(4);
  const Tensor x = randn({3, 4, 5}, TensorOptions(kFloat64));
  CHECK(testing::max_abs_diff(logsumexp(x, {1}), log(sum(exp(x), {1}))) < 1e-14);
  CHECK(testing::max_abs_diff(logsumexp(x, {0, 2}, true), log(sum(exp(x), {0, 2}, true))) < 1e-14);
  CHECK(logsumexp(x, {}).dim() == 0);
  // 1000 + log(sum(exp(x))) where exp(1000 + x) overflows.
  CHECK(testing::max_abs_diff(logsumexp(x + 1000.0, {2}), logsumexp(x, {2}) + 1000.0) < 1e-10);
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor edge = tensor<double>({-inf, -inf, inf, 1.0, 2.0, 3.0}).reshape({3, 2});
  const auto r = values(logsumexp(edge, {1}));
  CHECK(r[0] == -inf);
  CHECK(r[1] == inf);
  CHECK(std::abs(r[2] - std::log(std::exp(2.0) + std::exp(3.0))) < 1e-14);
  CHECK(logsumexp(tensor<int64_t>({1, 2}), {0}).dtype() == kFloat32);
  CHECK(testing::gradcheck([](const tensor_list& t) { return logsumexp(t[0], {1}); }, {testing::leaf({3, 5})}) == "");
  amp::AutocastGuard ac(kBFloat16);
  CHECK(logsumexp(x.to(kBFloat16), {1}).dtype() == kFloat32);
}

TEST_CASE("vector_norm, F::normalize and cosine_similarity as PyTorch's formulas, in f32 under autocast",
          "[reduction]") {
  namespace F = mpx::nn::functional;
  manual_seed(5);
  const Tensor x = randn({3, 4}, TensorOptions(kFloat64));
  CHECK(testing::max_abs_diff(vector_norm(x, 2.0, {1}), sqrt(sum(x * x, {1}))) < 1e-14);
  CHECK(testing::max_abs_diff(vector_norm(x, 1.0, {}), sum(abs(x))) < 1e-14);
  CHECK(testing::max_abs_diff(vector_norm(x, std::numeric_limits<double>::infinity(), {0}), amax(abs(x), {0})) == 0.0);
  CHECK(testing::max_abs_diff(vector_norm(x, 3.0, {1}), pow(sum(pow(abs(x), 3.0), {1}), 1.0 / 3.0)) < 1e-14);
  const Tensor n = F::normalize(x);
  CHECK(testing::max_abs_diff(vector_norm(n, 2.0, {1}), ones({3}, kFloat64)) < 1e-15);
  CHECK(testing::max_abs_diff(F::normalize(zeros({2, 3})), zeros({2, 3})) == 0.0);  // eps: no division by zero
  const Tensor y = randn({3, 4}, TensorOptions(kFloat64));
  const Tensor cs = F::cosine_similarity(x, y);
  CHECK(testing::max_abs_diff(cs, sum(x * y, {1}) / (vector_norm(x, 2.0, {1}) * vector_norm(y, 2.0, {1}))) < 1e-14);
  CHECK(cosine_similarity(x, x.select(0, 0).unsqueeze(0), 1).sizes() == IntList{3});  // broadcast rows
  CHECK(testing::gradcheck([](const tensor_list& t) { return F::cosine_similarity(t[0], t[1]); },
                           {testing::leaf({3, 4}), testing::leaf({3, 4})}) == "");
  CHECK(testing::gradcheck([](const tensor_list& t) { return F::normalize(t[0], F::NormalizeFuncOptions().dim(0)); },
                           {testing::leaf({3, 4})}) == "");
  CHECK_THROWS_WITH(vector_norm(x, 0.5, {1}), Catch::Contains("ord must be at least 1"));
  amp::AutocastGuard ac(kBFloat16);
  CHECK(F::normalize(x.to(kBFloat16)).dtype() == kFloat32);
  CHECK(F::cosine_similarity(x.to(kBFloat16), y.to(kBFloat16)).dtype() == kFloat32);
}

TEST_CASE("norm and vector_norm(2) sum squares in one pass: values, gradients, f16 without overflow, zero and empty",
          "[reduction]") {
  manual_seed(7);
  const Tensor x = randn({5, 70001}, TensorOptions(kFloat64));  // rows longer than a parallel chunk
  const double ref = std::sqrt(sum(x * x).item<double>());
  CHECK(std::abs(norm(x).item<double>() - ref) < 1e-12 * ref);
  CHECK(testing::max_abs_diff(vector_norm(x, 2.0, {1}, true), sqrt(sum(x * x, {1}, true))) < 1e-12);
  CHECK(std::abs(norm(x.to(kFloat32)).item<double>() - ref) < 1e-6 * ref);
  // f16 values whose squares (and their sum) overflow f16: the squares are summed in f32.
  const Tensor big = full({1000}, 300.0, kFloat16);
  CHECK(norm(big).dtype() == kFloat16);
  CHECK(std::abs(norm(big).item<double>() - 300.0 * std::sqrt(1000.0)) < 10.0);
  CHECK(std::abs(vector_norm(full({4, 3}, 1000.0, kBFloat16), 2.0, {0}).to(kFloat64).select(0, 1).item<double>() - 2000.0) < 10.0);
  // Gradients: x / norm (first and second order); 0 at a zero norm (PyTorch's subgradient); empty: 0.
  CHECK(testing::gradcheck([](const tensor_list& t) { return norm(t[0]); }, {testing::leaf({3, 5})}) == "");
  CHECK(testing::gradcheck([](const tensor_list& t) { return vector_norm(t[0], 2.0, {0}); }, {testing::leaf({3, 5})}) == "");
  CHECK(testing::gradgradcheck([](const tensor_list& t) { return norm(t[0]); }, {testing::leaf({2, 3})}) == "");
  Tensor z = zeros({4}, TensorOptions(kFloat64)).set_requires_grad(true);
  norm(z).backward();
  CHECK(testing::max_abs_diff(z.grad(), zeros({4}, TensorOptions(kFloat64))) == 0.0);
  CHECK(norm(zeros({0, 3})).item<double>() == 0.0);
  CHECK(norm(tensor<int64_t>({3, 4})).item<double>() == 5.0);
}

TEST_CASE("kl_div: xlogy at zero targets, log_target, the four reductions, KLDivLoss", "[reduction][loss]") {
  namespace F = mpx::nn::functional;
  const Tensor logp = log_softmax(tensor<double>({1.0, 2.0, 0.5, -1.0, 0.0, 3.0}).reshape({2, 3}), 1);
  const Tensor q = tensor<double>({0.2, 0.8, 0.0, 0.5, 0.25, 0.25}).reshape({2, 3});
  const auto lp = values(logp), qv = values(q);
  std::vector<double> ref(6);
  double total = 0;
  for (size_t i = 0; i < 6; ++i) total += ref[i] = qv[i] > 0 ? qv[i] * (std::log(qv[i]) - lp[i]) : 0.0;
  CHECK(testing::max_abs_diff(kl_div(logp, q, "none"), tensor<double>(ref).reshape({2, 3})) < 1e-15);
  CHECK(std::abs(kl_div(logp, q, "sum").item<double>() - total) < 1e-15);
  CHECK(std::abs(kl_div(logp, q).item<double>() - total / 6) < 1e-15);
  CHECK(std::abs(F::kl_div(logp, q, F::KLDivFuncOptions("batchmean")).item<double>() - total / 2) < 1e-15);
  const Tensor logq = log(q + 1e-300);
  CHECK(std::abs(F::kl_div(logp, logq, F::KLDivFuncOptions("sum").log_target(true)).item<double>() - total) < 1e-12);
  nn::KLDivLoss crit(nn::KLDivLossOptions("batchmean"));
  CHECK(std::abs(crit(logp, q).item<double>() - total / 2) < 1e-15);
  // The gradient with respect to the log-probabilities is -target (no NaN from the zero target).
  const Tensor lp_leaf = logp.detach().set_requires_grad(true);
  kl_div(lp_leaf, q, "sum").backward();
  CHECK(testing::max_abs_diff(lp_leaf.grad(), -q) == 0.0);
  CHECK_THROWS_WITH(kl_div(logp, q, "average"), Catch::Contains("batchmean"));
}
