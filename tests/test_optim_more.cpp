// Tests for RMSprop and Adagrad: PyTorch's three-step golden values, masters and amp's skipped steps, no-master
// (apex O3) and stochastically rounded steps, state names and option errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>

#include "amp/grad_scaler.h"
#include "core/random.h"
#include "core/serialize.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "optim/optim.h"

using namespace mpx;
using namespace mpx::optim;

namespace {

using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

Tensor leaf(const Tensor& t) {
  Tensor c = t.detach().clone();
  c.set_requires_grad(true);
  return c;
}
double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return max(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
}

// The options each golden case was generated with (tests/golden/gen_golden.py, gen_optim_more).
std::unique_ptr<Optimizer> make_golden(const std::string& c, std::vector<Tensor> ps) {
  if (c == "rmsprop")
    return std::make_unique<RMSprop>(ps, RMSpropOptions(1e-2).alpha(0.99).eps(1e-8).weight_decay(1e-2));
  if (c == "rmsprop_centered")
    return std::make_unique<RMSprop>(ps, RMSpropOptions(1e-2).alpha(0.9).eps(1e-6).centered(true));
  if (c == "rmsprop_momentum")
    return std::make_unique<RMSprop>(
        ps, RMSpropOptions(1e-2).alpha(0.9).eps(1e-6).weight_decay(1e-3).momentum(0.9).centered(true));
  return std::make_unique<Adagrad>(
      ps, AdagradOptions(0.1).lr_decay(0.01).weight_decay(1e-2).initial_accumulator_value(0.1).eps(1e-10));
}

// A gradient sequence for a [6, 5] and a [7] parameter.
std::vector<std::pair<Tensor, Tensor>> grads(int n, uint64_t seed, double scale = 1.0) {
  manual_seed(seed);
  std::vector<std::pair<Tensor, Tensor>> g;
  for (int i = 0; i < n; ++i) g.emplace_back(randn({6, 5}) * scale, randn({7}) * scale);
  return g;
}

}  // namespace

TEST_CASE("RMSprop and Adagrad match PyTorch's three-step golden values", "[optim][golden]") {
  Metadata meta;
  const TensorDict g = load_tensors(std::string(MPX_TEST_DATA) + "/golden/optim_more.safetensors", &meta);
  CHECK_THAT(meta.at("rmsprop_momentum"), Catch::Contains("\"momentum\": 0.9") && Catch::Contains("\"centered\": true"));
  CHECK_THAT(meta.at("adagrad"), Catch::Contains("\"lr_decay\": 0.01") &&
                                     Catch::Contains("\"initial_accumulator_value\": 0.1"));
  for (const std::string c : {"rmsprop", "rmsprop_centered", "rmsprop_momentum", "adagrad"}) {
    for (DType dt : {kFloat64, kFloat32}) {
      INFO(c << " in " << dtype_name(dt));
      Tensor p = leaf(g.at(c + ".p0").to(dt)), q = leaf(g.at(c + ".q0").to(dt));
      auto opt = make_golden(c, {p, q});
      for (int s = 1; s <= 3; ++s) {
        p.set_grad(g.at(c + ".g" + std::to_string(s) + "_p").to(dt));
        q.set_grad(g.at(c + ".g" + std::to_string(s) + "_q").to(dt));
        opt->step();
      }
      const double tol = dt == kFloat64 ? 1e-12 : 5e-6;
      CHECK(max_abs_diff(p, g.at(c + ".p3")) < tol);
      CHECK(max_abs_diff(q, g.at(c + ".q3")) < tol);
    }
  }
}

