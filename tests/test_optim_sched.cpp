// Tests for optim's learning-rate schedulers against PyTorch's: StepLR, MultiStepLR, cosine annealing and warm restarts, warmup, constant, polynomial, 1cycle, plateau, stacking, state dicts, argument checks.
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

namespace {
// Steps `s` n - 1 times (after the construction's epoch 0) and checks every lr (and closed form) against PyTorch's.
template <typename S>
void follows(S& s, Optimizer& opt, const std::vector<double>& want) {
  for (size_t e = 0; e < want.size(); ++e) {
    if (e) s.step();
    INFO("epoch " << e);
    CHECK(lr0(opt) == Approx(want[e]).margin(1e-12));
    CHECK(s.closed_form_lr(static_cast<int64_t>(e))[0] == Approx(want[e]).margin(1e-12));
  }
}
}  // namespace

// The expected sequences below are PyTorch 2.15's, printed by stepping its schedulers on SGD(lr=0.5, momentum=0.9).
TEST_CASE("ConstantLR, PolynomialLR and CosineAnnealingWarmRestarts follow PyTorch", "[optim][sched]") {
  SGD a({leaf(ones({1}))}, SGDOptions(0.5).momentum(0.9));
  ConstantLR c(a, 0.25, 3);
  follows(c, a, {0.125, 0.125, 0.125, 0.5, 0.5, 0.5});
  SGD b({leaf(ones({1}))}, SGDOptions(0.5).momentum(0.9));
  PolynomialLR p(b, 4, 2.0);
  follows(p, b, {0.5, 0.28125, 0.125, 0.03125, 0.0, 0.0, 0.0});
  SGD d({leaf(ones({1}))}, SGDOptions(0.5).momentum(0.9));
  CosineAnnealingWarmRestarts w(d, 3, 2, 0.01);
  const std::vector<double> sgdr = {0.5, 0.3775, 0.13250000000000006, 0.5, 0.4671762239271875, 0.3775, 0.255,
                                    0.13250000000000006, 0.04282377607281252, 0.5, 0.4916518274408217,
                                    0.4671762239271875, 0.4282411613907041, 0.3775, 0.3184106660501176, 0.255};
  follows(w, d, sgdr);
  // Resumed mid-period from its state dict, a fresh scheduler goes on with the same rates.
  SGD e({leaf(ones({1}))}, SGDOptions(0.5));
  CosineAnnealingWarmRestarts w2(e, 3, 2, 0.01);
  w2.load_state_dict(w.state_dict());
  e.param_groups()[0].set_lr(lr0(d));
  w.step();
  w2.step();
  CHECK(lr0(e) == Approx(lr0(d)).margin(1e-12));
  w2.restart();
  CHECK(lr0(e) == Approx(0.5));
  CHECK_THROWS_WITH(CosineAnnealingWarmRestarts(e, 0), Catch::Contains("T_0"));
  CHECK_THROWS_WITH(ConstantLR(e, 1.5), Catch::Contains("factor"));
  CHECK_THROWS_WITH(PolynomialLR(e, 0), Catch::Contains("total_iters"));
  std::map<std::string, double> bare = w.state_dict();
  bare.erase("T_i");
  CHECK_THROWS_WITH(w2.load_state_dict(bare), Catch::Contains("T_i"));
}

