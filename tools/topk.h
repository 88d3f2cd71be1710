// Top-k hit counting for the mpx tool's accuracy figures, with torch.topk's order of NaN and ties.
#pragma once
#include <mpx/mpx.h>

namespace mpx::cli {

/// Hit counts of logits [B, C] against targets [B], as 0-dim f64 tensors on the logits' device
/// (nothing waits for the device).
struct TopkHits {
  Tensor top1, top5;
  Tensor nonfinite;  ///< rows with a NaN or infinite logit
};
/// A sample is a top-k hit when its true class is among torch.topk(logits, k)'s indices: fewer
/// than k classes precede it, where a class precedes when its logit is larger, or equal with a
/// smaller index, and NaN is larger than every number and equal to NaN (docs/cli.md).
TopkHits topk_hits(const Tensor& logits, const Tensor& target);

}  // namespace mpx::cli