TEST_CASE("RMSprop and Adagrad keep PyTorch's state names", "[optim]") {
  Tensor p = leaf(ones({3}));
  p.set_grad(ones({3}));
  RMSprop plain({p});
  plain.step();
  auto names = [](const Optimizer& o) {
    std::vector<std::string> n;
    for (const auto& [k, t] : o.state_dict().tensors)
      if (k.rfind("state.0.", 0) == 0) n.push_back(k.substr(8));
    return n;
  };
  CHECK(names(plain) == std::vector<std::string>{"square_avg"});
  RMSprop centered({p}, RMSpropOptions().centered(true));
  centered.step();
  CHECK(names(centered) == std::vector<std::string>{"grad_avg", "square_avg"});
  RMSprop both({p}, RMSpropOptions().centered(true).momentum(0.9));
  both.step();
  CHECK(names(both) == std::vector<std::string>{"grad_avg", "momentum_buffer", "square_avg"});
  Adagrad ada({p}, AdagradOptions().initial_accumulator_value(2.0));
  ada.step();
  CHECK(names(ada) == std::vector<std::string>{"sum"});
  // The sum starts at initial_accumulator_value: 2 + 1^2.
  CHECK(ada.state_dict().tensors.at("state.0.sum").to(kFloat64).data_ptr<double>()[0] == 3.0);
  CHECK(ada.state_dict().scalars.at("param_groups.0.initial_accumulator_value") == 2.0);
  CHECK(both.state_dict().optimizer == "RMSprop");
}

TEST_CASE("RMSprop and Adagrad options are validated", "[optim]") {
  Tensor p = leaf(ones({2}));
  CHECK_THROWS_WITH(RMSprop({p}, RMSpropOptions(-1)), Catch::Contains("RMSprop: invalid learning rate"));
  CHECK_THROWS_WITH(RMSprop({p}, RMSpropOptions().alpha(-0.5)), Catch::Contains("invalid alpha"));
  CHECK_THROWS_WITH(RMSprop({p}, RMSpropOptions().momentum(-1)), Catch::Contains("invalid momentum"));
  CHECK_THROWS_WITH(RMSprop({p}, RMSpropOptions().eps(NAN)), Catch::Contains("invalid eps"));
  CHECK_THROWS_WITH(Adagrad({p}, AdagradOptions().lr_decay(-1)), Catch::Contains("Adagrad: invalid lr_decay"));
  CHECK_THROWS_WITH(Adagrad({p}, AdagradOptions().initial_accumulator_value(-1)),
                    Catch::Contains("invalid initial_accumulator_value"));
  CHECK_THROWS_WITH(Adagrad({p}, AdagradOptions().weight_decay(-1)), Catch::Contains("invalid weight_decay"));
  Adagrad ada({p});
  p.set_grad(ones({2}));
  ada.step();
  CHECK_THROWS_WITH(RMSprop({p}).load_state_dict(ada.state_dict()), Catch::Contains("saved by Adagrad"));
}

TEST_CASE("RMSprop and Adagrad on f16/bf16 parameters step their f32 masters like f32 parameters", "[optim][amp]") {
  const std::vector<Make> makes = {
      [](std::vector<Tensor> ps) { return std::make_unique<RMSprop>(ps, RMSpropOptions(1e-3).momentum(0.9)); },
      [](std::vector<Tensor> ps) { return std::make_unique<Adagrad>(ps, AdagradOptions(1e-2).lr_decay(0.1)); }};
  for (DType dt : {kFloat16, kBFloat16}) {
    for (size_t k = 0; k < makes.size(); ++k) {
      INFO(dtype_name(dt) << " optimizer " << k);
      manual_seed(3);
      const Tensor w0 = randn({6, 5}).to(dt), b0 = randn({7}).to(dt);
      Tensor w = leaf(w0), b = leaf(b0);
      Tensor wf = leaf(w0.to(kFloat32)), bf = leaf(b0.to(kFloat32));
      auto lo = makes[k]({w, b});
      auto hi = makes[k]({wf, bf});
      for (const auto& [gw, gb] : grads(4, 11)) {
        w.set_grad(gw.to(dt));
        b.set_grad(gb.to(dt));
        wf.set_grad(gw.to(dt).to(kFloat32));
        bf.set_grad(gb.to(dt).to(kFloat32));
        lo->step();
        hi->step();
      }
      // The master follows the f32 run exactly; the model is it rounded once.
      CHECK(max_abs_diff(lo->master(w), wf) == 0.0);
      CHECK(max_abs_diff(lo->master(b), bf) == 0.0);
      CHECK(max_abs_diff(w, wf.to(dt)) == 0.0);
      CHECK(lo->state(w).buffers.at(k == 0 ? "square_avg" : "sum").dtype() == kFloat32);
    }
  }
}

