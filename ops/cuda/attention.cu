// CUDA fused attention: one thread per query (forward, dq) or key (dk, dv) row, the other side streamed
// through shared memory, online softmax in f32 (f64 for f64). Simple by design; O(T) memory, no atomics.
// f16/bf16 go to the Tensor-Core kernels of flash_attention.cu first; this path takes what they do not.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/convert.cuh"
#include "ops/cuda/launch.h"

namespace mpx::cuda {
namespace {

constexpr int kRows = 64;  // threads (rows) per block

// Head-dim loops unroll fully (their arrays stay in registers) up to 64; the 256 bound is a
// fallback that keeps its arrays in local memory and compiles quickly.
template <int D> constexpr int kUnroll = D <= 64 ? D : 1;

template <typename A> __device__ __forceinline__ A neg_inf() { return -static_cast<A>(INFINITY); }

// Scaled, masked score of (query row qr, key row kr): -inf where causal or the mask hides the key.
template <typename A, int D>
__device__ __forceinline__ A score(const SdpaGeom& g, const A* qr, const A* kr, const A* mask, int64_t b, int64_t h,
                                   int64_t i, int64_t j) {
  if (g.causal && j > i) return neg_inf<A>();
  A s = 0;
#pragma unroll kUnroll<D>
  for (int e = 0; e < D; ++e)
    if (e < g.E) s += qr[e] * kr[e];
  s *= static_cast<A>(g.scale);
  if (mask) s += mask[b * g.sm[0] + h * g.sm[1] + i * g.sm[2] + j * g.sm[3]];
  return s;
}

// Rows [r0, r0 + n) of a [rows, cols] slice with row stride rs into shared memory as A.
template <typename A, typename T>
__device__ void stage_rows(A* dst, const T* src, int64_t rs, int64_t r0, int64_t n, int64_t cols) {
  for (int64_t t = threadIdx.x; t < n * cols; t += blockDim.x) {
    const int64_t r = t / cols, c = t % cols;
    dst[t] = load_as<A>(src, (r0 + r) * rs + c);
  }
}

template <typename T, int D>
__global__ void sdpa_forward_kernel(SdpaGeom g, T* __restrict__ out, acc_t<T>* __restrict__ lse, const T* q,
                                    const T* k, const T* v, const acc_t<T>* mask, int tile) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  A* ks = reinterpret_cast<A*>(smem);
  A* vs = ks + tile * g.E;
  const int64_t bh = blockIdx.x, b = bh / g.H, h = bh % g.H, hk = h / (g.H / g.Hk);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * blockDim.x, i = i0 + threadIdx.x;
  const bool active = i < g.L;
  A qr[D], acc[D];
#pragma unroll kUnroll<D>
  for (int e = 0; e < D; ++e) {
    qr[e] = (active && e < g.E) ? load_as<A>(q, b * g.sq[0] + h * g.sq[1] + i * g.sq[2] + e) : A(0);
    acc[e] = A(0);
  }
  A m = neg_inf<A>(), l = 0;
  const int64_t last = (i0 + blockDim.x < g.L ? i0 + blockDim.x : g.L) - 1;
  const int64_t s_end = g.causal ? (g.S < last + 1 ? g.S : last + 1) : g.S;
  const T* kb = k + b * g.sk[0] + hk * g.sk[1];
  const T* vb = v + b * g.sv[0] + hk * g.sv[1];
  for (int64_t j0 = 0; j0 < s_end; j0 += tile) {
    const int64_t n = (g.S - j0 < tile) ? g.S - j0 : tile;
    __syncthreads();
    stage_rows(ks, kb, g.sk[2], j0, n, g.E);
    stage_rows(vs, vb, g.sv[2], j0, n, g.Ev);
    __syncthreads();
    if (!active) continue;
    for (int64_t j = 0; j < n; ++j) {
      const A s = score<A, D>(g, qr, ks + j * g.E, mask, b, h, i, j0 + j);
      if (s == neg_inf<A>()) continue;
      const A mn = s > m ? s : m;
      const A alpha = exp(m - mn), pe = exp(s - mn);
      l = l * alpha + pe;
      const A pz = pe * sdpa_dropout_factor<A>(g, b, h, i, j0 + j);
      const A* vr = vs + j * g.Ev;
#pragma unroll kUnroll<D>
      for (int c = 0; c < D; ++c)
        if (c < g.Ev) acc[c] = acc[c] * alpha + pz * vr[c];
      m = mn;
    }
  }
  if (!active) return;
  const int64_t row = (b * g.H + h) * g.L + i;
  // A row with every key masked (l = 0) gives 0 and lse -inf, as the CPU kernel; a NaN l (a NaN score) stays NaN.
  const A inv = l == A(0) ? A(0) : A(1) / l;
#pragma unroll kUnroll<D>
  for (int c = 0; c < D; ++c)
    if (c < g.Ev) out[row * g.Ev + c] = from_acc<T>(acc[c] * inv);
  lse[row] = l == A(0) ? neg_inf<A>() : m + log(l);
}

// dq of each query row, and rowdot[i] = dO_i . O_i for the dk/dv pass.
template <typename T, int D>
__global__ void sdpa_backward_dq_kernel(SdpaGeom g, T* __restrict__ dq, acc_t<T>* __restrict__ rowdot, const T* dout,
                                        const T* q, const T* k, const T* v, const T* out, const acc_t<T>* lse,
                                        const acc_t<T>* mask, int tile) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  A* ks = reinterpret_cast<A*>(smem);
  A* vs = ks + tile * g.E;
  const int64_t bh = blockIdx.x, b = bh / g.H, h = bh % g.H, hk = h / (g.H / g.Hk);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * blockDim.x, i = i0 + threadIdx.x;
  const bool active = i < g.L;
  const int64_t row = (b * g.H + h) * g.L + i;
  A qr[D], gr[D], dqr[D];
  A dsum = 0;
#pragma unroll kUnroll<D>
  for (int e = 0; e < D; ++e) {
    qr[e] = (active && e < g.E) ? load_as<A>(q, b * g.sq[0] + h * g.sq[1] + i * g.sq[2] + e) : A(0);
    gr[e] = (active && e < g.Ev) ? load_as<A>(dout, row * g.Ev + e) : A(0);
    if (active && e < g.Ev) dsum += gr[e] * load_as<A>(out, row * g.Ev + e);
    dqr[e] = A(0);
  }
  const A li = active ? lse[row] : neg_inf<A>();
  const A sc = static_cast<A>(g.scale);
  const int64_t last = (i0 + blockDim.x < g.L ? i0 + blockDim.x : g.L) - 1;
  const int64_t s_end = g.causal ? (g.S < last + 1 ? g.S : last + 1) : g.S;
  const T* kb = k + b * g.sk[0] + hk * g.sk[1];
  const T* vb = v + b * g.sv[0] + hk * g.sv[1];
  for (int64_t j0 = 0; j0 < s_end; j0 += tile) {
    const int64_t n = (g.S - j0 < tile) ? g.S - j0 : tile;
    __syncthreads();
    stage_rows(ks, kb, g.sk[2], j0, n, g.E);
    stage_rows(vs, vb, g.sv[2], j0, n, g.Ev);
    __syncthreads();
    if (!active || li == neg_inf<A>()) continue;
    for (int64_t j = 0; j < n; ++j) {
      const A* kr = ks + j * g.E;
      const A s = score<A, D>(g, qr, kr, mask, b, h, i, j0 + j);
      if (s == neg_inf<A>()) continue;
      const A p = exp(s - li);
      const A* vr = vs + j * g.Ev;
      A dp = 0;
#pragma unroll kUnroll<D>
      for (int c = 0; c < D; ++c)
        if (c < g.Ev) dp += gr[c] * vr[c];
      const A ds = p * (sdpa_dropout_factor<A>(g, b, h, i, j0 + j) * dp - dsum) * sc;
#pragma unroll kUnroll<D>
      for (int e = 0; e < D; ++e)
        if (e < g.E) dqr[e] += ds * kr[e];
    }
  }
  if (!active) return;
  rowdot[row] = dsum;
#pragma unroll kUnroll<D>
  for (int e = 0; e < D; ++e)
    if (e < g.E) dq[row * g.E + e] = from_acc<T>(dqr[e]);
}

