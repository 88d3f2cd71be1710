// Tests for optim/: golden SGD/Adam/AdamW steps, param groups, state dicts, FP32 masters and errors (schedulers: test_optim_sched.cpp).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numbers>

#include "core/random.h"
#include "core/serialize.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "optim/optim.h"
#include "tests/paths.h"

using namespace mpx;
using namespace mpx::optim;
namespace fs = std::filesystem;

namespace {

const TensorDict& golden() {
  static const TensorDict g = load_tensors(mpx::testing::test_data_dir() + "/golden/optim.safetensors");
  return g;
}
const Metadata& golden_meta() {
  static const Metadata m = [] {
    Metadata meta;
    load_tensors(mpx::testing::test_data_dir() + "/golden/optim.safetensors", &meta);
    return meta;
  }();
  return m;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return max(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
}

Tensor leaf(const Tensor& t) {
  Tensor c = t.detach().clone();
  c.set_requires_grad(true);
  return c;
}

// Same bits (shape, dtype, contents).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * x.element_size()) == 0;
}

std::unique_ptr<Optimizer> make_golden_optimizer(const std::string& c, std::vector<Tensor> params) {
  if (c == "sgd")
    return std::make_unique<SGD>(params, SGDOptions(0.1).momentum(0.9).dampening(0.0).weight_decay(1e-4).nesterov(false));
  if (c == "sgd_nesterov")
    return std::make_unique<SGD>(params, SGDOptions(0.1).momentum(0.9).dampening(0.0).weight_decay(0.0).nesterov(true));
  if (c == "adamw") return std::make_unique<AdamW>(params, AdamWOptions(1e-2).betas({0.9, 0.999}).eps(1e-8).weight_decay(1e-2));
  return std::make_unique<Adam>(params, AdamOptions(1e-2).betas({0.9, 0.999}).eps(1e-8).weight_decay(1e-2));
}

fs::path scratch() {
  struct Dir {
    fs::path p = fs::temp_directory_path() / ("mpx_test_optim_" + std::to_string(::getpid()));
    Dir() { fs::create_directories(p); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  };
  static const Dir d;
  return d.p;
}

}  // namespace

TEST_CASE("optimizers match PyTorch's two-step golden values", "[optim][golden]") {
  const auto& g = golden();
  // The hard-coded hyper-parameters above are the ones the generator recorded.
  CHECK_THAT(golden_meta().at("sgd"), Catch::Contains("\"lr\": 0.1") && Catch::Contains("\"weight_decay\": 0.0001"));
  CHECK_THAT(golden_meta().at("sgd_nesterov"), Catch::Contains("\"nesterov\": true"));
  CHECK_THAT(golden_meta().at("adamw"), Catch::Contains("AdamW") && Catch::Contains("\"weight_decay\": 0.01"));
  CHECK_THAT(golden_meta().at("adam"), Catch::Contains("\"optimizer\": \"Adam\"") && Catch::Contains("\"eps\": 1e-08"));

  for (const std::string c : {"sgd", "sgd_nesterov", "adamw", "adam"}) {
    for (DType dt : {kFloat64, kFloat32}) {
      INFO(c << " in " << dtype_name(dt));
      Tensor p = leaf(g.at(c + ".p0").to(dt)), q = leaf(g.at(c + ".q0").to(dt));
      auto opt = make_golden_optimizer(c, {p, q});
      for (int s = 1; s <= 2; ++s) {
        p.set_grad(g.at(c + ".g" + std::to_string(s) + "_p").to(dt));
        q.set_grad(g.at(c + ".g" + std::to_string(s) + "_q").to(dt));
        opt->step();
      }
      const double tol = dt == kFloat64 ? 1e-12 : 2e-6;
      CHECK(max_abs_diff(p, g.at(c + ".p2")) < tol);
      CHECK(max_abs_diff(q, g.at(c + ".q2")) < tol);
      CHECK(p.dtype() == dt);
      CHECK_FALSE(opt->state(p).master.defined());  // f32/f64 parameters need no master
    }
  }
}

TEST_CASE("param groups keep their own learning rates", "[optim]") {
  Tensor a = leaf(ones({3})), b = leaf(ones({2})), c = leaf(ones({1}));
  std::vector<ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a});
  groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<SGDOptions>(SGDOptions(0.01)));
  SGD opt(groups, SGDOptions(0.1));
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[0].lr() == 0.1);
  CHECK(opt.param_groups()[1].lr() == 0.01);
  opt.add_param_group(ParamGroup({c}, std::make_unique<SGDOptions>(SGDOptions(1.0))));
  CHECK(opt.size() == 3);
  CHECK(opt.parameters().size() == 3);

  for (const Tensor& t : {a, b, c}) t.set_grad(full(t.sizes(), 2.0));
  opt.step();
  CHECK(a.data_ptr<float>()[0] == Approx(1 - 0.1 * 2));
  CHECK(b.data_ptr<float>()[0] == Approx(1 - 0.01 * 2));
  CHECK(c.data_ptr<float>()[0] == Approx(1 - 1.0 * 2));

  opt.param_groups()[1].set_lr(0.5);
  static_cast<SGDOptions&>(opt.param_groups()[0].options()).lr(0.0);
  opt.step();
  CHECK(a.data_ptr<float>()[0] == Approx(0.8));
  CHECK(b.data_ptr<float>()[0] == Approx(0.98 - 0.5 * 2));

  // A group without options takes the defaults; a parameter can't be in two groups.
  Tensor d = leaf(ones({1}));
  opt.add_param_group(ParamGroup({d}));
  CHECK(opt.param_groups().back().lr() == 0.1);
  CHECK_THROWS_WITH(opt.add_param_group(ParamGroup({a})), Catch::Contains("more than one parameter group"));
  // Parameters without a gradient are skipped.
  d.set_grad(Tensor());
  CHECK_NOTHROW(opt.step());
  CHECK(d.data_ptr<float>()[0] == 1.0f);
}

