// Kernels of the CUDA linear-algebra family that cuBLASLt does not cover: scaling out by beta for k = 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops/cuda/launch.h"
#include "ops/cuda/linalg_launch.h"

namespace mpx::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f(float v) { return static_cast<T>(v); }
template <>
__device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Scales in the accumulation type (f32, f64 for f64), like the CPU kernel's k = 0 path.
template <typename T, typename Acc>
__global__ void scale_kernel(T* p, int64_t n, Acc beta) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (sizeof(Acc) == 8) p[i] = static_cast<T>(static_cast<Acc>(p[i]) * beta);
    else p[i] = from_f<T>(to_f<T>(p[i]) * beta);
  }
}

template <typename T, typename Acc>
void launch(void* p, int64_t n, double beta, cudaStream_t s) {
  scale_kernel<T, Acc><<<blocks_for(n), 256, 0, s>>>(static_cast<T*>(p), n, static_cast<Acc>(beta));
}

}  // namespace

void launch_scale(void* p, int64_t n, DType dt, double beta, cudaStream_t s) {
  if (n <= 0) return;
  switch (dt) {
    case DType::kFloat32: launch<float, float>(p, n, beta, s); break;
    case DType::kFloat64: launch<double, double>(p, n, beta, s); break;
    case DType::kFloat16: launch<__half, float>(p, n, beta, s); break;
    case DType::kBFloat16: launch<__nv_bfloat16, float>(p, n, beta, s); break;
    default: return;
  }
  MPX_CUDA_LAUNCH_CHECK("mm");
}

}  // namespace mpx::cuda
