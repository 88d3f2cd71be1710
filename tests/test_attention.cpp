// scaled_dot_product_attention: fused kernels against the math path and f64 loops, gradchecks, masks, GQA, dropout, errors, memory.
#include <omp.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/allocator.h"
#include "core/random.h"
#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "ops/backends.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "tests/gradcheck.h"
#include "test_util.h"

using namespace mpx;
using testing::max_abs_diff;
using testing::rel_err;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor randn_f64(const IntList& shape, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64));
}

// Independent f64 reference by loops: q [B, H, L, E], k/v [B, Hk, S, *], mask an additive
// [B, H, L, S] tensor (broadcast already) or undefined. All-masked rows give 0.
Tensor loop_attention(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& mask0, bool causal,
                      double scale) {
  const Tensor q = q0.to(kFloat64).contiguous(), k = k0.to(kFloat64).contiguous(), v = v0.to(kFloat64).contiguous();
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3), Hk = k.size(1), S = k.size(2),
                Ev = v.size(3);
  Tensor mask = mask0.defined() ? mask0.to(kFloat64).expand({B, H, L, S}).contiguous() : Tensor();
  Tensor out = zeros({B, H, L, Ev}, TensorOptions(kFloat64));
  const double *qp = q.data_ptr<double>(), *kp = k.data_ptr<double>(), *vp = v.data_ptr<double>();
  double* op = out.data_ptr<double>();
  std::vector<double> s(S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hk);
      for (int64_t i = 0; i < L; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          double d = 0;
          for (int64_t e = 0; e < E; ++e) d += qp[((b * H + h) * L + i) * E + e] * kp[((b * Hk + hk) * S + j) * E + e];
          d *= scale;
          if (mask.defined()) d += mask.data_ptr<double>()[((b * H + h) * L + i) * S + j];
          if (causal && j > i) d = -INFINITY;
          s[j] = d;
          mx = std::max(mx, d);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t j = 0; j < S; ++j)
          for (int64_t c = 0; c < Ev; ++c)
            op[((b * H + h) * L + i) * Ev + c] += s[j] / sum * vp[((b * Hk + hk) * S + j) * Ev + c];
      }
    }
  return out;
}

struct Config {
  std::string name;
  int64_t B, H, Hk, L, S, E, Ev;
  bool causal = false;
  enum MaskKind { kNone, kBool, kBoolPadding, kAdditive, kAdditiveBroadcast } mask = kNone;
};

std::vector<Config> configs() {
  return {
      {"no mask", 2, 3, 3, 37, 45, 16, 24},
      {"causal L == S", 2, 2, 2, 70, 70, 16, 16, true},
      {"causal L < S", 1, 2, 2, 33, 70, 8, 8, true},
      {"causal L > S", 1, 2, 2, 70, 33, 8, 12, true},
      {"bool mask [L, S]", 2, 2, 2, 40, 67, 8, 8, false, Config::kBool},
      {"bool padding mask [B, 1, 1, S]", 2, 3, 3, 20, 70, 8, 8, false, Config::kBoolPadding},
      {"additive mask [B, H, L, S]", 2, 2, 2, 33, 65, 16, 8, false, Config::kAdditive},
      {"additive mask [1, H, 1, S]", 2, 3, 3, 30, 31, 8, 8, false, Config::kAdditiveBroadcast},
      {"GQA 6 heads on 2, causal", 1, 6, 2, 35, 35, 8, 8, true},
      {"GQA 4 heads on 1, bool mask", 2, 4, 1, 17, 29, 8, 8, false, Config::kBool},
      {"odd sizes E 7, Ev 5", 1, 1, 1, 65, 129, 7, 5},
      {"one query, one key", 1, 2, 2, 1, 1, 3, 2},
      {"long keys, E != Ev", 1, 1, 1, 3, 200, 24, 40, true},
      // A few queries (a token at a time on a key/value cache) take their own kernel on the CPU.
      {"one query on many keys", 2, 4, 4, 1, 70, 16, 16},
      {"two queries, causal L < S", 1, 2, 2, 2, 40, 8, 8, true},
      {"two queries, bool mask [L, S]", 2, 2, 2, 2, 45, 8, 8, false, Config::kBool},
      {"four queries, additive mask [B, H, L, S]", 1, 3, 3, 4, 50, 8, 12, false, Config::kAdditive},
      {"one query, GQA 4 heads on 2, padding mask", 2, 4, 2, 1, 33, 8, 8, false, Config::kBoolPadding},
      {"one query, additive mask [1, H, 1, S], odd sizes", 2, 3, 3, 1, 31, 7, 5, false, Config::kAdditiveBroadcast},
  };
}

