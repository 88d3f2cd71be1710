// Softmax / log_softmax (kernel forward, fused or differentiable backward) and inverted dropout.
#include "ops/activation.h"

#include "core/random.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

// [outer, n, inner] split of a shape around `dim` (a 0-d tensor is one lane of one element).
struct Lanes {
  int64_t outer = 1, n = 1, inner = 1;
};
Lanes lanes_of(const IntList& sizes, int64_t dim) {
  Lanes l;
  if (sizes.empty()) return l;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d < dim) l.outer *= sizes[d];
    else if (d == dim) l.n = sizes[d];
    else l.inner *= sizes[d];
  }
  return l;
}

Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log);

Tensor softmax_forward(bool log, const Tensor& x0, int64_t dim0, std::optional<DType> dtype) {
  const char* name = log ? "log_softmax" : "softmax";
  MPX_CHECK(x0.defined(), name, ": input is undefined");
  Tensor x = ops::autocast(log ? OpId::log_softmax : OpId::softmax, {x0})[0];
  if (dtype) {
    MPX_CHECK(is_floating(*dtype), name, ": dtype must be floating, got ", dtype_name(*dtype));
    x = x.to(*dtype);
  }
  MPX_CHECK(is_floating(x.dtype()), name, ": input must be floating, got ", ops::describe(x),
            "; convert it with .to(mpx::kFloat32) or pass dtype");
  const int64_t dim = wrap_dim(dim0, std::max<int64_t>(x.dim(), 1), name);
  const Lanes l = lanes_of(x.sizes(), dim);
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() > 0) {
    Tensor xc = x.detach().contiguous();
    dispatch::kernel<kernels::SoftmaxFn>(log ? OpId::log_softmax : OpId::softmax, x.device(), x.dtype())(
        out, xc, l.outer, l.n, l.inner, log);
  }
  if (auto n = autograd::record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x}, {out},
                                [dim, log](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  return {softmax_backward(g[0], self.saved(0), dim, log)};
                                }))
    n->save(out, true);
  return out;
}

// The fused kernel serves plain backward passes; with create_graph (grad mode on inside
// the backward) the formula is built from differentiable ops so it can be differentiated again.
Tensor softmax_backward(const Tensor& g0, const Tensor& y, int64_t dim, bool log) {
  Tensor g = g0.dtype() == y.dtype() ? g0 : g0.to(y.dtype());
  if (GradMode::is_enabled() && (g.requires_grad() || y.requires_grad())) {
    if (log) return g - exp(y) * sum(g, {dim}, true);
    return y * (g - sum(g * y, {dim}, true));
  }
  const int64_t d = y.dim() ? dim : 0;
  const Lanes l = lanes_of(y.sizes(), d);
  Tensor gin = empty(y.sizes(), y.options());
  if (gin.numel() == 0) return gin;
  NoGradGuard ng;
  Tensor gc = g.expand(y.sizes()).contiguous(), yc = y.contiguous();
  dispatch::kernel<kernels::SoftmaxBackwardFn>(log ? OpId::log_softmax_backward : OpId::softmax_backward, y.device(),
                                               y.dtype())(gin, gc, yc, l.outer, l.n, l.inner, log);
  return gin;
}

// out = in * mask * scale with a fixed mask: dropout's backward, and (being linear) its own backward.
Tensor masked_scale(const Tensor& in, const Tensor& mask, double scale) {
  Tensor out = empty(in.sizes(), in.options());
  {
    NoGradGuard ng;
    Tensor ic = in.detach().contiguous();
    dispatch::kernel<OpId::dropout>(in.device(), in.dtype())(out, mask, ic, 0, 0, 0.0, scale, false);
  }
  if (auto n = autograd::record("DropoutBackward", {in}, {out}, [scale](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {masked_scale(g[0], self.saved(0), scale)};
      }))
    n->save(mask);
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) { return softmax_forward(false, x, dim, dtype); }
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) { return softmax_forward(true, x, dim, dtype); }

Tensor dropout(const Tensor& x0, double p, bool training) {
  MPX_CHECK(x0.defined(), "dropout: input is undefined");
  MPX_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, got ", p);
  Tensor x = ops::autocast(OpId::dropout, {x0})[0];
  if (!training || p == 0.0) return x;
  MPX_CHECK(is_floating(x.dtype()), "dropout: input must be floating, got ", ops::describe(x));
  const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  Tensor mask = empty(x.sizes(), TensorOptions().dtype(kUInt8).device(x.device()));
  Tensor out = empty(x.sizes(), x.options());
  // Positions are reserved even for an empty tensor so the generator's state stays simple.
  auto [seed, offset] = random::default_generator().reserve(static_cast<uint64_t>(x.numel()));
  if (x.numel() > 0) {
    NoGradGuard ng;
    Tensor xc = x.detach().contiguous();
    dispatch::kernel<OpId::dropout>(x.device(), x.dtype())(out, mask, xc, seed, offset, p, scale, true);
  }
  if (auto n = autograd::record("DropoutBackward", {x}, {out}, [scale](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {masked_scale(g[0], self.saved(0), scale)};
      }))
    n->save(mask);
  return out;
}

Tensor Tensor::softmax(int64_t dim) const { return mpx::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return mpx::log_softmax(*this, dim); }

// Built from where and mul, so its gradients (in x and in weight) are theirs.
Tensor prelu(const Tensor& x0, const Tensor& w0) {
  auto in = ops::autocast(OpId::prelu, {x0, w0});
  const Tensor &x = in[0], &w = in[1];
  MPX_CHECK(x.defined() && w.defined() && w.dim() <= 1 &&
                (w.numel() == 1 || (x.dim() >= 2 && w.numel() == x.size(1))),
            "prelu: weight ", ops::describe(w), " must hold 1 value or one per channel of input ", ops::describe(x));
  IntList shape(static_cast<size_t>(x.dim()), 1);
  if (w.numel() > 1) shape[1] = w.numel();
  const Tensor wb = w.numel() == 1 ? w.reshape({}) : w.reshape(shape);
  return where(gt(x, 0.0), x, mul(wb, x));
}

}  // namespace mpx
