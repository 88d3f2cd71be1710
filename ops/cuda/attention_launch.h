// Launchers of the CUDA fused-attention kernels (POD arguments, shared by ops/cuda/attention.cu and ops/cuda/attention.cpp).
#pragma once
#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// Shapes, element strides and parameters of one attention call. q [B, H, L, E], k [B, Hk, S, E],
/// v [B, Hk, S, Ev] with unit last stride; mask (optional) a [B, H, L, S] view in the compute
/// type (f32; f64 for f64); out, dout, dq, dk, dv contiguous.
struct SdpaGeom {
  int64_t B = 0, H = 0, Hk = 0, L = 0, S = 0, E = 0, Ev = 0;
  int64_t sq[4] = {}, sk[4] = {}, sv[4] = {}, sm[4] = {};
  double scale = 1.0, dropout_p = 0.0;
  bool causal = false;
  bool flash = true;      ///< the flash kernels may run (cuda::flash_sdp_enabled)
  bool recorded = false;  ///< kernels::SdpaParams::recorded
  uint64_t seed = 0, offset = 0;
};

/// Largest head dim (E and Ev) the kernels take.
inline constexpr int64_t kSdpaMaxHeadDim = 256;

/// out and lse ([B, H, L], compute type) of the forward; dt in f32, f64, f16, bf16.
void launch_sdpa_forward(DType dt, const SdpaGeom& g, void* out, void* lse, const void* q, const void* k,
                         const void* v, const void* mask, cudaStream_t s);
/// dq, dk, dv (written whole); `rowdot` is compute-type scratch of B * H * L elements.
void launch_sdpa_backward(DType dt, const SdpaGeom& g, void* dq, void* dk, void* dv, void* rowdot, const void* dout,
                          const void* q, const void* k, const void* v, const void* out, const void* lse,
                          const void* mask, cudaStream_t s);

/// The Tensor-Core (flash) kernels of ops/cuda/flash_attention.cu, tried first by the two launchers above: false
/// where they do not apply (f32/f64, heads wider than 128, a device or build older than compute capability 8.0,
/// g.flash off), and then nothing was launched.
bool launch_flash_forward(DType dt, const SdpaGeom& g, void* out, void* lse, const void* q, const void* k,
                          const void* v, const void* mask, cudaStream_t s);
bool launch_flash_backward(DType dt, const SdpaGeom& g, void* dq, void* dk, void* dv, void* rowdot, const void* dout,
                           const void* q, const void* k, const void* v, const void* out, const void* lse,
                           const void* mask, cudaStream_t s);

}  // namespace mpx::cuda
