// CUDA pooling kernels: max (argmax indices), average and adaptive average, forward and backward,
// over dense NCHW or channels-last tensors. Backward passes gather (deterministic, no atomics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/launch.h"
#include "ops/cuda/pooling_launch.h"
#include "ops/cuda/convert.cuh"
#include "ops/cuda/fast_divmod.h"

namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;


__device__ __forceinline__ int64_t grid_start() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t grid_step() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Division by a divisor fixed at launch, in the kernels' index type: a multiply and a shift for
// 32-bit indices (index arithmetic, not memory, bounds these kernels), the operator for 64-bit.
template <typename I> struct Divisor;
template <> struct Divisor<int32_t> {
  FastDivmod f;
  Divisor() = default;
  explicit Divisor(int64_t d) : f(static_cast<uint32_t>(d < 1 ? 1 : d)) {}
  __device__ __forceinline__ int32_t div(int32_t n) const { return static_cast<int32_t>(f.div(static_cast<uint32_t>(n))); }
  __device__ __forceinline__ void divmod(int32_t n, int32_t& q, int32_t& r) const {
    uint32_t uq, ur;
    f.divmod(static_cast<uint32_t>(n), uq, ur);
    q = static_cast<int32_t>(uq);
    r = static_cast<int32_t>(ur);
  }
};
template <> struct Divisor<int64_t> {
  int64_t d = 1;
  Divisor() = default;
  explicit Divisor(int64_t v) : d(v < 1 ? 1 : v) {}
  __device__ __forceinline__ int64_t div(int64_t n) const { return n / d; }
  __device__ __forceinline__ void divmod(int64_t n, int64_t& q, int64_t& r) const {
    q = n / d;
    r = n - q * d;
  }
};

// Element i (memory order) of a dense [N, C, Hd, Wd] tensor in g's layout: its pixel (h, w), and
// where pixel (0, 0) of the same (n, c) lies in a dense tensor of `other_hw` pixels per plane
// (the other side of the pooling), with `ps` elements between neighbouring pixels there.
// (locate_max below does the same for max pooling in its index type I: int32_t where every
// index fits, else int64_t.)
template <typename I> struct LocT {
  I h, w, base, ps;
};
using Loc = LocT<int64_t>;
template <typename G>
__device__ __forceinline__ Loc locate(int64_t i, const G& g, int64_t Hd, int64_t Wd, int64_t other_hw) {
  Loc l;
  if (g.nhwc) {
    const int64_t c = i % g.C;
    int64_t t = i / g.C;
    l.w = t % Wd;
    t /= Wd;
    l.h = t % Hd;
    l.base = (t / Hd) * other_hw * g.C + c;
    l.ps = g.C;
  } else {
    l.w = i % Wd;
    const int64_t t = i / Wd;
    l.h = t % Hd;
    l.base = (t / Hd) * other_hw;
    l.ps = 1;
  }
  return l;
}

// First output whose window [o * s, o * s + span) (in padded coordinates) reaches pos.
__device__ __forceinline__ int64_t first_window(int64_t pos, int64_t span, int64_t s) {
  return pos < span ? 0 : (pos - span) / s + 1;
}

// Max pooling's geometry in the kernels' index type, with the divisors its kernels use: the
// channel groups of V (channels-last), both sides' heights and widths, and the strides.
template <typename I> struct MaxGeom {
  I C, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw;
  Divisor<I> groups, dH, dW, dHo, dWo, dsh, dsw;
  bool nhwc;
};
template <typename I> MaxGeom<I> max_geom(const PoolGeom& g, int v) {
  auto c = [](int64_t x) { return static_cast<I>(x); };
  return MaxGeom<I>{c(g.C),  c(g.H),  c(g.W),  c(g.Ho), c(g.Wo), c(g.kh), c(g.kw),
                    c(g.sh), c(g.sw), c(g.ph), c(g.pw), c(g.dh), c(g.dw),
                    Divisor<I>(g.C / v), Divisor<I>(g.H), Divisor<I>(g.W), Divisor<I>(g.Ho),
                    Divisor<I>(g.Wo), Divisor<I>(g.sh), Divisor<I>(g.sw), g.nhwc};
}

