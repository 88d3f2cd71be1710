// Elementwise ops: unary math and activations, binary arithmetic with broadcasting, comparisons.
#pragma once
#include <optional>
#include <string>

#include "core/tensor.h"
#include "ops/formulas.h"

namespace mpx {

// ---- unary (differentiable unless noted) ----
/// `Tensor name(const Tensor& x)` for each op of MPX_UNARY_OPS (ops/formulas.h, where each
/// formula and its derivative live): neg, abs, sign (not differentiable), sqrt, rsqrt,
/// reciprocal, exp, log, sin, cos, erf, tanh, sigmoid, relu, silu, ..., and the math of
/// ops/formulas_math.h: floor, ceil, round (halves to even), trunc (these four keep integers and
/// have zero gradient), frac, log1p, expm1, log2, log10, exp2, tan, atan, asin, acos, sinh, cosh,
/// asinh, acosh, atanh, erfc, erfinv.
#define MPX_DECLARE_UNARY(op) Tensor op(const Tensor& x);
MPX_UNARY_OPS(MPX_DECLARE_UNARY)
#undef MPX_DECLARE_UNARY
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// GELU: x Phi(x) with approximate "none" (the erf form, PyTorch's default) or "tanh"
/// (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
/// x above 0, alpha (exp(x) - 1) below (PyTorch's elu); celu(x, alpha) = elu with exp(x / alpha).
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor celu(const Tensor& x, double alpha = 1.0);
/// x clamped to [min_val, max_val] (PyTorch's hardtanh; the gradient passes inside the closed range, as clamp's).
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
/// a * sigmoid(b) for the two halves a, b of x along dim (PyTorch's glu); dim's size must be even.
Tensor glu(const Tensor& x, int64_t dim = -1);
Tensor pow(const Tensor& x, double exponent);
Tensor square(const Tensor& x);
Tensor clamp(const Tensor& x, double lo, double hi);
Tensor clamp_min(const Tensor& x, double lo);
Tensor clamp_max(const Tensor& x, double hi);
/// x * scale + shift in one kernel, rounded once, in x's dtype (the numbers in its compute type,
/// as PyTorch's scalars); integer x takes integral numbers only.
Tensor affine(const Tensor& x, double scale, double shift);
/// grad where x > threshold, else 0 (relu's backward, itself differentiable in grad).
Tensor threshold_backward(const Tensor& grad, const Tensor& x, double threshold);
/// grad * gelu'(x) in one kernel (gelu's backward; `form` 0 is the erf form, 1 the tanh form),
/// itself differentiable in grad and x.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, double form);

// ---- binary, with numpy broadcasting and PyTorch's type promotion ----
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
/// The angle of the point (b, a) in (-pi, pi]; integer operands give f32, as PyTorch's.
Tensor atan2(const Tensor& a, const Tensor& b);
/// sqrt(a^2 + b^2) without overflow or underflow in the squares.
Tensor hypot(const Tensor& a, const Tensor& b);
/// log(exp(a) + exp(b)) without overflow.
Tensor logaddexp(const Tensor& a, const Tensor& b);
/// a - trunc(a / b) b: the sign of a (C's fmod). Integer tensors stay integers; an integer divisor
/// of 0 is an error, as in PyTorch.
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, double b);
/// a - floor(a / b) b: the sign of b (Python's %, PyTorch's remainder and operator%).
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, double b);
/// floor(a / b) (PyTorch's floor_divide and div(rounding_mode="floor")); its gradient is zero.
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, double b);
/// a + weight (b - a), as PyTorch's lerp: computed from b's side for weights of 0.5 and above, so
/// weight 1 gives b exactly. An EMA of weights is `ema.lerp_(w, 1 - decay)`.
Tensor lerp(const Tensor& a, const Tensor& b, double weight);
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& weight);
/// log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps is given (PyTorch's logit).
Tensor logit(const Tensor& x, std::optional<double> eps = std::nullopt);
/// self + value * t1 * t2
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value = 1.0);
/// self + value * t1 / t2
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value = 1.0);
/// cond ? a : b elementwise (cond is bool); differentiable in a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- comparisons (bool results, not differentiable) ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
/// Elementwise |a - b| <= atol + rtol * |b|, reduced over all elements.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
/// True when both have the same shape and values (NaNs compare unequal).
bool equal(const Tensor& a, const Tensor& b);

// ---- operators ----
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(double a, const Tensor& b) { return mul(reciprocal(b), a); }
inline Tensor operator%(const Tensor& a, const Tensor& b) { return remainder(a, b); }
inline Tensor operator%(const Tensor& a, double b) { return remainder(a, b); }
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }
inline Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
inline Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
inline Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
inline Tensor& operator*=(Tensor& a, double b) { return a.mul_(b); }
inline Tensor& operator+=(Tensor& a, double b) { return a.add_(b); }
inline Tensor& operator-=(Tensor& a, double b) { return a.sub_(b); }
inline Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
inline Tensor& operator/=(Tensor& a, double b) { return a.div_(b); }

}  // namespace mpx

namespace mpx::kernels {
/// out = f(in) elementwise; `in` is broadcast to out's shape. p0/p1 carry op parameters.
using UnaryFn = void (*)(const Tensor& out, const Tensor& in, double p0, double p1);
/// out = f(a, b); a and b are expanded to out's shape and share the compute dtype.
using BinaryFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, double alpha);
/// out = f(a, b, c) for where / addcmul / addcdiv.
using TernaryFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, double value);
/// Strided copy from src (any dtype) into out (the kernel's dtype), shapes equal.
using CopyFn = void (*)(const Tensor& out, const Tensor& src);
using FillFn = void (*)(const Tensor& out, double value);
/// Counter-based random fill: element i uses stream position offset + i of `seed`.
using RandFn = void (*)(const Tensor& out, uint64_t seed, uint64_t offset, double a, double b);
}  // namespace mpx::kernels
