// CUDA resampling kernels of interpolate: the forward pass and its adjoint as gathers (deterministic, no atomics),
// in the CPU kernels' order of operations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/convert.cuh"
#include "ops/cuda/resize_launch.h"

namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;

// One axis as the kernels read it: output j reads i[2j] (weight w[2j]) and i[2j + 1] (w[2j + 1]).
template <typename A>
struct Ax {
  const int64_t* i;
  const A* w;
  int64_t n_out;
  __device__ __forceinline__ int64_t first(int64_t j) const { return i ? i[2 * j] : j; }
  __device__ __forceinline__ int64_t second(int64_t j) const { return i ? i[2 * j + (w ? 1 : 0)] : j; }
  // The outputs that read input position k: [begin, end), as the first positions never decrease and the second
  // is the first or the next.
  __device__ __forceinline__ void readers(int64_t k, int64_t& begin, int64_t& end) const {
    int64_t lo = 0, hi = n_out;
    while (lo < hi) {  // first j whose second position reaches k
      const int64_t mid = (lo + hi) / 2;
      if (second(mid) < k) lo = mid + 1;
      else hi = mid;
    }
    begin = lo;
    hi = n_out;
    while (lo < hi) {  // first j whose first position passes k
      const int64_t mid = (lo + hi) / 2;
      if (first(mid) <= k) lo = mid + 1;
      else hi = mid;
    }
    end = lo;
  }
  // v's share for input position k from output j (both weights when both positions are k, added one by one).
  __device__ __forceinline__ A share(int64_t j, int64_t k, A v, A acc) const {
    if (!w) return first(j) == k ? acc + v : acc;
    if (i[2 * j] == k) acc += w[2 * j] * v;
    if (i[2 * j + 1] == k) acc += w[2 * j + 1] * v;
    return acc;
  }
};

template <typename T, typename A>
__global__ void resample_kernel(ResampleGeom g, T* out, const T* x, int64_t n) {
  const Ax<A> h{g.ih, static_cast<const A*>(g.wh), g.ho}, w{g.iw, static_cast<const A*>(g.ww), g.wo};
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = e % g.wo, r = e / g.wo, j = r % g.ho, o = r / g.ho;
    const T* xo = x + o * g.hi * g.wi;
    // Input row k resampled along W at output column m.
    auto row = [&](int64_t k) -> A {
      const T* src = xo + k * g.wi;
      if (!w.w) return load_as<A>(src, w.first(m));
      return w.w[2 * m] * load_as<A>(src, w.i[2 * m]) + w.w[2 * m + 1] * load_as<A>(src, w.i[2 * m + 1]);
    };
    if (!h.w) out[e] = from_acc<T>(row(h.first(j)));
    else out[e] = from_acc<T>(h.w[2 * j] * row(h.i[2 * j]) + h.w[2 * j + 1] * row(h.i[2 * j + 1]));
  }
}

template <typename T, typename A>
__global__ void resample_backward_kernel(ResampleGeom g, T* gx, const T* gy, int64_t n) {
  const Ax<A> h{g.ih, static_cast<const A*>(g.wh), g.ho}, w{g.iw, static_cast<const A*>(g.ww), g.wo};
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t l = e % g.wi, r = e / g.wi, k = r % g.hi, o = r / g.hi;
    int64_t jb, je, mb, me;
    h.readers(k, jb, je);
    w.readers(l, mb, me);
    const T* go = gy + o * g.ho * g.wo;
    A s = A(0);
    for (int64_t m = mb; m < me; ++m) {
      A col = A(0);  // H's adjoint at column m, as the CPU kernel's per-row sums
      for (int64_t j = jb; j < je; ++j) col = h.share(j, k, load_as<A>(go, j * g.wo + m), col);
      s = w.share(m, l, col, s);
    }
    gx[e] = from_acc<T>(s);
  }
}

template <typename F> void by_dtype(DType dt, F&& f) {
  float_switch(dt, [&](auto t) {
    using T = decltype(t);
    f(T{}, acc_t<T>{});
  });
}

}  // namespace

void launch_resample(DType dt, const ResampleGeom& g, void* out, const void* x, cudaStream_t s) {
  const int64_t n = g.outer * g.ho * g.wo;
  if (n == 0) return;
  by_dtype(dt, [&](auto t, auto a) {
    using T = decltype(t);
    resample_kernel<T, decltype(a)><<<blocks_for(n, kThreads), kThreads, 0, s>>>(g, static_cast<T*>(out),
                                                                                 static_cast<const T*>(x), n);
  });
  MPX_CUDA_LAUNCH_CHECK("resample");
}

void launch_resample_backward(DType dt, const ResampleGeom& g, void* gx, const void* gy, cudaStream_t s) {
  const int64_t n = g.outer * g.hi * g.wi;
  if (n == 0) return;
  by_dtype(dt, [&](auto t, auto a) {
    using T = decltype(t);
    resample_backward_kernel<T, decltype(a)><<<blocks_for(n, kThreads), kThreads, 0, s>>>(
        g, static_cast<T*>(gx), static_cast<const T*>(gy), n);
  });
  MPX_CUDA_LAUNCH_CHECK("resample backward");
}

}  // namespace mpx::cuda