TEST_CASE("zero_grad drops or zeros gradients", "[optim]") {
  Tensor p = leaf(ones({2, 2}));
  Tensor h = leaf(ones({3}).to(kFloat16));
  SGD opt({p, h}, SGDOptions(0.1));
  p.set_grad(full({2, 2}, 3.0));
  h.set_grad(full({3}, 1.0, kFloat16));
  opt.zero_grad(false);
  REQUIRE(p.grad().defined());
  CHECK(sum(abs(p.grad())).item<double>() == 0.0);
  CHECK(p.grad().sizes() == IntList{2, 2});
  opt.zero_grad();
  CHECK_FALSE(p.grad().defined());
  CHECK_FALSE(h.grad().defined());
  // Master gradients (the amp layer's) are cleared too.
  opt.master(h).set_grad(ones({3}));
  opt.zero_grad();
  CHECK_FALSE(opt.master(h).grad().defined());
}

namespace {
// Three deterministic gradient sets for two parameters.
std::vector<std::pair<Tensor, Tensor>> grad_sequence(DType dt) {
  manual_seed(99);
  std::vector<std::pair<Tensor, Tensor>> gs;
  for (int i = 0; i < 4; ++i) gs.emplace_back(randn({4, 3}).to(dt), randn({5}).to(dt));
  return gs;
}
template <class Make>
void check_resume(Make make, DType dt, bool via_file) {
  manual_seed(5);
  const Tensor p0 = randn({4, 3}).to(dt), q0 = randn({5}).to(dt);
  const auto gs = grad_sequence(dt);

  // Uninterrupted: four steps.
  Tensor p = leaf(p0), q = leaf(q0);
  auto opt = make(std::vector<Tensor>{p, q});
  for (const auto& [gp, gq] : gs) {
    p.set_grad(gp.clone());
    q.set_grad(gq.clone());
    opt->step();
  }

  // Interrupted after two steps: the model's values and the optimizer's state go to a fresh pair.
  Tensor p1 = leaf(p0), q1 = leaf(q0);
  auto opt1 = make(std::vector<Tensor>{p1, q1});
  for (int i = 0; i < 2; ++i) {
    p1.set_grad(gs[i].first.clone());
    q1.set_grad(gs[i].second.clone());
    opt1->step();
  }
  Tensor p2 = leaf(p1.detach()), q2 = leaf(q1.detach());
  auto opt2 = make(std::vector<Tensor>{p2, q2});
  opt2->param_groups()[0].set_lr(123.0);  // overwritten by the loaded state
  if (via_file) {
    const std::string path = (scratch() / "opt.safetensors").string();
    save(*opt1, path);
    load(*opt2, path);
  } else {
    opt2->load_state_dict(opt1->state_dict());
  }
  CHECK(opt2->param_groups()[0].lr() == opt1->param_groups()[0].lr());
  for (int i = 2; i < 4; ++i) {
    p2.set_grad(gs[i].first.clone());
    q2.set_grad(gs[i].second.clone());
    opt2->step();
  }
  CHECK(same_bits(p2, p));
  CHECK(same_bits(q2, q));
  if (is_reduced_float(dt)) CHECK(same_bits(opt2->master(p2), opt->master(p)));
}
}  // namespace

