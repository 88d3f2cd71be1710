// Tests for amp::GradScaler and the fused unscale_check_inf_ op: scale state machine, skips, unscaling, errors, state dicts.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "amp/grad_scaler.h"
#include "core/random.h"
#include "ops/amp.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/reduction.h"
#include "nn/modules.h"
#include "optim/optim.h"

using namespace mpx;
using namespace mpx::optim;
using amp::GradScaler;
using amp::GradScalerOptions;

namespace {

// Byte-for-byte equality (NaN-safe, -0 != +0): what "bit-identical" means.
bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

Tensor leaf(const Tensor& t) { return t.detach().set_requires_grad(true); }

// One scaler iteration with a gradient of `value` everywhere on every parameter.
bool iterate(GradScaler& s, Optimizer& opt, double value) {
  for (const Tensor& p : opt.parameters()) p.set_grad(full(p.sizes(), value, TensorOptions(p.dtype())));
  const bool stepped = s.step(opt);
  s.update();
  return stepped;
}

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("GradScaler defaults are torch.amp's", "[amp][grad_scaler]") {
  GradScaler s;
  CHECK(s.get_scale() == 65536.0);
  CHECK(s.options().growth_factor() == 2.0);
  CHECK(s.options().backoff_factor() == 0.5);
  CHECK(s.options().growth_interval() == 2000);
  CHECK(s.options().max_scale() == 16777216.0);
  CHECK(s.is_enabled());
  auto sd = s.state_dict();
  CHECK(sd.at("scale") == 65536.0);
  CHECK(sd.at("_growth_tracker") == 0.0);
}

TEST_CASE("GradScaler scale sequence under clean and overflowing steps", "[amp][grad_scaler]") {
  Tensor w = leaf(zeros({3}));
  SGD opt({w}, SGDOptions(0.1));
  GradScaler s(GradScalerOptions().init_scale(1024).growth_interval(3));
  // c = clean, o = overflow; growth every 3 clean steps in a row, halve (and restart the count) on overflow.
  const std::string pattern = "cccccoccccccoo";
  const std::vector<double> expected = {1024, 1024, 2048, 2048, 2048, 1024, 1024, 1024, 2048, 2048, 2048, 4096, 2048, 1024};
  for (size_t i = 0; i < pattern.size(); ++i) {
    const bool overflow = pattern[i] == 'o';
    const bool stepped = iterate(s, opt, overflow ? kInf : 1.0);
    CHECK(stepped == !overflow);
    INFO("iteration " << i);
    CHECK(s.get_scale() == expected[i]);
  }
  CHECK(s.skipped_steps() == 3);
  CHECK(s.clean_steps() == 11);
  CHECK(s.state_dict().at("_growth_tracker") == 0.0);

  SECTION("NaN overflows like inf") {
    CHECK_FALSE(iterate(s, opt, kNaN));
    CHECK(s.get_scale() == 512.0);
  }
  SECTION("update(new_scale) sets the scale") {
    s.unscale_(opt);
    s.update(300.0);
    CHECK(s.get_scale() == 300.0);
    CHECK_THROWS_WITH(s.update(-1.0), Catch::Contains("positive"));
  }
}

TEST_CASE("GradScaler grows only to a finite value and at most to max_scale", "[amp][grad_scaler]") {
  Tensor w = leaf(zeros({2}));
  SGD opt({w}, SGDOptions(0.0));
  SECTION("ceiling") {
    GradScaler s(GradScalerOptions().init_scale(std::ldexp(1.0, 23)).growth_interval(1).growth_factor(3.0));
    iterate(s, opt, 1.0);
    CHECK(s.get_scale() == std::ldexp(1.0, 24));  // 3 * 2^23 capped at 2^24
    iterate(s, opt, 1.0);
    CHECK(s.get_scale() == std::ldexp(1.0, 24));
    iterate(s, opt, kInf);
    CHECK(s.get_scale() == std::ldexp(1.0, 23));
  }
  SECTION("finite-only growth") {
    const double big = std::ldexp(1.0, 127);  // the largest f32 power of two: doubling it overflows f32
    GradScaler s(GradScalerOptions().init_scale(big).growth_interval(2).max_scale(1e300));
    iterate(s, opt, 0.0);
    iterate(s, opt, 0.0);
    CHECK(s.get_scale() == big);
    CHECK(std::isfinite(s.get_scale()));
    CHECK(s.state_dict().at("_growth_tracker") == 0.0);  // the interval restarts even when growth is refused
  }
}

TEST_CASE("GradScaler min_scale floor raises a clear error instead of collapsing", "[amp][grad_scaler]") {
  Tensor w = leaf(zeros({2}));
  SGD opt({w}, SGDOptions(0.1));
  GradScaler s(GradScalerOptions().init_scale(65536).min_scale(16384));
  iterate(s, opt, kInf);
  CHECK(s.get_scale() == 32768);
  iterate(s, opt, kInf);
  CHECK(s.get_scale() == 16384);
  for (const Tensor& p : opt.parameters()) p.set_grad(full(p.sizes(), kInf));
  CHECK_FALSE(s.step(opt));
  CHECK_THROWS_WITH(s.update(), Catch::Contains("below min_scale") && Catch::Contains("lower the learning rate"));
  CHECK(s.get_scale() == 16384);  // unchanged
  // The iteration is closed: the next one works.
  CHECK(iterate(s, opt, 1.0));
  CHECK_THROWS_WITH(GradScaler(GradScalerOptions().min_scale(1e9)), Catch::Contains("min_scale"));
}

TEST_CASE("GradScaler clamp_at_min_scale stops a backoff at the floor, as apex's min_loss_scale", "[amp][grad_scaler]") {
  Tensor w = leaf(zeros({2}));
  SGD opt({w}, SGDOptions(0.1));
  GradScaler s(GradScalerOptions().init_scale(65536).min_scale(20000).clamp_at_min_scale(true).growth_interval(2));
  CHECK_FALSE(iterate(s, opt, kInf));
  CHECK(s.get_scale() == 32768);
  CHECK_FALSE(iterate(s, opt, kInf));
  CHECK(s.get_scale() == 20000);  // max(min_scale, 32768 / 2)
  CHECK_FALSE(iterate(s, opt, kInf));
  CHECK(s.get_scale() == 20000);  // stays at the floor, no error
  CHECK(s.skipped_steps() == 3);
  CHECK(iterate(s, opt, 1.0));
  CHECK(iterate(s, opt, 1.0));
  CHECK(s.get_scale() == 40000);  // growth after the interval is unaffected
  // The floor applies to backoffs only: a scale loaded below it is kept by clean steps.
  GradScaler low(GradScalerOptions().init_scale(1024).min_scale(4096).clamp_at_min_scale(true));
  CHECK(iterate(low, opt, 1.0));
  CHECK(low.get_scale() == 1024);
  CHECK_FALSE(iterate(low, opt, kInf));
  CHECK(low.get_scale() == 4096);
}

TEST_CASE("unscale_check_inf_ divides in f32 and flags inf/NaN in one pass", "[amp][grad_scaler]") {
  manual_seed(3);
  Tensor a = randn({5, 7}) * 1000.0;
  Tensor b = randn({40000}).to(kFloat16);  // more than one parallel chunk
  Tensor a_in = a.clone();
  Tensor b_out = empty({40000});
  Tensor inv = scalar_tensor(1.0 / 3.0);
  Tensor found = zeros({});
  unscale_check_inf_({a, b}, {a, b_out}, inv, found);
  CHECK(found.item<double>() == 0.0);
  const float invf = static_cast<float>(1.0 / 3.0);
  CHECK(bits_equal(a, a_in * scalar_tensor(invf)));
  CHECK(bits_equal(b_out, b.to(kFloat32) * scalar_tensor(invf)));
  // An inf in the last element of a large tensor is found, and the flag is sticky.
  Tensor c = ones({70000}).to(kBFloat16);
  {
    Tensor c32 = ones({70000});
    c32.data_ptr<float>()[69999] = static_cast<float>(kInf);
    c = c32.to(kBFloat16);
  }
  Tensor c_out = empty({70000});
  unscale_check_inf_({c}, {c_out}, inv, found);
  CHECK(found.item<double>() == 1.0);
  unscale_check_inf_({a}, {a}, inv, found);
  CHECK(found.item<double>() == 1.0);
  // A non-dense output (a transposed view) gets the right values.
  Tensor t = randn({4, 6});
  Tensor t_out = zeros({6, 4}).t();
  Tensor f2 = zeros({});
  unscale_check_inf_({t}, {t_out}, scalar_tensor(0.5), f2);
  CHECK(bits_equal(t_out.contiguous(), t * 0.5));
  // A channels-last gradient into a row-major output (and back) keeps element positions.
  Tensor cl = randn({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast).to(kFloat16);
  Tensor cl_out = empty({2, 3, 4, 5});
  unscale_check_inf_({cl}, {cl_out}, scalar_tensor(0.25), f2);
  CHECK(bits_equal(cl_out, cl.to(kFloat32).contiguous() * 0.25));
  Tensor rm = randn({2, 3, 4, 5});
  Tensor rm_out = empty({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast);
  unscale_check_inf_({rm}, {rm_out}, scalar_tensor(0.25), f2);
  CHECK(bits_equal(rm_out.contiguous(), rm * 0.25));
  CHECK(f2.item<double>() == 0.0);
  CHECK_THROWS_WITH(unscale_check_inf_({t}, {t.to(kFloat16)}, inv, f2), Catch::Contains("unscales into f32"));
  CHECK_THROWS_WITH(unscale_check_inf_({t}, {t}, scalar_tensor(1.0, TensorOptions(kFloat64)), f2),
                    Catch::Contains("inv_scale"));
}

// The kernel tells inf/NaN from the exponent bits of each dtype: every non-finite value is
// found wherever it sits, in the unscaling and the check-only forms; the largest finite values
// and the smallest subnormals are not, nor is an f64 beyond f32's range.
TEST_CASE("unscale_check_inf_ tells non-finite from finite values in every dtype", "[amp][grad_scaler]") {
  const int64_t n = 70001;  // several parallel chunks
  struct Limits { DType dt; double max, tiny; };
  const Limits limits[] = {{kFloat16, 65504.0, std::ldexp(1.0, -24)},
                           {kBFloat16, 3.3895313892515355e38, std::ldexp(1.0, -133)},
                           {kFloat32, std::numeric_limits<float>::max(), std::ldexp(1.0, -149)},
                           {kFloat64, std::numeric_limits<double>::max(), std::ldexp(1.0, -1074)}};
  for (const Limits& l : limits) {
    const DType out_dt = l.dt == kFloat64 ? kFloat64 : kFloat32;
    auto found = [&](double v, int64_t at, bool check_only) {
      Tensor g64 = full({n}, 0.5, TensorOptions(kFloat64));
      g64.data_ptr<double>()[at] = v;
      const Tensor g = g64.to(l.dt);
      Tensor flag = zeros({});
      const tensor_list outs = check_only ? tensor_list{} : tensor_list{empty({n}, TensorOptions(out_dt))};
      unscale_check_inf_({g}, outs, scalar_tensor(0.5), flag);
      return flag.item<double>() != 0.0;
    };
    for (int64_t at : {int64_t{0}, n / 2 + 3, n - 1}) {
      for (bool check_only : {false, true}) {
        INFO(dtype_name(l.dt) << " at " << at << (check_only ? ", check only" : ", unscaling"));
        CHECK(found(kInf, at, check_only));
        CHECK(found(-kInf, at, check_only));
        CHECK(found(kNaN, at, check_only));
        CHECK_FALSE(found(l.max, at, check_only));
        CHECK_FALSE(found(-l.max, at, check_only));
        CHECK_FALSE(found(l.tiny, at, check_only));
        if (l.dt == kFloat64) CHECK_FALSE(found(1e300, at, check_only));
      }
    }
  }
}

TEST_CASE("GradScaler unscales f32 grads in place and f16 grads into f32 masters", "[amp][grad_scaler]") {
  manual_seed(5);
  Tensor w32 = leaf(randn({3, 4}));
  Tensor w16 = leaf(randn({4, 2}).to(kFloat16));
  SGD opt({w32, w16}, SGDOptions(0.0));
  GradScaler s(GradScalerOptions().init_scale(3.0));  // not a power of two: rounding is visible
  Tensor g32 = randn({3, 4}) * 100.0;
  Tensor g16 = (randn({4, 2}) * 100.0).to(kFloat16);
  w32.set_grad(g32.clone());
  w16.set_grad(g16.clone());
  s.unscale_(opt);
  const float inv = static_cast<float>(1.0 / 3.0);
  CHECK(bits_equal(w32.grad(), g32 * scalar_tensor(inv)));
  CHECK(max(abs(w32.grad() - g32 / 3.0)).item<double>() <= 1e-4 * max(abs(g32)).item<double>());
  const Tensor& m = opt.master(w16);
  REQUIRE(m.grad().defined());
  CHECK(m.grad().dtype() == kFloat32);
  CHECK(bits_equal(m.grad(), g16.to(kFloat32) * scalar_tensor(inv)));
  CHECK(bits_equal(w16.grad(), g16));  // the scaled f16 gradient is left as it was
  CHECK(s.found_inf(opt).item<double>() == 0.0);
  CHECK(s.found_inf(opt).dtype() == kFloat32);
  CHECK(s.found_inf(opt).dim() == 0);
}

TEST_CASE("GradScaler unscales f16 grads in place when the optimizer has no masters (apex O3)", "[amp][grad_scaler]") {
  manual_seed(6);
  Tensor w16 = leaf(randn({4, 2}).to(kFloat16));
  SGD opt({w16}, SGDOptions(0.0));
  opt.set_master_weights(false);
  GradScaler s(GradScalerOptions().init_scale(4.0));
  const Tensor g16 = (randn({4, 2}) * 100.0).to(kFloat16);
  w16.set_grad(g16.clone());
  s.unscale_(opt);
  CHECK(w16.grad().dtype() == kFloat16);
  CHECK(bits_equal(w16.grad(), (g16.to(kFloat32) * 0.25).to(kFloat16)));
  CHECK_FALSE(opt.state(w16).master.defined());
  CHECK(s.found_inf(opt).item<double>() == 0.0);
}

TEST_CASE("an injected inf/NaN gradient skips the step bit-identically", "[amp][grad_scaler]") {
  manual_seed(7);
  Tensor w32 = leaf(randn({3, 4}));
  Tensor w16 = leaf(randn({4, 2}).to(kFloat16));
  Tensor wb = leaf(randn({5}).to(kBFloat16));
  Adam opt({w32, w16, wb}, AdamOptions(1e-2));
  GradScaler s(GradScalerOptions().init_scale(256));
  auto set_grads = [&](double poison) {
    w32.set_grad((randn({3, 4}) * 256.0));
    w16.set_grad((randn({4, 2}) * 256.0).to(kFloat16));
    Tensor gb = randn({5}) * 256.0;
    gb.data_ptr<float>()[2] = static_cast<float>(poison);
    wb.set_grad(gb.to(kBFloat16));
  };
  set_grads(1.0);
  REQUIRE(s.step(opt));
  s.update();
  for (double poison : {kInf, -kInf, kNaN}) {
    const OptimizerState before = opt.state_dict();
    const Tensor p32 = w32.clone(), p16 = w16.clone(), pb = wb.clone();
    const Tensor m16 = opt.master(w16).clone(), mb = opt.master(wb).clone();
    set_grads(poison);
    CHECK_FALSE(s.step(opt));
    s.update();
    CHECK(bits_equal(w32, p32));
    CHECK(bits_equal(w16, p16));
    CHECK(bits_equal(wb, pb));
    CHECK(bits_equal(opt.master(w16), m16));
    CHECK(bits_equal(opt.master(wb), mb));
    const OptimizerState after = opt.state_dict();
    CHECK(before.scalars == after.scalars);
    REQUIRE(before.tensors.size() == after.tensors.size());
    for (const auto& [k, t] : before.tensors) {
      INFO(k);
      CHECK(bits_equal(t, after.tensors.at(k)));
    }
  }
  CHECK(s.get_scale() == 32.0);
  CHECK(s.skipped_steps() == 3);
  CHECK(s.clean_steps() == 1);
  set_grads(1.0);
  const Tensor p32 = w32.clone();
  CHECK(s.step(opt));
  CHECK_FALSE(bits_equal(w32, p32));
}

TEST_CASE("GradScaler misuse is a clear error", "[amp][grad_scaler]") {
  Tensor w = leaf(zeros({2}));
  SGD opt({w}, SGDOptions(0.1));
  GradScaler s;
  w.set_grad(ones({2}));
  CHECK_THROWS_WITH(s.update(), Catch::Contains("no inf/NaN checks"));
  s.unscale_(opt);
  CHECK_THROWS_WITH(s.unscale_(opt), Catch::Contains("already called"));
  s.step(opt);
  CHECK_THROWS_WITH(s.unscale_(opt), Catch::Contains("after step()"));
  CHECK_THROWS_WITH(s.step(opt), Catch::Contains("already called"));
  s.update();
  // A new iteration may unscale again.
  w.set_grad(ones({2}));
  CHECK_NOTHROW(s.unscale_(opt));
  CHECK_THROWS_WITH(s.found_inf(SGD({leaf(zeros({1}))}, SGDOptions(0.1))), Catch::Contains("not been unscaled"));
  CHECK_THROWS_WITH(GradScaler(GradScalerOptions().growth_factor(0.5)), Catch::Contains("growth_factor"));
  CHECK_THROWS_WITH(GradScaler(GradScalerOptions().backoff_factor(1.5)), Catch::Contains("backoff_factor"));
}

TEST_CASE("GradScaler scale() is differentiable and the grads come back unscaled", "[amp][grad_scaler]") {
  Tensor w = leaf(tensor<float>({1, 2, 3}));
  SGD opt({w}, SGDOptions(1.0));
  GradScaler s(GradScalerOptions().init_scale(1024));
  Tensor loss = sum(w * w);
  Tensor scaled = s.scale(loss);
  CHECK(scaled.item<double>() == 14.0 * 1024);
  scaled.backward();
  CHECK(bits_equal(w.grad(), tensor<float>({2048, 4096, 6144})));
  s.unscale_(opt);
  CHECK(bits_equal(w.grad(), tensor<float>({2, 4, 6})));
}

TEST_CASE("GradScaler state_dict round trip uses torch.amp's keys", "[amp][grad_scaler]") {
  Tensor w = leaf(zeros({2}));
  SGD opt({w}, SGDOptions(0.1));
  GradScaler s(GradScalerOptions().init_scale(1024).growth_interval(5));
  iterate(s, opt, 1.0);
  iterate(s, opt, kInf);
  iterate(s, opt, 1.0);
  iterate(s, opt, 1.0);
  const auto sd = s.state_dict();
  CHECK(sd.size() == 5);
  CHECK(sd.at("scale") == 512.0);
  CHECK(sd.at("growth_factor") == 2.0);
  CHECK(sd.at("backoff_factor") == 0.5);
  CHECK(sd.at("growth_interval") == 5.0);
  CHECK(sd.at("_growth_tracker") == 2.0);
  GradScaler r;
  r.load_state_dict(sd);
  CHECK(r.state_dict() == sd);
  // The restored scaler continues the same sequence.
  for (int i = 0; i < 3; ++i) {
    iterate(s, opt, 1.0);
    iterate(r, opt, 1.0);
    CHECK(r.get_scale() == s.get_scale());
  }
  CHECK(r.get_scale() == 1024.0);
  auto bad = sd;
  bad.erase("_growth_tracker");
  CHECK_THROWS_WITH(r.load_state_dict(bad), Catch::Contains("_growth_tracker"));
  CHECK_THROWS_WITH(r.load_state_dict({}), Catch::Contains("disabled"));
}

TEST_CASE("a disabled GradScaler is a pass-through", "[amp][grad_scaler]") {
  Tensor w = leaf(tensor<float>({1, 2}));
  SGD opt({w}, SGDOptions(1.0));
  GradScaler s(GradScalerOptions().enabled(false));
  Tensor loss = sum(w * w);
  CHECK(s.scale(loss).is_same(loss));
  w.set_grad(tensor<float>({1, 1}));
  s.unscale_(opt);
  CHECK(bits_equal(w.grad(), tensor<float>({1, 1})));
  CHECK(s.step(opt));
  CHECK(bits_equal(w, tensor<float>({0, 1})));
  s.update();
  CHECK(s.get_scale() == 1.0);
  CHECK(s.state_dict().empty());
  CHECK_NOTHROW(s.load_state_dict({}));
}

TEST_CASE("an f16 run with masters and a GradScaler resumes from a checkpoint bit for bit", "[amp][grad_scaler]") {
  manual_seed(23);
  const Tensor x = randn({8, 5}).to(kFloat16), y = randn({8, 3});
  const Tensor w0 = (randn({3, 5}) * 0.3).to(kFloat16), b0 = randn({3});
  struct Run {
    Tensor w, b;
    std::unique_ptr<Adam> opt;
    GradScaler scaler{GradScalerOptions().init_scale(4096).growth_interval(2)};
    Run(const Tensor& w_init, const Tensor& b_init)
        : w(leaf(w_init.clone())), b(leaf(b_init.clone())), opt(std::make_unique<Adam>(std::vector<Tensor>{w, b}, AdamOptions(1e-2))) {}
  };
  auto train_step = [&](Run& r, int it) {
    r.opt->zero_grad();
    Tensor out = add(mm(x, r.w.t()).to(kFloat32), r.b);
    Tensor loss = mean(square(out - y));
    r.scaler.scale(loss).backward();
    if (it == 2) {  // an overflow in the middle of the run
      Tensor g = r.w.grad().to(kFloat32);
      g.data_ptr<float>()[0] = std::numeric_limits<float>::infinity();
      r.w.set_grad(g.to(kFloat16));
    }
    r.scaler.step(*r.opt);
    r.scaler.update();
  };
  Run full_run(w0, b0);
  for (int it = 0; it < 8; ++it) train_step(full_run, it);

  Run first(w0, b0);
  for (int it = 0; it < 4; ++it) train_step(first, it);
  const OptimizerState opt_state = first.opt->state_dict();
  const auto scaler_state = first.scaler.state_dict();
  Run resumed(first.w.detach(), first.b.detach());
  resumed.opt->load_state_dict(opt_state);
  resumed.scaler.load_state_dict(scaler_state);
  for (int it = 4; it < 8; ++it) train_step(resumed, it);

  CHECK(full_run.scaler.skipped_steps() == 1);
  CHECK(resumed.scaler.get_scale() == full_run.scaler.get_scale());
  CHECK(bits_equal(resumed.w, full_run.w));
  CHECK(bits_equal(resumed.b, full_run.b));
  CHECK(bits_equal(resumed.opt->master(resumed.w), full_run.opt->master(full_run.w)));
  const OptimizerState a = resumed.opt->state_dict(), b = full_run.opt->state_dict();
  CHECK(a.scalars == b.scalars);
  for (const auto& [k, t] : b.tensors) {
    INFO(k);
    CHECK(bits_equal(a.tensors.at(k), t));
  }
}

TEST_CASE("unscale_check_inf_ checks f64 gradients in f64", "[amp][grad_scaler]") {
  // Finite beyond f32's range: an overflow only for a check that narrows to f32 first.
  Tensor big = full({5}, 1e300, TensorOptions(kFloat64));
  Tensor found = zeros({});
  unscale_check_inf_({big}, {}, scalar_tensor(1.0), found);
  CHECK(found.item<double>() == 0.0);
  big.data_ptr<double>()[3] = std::numeric_limits<double>::infinity();
  unscale_check_inf_({big}, {}, scalar_tensor(1.0), found);
  CHECK(found.item<double>() == 1.0);
}

TEST_CASE("steps skipped by a GradScaler keep Adam's step number true in later plain steps", "[amp][grad_scaler]") {
  manual_seed(8);
  const Tensor init = randn({50}), g = randn({50});
  Tensor p = leaf(init.clone());
  Adam opt({p}, AdamOptions(1e-2));
  GradScaler s(GradScalerOptions().init_scale(4.0));
  CHECK_FALSE(iterate(s, opt, std::numeric_limits<double>::infinity()));  // skipped on the flag
  CHECK(bits_equal(p, init));
  // A plain step (no scaler now): the first step actually taken, so bias corrections of step 1.
  p.set_grad(g.clone());
  opt.step();
  CHECK(opt.step_count(p) == 1);
  Tensor q = leaf(init.clone());
  Adam ref({q}, AdamOptions(1e-2));
  q.set_grad(g.clone());
  ref.step();
  CHECK(bits_equal(p, q));
  CHECK(opt.state_dict().scalars.at("state.0.step") == 1.0);
}

TEST_CASE("a fused GradScaler step reads the parameters' gradients, not stale master gradients", "[amp][grad_scaler]") {
  manual_seed(9);
  const Tensor init = randn({6, 4}).to(kFloat16);
  const Tensor g1 = (randn({6, 4}) * 8.0).to(kFloat16), g2 = (randn({6, 4}) * 8.0).to(kFloat16);
  // Iteration 1 unscales explicitly (into the f32 master's gradient); iteration 2 lets step()
  // check and unscale the f16 gradient as it reads it.
  auto run = [&](bool set_to_none) {
    Tensor w = leaf(init.clone());
    SGD opt({w}, SGDOptions(0.1));
    GradScaler s(GradScalerOptions().init_scale(8.0));
    w.set_grad(g1.clone());
    s.unscale_(opt);
    s.step(opt);
    s.update();
    opt.zero_grad(set_to_none);  // false keeps the master's gradient, zeroed
    w.set_grad(g2.clone());
    s.step(opt);
    s.update();
    return opt.master(w).clone();
  };
  const Tensor kept = run(false), dropped = run(true);
  CHECK(bits_equal(kept, dropped));
  CHECK_FALSE(bits_equal(dropped, init.to(kFloat32) - 0.1 * g1.to(kFloat32) / 8.0));  // the second step moved it
}

// PyTorch test/test_torch.py test_grad_scale_will_not_overflow: Linear(5, 1), Adam, init_scale 1e38,
// growth_factor 2^4, growth_interval 1, a target of 1e-30: after one step the scale is finite.
// mpx's default max_scale is apex's 2^24 ceiling, so that init_scale is refused unless raised.
TEST_CASE("torch test_grad_scale_will_not_overflow: init_scale 1e38 needs max_scale raised, then stays finite",
          "[amp][grad_scaler]") {
  CHECK_THROWS_WITH(GradScaler(GradScalerOptions().init_scale(1e38).growth_factor(16.0).growth_interval(1)),
                    Catch::Contains("max_scale") && Catch::Contains("init_scale"));
  manual_seed(0);
  nn::Linear model(5, 1);
  Adam opt(model->parameters(), AdamOptions(1e-3));
  GradScaler s(GradScalerOptions().init_scale(1e38).growth_factor(16.0).growth_interval(1).max_scale(1e300));
  opt.zero_grad();
  Tensor x = randn({1, 5});
  Tensor y = randn({1, 1}) * 1e-30;
  Tensor l = mean(pow(model(x) - y, 2.0));
  s.scale(l).backward();
  s.step(opt);
  s.update();
  CHECK(std::isfinite(s.get_scale()));
  for (const Tensor& p : model->parameters()) CHECK(p.all_finite());
}
