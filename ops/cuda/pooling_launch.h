// Launchers of the CUDA pooling kernels (POD arguments, shared by ops/cuda/pooling.cu and ops/cuda/pooling.cpp).
#pragma once
#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// Shapes and window of a 2-d pooling over dense [N, C, H, W] input and [N, C, Ho, Wo] output,
/// both NCHW (nhwc = false) or both channels-last (nhwc = true).
struct PoolGeom {
  int64_t N = 0, C = 0, H = 0, W = 0, Ho = 0, Wo = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool count_include_pad = true;
  bool nhwc = false;
};

/// y and idx (argmax as h * W + w in each plane, -1 for an all-padding window) of max pooling;
/// the first NaN of a window (row-major scan) wins, else the first maximum. dt: f32, f64, f16, bf16.
void launch_max_pool2d(DType dt, const PoolGeom& g, void* y, int64_t* idx, const void* x, cudaStream_t s);
/// gx = sum of gy over the outputs whose argmax is each input element (a deterministic gather).
void launch_max_pool2d_backward(DType dt, const PoolGeom& g, void* gx, const void* gy, const int64_t* idx,
                                cudaStream_t s);
/// y = window averages of x (padding, count_include_pad and ceil-mode windows as the CPU kernels).
void launch_avg_pool2d(DType dt, const PoolGeom& g, void* y, const void* x, cudaStream_t s);
/// gx = the adjoint of avg pooling applied to gy (a gather; overwrites gx).
void launch_avg_pool2d_backward(DType dt, const PoolGeom& g, void* gx, const void* gy, cudaStream_t s);
/// Adaptive average pooling with PyTorch's bins; Ho = Wo = 1 runs a global-average reduction.
void launch_adaptive_avg_pool2d(DType dt, const PoolGeom& g, void* y, const void* x, cudaStream_t s);
/// gx = the adjoint of adaptive average pooling applied to gy (a gather; overwrites gx).
void launch_adaptive_avg_pool2d_backward(DType dt, const PoolGeom& g, void* gx, const void* gy, cudaStream_t s);

}  // namespace mpx::cuda