// dk and dv of each key row, summed over the query heads that share its kv head.
template <typename T, int D>
__global__ void sdpa_backward_dkdv_kernel(SdpaGeom g, T* __restrict__ dk, T* __restrict__ dv, const acc_t<T>* rowdot,
                                          const T* dout, const T* q, const T* k, const T* v, const acc_t<T>* lse,
                                          const acc_t<T>* mask, int tile) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  A* qs = reinterpret_cast<A*>(smem);
  A* gs = qs + tile * g.E;
  A* ls = gs + tile * g.Ev;
  A* ds_ = ls + tile;
  const int64_t bhk = blockIdx.x, b = bhk / g.Hk, hk = bhk % g.Hk, G = g.H / g.Hk;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const bool active = j < g.S;
  A kr[D], vr[D], dkr[D], dvr[D];
#pragma unroll kUnroll<D>
  for (int e = 0; e < D; ++e) {
    kr[e] = (active && e < g.E) ? load_as<A>(k, b * g.sk[0] + hk * g.sk[1] + j * g.sk[2] + e) : A(0);
    vr[e] = (active && e < g.Ev) ? load_as<A>(v, b * g.sv[0] + hk * g.sv[1] + j * g.sv[2] + e) : A(0);
    dkr[e] = A(0);
    dvr[e] = A(0);
  }
  const A sc = static_cast<A>(g.scale);
  const int64_t first_key = static_cast<int64_t>(blockIdx.y) * blockDim.x;
  for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
    const T* qb = q + b * g.sq[0] + h * g.sq[1];
    const T* gb = dout + (b * g.H + h) * g.L * g.Ev;
    const A* lb = lse + (b * g.H + h) * g.L;
    const A* db = rowdot + (b * g.H + h) * g.L;
    // Causal: queries before the block's first key see none of its keys.
    for (int64_t i0 = g.causal ? (first_key / tile) * tile : 0; i0 < g.L; i0 += tile) {
      const int64_t n = (g.L - i0 < tile) ? g.L - i0 : tile;
      __syncthreads();
      stage_rows(qs, qb, g.sq[2], i0, n, g.E);
      stage_rows(gs, gb, g.Ev, i0, n, g.Ev);
      for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
        ls[t] = lb[i0 + t];
        ds_[t] = db[i0 + t];
      }
      __syncthreads();
      if (!active) continue;
      for (int64_t r = 0; r < n; ++r) {
        const int64_t i = i0 + r;
        if (ls[r] == neg_inf<A>()) continue;
        const A* qr = qs + r * g.E;
        const A s = score<A, D>(g, qr, kr, mask, b, h, i, j);
        if (s == neg_inf<A>()) continue;
        const A p = exp(s - ls[r]);
        const A z = sdpa_dropout_factor<A>(g, b, h, i, j);
        const A* grow = gs + r * g.Ev;
        A dp = 0;
#pragma unroll kUnroll<D>
        for (int c = 0; c < D; ++c)
          if (c < g.Ev) {
            dvr[c] += p * z * grow[c];
            dp += grow[c] * vr[c];
          }
        const A ds = p * (z * dp - ds_[r]) * sc;
#pragma unroll kUnroll<D>
        for (int e = 0; e < D; ++e)
          if (e < g.E) dkr[e] += ds * qr[e];
      }
    }
  }
  if (!active) return;
  const int64_t row = (b * g.Hk + hk) * g.S + j;
