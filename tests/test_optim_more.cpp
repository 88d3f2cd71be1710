// Tests for RMSprop and Adagrad: PyTorch's three-step golden values, masters and amp's skipped steps, no-master
// (apex O3) and stochastically rounded steps, state names and option errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>

#include "amp/amp.h"
#include "amp/grad_scaler.h"
#include "core/random.h"
#include "core/serialize.h"
#include "nn/nn.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/reduction.h"
#include "optim/optim.h"
#include "tests/paths.h"

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
  const TensorDict g = load_tensors(mpx::testing::test_data_dir() + "/golden/optim_more.safetensors", &meta);
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

namespace {

struct LambRef {
  double lr, b1, b2, eps, wd, max_norm;
  bool bias_correction, grad_averaging, adam_w_mode, nvlamb;
};

// apex's multi_tensor_lamb written out in f64 over plain vectors: `ps` and `gs` per parameter, `wds` the
// weight decay of each parameter's group; the state lives in `m`, `v`; `step` is the step number.
void lamb_ref(std::vector<std::vector<double>>& ps, const std::vector<std::vector<double>>& gs,
              const std::vector<double>& wds, std::vector<std::vector<double>>& m, std::vector<std::vector<double>>& v,
              int step, const LambRef& h) {
  double gsq = 0;
  for (const auto& g : gs)
    for (double x : g) gsq += x * x;
  const double gnorm = std::sqrt(gsq);
  const double clip = h.max_norm > 0 && gnorm > h.max_norm ? gnorm / h.max_norm : 1.0;
  const double bc1 = h.bias_correction ? 1 - std::pow(h.b1, step) : 1, bc2 = h.bias_correction ? 1 - std::pow(h.b2, step) : 1;
  const double b3 = h.grad_averaging ? 1 - h.b1 : 1;
  for (size_t i = 0; i < ps.size(); ++i) {
    const double wd = wds[i];
    std::vector<double> u(ps[i].size());
    double pn = 0, un = 0;
    for (size_t j = 0; j < u.size(); ++j) {
      double g = gs[i][j] / clip;
      if (!h.adam_w_mode) g += wd * ps[i][j];
      m[i][j] = m[i][j] * h.b1 + b3 * g;
      v[i][j] = v[i][j] * h.b2 + (1 - h.b2) * g * g;
      u[j] = (m[i][j] / bc1) / (std::sqrt(v[i][j] / bc2) + h.eps);
      if (h.adam_w_mode) u[j] += wd * ps[i][j];
      pn += ps[i][j] * ps[i][j];
      un += u[j] * u[j];
    }
    pn = std::sqrt(pn);
    un = std::sqrt(un);
    const double r = (h.nvlamb || wd != 0) && pn != 0 && un != 0 ? h.lr * pn / un : h.lr;
    for (size_t j = 0; j < u.size(); ++j) ps[i][j] -= r * u[j];
  }
}

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

}  // namespace

