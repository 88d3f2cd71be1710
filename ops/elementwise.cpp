// Elementwise ops: autocast, promotion and broadcasting, then the kernel; backward formulas
// are written with these same differentiable ops so create_graph gives second derivatives.
#include "ops/elementwise.h"

#include <cmath>

#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx {
namespace {
using autograd::FunctionNode;
using kernels::BinaryFn;
using kernels::TernaryFn;
using kernels::UnaryFn;

Tensor as_floating(const Tensor& x) { return is_floating(x.dtype()) ? x : x.to(kFloat32); }

// Runs a unary kernel into a fresh tensor of x's dtype (no autograd).
Tensor unary_kernel(OpId op, const Tensor& x, double p0 = 0, double p1 = 0) {
  Tensor out = empty(x.sizes(), ops::elementwise_options(x.dtype(), x.device(), x.sizes(), {x}));
  dispatch::kernel<UnaryFn>(op, x.device(), x.dtype())(out, x, p0, p1);
  return out;
}

// Unary op whose backward needs the input (save_out=false) or the output (save_out=true).
template <typename Bwd>
Tensor unary(OpId op, const char* node, const Tensor& x0, Bwd bwd, bool save_out, double p0 = 0, double p1 = 0,
             bool float_only = true) {
  Tensor x = ops::autocast(op, {x0})[0];
  if (float_only) x = as_floating(x);
  Tensor out = unary_kernel(op, x, p0, p1);
  if (auto n = autograd::record(node, {x}, {out}, [bwd, p0, p1](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {bwd(g[0], self.saved(0), p0, p1)};
      }))
    n->save(save_out ? out : x, save_out);
  return out;
}

Tensor zero_like_scalar(const Tensor& g) { return zeros({}, g.options()); }

// Binary op: promotion, broadcasting, kernel; backward returns grads for (a, b) before
// they are reduced to each input's shape and dtype.
// `reads_inputs` false: the backward needs only the inputs' shapes and dtypes (add, sub), so the
// inputs are not kept alive, and an in-place write into one of them cannot invalidate the node.
template <typename Bwd>
Tensor binary(OpId op, const char* node, const Tensor& a0, const Tensor& b0, double alpha, Bwd bwd,
              bool true_div = false, bool reads_inputs = true) {
  MPX_CHECK(a0.defined() && b0.defined(), op_name(op), ": an operand is undefined");
  auto in = ops::autocast(op, {a0, b0});
  const Device dev = ops::common_device(op_name(op), in);
  DType dt = ops::result_type(in);
  if (true_div && !is_floating(dt)) dt = kFloat32;
  const IntList shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), op_name(op));
  Tensor out = empty(shape, ops::elementwise_options(dt, dev, shape, in));
  {
    NoGradGuard ng;
    Tensor a = in[0].to(dt).expand(shape), b = in[1].to(dt).expand(shape);
    dispatch::kernel<BinaryFn>(op, dev, dt)(out, a, b, alpha);
  }
  const DType da = in[0].dtype(), db = in[1].dtype();
  if (auto n = autograd::record(node, in, {out}, [bwd, alpha, reads_inputs, da, db](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor a = reads_inputs ? self.saved(0) : Tensor(), b = reads_inputs ? self.saved(1) : Tensor();
        auto [ga, gb] = bwd(g[0], a, b, alpha);
        return {ops::reduce_grad(ga, self.shapes[0], da), ops::reduce_grad(gb, self.shapes[1], db)};
      })) {
    n->shapes = {in[0].sizes(), in[1].sizes()};
    if (reads_inputs) {
      n->save(in[0]);
      n->save(in[1]);
    }
  }
  return out;
}

Tensor compare(OpId op, const Tensor& a0, const Tensor& b0) {
  auto in = ops::autocast(op, {a0, b0});
  const Device dev = ops::common_device(op_name(op), in);
  const DType dt = ops::result_type(in);
  const IntList shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), op_name(op));
  Tensor out = empty(shape, ops::elementwise_options(kBool, dev, shape, in));
  NoGradGuard ng;
  dispatch::kernel<BinaryFn>(op, dev, dt)(out, in[0].to(dt).expand(shape), in[1].to(dt).expand(shape), 0.0);
  return out;
}

// A Python scalar next to a tensor: it takes the tensor's dtype unless it would lose its
// fraction in an integer tensor (PyTorch's rule for wrapped numbers).
Tensor wrap_scalar(double v, const Tensor& like) {
  DType dt = like.dtype();
  if (!is_floating(dt) && v != std::floor(v)) dt = kFloat32;
  if (dt == kBool) dt = kInt64;
  return full({}, v, TensorOptions().dtype(dt).device(like.device()));
}

}  // namespace

