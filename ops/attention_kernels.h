// Kernel signatures of fused scaled-dot-product attention (ops.def rows sdpa_fused, sdpa_fused_backward).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mpx::kernels {
/// What a fused attention kernel needs beside its tensors.
struct SdpaParams {
  double scale = 1.0;      ///< multiplies q·k (PyTorch's default 1/sqrt(E) is resolved by the op layer)
  bool causal = false;     ///< key j is masked for query i when j > i (top-left aligned, as PyTorch)
  double dropout_p = 0.0;  ///< drop probability of each attention weight (kept ones scaled by 1/(1-p))
  uint64_t seed = 0;       ///< dropout's counter-based stream: the element (b, h, i, j) draws
  uint64_t offset = 0;     ///< uniform(seed, offset + ((b * H + h) * Tq + i) * Tk + j)
  /// The forward is recorded for a backward (a training step's shapes, which repeat): a kernel may
  /// build per-shape plans for it. Calls under no_grad (sampling text, whose lengths change every
  /// token) should reuse plans, not build them.
  bool recorded = false;
};
/// out [B, H, Tq, Ev] (contiguous) = softmax(scale * q k^T + mask) v, never materializing the
/// Tq x Tk matrix: q [B, H, Tq, E], k [B, Hk, Tk, E], v [B, Hk, Tk, Ev] in one dtype, last dim
/// contiguous, other strides free; H a multiple of Hk (grouped-query attention: head h reads
/// kv head h / (H / Hk)). mask: undefined, or an additive mask in the compute dtype (f32; f64
/// for f64) as a view of [B, H, Tq, Tk] (stride 0 where broadcast). lse [B, H, Tq] (f32; f64
/// for f64, contiguous) receives each row's log-sum-exp of the scaled, masked scores (-inf for a
/// row with every key masked, whose output is 0). Softmax statistics and accumulation in f32.
using SdpaFn = void (*)(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& mask, const SdpaParams& p);
/// The backward from dout [B, H, Tq, Ev] (contiguous) and the forward's out and lse: dq
/// [B, H, Tq, E], dk [B, Hk, Tk, E], dv [B, Hk, Tk, Ev], all contiguous in q's dtype and written
/// whole (grouped heads summed). The dropout mask is drawn again from p's stream.
using SdpaBackwardFn = void (*)(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& lse, const Tensor& mask, const SdpaParams& p);
}  // namespace mpx::kernels