// locate() for max pooling: group i of V channels (V = 1 for NCHW) on a side of hd x wd pixels.
template <typename I>
__device__ __forceinline__ LocT<I> locate_max(I i, const MaxGeom<I>& g, int v, const Divisor<I>& hd,
                                              const Divisor<I>& wd, I other_hw) {
  LocT<I> l;
  I t, r;
  if (g.nhwc) {
    g.groups.divmod(i, t, r);
    wd.divmod(t, t, l.w);
    I n;
    hd.divmod(t, n, l.h);
    l.base = n * other_hw * g.C + r * v;
    l.ps = g.C;
  } else {
    wd.divmod(i, t, l.w);
    I n;
    hd.divmod(t, n, l.h);
    l.base = n * other_hw;
    l.ps = 1;
  }
  return l;
}

// ---- max pooling ----

// V consecutive channels per thread (channels-last; 1 for NCHW): the index arithmetic is done
// once per pixel and group instead of once per element.
template <typename T, typename I, int V>
__global__ void max_pool_kernel(MaxGeom<I> g, T* y, int64_t* idx, const T* x, I groups) {
  using A = acc_t<T>;
  for (I o = static_cast<I>(grid_start()); o < groups; o += static_cast<I>(grid_step())) {
    const LocT<I> l = locate_max(o, g, V, g.dHo, g.dWo, g.H * g.W);
    const I h0 = l.h * g.sh - g.ph, w0 = l.w * g.sw - g.pw;
    A best[V];
    I bi[V];
    bool nan[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      best[v] = static_cast<A>(-INFINITY);
      bi[v] = -1;
      nan[v] = false;
    }
    // Same scan and tests as the CPU kernel: the first NaN wins and ends the channel's scan, else
    // the first strict maximum.
    for (I i = 0; i < g.kh; ++i) {
      const I h = h0 + i * g.dh;
      if (h < 0 || h >= g.H) continue;
      for (I j = 0; j < g.kw; ++j) {
        const I w = w0 + j * g.dw;
        if (w < 0 || w >= g.W) continue;
        const I at = l.base + (h * g.W + w) * l.ps;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          if (nan[v]) continue;
          const A val = load_as<A>(x, at + v);
          if (bi[v] < 0 || val > best[v] || isnan(val)) {
            best[v] = val;
            bi[v] = h * g.W + w;
            nan[v] = isnan(val);
          }
        }
      }
    }
    const I out = o * V;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      y[out + v] = from_acc<T>(best[v]);
      idx[out + v] = static_cast<int64_t>(bi[v]);
    }
  }
}

// Each input element sums gy over the outputs whose window holds it and whose argmax it is, in
// output order (the CPU kernel's order of accumulation, so the sums agree bit for bit).
template <typename T, typename I, int V>
__global__ void max_pool_backward_kernel(MaxGeom<I> g, T* gx, const T* gy, const int64_t* idx, I groups) {
  using A = acc_t<T>;
  const I span_h = (g.kh - 1) * g.dh + 1, span_w = (g.kw - 1) * g.dw + 1;
  for (I i = static_cast<I>(grid_start()); i < groups; i += static_cast<I>(grid_step())) {
    const LocT<I> l = locate_max(i, g, V, g.dH, g.dW, g.Ho * g.Wo);
    const int64_t target = l.h * g.W + l.w;
    const I ph = l.h + g.ph, pw = l.w + g.pw;
    const I oh0 = ph < span_h ? 0 : g.dsh.div(ph - span_h) + 1, oh1 = min(g.Ho, g.dsh.div(ph) + 1);
    const I ow0 = pw < span_w ? 0 : g.dsw.div(pw - span_w) + 1, ow1 = min(g.Wo, g.dsw.div(pw) + 1);
    A acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = A(0);
    for (I oh = oh0; oh < oh1; ++oh)
      for (I ow = ow0; ow < ow1; ++ow) {
        const I o = l.base + (oh * g.Wo + ow) * l.ps;
#pragma unroll
        for (int v = 0; v < V; ++v)
          if (idx[o + v] == target) acc[v] += load_as<A>(gy, o + v);
      }
    const I at = i * V;
#pragma unroll
    for (int v = 0; v < V; ++v) gx[at + v] = from_acc<T>(acc[v]);
  }
}

