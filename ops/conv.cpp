// Convolution ops: validation, memory formats and autograd for conv2d / conv_transpose2d.
// The three kernels (forward, input gradient, weight gradient) are each wrapped as a
// recorded op whose own backward uses the other two, so gradients are differentiable.
#include "ops/conv.h"

#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace {
using autograd::FunctionNode;
using kernels::Conv2dParams;

std::string params_str(const Conv2dParams& p) {
  return "stride " + pair_str(p.stride) + ", padding " + pair_str(p.padding) + ", dilation " + pair_str(p.dilation) +
         ", groups " + std::to_string(p.groups);
}

// True for a 4-d tensor laid out NHWC (and not also plain-contiguous).
bool channels_last(const Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(MemoryFormat::ChannelsLast);
}

// An activation as the kernels take it: channels-last stays so (oneDNN runs NHWC without
// copies), anything else becomes contiguous.
Tensor kernel_act(const Tensor& t) { return channels_last(t) ? t : t.contiguous(); }
// Weights: a channels-last filter goes as it is (a channels-last model keeps its weights NHWC,
// so no per-call reorder: cuDNN and oneDNN read them so; the CPU's Eigen fallback makes its
// own row-major copy); anything else becomes contiguous.
Tensor kernel_weight(const Tensor& w) { return channels_last(w) ? w : w.contiguous(); }
MemoryFormat weight_format(const Tensor& w) {
  return channels_last(w) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

// A fresh output, channels-last when the activation it comes from or the weights are (as
// PyTorch's CPU and cuDNN convolutions decide): a channels-last model stays so from its first
// layer on, even when that layer's input is ambiguous (one channel: both layouts at once).
Tensor empty_like_format(const IntList& shape, const Tensor& like, const Tensor& w) {
  return empty(shape, like.options().memory_format(channels_last(like) || channels_last(w) ? MemoryFormat::ChannelsLast
                                                                                           : MemoryFormat::Contiguous));
}

void check_params(const char* op, const Conv2dParams& p) {
  MPX_CHECK(p.stride[0] > 0 && p.stride[1] > 0, op, ": stride must be positive, got ", pair_str(p.stride));
  MPX_CHECK(p.dilation[0] > 0 && p.dilation[1] > 0, op, ": dilation must be positive, got ", pair_str(p.dilation));
  MPX_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0, op, ": padding must be non-negative, got ", pair_str(p.padding));
  MPX_CHECK(p.groups > 0, op, ": groups must be positive, got ", p.groups);
}

void check_tensors(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  MPX_CHECK(x.defined() && w.defined(), op, ": input and weight must be defined");
  MPX_CHECK(x.dim() == 4, op, ": expected a 4-d input [N, C, H, W] (or 3-d [C, H, W]), got ", ops::describe(x));
  MPX_CHECK(w.dim() == 4, op, ": expected a 4-d weight, got ", ops::describe(w));
  MPX_CHECK(w.size(2) > 0 && w.size(3) > 0, op, ": the kernel size must be positive, got weight ", ops::describe(w));
  MPX_CHECK(is_floating(x.dtype()), op, ": input must be floating point, got ", ops::describe(x));
  MPX_CHECK(x.dtype() == w.dtype(), op, ": input ", ops::describe(x), " and weight ", ops::describe(w),
            " must have the same dtype; cast one with .to(dtype) or run under autocast");
  MPX_CHECK(!b.defined() || b.dtype() == x.dtype(), op, ": bias ", ops::describe(b), " must have the input's dtype (",
            dtype_name(x.dtype()), ")");
  ops::common_device(op, {x, w, b});
}

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }
int64_t convt_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) {
  return (in - 1) * s - 2 * p + d * (k - 1) + op + 1;
}

Tensor conv2d_impl(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);
Tensor conv_transpose_impl(OpId op, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                           int64_t Hout, int64_t Wout);