// ---- unary ----
Tensor neg(const Tensor& x) {
  return unary(OpId::neg, "NegBackward", x, [](const Tensor& g, const Tensor&, double, double) { return neg(g); }, false,
               0, 0, false);
}
Tensor abs(const Tensor& x) {
  return unary(OpId::abs, "AbsBackward", x, [](const Tensor& g, const Tensor& x, double, double) { return g * sign(x); },
               false, 0, 0, false);
}
Tensor sign(const Tensor& x0) {
  Tensor x = as_floating(x0);
  return unary_kernel(OpId::sign, x);
}
Tensor sqrt(const Tensor& x) {
  return unary(OpId::sqrt, "SqrtBackward", x, [](const Tensor& g, const Tensor& y, double, double) { return g / (y * 2.0); }, true);
}
Tensor rsqrt(const Tensor& x) {
  return unary(OpId::rsqrt, "RsqrtBackward", x,
               [](const Tensor& g, const Tensor& y, double, double) { return g * pow(y, 3.0) * -0.5; }, true);
}
Tensor reciprocal(const Tensor& x) {
  return unary(OpId::reciprocal, "ReciprocalBackward", x,
               [](const Tensor& g, const Tensor& y, double, double) { return -(g * y * y); }, true);
}
Tensor exp(const Tensor& x) {
  return unary(OpId::exp, "ExpBackward", x, [](const Tensor& g, const Tensor& y, double, double) { return g * y; }, true);
}
Tensor log(const Tensor& x) {
  return unary(OpId::log, "LogBackward", x, [](const Tensor& g, const Tensor& x, double, double) { return g / x; }, false);
}
Tensor sin(const Tensor& x) {
  return unary(OpId::sin, "SinBackward", x, [](const Tensor& g, const Tensor& x, double, double) { return g * cos(x); }, false);
}
Tensor cos(const Tensor& x) {
  return unary(OpId::cos, "CosBackward", x, [](const Tensor& g, const Tensor& x, double, double) { return -(g * sin(x)); }, false);
}
Tensor erf(const Tensor& x) {
  return unary(OpId::erf, "ErfBackward", x, [](const Tensor& g, const Tensor& x, double, double) {
    return g * exp(-(x * x)) * 1.1283791670955126;  // 2/sqrt(pi)
  }, false);
}
Tensor tanh(const Tensor& x) {
  return unary(OpId::tanh, "TanhBackward", x,
               [](const Tensor& g, const Tensor& y, double, double) { return g * (1.0 - y * y); }, true);
}
Tensor sigmoid(const Tensor& x) {
  return unary(OpId::sigmoid, "SigmoidBackward", x,
               [](const Tensor& g, const Tensor& y, double, double) { return g * y * (1.0 - y); }, true);
}
Tensor relu(const Tensor& x) {
  return unary(OpId::relu, "ReluBackward", x,
               [](const Tensor& g, const Tensor& y, double, double) { return threshold_backward(g, y, 0.0); }, true, 0, 0,
               false);
}
Tensor leaky_relu(const Tensor& x, double slope) {
  return unary(OpId::leaky_relu, "LeakyReluBackward", x, [](const Tensor& g, const Tensor& x, double s, double) {
    return where(gt(x, 0.0), g, g * s);
  }, false, slope);
}
Tensor gelu(const Tensor& x) {
  return unary(OpId::gelu, "GeluBackward", x, [](const Tensor& g, const Tensor& x, double, double) {
    Tensor cdf = (erf(x * 0.7071067811865476) + 1.0) * 0.5;
    Tensor pdf = exp(x * x * -0.5) * 0.3989422804014327;
    return g * (cdf + x * pdf);
  }, false);
}
Tensor silu(const Tensor& x) {
  return unary(OpId::silu, "SiluBackward", x, [](const Tensor& g, const Tensor& x, double, double) {
    Tensor s = sigmoid(x);
    return g * (s * (1.0 + x * (1.0 - s)));
  }, false);
}
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return unary(OpId::softplus, "SoftplusBackward", x, [](const Tensor& g, const Tensor& x, double b, double t) {
    Tensor bx = x * b;
    return where(gt(bx, t), g, g * sigmoid(bx));
  }, false, beta, threshold);
}
Tensor pow(const Tensor& x, double p) {
  return unary(OpId::pow_scalar, "PowBackward", x, [](const Tensor& g, const Tensor& x, double p, double) {
    if (p == 0.0) return zeros_like(g);
    if (p == 1.0) return g;
    return g * pow(x, p - 1.0) * p;
  }, false, p);
}
Tensor square(const Tensor& x) { return pow(x, 2.0); }
Tensor clamp(const Tensor& x, double lo, double hi) {
  MPX_CHECK(!(lo > hi), "clamp: min (", lo, ") is greater than max (", hi, ")");
  return unary(OpId::clamp, "ClampBackward", x, [](const Tensor& g, const Tensor& x, double lo, double hi) {
    Tensor z = zero_like_scalar(g);
    return where(ge(x, lo), where(le(x, hi), g, z), z);
  }, false, lo, hi, false);
}
Tensor clamp_min(const Tensor& x, double lo) { return clamp(x, lo, INFINITY); }
Tensor clamp_max(const Tensor& x, double hi) { return clamp(x, -INFINITY, hi); }

