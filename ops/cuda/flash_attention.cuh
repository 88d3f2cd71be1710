// Tensor-Core flash attention for f16/bf16 (FlashAttention-2's tiling on WMMA): the bodies of the forward, dq and
// dk/dv kernels. Scores and statistics in f32, P and dS rounded to the input type for the second product, as FA2.
#pragma once
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/convert.cuh"

namespace mpx::cuda::flash {

inline constexpr int kThreads = 128;  // four warps, sixteen tile rows each
inline constexpr int kRows = 64;      // query rows of a forward / dq block, key rows of a dk/dv block
inline constexpr int kKeys = 64;      // keys per tile of the forward and dq loops
inline constexpr int kQueries = 32;   // queries per tile of the dk/dv loop (keeps its shared memory under A100's)
inline constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

/// Pointers of one call; the forward fills out and lse, the backward dq, dk, dv and rowdot.
template <typename T> struct Args {
  SdpaGeom g;
  const T *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *dout = nullptr;
  T *out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float *lse_out = nullptr, *rowdot = nullptr;
  const float *lse = nullptr, *mask = nullptr;
  bool vec = false;  // every row start of q, k, v (and dout) is 16-byte aligned: stage with 16-byte loads
};

// Row strides (elements) of the shared-memory tiles: padded so that WMMA's 32-byte alignment holds at
// every 16-row and 16-column fragment, and rows do not all start in one bank.
template <int D> inline constexpr int kLdT = D + 8;  // [rows, D] in T
template <int D> inline constexpr int kLdF = D + 4;  // [rows, D] in f32
template <int N> inline constexpr int kLdS = N + 4;  // [rows, N] scores in f32
template <int N> inline constexpr int kLdP = N + 8;  // [rows, N] probabilities in T

/// Shared-memory bytes of each kernel for head dims padded to D.
template <typename T, int D> constexpr size_t forward_smem() {
  return sizeof(T) * (kRows + 2 * kKeys) * kLdT<D> + 4 * kRows * kLdS<kKeys> + sizeof(T) * kRows * kLdP<kKeys> +
         4 * kRows * kLdF<D>;
}
template <typename T, int D> constexpr size_t dq_smem() {
  return sizeof(T) * (2 * kRows + 2 * kKeys) * kLdT<D> + 2 * 4 * kRows * kLdS<kKeys> +
         sizeof(T) * kRows * kLdP<kKeys> + 4 * kRows * kLdF<D>;
}
template <typename T, int D> constexpr size_t dkdv_smem() {
  return sizeof(T) * (2 * kRows + 2 * kQueries) * kLdT<D> + 2 * 4 * kRows * kLdS<kQueries> +
         2 * sizeof(T) * kRows * kLdP<kQueries> + 2 * 4 * kRows * kLdF<D> + 2 * 4 * kQueries;
}

namespace wmma = nvcuda::wmma;
template <typename T> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
template <typename T> using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// dst [ROWS, D] (stride kLdT<D>) = rows [0, rows) x columns [0, cols) of src (row stride rs), zeros elsewhere.
template <typename T, int ROWS, int D>
__device__ __forceinline__ void stage(T* dst, const T* src, int64_t rs, int64_t rows, int64_t cols, bool vec) {
  if (vec) {  // cols and rs are multiples of 8, src 16-byte aligned
    constexpr int kVec = D / 8;
    for (int t = threadIdx.x; t < ROWS * kVec; t += kThreads) {
      const int r = t / kVec, c = (t % kVec) * 8;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (r < rows && c < cols) x = *reinterpret_cast<const uint4*>(src + r * rs + c);
      *reinterpret_cast<uint4*>(dst + r * kLdT<D> + c) = x;
    }
    return;
  }
  for (int t = threadIdx.x; t < ROWS * D; t += kThreads) {
    const int r = t / D, c = t % D;
    dst[r * kLdT<D> + c] = (r < rows && c < cols) ? src[r * rs + c] : from_acc<T>(0.0f);
  }
}

template <int N> __device__ __forceinline__ void zero(float* p) {
  for (int t = threadIdx.x; t < N; t += kThreads) p[t] = 0.0f;
}

/// out [16, 16 NB] (f32, stride ldo) = a [16, 16 KB] (stride lda) times B, plus out's own values when Accumulate.
/// B is b^T when Bt (b holds B's columns as rows: [16 NB, 16 KB], stride ldb), else b itself ([16 KB, 16 NB]).
template <typename T, int NB, int KB, bool Bt, bool Accumulate>
__device__ __forceinline__ void product(float* out, int ldo, const T* a, int lda, const T* b, int ldb) {
  using FragBOf = std::conditional_t<Bt, FragBt<T>, FragB<T>>;
  for (int n = 0; n < NB; ++n) {
    FragC c;
    if constexpr (Accumulate) wmma::load_matrix_sync(c, out + n * 16, ldo, wmma::mem_row_major);
    else wmma::fill_fragment(c, 0.0f);
    for (int kk = 0; kk < KB; ++kk) {
      FragA<T> fa;
      FragBOf fb;
      wmma::load_matrix_sync(fa, a + kk * 16, lda);
      wmma::load_matrix_sync(fb, Bt ? b + n * 16 * ldb + kk * 16 : b + kk * 16 * ldb + n * 16, ldb);
      wmma::mma_sync(c, fa, fb, c);
    }
    wmma::store_matrix_sync(out + n * 16, c, ldo, wmma::mem_row_major);
  }
}
// Scores (a times b^T, fresh) and accumulations (acc += a times b) of a warp's 16 rows.
template <typename T, int NB, int KB>
__device__ __forceinline__ void product_bt(float* out, int ldo, const T* a, int lda, const T* b, int ldb) {
  product<T, NB, KB, true, false>(out, ldo, a, lda, b, ldb);
}
template <typename T, int NB, int KB>
__device__ __forceinline__ void product_add(float* acc, int ldc, const T* a, int lda, const T* b, int ldb) {
  product<T, NB, KB, false, true>(acc, ldc, a, lda, b, ldb);
}

/// The score of (i, j) in log2 units: -inf where causal, past the end, or masked. x is q.k unscaled.
__device__ __forceinline__ float score2(const SdpaGeom& g, const float* mask, float x, int64_t b, int64_t h, int64_t i,
                                        int64_t j) {
  if (i >= g.L || j >= g.S || (g.causal && j > i)) return -INFINITY;
  float s = x * static_cast<float>(g.scale) * kLog2e;
  if (mask) s += mask[b * g.sm[0] + h * g.sm[1] + i * g.sm[2] + j * g.sm[3]] * kLog2e;
  return s;
}

// Lanes 2r and 2r + 1 of warp w own tile row 16w + r, each half of its columns.
__device__ __forceinline__ int lane_row() { return (threadIdx.x / 32) * 16 + (threadIdx.x % 32) / 2; }
__device__ __forceinline__ int lane_half() { return threadIdx.x & 1; }

/// Forward of query rows [64 * blockIdx.y, +64) of head blockIdx.x: online softmax over 64-key tiles.
template <typename T, int D>
__device__ void forward_body(const Args<T>& a, unsigned char* smem) {
  const SdpaGeom& g = a.g;
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + kRows * kLdT<D>;
  T* vs = ks + kKeys * kLdT<D>;
  float* ss = reinterpret_cast<float*>(vs + kKeys * kLdT<D>);
  T* ps = reinterpret_cast<T*>(ss + kRows * kLdS<kKeys>);
  float* os = reinterpret_cast<float*>(ps + kRows * kLdP<kKeys>);
  const int64_t bh = blockIdx.x, b = bh / g.H, h = bh % g.H, hk = h / (g.H / g.Hk);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int w16 = (threadIdx.x / 32) * 16, r = lane_row(), half = lane_half();
  const int64_t i = i0 + r;
  stage<T, kRows, D>(qs, a.q + b * g.sq[0] + h * g.sq[1] + i0 * g.sq[2], g.sq[2], g.L - i0, g.E, a.vec);
  zero<kRows * kLdF<D>>(os);
  const T* kb = a.k + b * g.sk[0] + hk * g.sk[1];
  const T* vb = a.v + b * g.sv[0] + hk * g.sv[1];
  float m = -INFINITY, l = 0.0f;
  const int64_t s_end = g.causal && i0 + kRows < g.S ? i0 + kRows : g.S;
  for (int64_t j0 = 0; j0 < s_end; j0 += kKeys) {
    __syncthreads();  // the previous tile's K and V are read by every warp
    stage<T, kKeys, D>(ks, kb + j0 * g.sk[2], g.sk[2], g.S - j0, g.E, a.vec);
    stage<T, kKeys, D>(vs, vb + j0 * g.sv[2], g.sv[2], g.S - j0, g.Ev, a.vec);
    __syncthreads();
    product_bt<T, kKeys / 16, D / 16>(ss + w16 * kLdS<kKeys>, kLdS<kKeys>, qs + w16 * kLdT<D>, kLdT<D>, ks, kLdT<D>);
    __syncwarp();
    constexpr int kHalf = kKeys / 2;
    float s[kHalf];
    float mx = -INFINITY;
#pragma unroll
    for (int t = 0; t < kHalf; ++t) {
      const int c = half * kHalf + t;
      s[t] = score2(g, a.mask, ss[r * kLdS<kKeys> + c], b, h, i, j0 + c);
      mx = fmaxf(mx, s[t]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float mn = fmaxf(m, mx);
    // Until a row meets its first visible key, mn is -inf: nothing to rescale, every weight 0.
    const float alpha = mn == -INFINITY ? 1.0f : exp2f(m - mn);
    float sum = 0.0f;
#pragma unroll
    for (int t = 0; t < kHalf; ++t) {
      const int c = half * kHalf + t;
      float p = mn == -INFINITY ? 0.0f : exp2f(s[t] - mn);
      sum += p;
      if (p > 0.0f) p *= sdpa_dropout_factor<float>(g, b, h, i, j0 + c);
      ps[r * kLdP<kKeys> + c] = from_acc<T>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = mn;
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) os[r * kLdF<D> + c] *= alpha;
    __syncwarp();
    product_add<T, D / 16, kKeys / 16>(os + w16 * kLdF<D>, kLdF<D>, ps + w16 * kLdP<kKeys>, kLdP<kKeys>, vs, kLdT<D>);
  }
  __syncwarp();
  if (i >= g.L) return;
  const int64_t row = (b * g.H + h) * g.L + i;
  // A row with every key masked (l = 0) gives 0 and lse -inf, as the CPU kernel; a NaN l (a NaN score) stays NaN.
  const float inv = l == 0.0f ? 0.0f : 1.0f / l;
  for (int c = half * (D / 2); c < (half + 1) * (D / 2) && c < g.Ev; ++c)
    a.out[row * g.Ev + c] = from_acc<T>(os[r * kLdF<D> + c] * inv);
  if (half == 0) a.lse_out[row] = l == 0.0f ? -INFINITY : (m + log2f(l)) * kLn2;
}

/// dq of query rows [64 * blockIdx.y, +64) of head blockIdx.x, and rowdot = dO . O of those rows.
template <typename T, int D>
__device__ void dq_body(const Args<T>& a, unsigned char* smem) {
  const SdpaGeom& g = a.g;
  T* qs = reinterpret_cast<T*>(smem);
  T* gs = qs + kRows * kLdT<D>;  // dO
  T* ks = gs + kRows * kLdT<D>;
  T* vs = ks + kKeys * kLdT<D>;
  float* ss = reinterpret_cast<float*>(vs + kKeys * kLdT<D>);
  float* dps = ss + kRows * kLdS<kKeys>;
  T* dss = reinterpret_cast<T*>(dps + kRows * kLdS<kKeys>);
  float* dqs = reinterpret_cast<float*>(dss + kRows * kLdP<kKeys>);
  const int64_t bh = blockIdx.x, b = bh / g.H, h = bh % g.H, hk = h / (g.H / g.Hk);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int w16 = (threadIdx.x / 32) * 16, r = lane_row(), half = lane_half();
  const int64_t i = i0 + r, row = (b * g.H + h) * g.L + i;
  stage<T, kRows, D>(qs, a.q + b * g.sq[0] + h * g.sq[1] + i0 * g.sq[2], g.sq[2], g.L - i0, g.E, a.vec);
  stage<T, kRows, D>(gs, a.dout + (bh * g.L + i0) * g.Ev, g.Ev, g.L - i0, g.Ev, a.vec);
  zero<kRows * kLdF<D>>(dqs);
  __syncthreads();
  float dsum = 0.0f;
  if (i < g.L)
    for (int c = half * (D / 2); c < (half + 1) * (D / 2) && c < g.Ev; ++c)
      dsum += load_as<float>(gs, r * kLdT<D> + c) * load_as<float>(a.o, row * g.Ev + c);
  dsum += __shfl_xor_sync(0xffffffffu, dsum, 1);
  if (i < g.L && half == 0) a.rowdot[row] = dsum;
  const float lse2 = i < g.L ? a.lse[row] * kLog2e : -INFINITY;
  const float sc = static_cast<float>(g.scale);
  const T* kb = a.k + b * g.sk[0] + hk * g.sk[1];
  const T* vb = a.v + b * g.sv[0] + hk * g.sv[1];
  const int64_t s_end = g.causal && i0 + kRows < g.S ? i0 + kRows : g.S;
  for (int64_t j0 = 0; j0 < s_end; j0 += kKeys) {
    __syncthreads();
    stage<T, kKeys, D>(ks, kb + j0 * g.sk[2], g.sk[2], g.S - j0, g.E, a.vec);
    stage<T, kKeys, D>(vs, vb + j0 * g.sv[2], g.sv[2], g.S - j0, g.Ev, a.vec);
    __syncthreads();
    product_bt<T, kKeys / 16, D / 16>(ss + w16 * kLdS<kKeys>, kLdS<kKeys>, qs + w16 * kLdT<D>, kLdT<D>, ks, kLdT<D>);
    product_bt<T, kKeys / 16, D / 16>(dps + w16 * kLdS<kKeys>, kLdS<kKeys>, gs + w16 * kLdT<D>, kLdT<D>, vs, kLdT<D>);
    __syncwarp();
    for (int t = 0; t < kKeys / 2; ++t) {
      const int c = half * (kKeys / 2) + t;
      const float s = score2(g, a.mask, ss[r * kLdS<kKeys> + c], b, h, i, j0 + c);
      float ds = 0.0f;
      if (s != -INFINITY && lse2 != -INFINITY) {
        const float p = exp2f(s - lse2);
        const float z = sdpa_dropout_factor<float>(g, b, h, i, j0 + c);
        ds = p * (z * dps[r * kLdS<kKeys> + c] - dsum) * sc;
      }
      dss[r * kLdP<kKeys> + c] = from_acc<T>(ds);
    }
    __syncwarp();
    product_add<T, D / 16, kKeys / 16>(dqs + w16 * kLdF<D>, kLdF<D>, dss + w16 * kLdP<kKeys>, kLdP<kKeys>, ks, kLdT<D>);
  }
  __syncwarp();
  if (i >= g.L) return;
  for (int c = half * (D / 2); c < (half + 1) * (D / 2) && c < g.E; ++c)
    a.dq[row * g.E + c] = from_acc<T>(dqs[r * kLdF<D> + c]);
}

/// dk and dv of key rows [64 * blockIdx.y, +64) of kv head blockIdx.x, summed over the query heads that read it;
/// rowdot comes from the dq kernel.
template <typename T, int D>
__device__ void dkdv_body(const Args<T>& a, unsigned char* smem) {
  const SdpaGeom& g = a.g;
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + kRows * kLdT<D>;
  T* qs = vs + kRows * kLdT<D>;
  T* gs = qs + kQueries * kLdT<D>;  // dO
  float* ss = reinterpret_cast<float*>(gs + kQueries * kLdT<D>);
  float* dps = ss + kRows * kLdS<kQueries>;
  T* ps = reinterpret_cast<T*>(dps + kRows * kLdS<kQueries>);
  T* dss = ps + kRows * kLdP<kQueries>;
  float* dks = reinterpret_cast<float*>(dss + kRows * kLdP<kQueries>);
  float* dvs = dks + kRows * kLdF<D>;
  float* ls = dvs + kRows * kLdF<D>;
  float* rd = ls + kQueries;
  const int64_t bhk = blockIdx.x, b = bhk / g.Hk, hk = bhk % g.Hk, G = g.H / g.Hk;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int w16 = (threadIdx.x / 32) * 16, r = lane_row(), half = lane_half();
  const int64_t j = j0 + r;
  stage<T, kRows, D>(ks, a.k + b * g.sk[0] + hk * g.sk[1] + j0 * g.sk[2], g.sk[2], g.S - j0, g.E, a.vec);
  stage<T, kRows, D>(vs, a.v + b * g.sv[0] + hk * g.sv[1] + j0 * g.sv[2], g.sv[2], g.S - j0, g.Ev, a.vec);
  zero<kRows * kLdF<D>>(dks);
  zero<kRows * kLdF<D>>(dvs);
  const float sc = static_cast<float>(g.scale);
  for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
    const int64_t base = (b * g.H + h) * g.L;
    // Causal: queries before the block's first key see none of its keys.
    for (int64_t i0 = g.causal ? (j0 / kQueries) * kQueries : 0; i0 < g.L; i0 += kQueries) {
      __syncthreads();
      stage<T, kQueries, D>(qs, a.q + b * g.sq[0] + h * g.sq[1] + i0 * g.sq[2], g.sq[2], g.L - i0, g.E, a.vec);
      stage<T, kQueries, D>(gs, a.dout + (base + i0) * g.Ev, g.Ev, g.L - i0, g.Ev, a.vec);
      for (int t = threadIdx.x; t < kQueries; t += kThreads) {
        const bool in = i0 + t < g.L;
        ls[t] = in ? a.lse[base + i0 + t] * kLog2e : -INFINITY;
        rd[t] = in ? a.rowdot[base + i0 + t] : 0.0f;
      }
      __syncthreads();
      product_bt<T, kQueries / 16, D / 16>(ss + w16 * kLdS<kQueries>, kLdS<kQueries>, ks + w16 * kLdT<D>, kLdT<D>, qs,
                                            kLdT<D>);
      product_bt<T, kQueries / 16, D / 16>(dps + w16 * kLdS<kQueries>, kLdS<kQueries>, vs + w16 * kLdT<D>, kLdT<D>,
                                            gs, kLdT<D>);
      __syncwarp();
      for (int t = 0; t < kQueries / 2; ++t) {
        const int c = half * (kQueries / 2) + t;
        const float s = score2(g, a.mask, ss[r * kLdS<kQueries> + c], b, h, i0 + c, j);
        float pz = 0.0f, ds = 0.0f;
        if (s != -INFINITY && ls[c] != -INFINITY) {
          const float p = exp2f(s - ls[c]);
          const float z = sdpa_dropout_factor<float>(g, b, h, i0 + c, j);
          pz = p * z;
          ds = p * (z * dps[r * kLdS<kQueries> + c] - rd[c]) * sc;
        }
        ps[r * kLdP<kQueries> + c] = from_acc<T>(pz);
        dss[r * kLdP<kQueries> + c] = from_acc<T>(ds);
      }
      __syncwarp();
      product_add<T, D / 16, kQueries / 16>(dvs + w16 * kLdF<D>, kLdF<D>, ps + w16 * kLdP<kQueries>, kLdP<kQueries>,
                                            gs, kLdT<D>);
      product_add<T, D / 16, kQueries / 16>(dks + w16 * kLdF<D>, kLdF<D>, dss + w16 * kLdP<kQueries>, kLdP<kQueries>,
                                            qs, kLdT<D>);
    }
  }
  __syncwarp();
  if (j >= g.S) return;
  const int64_t row = bhk * g.S + j;
  for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) {
    if (c < g.E) a.dk[row * g.E + c] = from_acc<T>(dks[r * kLdF<D> + c]);
    if (c < g.Ev) a.dv[row * g.Ev + c] = from_acc<T>(dvs[r * kLdF<D> + c]);
  }
}

}  // namespace mpx::cuda::flash
