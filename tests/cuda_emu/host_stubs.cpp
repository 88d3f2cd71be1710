// What the CUDA kernel files call from the CUDA runtime module, for the emulated tests: one default stream, errors,
// the current device.
#include "ops/cuda/cuda_common.h"

#include <stdexcept>
#include <string>

namespace mpx::cuda {

cudaStream_t stream_of(int) { return nullptr; }
void throw_error(int code, const char* what, const char* call) {
  throw std::runtime_error(std::string(what) + ": " + call + " failed with CUDA error " + std::to_string(code));
}

}  // namespace mpx::cuda

// One device, 0 (the kernel files' per-device caches); TensorDeviceGuard never switches (no CUDA tensors here).
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaErrorNoDevice; }