Tensor threshold_backward(const Tensor& g0, const Tensor& x0, double thr) {
  auto in = ops::autocast(OpId::threshold_backward, {g0, x0});
  const DType dt = ops::result_type(in);
  const IntList shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "threshold_backward");
  Tensor out = empty(shape, ops::elementwise_options(dt, in[0].device(), shape, in));
  {
    NoGradGuard ng;
    dispatch::kernel<BinaryFn>(OpId::threshold_backward, out.device(), dt)(out, in[0].to(dt).expand(shape),
                                                                             in[1].to(dt).expand(shape), thr);
  }
  // d/dgrad is the same mask; d/dx is zero almost everywhere.
  if (auto n = autograd::record("ThresholdBackwardBackward", {in[0]}, {out},
                                [thr](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  return {ops::reduce_grad(threshold_backward(g[0], self.saved(0), thr), self.saved(1))};
                                })) {
    n->save(in[1]);
    n->save(in[0]);
  }
  return out;
}

// ---- binary ----
Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  return binary(OpId::add, "AddBackward", a, b, alpha, [](const Tensor& g, const Tensor&, const Tensor&, double al) {
    return std::make_pair(g, al == 1.0 ? g : g * al);
  }, false, false);
}
Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  return binary(OpId::sub, "SubBackward", a, b, alpha, [](const Tensor& g, const Tensor&, const Tensor&, double al) {
    return std::make_pair(g, g * -al);
  }, false, false);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(OpId::mul, "MulBackward", a, b, 1.0, [](const Tensor& g, const Tensor& a, const Tensor& b, double) {
    return std::make_pair(g * b, g * a);
  });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(OpId::div, "DivBackward", a, b, 1.0, [](const Tensor& g, const Tensor& a, const Tensor& b, double) {
    Tensor ga = g / b;
    return std::make_pair(ga, -(ga * a / b));
  }, true);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  return binary(OpId::pow, "PowBackward", a, b, 1.0, [](const Tensor& g, const Tensor& a, const Tensor& b, double) {
    Tensor ga = g * b * pow(a, b - 1.0);
    Tensor gb = g * pow(a, b) * log(a);
    return std::make_pair(ga, gb);
  }, true);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary(OpId::maximum, "MaximumBackward", a, b, 1.0, [](const Tensor& g, const Tensor& a, const Tensor& b, double) {
    // Ties split the gradient evenly, as PyTorch does.
    Tensor z = zero_like_scalar(g);
    Tensor tie = where(eq(a, b), g * 0.5, z);
    return std::make_pair(where(gt(a, b), g, tie), where(lt(a, b), g, tie));
  });
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary(OpId::minimum, "MinimumBackward", a, b, 1.0, [](const Tensor& g, const Tensor& a, const Tensor& b, double) {
    Tensor z = zero_like_scalar(g);
    Tensor tie = where(eq(a, b), g * 0.5, z);
    return std::make_pair(where(lt(a, b), g, tie), where(gt(a, b), g, tie));
  });
}
Tensor add(const Tensor& a, double b) { return add(a, wrap_scalar(b, a)); }
Tensor sub(const Tensor& a, double b) { return sub(a, wrap_scalar(b, a)); }
Tensor mul(const Tensor& a, double b) { return mul(a, wrap_scalar(b, a)); }
Tensor div(const Tensor& a, double b) { return div(a, wrap_scalar(b, a)); }

