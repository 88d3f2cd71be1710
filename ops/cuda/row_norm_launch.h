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
/// Tiles of rows the parameter gradients are summed over (one partial per tile and column, then
/// the tiles in order: deterministic). The backward's workspace holds 2 * tiles * D statistics values.
inline int64_t row_norm_param_tiles(int64_t rows) {
  const int64_t t = (rows + 31) / 32;
  return t < 1 ? 1 : t > 256 ? 256 : t;
}
/// Backward: dx (dt, or null), dw and db ([D], statistics type, or null) from dy and x [rows, D]
/// and the forward's statistics (mean null for RMS); w [D] statistics type or null. `ws`: the
/// workspace above (needed when dw or db is wanted).
void launch_row_norm_bwd(DType dt, bool rms, void* dx, void* dw, void* db, const void* dy, const void* x,
                         const void* mean, const void* rstd, const void* w, void* ws, int64_t rows, int64_t D,
                         cudaStream_t s);

}  // namespace mpx::cuda