Tensor make_mask(const Config& c, uint64_t seed) {
  switch (c.mask) {
    case Config::kNone: return {};
    case Config::kBool: {
      Tensor m = gt(randn_f64({c.L, c.S}, seed), -0.8);
      return m;
    }
    case Config::kBoolPadding: return gt(randn_f64({c.B, 1, 1, c.S}, seed), -1.0);
    case Config::kAdditive: return randn_f64({c.B, c.H, c.L, c.S}, seed);
    case Config::kAdditiveBroadcast: return randn_f64({1, c.H, 1, c.S}, seed);
  }
  return {};
}

// Output and gradients of sum(w * attn(q, k, v)) with w fixed.
tensor_list run(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f, const Tensor& q0,
                const Tensor& k0, const Tensor& v0, const Tensor& w) {
  Tensor q = q0.detach().set_requires_grad(true), k = k0.detach().set_requires_grad(true),
         v = v0.detach().set_requires_grad(true);
  Tensor out = f(q, k, v);
  tensor_list g = autograd::grad({sum(out * w.to(out.dtype()))}, {q, k, v});
  return {out.detach(), g[0], g[1], g[2]};
}

double tol(DType dt) {
  switch (dt) {
    case kFloat64: return 1e-12;
    case kFloat32: return 1e-5;
    case kFloat16: return 2e-3;
    default: return 1.6e-2;
  }
}

// The fused op on q, k, v (one dtype) against the math path in f64 on the same values, both
// drawing dropout from the same seed: out, dq, dk and dv in the inputs' dtype and within its tol.
void check_fused_against_math(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& mask,
                              double p, bool causal, bool gqa) {
  manual_seed(7);
  const tensor_list got = run(
      [&](const Tensor& a, const Tensor& b, const Tensor& c) {
        return scaled_dot_product_attention(a, b, c, mask, p, causal, std::nullopt, gqa);
      },
      q, k, v, w);
  manual_seed(7);
  const tensor_list ref = run(
      [&](const Tensor& a, const Tensor& b, const Tensor& c) {
        return scaled_dot_product_attention_math(a, b, c, mask, p, causal, std::nullopt, gqa);
      },
      q.to(kFloat64), k.to(kFloat64), v.to(kFloat64), w.to(kFloat64));
  const char* what[] = {"out", "dq", "dk", "dv"};
  for (int n = 0; n < 4; ++n) {
    INFO(what[n] << " rel_err " << rel_err(got[n], ref[n]));
    CHECK(got[n].dtype() == q.dtype());
    CHECK(rel_err(got[n], ref[n]) < tol(q.dtype()));
  }
}

}  // namespace

TEST_CASE("the math path equals f64 loops", "[attention]") {
  for (const Config& c : configs()) {
    INFO(c.name);
    const Tensor q = randn_f64({c.B, c.H, c.L, c.E}, 1), k = randn_f64({c.B, c.Hk, c.S, c.E}, 2),
                 v = randn_f64({c.B, c.Hk, c.S, c.Ev}, 3);
    const Tensor mask = make_mask(c, 4);
    const Tensor additive =
        !mask.defined() ? Tensor() : mask.dtype() == kBool ? where(mask, zeros({}, kFloat64), full({}, -INFINITY, kFloat64)) : mask;
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.E));
    const Tensor ref = loop_attention(q, k, v, additive, c.causal, scale);
    const Tensor got = scaled_dot_product_attention_math(q, k, v, mask, 0.0, c.causal, std::nullopt, c.Hk != c.H);
    CHECK(rel_err(got, ref) < 1e-13);
    const Tensor fused = scaled_dot_product_attention(q, k, v, mask, 0.0, c.causal, std::nullopt, c.Hk != c.H);
    CHECK(rel_err(fused, ref) < 1e-13);
  }
}

TEST_CASE("fused forward and backward equal the math path in every floating dtype", "[attention]") {
  for (const Config& c : configs()) {
    for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
      INFO(c.name << " " << dtype_name(dt));
      // Inputs rounded to dt once; the reference runs in f64 on the same values.
      const Tensor q = randn_f64({c.B, c.H, c.L, c.E}, 11).to(dt), k = randn_f64({c.B, c.Hk, c.S, c.E}, 12).to(dt),
                   v = randn_f64({c.B, c.Hk, c.S, c.Ev}, 13).to(dt);
      const Tensor w = randn_f64({c.B, c.H, c.L, c.Ev}, 14).to(dt);
      check_fused_against_math(q, k, v, w, make_mask(c, 15), 0.0, c.causal, c.Hk != c.H);
    }
  }
}

