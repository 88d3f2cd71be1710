// Tests for amp autocast: per-category dtypes, nesting, overrides, custom Functions, threads and the weight cast cache.
#include <catch2/catch.hpp>

#include <thread>

#include "amp/autocast.h"
#include "amp/cast_cache.h"
#include "amp/register.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "core/random.h"
#include "ops/activation.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "optim/optim.h"

using namespace mpx;

namespace {

Tensor leaf(const Tensor& t) { return t.detach().set_requires_grad(true); }

double max_diff(const Tensor& a, const Tensor& b) { return max(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>(); }

// Restores the ops.def policies even when a check fails.
struct PolicyReset {
  ~PolicyReset() { amp::reset_function_registrations(); }
};

// Records the dtypes its forward saw; runs in `Policy` under autocast.
template <CastPolicy Policy>
struct Probe : autograd::Function<Probe<Policy>> {
  static constexpr CastPolicy autocast_policy = Policy;
  static inline DType seen_a = kBool, seen_b = kBool;
  static Tensor forward(autograd::Context& ctx, const Tensor& a, const Tensor& b) {
    seen_a = a.dtype();
    seen_b = b.dtype();
    ctx.save_for_backward({a, b});
    return a * b;
  }
  static tensor_list backward(autograd::Context& ctx, const tensor_list& g) {
    auto s = ctx.get_saved_variables();
    return {g[0] * s[1], g[0] * s[0]};
  }
};

}  // namespace

TEST_CASE("autocast output dtypes per policy category in f16 and bf16", "[amp][autocast]") {
  const DType lp = GENERATE(kFloat16, kBFloat16);
  INFO(dtype_name(lp));
  Tensor a = randn({3, 4}), b = randn({4, 5}), c = randn({3, 4});
  Tensor a_lp = a.to(lp);
  amp::AutocastGuard guard(lp);
  CHECK(amp::is_autocast_enabled());
  CHECK(amp::get_autocast_dtype() == lp);
  // lower: run in the autocast dtype
  CHECK(mm(a, b).dtype() == lp);
  CHECK(matmul(a, b).dtype() == lp);
  CHECK(linear(a, b.t(), randn({5})).dtype() == lp);
  CHECK(bmm(randn({2, 3, 4}), randn({2, 4, 2})).dtype() == lp);
  // fp32: run in f32 even from low-precision inputs
  CHECK(exp(a_lp).dtype() == kFloat32);
  CHECK(softmax(a_lp, 1).dtype() == kFloat32);
  CHECK(log_softmax(a_lp, 1).dtype() == kFloat32);
  CHECK(sum(a_lp).dtype() == kFloat32);
  CHECK(mse_loss(a_lp, c.to(lp)).dtype() == kFloat32);
  // promote: the widest floating input
  CHECK(add(a_lp, c).dtype() == kFloat32);
  CHECK(add(a_lp, c.to(lp)).dtype() == lp);
  CHECK(mul(c, a_lp).dtype() == kFloat32);
  CHECK(cat({a_lp, c}).dtype() == kFloat32);
  const DType other = lp == kFloat16 ? kBFloat16 : kFloat16;
  CHECK_THROWS_WITH(add(a_lp, c.to(other)), Catch::Contains("mix f16 and bf16"));
  // none: the input dtype
  CHECK(relu(a_lp).dtype() == lp);
  CHECK(relu(a).dtype() == kFloat32);
  CHECK(tanh(a_lp).dtype() == lp);
  // banned: an error naming the safe alternative
  CHECK_THROWS_WITH(binary_cross_entropy(full({2}, 0.5), full({2}, 1.0)),
                    Catch::Contains("bce_with_logits") && Catch::Contains("autocast"));
  // f64 is left alone by every category
  Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64);
  CHECK(mm(a64, b64).dtype() == kFloat64);
  CHECK(exp(a64).dtype() == kFloat64);
  CHECK(relu(a64).dtype() == kFloat64);
  // integer tensors are never cast
  Tensor i = arange(6).reshape({2, 3});
  CHECK(add(i, i).dtype() == kInt64);
  CHECK(cat({i, i}).dtype() == kInt64);
  CHECK(mul(i, i).dtype() == kInt64);
  CHECK(mul(i, a_lp.reshape({2, 6}).narrow(1, 0, 3)).dtype() == lp);  // ints join by ordinary promotion
}

