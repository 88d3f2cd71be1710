// The row norms layer_norm and rms_norm: fused kernels (layer_norm_fwd/bwd, rms_norm_fwd/bwd) over
// x viewed as [rows, D] where they exist, the composite of differentiable ops elsewhere, and a
// differentiable backward formula when the backward itself is recorded (double backward).
#include <limits>

#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

DType stat_dtype(DType x) { return x == kFloat64 ? kFloat64 : kFloat32; }

// What layer_norm and rms_norm check alike; returns D, the product of normalized_shape.
int64_t check_row_norm(const char* op, const Tensor& x, const IntList& normalized_shape, const Tensor& w,
                       const Tensor& b) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  MPX_CHECK(is_floating(x.dtype()), op, ": input must be floating point, got ", ops::describe(x));
  bool match = k >= 1 && k <= x.dim();
  for (int64_t i = 0; match && i < k; ++i) match = x.size(x.dim() - k + i) == normalized_shape[i];
  MPX_CHECK(match, op, ": normalized_shape ", shape_str(normalized_shape),
            " must be non-empty and equal the trailing dims of input ", ops::describe(x));
  for (const auto& [t, what] : {std::pair{&w, "weight"}, std::pair{&b, "bias"}}) {
    MPX_CHECK(!t->defined() || t->sizes() == normalized_shape, op, ": ", what, " ", ops::describe(*t),
              " must have shape normalized_shape ", shape_str(normalized_shape));
    MPX_CHECK(!t->defined() || is_floating(t->dtype()), op, ": ", what, " must be floating point, got ",
              ops::describe(*t));
  }
  ops::common_device(op, {x, w, b});
  int64_t D = 1;
  for (int64_t s : normalized_shape) D *= s;
  return D;
}

// A dense [D] copy in the statistics dtype for the kernels (no autograd), or undefined.
Tensor param_for_kernel(const Tensor& t, DType sd, int64_t D) {
  if (!t.defined()) return t;
  NoGradGuard ng;
  return t.to(sd).contiguous().view({D});
}

// The composite forward (x any shape, the last D elements of each row normalized).
Tensor row_norm_composite(bool rms, const Tensor& x, int64_t D, const Tensor& w, const Tensor& b, double eps) {
  const DType sd = stat_dtype(x.dtype());
  Tensor xf = x.to(sd).reshape({-1, D}), y;
  if (rms) y = xf * rsqrt(mean(xf * xf, {1}, true) + eps);
  else y = (xf - mean(xf, {1}, true)) * rsqrt(var(xf, {1}, false, true) + eps);
  if (w.defined()) y = y * w.to(sd).reshape({D});
  if (b.defined()) y = y + b.to(sd).reshape({D});
  return y.reshape(x.sizes()).to(x.dtype());
}

// The first-order gradients (x, w, b) written with differentiable ops, statistics recomputed from
// x, so a recorded backward (create_graph) has exact second derivatives.
tensor_list row_norm_backward_composite(bool rms, const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& b,
                                        int64_t D, double eps) {
  const DType sd = stat_dtype(x.dtype());
  Tensor xf = x.to(sd).reshape({-1, D}), gf = gy.to(sd).reshape({-1, D}), xhat, rstd;
  if (rms) {
    rstd = rsqrt(mean(xf * xf, {1}, true) + eps);
    xhat = xf * rstd;
  } else {
    rstd = rsqrt(var(xf, {1}, false, true) + eps);
    xhat = (xf - mean(xf, {1}, true)) * rstd;
  }
  Tensor g = w.defined() ? gf * w.to(sd).reshape({D}) : gf;
  Tensor inner = rms ? g - xhat * mean(g * xhat, {1}, true) : g - mean(g, {1}, true) - xhat * mean(g * xhat, {1}, true);
  Tensor gx = (rstd * inner).reshape(x.sizes()).to(x.dtype());
  Tensor gw = w.defined() ? sum(gf * xhat, {0}).reshape(w.sizes()).to(w.dtype()) : Tensor();
  Tensor gb = b.defined() ? sum(gf, {0}).reshape(b.sizes()).to(b.dtype()) : Tensor();
  return {gx, gw, gb};
}