TEST_CASE("a step GradScaler skips leaves RMSprop and Adagrad untouched, Adagrad's start value included", "[optim][amp]") {
  const std::vector<Make> makes = {
      [](std::vector<Tensor> ps) {
        return std::make_unique<RMSprop>(ps, RMSpropOptions(1e-2).momentum(0.9).centered(true));
      },
      [](std::vector<Tensor> ps) {
        return std::make_unique<Adagrad>(ps, AdagradOptions(1e-1).lr_decay(0.5).initial_accumulator_value(0.25));
      }};
  for (size_t k = 0; k < makes.size(); ++k) {
    INFO("optimizer " << k);
    manual_seed(4);
    const Tensor w0 = randn({6, 5}), b0 = randn({7});
    const auto gs = grads(3, 12);
    // Reference: three plain steps.
    Tensor w = leaf(w0), b = leaf(b0);
    auto ref = makes[k]({w, b});
    for (const auto& [gw, gb] : gs) {
      w.set_grad(gw.clone());
      b.set_grad(gb.clone());
      ref->step();
    }
    // With a scaler whose first step overflows: that step is skipped, then the same three steps.
    Tensor ws = leaf(w0), bs = leaf(b0);
    auto opt = makes[k]({ws, bs});
    amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0));
    ws.set_grad(full({6, 5}, INFINITY));
    bs.set_grad(zeros({7}));
    CHECK_FALSE(static_cast<bool>(scaler.step(*opt)));
    scaler.update();
    for (const auto& [gw, gb] : gs) {
      const double s = scaler.get_scale();
      ws.set_grad(gw * s);
      bs.set_grad(gb * s);
      CHECK(static_cast<bool>(scaler.step(*opt)));
      scaler.update();
    }
    CHECK(opt->step_count(ws) == 3);
    CHECK(max_abs_diff(ws, w) < 1e-6);
    CHECK(max_abs_diff(bs, b) < 1e-6);
  }
}

TEST_CASE("RMSprop and Adagrad without masters keep bf16 state, or f32 state under stochastic rounding", "[optim][master]") {
  const std::vector<Make> makes = {
      [](std::vector<Tensor> ps) { return std::make_unique<RMSprop>(ps, RMSpropOptions(1e-3).centered(true)); },
      [](std::vector<Tensor> ps) { return std::make_unique<Adagrad>(ps, AdagradOptions(1e-2)); }};
  for (size_t k = 0; k < makes.size(); ++k) {
    for (bool sr : {false, true}) {
      INFO("optimizer " << k << (sr ? " stochastic rounding" : " nearest"));
      manual_seed(6);
      const Tensor w0 = randn({6, 5});
      Tensor w = leaf(w0.to(kBFloat16)), wf = leaf(w0);
      auto lo = makes[k]({w});
      auto hi = makes[k]({wf});
      lo->set_master_weights(false);
      if (sr) lo->set_stochastic_rounding(true, StochasticRoundingOptions().seed(9));
      for (const auto& [gw, gb] : grads(5, 13)) {
        w.set_grad(gw.to(kBFloat16));
        wf.set_grad(gw.to(kBFloat16).to(kFloat32));
        lo->step();
        hi->step();
      }
      CHECK_FALSE(lo->state(w).master.defined());
      const Tensor& st = lo->state(w).buffers.at(k == 0 ? "square_avg" : "sum");
      CHECK(st.dtype() == (sr ? kFloat32 : kBFloat16));
      CHECK(w.dtype() == kBFloat16);
      // Within a few bf16 steps of the f32 run (each update is rounded once).
      CHECK(max_abs_diff(w, wf) < 0.05);
      if (sr) {
        // Reproducible: the same seed gives the same bits.
        Tensor w2 = leaf(w0.to(kBFloat16));
        auto again = makes[k]({w2});
        again->set_master_weights(false);
        again->set_stochastic_rounding(true, StochasticRoundingOptions().seed(9));
        for (const auto& [gw, gb] : grads(5, 13)) {
          w2.set_grad(gw.to(kBFloat16));
          again->step();
        }
        CHECK(max_abs_diff(w2, w) == 0.0);
      }
    }
  }
}