#pragma unroll kUnroll<D>
  for (int e = 0; e < D; ++e) {
    if (e < g.E) dk[row * g.E + e] = from_acc<T>(dkr[e]);
    if (e < g.Ev) dv[row * g.Ev + e] = from_acc<T>(dvr[e]);
  }
}

// Rows of the streamed side per shared-memory tile: at most kRows, within 32 KiB.
int tile_rows(int64_t per_row_elems, size_t elem) {
  const int64_t fit = static_cast<int64_t>(32768 / (per_row_elems * static_cast<int64_t>(elem) + 1));
  return static_cast<int>(fit < 1 ? 1 : (fit > kRows ? kRows : fit));
}

// Calls f(Dtag) with the smallest compiled head-dim bound that holds both E and Ev.
template <typename F>
void head_dim_switch(int64_t d, F&& f) {
  if (d <= 64) f(std::integral_constant<int, 64>{});
  else f(std::integral_constant<int, 256>{});
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void launch_sdpa_forward(DType dt, const SdpaGeom& g, void* out, void* lse, const void* q, const void* k,
                         const void* v, const void* mask, cudaStream_t s) {
  if (g.B * g.H == 0 || g.L == 0) return;
  if (launch_flash_forward(dt, g, out, lse, q, k, v, mask, s)) return;
  const int64_t hd = g.E > g.Ev ? g.E : g.Ev;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    head_dim_switch(hd, [&](auto dtag) {
      constexpr int D = decltype(dtag)::value;
      const int tile = tile_rows(g.E + g.Ev, sizeof(A));
      const size_t smem = static_cast<size_t>(tile) * (g.E + g.Ev) * sizeof(A) + 16;
      const dim3 grid(static_cast<unsigned>(g.B * g.H), static_cast<unsigned>(ceil_div(g.L, kRows)));
      sdpa_forward_kernel<T, D><<<grid, kRows, smem, s>>>(g, static_cast<T*>(out), static_cast<A*>(lse),
                                                          static_cast<const T*>(q), static_cast<const T*>(k),
                                                          static_cast<const T*>(v), static_cast<const A*>(mask), tile);
      MPX_CUDA_LAUNCH_CHECK("sdpa_fused");
    });
  });
}

