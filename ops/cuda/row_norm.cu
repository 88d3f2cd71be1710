// CUDA kernels of the row norms: one block per row for the statistics and dx (f32 accumulation,
// f64 for f64); the parameter gradients summed over tiles of rows, then the tiles in order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/convert.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/row_norm_launch.h"

namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;
template <typename T> using stat_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Sum of v over the block (every thread gets the total); `sh` holds one value per warp.
template <typename S> __device__ S block_sum(S v, S* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // sh may still be read from a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  S t = 0;
  for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) t += sh[i];
  return t;
}

template <typename T, bool Rms>
__global__ void row_norm_fwd_kernel(T* __restrict__ y, stat_of<T>* __restrict__ mean, stat_of<T>* __restrict__ rstd,
                                    const T* __restrict__ x, const stat_of<T>* __restrict__ w,
                                    const stat_of<T>* __restrict__ b, int64_t D, double eps) {
  using S = stat_of<T>;
  __shared__ S sh[kThreads / 32];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * D;
  T* yr = y + r * D;
  // Shifted sums: d = x - x[0] keeps the variance free of cancellation when |mean| >> std.
  const S shift = Rms ? S(0) : load_as<S>(xr, 0);
  S s = 0, q = 0;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const S d = load_as<S>(xr, i) - shift;
    s += d;
    q += d * d;
  }
  s = block_sum(s, sh);
  q = block_sum(q, sh);
  const S n = static_cast<S>(D);
  S m = 0, var;
  if (Rms) {
    var = q / n;
  } else {
    const S ms = s / n;
    var = q / n - ms * ms;
    if (var < S(0)) var = S(0);
    m = shift + ms;
  }
  const S rs = static_cast<S>(1.0 / sqrt(static_cast<double>(var) + eps));
  if (threadIdx.x == 0) {
    if (mean) mean[r] = m;
    rstd[r] = rs;
  }
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    S v = (load_as<S>(xr, i) - m) * rs;
    if (w) v *= w[i];
    if (b) v += b[i];
    yr[i] = from_acc<T>(v);
  }
}

template <typename T, bool Rms>
__global__ void row_norm_dx_kernel(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ x,
                                   const stat_of<T>* __restrict__ mean, const stat_of<T>* __restrict__ rstd,
                                   const stat_of<T>* __restrict__ w, int64_t D) {
  using S = stat_of<T>;
  __shared__ S sh[kThreads / 32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * D, *gr = dy + r * D;
  const S m = Rms ? S(0) : mean[r], rs = rstd[r];
  S sg = 0, sgx = 0;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const S g = load_as<S>(gr, i) * (w ? w[i] : S(1));
    sg += g;
    sgx += g * ((load_as<S>(xr, i) - m) * rs);
  }
  sg = block_sum(sg, sh);
  sgx = block_sum(sgx, sh);
  const S n = static_cast<S>(D);
  const S a = Rms ? S(0) : sg / n, c = sgx / n;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const S g = load_as<S>(gr, i) * (w ? w[i] : S(1));
    const S xh = (load_as<S>(xr, i) - m) * rs;
    dx[r * D + i] = from_acc<T>(rs * (g - a - xh * c));
  }
}

// Partial parameter gradients of one tile of rows (blockIdx.y) for a column per thread:
// part[tile][0][j] = sum dy * xhat, part[tile][1][j] = sum dy over the tile's rows, in order.
template <typename T, bool Rms>
__global__ void row_norm_params_kernel(stat_of<T>* __restrict__ part, const T* __restrict__ dy,
                                       const T* __restrict__ x, const stat_of<T>* __restrict__ mean,
                                       const stat_of<T>* __restrict__ rstd, int64_t rows, int64_t D, int64_t per_tile) {
  using S = stat_of<T>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= D) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * per_tile;
  const int64_t r1 = r0 + per_tile < rows ? r0 + per_tile : rows;
  S sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const S g = load_as<S>(dy, r * D + j);
    sw += g * ((load_as<S>(x, r * D + j) - (Rms ? S(0) : mean[r])) * rstd[r]);
    sb += g;
  }
  S* p = part + static_cast<int64_t>(blockIdx.y) * 2 * D;
  p[j] = sw;
  p[D + j] = sb;
}

// dw[j], db[j]: the tiles' partials summed in order.
template <typename S>
__global__ void row_norm_params_total_kernel(S* __restrict__ dw, S* __restrict__ db, const S* __restrict__ part,
                                             int64_t tiles, int64_t D) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= D) return;
  S sw = 0, sb = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    sw += part[t * 2 * D + j];
    sb += part[t * 2 * D + D + j];
  }
  if (dw) dw[j] = sw;
  if (db) db[j] = sb;
}

}  // namespace

void launch_row_norm_fwd(DType dt, bool rms, void* y, void* mean, void* rstd, const void* x, const void* w,
                         const void* b, int64_t rows, int64_t D, double eps, cudaStream_t s) {
  if (rows == 0 || D == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    using S = stat_of<T>;
    auto args = [&](auto kernel) {
      kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(static_cast<T*>(y), static_cast<S*>(mean),
                                                              static_cast<S*>(rstd), static_cast<const T*>(x),
                                                              static_cast<const S*>(w), static_cast<const S*>(b), D,
                                                              eps);
    };
    if (rms) args(row_norm_fwd_kernel<T, true>);
    else args(row_norm_fwd_kernel<T, false>);
    MPX_CUDA_LAUNCH_CHECK("row norm forward");
  });
}

void launch_row_norm_bwd(DType dt, bool rms, void* dx, void* dw, void* db, const void* dy, const void* x,
                         const void* mean, const void* rstd, const void* w, void* ws, int64_t rows, int64_t D,
                         cudaStream_t s) {
  if (D == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    using S = stat_of<T>;
    const T *dyp = static_cast<const T*>(dy), *xp = static_cast<const T*>(x);
    const S *mp = static_cast<const S*>(mean), *rp = static_cast<const S*>(rstd);
    if (dx && rows > 0) {
      if (rms)
        row_norm_dx_kernel<T, true><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
            static_cast<T*>(dx), dyp, xp, mp, rp, static_cast<const S*>(w), D);
      else
        row_norm_dx_kernel<T, false><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
            static_cast<T*>(dx), dyp, xp, mp, rp, static_cast<const S*>(w), D);
      MPX_CUDA_LAUNCH_CHECK("row norm backward (dx)");
    }
    if (dw || db) {
      const int64_t tiles = row_norm_param_tiles(rows), per_tile = (rows + tiles - 1) / tiles;
      const unsigned cols = static_cast<unsigned>((D + kThreads - 1) / kThreads);
      S* part = static_cast<S*>(ws);
      const dim3 grid(cols, static_cast<unsigned>(tiles));
      if (rms)
        row_norm_params_kernel<T, true><<<grid, kThreads, 0, s>>>(part, dyp, xp, mp, rp, rows, D, per_tile);
      else
        row_norm_params_kernel<T, false><<<grid, kThreads, 0, s>>>(part, dyp, xp, mp, rp, rows, D, per_tile);
      MPX_CUDA_LAUNCH_CHECK("row norm backward (weight, bias partials)");
      row_norm_params_total_kernel<S><<<cols, kThreads, 0, s>>>(static_cast<S*>(dw), static_cast<S*>(db), part,
                                                                 tiles, D);
      MPX_CUDA_LAUNCH_CHECK("row norm backward (weight, bias)");
    }
  });
}

}  // namespace mpx::cuda
