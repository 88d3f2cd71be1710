// The CUDA kernel of GPU JPEG decoding: every image of a batch resampled (antialiased bilinear, host-computed weights), flipped, normalized and cast in one launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "data/resample_batch.h"
#include "ops/cuda/convert.cuh"
#include "ops/cuda/launch.h"

namespace mpx::data {
namespace {

constexpr int kThreads = 256;

// One thread per output pixel (job, row, column), grid-stride; consecutive threads take
// consecutive columns, so stores of [N,3,H,W] are coalesced per channel.
template <typename T>
__global__ void resample_batch_kernel(const ResampleJob* jobs, const int32_t* ints, const float* weights, int64_t n,
                                      int32_t out_h, int32_t out_w, const uint8_t* pixels, ResampleOutput o, T* out) {
  const int64_t per = static_cast<int64_t>(out_h) * out_w;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * per;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const ResampleJob j = jobs[i / per];
    const auto r = static_cast<int32_t>(i % per);
    const int32_t y = r / out_w, xo = r % out_w;
    float v[3];
    resample_pixel(j, ints, weights, pixels, out_h, out_w, y, j.flip ? out_w - 1 - xo : xo, v);
    for (int c = 0; c < 3; ++c) {
      const int64_t at = resample_out_index(o.channels_last, out_h, out_w, j.sample, c, y, xo);
      if constexpr (std::is_same_v<T, uint8_t>) out[at] = static_cast<uint8_t>(resample_to_u8(v[c]));
      else out[at] = cuda::from_acc<T>(v[c] * o.mul[c] + o.add[c]);
    }
  }
}

template <typename T>
void launch(const uint8_t* table, size_t ints_at, size_t weights_at, int64_t n, int64_t out_h, int64_t out_w,
            const uint8_t* pixels, const ResampleOutput& o, void* out, cudaStream_t s) {
  const int64_t total = n * out_h * out_w;
  resample_batch_kernel<T><<<cuda::blocks_for(total, kThreads), kThreads, 0, s>>>(
      reinterpret_cast<const ResampleJob*>(table), reinterpret_cast<const int32_t*>(table + ints_at),
      reinterpret_cast<const float*>(table + weights_at), n, static_cast<int32_t>(out_h), static_cast<int32_t>(out_w),
      pixels, o, static_cast<T*>(out));
  MPX_CUDA_LAUNCH_CHECK("GPU JPEG decode: resample kernel");
}

}  // namespace

void launch_resample_batch(const uint8_t* table, size_t ints_at, size_t weights_at, int64_t jobs, int64_t out_h,
                           int64_t out_w, const uint8_t* pixels, const ResampleOutput& o, void* out, void* stream) {
  if (jobs == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (o.dtype) {
    case DType::kUInt8: launch<uint8_t>(table, ints_at, weights_at, jobs, out_h, out_w, pixels, o, out, s); break;
    case DType::kFloat32: launch<float>(table, ints_at, weights_at, jobs, out_h, out_w, pixels, o, out, s); break;
    case DType::kFloat16: launch<__half>(table, ints_at, weights_at, jobs, out_h, out_w, pixels, o, out, s); break;
    case DType::kBFloat16:
      launch<__nv_bfloat16>(table, ints_at, weights_at, jobs, out_h, out_w, pixels, o, out, s);
      break;
    default: cuda::throw_error(static_cast<int>(cudaErrorInvalidValue), "GPU JPEG decode", "output dtype not u8/f32/f16/bf16");
  }
}

}  // namespace mpx::data
