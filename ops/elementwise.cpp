// Elementwise ops: autocast, promotion and broadcasting, then the kernel; backward formulas
// are written with these same differentiable ops so create_graph gives second derivatives.
#include "ops/elementwise.h"
#include "ops/logical.h"

#include <cmath>

#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx {
// A zero of g's dtype and device that broadcasts: formulas' zero_of(g) for Tensors (found by
// argument-dependent lookup, so it lives in mpx itself).
static Tensor zero_of(const Tensor& g) { return zeros({}, g.options()); }

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

// A unary op from its formula: autocast, the kernel, and a node whose backward is the
// formula's bwd on Tensors (saving the input or the output, as the formula reads).
template <OpId Op>
Tensor unary(const Tensor& x0, double p0 = 0, double p1 = 0) {
  using F = formulas::Formula<Op>;
  Tensor x = ops::autocast(Op, {x0})[0];
  if constexpr (!(F::kFlags & formulas::kKeepsInts)) x = as_floating(x);
  Tensor out = unary_kernel(Op, x, p0, p1);
  if constexpr (!(F::kFlags & formulas::kNoGrad)) {
    constexpr bool save_out = (F::kFlags & formulas::kSavesOutput) != 0;
    if (auto n = autograd::record(F::kNode, {x}, {out}, [p0, p1](FunctionNode& self, const tensor_list& g) -> tensor_list {
          const Tensor s = self.saved(0);
          return {save_out ? F::bwd(g[0], Tensor(), s, p0, p1) : F::bwd(g[0], s, Tensor(), p0, p1)};
        }))
      n->save(save_out ? out : x, save_out);
  }
  return out;
}