TEST_CASE("inputs of other ranks and strides", "[attention]") {
  // [N, L, E] (3-d), [L, E] (2-d), 5-d, and transposed views ([B, L, H, E] permuted to heads).
  const Tensor q3 = randn_f64({3, 10, 8}, 1), k3 = randn_f64({3, 12, 8}, 2), v3 = randn_f64({3, 12, 4}, 3);
  CHECK(rel_err(scaled_dot_product_attention(q3, k3, v3), scaled_dot_product_attention_math(q3, k3, v3)) < 1e-13);
  CHECK(scaled_dot_product_attention(q3, k3, v3).sizes() == IntList{3, 10, 4});
  const Tensor q2 = q3[0], k2 = k3[0], v2 = v3[0];
  CHECK(rel_err(scaled_dot_product_attention(q2, k2, v2, {}, 0.0, true),
                scaled_dot_product_attention_math(q2, k2, v2, {}, 0.0, true)) < 1e-13);
  const Tensor q5 = randn_f64({2, 2, 3, 10, 8}, 4), k5 = randn_f64({2, 2, 3, 12, 8}, 5), v5 = randn_f64({2, 2, 3, 12, 4}, 6);
  const Tensor m5 = gt(randn_f64({2, 1, 1, 10, 12}, 7), -0.5);
  CHECK(rel_err(scaled_dot_product_attention(q5, k5, v5, m5), scaled_dot_product_attention_math(q5, k5, v5, m5)) < 1e-13);
  const Tensor qt = randn_f64({2, 10, 3, 8}, 8).permute({0, 2, 1, 3}), kt = randn_f64({2, 12, 3, 8}, 9).permute({0, 2, 1, 3}),
               vt = randn_f64({2, 12, 3, 4}, 10).permute({0, 2, 1, 3});
  const Tensor w = randn_f64({2, 3, 10, 4}, 11);
  const tensor_list a = run([](const Tensor& x, const Tensor& y, const Tensor& z) { return scaled_dot_product_attention(x, y, z); },
                            qt, kt, vt, w);
  const tensor_list b = run([](const Tensor& x, const Tensor& y, const Tensor& z) { return scaled_dot_product_attention_math(x, y, z); },
                            qt, kt, vt, w);
  for (int n = 0; n < 4; ++n) CHECK(rel_err(a[n], b[n]) < 1e-13);
  // The same layout in f32 with heads wide enough for the kernels' blocked transposes (rows and
  // head dims that are and are not multiples of 16), causal, against f64 on the same values.
  const Tensor qf = randn_f64({2, 40, 3, 24}, 15).to(kFloat32).permute({0, 2, 1, 3}),
               kf = randn_f64({2, 40, 3, 24}, 16).to(kFloat32).permute({0, 2, 1, 3}),
               vf = randn_f64({2, 40, 3, 40}, 17).to(kFloat32).permute({0, 2, 1, 3});
  const Tensor wf = randn_f64({2, 3, 40, 40}, 18).to(kFloat32);
  const auto causal = [](const Tensor& x, const Tensor& y, const Tensor& z) {
    return scaled_dot_product_attention(x, y, z, {}, 0.0, true);
  };
  const tensor_list af = run(causal, qf, kf, vf, wf);
  const tensor_list bf = run(causal, qf.to(kFloat64), kf.to(kFloat64), vf.to(kFloat64), wf.to(kFloat64));
  for (int n = 0; n < 4; ++n) CHECK(rel_err(af[n], bf[n]) < 1e-5);
  // One query on keys and values that are the first rows of larger buffers (a key/value cache).
  for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
    INFO(dtype_name(dt));
    const Tensor kc = randn_f64({2, 3, 40, 16}, 19).to(dt), vc = randn_f64({2, 3, 40, 16}, 20).to(dt);
    const Tensor q1 = randn_f64({2, 3, 1, 16}, 21).to(dt);
    const Tensor got = scaled_dot_product_attention(q1, kc.narrow(2, 0, 25), vc.narrow(2, 0, 25));
    const Tensor want = scaled_dot_product_attention_math(q1.to(kFloat64), kc.narrow(2, 0, 25).to(kFloat64),
                                                          vc.narrow(2, 0, 25).to(kFloat64));
    CHECK(rel_err(got, want) < tol(dt));
  }
  // A non-unit last stride is copied, not misread.
  const Tensor qs = randn_f64({1, 1, 8, 10}, 12).transpose(-2, -1);
  const Tensor ks = randn_f64({1, 1, 9, 8}, 13), vs = randn_f64({1, 1, 9, 3}, 14);
  CHECK(rel_err(scaled_dot_product_attention(qs, ks, vs), scaled_dot_product_attention_math(qs, ks, vs)) < 1e-13);
  // An explicit scale.
  CHECK(rel_err(scaled_dot_product_attention(q3, k3, v3, {}, 0.0, false, 0.7),
                scaled_dot_product_attention_math(q3, k3, v3, {}, 0.0, false, 0.7)) < 1e-13);
}