TEST_CASE("LAMB follows apex's FusedLAMB (clipping over every group, trust ratios, modes)", "[optim]") {
  const std::vector<LambRef> cases = {
      {2e-2, 0.9, 0.999, 1e-6, 1e-2, 1.0, true, true, true, false},     // apex's defaults: the clip is active
      {2e-2, 0.8, 0.99, 1e-8, 5e-2, 100.0, true, true, false, false},   // L2 mode, no clipping
      {1e-2, 0.9, 0.999, 1e-6, 1e-2, 0.0, false, false, true, true},    // no bias correction, m += g, NVLAMB
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const LambRef& h = cases[c];
    for (DType dt : {kFloat64, kFloat32}) {
      INFO("case " << c << " in " << dtype_name(dt));
      manual_seed(21);
      const Tensor w0 = randn({6, 5}), b0 = randn({7}), e0 = randn({3, 40});
      Tensor w = leaf(w0.to(dt)), b = leaf(b0.to(dt)), e = leaf(e0.to(dt));
      // Two groups: the bias has no weight decay, hence no trust ratio unless NVLAMB.
      const LAMBOptions o = LAMBOptions(h.lr).betas({h.b1, h.b2}).eps(h.eps).weight_decay(h.wd).max_grad_norm(h.max_norm)
                                .bias_correction(h.bias_correction).grad_averaging(h.grad_averaging)
                                .adam_w_mode(h.adam_w_mode).use_nvlamb(h.nvlamb);
      std::vector<ParamGroup> groups;
      groups.emplace_back(std::vector<Tensor>{w, e});
      groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<LAMBOptions>(LAMBOptions(o).weight_decay(0)));
      LAMB opt(std::move(groups), o);
      std::vector<std::vector<double>> ps = {values(w0), values(e0), values(b0)}, m(3), v(3);
      for (int i = 0; i < 3; ++i) m[i] = v[i] = std::vector<double>(ps[i].size(), 0.0);
      manual_seed(22);
      for (int s = 1; s <= 4; ++s) {
        const Tensor gw = randn({6, 5}) * 0.3, ge = randn({3, 40}) * 0.3, gb = randn({7}) * 0.3;
        w.set_grad(gw.to(dt));
        e.set_grad(ge.to(dt));
        b.set_grad(gb.to(dt));
        opt.step();
        lamb_ref(ps, {values(gw.to(dt)), values(ge.to(dt)), values(gb.to(dt))}, {h.wd, h.wd, 0.0}, m, v, s, h);
      }
      const double tol = dt == kFloat64 ? 1e-12 : 2e-6;
      CHECK(max_abs_diff(w, tensor(ps[0], {6, 5})) < tol);
      CHECK(max_abs_diff(e, tensor(ps[1], {3, 40})) < tol);
      CHECK(max_abs_diff(b, tensor(ps[2], {7})) < tol);
    }
  }
}

TEST_CASE("LAMB under a loss scaler: the fused unscale, a skipped step, f32 masters for bf16", "[optim][amp]") {
  manual_seed(23);
  const Tensor w0 = randn({6, 5}), b0 = randn({7});
  const auto gs = grads(3, 24, 0.5);
  // Reference: f32 parameters, three plain steps.
  Tensor w = leaf(w0), b = leaf(b0);
  LAMB ref({w, b}, LAMBOptions(1e-2));
  for (const auto& [gw, gb] : gs) {
    w.set_grad(gw.clone());
    b.set_grad(gb.clone());
    ref.step();
  }
  // bf16 parameters with masters and a scaler whose first step overflows; the scaled gradients
  // are f32 here so that the only difference from the reference is the scale itself.
  Tensor wl = leaf(w0.to(kBFloat16)), bl = leaf(b0.to(kBFloat16));
  LAMB opt({wl, bl}, LAMBOptions(1e-2));
  opt.set_master(wl, w0);
  opt.set_master(bl, b0);
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(256.0));
  wl.set_grad(full({6, 5}, NAN).to(kBFloat16));
  bl.set_grad(zeros({7}, kBFloat16));
  CHECK_FALSE(static_cast<bool>(scaler.step(opt)));
  scaler.update();
  for (const auto& [gw, gb] : gs) {
    const double s = scaler.get_scale();
    wl.set_grad((gw * s).to(kBFloat16));
    bl.set_grad((gb * s).to(kBFloat16));
    CHECK(static_cast<bool>(scaler.step(opt)));
    scaler.update();
  }
  CHECK(opt.step_count(wl) == 3);
  // bf16 gradients (8 bits) against f32 ones: close, not equal; the global norm was unscaled,
  // or the clip would have shrunk every step by the scale.
  CHECK(max_abs_diff(opt.master(wl), w) < 5e-3);
  CHECK(max_abs_diff(opt.master(bl), b) < 5e-3);
  CHECK(max_abs_diff(wl, opt.master(wl).to(kBFloat16)) == 0.0);
  const OptimizerState st = opt.state_dict();
  CHECK(st.optimizer == "LAMB");
  CHECK(st.tensors.count("state.0.exp_avg"));
  CHECK(st.tensors.count("state.1.exp_avg_sq"));
  CHECK(st.scalars.at("param_groups.0.max_grad_norm") == 1.0);
}