TEST_CASE("autocast guards nest and restore, per thread", "[amp][autocast]") {
  Tensor a = randn({2, 3}), b = randn({3, 2});
  CHECK(amp::autocast_nesting() == 0);
  {
    amp::AutocastGuard outer(kFloat16);
    CHECK(amp::autocast_nesting() == 1);
    CHECK(mm(a, b).dtype() == kFloat16);
    {
      amp::AutocastGuard off(kFloat16, false);
      CHECK_FALSE(amp::is_autocast_enabled());
      CHECK(mm(a, b).dtype() == kFloat32);
      {
        amp::AutocastGuard inner(kBFloat16);
        CHECK(amp::autocast_nesting() == 3);
        CHECK(mm(a, b).dtype() == kBFloat16);
      }
      CHECK(mm(a, b).dtype() == kFloat32);
    }
    CHECK(mm(a, b).dtype() == kFloat16);
    // A thread that does not apply the captured state does not autocast (thread-local).
    DType plain = kBool;
    std::thread([&] { plain = mm(a, b).dtype(); }).join();
    CHECK(plain == kFloat32);
  }
  CHECK(amp::autocast_nesting() == 0);
  CHECK_FALSE(amp::is_autocast_enabled());
  CHECK(mm(a, b).dtype() == kFloat32);
  CHECK_THROWS_WITH(amp::AutocastGuard(kFloat32), Catch::Contains("kFloat16 or kBFloat16") && Catch::Contains("enabled=false"));
  CHECK(amp::autocast_nesting() == 0);
}

TEST_CASE("a disabled autocast guard takes any dtype, as torch.autocast(enabled=False)", "[amp][autocast]") {
  Tensor a = randn({2, 3}), b = randn({3, 2});
  amp::AutocastGuard outer(kFloat16);
  for (DType d : {kFloat32, kFloat64, kFloat16}) {
    amp::AutocastGuard off(d, false);
    CHECK_FALSE(amp::is_autocast_enabled());
    CHECK(mm(a, b).dtype() == kFloat32);
    CHECK(amp::get_autocast_dtype() == kFloat16);  // an f32 region keeps the enclosing low dtype
  }
  CHECK(amp::is_autocast_enabled());
  CHECK(mm(a, b).dtype() == kFloat16);
}

TEST_CASE("a captured autocast state applies in a worker thread and shares the cast cache", "[amp][autocast][cast_cache]") {
  Tensor x = randn({2, 3});
  Tensor w = leaf(randn({3, 4}));
  amp::reset_cast_cache_stats();
  amp::AutocastGuard guard(kBFloat16);
  Tensor main_out = mm(x, w);
  const AutocastState st = amp::capture_autocast_state();
  Tensor worker_out;
  bool worker_enabled_after = true;
  std::thread([&] {
    {
      amp::ScopedAutocastState scoped(st);
      worker_out = mm(x, w);
    }
    worker_enabled_after = amp::is_autocast_enabled();
  }).join();
  CHECK(worker_out.dtype() == kBFloat16);
  CHECK_FALSE(worker_enabled_after);
  CHECK(amp::cast_cache_stats().misses == 1);
  CHECK(amp::cast_cache_stats().hits == 1);
  // Gradients from both threads' uses reach the f32 weight.
  sum(add(main_out, worker_out)).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
}

