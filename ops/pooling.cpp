// Pooling ops: validation, output sizes (PyTorch's ceil_mode rules), memory formats and autograd.
// CUDA kernels take channels-last tensors as they are and write channels-last results (no layout
// round trip); CPU kernels take NCHW, so only the CPU path converts.
// Average pooling backward is linear, so it is itself a recorded op (double backward works);
// max pooling's backward scatters by the saved argmax and is not differentiable again.
#include "ops/pooling.h"

#include <algorithm>
#include <vector>

#include "ops/index.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace {
using autograd::FunctionNode;
using kernels::Pool2dParams;

bool channels_last(const Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(MemoryFormat::ChannelsLast);
}
Tensor in_format_of(const Tensor& y, const Tensor& like) {
  return channels_last(like) ? y.contiguous(MemoryFormat::ChannelsLast) : y;
}
// The layout a kernel runs in for input `t`: channels-last stays so (every device has kernels
// for it); all else is NCHW.
MemoryFormat kernel_format(const Tensor& t) {
  return channels_last(t) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}
// A backward's layout: the forward input's (x_fmt, from kernel_format) or gy's own. gy is often
// dense both ways ([N, C, 1, 1] after a global pool) and must not turn a channels-last graph NCHW.
MemoryFormat backward_format(const Tensor& gy, MemoryFormat x_fmt) {
  return x_fmt == MemoryFormat::ChannelsLast ? x_fmt : kernel_format(gy);
}
TensorOptions in_format(TensorOptions o, MemoryFormat f) { return o.memory_format(f); }

// PyTorch's pooling_output_shape: the last window must start inside the (left-padded) input.
int64_t pool_out(const char* op, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

void check_input(const char* op, const Tensor& x) {
  MPX_CHECK(x.defined(), op, ": input is undefined");
  MPX_CHECK(x.dim() == 4, op, ": expected a 4-d input [N, C, H, W] (or 3-d [C, H, W]), got ", ops::describe(x));
  MPX_CHECK(is_floating(x.dtype()), op, ": input must be floating point, got ", ops::describe(x));
}

Pool2dParams window_params(const char* op, const Tensor& x, Pair kernel, Pair stride, Pair padding, Pair dilation,
                           bool ceil_mode, IntList* out_shape) {
  check_input(op, x);
  if (stride[0] == 0 && stride[1] == 0) stride = kernel;
  MPX_CHECK(kernel[0] > 0 && kernel[1] > 0, op, ": kernel size must be positive, got ", pair_str(kernel));
  MPX_CHECK(stride[0] > 0 && stride[1] > 0, op, ": stride must be positive, got ", pair_str(stride));
  MPX_CHECK(dilation[0] > 0 && dilation[1] > 0, op, ": dilation must be positive, got ", pair_str(dilation));
  MPX_CHECK(padding[0] >= 0 && padding[1] >= 0 && padding[0] * 2 <= kernel[0] && padding[1] * 2 <= kernel[1], op,
            ": padding ", pair_str(padding), " must be non-negative and at most half the kernel size ",
            pair_str(kernel));
  const int64_t Ho = pool_out(op, x.size(2), kernel[0], stride[0], padding[0], dilation[0], ceil_mode);
  const int64_t Wo = pool_out(op, x.size(3), kernel[1], stride[1], padding[1], dilation[1], ceil_mode);
  MPX_CHECK(Ho > 0 && Wo > 0, op, ": input ", ops::describe(x), " is too small for kernel ", pair_str(kernel),
            " with stride ", pair_str(stride), ", padding ", pair_str(padding), " and dilation ", pair_str(dilation),
            ": the output would be ", Ho, " x ", Wo);
  *out_shape = {x.size(0), x.size(1), Ho, Wo};
  Pool2dParams p;
  p.kernel = kernel;
  p.stride = stride;
  p.padding = padding;
  p.dilation = dilation;
  return p;
}

Tensor avg_pool_impl(const Tensor& x, const Pool2dParams& p, const IntList& out_shape);

// The adjoint of average pooling: linear in gy, so its own backward is avg pooling again.
Tensor avg_pool_backward_impl(const Tensor& gy0, const Pool2dParams& p, const IntList& x_shape, MemoryFormat x_fmt) {
  Tensor gy = gy0;
  const MemoryFormat f = backward_format(gy, x_fmt);
  Tensor gx = empty(x_shape, in_format(gy.options(), f));
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::avg_pool2d_backward>(gy.device(), gy.dtype())(
        gx, gy.contiguous(f), p);
    gx = in_format_of(gx, gy);
  }
  if (auto n = autograd::record("AvgPool2dBackwardBackward", {gy}, {gx},
                                [p](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  return {avg_pool_impl(g[0], p, self.shapes[0])};
                                }))
    n->shapes = {gy.sizes()};
  return gx;
}