// ---- average pooling ----

// The CPU kernel's window of output (oh, ow), clipped to the image, and its divisor.
struct Window {
  int64_t h0, h1, w0, w1, div;
};
__device__ __forceinline__ Window avg_window(const PoolGeom& g, int64_t oh, int64_t ow) {
  Window wd;
  wd.h0 = oh * g.sh - g.ph;
  wd.w0 = ow * g.sw - g.pw;
  wd.h1 = min(wd.h0 + g.kh, g.H + g.ph);
  wd.w1 = min(wd.w0 + g.kw, g.W + g.pw);
  const int64_t pool = (wd.h1 - wd.h0) * (wd.w1 - wd.w0);
  wd.h0 = max(wd.h0, int64_t(0));
  wd.w0 = max(wd.w0, int64_t(0));
  wd.h1 = min(wd.h1, g.H);
  wd.w1 = min(wd.w1, g.W);
  const int64_t div = g.count_include_pad ? pool : (wd.h1 - wd.h0) * (wd.w1 - wd.w0);
  wd.div = max(div, int64_t(1));
  return wd;
}

template <typename T> __global__ void avg_pool_kernel(PoolGeom g, T* y, const T* x, int64_t total) {
  using A = acc_t<T>;
  for (int64_t o = grid_start(); o < total; o += grid_step()) {
    const Loc l = locate(o, g, g.Ho, g.Wo, g.H * g.W);
    const Window wd = avg_window(g, l.h, l.w);
    A acc = A(0);
    for (int64_t h = wd.h0; h < wd.h1; ++h)
      for (int64_t w = wd.w0; w < wd.w1; ++w) acc += load_as<A>(x, l.base + (h * g.W + w) * l.ps);
    y[o] = from_acc<T>(static_cast<A>(acc / static_cast<A>(wd.div)));
  }
}

template <typename T> __global__ void avg_pool_backward_kernel(PoolGeom g, T* gx, const T* gy, int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = grid_start(); i < total; i += grid_step()) {
    const Loc l = locate(i, g, g.H, g.W, g.Ho * g.Wo);
    const int64_t ph = l.h + g.ph, pw = l.w + g.pw;
    const int64_t oh0 = first_window(ph, g.kh, g.sh), oh1 = min(g.Ho, ph / g.sh + 1);
    const int64_t ow0 = first_window(pw, g.kw, g.sw), ow1 = min(g.Wo, pw / g.sw + 1);
    A acc = A(0);
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const Window wd = avg_window(g, oh, ow);
        acc += load_as<A>(gy, l.base + (oh * g.Wo + ow) * l.ps) / static_cast<A>(wd.div);
      }
    gx[i] = from_acc<T>(acc);
  }
}

// ---- adaptive average pooling ----

// PyTorch's adaptive bins: [floor(i * in / out), ceil((i + 1) * in / out)).
__device__ __forceinline__ int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
__device__ __forceinline__ int64_t bin_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

template <typename T> __global__ void adaptive_kernel(PoolGeom g, T* y, const T* x, int64_t total) {
  using A = acc_t<T>;
  for (int64_t o = grid_start(); o < total; o += grid_step()) {
    const Loc l = locate(o, g, g.Ho, g.Wo, g.H * g.W);
    const int64_t h0 = bin_start(l.h, g.H, g.Ho), h1 = bin_end(l.h, g.H, g.Ho);
    const int64_t w0 = bin_start(l.w, g.W, g.Wo), w1 = bin_end(l.w, g.W, g.Wo);
    A acc = A(0);
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) acc += load_as<A>(x, l.base + (h * g.W + w) * l.ps);
    y[o] = from_acc<T>(static_cast<A>(acc / static_cast<A>((h1 - h0) * (w1 - w0))));
  }
}

