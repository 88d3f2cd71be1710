// Device-side element conversions shared by the kernel files: f16/bf16 compute in f32 and are
// rounded once at the store (round-to-nearest-even, as the CPU kernels do).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace mpx::cuda {

template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<__half> { using type = float; };
template <> struct AccOf<__nv_bfloat16> { using type = float; };
/// The type a kernel computes in for elements of type T.
template <typename T> using acc_t = typename AccOf<T>::type;

/// Element i of p, widened to A.
template <typename A, typename T> __device__ __forceinline__ A load_as(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, __half>) return static_cast<A>(__half2float(p[i]));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return static_cast<A>(__bfloat162float(p[i]));
  else return static_cast<A>(p[i]);
}
/// v rounded to T.
template <typename T, typename A> __device__ __forceinline__ T from_acc(A v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else return static_cast<T>(v);
}

/// Calls f(T{}) with the device type of a floating dtype (others: nothing; callers register floating dtypes only).
template <typename F>
void float_switch(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32: f(float{}); break;
    case DType::kFloat64: f(double{}); break;
    case DType::kFloat16: f(__half{}); break;
    case DType::kBFloat16: f(__nv_bfloat16{}); break;
    default: break;  // the .cpp registers floating dtypes only
  }
}

/// Calls f(W{}) with the unsigned word of `size` bytes (1, 2, 4 or 8): data-movement kernels copy elements as words.
template <typename F> void by_size(int size, F&& f) {
  switch (size) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default: break;
  }
}

}  // namespace mpx::cuda