Tensor avg_pool_impl(const Tensor& x, const Pool2dParams& p, const IntList& out_shape) {
  const MemoryFormat f = kernel_format(x);
  Tensor y = empty(out_shape, in_format(x.options(), f));
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::avg_pool2d>(x.device(), x.dtype())(y, x.contiguous(f), p);
    y = in_format_of(y, x);
  }
  if (auto n = autograd::record("AvgPool2dBackward", {x}, {y},
                                [p, f](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  return {avg_pool_backward_impl(g[0], p, self.shapes[0], f)};
                                }))
    n->shapes = {x.sizes()};
  return y;
}

Tensor adaptive_impl(const Tensor& x, const IntList& out_shape);

Tensor adaptive_backward_impl(const Tensor& gy, const IntList& x_shape, MemoryFormat x_fmt) {
  const MemoryFormat f = backward_format(gy, x_fmt);
  Tensor gx = empty(x_shape, in_format(gy.options(), f));
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::adaptive_avg_pool2d_backward>(gy.device(), gy.dtype())(
        gx, gy.contiguous(f));
    gx = in_format_of(gx, gy);
  }
  if (auto n = autograd::record("AdaptiveAvgPool2dBackwardBackward", {gy}, {gx},
                                [](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  return {adaptive_impl(g[0], self.shapes[0])};
                                }))
    n->shapes = {gy.sizes()};
  return gx;
}

Tensor adaptive_impl(const Tensor& x, const IntList& out_shape) {
  const MemoryFormat f = kernel_format(x);
  Tensor y = empty(out_shape, in_format(x.options(), f));
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::adaptive_avg_pool2d>(x.device(), x.dtype())(y,
                                                                                                     x.contiguous(f));
    y = in_format_of(y, x);
  }
  if (auto n = autograd::record("AdaptiveAvgPool2dBackward", {x}, {y},
                                [f](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  return {adaptive_backward_impl(g[0], self.shapes[0], f)};
                                }))
    n->shapes = {x.sizes()};
  return y;
}

}  // namespace

Tensor max_pool2d(const Tensor& x0, ExpandingArray<2> kernel, ExpandingArray<2> stride, ExpandingArray<2> padding,
                  ExpandingArray<2> dilation, bool ceil_mode) {
  MPX_CHECK(x0.defined(), "max_pool2d: input is undefined");
  if (x0.dim() == 3) return max_pool2d(x0.unsqueeze(0), kernel, stride, padding, dilation, ceil_mode).squeeze(0);
  Tensor x = ops::autocast(OpId::max_pool2d, {x0})[0];
  IntList out_shape;
  const Pool2dParams p = window_params("max_pool2d", x, kernel, stride, padding, dilation, ceil_mode, &out_shape);
  // idx keeps the kernel's layout: the backward kernel reads it next to gy in that layout.
  const MemoryFormat f = kernel_format(x);
  Tensor y = empty(out_shape, in_format(x.options(), f));
  Tensor idx = empty(out_shape, in_format(TensorOptions().dtype(kInt64).device(x.device()), f));
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::max_pool2d>(x.device(), x.dtype())(y, idx, x.contiguous(f), p);
    y = in_format_of(y, x);
  }
  if (auto n = autograd::record("MaxPool2dBackward", {x}, {y},
                                [p, f](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor idx = self.saved(0);
        Tensor gy = g[0];
        Tensor gx = empty(self.shapes[0], in_format(gy.options(), f));
        NoGradGuard ng;
        dispatch::kernel<OpId::max_pool2d_backward>(gy.device(), gy.dtype())(
            gx, gy.contiguous(f), idx, p);
        return {f == MemoryFormat::ChannelsLast ? gx : in_format_of(gx, gy)};
      })) {
    n->save(idx);
    n->shapes = {x.sizes()};
  }
  return y;
}