TEST_CASE("bf16 at a GPT's layout and sizes: causal, GQA with a mask, dropout, odd row strides", "[attention]") {
  // By default these run on AMX's tiles where the build and the CPU have AMX-BF16, on vdpbf16ps on
  // AMD CPUs with AVX-512-BF16 (P and dS rounded to bf16 before their products), elsewhere and for
  // the odd row stride on the widened f32 kernels; MPX_CPU_ATTENTION_BF16 forces the dot products
  // (where the build has AVX-512-BF16) or the f32 kernels. Each way the result is within bf16
  // rounding of f64 arithmetic on the same values.
  const std::string engine = GENERATE(as<std::string>{}, "default", "dot", "f32");
  struct EnvGuard {
    explicit EnvGuard(const std::string& v) {
      if (v != "default") setenv("MPX_CPU_ATTENTION_BF16", v.c_str(), 1);
    }
    ~EnvGuard() { unsetenv("MPX_CPU_ATTENTION_BF16"); }
  } env(engine);
  INFO("MPX_CPU_ATTENTION_BF16=" << engine << ": " << cpu_attention_backend());
  const auto check = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double p, bool causal,
                        bool gqa) {
    const Tensor w = randn_f64({q.size(0), q.size(1), q.size(2), v.size(3)}, 40).to(kBFloat16);
    check_fused_against_math(q, k, v, w, mask, p, causal, gqa);
  };
  // q, k, v as a GPT splits them: views of one [B, T, 3, H, E] projection, heads permuted in.
  const Tensor qkv = randn_f64({2, 150, 3, 2, 64}, 41).to(kBFloat16);
  const auto head = [&](int64_t i) { return qkv.select(2, i).permute({0, 2, 1, 3}); };
  SECTION("causal self-attention, T = 150") { check(head(0), head(1), head(2), {}, 0.0, true, false); }
  SECTION("causal, dropout 0.2") { check(head(0), head(1), head(2), {}, 0.2, true, false); }
  SECTION("T = 128, keys and values read in place") {
    const auto first = [&](int64_t i) { return head(i).narrow(2, 0, 128); };
    check(first(0), first(1), first(2), {}, 0.0, true, false);
    check(first(0), first(1), first(2), {}, 0.0, false, false);
  }
  SECTION("4 heads on 2, an additive mask, 97 keys, E = 32, Ev = 48") {
    const Tensor q = randn_f64({1, 4, 70, 32}, 42).to(kBFloat16), k = randn_f64({1, 2, 97, 32}, 43).to(kBFloat16),
                 v = randn_f64({1, 2, 97, 48}, 44).to(kBFloat16);
    check(q, k, v, randn_f64({1, 4, 70, 97}, 45), 0.0, false, true);
  }
  SECTION("an odd row stride (the f32 kernels take it)") {
    const Tensor q = randn_f64({2, 2, 33, 65}, 46).to(kBFloat16).narrow(3, 0, 64);
    check(q, head(1).narrow(2, 0, 40), head(2).narrow(2, 0, 40), {}, 0.0, false, false);
  }
}

TEST_CASE("fused attention gives the same bits on any thread count", "[attention]") {
  // Each task writes outputs of its own, whatever the split of tasks over threads.
  for (DType dt : {kFloat32, kBFloat16}) {
    INFO(dtype_name(dt));
    const Tensor qkv = randn_f64({3, 150, 3, 2, 64}, 51).to(dt);
    const auto head = [&](int64_t i) { return qkv.select(2, i).permute({0, 2, 1, 3}); };
    const Tensor w = randn_f64({3, 2, 150, 64}, 52).to(dt);
    const auto f = [](const Tensor& a, const Tensor& b, const Tensor& c) {
      return scaled_dot_product_attention(a, b, c, {}, 0.0, true);
    };
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const tensor_list one = run(f, head(0), head(1), head(2), w);
    omp_set_num_threads(3);
    const tensor_list three = run(f, head(0), head(1), head(2), w);
    omp_set_num_threads(saved);
    for (int n = 0; n < 4; ++n) {
      const Tensor a = one[n].contiguous(), b = three[n].contiguous();
      CHECK(std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.numel()) * a.element_size()) == 0);
    }
  }
}

