// Padding ops: constant, reflect, replicate and circular padding of the trailing dims (PyTorch's F.pad).
#pragma once
#include <string>

#include "core/tensor.h"

namespace mpx {

/// PyTorch's F.pad: `pad` lists (left, right) pairs from the last dim backwards, as many pairs as dims to pad.
/// Negative values crop. Modes:
/// - "constant" (default): `value` outside the input; any number of trailing dims.
/// - "reflect": mirrors about the edge without repeating it (3 2 | 1 2 3 | 2 1); each pad below the dim's size.
/// - "replicate": repeats the edge value; the dim must not be empty.
/// - "circular": wraps around (2 3 | 1 2 3 | 1 2); each pad at most the dim's size (after cropping).
/// The three non-constant modes pad the last 1, 2 or 3 dims of batched or unbatched input, as PyTorch's layers:
/// 2 values for 2-d/3-d input, 4 for 3-d/4-d, 6 for 4-d/5-d. Keeps the dtype (no autocast cast); differentiable
/// (the gradient sums every output position that read an input element). Channels-last input gives channels-last
/// output.
Tensor pad(const Tensor& x, const IntList& pad, const std::string& mode = "constant", double value = 0.0);

}  // namespace mpx

namespace mpx::kernels {
/// pad's copy of the last three dims (OpId::pad): x contiguous [outer, Di, Hi, Wi] -> out contiguous
/// [outer, Do, Ho, Wo], out[o, d, h, w] = x[o, D.src(d), H.src(h), W.src(w)], or `value` where any source is -1.
/// Each map is an i64 tensor on the data's device laid out as padmap::Axis says (ops/pad_map.h). The adjoint
/// (OpId::pad_backward) takes (gx [outer, Di, Hi, Wi], gy [outer, Do, Ho, Wo], the same maps, value unused) and
/// writes gx whole: each element the sum of the gy elements that read it, readers of D, then H, then W in ascending
/// order (in f32 for f16/bf16, rounded once), on every device alike.
using PadFn = void (*)(const Tensor& out, const Tensor& x, const Tensor& md, const Tensor& mh, const Tensor& mw,
                       double value);
}  // namespace mpx::kernels
