// CUDA vs CPU: fused scaled-dot-product attention forward and backward in every floating dtype (masks, causal, GQA, dropout).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/random.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "test_util.h"

using namespace mpx;

namespace {

Tensor randn_dt(const IntList& shape, DType dt, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64)).to(dt);
}

struct Case {
  std::string name;
  int64_t B, H, Hk, L, S, E, Ev;
  bool causal = false, bool_mask = false, float_mask = false;
  double dropout = 0.0;
};

// Output and the gradients of sum(w * out) on `dev`, everything returned on the CPU.
tensor_list run(const Case& c, DType dt, Device dev) {
  Tensor q = randn_dt({c.B, c.H, c.L, c.E}, dt, 1).to(dev).set_requires_grad(true);
  Tensor k = randn_dt({c.B, c.Hk, c.S, c.E}, dt, 2).to(dev).set_requires_grad(true);
  Tensor v = randn_dt({c.B, c.Hk, c.S, c.Ev}, dt, 3).to(dev).set_requires_grad(true);
  const Tensor w = randn_dt({c.B, c.H, c.L, c.Ev}, dt, 4).to(dev);
  Tensor mask;
  if (c.bool_mask) mask = gt(randn_dt({c.L, c.S}, kFloat64, 5), -0.8).to(dev);
  if (c.float_mask) mask = randn_dt({c.B, 1, c.L, c.S}, kFloat32, 6).to(dev);
  manual_seed(99);
  const Tensor out = scaled_dot_product_attention(q, k, v, mask, c.dropout, c.causal, std::nullopt, c.Hk != c.H);
  CHECK(out.device() == dev);
  const tensor_list g = autograd::grad({sum(out * w)}, {q, k, v});
  return {out.detach().cpu(), g[0].cpu(), g[1].cpu(), g[2].cpu()};
}

}  // namespace

TEST_CASE("CUDA fused attention agrees with the CPU kernels", "[cuda][attention]") {
  if (!testing::cuda_ready()) return;
  const std::vector<Case> cases = {
      {"no mask", 2, 3, 3, 37, 45, 16, 24},
      {"causal", 2, 2, 2, 70, 70, 32, 32, true},
      {"causal L > S", 1, 2, 2, 90, 33, 8, 12, true},
      {"bool mask", 2, 2, 2, 40, 67, 8, 8, false, true},
      {"float mask", 2, 2, 2, 33, 65, 16, 8, false, false, true},
      {"GQA", 1, 6, 2, 35, 35, 64, 64, true},
      {"head dim 100 (the wide kernel)", 1, 1, 1, 20, 30, 100, 72},
      {"dropout", 2, 2, 2, 30, 41, 16, 16, true, false, false, 0.3},
  };
  for (const Case& c : cases)
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      const tensor_list got = run(c, dt, Device::cuda());
      const tensor_list ref = run(c, dt, Device::cpu());
      const char* what[] = {"out", "dq", "dk", "dv"};
      for (int n = 0; n < 4; ++n) {
        INFO(c.name << " " << what[n] << " " << dtype_name(dt) << " rel_err " << testing::rel_err(got[n], ref[n]));
        // Both sides compute in f32 (f64) and round once; the summation orders differ.
        CHECK(testing::rel_err(got[n], ref[n]) < testing::cuda_tolerance(dt) * (dt == kFloat16 ? 4 : 1) +
                                                      (dt == kFloat32 ? 1e-5 : 0.0));
      }
    }
}

TEST_CASE("CUDA fused attention: all-masked rows, empty sizes, heads wider than the kernel", "[cuda][attention]") {
  if (!testing::cuda_ready()) return;
  const Device d = Device::cuda();
  Tensor mask = ones({4, 5}, kBool);
  mask = where(eq(arange(4.0, TensorOptions(kInt64)).reshape({4, 1}), 1.0), zeros({}, kBool), mask);
  const Tensor q = randn_dt({1, 1, 4, 8}, kFloat32, 1), k = randn_dt({1, 1, 5, 8}, kFloat32, 2);
  const Tensor out = scaled_dot_product_attention(q.to(d), k.to(d), k.to(d), mask.to(d)).cpu();
  CHECK(testing::rel_err(out, scaled_dot_product_attention(q, k, k, mask)) < 1e-5);
  CHECK(max(abs(out.select(2, 1))).item<double>() == 0.0);
  const Tensor e = scaled_dot_product_attention(q.to(d), zeros({1, 1, 0, 8}, d), zeros({1, 1, 0, 8}, d)).cpu();
  CHECK(max(abs(e)).item<double>() == 0.0);
  // Heads wider than the kernel's bound run the math path.
  const Tensor wide = randn_dt({1, 1, 3, 300}, kFloat32, 3);
  CHECK(testing::rel_err(scaled_dot_product_attention(wide.to(d), wide.to(d), wide.to(d)).cpu(),
                         scaled_dot_product_attention(wide, wide, wide)) < 1e-5);
}
