// cuDNN's fused attention (its graph API, through cuDNN's frontend) for f16/bf16 scaled_dot_product_attention on CUDA.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"
#include "ops/cuda/attention_launch.h"

namespace mpx::cuda {

/// Why cuDNN's fused attention is not tried for a call (nullptr when it is): what mpx's own kernels
/// keep because cuDNN does it differently (dropout draws from cuDNN's generator, masks come in
/// other forms) or cannot take it (f32, head dims not a multiple of 8, strides or addresses not
/// 16-byte aligned). What passes may still be refused by cuDNN for the device; that is
/// counted in cuda::cudnn_fallbacks(). Pure, so a test checks it without a GPU.
inline const char* sdpa_cudnn_refusal(DType dt, const SdpaGeom& g, bool has_mask,
                                      std::initializer_list<const void*> pointers) {
  if (dt != kFloat16 && dt != kBFloat16) return "not f16/bf16";
  if (has_mask) return "a mask";
  if (g.dropout_p > 0.0) return "dropout";
  if (g.B * g.H == 0 || g.L == 0 || g.S == 0) return "empty";
  if (g.E % 8 != 0 || g.Ev % 8 != 0) return "head dims not a multiple of 8";
  const int64_t sizes[3][3] = {{g.B, g.H, g.L}, {g.B, g.Hk, g.S}, {g.B, g.Hk, g.S}};
  const int64_t* strides[3] = {g.sq, g.sk, g.sv};
  for (int t = 0; t < 3; ++t) {
    if (strides[t][3] != 1) return "a last stride other than 1";
    for (int d = 0; d < 3; ++d)  // a size-1 dim's stride is never used (the graph gets a dense one)
      if (sizes[t][d] > 1 && (strides[t][d] <= 0 || strides[t][d] % 8 != 0))
        return "strides not multiples of 8 elements";
  }
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return "an address not 16-byte aligned";
  return nullptr;
}

/// The forward on cuDNN: out [B, H, L, Ev] and lse [B, H, L] (f32, natural log) as the kernels of
/// ops/attention_kernels.h define them. False, with nothing run, when cuda::cudnn_sdp_enabled() is
/// off, the call is refused above, mpx was built without cuDNN's frontend, cuDNN has no plan for
/// it (remembered per shape), or its shape has no plan yet and gets none: plans are built for calls
/// recorded for a backward (g.recorded; a training loop's shapes repeat), outside CUDA graph
/// capture, for at most 64 shapes.
bool sdpa_cudnn_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& mask, const SdpaGeom& g);
/// The backward on cuDNN from any forward's out and lse (the two paths' lse agree), under the same
/// conditions; deterministic when cuda::cudnn_deterministic_enabled().
bool sdpa_cudnn_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                         const SdpaGeom& g);

}  // namespace mpx::cuda
