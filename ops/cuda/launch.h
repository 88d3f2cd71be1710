// What host code (.cpp, C++20) and kernel files (.cu, C++17) share: tensor descriptors passed
// to kernels by value, the error check for CUDA calls (core/cuda_check.h), and launch-size helpers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/dtype.h"
#include "core/hd.h"

namespace mpx::cuda {

/// Most dimensions a kernel sees; host code collapses or rejects more.
inline constexpr int kMaxDims = 8;

/// A strided tensor view as a kernel argument (sizes and strides in elements). Broadcast
/// inputs carry stride 0 in the expanded dimensions.
struct TensorDesc {
  void* data = nullptr;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int ndim = 0;
  DType dtype = DType::kFloat32;
  MPX_HD int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
  /// Element offset of the i-th element in row-major order of `sizes`.
  MPX_HD int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t s = sizes[d];
      off += (i % s) * strides[d];
      i /= s;
    }
    return off;
  }
};

/// Blocks of `threads` covering n elements, capped so grid-stride loops take over.
inline unsigned blocks_for(int64_t n, int threads = 256, int64_t cap = 65535LL * 8) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

}  // namespace mpx::cuda