TEST_CASE("state_dict round trip continues identically", "[optim]") {
  auto sgd = [](std::vector<Tensor> ps) {
    return std::make_unique<SGD>(ps, SGDOptions(0.05).momentum(0.9).weight_decay(1e-3).nesterov(true));
  };
  auto adam = [](std::vector<Tensor> ps) {
    return std::make_unique<Adam>(ps, AdamOptions(1e-2).amsgrad(true).weight_decay(1e-2));
  };
  auto adamw = [](std::vector<Tensor> ps) { return std::make_unique<AdamW>(ps, AdamWOptions(3e-3).betas({0.8, 0.99})); };
  auto rmsprop = [](std::vector<Tensor> ps) {
    return std::make_unique<RMSprop>(ps, RMSpropOptions(1e-2).momentum(0.5).centered(true));
  };
  auto adagrad = [](std::vector<Tensor> ps) {
    return std::make_unique<Adagrad>(ps, AdagradOptions(0.1).lr_decay(0.1).initial_accumulator_value(0.5));
  };
  for (bool file : {false, true}) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      INFO("dtype " << dtype_name(dt) << (file ? " via file" : " in memory"));
      check_resume(sgd, dt, file);
      check_resume(adam, dt, file);
      check_resume(adamw, dt, file);
      check_resume(rmsprop, dt, file);
      check_resume(adagrad, dt, file);
    }
  }

  // The flat names follow PyTorch's layout.
  Tensor p = leaf(ones({2})), h = leaf(ones({2}).to(kFloat16));
  Adam opt({p, h}, AdamOptions(0.1));
  p.set_grad(ones({2}));
  h.set_grad(ones({2}, kFloat16));
  opt.step();
  OptimizerState s = opt.state_dict();
  CHECK(s.optimizer == "Adam");
  CHECK(s.tensors.count("state.0.exp_avg"));
  CHECK(s.tensors.count("state.1.exp_avg_sq"));
  CHECK(s.tensors.count("state.1.master"));
  CHECK_FALSE(s.tensors.count("state.0.master"));
  CHECK(s.tensors.at("state.1.master").dtype() == kFloat32);
  CHECK(s.tensors.at("state.1.exp_avg").dtype() == kFloat32);
  CHECK(s.tensors.count("param_groups.0.params"));
  CHECK(s.scalars.at("state.0.step") == 1);
  CHECK(s.scalars.at("param_groups.0.lr") == 0.1);
  CHECK(s.scalars.at("param_groups.0.beta2") == 0.999);
}