TEST_CASE("OneCycleLR follows PyTorch: lr and momentum (SGD), three phases and linear (Adam's beta1)",
          "[optim][sched]") {
  SGD a({leaf(ones({1}))}, SGDOptions(0.5).momentum(0.9));
  OneCycleLR s(a, 0.1, 10);
  const std::vector<double> lr = {0.0040000000000000036, 0.052000000000000005, 0.1, 0.09504846320134738,
                                  0.0811745653949763, 0.06112620219362893, 0.03887419780637107, 0.0188258346050237,
                                  0.004951936798652629, 4e-07, 0.004951936798652624};
  const std::vector<double> m = {0.95, 0.8999999999999999, 0.85, 0.854951556604879, 0.8688255099070633,
                                 0.8888739533021842, 0.9111260466978157, 0.9311744900929366, 0.945048443395121, 0.95,
                                 0.945048443395121};
  for (size_t e = 0; e < lr.size(); ++e) {
    if (e) s.step();
    INFO("step " << e);
    CHECK(lr0(a) == Approx(lr[e]).margin(1e-12));
    CHECK(a.param_groups()[0].options().to_map().at("momentum") == Approx(m[e]).margin(1e-12));
  }
  // PyTorch allows total_steps steps after the first; one more is an error that changes nothing.
  CHECK_THROWS_WITH(s.step(), Catch::Contains("total_steps is 10"));
  CHECK(s.last_epoch() == 10);
  s.restart();
  CHECK(lr0(a) == Approx(lr[0]).margin(1e-12));
  CHECK(a.param_groups()[0].options().to_map().at("momentum") == Approx(0.95));

  Adam b({leaf(ones({1}))}, AdamOptions(0.5));
  OneCycleLR t(b, {0.2}, 12,
               OneCycleLROptions().pct_start(0.25).anneal_strategy("linear").three_phase(true).div_factor(10)
                   .final_div_factor(100));
  const std::vector<double> lr3 = {0.02, 0.11000000000000001, 0.2, 0.11, 0.01999999999999999, 0.017171428571428574,
                                   0.014342857142857143, 0.011514285714285715, 0.008685714285714286,
                                   0.005857142857142856, 0.003028571428571429, 0.0001999999999999988,
                                   -0.002628571428571428};
  const std::vector<double> b1 = {0.95, 0.8999999999999999, 0.85, 0.8999999999999999, 0.95};
  for (size_t e = 0; e < lr3.size(); ++e) {
    if (e) t.step();
    INFO("step " << e);
    CHECK(lr0(b) == Approx(lr3[e]).margin(1e-12));
    CHECK(t.closed_form_lr(static_cast<int64_t>(e))[0] == Approx(lr3[e]).margin(1e-12));
    CHECK(b.param_groups()[0].options().to_map().at("beta1") == Approx(e < b1.size() ? b1[e] : 0.95).margin(1e-12));
  }
  Adam c({leaf(ones({1}))}, AdamOptions(0.5));
  CHECK_THROWS_WITH(OneCycleLR(c, {0.1, 0.2}, 10), Catch::Contains("2 max_lrs for 1 param groups"));
  CHECK_THROWS_WITH(OneCycleLR(c, 0.1, 0), Catch::Contains("total_steps"));
  CHECK_THROWS_WITH(OneCycleLR(c, 0.1, 10, OneCycleLROptions().anneal_strategy("exp")), Catch::Contains("anneal_strategy"));
  // Without momentum cycling the optimizer's beta1 stays; a phase of no length sits at its end (no division by 0).
  OneCycleLR u(c, 0.1, 3, OneCycleLROptions().cycle_momentum(false).pct_start(0.2));
  CHECK(c.param_groups()[0].options().to_map().at("beta1") == 0.9);
  CHECK(std::isfinite(lr0(c)));
}

TEST_CASE("ReduceLROnPlateau follows PyTorch: patience, cooldown, floors, max mode with an absolute threshold",
          "[optim][sched]") {
  SGD a({leaf(ones({1}))}, SGDOptions(1.0));
  ReduceLROnPlateau s(a, ReduceLROnPlateauOptions().factor(0.5).patience(2).cooldown(1).min_lr({0.1}));
  const std::vector<double> metrics = {5, 4, 4, 4, 4, 3.9999, 4, 4, 4, 4, 4, 4, 4, 4, 1};
  const std::vector<double> want = {1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125};
  for (size_t i = 0; i < metrics.size(); ++i) {
    s.step(metrics[i]);
    INFO("step " << i);
    CHECK(lr0(a) == Approx(want[i]).margin(1e-15));
    CHECK(s.get_last_lr()[0] == lr0(a));
  }
  // The floor holds: more bad steps leave 0.1.
  for (int i = 0; i < 12; ++i) s.step(std::nan(""));
  CHECK(lr0(a) == Approx(0.1));
  CHECK(s.best() == 1.0);

  SGD b({leaf(ones({1}))}, SGDOptions(1.0));
  ReduceLROnPlateau t(b, ReduceLROnPlateauOptions().mode("max").factor(0.1).patience(1).threshold(0.5).threshold_mode("abs"));
  const std::vector<double> acc = {1, 1.4, 1.6, 1.7, 2.2, 2.2, 2.2, 3.0};
  const std::vector<double> want2 = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1, 0.1};
  for (size_t i = 0; i < acc.size(); ++i) {
    t.step(acc[i]);
    INFO("step " << i);
    CHECK(lr0(b) == Approx(want2[i]).margin(1e-15));
  }
  // A resumed scheduler carries the counters: one more bad step cuts again.
  t.step(3.1);
  SGD c({leaf(ones({1}))}, SGDOptions(0.1));
  ReduceLROnPlateau r(c, ReduceLROnPlateauOptions().mode("max").factor(0.1).patience(1).threshold(0.5).threshold_mode("abs"));
  r.load_state_dict(t.state_dict());
  CHECK(r.num_bad_epochs() == 1);
  r.step(3.2);
  CHECK(lr0(c) == Approx(0.01));
  CHECK_THROWS_WITH(ReduceLROnPlateau(c, ReduceLROnPlateauOptions().mode("lowest")), Catch::Contains("mode"));
  CHECK_THROWS_WITH(ReduceLROnPlateau(c, ReduceLROnPlateauOptions().factor(1.0)), Catch::Contains("factor"));
  CHECK_THROWS_WITH(ReduceLROnPlateau(c, ReduceLROnPlateauOptions().min_lr({0.1, 0.2})), Catch::Contains("min_lr"));
  CHECK_THROWS_WITH(r.load_state_dict({{"best", 1.0}}), Catch::Contains("last_epoch"));
}