TEST_CASE("gradients reach f32 parameters in f32 through autocast casts", "[amp][autocast]") {
  const DType lp = GENERATE(kFloat16, kBFloat16);
  manual_seed(11);
  Tensor x = randn({4, 6});
  Tensor w = leaf(randn({3, 6}) * 0.3), bias = leaf(randn({3}));
  {
    amp::AutocastGuard guard(lp);
    Tensor y = linear(x, w, bias);
    CHECK(y.dtype() == lp);
    sum(y * y).backward();
  }
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(bias.grad().dtype() == kFloat32);
  Tensor w2 = leaf(w), b2 = leaf(bias);
  Tensor y2 = linear(x, w2, b2);
  sum(y2 * y2).backward();
  const double tol = lp == kFloat16 ? 2e-2 : 1e-1;
  CHECK(max_diff(w.grad(), w2.grad()) <= tol * max(abs(w2.grad())).item<double>());
  CHECK(max_diff(bias.grad(), b2.grad()) <= tol * max(abs(b2.grad())).item<double>());
}

TEST_CASE("register_*_function overrides a policy by ops.def name", "[amp][autocast]") {
  PolicyReset reset;
  Tensor a = randn({2, 3}), b = randn({3, 2});
  amp::AutocastGuard guard(kFloat16);
  amp::register_float_function("mm");
  CHECK(op_policy(OpId::mm) == CastPolicy::fp32);
  CHECK(mm(a.to(kFloat16), b).dtype() == kFloat32);
  amp::register_promote_function("mm");
  CHECK(mm(a.to(kFloat16), b.to(kFloat16)).dtype() == kFloat16);
  CHECK(mm(a.to(kFloat16), b).dtype() == kFloat32);
  amp::register_half_function("exp");
  CHECK(exp(a).dtype() == kFloat16);
  amp::register_half_function("binary_cross_entropy");  // un-banning is the user's call
  CHECK_NOTHROW(binary_cross_entropy(full({2}, 0.5), full({2}, 1.0)));
  CHECK_THROWS_WITH(amp::register_half_function("softmx"), Catch::Contains("no op named \"softmx\"") &&
                                                                  Catch::Contains("ops/ops.def"));
  CHECK_THROWS_WITH(amp::register_float_function("soft"), Catch::Contains("similar names: ") &&
                                                               Catch::Contains("softmax"));
  amp::reset_function_registrations();
  CHECK(mm(a, b).dtype() == kFloat16);
  CHECK(exp(a.to(kFloat16)).dtype() == kFloat32);
}

TEST_CASE("custom Functions take an autocast policy", "[amp][autocast]") {
  Tensor a = leaf(randn({3})), b = leaf(randn({3}));
  {
    amp::AutocastGuard guard(kBFloat16);
    Tensor y = Probe<CastPolicy::lower>::apply(a, b);
    CHECK(Probe<CastPolicy::lower>::seen_a == kBFloat16);
    CHECK(Probe<CastPolicy::lower>::seen_b == kBFloat16);
    CHECK(y.dtype() == kBFloat16);
    sum(y).backward();
    CHECK(a.grad().dtype() == kFloat32);
    CHECK(max_diff(a.grad(), b) <= 1e-2 * (1 + max(abs(b)).item<double>()));

    Tensor z = Probe<CastPolicy::fp32>::apply(a.to(kBFloat16), b.to(kBFloat16));
    CHECK(Probe<CastPolicy::fp32>::seen_a == kFloat32);
    CHECK(z.dtype() == kFloat32);

    Tensor n = Probe<CastPolicy::none>::apply(a.to(kBFloat16), b.to(kBFloat16));
    CHECK(Probe<CastPolicy::none>::seen_a == kBFloat16);
    CHECK(n.dtype() == kBFloat16);
  }
  // Outside autocast the policy does nothing.
  Tensor y = Probe<CastPolicy::lower>::apply(a, b);
  CHECK(Probe<CastPolicy::lower>::seen_a == kFloat32);
  CHECK(y.dtype() == kFloat32);
}