Tensor avg_pool2d(const Tensor& x0, ExpandingArray<2> kernel, ExpandingArray<2> stride, ExpandingArray<2> padding,
                  bool ceil_mode, bool count_include_pad) {
  MPX_CHECK(x0.defined(), "avg_pool2d: input is undefined");
  if (x0.dim() == 3)
    return avg_pool2d(x0.unsqueeze(0), kernel, stride, padding, ceil_mode, count_include_pad).squeeze(0);
  Tensor x = ops::autocast(OpId::avg_pool2d, {x0})[0];
  IntList out_shape;
  Pool2dParams p = window_params("avg_pool2d", x, kernel, stride, padding, {1, 1}, ceil_mode, &out_shape);
  p.count_include_pad = count_include_pad;
  return avg_pool_impl(x, p, out_shape);
}

Tensor adaptive_avg_pool2d(const Tensor& x0, Pair output_size) {
  MPX_CHECK(x0.defined(), "adaptive_avg_pool2d: input is undefined");
  if (x0.dim() == 3) return adaptive_avg_pool2d(x0.unsqueeze(0), output_size).squeeze(0);
  Tensor x = ops::autocast(OpId::adaptive_avg_pool2d, {x0})[0];
  check_input("adaptive_avg_pool2d", x);
  MPX_CHECK(output_size[0] > 0 && output_size[1] > 0, "adaptive_avg_pool2d: output_size must be positive, got ",
            pair_str(output_size));
  MPX_CHECK(x.size(2) > 0 && x.size(3) > 0, "adaptive_avg_pool2d: input ", ops::describe(x),
            " has an empty spatial dimension");
  return adaptive_impl(x, {x.size(0), x.size(1), output_size[0], output_size[1]});
}

Tensor adaptive_max_pool2d(const Tensor& x0, Pair output_size) {
  MPX_CHECK(x0.defined(), "adaptive_max_pool2d: input is undefined");
  if (x0.dim() == 3) return adaptive_max_pool2d(x0.unsqueeze(0), output_size).squeeze(0);
  const Tensor x = ops::autocast(OpId::adaptive_max_pool2d, {x0})[0];
  check_input("adaptive_max_pool2d", x);
  const int64_t H = x.size(2), W = x.size(3), Ho = output_size[0], Wo = output_size[1];
  MPX_CHECK(Ho > 0 && Wo > 0, "adaptive_max_pool2d: output_size must be positive, got ", pair_str(output_size));
  MPX_CHECK(H > 0 && W > 0, "adaptive_max_pool2d: input ", ops::describe(x), " has an empty spatial dimension");
  // Equal bins are max_pool2d's windows (global max pooling, and every size that divides evenly).
  if (H % Ho == 0 && W % Wo == 0) return max_pool2d(x, {H / Ho, W / Wo});
  // Other sizes: PyTorch's bins [floor(i in / out), ceil((i + 1) in / out)) gathered as taps, each bin padded to the
  // widest by repeating its last position (a repeated tap changes neither the maximum nor which tap is first), then
  // the maximum over a bin's taps in (h, w) order: the first maximum (or NaN) takes the gradient, as PyTorch's.
  const auto taps = [&](int64_t in, int64_t out, int64_t& k) {
    k = 0;
    for (int64_t i = 0; i < out; ++i) k = std::max(k, (((i + 1) * in + out - 1) / out) - (i * in) / out);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < out; ++i) {
      const int64_t b = (i * in) / out, e = ((i + 1) * in + out - 1) / out;
      for (int64_t t = 0; t < k; ++t) idx.push_back(std::min(b + t, e - 1));
    }
    return tensor(idx, {static_cast<int64_t>(idx.size())}).to(x.device());
  };
  int64_t kh = 0, kw = 0;
  const Tensor hi = taps(H, Ho, kh), wi = taps(W, Wo, kw);
  const int64_t N = x.size(0), C = x.size(1);
  const Tensor bins = index_select(index_select(x, 2, hi), 3, wi)
                          .view({N, C, Ho, kh, Wo, kw})
                          .permute({0, 1, 2, 4, 3, 5})
                          .reshape({N, C, Ho, Wo, kh * kw});
  return max(bins, 4).first;
}

}  // namespace mpx