TEST_CASE("load_state_dict rejects mismatched states", "[optim]") {
  Tensor p = leaf(ones({2})), q = leaf(ones({3}));
  SGD sgd({p, q}, SGDOptions(0.1).momentum(0.9));
  p.set_grad(ones({2}));
  q.set_grad(ones({3}));
  sgd.step();
  OptimizerState s = sgd.state_dict();

  Adam adam({leaf(ones({2})), leaf(ones({3}))});
  CHECK_THROWS_WITH(adam.load_state_dict(s), Catch::Contains("saved by SGD"));
  SGD one({leaf(ones({2}))}, SGDOptions(0.1));
  CHECK_THROWS_WITH(one.load_state_dict(s), Catch::Contains("1 parameters but the state lists 2"));
  SGD wrong_shape({leaf(ones({2})), leaf(ones({4}))}, SGDOptions(0.1));
  CHECK_THROWS_WITH(wrong_shape.load_state_dict(s), Catch::Contains("state.1.momentum_buffer") && Catch::Contains("shape"));
  OptimizerState extra = s;
  extra.tensors["state.0.bogus"] = ones({2});
  SGD ok({leaf(ones({2})), leaf(ones({3}))}, SGDOptions(0.7));
  CHECK_THROWS_WITH(ok.load_state_dict(extra), Catch::Contains("unexpected state entry 'state.0.bogus'"));
  OptimizerState bad_hyper = s;
  bad_hyper.scalars["param_groups.0.lr"] = -1;
  CHECK_THROWS_WITH(ok.load_state_dict(bad_hyper), Catch::Contains("invalid learning rate"));
  // A failed load changes nothing.
  CHECK(ok.param_groups()[0].lr() == 0.7);
  CHECK(ok.state_dict().scalars.count("state.0.step") == 0);

  const std::string path = (scratch() / "tensors.safetensors").string();
  save_tensors({{"x", ones({1})}}, path);
  CHECK_THROWS_WITH(load(ok, path), Catch::Contains("not an optimizer state"));
}