TEST_CASE("custom Functions registered as promote or banned go through the built-in autocast stage", "[amp][autocast]") {
  Tensor a = leaf(randn({3})), b = leaf(randn({3}));
  {
    amp::AutocastGuard guard(kFloat16);
    // promote: the widest floating input wins, as for add or cat.
    Tensor y = Probe<CastPolicy::promote>::apply(a.to(kFloat16), b);
    CHECK(Probe<CastPolicy::promote>::seen_a == kFloat32);
    CHECK(Probe<CastPolicy::promote>::seen_b == kFloat32);
    CHECK(y.dtype() == kFloat32);
    sum(y).backward();
    CHECK(a.grad().dtype() == kFloat32);
    Tensor h = Probe<CastPolicy::promote>::apply(a.to(kFloat16), b.to(kFloat16));
    CHECK(Probe<CastPolicy::promote>::seen_a == kFloat16);
    CHECK(h.dtype() == kFloat16);
    CHECK_THROWS_WITH(Probe<CastPolicy::promote>::apply(a.to(kFloat16), b.to(kBFloat16)),
                      Catch::Contains("mix f16 and bf16"));
    // banned: refused under autocast with the way out, as binary_cross_entropy is.
    CHECK_THROWS_WITH(Probe<CastPolicy::banned>::apply(a, b),
                      Catch::Contains("unsafe under autocast") && Catch::Contains("outside the autocast region"));
  }
  // Outside autocast neither policy does anything.
  Tensor n = Probe<CastPolicy::promote>::apply(a.to(kFloat16), b);
  CHECK(Probe<CastPolicy::promote>::seen_a == kFloat16);
  Tensor m = Probe<CastPolicy::banned>::apply(a, b);
  CHECK(m.dtype() == kFloat32);
}

TEST_CASE("rows that were not consulted before follow their policy: stack and dot promote, prelu lowers", "[amp][autocast]") {
  Tensor a = randn({3}), b = randn({3});
  amp::AutocastGuard guard(kBFloat16);
  CHECK(stack({a.to(kBFloat16), b}).dtype() == kFloat32);
  CHECK(dot(a.to(kBFloat16), b).dtype() == kFloat32);
  CHECK(prelu(randn({2, 3, 4}), full({3}, 0.25)).dtype() == kBFloat16);
  CHECK(argmax(a, 0).dtype() == kInt64);
}

TEST_CASE("cast cache: one cast per weight per iteration, shared graph", "[amp][autocast][cast_cache]") {
  manual_seed(13);
  Tensor x = randn({2, 4});
  Tensor w = leaf(randn({4, 4})), v = leaf(randn({4, 4}));
  amp::reset_cast_cache_stats();
  Tensor out;
  {
    amp::AutocastGuard guard(kFloat16);
    constexpr int kUses = 5;
    Tensor h = x;
    for (int i = 0; i < kUses; ++i) h = mm(h, w) * 0.5;
    out = sum(mm(h, v));
    auto s = amp::cast_cache_stats();
    CHECK(s.misses == 2);  // one per weight; x (no grad) and intermediates are not cached
    CHECK(s.hits == kUses - 1);
    CHECK(s.entries == 2);
    out.backward();
  }
  CHECK(amp::cast_cache_stats().entries == 0);  // cleared at the outermost exit
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
  // The shared cast accumulates every use's gradient: compare with explicit per-use casts.
  Tensor w2 = leaf(w), v2 = leaf(v);
  {
    Tensor h = x.to(kFloat16);
    for (int i = 0; i < 5; ++i) h = mm(h, w2.to(kFloat16)) * 0.5;
    sum(mm(h, v2.to(kFloat16)).to(kFloat32)).backward();
  }
  CHECK(max_diff(w.grad(), w2.grad()) <= 2e-2 * (1 + max(abs(w2.grad())).item<double>()));
  CHECK(max_diff(v.grad(), v2.grad()) <= 2e-2 * (1 + max(abs(v2.grad())).item<double>()));

  SECTION("a training loop casts each weight once per iteration") {
    optim::SGD opt({w, v}, optim::SGDOptions(0.01));
    for (int it = 0; it < 3; ++it) {
      amp::reset_cast_cache_stats();
      opt.zero_grad();
      {
        amp::AutocastGuard guard(kFloat16);
        Tensor y = mm(mm(mm(x, w), w), v);
        sum(y).backward();
      }
      opt.step();
      CHECK(amp::cast_cache_stats().misses == 2);
      CHECK(amp::cast_cache_stats().hits == 1);
    }
  }
}