namespace {
// Ternary ops share one shape: promotion over (a, b, c) and broadcasting to one shape.
Tensor ternary(OpId op, const Tensor& c0, const Tensor& a0, const Tensor& b0, double value, bool first_is_cond,
               tensor_list* promoted) {
  tensor_list in = ops::autocast(op, {c0, a0, b0});
  const Device dev = ops::common_device(op_name(op), in);
  const DType dt = first_is_cond ? ops::result_type({in[1], in[2]}) : ops::result_type(in);
  if (first_is_cond) MPX_CHECK(in[0].dtype() == kBool, op_name(op), ": condition must be bool, got ", ops::describe(in[0]));
  IntList shape = broadcast_shapes(broadcast_shapes(in[0].sizes(), in[1].sizes(), op_name(op)), in[2].sizes(), op_name(op));
  Tensor out = empty(shape, ops::elementwise_options(dt, dev, shape, in));
  {
    NoGradGuard ng;
    Tensor c = first_is_cond ? in[0].expand(shape) : in[0].to(dt).expand(shape);
    dispatch::kernel<TernaryFn>(op, dev, dt)(out, c, in[1].to(dt).expand(shape), in[2].to(dt).expand(shape), value);
  }
  *promoted = in;
  return out;
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  tensor_list in;
  Tensor out = ternary(OpId::where, cond, a, b, 0.0, true, &in);
  if (auto n = autograd::record("WhereBackward", {in[1], in[2]}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor c = self.saved(0), a = self.saved(1), b = self.saved(2);
        Tensor z = zero_like_scalar(g[0]);
        return {ops::reduce_grad(where(c, g[0], z), a), ops::reduce_grad(where(c, z, g[0]), b)};
      })) {
    n->save(in[0]);
    n->save(in[1]);
    n->save(in[2]);
  }
  return out;
}
Tensor addcmul(const Tensor& s, const Tensor& t1, const Tensor& t2, double v) {
  tensor_list in;
  Tensor out = ternary(OpId::addcmul, s, t1, t2, v, false, &in);
  if (auto n = autograd::record("AddcmulBackward", in, {out}, [v](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor s = self.saved(0), a = self.saved(1), b = self.saved(2);
        return {ops::reduce_grad(g[0], s), ops::reduce_grad(g[0] * b * v, a), ops::reduce_grad(g[0] * a * v, b)};
      })) {
    for (auto& t : in) n->save(t);
  }
  return out;
}
Tensor addcdiv(const Tensor& s, const Tensor& t1, const Tensor& t2, double v) {
  tensor_list in;
  Tensor out = ternary(OpId::addcdiv, s, t1, t2, v, false, &in);
  if (auto n = autograd::record("AddcdivBackward", in, {out}, [v](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor s = self.saved(0), a = self.saved(1), b = self.saved(2);
        Tensor ga = g[0] * v / b;
        return {ops::reduce_grad(g[0], s), ops::reduce_grad(ga, a), ops::reduce_grad(-(ga * a / b), b)};
      })) {
    for (auto& t : in) n->save(t);
  }
  return out;
}

// ---- comparisons ----
Tensor eq(const Tensor& a, const Tensor& b) { return compare(OpId::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(OpId::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(OpId::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(OpId::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(OpId::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(OpId::ge, a, b); }
Tensor eq(const Tensor& a, double b) { return compare(OpId::eq, a, wrap_scalar(b, a)); }
Tensor ne(const Tensor& a, double b) { return compare(OpId::ne, a, wrap_scalar(b, a)); }
Tensor lt(const Tensor& a, double b) { return compare(OpId::lt, a, wrap_scalar(b, a)); }
Tensor le(const Tensor& a, double b) { return compare(OpId::le, a, wrap_scalar(b, a)); }
Tensor gt(const Tensor& a, double b) { return compare(OpId::gt, a, wrap_scalar(b, a)); }
Tensor ge(const Tensor& a, double b) { return compare(OpId::ge, a, wrap_scalar(b, a)); }

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  NoGradGuard ng;
  Tensor x = a.to(kFloat64), y = b.to(kFloat64);
  Tensor bad = gt(abs(x - y), abs(y) * rtol + atol);
  return sum(bad.to(kInt64)).item<int64_t>() == 0 && sum(ne(x, x).to(kInt64)).item<int64_t>() == 0;
}
bool equal(const Tensor& a, const Tensor& b) {
  NoGradGuard ng;
  if (a.sizes() != b.sizes()) return false;
  return sum(ne(a, b).to(kInt64)).item<int64_t>() == 0;
}

// ---- Tensor methods that forward to free functions ----
Tensor Tensor::abs() const { return mpx::abs(*this); }
Tensor Tensor::neg() const { return mpx::neg(*this); }
Tensor Tensor::exp() const { return mpx::exp(*this); }
Tensor Tensor::log() const { return mpx::log(*this); }
Tensor Tensor::sqrt() const { return mpx::sqrt(*this); }
Tensor Tensor::relu() const { return mpx::relu(*this); }
Tensor Tensor::sigmoid() const { return mpx::sigmoid(*this); }
Tensor Tensor::tanh() const { return mpx::tanh(*this); }
Tensor Tensor::pow(double e) const { return mpx::pow(*this, e); }
Tensor Tensor::clamp(double lo, double hi) const { return mpx::clamp(*this, lo, hi); }
Tensor Tensor::eq(const Tensor& o) const { return mpx::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return mpx::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return mpx::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return mpx::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return mpx::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return mpx::ge(*this, o); }

}  // namespace mpx