// layer_norm (rms = false) or rms_norm (rms = true) after the autocast stage and the checks.
Tensor row_norm(bool rms, const Tensor& x, int64_t D, const Tensor& w, const Tensor& b, double eps) {
  const OpId fwd_id = rms ? OpId::rms_norm_fwd : OpId::layer_norm_fwd;
  if (x.numel() == 0 || !dispatch::has_kernel(fwd_id, x.device().type, x.dtype()))
    return row_norm_composite(rms, x, D, w, b, eps);
  const DType sd = stat_dtype(x.dtype());
  // A copy of a strided x is itself recorded, so its gradient reaches x.
  const Tensor xc = x.contiguous();
  const int64_t rows = x.numel() / D;
  const TensorOptions so = TensorOptions().dtype(sd).device(x.device());
  Tensor y = empty(x.sizes(), x.options());
  Tensor mean = rms ? Tensor() : empty({rows}, so), rstd = empty({rows}, so);
  {
    NoGradGuard ng;
    auto fwd = rms ? dispatch::kernel<OpId::rms_norm_fwd>(x.device(), x.dtype())
                   : dispatch::kernel<OpId::layer_norm_fwd>(x.device(), x.dtype());
    fwd(y.view({rows, D}), mean, rstd, xc.view({rows, D}), param_for_kernel(w, sd, D), param_for_kernel(b, sd, D),
        eps);
  }
  auto backward = [rms, D, rows, eps](FunctionNode& self, const tensor_list& g) -> tensor_list {
    Tensor x = self.saved(0), w = self.saved(1), b = self.saved(2), mean = self.saved(3), rstd = self.saved(4);
    Tensor gy = g[0].dtype() == x.dtype() ? g[0] : g[0].to(x.dtype());
    tensor_list r;
    if (GradMode::is_enabled()) {
      r = row_norm_backward_composite(rms, gy, x, w, b, D, eps);
    } else {
      const DType sd = rstd.dtype();
      const TensorOptions so = rstd.options();
      Tensor gx = self.next_edges[0].valid() ? empty(x.sizes(), x.options()) : Tensor();
      Tensor gw = self.next_edges[1].valid() ? empty({D}, so) : Tensor();
      Tensor gb = !rms && self.next_edges[2].valid() ? empty({D}, so) : Tensor();
      auto bwd = rms ? dispatch::kernel<OpId::rms_norm_bwd>(x.device(), x.dtype())
                     : dispatch::kernel<OpId::layer_norm_bwd>(x.device(), x.dtype());
      bwd(gx.defined() ? gx.view({rows, D}) : gx, gw, gb, gy.contiguous().view({rows, D}), x.view({rows, D}), mean,
          rstd, param_for_kernel(w, sd, D));
      if (gw.defined()) gw = gw.view(w.sizes()).to(w.dtype());
      if (gb.defined()) gb = gb.view(b.sizes()).to(b.dtype());
      r = {gx, gw, gb};
    }
    for (size_t i = 0; i < r.size(); ++i)
      if (!self.next_edges[i].valid()) r[i] = Tensor();
    return r;
  };
  const Tensor bb = rms ? Tensor() : b;
  if (auto n = autograd::record(rms ? "RmsNormBackward" : "LayerNormBackward", {xc, w, bb}, {y}, backward))
    for (const Tensor& t : {xc, w, bb, mean, rstd}) n->save(t);
  return y;
}

// Machine epsilon of a floating dtype (torch.finfo(dtype).eps).
double machine_epsilon(DType dt) {
  switch (dt) {
    case kFloat64: return std::numeric_limits<double>::epsilon();
    case kFloat16: return 0.0009765625;  // 2^-10
    case kBFloat16: return 0.0078125;    // 2^-7
    default: return std::numeric_limits<float>::epsilon();
  }
}
}  // namespace

Tensor layer_norm(const Tensor& x0, const IntList& normalized_shape, const Tensor& weight0, const Tensor& bias0,
                  double eps) {
  MPX_CHECK(x0.defined(), "layer_norm: input is undefined");
  auto in = ops::autocast(OpId::layer_norm, {x0, weight0, bias0});
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  const int64_t D = check_row_norm("layer_norm", x, normalized_shape, w, b);
  return row_norm(false, x, D, w, b, eps);
}

Tensor rms_norm(const Tensor& x0, const IntList& normalized_shape, const Tensor& weight0, double eps) {
  MPX_CHECK(x0.defined(), "rms_norm: input is undefined");
  auto in = ops::autocast(OpId::rms_norm, {x0, weight0});
  const Tensor &x = in[0], &w = in[1];
  const int64_t D = check_row_norm("rms_norm", x, normalized_shape, w, Tensor());
  // PyTorch's default: the machine epsilon of the dtype the norm runs in (after autocast).
  if (eps < 0) eps = machine_epsilon(x.dtype());
  return row_norm(true, x, D, w, Tensor(), eps);
}

}  // namespace mpx