TEST_CASE("f64 gradchecks of the public op: causal, bool and additive masks, GQA, dropout", "[attention][gradcheck]") {
  using testing::gradcheck;
  using testing::leaf;
  manual_seed(3);
  const Tensor q = leaf({1, 2, 5, 3}), k = leaf({1, 2, 6, 3}), v = leaf({1, 2, 6, 2});
  CHECK(gradcheck([](const tensor_list& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, true); },
                  {q, k, v}) == "");
  const Tensor bmask = gt(randn_f64({5, 6}, 4), -0.7);
  CHECK(gradcheck([&](const tensor_list& x) { return scaled_dot_product_attention(x[0], x[1], x[2], bmask); },
                  {q, k, v}) == "");
  const Tensor amask = randn_f64({1, 2, 5, 6}, 5);
  CHECK(gradcheck([&](const tensor_list& x) { return scaled_dot_product_attention(x[0], x[1], x[2], amask); },
                  {q, k, v}) == "");
  // A mask that requires grad (the math path) gets its gradient too.
  const Tensor amask_leaf = amask.detach().set_requires_grad(true);
  CHECK(gradcheck([](const tensor_list& x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]); },
                  {q, k, v, amask_leaf}) == "");
  const Tensor qg = leaf({1, 4, 4, 3}), kg = leaf({1, 2, 5, 3}), vg = leaf({1, 2, 5, 2});
  CHECK(gradcheck([](const tensor_list& x) {
          return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, true, std::nullopt, true);
        },
                  {qg, kg, vg}) == "");
  // Dropout: the same seed before every evaluation draws the same mask.
  CHECK(gradcheck([](const tensor_list& x) {
          manual_seed(77);
          return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.3, false, 0.5);
        },
                  {q, k, v}) == "");
  // Two queries (the few-query forward): causal, a bool mask, dropout.
  const Tensor q2 = leaf({1, 2, 2, 3});
  CHECK(gradcheck([](const tensor_list& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, true); },
                  {q2, k, v}) == "");
  const Tensor bmask2 = gt(randn_f64({2, 6}, 6), -0.7);
  CHECK(gradcheck([&](const tensor_list& x) { return scaled_dot_product_attention(x[0], x[1], x[2], bmask2); },
                  {q2, k, v}) == "");
  CHECK(gradcheck([](const tensor_list& x) {
          manual_seed(78);
          return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.3);
        },
                  {q2, k, v}) == "");
}

TEST_CASE("the math path has second derivatives, the fused one says where to get them", "[attention][gradcheck]") {
  manual_seed(5);
  const Tensor q = testing::leaf({1, 1, 3, 2}), k = testing::leaf({1, 1, 4, 2}), v = testing::leaf({1, 1, 4, 2});
  CHECK(testing::gradgradcheck([](const tensor_list& x) { return scaled_dot_product_attention_math(x[0], x[1], x[2], {}, 0.0, true); },
                               {q, k, v}) == "");
  Tensor out = scaled_dot_product_attention(q, k, v);
  // A create_graph pass itself works (first order); differentiating it again is the error.
  tensor_list g = autograd::grad({sum(out * out)}, {q}, {}, true, true);
  CHECK(rel_err(g[0], autograd::grad({sum(scaled_dot_product_attention_math(q, k, v).pow(2.0))}, {q})[0]) < 1e-12);
  CHECK_THROWS_WITH(autograd::grad({sum(g[0])}, {q, k, v}, {}, std::nullopt, false, true),
                    Catch::Contains("scaled_dot_product_attention_math"));
}

