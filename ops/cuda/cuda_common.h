// Host-side helpers for the CUDA kernel files' .cpp halves: current streams, tensor descriptors.
#pragma once
#include "core/cuda.h"
#include "core/tensor.h"
#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// The current stream of a device as a cudaStream_t.
cudaStream_t stream_of(int device);
inline cudaStream_t stream_of(const Tensor& t) { return stream_of(t.device().index); }

/// The tensor as a kernel argument, with its own sizes and strides. Throws naming `op`
/// when it has more than kMaxDims dimensions.
TensorDesc desc(const Tensor& t, const char* op = "cuda kernel");
/// The tensor broadcast to `shape` (numpy rules; expanded dimensions get stride 0).
TensorDesc desc(const Tensor& t, const IntList& shape, const char* op = "cuda kernel");

/// Sets the current device to a tensor's for the duration of a kernel launch.
class TensorDeviceGuard {
 public:
  explicit TensorDeviceGuard(const Tensor& t);
  ~TensorDeviceGuard();
  TensorDeviceGuard(const TensorDeviceGuard&) = delete;
  TensorDeviceGuard& operator=(const TensorDeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

}  // namespace mpx::cuda