// gw = dL/dw of conv2d(x, w) for upstream gy; bilinear in (x, gy), so its backward is
// a transposed conv (for x) and a conv (for gy) with the incoming weight gradient.
Tensor conv_weight_grad(const Tensor& x, const Tensor& gy0, const IntList& wsize, const Conv2dParams& p,
                        MemoryFormat wfmt = MemoryFormat::Contiguous) {
  const Tensor gy = gy0.dtype() == x.dtype() ? gy0 : gy0.to(x.dtype());
  Tensor gw = empty(wsize, x.options().memory_format(wfmt));
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::conv2d_backward_weight>(x.device(), x.dtype())(
        gw, kernel_act(gy), kernel_act(x), p);
  }
  if (auto n = autograd::record("Conv2dBackwardWeightBackward", {x, gy}, {gw},
                                [p](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  Tensor x = self.saved(0), gy = self.saved(1);
                                  Tensor ggw = g[0].dtype() == x.dtype() ? g[0] : g[0].to(x.dtype());
                                  Tensor gx = self.next_edges[0].valid()
                                                  ? conv_transpose_impl(OpId::conv2d_backward_input, gy, ggw, {}, p,
                                                                        x.size(2), x.size(3))
                                                  : Tensor();
                                  Tensor ggy = self.next_edges[1].valid() ? conv2d_impl(x, ggw, {}, p) : Tensor();
                                  if (ggy.defined() && (ggy.size(2) != gy.size(2) || ggy.size(3) != gy.size(3)))
                                    ggy = ggy.narrow(2, 0, gy.size(2)).narrow(3, 0, gy.size(3));
                                  return {gx, ggy};
                                })) {
    n->save(x);
    n->save(gy);
  }
  return gw;
}

// conv2d after validation: x [N, C, H, W] (any format), w [O, C/groups, kh, kw].
Tensor conv2d_impl(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  const int64_t Ho = conv_out(x.size(2), w.size(2), p.stride[0], p.padding[0], p.dilation[0]);
  const int64_t Wo = conv_out(x.size(3), w.size(3), p.stride[1], p.padding[1], p.dilation[1]);
  Tensor y = empty_like_format({x.size(0), w.size(0), Ho, Wo}, x, w);
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::conv2d>(x.device(), x.dtype())(
        y, kernel_act(x), kernel_weight(w), b.defined() ? b.contiguous() : b, p);
  }
  if (auto n = autograd::record("Conv2dBackward", {x, w, b}, {y}, [p](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor x = self.saved(0), w = self.saved(1);
        Tensor gy = g[0].dtype() == x.dtype() ? g[0] : g[0].to(x.dtype());
        Tensor gx = self.next_edges[0].valid()
                        ? conv_transpose_impl(OpId::conv2d_backward_input, gy, w, {}, p, x.size(2), x.size(3))
                        : Tensor();
        Tensor gw = self.next_edges[1].valid() ? conv_weight_grad(x, gy, w.sizes(), p, weight_format(w)) : Tensor();
        Tensor gb = self.next_edges[2].valid() ? sum(gy, {0, 2, 3}) : Tensor();
        return {gx, gw, gb};
      })) {
    n->save(x);
    n->save(w);
  }
  return y;
}

