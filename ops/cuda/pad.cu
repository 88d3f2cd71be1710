// CUDA kernels of pad (ops/pad.h): the gather, and its adjoint as a gather over each input element's readers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/convert.cuh"
#include "ops/cuda/pad_launch.h"
#include "ops/pad_map.h"

namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;

template <typename W>
__global__ void pad_kernel(PadGeom g, W* out, const W* x, W fill, int64_t n) {
  const padmap::Axis d{g.md, g.di, g.d_out}, h{g.mh, g.hi, g.h_out}, w{g.mw, g.wi, g.w_out};
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = e % g.w_out, r = e / g.w_out, j = r % g.h_out, r2 = r / g.h_out, k = r2 % g.d_out,
                  o = r2 / g.d_out;
    const int64_t sd = d.src(k), sh = h.src(j), sw = w.src(m);
    out[e] = sd < 0 || sh < 0 || sw < 0 ? fill : x[((o * g.di + sd) * g.hi + sh) * g.wi + sw];
  }
}

template <typename T, typename A>
__global__ void pad_backward_kernel(PadGeom g, T* gx, const T* gy, int64_t n) {
  const padmap::Axis d{g.md, g.di, g.d_out}, h{g.mh, g.hi, g.h_out}, w{g.mw, g.wi, g.w_out};
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t l = e % g.wi, r = e / g.wi, k = r % g.hi, r2 = r / g.hi, i = r2 % g.di, o = r2 / g.di;
    A s = A(0);
    for (int64_t a = d.begin(i); a < d.end(i); ++a)
      for (int64_t c = h.begin(k); c < h.end(k); ++c) {
        const T* row = gy + ((o * g.d_out + d.reader(a)) * g.h_out + h.reader(c)) * g.w_out;
        for (int64_t b = w.begin(l); b < w.end(l); ++b) s += load_as<A>(row, w.reader(b));
      }
    gx[e] = from_acc<T>(s);
  }
}

}  // namespace

void launch_pad(int elem_size, const PadGeom& g, void* out, const void* x, uint64_t value_bits, cudaStream_t s) {
  const int64_t n = g.outer * g.d_out * g.h_out * g.w_out;
  if (n == 0) return;
  by_size(elem_size, [&](auto word) {
    using W = decltype(word);
    pad_kernel<W><<<blocks_for(n, kThreads), kThreads, 0, s>>>(g, static_cast<W*>(out), static_cast<const W*>(x),
                                                               static_cast<W>(value_bits), n);
  });
  MPX_CUDA_LAUNCH_CHECK("pad");
}

void launch_pad_backward(DType dt, const PadGeom& g, void* gx, const void* gy, cudaStream_t s) {
  const int64_t n = g.outer * g.di * g.hi * g.wi;
  if (n == 0) return;
  float_switch(dt, [&](auto t) {
    using T = decltype(t);
    pad_backward_kernel<T, acc_t<T>><<<blocks_for(n, kThreads), kThreads, 0, s>>>(g, static_cast<T*>(gx),
                                                                                  static_cast<const T*>(gy), n);
  });
  MPX_CUDA_LAUNCH_CHECK("pad backward");
}

}  // namespace mpx::cuda