TEST_CASE("dropout: fused and math paths draw the same mask from the same generator state", "[attention]") {
  for (int64_t L : {19, 2})  // 2: the few-query forward
  for (bool causal : {false, true}) {
    INFO("L " << L << ", causal " << causal);
    const Tensor q = randn_f64({2, 2, L, 8}, 1), k = randn_f64({2, 2, 23, 8}, 2), v = randn_f64({2, 2, 23, 8}, 3);
    const Tensor w = randn_f64({2, 2, L, 8}, 4);
    const Tensor mask = causal ? Tensor() : gt(randn_f64({L, 23}, 5), -1.0);
    manual_seed(123);
    const tensor_list a = run(
        [&](const Tensor& x, const Tensor& y, const Tensor& z) {
          return scaled_dot_product_attention(x, y, z, mask, 0.25, causal);
        },
        q, k, v, w);
    const uint64_t after_fused = random::default_generator().offset();
    manual_seed(123);
    const tensor_list b = run(
        [&](const Tensor& x, const Tensor& y, const Tensor& z) {
          return scaled_dot_product_attention_math(x, y, z, mask, 0.25, causal);
        },
        q, k, v, w);
    CHECK(random::default_generator().offset() == after_fused);
    for (int n = 0; n < 4; ++n) CHECK(rel_err(a[n], b[n]) < 1e-13);
    // And dropout really drops: the result differs from p = 0.
    CHECK(rel_err(a[0], scaled_dot_product_attention(q, k, v, mask, 0.0, causal)) > 1e-3);
  }
  // p = 1 drops everything.
  const Tensor q = randn_f64({1, 1, 4, 2}, 1);
  CHECK(max(abs(scaled_dot_product_attention(q, q, q, {}, 1.0))).item<double>() == 0.0);
}

TEST_CASE("a row with every key masked gives 0 and zero gradients on both paths", "[attention]") {
  Tensor mask = gt(randn_f64({6, 7}, 1), -1.0).to(kFloat64);
  {
    double* p = mask.data_ptr<double>();
    for (int j = 0; j < 7; ++j) p[2 * 7 + j] = 0.0;  // query 2 sees nothing
  }
  const Tensor bmask = gt(mask, 0.5);
  const Tensor fmask = where(bmask, zeros({}, kFloat64), full({}, -INFINITY, kFloat64));
  for (const Tensor& m : {bmask, fmask}) {
    for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
      INFO(dtype_name(dt) << (m.dtype() == kBool ? " bool" : " additive"));
      const Tensor q = randn_f64({1, 2, 6, 4}, 2).to(dt), k = randn_f64({1, 2, 7, 4}, 3).to(dt),
                   v = randn_f64({1, 2, 7, 4}, 4).to(dt), w = randn_f64({1, 2, 6, 4}, 5).to(dt);
      const tensor_list a = run([&](const Tensor& x, const Tensor& y, const Tensor& z) { return scaled_dot_product_attention(x, y, z, m); },
                                q, k, v, w);
      const tensor_list b = run([&](const Tensor& x, const Tensor& y, const Tensor& z) { return scaled_dot_product_attention_math(x, y, z, m); },
                                q.to(kFloat64), k.to(kFloat64), v.to(kFloat64), w.to(kFloat64));
      for (int n = 0; n < 4; ++n) {
        CHECK(a[n].all_finite());
        CHECK(b[n].all_finite());
        CHECK(rel_err(a[n], b[n]) < tol(dt));
      }
      CHECK(max(abs(a[0].select(2, 2))).item<double>() == 0.0);
      CHECK(max(abs(a[1].select(2, 2))).item<double>() == 0.0);
    }
  }
  // No key at all (S = 0): zeros, as every row is fully masked.
  const Tensor q = randn_f64({1, 1, 3, 4}, 1), k = zeros({1, 1, 0, 4}, kFloat64), v = zeros({1, 1, 0, 5}, kFloat64);
  const Tensor out = scaled_dot_product_attention(q, k, v);
  CHECK(out.sizes() == IntList{1, 1, 3, 5});
  CHECK(max(abs(out)).item<double>() == 0.0);
  // No heads at all.
  CHECK(scaled_dot_product_attention(zeros({2, 0, 3, 4}, kFloat64), zeros({2, 0, 5, 4}, kFloat64),
                                     zeros({2, 0, 5, 6}, kFloat64))
            .sizes() == IntList{2, 0, 3, 6});
  // No query (L = 0): an empty result and zero key gradients.
  const Tensor q0 = zeros({1, 1, 0, 4}, kFloat64).set_requires_grad(true), k0 = randn_f64({1, 1, 3, 4}, 2).set_requires_grad(true);
  const Tensor o0 = scaled_dot_product_attention(q0, k0, k0);
  CHECK(o0.sizes() == IntList{1, 1, 0, 4});
  const tensor_list g0 = autograd::grad({sum(o0)}, {k0}, {}, std::nullopt, false, true);
  CHECK((!g0[0].defined() || max(abs(g0[0])).item<double>() == 0.0));
}