// conv_transpose2d after validation, also conv2d's input gradient (op selects the kernel
// slot): x [N, C, H, W], w [C, O/groups, kh, kw] -> [N, O, Hout, Wout].
Tensor conv_transpose_impl(OpId op, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                           int64_t Hout, int64_t Wout) {
  Tensor y = empty_like_format({x.size(0), w.size(1) * p.groups, Hout, Wout}, x, w);
  {
    NoGradGuard ng;
    dispatch::kernel<kernels::Conv2dBackwardInputFn>(op, x.device(), x.dtype())(
        y, kernel_act(x), kernel_weight(w), b.defined() ? b.contiguous() : b, p);
  }
  if (auto n = autograd::record("ConvTranspose2dBackward", {x, w, b}, {y},
                                [p](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  Tensor x = self.saved(0), w = self.saved(1);
                                  Tensor gy = g[0].dtype() == x.dtype() ? g[0] : g[0].to(x.dtype());
                                  Tensor gx;
                                  if (self.next_edges[0].valid()) {
                                    gx = conv2d_impl(gy, w, {}, p);
                                    // output_padding >= stride (allowed below the dilation) adds rows
                                    // that no input position reaches.
                                    if (gx.size(2) != x.size(2) || gx.size(3) != x.size(3))
                                      gx = gx.narrow(2, 0, x.size(2)).narrow(3, 0, x.size(3));
                                  }
                                  Tensor gw = self.next_edges[1].valid() ? conv_weight_grad(gy, x, w.sizes(), p, weight_format(w)) : Tensor();
                                  Tensor gb = self.next_edges[2].valid() ? sum(gy, {0, 2, 3}) : Tensor();
                                  return {gx, gw, gb};
                                })) {
    n->save(x);
    n->save(w);
  }
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x0, const Tensor& w0, const Tensor& b0, Pair stride, Pair padding, Pair dilation,
              int64_t groups) {
  MPX_CHECK(x0.defined() && w0.defined(), "conv2d: input and weight must be defined");
  if (x0.dim() == 3) return conv2d(x0.unsqueeze(0), w0, b0, stride, padding, dilation, groups).squeeze(0);
  auto in = ops::autocast(OpId::conv2d, {x0, w0, b0});
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  const Conv2dParams p{stride, padding, dilation, groups};
  check_params("conv2d", p);
  check_tensors("conv2d", x, w, b);
  MPX_CHECK(x.size(1) == w.size(1) * groups, "conv2d: input ", ops::describe(x), " has ", x.size(1),
            " channels but weight ", ops::describe(w), " with groups=", groups, " expects ", w.size(1) * groups,
            " (C must equal weight.size(1) * groups)");
  MPX_CHECK(w.size(0) % groups == 0, "conv2d: weight ", ops::describe(w), " has ", w.size(0),
            " output channels, not divisible by groups=", groups);
  MPX_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)), "conv2d: bias ", ops::describe(b),
            " must be 1-d with ", w.size(0), " elements (the weight's output channels)");
  const int64_t Ho = conv_out(x.size(2), w.size(2), stride[0], padding[0], dilation[0]);
  const int64_t Wo = conv_out(x.size(3), w.size(3), stride[1], padding[1], dilation[1]);
  MPX_CHECK(Ho > 0 && Wo > 0, "conv2d: input ", ops::describe(x), " is too small for weight ", ops::describe(w), " with ",
            params_str(p), ": the output would be ", Ho, " x ", Wo,
            "; the padded input must be at least the dilated kernel size");
  return conv2d_impl(x, w, b, p);
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding, int64_t dilation,
              int64_t groups) {
  MPX_CHECK(x.defined() && w.defined(), "conv1d: input and weight must be defined");
  MPX_CHECK(x.dim() == 2 || x.dim() == 3, "conv1d: input ", ops::describe(x), " must be [N, C, L] or unbatched [C, L]");
  MPX_CHECK(w.dim() == 3, "conv1d: weight ", ops::describe(w), " must be [out_channels, in_channels / groups, kernel]");
  MPX_CHECK(stride > 0 && dilation > 0 && padding >= 0 && groups > 0, "conv1d: stride (", stride, ") and dilation (",
            dilation, ") and groups (", groups, ") must be positive, padding (", padding, ") non-negative");
  MPX_CHECK(x.size(-2) == w.size(1) * groups, "conv1d: input ", ops::describe(x), " has ", x.size(-2),
            " channels but weight ", ops::describe(w), " with groups=", groups, " expects ", w.size(1) * groups,
            " (C must equal weight.size(1) * groups)");
  const int64_t Lo = conv_out(x.size(-1), w.size(2), stride, padding, dilation);
  MPX_CHECK(Lo > 0, "conv1d: input ", ops::describe(x), " is too short for weight ", ops::describe(w), " with stride ",
            stride, ", padding ", padding, ", dilation ", dilation, ": the output would have length ", Lo,
            "; the padded input must be at least the dilated kernel size");
  // A height of one: conv2d's kernels, gradients and autocast; the views add no copy.
  return conv2d(x.unsqueeze(-2), w.unsqueeze(2), b, {1, stride}, {0, padding}, {1, dilation}, groups).squeeze(-2);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation) {
  MPX_CHECK(x.defined() && w.defined(), "conv_transpose1d: input and weight must be defined");
  MPX_CHECK(x.dim() == 2 || x.dim() == 3, "conv_transpose1d: input ", ops::describe(x),
            " must be [N, C, L] or unbatched [C, L]");
  MPX_CHECK(w.dim() == 3, "conv_transpose1d: weight ", ops::describe(w),
            " must be [in_channels, out_channels / groups, kernel]");
  // A height of one: conv_transpose2d's checks, kernels, gradients and autocast; the views add no copy.
  return conv_transpose2d(x.unsqueeze(-2), w.unsqueeze(2), b, {1, stride}, {0, padding}, {0, output_padding}, groups,
                          {1, dilation})
      .squeeze(-2);
}

