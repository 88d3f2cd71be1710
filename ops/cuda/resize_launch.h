// Launchers of the CUDA resampling kernels (POD arguments, shared by ops/cuda/resize.cu and ops/cuda/resize.cpp).
#pragma once
#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// interpolate's pass over [outer, hi, wi] -> [outer, ho, wo], with each axis's device arrays as ops/resize.h's
/// ResampleFn describes them: positions i (null: the axis is kept) and weights w (null: nearest), the weights in
/// f32 (f64 for f64 data).
struct ResampleGeom {
  int64_t outer = 0, hi = 1, wi = 1, ho = 1, wo = 1;
  const int64_t* ih = nullptr;
  const void* wh = nullptr;
  const int64_t* iw = nullptr;
  const void* ww = nullptr;
};

/// out = H(W(x)), one thread per output element, in the CPU kernel's order of operations. dt: f32, f64, f16, bf16.
void launch_resample(DType dt, const ResampleGeom& g, void* out, const void* x, cudaStream_t s);
/// gx = the adjoint applied to gy: one thread per gx element gathers the outputs that read it (found by binary
/// search in the sorted positions), so the sums are deterministic and need no atomics.
void launch_resample_backward(DType dt, const ResampleGeom& g, void* gx, const void* gy, cudaStream_t s);

}  // namespace mpx::cuda
