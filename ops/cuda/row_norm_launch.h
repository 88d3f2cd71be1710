// Launchers of the CUDA row-norm kernels (layer norm, RMS norm) with POD arguments, shared by
// ops/cuda/row_norm.cu and ops/cuda/row_norm.cpp.
#pragma once
#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// Forward over x [rows, D] contiguous of dtype dt: y (dt), mean (layer norm only; null for RMS)
/// and rstd [rows] in the statistics type (f32; f64 for f64); w and b [D] in the statistics type
/// or null. One block per row, f32 accumulation.
void launch_row_norm_fwd(DType dt, bool rms, void* y, void* mean, void* rstd, const void* x, const void* w,
                         const void* b, int64_t rows, int64_t D, double eps, cudaStream_t s);
/// Backward: dx (dt, or null), dw and db ([D], statistics type, or null) from dy and x [rows, D]
/// and the forward's statistics (mean null for RMS); w [D] statistics type or null.
void launch_row_norm_bwd(DType dt, bool rms, void* dx, void* dw, void* db, const void* dy, const void* x,
                         const void* mean, const void* rstd, const void* w, int64_t rows, int64_t D, cudaStream_t s);

}  // namespace mpx::cuda