TEST_CASE("bad arguments are clear errors", "[attention][errors]") {
  const Tensor q = randn_f64({2, 4, 5, 8}, 1), k = randn_f64({2, 4, 6, 8}, 2), v = randn_f64({2, 4, 6, 3}, 3);
  auto sdpa = [](auto&&... a) { return scaled_dot_product_attention(a...); };
  CHECK_THROWS_WITH(sdpa(q, randn_f64({2, 4, 6, 7}, 4), v), Catch::Contains("key's last dim"));
  CHECK_THROWS_WITH(sdpa(q, k, randn_f64({2, 4, 7, 3}, 4)), Catch::Contains("as many rows as key"));
  CHECK_THROWS_WITH(sdpa(q, randn_f64({3, 4, 6, 8}, 4), randn_f64({3, 4, 6, 3}, 4)), Catch::Contains("batch dims"));
  CHECK_THROWS_WITH(sdpa(q, k.to(kFloat32), v), Catch::Contains("one floating dtype"));
  CHECK_THROWS_WITH(sdpa(q.to(kInt64), k.to(kInt64), v.to(kInt64)), Catch::Contains("floating"));
  CHECK_THROWS_WITH(sdpa(q, k[0], v[0]), Catch::Contains("same number"));
  CHECK_THROWS_WITH(sdpa(q[0][0][0], k[0][0][0], v[0][0][0]), Catch::Contains(">= 2"));
  // Masks: dtype, shape, and with is_causal.
  CHECK_THROWS_WITH(sdpa(q, k, v, ones({5, 6}, kInt64)), Catch::Contains("attn_mask must be bool"));
  CHECK_THROWS_WITH(sdpa(q, k, v, ones({5, 7}, kBool)), Catch::Contains("does not broadcast"));
  CHECK_THROWS_WITH(sdpa(q, k, v, ones({3, 4, 5, 6}, kBool)), Catch::Contains("does not broadcast"));
  CHECK_THROWS_WITH(sdpa(q, k, v, ones({5, 6}, kBool), 0.0, true), Catch::Contains("is_causal"));
  // Grouped-query attention: only with enable_gqa, and only with dividing head counts.
  const Tensor k2 = randn_f64({2, 2, 6, 8}, 5), v2 = randn_f64({2, 2, 6, 3}, 6);
  CHECK_THROWS_WITH(sdpa(q, k2, v2), Catch::Contains("enable_gqa"));
  CHECK_NOTHROW(sdpa(q, k2, v2, Tensor(), 0.0, false, std::nullopt, true));
  const Tensor k3 = randn_f64({2, 3, 6, 8}, 5), v3 = randn_f64({2, 3, 6, 3}, 6);
  CHECK_THROWS_WITH(sdpa(q, k3, v3, Tensor(), 0.0, false, std::nullopt, true), Catch::Contains("multiple"));
  CHECK_THROWS_WITH(sdpa(q, k2, v, Tensor(), 0.0, false, std::nullopt, true), Catch::Contains("same batch and head dims"));
  CHECK_THROWS_WITH(sdpa(q, k, v, Tensor(), 1.5), Catch::Contains("dropout_p"));
  CHECK_THROWS_WITH(sdpa(Tensor(), k, v), Catch::Contains("defined"));
}

TEST_CASE("autocast: f32 inputs run in bf16, a float mask in f32", "[attention][autocast]") {
  const Tensor q = randn_f64({1, 2, 9, 8}, 1).to(kFloat32), k = randn_f64({1, 2, 9, 8}, 2).to(kFloat32),
               v = randn_f64({1, 2, 9, 8}, 3).to(kFloat32);
  const Tensor mask = randn_f64({9, 9}, 4).to(kFloat32);
  Tensor out;
  {
    amp::AutocastGuard guard(kBFloat16);
    out = scaled_dot_product_attention(q, k, v, mask);
  }
  CHECK(out.dtype() == kBFloat16);
  const Tensor ref = scaled_dot_product_attention_math(q.to(kBFloat16).to(kFloat64), k.to(kBFloat16).to(kFloat64),
                                                       v.to(kBFloat16).to(kFloat64), mask.to(kFloat64));
  CHECK(rel_err(out, ref) < 1.6e-2);
  // Gradients flow back to the f32 leaves in f32.
  const Tensor ql = q.detach().set_requires_grad(true);
  {
    amp::AutocastGuard guard(kBFloat16);
    out = scaled_dot_product_attention(ql, k, v, {}, 0.0, true);
  }
  sum(out).backward();
  CHECK(ql.grad().dtype() == kFloat32);
}

