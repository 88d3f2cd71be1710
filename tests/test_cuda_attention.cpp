// CUDA vs CPU: fused scaled-dot-product attention forward and backward in every floating dtype (masks, causal, GQA, dropout).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/cuda.h"
#include "core/random.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "test_util.h"

using namespace mpx;

namespace {

struct Case {
  std::string name;
  int64_t B, H, Hk, L, S, E, Ev;
  bool causal = false, bool_mask = false, float_mask = false;
  double dropout = 0.0;
};

// Output and the gradients of sum(w * out) on `dev`, everything returned on the CPU.
tensor_list run(const Case& c, DType dt, Device dev) {
  Tensor q = testing::seeded_randn({c.B, c.H, c.L, c.E}, dt, 1).to(dev).set_requires_grad(true);
  Tensor k = testing::seeded_randn({c.B, c.Hk, c.S, c.E}, dt, 2).to(dev).set_requires_grad(true);
  Tensor v = testing::seeded_randn({c.B, c.Hk, c.S, c.Ev}, dt, 3).to(dev).set_requires_grad(true);
  const Tensor w = testing::seeded_randn({c.B, c.H, c.L, c.Ev}, dt, 4).to(dev);
  Tensor mask;
  if (c.bool_mask) mask = gt(testing::seeded_randn({c.L, c.S}, kFloat64, 5), -0.8).to(dev);
  if (c.float_mask) mask = testing::seeded_randn({c.B, 1, c.L, c.S}, kFloat32, 6).to(dev);
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
      // f16/bf16 below run the Tensor-Core (flash) kernels: several tiles each way, the widest head they take.
      {"head dim 128, causal, three tiles", 1, 2, 2, 150, 150, 128, 128, true},
      {"GQA with dropout, S = 129", 1, 2, 1, 130, 129, 64, 64, false, false, false, 0.2},
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

// GPT-2's layout: heads viewed out of one [B, T, 3C] projection, so q, k and v have strided rows.
TEST_CASE("CUDA fused attention on GPT-2's split heads agrees with the CPU", "[cuda][attention]") {
  if (!testing::cuda_ready()) return;
  const int64_t B = 2, T = 77, H = 3, D = 64, C = H * D;
  for (DType dt : {kFloat16, kBFloat16}) {
    tensor_list res[2];
    for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
      const Device dev = on_gpu ? Device::cuda() : Device::cpu();
      const Tensor x = testing::seeded_randn({B, T, 3 * C}, dt, 7).to(dev).set_requires_grad(true);
      const Tensor w = testing::seeded_randn({B, H, T, D}, dt, 8).to(dev);
      auto head = [&](int n) { return x.narrow(2, n * C, C).reshape({B, T, H, D}).transpose(1, 2); };
      const Tensor out = scaled_dot_product_attention(head(0), head(1), head(2), {}, 0.0, true);
      res[on_gpu] = {out.detach().cpu(), autograd::grad({sum(out * w)}, {x})[0].cpu()};
    }
    INFO(dtype_name(dt));
    CHECK(testing::rel_err(res[1][0], res[0][0]) < testing::cuda_tolerance(dt) * 4);
    CHECK(testing::rel_err(res[1][1], res[0][1]) < testing::cuda_tolerance(dt) * 4);
  }
}

// The fused kernels keep O(T) state: at T = 8192 the T x T f16 scores alone would be 128 MiB.
TEST_CASE("CUDA fused attention's memory is O(T)", "[cuda][attention][memory]") {
  if (!testing::cuda_ready()) return;
  const int64_t T = 8192, E = 64;
  const Device d = Device::cuda();
  for (DType dt : {kFloat16, kFloat32}) {
    INFO(dtype_name(dt));
    const Tensor q = testing::seeded_randn({1, 1, T, E}, dt, 1).to(d).set_requires_grad(true);
    const Tensor k = testing::seeded_randn({1, 1, T, E}, dt, 2).to(d).set_requires_grad(true);
    const Tensor v = testing::seeded_randn({1, 1, T, E}, dt, 3).to(d).set_requires_grad(true);
    const Tensor w = testing::seeded_randn({1, 1, T, E}, dt, 4).to(d);
    cuda::synchronize();
    const int64_t before = cuda::memory_stats().allocated;
    cuda::reset_peak_memory_stats();
    const Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    sum(out * w).backward();
    cuda::synchronize();
    const int64_t extra = cuda::memory_stats().peak_allocated - before;
    INFO("peak extra bytes " << extra << " against T * T * 2 = " << T * T * 2);
    // A few copies of the [T, E] operands and gradients.
    CHECK(extra < 16 * T * E * static_cast<int64_t>(element_size(dt)));
    CHECK(q.grad().all_finite());
  }
}

TEST_CASE("CUDA fused attention: all-masked rows, empty sizes, heads wider than the kernel", "[cuda][attention]") {
  if (!testing::cuda_ready()) return;
  const Device d = Device::cuda();
  Tensor mask = ones({4, 5}, kBool);
  mask = where(eq(arange(4.0, TensorOptions(kInt64)).reshape({4, 1}), 1.0), zeros({}, kBool), mask);
  const Tensor q = testing::seeded_randn({1, 1, 4, 8}, kFloat32, 1);
  const Tensor k = testing::seeded_randn({1, 1, 5, 8}, kFloat32, 2);
  const Tensor out = scaled_dot_product_attention(q.to(d), k.to(d), k.to(d), mask.to(d)).cpu();
  CHECK(testing::rel_err(out, scaled_dot_product_attention(q, k, k, mask)) < 1e-5);
  CHECK(max(abs(out.select(2, 1))).item<double>() == 0.0);
  const Tensor e = scaled_dot_product_attention(q.to(d), zeros({1, 1, 0, 8}, d), zeros({1, 1, 0, 8}, d)).cpu();
  CHECK(max(abs(e)).item<double>() == 0.0);
  // Heads wider than the kernel's bound run the math path.
  const Tensor wide = testing::seeded_randn({1, 1, 3, 300}, kFloat32, 3);
  CHECK(testing::rel_err(scaled_dot_product_attention(wide.to(d), wide.to(d), wide.to(d)).cpu(),
                         scaled_dot_product_attention(wide, wide, wide)) < 1e-5);
}
