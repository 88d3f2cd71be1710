// Tests of ctc_loss (ops/ctc.h): values and logit gradients against PyTorch 2.15's, a brute-force sum over
// alignments, f64 gradchecks (second order too), the reductions, impossible alignments, autocast, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <vector>

#include "amp/autocast.h"
#include "nn/functional.h"
#include "nn/modules.h"
#include "ops/activation.h"
#include "ops/ctc.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "tests/gradcheck.h"
#include "test_util.h"

using namespace mpx;
using Catch::Contains;

namespace {
// The logits of PyTorch's reference run: 2 sin(0.7 t + 1.3 n + 0.5 c), [6, 3, 5].
Tensor reference_logits() {
  std::vector<double> v;
  for (int t = 0; t < 6; ++t)
    for (int n = 0; n < 3; ++n)
      for (int c = 0; c < 5; ++c) v.push_back(2.0 * std::sin(0.7 * t + 1.3 * n + 0.5 * c));
  return tensor(v, {6, 3, 5}).to(kFloat64);
}
std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(kFloat64).contiguous().cpu();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
Tensor i64(std::vector<int64_t> v, IntList shape) { return tensor(v, shape); }

// -log of the sum over every frame labelling that collapses (repeats merged, blanks dropped) to `label`.
double brute_force(const Tensor& lp, int64_t n, int64_t frames, const std::vector<int64_t>& label, int64_t blank) {
  const int64_t C = lp.size(2);
  const std::vector<double> v = values(lp.select(1, n));
  double total = 0;
  std::vector<int64_t> path(static_cast<size_t>(frames), 0);
  std::function<void(int64_t, double)> walk = [&](int64_t t, double logp) {
    if (t == frames) {
      std::vector<int64_t> out;
      int64_t prev = -1;
      for (int64_t c : path) {
        if (c != prev && c != blank) out.push_back(c);
        prev = c;
      }
      if (out == label) total += std::exp(logp);
      return;
    }
    for (int64_t c = 0; c < C; ++c) {
      path[static_cast<size_t>(t)] = c;
      walk(t + 1, logp + v[static_cast<size_t>(t * C + c)]);
    }
  };
  walk(0, 0.0);
  return -std::log(total);
}
}  // namespace

