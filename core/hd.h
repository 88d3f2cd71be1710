// MPX_HD: marks a function both host and device code call (a formula written once for the CPU and CUDA kernels).
#pragma once

#if defined(__CUDACC__)
#define MPX_HD __host__ __device__
#else
#define MPX_HD
#endif
