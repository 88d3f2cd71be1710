// The error check for CUDA runtime calls, shared by the runtime (core/) and the kernel files (ops/cuda/, .cu in C++17).
#pragma once
#include <cuda_runtime_api.h>

namespace mpx::cuda {

/// Throws mpx::Error naming the op, the failing call and CUDA's message.
[[noreturn]] void throw_error(int code, const char* what, const char* call);

}  // namespace mpx::cuda

/// Checks a CUDA runtime call; `what` names the op ("matmul", "cuda allocator", ...).
#define MPX_CUDA_CHECK(call, what)                                               \
  do {                                                                           \
    const cudaError_t mpx_e_ = (call);                                           \
    if (mpx_e_ != cudaSuccess) ::mpx::cuda::throw_error(static_cast<int>(mpx_e_), what, #call); \
  } while (0)

/// Checks the launch just issued (bad configuration, missing kernel image for this GPU).
#define MPX_CUDA_LAUNCH_CHECK(what) MPX_CUDA_CHECK(cudaGetLastError(), what)
