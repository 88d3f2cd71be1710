// The Tensor-Core flash-attention kernel bodies run on CPU fibers under a WMMA emulation, against the CPU op:
// their tiling, masks, online softmax, dropout and staging are checked on machines without a GPU.
#include <catch2/catch.hpp>

#include "warp_threads.h"
#include "mma.h"
// After the two shims: the kernel bodies see threadIdx, barriers, shuffles and WMMA.
#include "ops/cuda/flash_attention.cuh"

#include "autograd/engine.h"
#include "core/random.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "test_util.h"

using namespace mpx;
namespace flash = mpx::cuda::flash;

namespace {

Tensor rnd(const IntList& shape, DType dt, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64)).to(dt);
}

struct Case {
  const char* name;
  int64_t B, H, Hk, L, S, E, Ev;
  bool causal = false, bool_mask = false, float_mask = false;
  double dropout = 0.0;
  bool gpt_split = false;  // q, k, v as heads of one [B, L, 3 H E] projection (strided rows)
};

// The flash forward and backward of one case in T, against the CPU op on the same inputs (same dropout stream).
template <typename T, int D>
void check_case(const Case& c, DType dt) {
  Tensor q, k, v;
  if (c.gpt_split) {
    const int64_t C = c.H * c.E;
    const Tensor x = rnd({c.B, c.L, 3 * C}, dt, 1);
    q = x.narrow(2, 0, C).reshape({c.B, c.L, c.H, c.E}).transpose(1, 2);
    k = x.narrow(2, C, C).reshape({c.B, c.L, c.H, c.E}).transpose(1, 2);
    v = x.narrow(2, 2 * C, C).reshape({c.B, c.L, c.H, c.E}).transpose(1, 2);
  } else {
    q = rnd({c.B, c.H, c.L, c.E}, dt, 1);
    k = rnd({c.B, c.Hk, c.S, c.E}, dt, 2);
    v = rnd({c.B, c.Hk, c.S, c.Ev}, dt, 3);
  }
  const Tensor w = rnd({c.B, c.H, c.L, c.Ev}, dt, 4);
  Tensor mask, additive;
  if (c.bool_mask) {
    mask = gt(rnd({c.L, c.S}, kFloat64, 5), -0.8);
    additive = where(mask, zeros({}, kFloat32), full({}, -INFINITY, TensorOptions(kFloat32)));
  }
  if (c.float_mask) additive = mask = rnd({c.B, 1, c.L, c.S}, kFloat32, 6);

  const Tensor qr = q.detach().set_requires_grad(true), kr = k.detach().set_requires_grad(true),
               vr = v.detach().set_requires_grad(true);
  manual_seed(99);
  const Tensor ref = scaled_dot_product_attention(qr, kr, vr, mask, c.dropout, c.causal, std::nullopt, c.Hk != c.H);
  const tensor_list rg = autograd::grad({sum(ref * w)}, {qr, kr, vr});

  cuda::SdpaGeom g;
  g.B = c.B, g.H = c.H, g.Hk = c.Hk, g.L = c.L, g.S = c.S, g.E = c.E, g.Ev = c.Ev;
  for (int d = 0; d < 4; ++d) g.sq[d] = q.stride(d), g.sk[d] = k.stride(d), g.sv[d] = v.stride(d);
  if (additive.defined()) {
    additive = additive.expand({c.B, c.H, c.L, c.S});
    for (int d = 0; d < 4; ++d) g.sm[d] = additive.stride(d);
  }
  g.scale = 1.0 / std::sqrt(static_cast<double>(c.E));
  g.dropout_p = c.dropout, g.causal = c.causal, g.seed = 99, g.offset = 0;  // the op's first draw after manual_seed(99)

  const Tensor out = zeros({c.B, c.H, c.L, c.Ev}, dt), lse = zeros({c.B, c.H, c.L}, kFloat32);
  const Tensor dq = zeros({c.B, c.H, c.L, c.E}, dt), dk = zeros({c.B, c.Hk, c.S, c.E}, dt);
  const Tensor dv = zeros({c.B, c.Hk, c.S, c.Ev}, dt), rowdot = zeros({c.B, c.H, c.L}, kFloat32);
  flash::Args<T> a;
  a.g = g;
  a.q = static_cast<const T*>(q.raw_data()), a.k = static_cast<const T*>(k.raw_data());
  a.v = static_cast<const T*>(v.raw_data());
  a.out = static_cast<T*>(out.raw_data()), a.lse_out = static_cast<float*>(lse.raw_data());
  a.mask = additive.defined() ? static_cast<const float*>(additive.raw_data()) : nullptr;
  a.vec = c.E % 8 == 0 && c.Ev % 8 == 0;  // the CPU allocator's buffers are 64-byte aligned
  for (int d = 0; d < 3; ++d) a.vec = a.vec && g.sq[d] % 8 == 0 && g.sk[d] % 8 == 0 && g.sv[d] % 8 == 0;
  const unsigned q_tiles = static_cast<unsigned>((c.L + flash::kRows - 1) / flash::kRows);
  const unsigned k_tiles = static_cast<unsigned>((c.S + flash::kRows - 1) / flash::kRows);
  cuda_emu::launch(c.B * c.H, q_tiles, flash::kThreads, flash::forward_smem<T, D>(),
                   [&](unsigned char* s) { flash::forward_body<T, D>(a, s); });
  const Tensor wc = w.contiguous();
  a.o = static_cast<const T*>(out.raw_data()), a.dout = static_cast<const T*>(wc.raw_data());
  a.lse = static_cast<const float*>(lse.raw_data()), a.rowdot = static_cast<float*>(rowdot.raw_data());
  a.dq = static_cast<T*>(dq.raw_data()), a.dk = static_cast<T*>(dk.raw_data()), a.dv = static_cast<T*>(dv.raw_data());
  cuda_emu::launch(c.B * c.H, q_tiles, flash::kThreads, flash::dq_smem<T, D>(),
                   [&](unsigned char* s) { flash::dq_body<T, D>(a, s); });
  cuda_emu::launch(c.B * c.Hk, k_tiles, flash::kThreads, flash::dkdv_smem<T, D>(),
                   [&](unsigned char* s) { flash::dkdv_body<T, D>(a, s); });

  const Tensor got[] = {out, dq, dk, dv};
  const Tensor want[] = {ref.detach(), rg[0], rg[1], rg[2]};
  const char* what[] = {"out", "dq", "dk", "dv"};
  for (int n = 0; n < 4; ++n) {
    INFO(c.name << " " << what[n] << " " << dtype_name(dt) << " head dims padded to " << D << ", 16-byte staging "
                << a.vec << ", rel_err " << testing::rel_err(got[n], want[n]));
    // The [cuda] test's bound: P and dS are rounded to the input type before their products.
    CHECK(testing::rel_err(got[n], want[n]) < testing::cuda_tolerance(dt) * (dt == kFloat16 ? 4 : 1));
  }
}

