// Launchers of the small linear-algebra kernels (POD arguments; shared by linalg.cu and linalg.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace mpx::cuda {

/// p[i] *= beta for i < n, contiguous elements of a floating dtype (f16/bf16 scaled in f32,
/// rounded once): a GEMM's result when its inner dimension is empty.
void launch_scale(void* p, int64_t n, DType dt, double beta, cudaStream_t s);

}  // namespace mpx::cuda
