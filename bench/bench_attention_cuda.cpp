// GPU figures of fused attention (forward and forward+backward, causal, 12 heads of 64 or 128, context 1k-8k): TFLOP/s
// and peak memory; the peer of bench/peer_attention_cuda.py. Run as is (cuDNN's fused attention where built in), with
// MPX_SDPA_CUDNN=0 (mpx's flash kernels) and with both MPX_SDPA_CUDNN=0 MPX_SDPA_FLASH=0 (row kernels).
#include <mpx/mpx.h>

#include <cstdio>
#include <string>

#include "cuda_timing.h"

using namespace mpx;
using bench::median_ms;

int main() {
  if (!cuda_is_available()) {
    std::fprintf(stderr, "bench_attention_cuda: no CUDA device\n");
    return 1;
  }
  // The first path that takes these calls (no mask, no dropout, head dims 64/128): MPX_SDPA_CUDNN=0 and
  // MPX_SDPA_FLASH=0 pick the others.
  const bool cudnn = cuda::cudnn_sdp_enabled() && cuda::cudnn_version().find("frontend") != std::string::npos;
  const char* path = cudnn ? "cuDNN" : cuda::flash_sdp_enabled() ? "flash" : "row-per-thread";
  const int64_t fallbacks = cuda::cudnn_fallbacks();
  const Device gpu = Device::cuda();
  struct Shape {
    int64_t B, H, T, D;
  };
  std::printf("%-15s %-5s %-22s %10s %10s %12s %12s %10s\n", "path", "dtype", "B x H x T x D (causal)", "fwd ms",
              "fwd+bwd ms", "fwd TFLOP/s", "f+b TFLOP/s", "peak MiB");
  for (DType dt : {kBFloat16, kFloat16})
    for (const Shape& s :
         {Shape{8, 12, 1024, 64}, Shape{4, 12, 2048, 128}, Shape{2, 12, 4096, 64}, Shape{1, 12, 8192, 128}}) {
      manual_seed(1);
      const Tensor q = randn({s.B, s.H, s.T, s.D}).to(dt).to(gpu).set_requires_grad(true);
      const Tensor k = randn({s.B, s.H, s.T, s.D}).to(dt).to(gpu).set_requires_grad(true);
      const Tensor v = randn({s.B, s.H, s.T, s.D}).to(dt).to(gpu).set_requires_grad(true);
      const Tensor g = randn({s.B, s.H, s.T, s.D}).to(dt).to(gpu);
      cuda::synchronize();
      cuda::reset_peak_memory_stats();
      const int64_t before = cuda::memory_stats().allocated;
      // Forward and backward first: a recorded call is what builds cuDNN's plan for the shape, which the
      // forward alone (under no_grad, as in inference) then reuses.
      const double both = median_ms(
          [&] {
            const Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
            autograd::backward({out}, {g});
          },
          3, 15);
      const double peak = static_cast<double>(cuda::memory_stats().peak_allocated - before) / (1 << 20);
      const double fwd = median_ms(
          [&] {
            NoGradGuard ng;
            scaled_dot_product_attention(q, k, v, {}, 0.0, true);
          },
          3, 15);
      // Causal: half of the 4 * B * H * T^2 * D multiply-adds of the two forward products; backward 2.5x that.
      const double flops = 2.0 * s.B * s.H * static_cast<double>(s.T) * s.T * s.D;
      char shape[64];
      std::snprintf(shape, sizeof shape, "%lld x %lld x %lld x %lld", static_cast<long long>(s.B),
                    static_cast<long long>(s.H), static_cast<long long>(s.T), static_cast<long long>(s.D));
      std::printf("%-15s %-5s %-22s %10.3f %10.3f %12.1f %12.1f %10.1f\n", path, dtype_name(dt), shape, fwd, both,
                  flops / fwd / 1e9, 3.5 * flops / both / 1e9, peak);
      std::printf("csv,attention,%s,%s,%lld,%lld,%lld,%lld,%.4f,%.4f,%.1f\n", path, dtype_name(dt),
                  static_cast<long long>(s.B), static_cast<long long>(s.H), static_cast<long long>(s.T),
                  static_cast<long long>(s.D), fwd, both, peak);
    }
  if (cuda::cudnn_fallbacks() != fallbacks)
    std::printf("note: %lld calls left cuDNN for the flash kernels; the last: %s\n",
                static_cast<long long>(cuda::cudnn_fallbacks() - fallbacks), cuda::cudnn_last_fallback().c_str());
  return 0;
}