Tensor conv_transpose2d(const Tensor& x0, const Tensor& w0, const Tensor& b0, Pair stride, Pair padding,
                        Pair output_padding, int64_t groups, Pair dilation) {
  MPX_CHECK(x0.defined() && w0.defined(), "conv_transpose2d: input and weight must be defined");
  if (x0.dim() == 3)
    return conv_transpose2d(x0.unsqueeze(0), w0, b0, stride, padding, output_padding, groups, dilation).squeeze(0);
  auto in = ops::autocast(OpId::conv_transpose2d, {x0, w0, b0});
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  const Conv2dParams p{stride, padding, dilation, groups};
  check_params("conv_transpose2d", p);
  check_tensors("conv_transpose2d", x, w, b);
  for (int d = 0; d < 2; ++d)
    MPX_CHECK(output_padding[d] >= 0 && (output_padding[d] < stride[d] || output_padding[d] < dilation[d]),
              "conv_transpose2d: output_padding ", pair_str(output_padding),
              " must be non-negative and smaller than either stride ", pair_str(stride), " or dilation ",
              pair_str(dilation));
  MPX_CHECK(x.size(1) == w.size(0), "conv_transpose2d: input ", ops::describe(x), " has ", x.size(1),
            " channels but weight ", ops::describe(w), " expects ", w.size(0),
            " (weight is [C_in, C_out / groups, kh, kw])");
  MPX_CHECK(x.size(1) % groups == 0, "conv_transpose2d: input channels ", x.size(1), " are not divisible by groups=",
            groups);
  const int64_t O = w.size(1) * groups;
  MPX_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == O), "conv_transpose2d: bias ", ops::describe(b),
            " must be 1-d with ", O, " elements (weight.size(1) * groups)");
  const int64_t Ho = convt_out(x.size(2), w.size(2), stride[0], padding[0], dilation[0], output_padding[0]);
  const int64_t Wo = convt_out(x.size(3), w.size(3), stride[1], padding[1], dilation[1], output_padding[1]);
  MPX_CHECK(Ho > 0 && Wo > 0, "conv_transpose2d: input ", ops::describe(x), " with weight ", ops::describe(w), ", ",
            params_str(p), " and output_padding ", pair_str(output_padding), " gives a non-positive output size ", Ho,
            " x ", Wo, "; reduce the padding");
  return conv_transpose_impl(OpId::conv_transpose2d, x, w, b, p, Ho, Wo);
}

}  // namespace mpx
