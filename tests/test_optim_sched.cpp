// Tests for optim's learning-rate schedulers against PyTorch's: StepLR, MultiStepLR, cosine annealing, warmup, stacking, state dicts, argument checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "ops/elementwise.h"
#include "optim/optim.h"

using namespace mpx;
using namespace mpx::optim;

namespace {
Tensor leaf(const Tensor& t) {
  Tensor c = t.detach().clone();
  c.set_requires_grad(true);
  return c;
}
double lr0(const Optimizer& o) { return o.param_groups()[0].lr(); }
}  // namespace

TEST_CASE("StepLR and MultiStepLR follow PyTorch", "[optim][sched]") {
  Tensor p = leaf(ones({1}));
  SGD opt({p}, SGDOptions(1.0));
  StepLR s(opt, 3, 0.5);
  for (int e = 0; e <= 12; ++e) {
    if (e) s.step();
    INFO("epoch " << e);
    CHECK(s.last_epoch() == e);
    CHECK(lr0(opt) == Approx(std::pow(0.5, e / 3)).epsilon(1e-12));
    CHECK(s.get_last_lr()[0] == lr0(opt));
    CHECK(s.closed_form_lr(e)[0] == Approx(lr0(opt)).epsilon(1e-12));
  }

  SGD opt2({leaf(ones({1}))}, SGDOptions(0.2));
  MultiStepLR m(opt2, {5, 2, 5}, 0.1);  // unsorted; 5 twice -> gamma^2 there (PyTorch's Counter)
  const double expect[] = {0.2, 0.2, 0.02, 0.02, 0.02, 0.0002, 0.0002, 0.0002};
  for (int e = 0; e < 8; ++e) {
    if (e) m.step();
    INFO("epoch " << e);
    CHECK(lr0(opt2) == Approx(expect[e]).epsilon(1e-12));
    CHECK(m.closed_form_lr(e)[0] == Approx(expect[e]).epsilon(1e-12));
  }
}

TEST_CASE("CosineAnnealingLR follows PyTorch, including after T_max", "[optim][sched]") {
  std::vector<ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{leaf(ones({1}))});
  groups.emplace_back(std::vector<Tensor>{leaf(ones({1}))}, std::make_unique<SGDOptions>(SGDOptions(0.5)));
  SGD opt(groups, SGDOptions(1.0));
  const int T = 10;
  const double eta = 0.01;
  CosineAnnealingLR s(opt, T, eta);
  for (int e = 0; e <= 3 * T; ++e) {
    if (e) s.step();
    INFO("epoch " << e);
    for (int g = 0; g < 2; ++g) {
      const double base = g == 0 ? 1.0 : 0.5;
      const double expect = eta + (base - eta) * (1 + std::cos(std::numbers::pi * e / T)) / 2;
      CHECK(opt.param_groups()[g].lr() == Approx(expect).margin(1e-12));
    }
  }
}

TEST_CASE("LinearWarmup ramps up and hands over to a wrapped scheduler", "[optim][sched]") {
  SGD opt({leaf(ones({1}))}, SGDOptions(0.4));
  LinearWarmup w(opt, 5, 0.1);
  for (int e = 0; e <= 8; ++e) {
    if (e) w.step();
    INFO("epoch " << e);
    const double expect = 0.4 * (0.1 + 0.9 * std::min(e, 5) / 5.0);  // PyTorch LinearLR(0.1, 1.0, 5)
    CHECK(lr0(opt) == Approx(expect).epsilon(1e-12));
  }

  // Warm-up then cosine: SequentialLR([LinearLR(0.25, total_iters=4), CosineAnnealingLR(10)], [4]).
  SGD opt2({leaf(ones({1}))}, SGDOptions(1.0));
  LinearWarmup wc(opt2, 4, 0.25, std::make_unique<CosineAnnealingLR>(opt2, 10, 0.0));
  REQUIRE(wc.after() != nullptr);
  for (int e = 0; e <= 20; ++e) {
    if (e) wc.step();
    INFO("epoch " << e);
    const double expect = e < 4 ? 0.25 + 0.75 * e / 4.0 : (1 + std::cos(std::numbers::pi * (e - 4) / 10.0)) / 2;
    CHECK(lr0(opt2) == Approx(expect).margin(1e-12));
    CHECK(wc.get_last_lr()[0] == lr0(opt2));
    CHECK(wc.closed_form_lr(e)[0] == Approx(expect).margin(1e-12));
  }

  // Zero warm-up steps: the wrapped scheduler runs from the start.
  SGD opt3({leaf(ones({1}))}, SGDOptions(1.0));
  LinearWarmup w0(opt3, 0, 0.5, std::make_unique<StepLR>(opt3, 2, 0.1));
  const double seq[] = {1.0, 1.0, 0.1, 0.1, 0.01};
  for (int e = 0; e < 5; ++e) {
    if (e) w0.step();
    CHECK(lr0(opt3) == Approx(seq[e]).epsilon(1e-12));
  }
}