TEST_CASE("f16/bf16 parameters get FP32 masters that keep tiny updates", "[optim][amp]") {
  for (DType dt : {kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    Tensor h = leaf(ones({8}).to(dt));
    Tensor f = leaf(ones({2}));
    SGD opt({h, f}, SGDOptions(1.0));
    // Masters exist before the first step (the amp layer needs them).
    const Tensor& m = opt.master(h);
    REQUIRE(m.defined());
    CHECK(m.dtype() == kFloat32);
    CHECK(m.requires_grad());
    CHECK(same_bits(m, h.to(kFloat32)));
    CHECK(opt.master(f).is_same(f));
    auto mp = opt.master_params();
    REQUIRE(mp.size() == 2);
    CHECK(mp[0].is_same(m));
    CHECK(mp[1].is_same(f));

    // Each update is far below half an ulp of 1.0 in f16/bf16: a low-precision parameter alone
    // would never move, the master accumulates it.
    const double tiny = dt == kFloat16 ? 1e-4 : 1e-3;
    const uint64_t v0 = h.version();
    const int steps = 40;
    for (int i = 0; i < steps; ++i) {
      h.set_grad(full({8}, -tiny, dt));
      opt.step();
      CHECK(same_bits(h, opt.master(h).to(dt)));  // the model copy is the rounded master
    }
    CHECK(h.version() > v0);
    const double expect = 1.0 + steps * static_cast<float>(Half(static_cast<float>(-tiny))) * -1.0;
    const double expect_b = 1.0 + steps * static_cast<float>(BFloat16(static_cast<float>(-tiny))) * -1.0;
    CHECK(opt.master(h).data_ptr<float>()[0] == Approx(dt == kFloat16 ? expect : expect_b).epsilon(1e-5));
    CHECK(h.to(kFloat32).data_ptr<float>()[0] > 1.0f);
    // Plain low-precision arithmetic would lose every update.
    Tensor naive = ones({1}).to(dt);
    for (int i = 0; i < steps; ++i) naive = (naive + tiny).to(dt);
    CHECK(naive.to(kFloat32).data_ptr<float>()[0] == 1.0f);
  }

  // set_master keeps full-precision weights from before a cast; sync_masters follows dtype changes.
  Tensor w32 = full({3}, 1.0001);
  Tensor h = leaf(w32.to(kFloat16));
  SGD opt({h}, SGDOptions(0.1));
  CHECK(opt.master(h).data_ptr<float>()[0] == 1.0f);
  opt.set_master(h, w32);
  CHECK(opt.master(h).data_ptr<float>()[0] == 1.0001f);
  CHECK(opt.master(h).requires_grad());
  Tensor f = leaf(ones({1}));
  SGD opt32({f}, SGDOptions(0.1));
  CHECK_THROWS_WITH(opt32.set_master(f, ones({1})), Catch::Contains("own master"));
  CHECK_THROWS_WITH(opt.set_master(h, ones({2})), Catch::Contains("shape"));
}

TEST_CASE("f16 Adam keeps f32 state and prefers master gradients", "[optim][amp]") {
  manual_seed(3);
  Tensor w32 = randn({6});
  Tensor h = leaf(w32.to(kFloat16));
  Tensor ref = leaf(h.to(kFloat32));
  AdamW opt({h}, AdamWOptions(1e-2));
  AdamW opt_ref({ref}, AdamWOptions(1e-2));
  Tensor g = randn({6});
  // The master gradient (f32) wins over the f16 parameter's gradient.
  h.set_grad(full({6}, 100.0, kFloat16));
  opt.master(h).set_grad(g.clone());
  ref.set_grad(g.clone());
  opt.step();
  opt_ref.step();
  CHECK(same_bits(opt.master(h), ref));  // the f32 master follows the f32 reference run exactly
  CHECK(same_bits(h, ref.to(kFloat16)));
  CHECK(opt.state(h).buffers.at("exp_avg").dtype() == kFloat32);
}

TEST_CASE("optimizers handle channels-last and strided parameters", "[optim]") {
  manual_seed(4);
  Tensor w = leaf(randn({2, 3, 2, 2}).contiguous(MemoryFormat::ChannelsLast));
  Tensor ref = leaf(w.detach().contiguous());
  Tensor g = randn({2, 3, 2, 2});
  SGD opt({w}, SGDOptions(0.1).momentum(0.9));
  SGD opt_ref({ref}, SGDOptions(0.1).momentum(0.9));
  for (int i = 0; i < 2; ++i) {
    w.set_grad(g.clone());                                       // row-major grad, channels-last param
    ref.set_grad(g.clone());
    opt.step();
    opt_ref.step();
  }
  CHECK(w.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(max_abs_diff(w, ref) == 0.0);

  Tensor h = leaf(randn({2, 3, 2, 2}).to(kFloat16).contiguous(MemoryFormat::ChannelsLast));
  SGD opt_h({h}, SGDOptions(0.1));
  h.set_grad(g.to(kFloat16));
  opt_h.step();
  CHECK(same_bits(h.contiguous(), opt_h.master(h).to(kFloat16).contiguous()));
}

TEST_CASE("optimizer options are validated", "[optim]") {
  Tensor p = leaf(ones({2}));
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(-0.1)), Catch::Contains("invalid learning rate"));
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(0.1).nesterov(true)), Catch::Contains("Nesterov momentum requires"));
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)),
                    Catch::Contains("zero dampening"));
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(0.1).momentum(-1)), Catch::Contains("invalid momentum"));
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(0.1).weight_decay(-1)), Catch::Contains("invalid weight_decay"));
  CHECK_THROWS_WITH(Adam({p}, AdamOptions(-1e-3)), Catch::Contains("invalid learning rate"));
  CHECK_THROWS_WITH(Adam({p}, AdamOptions(1e-3).betas({1.0, 0.999})), Catch::Contains("invalid beta1"));
  CHECK_THROWS_WITH(Adam({p}, AdamOptions(1e-3).betas({0.9, -0.1})), Catch::Contains("invalid beta2"));
  CHECK_THROWS_WITH(AdamW({p}, AdamWOptions(1e-3).eps(-1)), Catch::Contains("AdamW: invalid eps"));
  CHECK(AdamWOptions().weight_decay() == 1e-2);
  CHECK(AdamOptions().weight_decay() == 0.0);
  CHECK_THROWS_WITH(SGD(std::vector<Tensor>{}, SGDOptions(0.1)), Catch::Contains("empty parameter list"));
  CHECK_THROWS_WITH(SGD({tensor<int64_t>({1, 2})}, SGDOptions(0.1)), Catch::Contains("floating"));
  Tensor nonleaf = p * 2.0;
  CHECK_THROWS_WITH(SGD({nonleaf}, SGDOptions(0.1)), Catch::Contains("non-leaf"));
  CHECK_THROWS_WITH(SGD({p, p}, SGDOptions(0.1)), Catch::Contains("more than one"));
  SGD opt({p}, SGDOptions(0.1));
  CHECK_THROWS_WITH(opt.master(ones({2})), Catch::Contains("not a parameter"));
  CHECK_THROWS_WITH(opt.add_param_group(ParamGroup({leaf(ones({1}))}, std::make_unique<SGDOptions>(SGDOptions(-2)))),
                    Catch::Contains("invalid learning rate"));
  CHECK_THROWS_WITH(p.set_grad(ones({3})), Catch::Contains("shape"));
  p.mutable_grad() = ones({3});  // past set_grad's check, the step's own still holds
  CHECK_THROWS_WITH(opt.step(), Catch::Contains("does not match"));
}