template <typename T>
void check_padded(const Case& c, DType dt) {
  const int64_t hd = std::max(c.E, c.Ev);
  if (hd <= 32) check_case<T, 32>(c, dt);
  else if (hd <= 64) check_case<T, 64>(c, dt);
  else check_case<T, 128>(c, dt);
}

}  // namespace

TEST_CASE("flash attention kernels, emulated on the CPU, agree with the CPU op", "[attention][emulated]") {
  const Case cases[] = {
      {"no mask, E != Ev", 2, 3, 3, 37, 45, 16, 24},
      {"causal", 2, 2, 2, 70, 70, 32, 32, true},
      {"causal L > S, unaligned rows", 1, 2, 2, 90, 33, 8, 12, true},
      {"bool mask", 2, 2, 2, 40, 67, 8, 8, false, true},
      {"float mask", 2, 2, 2, 33, 65, 16, 8, false, false, true},
      {"GQA", 1, 6, 2, 35, 35, 64, 64, true},
      {"head dims 100 and 72", 1, 1, 1, 20, 30, 100, 72},
      {"dropout", 2, 2, 2, 30, 41, 16, 16, true, false, false, 0.3},
      {"head dim 128, causal, three tiles", 1, 2, 2, 150, 150, 128, 128, true},
      {"GPT-2 split heads", 2, 3, 3, 77, 77, 64, 64, true, false, false, 0.0, true},
      {"GQA with dropout, S = 129", 1, 2, 1, 130, 129, 64, 64, false, false, false, 0.2},
  };
  for (const Case& c : cases) {
    check_padded<__half>(c, kFloat16);
    check_padded<__nv_bfloat16>(c, kBFloat16);
  }
}

TEST_CASE("flash attention kernels, emulated: a row whose keys are all masked gives 0 and lse -inf",
          "[attention][emulated]") {
  // Query 1 sees no key; the others see all.
  const Tensor q = rnd({1, 1, 4, 8}, kFloat16, 1), k = rnd({1, 1, 5, 8}, kFloat16, 2);
  Tensor additive = zeros({4, 5}, kFloat32);
  additive.select(0, 1).fill_(-INFINITY);
  cuda::SdpaGeom g;
  g.B = g.H = g.Hk = 1, g.L = 4, g.S = 5, g.E = g.Ev = 8;
  for (int d = 0; d < 4; ++d) g.sq[d] = q.stride(d), g.sk[d] = k.stride(d), g.sv[d] = k.stride(d);
  g.sm[0] = g.sm[1] = 0, g.sm[2] = 5, g.sm[3] = 1;
  g.scale = 0.5;
  const Tensor out = full({1, 1, 4, 8}, 7.0, TensorOptions(kFloat16)), lse = zeros({1, 1, 4}, kFloat32);
  flash::Args<__half> a;
  a.g = g;
  a.q = static_cast<const __half*>(q.raw_data()), a.k = a.v = static_cast<const __half*>(k.raw_data());
  a.out = static_cast<__half*>(out.raw_data()), a.lse_out = static_cast<float*>(lse.raw_data());
  a.mask = static_cast<const float*>(additive.raw_data());
  cuda_emu::launch(1, 1, flash::kThreads, flash::forward_smem<__half, 32>(),
                   [&](unsigned char* s) { flash::forward_body<__half, 32>(a, s); });
  CHECK(max(abs(out.select(2, 1))).item<double>() == 0.0);
  CHECK(lse.select(2, 1).item<double>() == -INFINITY);
  const Tensor ref = scaled_dot_product_attention(q, k, k, gt(additive, -1.0), 0.0, false, 0.5);
  CHECK(testing::rel_err(out, ref) < 4e-3);
}