TEST_CASE("ExponentialLR and LambdaLR follow PyTorch (a linear warmup then decay, as transformers')",
          "[optim][sched]") {
  Tensor w = zeros({2}).set_requires_grad(true);
  optim::SGD sgd({w}, optim::SGDOptions(0.5));
  optim::ExponentialLR ex(sgd, 0.9);
  CHECK(ex.get_last_lr()[0] == Approx(0.5));
  for (int i = 1; i <= 5; ++i) {
    ex.step();
    CHECK(sgd.param_groups()[0].lr() == Approx(0.5 * std::pow(0.9, i)).epsilon(1e-12));
    CHECK(ex.closed_form_lr(i)[0] == Approx(0.5 * std::pow(0.9, i)).epsilon(1e-12));
  }
  Tensor v = zeros({2}).set_requires_grad(true);
  optim::AdamW adam({v}, optim::AdamWOptions(1e-3));
  // get_linear_schedule_with_warmup(warmup 4, total 10).
  auto f = [](int64_t step) { return step < 4 ? step / 4.0 : std::max(0.0, (10.0 - step) / 6.0); };
  optim::LambdaLR lam(adam, f);
  CHECK(adam.param_groups()[0].lr() == 0.0);
  for (int64_t i = 1; i <= 12; ++i) {
    lam.step();
    CHECK(adam.param_groups()[0].lr() == Approx(1e-3 * f(i)).margin(1e-15));
  }
  CHECK_THROWS_WITH(optim::LambdaLR(adam, [](int64_t) { return std::nan(""); }), Catch::Contains("finite factor"));
  CHECK_THROWS_WITH(optim::ExponentialLR(sgd, -1.0), Catch::Contains("gamma"));
}

TEST_CASE("schedulers stack multiplicatively on one optimizer", "[optim][sched]") {
  SGD opt({leaf(ones({1}))}, SGDOptions(1.0));
  StepLR a(opt, 2, 0.5);
  MultiStepLR b(opt, {3}, 0.1);
  for (int e = 0; e <= 7; ++e) {
    if (e) {
      a.step();
      b.step();
    }
    INFO("epoch " << e);
    CHECK(lr0(opt) == Approx(std::pow(0.5, e / 2) * (e >= 3 ? 0.1 : 1.0)).epsilon(1e-12));
  }
  CHECK(opt.param_groups()[0].initial_lr() == 1.0);
  CHECK(a.base_lrs()[0] == 1.0);
  CHECK(b.base_lrs()[0] == 1.0);
}

TEST_CASE("scheduler state dicts resume the sequence", "[optim][sched]") {
  auto run = [](int split) {
    SGD opt({leaf(ones({1}))}, SGDOptions(1.0));
    auto sched = std::make_unique<LinearWarmup>(opt, 3, 0.2, std::make_unique<MultiStepLR>(opt, std::vector<int64_t>{2, 4}, 0.5));
    std::vector<double> lrs;
    for (int e = 1; e <= 10; ++e) {
      if (e == split) {
        // Resume: optimizer state (holds the lr) + scheduler state into fresh objects.
        auto st = opt.state_dict();
        auto ss = sched->state_dict();
        auto opt2 = std::make_unique<SGD>(opt.parameters(), SGDOptions(9.0));
        opt2->load_state_dict(st);
        auto s2 = std::make_unique<LinearWarmup>(*opt2, 3, 0.2,
                                                 std::make_unique<MultiStepLR>(*opt2, std::vector<int64_t>{2, 4}, 0.5));
        s2->load_state_dict(ss);
        opt2->load_state_dict(st);  // the new scheduler's constructor touched the lr
        for (int k = split; k <= 10; ++k) {
          s2->step();
          lrs.push_back(lr0(*opt2));
        }
        return lrs;
      }
      sched->step();
      lrs.push_back(lr0(opt));
    }
    return lrs;
  };
  const auto full_run = run(100);
  for (int split : {2, 3, 5, 8}) {
    INFO("split at " << split);
    const auto resumed = run(split);
    REQUIRE(resumed.size() == full_run.size());
    for (size_t i = 0; i < full_run.size(); ++i) CHECK(resumed[i] == Approx(full_run[i]).epsilon(1e-15));
  }
  SGD opt({leaf(ones({1}))}, SGDOptions(1.0));
  StepLR s(opt, 2);
  CHECK_THROWS_WITH(s.load_state_dict({}), Catch::Contains("last_epoch"));
}

TEST_CASE("scheduler arguments are validated", "[optim][sched]") {
  SGD opt({leaf(ones({1}))}, SGDOptions(1.0));
  CHECK_THROWS_WITH(StepLR(opt, 0), Catch::Contains("step_size"));
  CHECK_THROWS_WITH(CosineAnnealingLR(opt, 0), Catch::Contains("T_max"));
  CHECK_THROWS_WITH(LinearWarmup(opt, 5, 0.0), Catch::Contains("start_factor"));
  CHECK_THROWS_WITH(LinearWarmup(opt, 5, 1.5), Catch::Contains("start_factor"));
  CHECK_THROWS_WITH(LinearWarmup(opt, -1, 0.5), Catch::Contains("warmup_steps"));
  SGD other({leaf(ones({1}))}, SGDOptions(1.0));
  CHECK_THROWS_WITH(LinearWarmup(opt, 2, 0.5, std::make_unique<StepLR>(other, 2)), Catch::Contains("same optimizer"));
}