TEST_CASE("ctc_loss equals PyTorch's: per-sequence values, mean, logit gradients, concatenated targets, blank",
          "[loss][ctc]") {
  const Tensor logits = reference_logits().set_requires_grad(true);
  const Tensor lp = log_softmax(logits, 2);
  const Tensor targets = i64({1, 2, 2, 3, 1, 0, 0, 0, 0}, {3, 3});
  const std::vector<int64_t> il = {6, 4, 3}, tl = {3, 2, 0};
  const Tensor none = ctc_loss(lp, targets, il, tl, 0, Reduction::None);
  const std::vector<double> want = {5.918761537715327, 3.5072435095477363, 3.024271134889064};
  CHECK(none.dtype() == kFloat64);
  for (size_t n = 0; n < 3; ++n) CHECK(values(none)[n] == Approx(want[n]).epsilon(1e-12));
  CHECK(ctc_loss(lp, targets, il, tl).item<double>() == Approx(2.2502711340782358).epsilon(1e-12));
  sum(none * tensor(std::vector<double>{1.0, 2.0, 3.0}, {3}).to(kFloat64)).backward();
  const std::vector<double> g1 = {0.037840463569270684, -0.030149063483532947, -0.3064344014141423, 0.20369443690398112,
                                  0.09504856442442343, 0.12202647410768536, -0.15758974578097057, 0.23032114899537703,
                                  -0.23298822447266823, 0.03823034715057642, -1.5500915708482317, 0.5846604711320241,
                                  0.31811571361954066, 0.271081049476922, 0.37623433661974476};
  const std::vector<double> g5 = {0.03975483677124343, 0.17633447549679535, -0.5291616160745334, 0.11770000558958213,
                                  0.1953722982169125, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<double> got1 = values(logits.grad().select(0, 1)), got5 = values(logits.grad().select(0, 5));
  for (size_t k = 0; k < 15; ++k) {
    INFO("class entry " << k);
    CHECK(got1[k] == Approx(g1[k]).margin(1e-12));
    CHECK(got5[k] == Approx(g5[k]).margin(1e-12));
  }
  // Concatenated targets, another blank.
  const Tensor concat = ctc_loss(lp.detach(), i64({1, 2, 2, 3, 1}, {5}), il, tl, 4, Reduction::None);
  const std::vector<double> want4 = {9.718276332094817, 5.837893789392313, 6.436925387742222};
  for (size_t n = 0; n < 3; ++n) CHECK(values(concat)[n] == Approx(want4[n]).epsilon(1e-12));
  // One sequence ([T, C]) and the module and functional forms.
  const Tensor one = ctc_loss(lp.detach().select(1, 1), i64({3, 1}, {2}), std::vector<int64_t>{4},
                              std::vector<int64_t>{2}, 0, Reduction::Sum);
  CHECK(one.item<double>() == Approx(want[1]).epsilon(1e-12));
  nn::CTCLoss m(nn::CTCLossOptions().reduction(Reduction::Sum));
  CHECK(m(lp.detach(), targets, i64(il, {3}), i64(tl, {3})).item<double>() == Approx(want[0] + want[1] + want[2]));
}

TEST_CASE("ctc_loss equals a brute-force sum over alignments, and gradchecks in f64 (second order too)",
          "[loss][ctc][gradcheck]") {
  manual_seed(11);
  const Tensor lp = log_softmax(randn({5, 2, 3}).to(kFloat64), 2);
  const std::vector<std::vector<int64_t>> labels = {{1, 1}, {2, 1}};
  const Tensor none = ctc_loss(lp, i64({1, 1, 2, 1}, {2, 2}), std::vector<int64_t>{5, 4}, std::vector<int64_t>{2, 2}, 0,
                               Reduction::None);
  CHECK(values(none)[0] == Approx(brute_force(lp, 0, 5, labels[0], 0)).epsilon(1e-10));
  CHECK(values(none)[1] == Approx(brute_force(lp, 1, 4, labels[1], 0)).epsilon(1e-10));
  const tensor_list in = {testing::leaf({4, 2, 4})};
  auto f = [&](const tensor_list& v) {
    return ctc_loss(log_softmax(v[0], 2), i64({1, 3, 2, 0}, {2, 2}), std::vector<int64_t>{4, 3},
                    std::vector<int64_t>{2, 1}, 0, Reduction::None);
  };
  CHECK(testing::gradcheck(f, in) == "");
  CHECK(testing::gradgradcheck(f, in) == "");
  // Directly in the log-probabilities (the true derivative, not PyTorch's kernel's).
  auto g = [&](const tensor_list& v) {
    return ctc_loss(v[0], i64({2, 2}, {2}), std::vector<int64_t>{4, 4}, std::vector<int64_t>{1, 1}, 0, Reduction::Mean);
  };
  CHECK(testing::gradcheck(g, {testing::leaf({4, 2, 3}, 0.5, -1.5)}) == "");
}

TEST_CASE("ctc_loss: impossible alignments, zero_infinity, empty inputs, autocast, errors", "[loss][ctc]") {
  const Tensor lp = log_softmax(reference_logits(), 2).detach();
  const Tensor two_ones = i64({1, 1, 1, 1, 1, 1}, {3, 2});
  const std::vector<int64_t> il = {2, 3, 6}, tl = {2, 2, 2};
  const std::vector<double> inf = values(ctc_loss(lp, two_ones, il, tl, 0, Reduction::None));
  CHECK(std::isinf(inf[0]));
  CHECK(inf[1] == Approx(3.199422934352831).epsilon(1e-12));
  CHECK(inf[2] == Approx(9.9561798752469).epsilon(1e-12));
  const Tensor x = lp.clone().set_requires_grad(true);
  const Tensor z = ctc_loss(x, two_ones, il, tl, 0, Reduction::Sum, true);
  CHECK(z.item<double>() == Approx(3.199422934352831 + 9.9561798752469).epsilon(1e-12));
  z.backward();
  CHECK(testing::max_abs_diff(x.grad().select(1, 0), zeros({6, 5}).to(kFloat64)) == 0.0);
  CHECK(std::isfinite(sum(x.grad()).item<double>()));
  // No frames and no labels: probability 1; no frames and a label: impossible.
  const std::vector<double> empty = values(ctc_loss(lp, two_ones, std::vector<int64_t>{0, 0, 6},
                                                    std::vector<int64_t>{0, 1, 2}, 0, Reduction::None));
  CHECK(empty[0] == 0.0);
  CHECK(std::isinf(empty[1]));
  // Under autocast the loss is f32 from f16 or bf16 log-probabilities, close to the f64 value.
  {
    amp::AutocastGuard ac(kBFloat16);
    const Tensor r = ctc_loss(lp.to(kBFloat16), two_ones, il, tl, 0, Reduction::None, true);
    CHECK(r.dtype() == kFloat32);
    CHECK(values(r)[2] == Approx(9.9561798752469).epsilon(0.02));
  }
  CHECK(ctc_loss(lp.to(kFloat16), two_ones, il, tl, 0, Reduction::None, true).dtype() == kFloat32);
  CHECK_THROWS_WITH(ctc_loss(lp, two_ones, std::vector<int64_t>{7, 1, 1}, tl), Contains("outside [0, 6]"));
  CHECK_THROWS_WITH(ctc_loss(lp, i64({1, 0, 1, 1, 1, 1}, {3, 2}), il, tl), Contains("is the blank"));
  CHECK_THROWS_WITH(ctc_loss(lp, i64({1, 9, 1, 1, 1, 1}, {3, 2}), il, tl), Contains("not a class"));
  CHECK_THROWS_WITH(ctc_loss(lp, two_ones, std::vector<int64_t>{2, 3}, tl), Contains("one of each per sequence"));
  CHECK_THROWS_WITH(ctc_loss(lp, i64({1, 2, 3}, {3}), il, tl), Contains("sum to more than"));
  CHECK_THROWS_WITH(ctc_loss(lp, two_ones.to(kFloat32), il, tl), Contains("integer class indices"));
  CHECK_THROWS_WITH(ctc_loss(lp, two_ones, il, tl, 7), Contains("blank 7"));
}

TEST_CASE("ctc_loss: the CPU lattice kernels equal the tensor-op recursion, values and gradients, f32 and f64",
          "[loss][ctc]") {
  manual_seed(13);
  for (DType dt : {kFloat64, kFloat32}) {
    INFO(dtype_name(dt));
    const Tensor logits = randn({40, 5, 9}).to(dt);
    const Tensor targets = randint(1, 9, {5, 12});
    const std::vector<int64_t> il = {40, 33, 40, 12, 25}, tl = {12, 7, 0, 5, 11};
    auto run = [&](bool recursion) {
      if (recursion) setenv("MPX_CTC_RECURSION", "1", 1);
      const Tensor x = logits.clone().set_requires_grad(true);
      const Tensor l = ctc_loss(log_softmax(x, 2), targets, il, tl, 0, Reduction::None, true);
      sum(l * tensor(std::vector<double>{1, 2, 3, 4, 5}, {5}).to(dt)).backward();
      unsetenv("MPX_CTC_RECURSION");
      return std::make_pair(l.detach(), x.grad());
    };
    const auto [lk, gk] = run(false);
    const auto [lr, gr] = run(true);
    const double tol = dt == kFloat64 ? 1e-10 : 2e-4;
    CHECK(testing::max_abs_diff(lk, lr) < tol * 50);
    CHECK(testing::max_abs_diff(gk, gr) < tol);
    CHECK(std::isfinite(sum(gk).item<double>()));
  }
}

TEST_CASE("cuda ctc_loss matches the CPU, values and gradients", "[cuda][loss][ctc]") {
  if (!testing::cuda_ready()) return;
  manual_seed(12);
  const Tensor logits = randn({30, 4, 12});
  const Tensor targets = randint(1, 12, {4, 9});
  const Tensor il = i64({30, 25, 30, 18}, {4}), tl = i64({9, 5, 0, 7}, {4});
  const Tensor a = logits.clone().set_requires_grad(true), b = logits.to(Device::cuda()).set_requires_grad(true);
  const Tensor la = ctc_loss(log_softmax(a, 2), targets, il, tl), lb = ctc_loss(log_softmax(b, 2), targets.to(Device::cuda()), il, tl);
  CHECK(std::abs(la.item<double>() - lb.item<double>()) < 1e-4);
  la.backward();
  lb.backward();
  CHECK(testing::max_abs_diff(b.grad().cpu(), a.grad()) < 1e-4);
}