TEST_CASE("cast cache never serves a stale cast after an in-place update", "[amp][autocast][cast_cache]") {
  manual_seed(17);
  Tensor x = randn({2, 3});
  Tensor w = leaf(randn({3, 3}));
  optim::SGD opt({w}, optim::SGDOptions(0.5));
  amp::reset_cast_cache_stats();
  amp::AutocastGuard guard(kBFloat16);  // one long region: only the version counter can tell
  Tensor y1 = mm(x, w);
  sum(y1).backward();
  opt.step();  // updates w in place, bumping its version
  Tensor y2 = mm(x, w);
  CHECK(amp::cast_cache_stats().misses == 2);
  CHECK(amp::cast_cache_stats().hits == 0);
  CHECK(max_diff(y2, mm(x.to(kBFloat16), w.detach().to(kBFloat16))) == 0.0);
  CHECK(max_diff(y1, y2) > 0.0);
  // A plain in-place edit under no-grad invalidates too.
  {
    NoGradGuard ng;
    w.mul_(2.0);
  }
  Tensor y3 = mm(x, w);
  CHECK(amp::cast_cache_stats().misses == 3);
  CHECK(max_diff(y3, mm(x.to(kBFloat16), w.detach().to(kBFloat16))) == 0.0);
  Tensor y4 = mm(x, w);
  CHECK(amp::cast_cache_stats().hits == 1);
  CHECK(max_diff(y3, y4) == 0.0);
}

TEST_CASE("cast cache keeps no-grad casts apart from grad-requiring uses", "[amp][autocast][cast_cache]") {
  Tensor x = randn({2, 3});
  Tensor w = leaf(randn({3, 2}));
  amp::reset_cast_cache_stats();
  amp::AutocastGuard guard(kFloat16);
  {
    NoGradGuard ng;  // an evaluation pass inside the region
    Tensor e = mm(x, w);
    CHECK_FALSE(e.requires_grad());
    CHECK(amp::cast_cache_stats().misses == 1);
  }
  Tensor y = mm(x, w);  // must not get the graph-less no-grad cast
  CHECK(amp::cast_cache_stats().misses == 2);
  CHECK(amp::cast_cache_stats().hits == 0);
  CHECK(y.requires_grad());
  sum(y).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
  {
    NoGradGuard ng;
    Tensor e = mm(x, w);
    CHECK_FALSE(e.requires_grad());
    CHECK(amp::cast_cache_stats().hits == 1);  // the no-grad entry serves no-grad uses
  }
  CHECK(amp::cast_cache_stats().entries == 2);
}

TEST_CASE("cast cache is cleared at the outermost guard exit and on request", "[amp][autocast][cast_cache]") {
  Tensor x = randn({2, 3});
  Tensor w = leaf(randn({3, 2}));
  amp::reset_cast_cache_stats();
  {
    amp::AutocastGuard outer(kFloat16);
    mm(x, w);
    {
      amp::AutocastGuard inner(kFloat16);
      mm(x, w);
    }
    {
      amp::AutocastGuard off(kFloat16, false);
      mm(x, w);  // not autocast: not cached
    }
    CHECK(amp::cast_cache_stats().entries == 1);
    CHECK(amp::cast_cache_stats().hits == 1);
    amp::clear_cast_cache();
    CHECK(amp::cast_cache_stats().entries == 0);
    mm(x, w);
    CHECK(amp::cast_cache_stats().misses == 2);
    CHECK(amp::cast_cache_stats().entries == 1);
  }
  CHECK(amp::cast_cache_stats().entries == 0);
  // Non-leaf and non-grad tensors pass straight through.
  Tensor plain = randn({3, 2});
  CHECK_FALSE(amp::cached_cast(plain, kFloat16).is_same(amp::cached_cast(plain, kFloat16)));
  CHECK(amp::cast_cache_stats().entries == 0);
  amp::reset_cast_cache_stats();
  CHECK(amp::cast_cache_stats().hits == 0);
  CHECK(amp::cast_cache_stats().misses == 0);
}
