// CUDA kernels for dropout, the nll pick/scatter and the cross-entropy rows' backward (elementwise over rows of a
// loss). Launchers take POD arguments.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/random.h"
#include "ops/cuda/convert.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/reduction_launch.h"
#include "ops/formulas.h"

namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void dropout_kernel(T* __restrict__ out, uint8_t* __restrict__ mask, const T* __restrict__ in, int64_t n,
                               uint64_t seed, uint64_t offset, double p, acc_t<T> scale, bool draw) {
  using A = acc_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint8_t m;
    if (draw) {
      // Same expression as the CPU kernel: the u64 -> double draw is exact, so the masks agree bit for bit.
      m = random::uniform(seed, offset + static_cast<uint64_t>(i)) >= p ? 1 : 0;
      mask[i] = m;
    } else {
      m = mask[i];
    }
    out[i] = m ? from_acc<T>(load_as<A>(in, i) * scale) : from_acc<T>(A(0));
  }
}

template <typename T>
__global__ void nll_pick_kernel(T* __restrict__ out, TensorDesc in, const int64_t* __restrict__ target,
                                int64_t ignore_index) {
  const T* x = static_cast<const T*>(in.data);
  const int64_t C = in.sizes[1], inner = in.sizes[2];
  const int64_t total = in.sizes[0] * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < total; j += stride) {
    const int64_t n = j / inner, i = j % inner, c = target[j];
    // The op layer checks the range on the device and reports it a call later; here an
    // out-of-range class only guards memory and poisons the loss (NaN), so it cannot pass unseen.
    out[j] = c == ignore_index ? from_acc<T>(acc_t<T>(0))
             : (c < 0 || c >= C) ? from_acc<T>(acc_t<T>(NAN))
                                 : x[n * in.strides[0] + c * in.strides[1] + i * in.strides[2]];
  }
}

// Writes every output element once (g at the target class, 0 elsewhere): no separate memset.
template <typename T>
__global__ void nll_scatter_kernel(T* __restrict__ out, const T* __restrict__ g, const int64_t* __restrict__ target,
                                   int64_t N, int64_t C, int64_t inner, int64_t ignore_index) {
  const int64_t total = N * C * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e % inner, c = (e / inner) % C, n = e / (inner * C);
    const int64_t j = n * inner + i;
    const int64_t t = target[j];
    out[e] = (t == c && t != ignore_index) ? g[j] : from_acc<T>(acc_t<T>(0));
  }
}

// Blocks take kChunk columns of one row each: the row's gradient, log-sum-exp and target are read once a block.
constexpr int64_t kChunk = 16 * kThreads;

template <typename T>
__global__ void cross_entropy_backward_kernel(T* __restrict__ dx, const acc_t<T>* __restrict__ g,
                                              const T* __restrict__ x, const int64_t* __restrict__ target,
                                              const acc_t<T>* __restrict__ lse, int64_t N, int64_t C, int64_t chunks,
                                              int64_t ignore_index, acc_t<T> eps) {
  using A = acc_t<T>;
  const A inv_c = A(1) / static_cast<A>(C);
  for (int64_t b = blockIdx.x; b < N * chunks; b += gridDim.x) {
    const int64_t r = b / chunks, k0 = (b % chunks) * kChunk, k1 = k0 + kChunk < C ? k0 + kChunk : C;
    const int64_t c = target[r];
    const bool keep = c != ignore_index && c >= 0 && c < C;
    const A gr = g[r], l = lse[r];
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
      A d = A(0);
      if (keep)
        d = formulas::cross_entropy_row_grad(gr, formulas::exp(load_as<A>(x, r * C + k) - l),
                                             k == c ? A(1) : A(0), eps, inv_c);
      dx[r * C + k] = from_acc<T>(d);
    }
  }
}

}  // namespace

void launch_dropout(DType dt, void* out, uint8_t* mask, const void* in, int64_t n, uint64_t seed, uint64_t offset,
                    double p, double scale, bool draw, cudaStream_t s) {
  if (n == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(out), mask, static_cast<const T*>(in), n,
                                                         seed, offset, p, static_cast<acc_t<T>>(scale), draw);
    MPX_CUDA_LAUNCH_CHECK("dropout");
  });
}

void launch_nll_pick(DType dt, void* out, const TensorDesc& in, const int64_t* target, int64_t ignore_index,
                     cudaStream_t s) {
  const int64_t total = in.sizes[0] * in.sizes[2];
  if (total == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    nll_pick_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(static_cast<T*>(out), in, target, ignore_index);
    MPX_CUDA_LAUNCH_CHECK("nll_loss");
  });
}

void launch_nll_scatter(DType dt, void* out, const void* g, const int64_t* target, int64_t N, int64_t C,
                        int64_t inner, int64_t ignore_index, cudaStream_t s) {
  const int64_t total = N * C * inner;
  if (total == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    nll_scatter_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(g),
                                                                 target, N, C, inner, ignore_index);
    MPX_CUDA_LAUNCH_CHECK("nll_loss backward");
  });
}

void launch_cross_entropy_backward(DType dt, void* dx, const void* g, const void* x, const int64_t* target,
                                   const void* lse, int64_t N, int64_t C, int64_t ignore_index, double smoothing,
                                   cudaStream_t s) {
  if (N * C == 0) return;
  const int64_t chunks = (C + kChunk - 1) / kChunk;
  const int64_t blocks = N * chunks < 65535LL * 8 ? N * chunks : 65535LL * 8;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    cross_entropy_backward_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        static_cast<T*>(dx), static_cast<const A*>(g), static_cast<const T*>(x), target, static_cast<const A*>(lse), N,
        C, chunks, ignore_index, static_cast<A>(smoothing));
    MPX_CUDA_LAUNCH_CHECK("cross_entropy backward");
  });
}

}  // namespace mpx::cuda