TEST_CASE("memory is O(T): forward and backward at T = 4096 never hold a T x T matrix", "[attention][memory]") {
  const int64_t T = 4096, E = 16;
  const Tensor q = randn_f64({1, 1, T, E}, 1).to(kFloat32).set_requires_grad(true);
  const Tensor k = randn_f64({1, 1, T, E}, 2).to(kFloat32).set_requires_grad(true);
  const Tensor v = randn_f64({1, 1, T, E}, 3).to(kFloat32).set_requires_grad(true);
  const Tensor w = randn_f64({1, 1, T, E}, 4).to(kFloat32);
  const int64_t before = cpu::memory_stats().allocated;
  cpu::reset_peak_memory_stats();
  Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  sum(out * w).backward();
  const int64_t extra = cpu::memory_stats().peak_allocated - before;
  INFO("peak extra bytes " << extra << " against T * T * 4 = " << T * T * 4);
  CHECK(extra < 4 * T * E * 4 * 8);  // a few copies of the [T, E] operands and gradients
  CHECK(extra * 16 < T * T * 4);
  CHECK(q.grad().all_finite());
}

// GPT-2's layout: q, k and v are split from one [B, T, 3C] projection and viewed as heads. The fused
// backward then writes their gradients into one buffer laid out like the projection, and the
// split's backward takes it whole: no concatenation, the same values as separate heads give.
TEST_CASE("after a GPT-style q/k/v split the gradients reach the projection without a copy", "[attention][profiler]") {
  const int64_t B = 2, T = 37, H = 3, D = 16, C = H * D;
  for (DType dt : {kFloat32, kBFloat16}) {
    INFO(dtype_name(dt));
    const Tensor x = randn_f64({B, T, 3 * C}, 50).to(dt).set_requires_grad(true);
    const Tensor w = randn_f64({B, H, T, D}, 51).to(dt);
    const tensor_list parts = split(x, C, 2);
    const auto heads = [&](const Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
    const Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), {}, 0.0, true);
    CHECK(testing::kernel_calls("copy", [&] { y.backward(w); }) == 0);
    // The same attention on three separate contiguous heads, their gradients concatenated.
    tensor_list sep;
    for (const auto& p : parts) sep.push_back(heads(p).detach().contiguous().set_requires_grad(true));
    scaled_dot_product_attention(sep[0], sep[1], sep[2], {}, 0.0, true).backward(w);
    tensor_list g;
    for (const auto& s : sep) g.push_back(s.grad().transpose(1, 2).reshape({B, T, C}));
    const Tensor want = cat(g, 2);
    REQUIRE(x.grad().sizes() == want.sizes());
    CHECK(max_abs_diff(x.grad(), want) == 0.0);
  }
}

// Kernels may build per-shape plans (cuDNN's on CUDA) for recorded calls only: a training loop's shapes repeat,
// sampling's lengths change every token.
namespace {
bool g_recorded = false;
kernels::SdpaFn g_cpu_sdpa = nullptr;
void spy_sdpa(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& mask, const kernels::SdpaParams& p) {
  g_recorded = p.recorded;
  g_cpu_sdpa(out, lse, q, k, v, mask, p);
}
}  // namespace

TEST_CASE("the fused kernel is told whether its call is recorded for a backward", "[attention]") {
  g_cpu_sdpa = reinterpret_cast<kernels::SdpaFn>(dispatch::find_kernel(OpId::sdpa_fused, DeviceType::kCPU, kFloat32));
  REQUIRE(g_cpu_sdpa != nullptr);
  dispatch::detail::register_raw(OpId::sdpa_fused, DeviceType::kCPU, kFloat32, reinterpret_cast<void*>(&spy_sdpa));
  const Tensor x = testing::seeded_randn({1, 2, 9, 8}, kFloat32, 1);
  const Tensor w = x.detach().set_requires_grad(true);
  scaled_dot_product_attention(w, x, x, {}, 0.0, true);
  CHECK(g_recorded);
  scaled_dot_product_attention(x, x, x, {}, 0.0, true);  // nothing requires a gradient
  CHECK(!g_recorded);
  {
    NoGradGuard ng;  // as when sampling text
    scaled_dot_product_attention(w, w, w, {}, 0.0, true);
    CHECK(!g_recorded);
  }
  dispatch::detail::register_raw(OpId::sdpa_fused, DeviceType::kCPU, kFloat32, reinterpret_cast<void*>(g_cpu_sdpa));
}