template <typename T> __global__ void adaptive_backward_kernel(PoolGeom g, T* gx, const T* gy, int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = grid_start(); i < total; i += grid_step()) {
    const Loc l = locate(i, g, g.H, g.W, g.Ho * g.Wo);
    // Bins holding h: floor(h * Ho / H) <= oh < ceil((h + 1) * Ho / H); tested again below.
    const int64_t oh0 = (l.h * g.Ho) / g.H, oh1 = min(g.Ho, ((l.h + 1) * g.Ho + g.H - 1) / g.H);
    const int64_t ow0 = (l.w * g.Wo) / g.W, ow1 = min(g.Wo, ((l.w + 1) * g.Wo + g.W - 1) / g.W);
    A acc = A(0);
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      const int64_t h0 = bin_start(oh, g.H, g.Ho), h1 = bin_end(oh, g.H, g.Ho);
      if (l.h < h0 || l.h >= h1) continue;
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t w0 = bin_start(ow, g.W, g.Wo), w1 = bin_end(ow, g.W, g.Wo);
        if (l.w < w0 || l.w >= w1) continue;
        acc += load_as<A>(gy, l.base + (oh * g.Wo + ow) * l.ps) / static_cast<A>((h1 - h0) * (w1 - w0));
      }
    }
    gx[i] = from_acc<T>(acc);
  }
}

// Global average pooling's backward: every pixel of a plane gets gy / (H W), as the adaptive
// kernel computes it (a sum from 0). Channels-last threads take V consecutive channels, as the
// max-pooling kernels do; 32-bit indices divide through FastDivmod (`groups`: C / V channel
// groups per pixel, `hw`: pixels per plane).
template <typename T, int V>
__global__ void global_avg_backward_kernel(T* gx, const T* gy, FastDivmod groups, FastDivmod hw, int32_t C,
                                           bool nhwc, int32_t total) {
  using A = acc_t<T>;
  const A div = static_cast<A>(hw.divisor);
  for (int32_t i = static_cast<int32_t>(grid_start()); i < total; i += static_cast<int32_t>(grid_step())) {
    uint32_t from;  // gy's element of the first value
    if (nhwc) {
      uint32_t pixel, g;
      groups.divmod(static_cast<uint32_t>(i), pixel, g);
      from = hw.div(pixel) * static_cast<uint32_t>(C) + g * V;
    } else {
      from = hw.div(static_cast<uint32_t>(i));
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      A acc = A(0);
      acc += load_as<A>(gy, from + v) / div;
      gx[static_cast<int64_t>(i) * V + v] = from_acc<T>(acc);
    }
  }
}

// Global average pooling over NCHW: one warp per (n, c) plane, lanes striding over its pixels.
template <typename T> __global__ void global_avg_nchw_kernel(T* y, const T* x, int64_t planes, int64_t hw) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_block = blockDim.x / 32;
  const int64_t first = blockIdx.x * warps_per_block + threadIdx.x / 32;
  for (int64_t p = first; p < planes; p += static_cast<int64_t>(gridDim.x) * warps_per_block) {
    const T* xp = x + p * hw;
    A acc = A(0);
    for (int64_t i = lane; i < hw; i += 32) acc += load_as<A>(xp, i);
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) y[p] = from_acc<T>(static_cast<A>(acc / static_cast<A>(hw)));
  }
}

// Global average pooling over NHWC: threadIdx.x runs over 32 consecutive channels (coalesced),
// threadIdx.y over kRowsY interleaved subsets of the pixels, combined through shared memory.
constexpr int kRowsY = 8;
template <typename T>
__global__ void global_avg_nhwc_kernel(T* y, const T* x, int64_t N, int64_t C, int64_t hw) {
  using A = acc_t<T>;
  __shared__ A part[kRowsY][32];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    A acc = A(0);
    if (c < C) {
      const T* xp = x + n * hw * C + c;
      for (int64_t i = threadIdx.y; i < hw; i += kRowsY) acc += load_as<A>(xp, i * C);
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      A s = part[0][threadIdx.x];
      for (int r = 1; r < kRowsY; ++r) s += part[r][threadIdx.x];
      y[n * C + c] = from_acc<T>(static_cast<A>(s / static_cast<A>(hw)));
    }
    __syncthreads();
  }
}

