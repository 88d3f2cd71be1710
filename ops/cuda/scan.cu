// CUDA running sums and products (cumsum, cumprod) of a contiguous [outer, n, inner] tensor, accumulating in f32 (f64 for f64, i64 for
// i64) and rounding each output once: one thread per lane (neighbouring threads on neighbouring inner positions,
// so each step's reads and writes coalesce), or a block per lane for long contiguous ones.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/convert.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/reduction_launch.h"

namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;

// The running operation: a sum, or a product (cumprod).
template <bool kProd, typename A> __device__ __forceinline__ A combine(A a, A b) { return kProd ? a * b : a + b; }

template <typename T, bool kProd>
__global__ void cumsum_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t outer, int64_t n, int64_t inner,
                              bool reverse) {
  using A = acc_t<T>;
  const int64_t lanes = outer * inner;
  for (int64_t l = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; l < lanes;
       l += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (l / inner) * n * inner + l % inner;
    A acc = A(kProd ? 1 : 0);
    for (int64_t s = 0; s < n; ++s) {
      const int64_t at = base + (reverse ? n - 1 - s : s) * inner;
      acc = combine<kProd>(acc, load_as<A>(in, at));
      out[at] = from_acc<T>(acc);
    }
  }
}

// Long contiguous lanes (inner == 1; a row of vocabulary probabilities): a block per lane walks it in tiles of
// kThreads, each tile an inclusive Hillis-Steele scan in shared memory plus the carry of the tiles before it.
template <typename T, bool kProd>
__global__ void cumsum_rows_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t lanes, int64_t n,
                                   bool reverse) {
  using A = acc_t<T>;
  __shared__ A tile[kThreads];
  for (int64_t l = blockIdx.x; l < lanes; l += gridDim.x) {
    const T* x = in + l * n;
    T* y = out + l * n;
    const A one = A(kProd ? 1 : 0);  // the operation's identity
    A carry = one;
    for (int64_t t0 = 0; t0 < n; t0 += kThreads) {
      const int64_t s = t0 + threadIdx.x;
      const int64_t at = reverse ? n - 1 - s : s;
      tile[threadIdx.x] = s < n ? load_as<A>(x, at) : one;
      __syncthreads();
      for (int w = 1; w < kThreads; w *= 2) {
        const A add = threadIdx.x >= static_cast<unsigned>(w) ? tile[threadIdx.x - w] : one;
        __syncthreads();
        tile[threadIdx.x] = combine<kProd>(tile[threadIdx.x], add);
        __syncthreads();
      }
      if (s < n) y[at] = from_acc<T>(combine<kProd>(carry, tile[threadIdx.x]));
      carry = combine<kProd>(carry, tile[kThreads - 1]);
      __syncthreads();  // the tile is rewritten next round
    }
  }
}

}  // namespace

void launch_cumsum(DType dt, void* out, const void* in, int64_t outer, int64_t n, int64_t inner, bool reverse,
                   bool prod, cudaStream_t s) {
  if (outer * n * inner == 0) return;
  auto run = [&](auto tag, auto is_prod) {
    using T = decltype(tag);
    constexpr bool kProd = decltype(is_prod)::value;
    if (inner == 1 && n >= 2 * kThreads) {
      const unsigned blocks = static_cast<unsigned>(outer < 65535 * 8 ? outer : 65535 * 8);
      cumsum_rows_kernel<T, kProd><<<blocks, kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(in), outer,
                                                               n, reverse);
    } else {
      cumsum_kernel<T, kProd><<<blocks_for(outer * inner, kThreads), kThreads, 0, s>>>(
          static_cast<T*>(out), static_cast<const T*>(in), outer, n, inner, reverse);
    }
    MPX_CUDA_LAUNCH_CHECK(kProd ? "cumprod" : "cumsum");
  };
  auto go = [&](auto tag) {
    if (prod) run(tag, std::true_type{});
    else run(tag, std::false_type{});
  };
  if (dt == DType::kInt64) go(int64_t{});
  else float_switch(dt, go);
}

}  // namespace mpx::cuda