TEST_CASE("step closure and pre-step hooks", "[optim]") {
  Tensor p = leaf(full({1}, 2.0));
  SGD opt({p}, SGDOptions(0.5));
  auto closure = [&] {
    opt.zero_grad();
    Tensor loss = sum(p * p);
    loss.backward();
    return loss;
  };
  Tensor loss = opt.step(closure);
  CHECK(loss.item<double>() == 4.0);
  CHECK(p.data_ptr<float>()[0] == Approx(2.0 - 0.5 * 4.0));
  bool skip = true;
  const int id = opt.add_step_pre_hook([&](Optimizer&) { return !skip; });
  p.set_grad(ones({1}));
  opt.step();
  CHECK(p.data_ptr<float>()[0] == Approx(0.0));  // skipped
  opt.remove_step_pre_hook(id);
  opt.step();
  CHECK(p.data_ptr<float>()[0] == Approx(-0.5));
}

// ---------------------------------------------------------------------------------------
// Schedulers: sequences against PyTorch's closed-form formulas.
// ---------------------------------------------------------------------------------------
TEST_CASE("without master weights f16/bf16 parameters and their state stay in their own dtype (apex O3)",
          "[optim][master]") {
  for (DType dt : {kFloat16, kBFloat16}) {
    manual_seed(8);
    const Tensor w0 = randn({64}).to(dt), g = randn({64}).to(dt);
    Tensor p = leaf(w0);
    SGD opt({p}, SGDOptions(0.1).momentum(0.9).weight_decay(1e-2));
    opt.set_master_weights(false);
    CHECK(opt.master(p).impl() == p.impl());  // the parameter is its own master
    // The same step in f32 with every stored value rounded to dt, as torch.optim on f16 tensors.
    Tensor rp = w0.to(kFloat32), rbuf;
    for (int i = 0; i < 3; ++i) {
      p.set_grad(g.clone());
      opt.step();
      const Tensor d = g.to(kFloat32) + rp * 1e-2;
      rbuf = (rbuf.defined() ? rbuf * 0.9 + d : d).to(dt).to(kFloat32);
      rp = (rp - rbuf * 0.1).to(dt).to(kFloat32);
    }
    const Tensor& buf = opt.state(p).buffers.at("momentum_buffer");
    CHECK(buf.dtype() == dt);
    CHECK_FALSE(opt.state(p).master.defined());
    const double ulp = dt == kFloat16 ? 1.0 / 1024 : 1.0 / 128;  // a last-place rounding difference at most
    CHECK(max_abs_diff(buf, rbuf) <= ulp * max(abs(rbuf)).item<double>());
    CHECK(max_abs_diff(p, rp) <= ulp * max(abs(rp)).item<double>());
    const OptimizerState st = opt.state_dict();
    CHECK(st.tensors.count("state.0.master") == 0);
    CHECK(st.tensors.at("state.0.momentum_buffer").dtype() == dt);

    // A resumed optimizer continues bit for bit; saved f32 masters and state are taken as dt.
    Tensor q = leaf(p);
    SGD resumed({q}, SGDOptions(0.1).momentum(0.9).weight_decay(1e-2));
    resumed.set_master_weights(false);
    OptimizerState with_master = st;
    with_master.tensors["state.0.master"] = p.to(kFloat32);
    with_master.tensors["state.0.momentum_buffer"] = buf.to(kFloat32);
    resumed.load_state_dict(with_master);
    CHECK(resumed.state(q).buffers.at("momentum_buffer").dtype() == dt);
    p.set_grad(g.clone());
    q.set_grad(g.clone());
    opt.step();
    resumed.step();
    CHECK(same_bits(p, q));

    // Masters back on: created from the parameter, the state widens at the next step.
    opt.set_master_weights(true);
    REQUIRE(opt.state(p).master.defined());
    CHECK(same_bits(opt.master(p), p.to(kFloat32)));
    p.set_grad(g.clone());
    opt.step();
    CHECK(opt.state(p).buffers.at("momentum_buffer").dtype() == kFloat32);
    CHECK(same_bits(p, opt.master(p).to(dt)));
  }
}