// Binary op: promotion, broadcasting, kernel; the formula's backward gives grads for (a, b)
// before they are reduced to each input's shape and dtype. A formula whose backward needs only
// the shapes and dtypes (add, sub) keeps no input alive, so an in-place write into one of
// them cannot invalidate the node.
template <OpId Op>
Tensor binary(const Tensor& a0, const Tensor& b0, double alpha, bool true_div = false) {
  using F = formulas::Formula<Op>;
  constexpr bool reads_inputs = F::kReadsInputs;
  const OpId op = Op;
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
  if (auto n = autograd::record(F::kNode, in, {out}, [alpha, da, db](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor a = reads_inputs ? self.saved(0) : Tensor(), b = reads_inputs ? self.saved(1) : Tensor();
        auto [ga, gb] = F::bwd(g[0], a, b, alpha);
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
#define MPX_DEFINE_UNARY(op) \
  Tensor op(const Tensor& x) { return unary<OpId::op>(x); }
MPX_UNARY_OPS(MPX_DEFINE_UNARY)
#undef MPX_DEFINE_UNARY
Tensor leaky_relu(const Tensor& x, double slope) { return unary<OpId::leaky_relu>(x, slope); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  MPX_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"",
            approximate, "\"");
  return unary<OpId::gelu>(x, approximate == "tanh" ? 1.0 : 0.0);
}
Tensor softplus(const Tensor& x, double beta, double threshold) { return unary<OpId::softplus>(x, beta, threshold); }
Tensor elu(const Tensor& x, double alpha) { return unary<OpId::elu>(x, alpha, 1.0); }
Tensor celu(const Tensor& x, double alpha) {
  MPX_CHECK(alpha != 0.0, "celu: alpha must not be 0 (it divides the input)");
  return unary<OpId::elu>(x, alpha, 1.0 / alpha);
}
Tensor hardtanh(const Tensor& x, double min_val, double max_val) { return clamp(x, min_val, max_val); }
Tensor glu(const Tensor& x, int64_t dim) {
  MPX_CHECK(x.defined() && x.dim() >= 1, "glu: expected a tensor with at least one dim");
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  MPX_CHECK(d >= 0 && d < x.dim(), "glu: dim ", dim, " is out of range for ", x.dim(), " dims");
  MPX_CHECK(x.size(d) % 2 == 0, "glu: halving dim ", dim, " needs an even size, got ", x.size(d));
  const int64_t h = x.size(d) / 2;
  return x.narrow(d, 0, h) * sigmoid(x.narrow(d, h, h));
}
Tensor pow(const Tensor& x, double p) { return unary<OpId::pow_scalar>(x, p); }
Tensor square(const Tensor& x) { return pow(x, 2.0); }
Tensor clamp(const Tensor& x, double lo, double hi) {
  MPX_CHECK(!(lo > hi), "clamp: min (", lo, ") is greater than max (", hi, ")");
  return unary<OpId::clamp>(x, lo, hi);
}
Tensor clamp_min(const Tensor& x, double lo) { return clamp(x, lo, INFINITY); }
Tensor clamp_max(const Tensor& x, double hi) { return clamp(x, -INFINITY, hi); }
Tensor affine(const Tensor& x, double scale, double shift) {
  MPX_CHECK(x.defined(), "affine: the input is undefined");
  MPX_CHECK(is_floating(x.dtype()) || (scale == std::floor(scale) && shift == std::floor(shift)),
            "affine: ", ops::describe(x), " is an integer tensor, so scale (", scale, ") and shift (", shift,
            ") must be integers; convert it to a floating dtype first");
  return unary<OpId::affine>(x, scale, shift);
}

Tensor threshold_backward(const Tensor& g0, const Tensor& x0, double thr) {
  auto in = ops::autocast(OpId::threshold_backward, {g0, x0});
  const DType dt = ops::result_type(in);
  const IntList shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "threshold_backward");
  Tensor out = empty(shape, ops::elementwise_options(dt, in[0].device(), shape, in));
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::threshold_backward>(out.device(), dt)(out, in[0].to(dt).expand(shape),
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

Tensor gelu_backward(const Tensor& g0, const Tensor& x0, double form) {
  auto in = ops::autocast(OpId::gelu_backward, {g0, x0});
  const DType dt = ops::result_type(in);
  MPX_CHECK(is_floating(dt), "gelu_backward: grad and x must be floating, got ", ops::describe(in[0]), " and ",
            ops::describe(in[1]));
  const IntList shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "gelu_backward");
  Tensor out = empty(shape, ops::elementwise_options(dt, in[0].device(), shape, in));
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::gelu_backward>(out.device(), dt)(out, in[0].to(dt).expand(shape), in[1].to(dt).expand(shape),
                                                           form);
  }
  // d/dgrad = gelu'(x) (this kernel again); d/dx = grad * gelu''(x), in differentiable ops.
  if (auto n = autograd::record("GeluBackwardBackward", {in[0], in[1]}, {out},
                                [form](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  const Tensor &gy = self.saved(0), &x = self.saved(1);
                                  Tensor second;
                                  if (form == 0.0) {
                                    // phi(x) (2 - x^2)
                                    second = exp(x * x * -0.5) * 0.3989422804014327 * (2.0 - x * x);
                                  } else {
                                    // u = k (x + c x^3), t = tanh(u): (1 - t^2) (u' - x t u'^2 + 3 c k x^2)
                                    const double k = 0.7978845608028654, c = 0.044715;
                                    const Tensor x2 = x * x;
                                    const Tensor t = tanh((x + x2 * x * c) * k);
                                    const Tensor du = (x2 * (3.0 * c) + 1.0) * k;
                                    second = (1.0 - t * t) * (du - x * t * du * du + x2 * (3.0 * c * k));
                                  }
                                  return {ops::reduce_grad(gelu_backward(g[0], x, form), gy),
                                          ops::reduce_grad(g[0] * gy * second, x)};
                                })) {
    n->save(in[0]);
    n->save(in[1]);
  }
  return out;
}

// ---- binary ----
Tensor add(const Tensor& a, const Tensor& b, double alpha) { return binary<OpId::add>(a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return binary<OpId::sub>(a, b, alpha); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary<OpId::mul>(a, b, 1.0); }
Tensor div(const Tensor& a, const Tensor& b) { return binary<OpId::div>(a, b, 1.0, true); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary<OpId::pow>(a, b, 1.0, true); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary<OpId::maximum>(a, b, 1.0); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary<OpId::minimum>(a, b, 1.0); }
Tensor add(const Tensor& a, double b) { return add(a, wrap_scalar(b, a)); }
Tensor sub(const Tensor& a, double b) { return sub(a, wrap_scalar(b, a)); }
Tensor mul(const Tensor& a, double b) { return mul(a, wrap_scalar(b, a)); }
Tensor div(const Tensor& a, double b) { return div(a, wrap_scalar(b, a)); }

// ---- two-operand math and the division-like ops ----
Tensor atan2(const Tensor& a, const Tensor& b) { return binary<OpId::atan2>(a, b, 1.0, true); }
Tensor hypot(const Tensor& a, const Tensor& b) { return binary<OpId::hypot>(a, b, 1.0, true); }
Tensor logaddexp(const Tensor& a, const Tensor& b) { return binary<OpId::logaddexp>(a, b, 1.0, true); }
namespace {
// An integer divisor of 0 is refused before a kernel sees it, as PyTorch raises ZeroDivisionError.
void check_divisor(const char* op, const Tensor& a, const Tensor& b) {
  MPX_CHECK(a.defined() && b.defined(), op, ": an operand is undefined");
  if (is_floating(ops::result_type({a, b}))) return;
  NoGradGuard ng;
  MPX_CHECK(!any(eq(b, 0.0)).item<bool>(), op, ": integer division by zero (the divisor ", ops::describe(b),
            " holds a 0); make the operands floating for inf and NaN results");
}
}  // namespace
Tensor fmod(const Tensor& a, const Tensor& b) {
  check_divisor("fmod", a, b);
  return binary<OpId::fmod>(a, b, 1.0);
}
Tensor remainder(const Tensor& a, const Tensor& b) {
  check_divisor("remainder", a, b);
  return binary<OpId::remainder>(a, b, 1.0);
}
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  check_divisor("floor_divide", a, b);
  return binary<OpId::floor_divide>(a, b, 1.0);
}
Tensor fmod(const Tensor& a, double b) { return fmod(a, wrap_scalar(b, a)); }
Tensor remainder(const Tensor& a, double b) { return remainder(a, wrap_scalar(b, a)); }
Tensor floor_divide(const Tensor& a, double b) { return floor_divide(a, wrap_scalar(b, a)); }
Tensor lerp(const Tensor& a, const Tensor& b, double w) {
  return w < 0.5 ? a + (b - a) * w : b - (b - a) * (1.0 - w);
}
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& w) {
  const Tensor d = b - a;
  return where(lt(w, 0.5), a + d * w, b - d * (1.0 - w));
}
Tensor logit(const Tensor& x, std::optional<double> eps) {
  MPX_CHECK(x.defined(), "logit: the input is undefined");
  const Tensor z = eps ? clamp(x, *eps, 1.0 - *eps) : x;
  return log(z / (1.0 - z));
}

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
        Tensor z = zero_of(g[0]);
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
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare(OpId::logical_and, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare(OpId::logical_or, a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return compare(OpId::logical_xor, a, b); }
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
Tensor Tensor::clamp_min(double lo) const { return mpx::clamp_min(*this, lo); }
Tensor Tensor::clamp_max(double hi) const { return mpx::clamp_max(*this, hi); }
Tensor Tensor::eq(const Tensor& o) const { return mpx::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return mpx::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return mpx::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return mpx::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return mpx::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return mpx::ge(*this, o); }
Tensor Tensor::eq(double v) const { return mpx::eq(*this, v); }
Tensor Tensor::ne(double v) const { return mpx::ne(*this, v); }
Tensor Tensor::lt(double v) const { return mpx::lt(*this, v); }
Tensor Tensor::le(double v) const { return mpx::le(*this, v); }
Tensor Tensor::gt(double v) const { return mpx::gt(*this, v); }
Tensor Tensor::ge(double v) const { return mpx::ge(*this, v); }
Tensor Tensor::add(const Tensor& o, double alpha) const { return mpx::add(*this, o, alpha); }
Tensor Tensor::add(double o) const { return mpx::add(*this, o); }
Tensor Tensor::sub(const Tensor& o, double alpha) const { return mpx::sub(*this, o, alpha); }
Tensor Tensor::sub(double o) const { return mpx::sub(*this, o); }
Tensor Tensor::mul(const Tensor& o) const { return mpx::mul(*this, o); }
Tensor Tensor::mul(double o) const { return mpx::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return mpx::div(*this, o); }
Tensor Tensor::div(double o) const { return mpx::div(*this, o); }
Tensor Tensor::pow(const Tensor& e) const { return mpx::pow(*this, e); }
Tensor Tensor::maximum(const Tensor& o) const { return mpx::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return mpx::minimum(*this, o); }
#define MPX_UNARY_METHOD(op) \
  Tensor Tensor::op() const { return mpx::op(*this); }
MPX_TENSOR_UNARY_METHODS(MPX_UNARY_METHOD)
#undef MPX_UNARY_METHOD
Tensor Tensor::square() const { return mpx::square(*this); }
Tensor Tensor::atan2(const Tensor& o) const { return mpx::atan2(*this, o); }
Tensor Tensor::fmod(const Tensor& o) const { return mpx::fmod(*this, o); }
Tensor Tensor::fmod(double o) const { return mpx::fmod(*this, o); }
Tensor Tensor::remainder(const Tensor& o) const { return mpx::remainder(*this, o); }
Tensor Tensor::remainder(double o) const { return mpx::remainder(*this, o); }
Tensor Tensor::floor_divide(const Tensor& o) const { return mpx::floor_divide(*this, o); }
Tensor Tensor::floor_divide(double o) const { return mpx::floor_divide(*this, o); }
Tensor Tensor::lerp(const Tensor& end, double w) const { return mpx::lerp(*this, end, w); }
Tensor Tensor::lerp(const Tensor& end, const Tensor& w) const { return mpx::lerp(*this, end, w); }

}  // namespace mpx