void launch_sdpa_backward(DType dt, const SdpaGeom& g, void* dq, void* dk, void* dv, void* rowdot, const void* dout,
                          const void* q, const void* k, const void* v, const void* out, const void* lse,
                          const void* mask, cudaStream_t s) {
  if (launch_flash_backward(dt, g, dq, dk, dv, rowdot, dout, q, k, v, out, lse, mask, s)) return;
  const int64_t hd = g.E > g.Ev ? g.E : g.Ev;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    head_dim_switch(hd, [&](auto dtag) {
      constexpr int D = decltype(dtag)::value;
      if (g.B * g.H > 0 && g.L > 0) {
        const int tile = tile_rows(g.E + g.Ev, sizeof(A));
        const size_t smem = static_cast<size_t>(tile) * (g.E + g.Ev) * sizeof(A) + 16;
        const dim3 grid(static_cast<unsigned>(g.B * g.H), static_cast<unsigned>(ceil_div(g.L, kRows)));
        sdpa_backward_dq_kernel<T, D><<<grid, kRows, smem, s>>>(
            g, static_cast<T*>(dq), static_cast<A*>(rowdot), static_cast<const T*>(dout), static_cast<const T*>(q),
            static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const T*>(out), static_cast<const A*>(lse),
            static_cast<const A*>(mask), tile);
        MPX_CUDA_LAUNCH_CHECK("sdpa_fused_backward (dq)");
      }
      if (g.B * g.Hk > 0 && g.S > 0) {
        const int tile = tile_rows(g.E + g.Ev + 2, sizeof(A));
        const size_t smem = static_cast<size_t>(tile) * (g.E + g.Ev + 2) * sizeof(A) + 16;
        const dim3 grid(static_cast<unsigned>(g.B * g.Hk), static_cast<unsigned>(ceil_div(g.S, kRows)));
        sdpa_backward_dkdv_kernel<T, D><<<grid, kRows, smem, s>>>(
            g, static_cast<T*>(dk), static_cast<T*>(dv), static_cast<const A*>(rowdot), static_cast<const T*>(dout),
            static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const A*>(lse),
            static_cast<const A*>(mask), tile);
        MPX_CUDA_LAUNCH_CHECK("sdpa_fused_backward (dk, dv)");
      }
    });
  });
}

}  // namespace mpx::cuda