TEST_CASE("LAMB options are validated and its state resumes", "[optim]") {
  Tensor p = leaf(ones({2}));
  CHECK_THROWS_WITH(LAMB({p}, LAMBOptions(-1)), Catch::Contains("LAMB: invalid learning rate"));
  CHECK_THROWS_WITH(LAMB({p}, LAMBOptions().betas({1.0, 0.9})), Catch::Contains("invalid beta1"));
  CHECK_THROWS_WITH(LAMB({p}, LAMBOptions().max_grad_norm(-1)), Catch::Contains("invalid max_grad_norm"));
  CHECK_THROWS_WITH(LAMB({p}, LAMBOptions().weight_decay(NAN)), Catch::Contains("invalid weight_decay"));
  // Two steps, a state round trip into a fresh optimizer, two more: as four uninterrupted steps.
  manual_seed(25);
  const Tensor w0 = randn({6, 5});
  const auto gs = grads(4, 26);
  Tensor a = leaf(w0), c = leaf(w0);
  LAMB full_run({a}, LAMBOptions(1e-2).weight_decay(0.1));
  LAMB first({c}, LAMBOptions(1e-2).weight_decay(0.1));
  for (int s = 0; s < 4; ++s) {
    a.set_grad(gs[static_cast<size_t>(s)].first.clone());
    full_run.step();
  }
  for (int s = 0; s < 2; ++s) {
    c.set_grad(gs[static_cast<size_t>(s)].first.clone());
    first.step();
  }
  Tensor d = leaf(c.detach());
  LAMB second({d}, LAMBOptions(5.0));
  second.load_state_dict(first.state_dict());
  for (int s = 2; s < 4; ++s) {
    d.set_grad(gs[static_cast<size_t>(s)].first.clone());
    second.step();
  }
  CHECK(max_abs_diff(a, d) == 0.0);
}

TEST_CASE("RMSprop, Adagrad and LAMB train an MLP under amp O1 and O2 in f16 and bf16", "[optim][amp]") {
  // A fixed teacher: y = tanh(x W1) W2, learnt by a 2-layer MLP from 512 samples.
  manual_seed(30);
  const Tensor x = randn({512, 16}), w1 = randn({16, 32}) * 0.5, w2 = randn({32, 4}) * 0.5;
  const Tensor y = matmul(tanh(matmul(x, w1)), w2);
  const std::vector<std::pair<std::string, std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>>> makes = {
      {"RMSprop", [](std::vector<Tensor> p) { return std::make_unique<RMSprop>(p, RMSpropOptions(3e-3)); }},
      {"Adagrad", [](std::vector<Tensor> p) { return std::make_unique<Adagrad>(p, AdagradOptions(5e-2)); }},
      {"LAMB", [](std::vector<Tensor> p) { return std::make_unique<LAMB>(p, LAMBOptions(2e-2)); }}};
  for (const auto& [name, make] : makes)
    for (const std::string level : {"O1", "O2"})
      for (DType low : {kFloat16, kBFloat16}) {
        INFO(name << " " << level << " " << dtype_name(low));
        amp::reset();
        manual_seed(31);
        nn::Sequential net(nn::Linear(16, 32), nn::Tanh(), nn::Linear(32, 4));
        auto opt = make(net->parameters());
        amp::initialize(net, *opt, amp::Options().opt_level(level).dtype(low).verbosity(0));
        double first = 0, last = 0;
        for (int step = 0; step < 150; ++step) {
          opt->zero_grad();
          const int64_t s = (step % 8) * 64;
          const Tensor loss = mse_loss(net(x.narrow(0, s, 64)).to(kFloat32), y.narrow(0, s, 64));
          if (step == 0) first = loss.item<double>();
          last = loss.item<double>();
          amp::scale_loss(loss, *opt).backward();
          opt->step();
        }
        CHECK(last < 0.5 * first);
        // bf16 never overflows here; f16's dynamic scale starts at 2^16 and may back off once or twice.
        CHECK(amp::skipped_steps(*opt) <= (low == kBFloat16 ? 0 : 2));
        amp::reset();
      }
}