// ---- dtype dispatch ----

template <typename T> struct Tag { using type = T; };
template <typename F> void by_dtype(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::kFloat32: f(Tag<float>{}); break;
    case DType::kFloat64: f(Tag<double>{}); break;
    case DType::kFloat16: f(Tag<__half>{}); break;
    case DType::kBFloat16: f(Tag<__nv_bfloat16>{}); break;
    default:
      throw_error(static_cast<int>(cudaErrorInvalidValue), op, "dtype dispatch (expected f32, f64, f16 or bf16)");
  }
}

int64_t in_numel(const PoolGeom& g) { return g.N * g.C * g.H * g.W; }
int64_t out_numel(const PoolGeom& g) { return g.N * g.C * g.Ho * g.Wo; }
// Whether 32-bit indices reach every element (with room for a grid-stride step past the end).
bool fits_i32(const PoolGeom& g) { return std::max(in_numel(g), out_numel(g)) <= (int64_t{1} << 30); }

// Channels per thread of the max-pooling and global-average backward kernels: up to 16 bytes of
// consecutive channels on channels-last tensors whose channel count they divide, 1 otherwise.
template <typename T> int channels_per_thread(const PoolGeom& g) {
  if (!g.nhwc) return 1;
  for (int v = static_cast<int>(16 / sizeof(T)); v > 1; v /= 2)
    if (g.C % v == 0) return v;
  return 1;
}

// Calls launch(width, groups): the channels per thread for T as a compile-time constant V (1, 2,
// 4 or 8) and the number of groups of V among the n elements, as the 32-bit index type.
template <typename T, typename F> void by_width(const PoolGeom& g, int64_t n, F&& launch) {
  auto run = [&](auto width) {
    constexpr int V = decltype(width)::value;
    if constexpr (V * sizeof(T) <= 16) launch(width, static_cast<int32_t>(n / V));
  };
  switch (channels_per_thread<T>(g)) {
    case 8: run(std::integral_constant<int, 8>{}); break;
    case 4: run(std::integral_constant<int, 4>{}); break;
    case 2: run(std::integral_constant<int, 2>{}); break;
    default: run(std::integral_constant<int, 1>{}); break;
  }
}

}  // namespace

void launch_max_pool2d(DType dt, const PoolGeom& g, void* y, int64_t* idx, const void* x, cudaStream_t s) {
  const int64_t n = out_numel(g);
  if (n == 0) return;
  by_dtype(dt, "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* yp = static_cast<T*>(y);
    const T* xp = static_cast<const T*>(x);
    if (fits_i32(g)) {
      by_width<T>(g, n, [&](auto width, int32_t groups) {
        constexpr int V = decltype(width)::value;
        max_pool_kernel<T, int32_t, V><<<blocks_for(groups, kThreads), kThreads, 0, s>>>(max_geom<int32_t>(g, V), yp,
                                                                                         idx, xp, groups);
      });
    } else {
      max_pool_kernel<T, int64_t, 1><<<blocks_for(n, kThreads), kThreads, 0, s>>>(max_geom<int64_t>(g, 1), yp, idx,
                                                                                   xp, n);
    }
    MPX_CUDA_LAUNCH_CHECK("max_pool2d");
  });
}

