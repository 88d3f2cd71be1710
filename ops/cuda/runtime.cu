// CUDA backend seam: device discovery and a smoke kernel; the full backend lands in later work.
#include <cuda_runtime.h>

namespace mpx::detail {
extern int (*g_cuda_device_count)();
}

namespace {
int device_count() {
  int n = 0;
  // No driver or no device is not an error for a CPU-only run: report zero devices.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

__global__ void fill_f32(float* p, float v, long long n) {
  long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = v;
}

struct Register {
  Register() { mpx::detail::g_cuda_device_count = &device_count; }
} register_cuda;
}  // namespace

namespace mpx::cuda {
/// Launch check used by tests once the backend has device tensors.
void launch_fill(float* p, float v, long long n, cudaStream_t s) {
  fill_f32<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(p, v, n);
}
}  // namespace mpx::cuda