TEST_CASE("Adam without master weights keeps f16 moments and matches the f32 step rounded per store", "[optim][master]") {
  manual_seed(9);
  // Gradients of at least 0.05: the f16 second moment (1 - beta2) g^2 stays a normal number. Below about 2e-3 it
  // flushes to zero and the step becomes lr g / eps, a hazard of f16 moments (PyTorch's too), not rounding.
  const Tensor w0 = randn({64}).to(kFloat16), g0 = randn({64}), g = (g0 + g0.sign() * 0.05).to(kFloat16);
  Tensor p = leaf(w0), ref = leaf(w0.to(kFloat32));
  AdamW opt({p}, AdamWOptions(1e-2).weight_decay(1e-2));
  AdamW opt_ref({ref}, AdamWOptions(1e-2).weight_decay(1e-2));
  opt.set_master_weights(false);
  p.set_grad(g.clone());
  ref.set_grad(g.to(kFloat32));
  opt.step();
  opt_ref.step();
  for (const char* n : {"exp_avg", "exp_avg_sq"}) {
    const Tensor& b = opt.state(p).buffers.at(n);
    CHECK(b.dtype() == kFloat16);
    CHECK(max_abs_diff(b, opt_ref.state(ref).buffers.at(n)) <= max(abs(b)).item<double>() / 1024);
  }
  // One step from the same start: the f16 moments round once, then the update rounds once.
  CHECK(max_abs_diff(p, ref) <= max(abs(ref)).item<double>() / 1024);
  CHECK_FALSE(opt.state(p).master.defined());
}

TEST_CASE("without master weights f16 parameters lose updates below their resolution (apex O3)",
          "[optim][master]") {
  for (bool masters : {true, false}) {
    Tensor p = full({4}, 1.0, kFloat16).set_requires_grad(true);
    optim::SGD opt({p}, optim::SGDOptions(1e-4));
    opt.set_master_weights(masters);
    for (int i = 0; i < 10; ++i) {
      p.mutable_grad() = full({4}, 1.0, kFloat16);
      opt.step();
    }
    // 1 - 10 * 1e-4 = 0.999: representable in f16 only after accumulating in f32.
    if (masters) CHECK(p[0].item<float>() < 1.0f);
    else CHECK(p[0].item<float>() == 1.0f);
  }
}
