// Pooling ops: max_pool2d, avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d.
#pragma once
#include "core/expanding_array.h"
#include "ops/conv.h"

namespace mpx {

/// Max pooling over [N, C, H, W]; stride defaults to the kernel size when 0. Each size is one integer for both dims
/// or `{h, w}` (one function, not overloads, so `nn::Functional(max_pool2d, 3, 2)` binds it as LibTorch's does).
Tensor max_pool2d(const Tensor& x, ExpandingArray<2> kernel, ExpandingArray<2> stride = 0, ExpandingArray<2> padding = 0,
                  ExpandingArray<2> dilation = 1, bool ceil_mode = false);
/// Average pooling; count_include_pad counts zero padding in the divisor (PyTorch's default).
Tensor avg_pool2d(const Tensor& x, ExpandingArray<2> kernel, ExpandingArray<2> stride = 0, ExpandingArray<2> padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
/// Average pooling to a fixed output size (PyTorch's bin boundaries).
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);
/// Max pooling to a fixed output size over PyTorch's bins (the first maximum of a bin, or its first NaN, takes the
/// gradient); bins of equal size run as max_pool2d, others as a gather of each bin's taps. [N, C, H, W] or [C, H, W].
Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size);

}  // namespace mpx

namespace mpx::kernels {
/// Window geometry of max/avg pooling (stride already defaulted to the kernel size).
struct Pool2dParams {
  Pair kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
  bool count_include_pad = true;
};
/// y and idx [N, C, Ho, Wo] from x [N, C, H, W] (all contiguous); idx (i64) holds the
/// argmax as h * W + w within each plane, as PyTorch's indices do.
using MaxPool2dFn = void (*)(const Tensor& y, const Tensor& idx, const Tensor& x, const Pool2dParams& p);
/// gx (zeroed by the kernel) receives gy at the saved argmax positions. The window geometry
/// lets a device kernel gather each input's gradient in a fixed order (deterministic, no atomics).
using MaxPool2dBackwardFn = void (*)(const Tensor& gx, const Tensor& gy, const Tensor& idx, const Pool2dParams& p);
/// y = window averages of x; the output shape fixes Ho/Wo.
using AvgPool2dFn = void (*)(const Tensor& y, const Tensor& x, const Pool2dParams& p);
/// gx = the adjoint of avg pooling applied to gy (overwrites gx).
using AvgPool2dBackwardFn = void (*)(const Tensor& gx, const Tensor& gy, const Pool2dParams& p);
/// Adaptive average pooling, shapes given by the tensors; forward writes y from x, backward gx from gy.
using AdaptiveAvgPool2dFn = void (*)(const Tensor& out, const Tensor& in);
}  // namespace mpx::kernels
