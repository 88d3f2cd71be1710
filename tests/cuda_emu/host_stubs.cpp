// What the CUDA kernel files call beyond their own family, for the emulated tests: one default stream, errors, and no
// flash attention (its kernels need sm_80 code; test_flash_emulated.cpp runs their bodies directly).
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/cuda_common.h"

#include <stdexcept>
#include <string>

namespace mpx::cuda {

cudaStream_t stream_of(int) { return nullptr; }
void throw_error(int code, const char* what, const char* call) {
  throw std::runtime_error(std::string(what) + ": " + call + " failed with CUDA error " + std::to_string(code));
}

bool launch_flash_forward(DType, const SdpaGeom&, void*, void*, const void*, const void*, const void*, const void*,
                          cudaStream_t) {
  return false;
}
bool launch_flash_backward(DType, const SdpaGeom&, void*, void*, void*, void*, const void*, const void*, const void*,
                           const void*, const void*, const void*, const void*, cudaStream_t) {
  return false;
}

}  // namespace mpx::cuda

// One device, 0 (the kernel files' per-device caches); TensorDeviceGuard never switches (no CUDA tensors here).
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaErrorNoDevice; }
