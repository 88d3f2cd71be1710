// What a .cu file rewritten by hostify.cpp needs on the host: launches, intrinsics and atomics on CPU fibers, and
// the CUDA runtime calls mpx's kernel files make, on host memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/cuda_check.h"
#include "warp_threads.h"

// Host memory stands in for device memory, and launches run to completion: nothing to check afterwards.
#undef MPX_CUDA_CHECK
#define MPX_CUDA_CHECK(call, what)                                                              \
  do {                                                                                          \
    if ((call) != cudaSuccess) throw std::runtime_error(std::string(what) + ": " #call " failed"); \
  } while (0)
#undef MPX_CUDA_LAUNCH_CHECK
#define MPX_CUDA_LAUNCH_CHECK(what) ((void)(what))
#define cudaMemsetAsync(p, v, n, s) (std::memset((p), (v), (n)), (void)(s), cudaSuccess)
#define cudaMemcpyAsync(dst, src, n, kind, s) (std::memmove((dst), (src), (n)), (void)(kind), (void)(s), cudaSuccess)
// The device the kernel files ask about: an H100's 132 multiprocessors and 227 KiB of shared memory per block;
// every kernel has sm_90 code and takes any shared-memory size.
#define cudaDeviceGetAttribute(value, attr, dev)                                                       \
  (*(value) = (attr) == cudaDevAttrMultiProcessorCount           ? 132                                \
              : (attr) == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 232448                             \
                                                                  : 0,                                 \
   (void)(dev), cudaSuccess)
#define cudaFuncGetAttributes(attr, fn) ((attr)->ptxVersion = 90, (attr)->binaryVersion = 90, (void)(fn), cudaSuccess)
#define cudaFuncSetAttribute(fn, attr, value) ((void)(fn), (void)(attr), (void)(value), cudaSuccess)

namespace cuda_emu {
struct Launch {
  dim3 grid, threads;
  size_t smem;
  Launch(dim3 g, dim3 t, size_t shared = 0, cudaStream_t = nullptr) : grid(g), threads(t), smem(shared) {}
};
template <typename F> struct Launched {
  Launch cfg;
  F kernel;
  template <typename... A> void operator()(A... args) {  // by value, as kernel arguments are
    run(cfg.grid, cfg.threads, cfg.smem, [&] { kernel(args...); });
  }
};
template <typename F> Launched<F> operator+(Launch cfg, F kernel) { return {cfg, kernel}; }
}  // namespace cuda_emu

// Device code calls the math functions unqualified, as CUDA declares them for float and double.
using std::exp, std::expm1, std::log, std::log1p, std::sqrt, std::tanh, std::isnan, std::isinf, std::isfinite,
    std::fabs, std::pow, std::floor, std::ceil, std::fmax, std::fmin;

// CUDA's min/max overloads mix argument types; the common type as theirs.
template <typename A, typename B> std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <typename A, typename B> std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
#define __launch_bounds__(...)

template <typename T> T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
namespace cuda_emu {
// f16/bf16: a compare-and-swap loop on the 16 bits, the sum rounded once as the hardware does.
template <typename H, typename ToF, typename FromF> H add16(H* p, H v, ToF to_f, FromF from_f) {
  std::atomic_ref<uint16_t> bits(*reinterpret_cast<uint16_t*>(p));
  uint16_t old = bits.load();
  for (;;) {
    H o, n;
    std::memcpy(&o, &old, 2);
    n = from_f(to_f(o) + to_f(v));
    uint16_t nb;
    std::memcpy(&nb, &n, 2);
    if (bits.compare_exchange_weak(old, nb)) return o;
  }
}
}  // namespace cuda_emu
inline __half atomicAdd(__half* p, __half v) { return cuda_emu::add16(p, v, __half2float, __float2half_rn); }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  return cuda_emu::add16(p, v, __bfloat162float, __float2bfloat16_rn);
}
template <typename T> T atomicCAS(T* p, T expected, T desired) {
  std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired);
  return expected;
}
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
template <typename T> T __ldg(const T* p) { return *p; }