void launch_max_pool2d_backward(DType dt, const PoolGeom& g, void* gx, const void* gy, const int64_t* idx,
                                cudaStream_t s) {
  const int64_t n = in_numel(g);
  if (n == 0) return;
  by_dtype(dt, "max_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* gxp = static_cast<T*>(gx);
    const T* gyp = static_cast<const T*>(gy);
    if (fits_i32(g)) {
      by_width<T>(g, n, [&](auto width, int32_t groups) {
        constexpr int V = decltype(width)::value;
        max_pool_backward_kernel<T, int32_t, V><<<blocks_for(groups, kThreads), kThreads, 0, s>>>(
            max_geom<int32_t>(g, V), gxp, gyp, idx, groups);
      });
    } else {
      max_pool_backward_kernel<T, int64_t, 1><<<blocks_for(n, kThreads), kThreads, 0, s>>>(
          max_geom<int64_t>(g, 1), gxp, gyp, idx, n);
    }
    MPX_CUDA_LAUNCH_CHECK("max_pool2d backward");
  });
}

void launch_avg_pool2d(DType dt, const PoolGeom& g, void* y, const void* x, cudaStream_t s) {
  const int64_t n = out_numel(g);
  if (n == 0) return;
  by_dtype(dt, "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, s>>>(g, static_cast<T*>(y), static_cast<const T*>(x),
                                                                      n);
    MPX_CUDA_LAUNCH_CHECK("avg_pool2d");
  });
}

void launch_avg_pool2d_backward(DType dt, const PoolGeom& g, void* gx, const void* gy, cudaStream_t s) {
  const int64_t n = in_numel(g);
  if (n == 0) return;
  by_dtype(dt, "avg_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, s>>>(g, static_cast<T*>(gx),
                                                                               static_cast<const T*>(gy), n);
    MPX_CUDA_LAUNCH_CHECK("avg_pool2d backward");
  });
}

void launch_adaptive_avg_pool2d(DType dt, const PoolGeom& g, void* y, const void* x, cudaStream_t s) {
  const int64_t n = out_numel(g);
  if (n == 0) return;
  const int64_t hw = g.H * g.W;
  by_dtype(dt, "adaptive_avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* yp = static_cast<T*>(y);
    const T* xp = static_cast<const T*>(x);
    if (g.Ho == 1 && g.Wo == 1 && g.nhwc) {
      const int64_t cblocks = (g.C + 31) / 32;
      const dim3 grid(static_cast<unsigned>(cblocks), static_cast<unsigned>(g.N < 65535 ? g.N : 65535));
      global_avg_nhwc_kernel<T><<<grid, dim3(32, kRowsY), 0, s>>>(yp, xp, g.N, g.C, hw);
    } else if (g.Ho == 1 && g.Wo == 1) {
      const int64_t planes = g.N * g.C;
      global_avg_nchw_kernel<T><<<blocks_for(planes * 32, kThreads), kThreads, 0, s>>>(yp, xp, planes, hw);
    } else {
      adaptive_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, s>>>(g, yp, xp, n);
    }
    MPX_CUDA_LAUNCH_CHECK("adaptive_avg_pool2d");
  });
}

void launch_adaptive_avg_pool2d_backward(DType dt, const PoolGeom& g, void* gx, const void* gy, cudaStream_t s) {
  const int64_t n = in_numel(g);
  if (n == 0) return;
  by_dtype(dt, "adaptive_avg_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* gxp = static_cast<T*>(gx);
    const T* gyp = static_cast<const T*>(gy);
    if (g.Ho == 1 && g.Wo == 1 && fits_i32(g)) {
      // The head of every classification network: no bins to search, one division per group.
      by_width<T>(g, n, [&](auto width, int32_t groups) {
        constexpr int V = decltype(width)::value;
        global_avg_backward_kernel<T, V><<<blocks_for(groups, kThreads), kThreads, 0, s>>>(
            gxp, gyp, FastDivmod(static_cast<uint32_t>(g.C / V)), FastDivmod(static_cast<uint32_t>(g.H * g.W)),
            static_cast<int32_t>(g.C), g.nhwc, groups);
      });
    } else {
      adaptive_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, s>>>(g, gxp, gyp, n);
    }
    MPX_CUDA_LAUNCH_CHECK("adaptive_avg_pool2d backward");
  });
}

}  // namespace mpx::cuda
