// Elementwise math written once: each unary/binary op's forward and backward as host/device
// expressions, shared by the CPU loops, the CUDA kernels and the autograd backward.
//
// fwd computes in A, the compute type (f32 for f16/bf16 storage, f64 for f64, the integer
// type for integers); the CPU and CUDA kernels round its result once at the store.
// bwd is a template over V: with V = Tensor (ops/elementwise.cpp) its arithmetic, math
// functions and where() resolve to the differentiable ops, so create_graph gives second
// derivatives; with V = double it is the scalar derivative tests/test_backend_ops.cpp holds
// against finite differences of fwd.
//
// Adding an elementwise unary op: its ops.def row (signature UnaryFn), a Formula below (or in
// ops/formulas_math.h) and its name in MPX_UNARY_OPS (or MPX_PARAM_UNARY_OPS with a hand-written
// public function), a test.
// Plain C++17 so the CUDA kernel files can include it.
#pragma once
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "core/hd.h"
#include "ops/op_id.h"
#include "ops/scalar_math.h"

/// Unary ops whose public function is `Tensor name(const Tensor& x)`, generated in ops/elementwise.h.
#define MPX_UNARY_OPS(X) \
  X(neg) X(abs) X(sign) X(sqrt) X(rsqrt) X(reciprocal) X(exp) X(log) X(sin) X(cos) X(erf) X(tanh) X(sigmoid) \
  X(relu) X(silu) X(hardswish) X(selu) X(mish) X(hardsigmoid) X(logsigmoid) X(softsign) \
  X(floor) X(ceil) X(round) X(trunc) X(frac) X(log1p) X(expm1) X(log2) X(log10) X(exp2) X(tan) X(atan) X(asin) \
  X(acos) X(sinh) X(cosh) X(asinh) X(acosh) X(atanh) X(erfc) X(erfinv)
/// Unary ops with parameters (p0, p1); their public functions are written in ops/elementwise.cpp.
#define MPX_PARAM_UNARY_OPS(X) X(leaky_relu) X(gelu) X(softplus) X(pow_scalar) X(clamp) X(affine) X(elu)
/// Binary ops: arithmetic (result in the compute dtype), threshold_backward, comparisons and logical ops (bool).
#define MPX_BINARY_OPS(X) \
  X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum) X(threshold_backward) X(gelu_backward) X(eq) X(ne) X(lt) X(le) X(gt) X(ge) \
  X(logical_and) X(logical_or) X(logical_xor) X(atan2) X(hypot) X(logaddexp) X(fmod) X(remainder) X(floor_divide)

namespace mpx::formulas {

template <typename A> MPX_HD constexpr bool is_nan(A x) {
  if constexpr (std::is_floating_point<A>::value) return x != x;
  else return false;
}
template <typename A> MPX_HD A abs_of(A x) {
  if constexpr (std::is_same<A, float>::value) return ::fabsf(x);
  else if constexpr (std::is_same<A, double>::value) return ::fabs(x);
  else if constexpr (std::is_unsigned<A>::value) return x;
  else return x < A(0) ? static_cast<A>(-x) : x;
}
/// static_cast<A>(double) as x86 computes it: to u8 through a 32-bit integer (cvttsd2si), so
/// negative values wrap on the CPU and the GPU alike instead of saturating.
template <typename A> MPX_HD constexpr A from_double(double d) {
  if constexpr (std::is_same<A, uint8_t>::value) return static_cast<uint8_t>(static_cast<int32_t>(d));
  else return static_cast<A>(d);
}
/// Whether a dtypes:: mask (ops/op_id.h) holds a dtype computing in A (f16/bf16 compute in f32).
template <typename A> MPX_HD constexpr bool has_dtype(uint32_t mask) {
  if constexpr (std::is_floating_point<A>::value) return (mask & dtypes::floats) != 0;
  else if constexpr (std::is_same<A, int64_t>::value) return (mask & (1u << 4)) != 0;
  else if constexpr (std::is_same<A, int32_t>::value) return (mask & (1u << 5)) != 0;
  else if constexpr (std::is_same<A, uint8_t>::value) return (mask & (1u << 6)) != 0;
  else if constexpr (std::is_same<A, bool>::value) return (mask & (1u << 7)) != 0;
  else return false;
}

// ---- scalar forms of what backward formulas use (V = Tensor finds mpx's ops by ADL) ----
template <typename V> MPX_HD V sign(V x) { return static_cast<V>((x > V(0)) - (x < V(0))); }
template <typename V> MPX_HD V sigmoid(V x) { return V(1) / (V(1) + exp(-x)); }
template <typename A, typename B> MPX_HD std::common_type_t<A, B> where(bool c, A a, B b) { return c ? a : b; }
template <typename V> MPX_HD V zero_of(V) { return V(0); }
template <typename V> MPX_HD V zeros_like(V) { return V(0); }
template <typename V> MPX_HD V threshold_backward(V g, V x, double t) { return x > t ? g : V(0); }

/// Flags of a unary formula.
enum : int {
  kSavesOutput = 1,  // backward reads the output y (else the input x)
  kKeepsInts = 2,    // integer inputs run as they are (else they become f32 first)
  kNoGrad = 4,       // not differentiable: no autograd node
};

/// The two input gradients of a binary op.
template <typename V> struct Grads { V a, b; };

/// The formula of one op; kArity 0 marks an op without one. Optional kLo / kHi (default -3, 3)
/// and kP0 / kP1 (default 0) name the inputs and parameters tests/test_backend_ops.cpp samples.
template <OpId Op> struct Formula { static constexpr int kArity = 0; };

// ---- unary: fwd(x, p0, p1) -> A; bwd(g, x, y, p0, p1) -> dL/dx ----
template <> struct Formula<OpId::neg> {
  static constexpr int kArity = 1, kFlags = kKeepsInts;
  static constexpr const char* kNode = "NegBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return static_cast<A>(-x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V&, double, double) { return -g; }
};
template <> struct Formula<OpId::abs> {
  static constexpr int kArity = 1, kFlags = kKeepsInts;
  static constexpr const char* kNode = "AbsBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return abs_of(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) { return g * sign(x); }
};
template <> struct Formula<OpId::sign> {
  static constexpr int kArity = 1, kFlags = kNoGrad;
  static constexpr const char* kNode = "SignBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return static_cast<A>((x > A(0)) - (x < A(0))); }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V&, double, double) { return g * 0.0; }
};
template <> struct Formula<OpId::sqrt> {
  static constexpr int kArity = 1, kFlags = kSavesOutput;
  static constexpr const char* kNode = "SqrtBackward";
  static constexpr double kLo = 0.2;  // the domain tests sample (the formula holds on x > 0)
  template <typename A> MPX_HD static A fwd(A x, double, double) { return sqrt(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V& y, double, double) { return g / (y * 2.0); }
};
template <> struct Formula<OpId::rsqrt> {
  static constexpr int kArity = 1, kFlags = kSavesOutput;
  static constexpr const char* kNode = "RsqrtBackward";
  static constexpr double kLo = 0.2;  // the domain tests sample (the formula holds on x > 0)
  template <typename A> MPX_HD static A fwd(A x, double, double) { return A(1) / sqrt(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V& y, double, double) {
    return g * pow(y, 3.0) * -0.5;
  }
};
template <> struct Formula<OpId::reciprocal> {
  static constexpr int kArity = 1, kFlags = kSavesOutput;
  static constexpr const char* kNode = "ReciprocalBackward";
  static constexpr double kLo = 0.2;  // the domain tests sample (the formula holds on x > 0)
  template <typename A> MPX_HD static A fwd(A x, double, double) { return A(1) / x; }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V& y, double, double) { return -(g * y * y); }
};
template <> struct Formula<OpId::exp> {
  static constexpr int kArity = 1, kFlags = kSavesOutput;
  static constexpr const char* kNode = "ExpBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return exp(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V& y, double, double) { return g * y; }
};
template <> struct Formula<OpId::log> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "LogBackward";
  static constexpr double kLo = 0.2;  // the domain tests sample (the formula holds on x > 0)
  template <typename A> MPX_HD static A fwd(A x, double, double) { return log(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) { return g / x; }
};
template <> struct Formula<OpId::sin> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "SinBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return sin(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) { return g * cos(x); }
};
template <> struct Formula<OpId::cos> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "CosBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return cos(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) { return -(g * sin(x)); }
};
template <> struct Formula<OpId::erf> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "ErfBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return erf(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) {
    return g * exp(-(x * x)) * 1.1283791670955126;  // 2/sqrt(pi)
  }
};
template <> struct Formula<OpId::tanh> {
  static constexpr int kArity = 1, kFlags = kSavesOutput;
  static constexpr const char* kNode = "TanhBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return tanh(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V& y, double, double) { return g * (1.0 - y * y); }
};
template <> struct Formula<OpId::sigmoid> {
  static constexpr int kArity = 1, kFlags = kSavesOutput;
  static constexpr const char* kNode = "SigmoidBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return A(1) / (A(1) + exp(-x)); }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V& y, double, double) { return g * y * (1.0 - y); }
};
template <> struct Formula<OpId::relu> {
  static constexpr int kArity = 1, kFlags = kSavesOutput | kKeepsInts;
  static constexpr const char* kNode = "ReluBackward";
  /// The CPU stores x or zero by its bits (vectorizes for f16/bf16); the result is fwd's.
  template <typename A> MPX_HD static bool keep(A x) { return x > A(0); }
  template <typename A> MPX_HD static A fwd(A x, double, double) { return x > A(0) ? x : A(0); }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V& y, double, double) {
    return threshold_backward(g, y, 0.0);
  }
};
template <> struct Formula<OpId::leaky_relu> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "LeakyReluBackward";
  static constexpr double kP0 = 0.01;  // the slope tests sample
  // p0: the negative slope.
  template <typename A> MPX_HD static A fwd(A x, double p0, double) { return x > A(0) ? x : static_cast<A>(x * p0); }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double p0, double) {
    return where(x > 0.0, g, g * p0);
  }
};
template <> struct Formula<OpId::gelu> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "GeluBackward";
  // p0: 0 for the exact erf form (PyTorch's approximate="none"), 1 for the tanh form.
  template <typename A> MPX_HD static A fwd(A x, double p0, double) {
    if (p0 == 0.0) {
      A gauss;
      return x * normal_cdf(x, &gauss);
    }
    // 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u): one exp and one division instead of tanh's series,
    // exp and selects. Very negative x: e^-2u = inf and x / inf = -0, as 0.5 x (1 + tanh u).
    const A inner = static_cast<A>(0.79788456080286535588) * (x + static_cast<A>(0.044715) * x * x * x);
    return x / (A(1) + exp(A(-2) * inner));
  }
  // gelu'(x), in the compute type: Phi(x) + x phi(x), or PyTorch's GeluBackward for the tanh form.
  template <typename A> MPX_HD static A derivative(A x, double p0) {
    if (p0 == 0.0) {
      A gauss;
      const A cdf = normal_cdf(x, &gauss);
      return cdf + x * (gauss * static_cast<A>(0.3989422804014327));
    }
    // With s = 0.5 (1 + tanh u) = 1 / (1 + e^-2u) (as the forward): 0.5 (1 - tanh^2 u) = 2 s (1 - s).
    const A x2 = x * x;
    const A u = (x + x2 * x * static_cast<A>(0.044715)) * static_cast<A>(0.7978845608028654);
    const A s = A(1) / (A(1) + exp(A(-2) * u));
    return s + x * (A(2) * s * (A(1) - s)) * static_cast<A>(0.7978845608028654) *
                   (x2 * static_cast<A>(3.0 * 0.044715) + A(1));
  }
  // On Tensors one fused gelu_backward kernel (whose own backward gives second derivatives);
  // on numbers the scalar derivative.
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double p0, double) {
    if constexpr (std::is_arithmetic_v<V>) return g * derivative<V>(x, p0);
    else return gelu_backward(g, x, p0);
  }
};
template <> struct Formula<OpId::silu> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "SiluBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return x / (A(1) + exp(-x)); }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) {
    const V s = sigmoid(x);
    return g * (s * (1.0 + x * (1.0 - s)));
  }
};
template <> struct Formula<OpId::hardswish> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "HardswishBackward";
  // x * relu6(x + 3) / 6, with std::min/max's NaN behaviour (PyTorch's CPU kernel).
  template <typename A> MPX_HD static A fwd(A x, double, double) {
    const A r = x + A(3);
    const A lo = r < A(0) ? A(0) : r;
    return x * (A(6) < lo ? A(6) : lo) / A(6);
  }
  // PyTorch's hardswish_backward: 0 below -3, x / 3 + 1/2 up to 3, 1 above.
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) {
    return where(x < -3.0, zero_of(g), where(x <= 3.0, g * (x / 3.0 + 0.5), g));
  }
};
// ELU with PyTorch's input scale (CELU is elu(x, alpha, 1 / alpha)): x above 0, alpha (exp(x s) - 1) below.
template <> struct Formula<OpId::elu> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "EluBackward";
  static constexpr double kP0 = 1.3, kP1 = 0.8;  // tests sample alpha 1.3, input scale 0.8
  // p0: alpha, p1: input scale.
  template <typename A> MPX_HD static A fwd(A x, double p0, double p1) {
    return x > A(0) ? x : static_cast<A>(p0 * (exp(static_cast<A>(x * p1)) - A(1)));
  }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double p0, double p1) {
    return where(x > 0.0, g, g * (exp(x * p1) * (p0 * p1)));
  }
};
// SELU: scale * elu(x, alpha) with Klambauer et al.'s constants.
inline constexpr double kSeluAlpha = 1.6732632423543772848170429916717, kSeluScale = 1.0507009873554804934193349852946;
template <> struct Formula<OpId::selu> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "SeluBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) {
    return static_cast<A>(kSeluScale * (x > A(0) ? x : static_cast<A>(kSeluAlpha * (exp(x) - A(1)))));
  }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) {
    return where(x > 0.0, g * kSeluScale, g * (exp(x) * (kSeluScale * kSeluAlpha)));
  }
};
// Mish: x tanh(softplus(x)), softplus linear above 20 as PyTorch's.
template <> struct Formula<OpId::mish> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "MishBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) {
    const A sp = x > A(20) ? x : static_cast<A>(log1p(exp(static_cast<double>(x))));
    return x * tanh(sp);
  }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) {
    const V s = sigmoid(x);
    const V t = tanh(where(x > 20.0, x, log(1.0 + exp(x))));
    return g * (t + x * s * (1.0 - t * t));
  }
};
// relu6(x + 3) / 6.
template <> struct Formula<OpId::hardsigmoid> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "HardsigmoidBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) {
    const A r = (x + A(3)) / A(6);
    return r < A(0) ? A(0) : (r > A(1) ? A(1) : r);
  }
  // PyTorch's: 1/6 strictly inside (-3, 3), else 0.
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) {
    return where(x > -3.0, where(x < 3.0, g * (1.0 / 6.0), zero_of(g)), zero_of(g));
  }
};
// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), stable at both ends.
template <> struct Formula<OpId::logsigmoid> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "LogSigmoidBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) {
    const A m = x < A(0) ? x : A(0);
    return static_cast<A>(m - log1p(exp(-static_cast<double>(abs_of(x)))));
  }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) { return g * sigmoid(-x); }
};
// x / (1 + |x|).
template <> struct Formula<OpId::softsign> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "SoftsignBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return x / (A(1) + abs_of(x)); }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double, double) {
    const V d = 1.0 + x * sign(x);
    return g / (d * d);
  }
};
template <> struct Formula<OpId::softplus> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "SoftplusBackward";
  static constexpr double kP0 = 2.0, kP1 = 3.0;  // tests sample beta 2 and a threshold inside [-3, 3]
  // p0: beta, p1: threshold; x * beta in f64 for every dtype.
  template <typename A> MPX_HD static A fwd(A x, double p0, double p1) {
    return x * p0 > p1 ? x : static_cast<A>(log1p(exp(x * p0)) / p0);
  }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double p0, double p1) {
    const V bx = x * p0;
    return where(bx > p1, g, g * sigmoid(bx));
  }
};
template <> struct Formula<OpId::pow_scalar> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "PowBackward";
  static constexpr double kLo = 0.2, kP0 = 2.5;  // the domain and exponent tests sample
  // p0: the exponent.
  template <typename A> MPX_HD static A fwd(A x, double p0, double) {
    return static_cast<A>(p0 == 2.0 ? x * x : pow(x, static_cast<A>(p0)));
  }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double p0, double) {
    if (p0 == 0.0) return zeros_like(g);
    if (p0 == 1.0) return g;
    return g * pow(x, p0 - 1.0) * p0;
  }
};
template <> struct Formula<OpId::clamp> {
  static constexpr int kArity = 1, kFlags = kKeepsInts;
  static constexpr const char* kNode = "ClampBackward";
  static constexpr double kP0 = -1.0, kP1 = 1.0;  // the bounds tests sample
  // p0: min, p1: max (either may be infinite); NaN stays NaN.
  template <typename A> MPX_HD static A fwd(A x, double p0, double p1) {
    if (is_nan(x)) return x;
    const double lo = static_cast<double>(x) < p0 ? p0 : static_cast<double>(x);
    return from_double<A>(p1 < lo ? p1 : lo);
  }
  template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V&, double p0, double p1) {
    return where(x >= p0, where(x <= p1, g, zero_of(g)), zero_of(g));
  }
};

template <> struct Formula<OpId::affine> {
  static constexpr int kArity = 1, kFlags = kKeepsInts;
  static constexpr const char* kNode = "AffineBackward";
  static constexpr double kP0 = 2.0, kP1 = 3.0;  // integral and positive: integer (and uint8) tensors sample it too
  // p0: scale, p1: shift, both in the compute type (PyTorch's scalar in opmath): x + v is
  // affine(x, 1, v) and x * v is affine(x, v, -0.0), each exact before its one rounding.
  template <typename A> MPX_HD static A fwd(A x, double p0, double p1) {
    return static_cast<A>(x * from_double<A>(p0) + from_double<A>(p1));
  }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V&, double p0, double) { return g * p0; }
};

// ---- binary: fwd(a, b, alpha) -> A; bwd(g, a, b, alpha) -> {dL/da, dL/db} before broadcasting is undone ----
// kReadsInputs false: backward needs only the shapes, so the inputs are not saved.
template <> struct Formula<OpId::add> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = false;
  static constexpr const char* kNode = "AddBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double alpha) { return static_cast<A>(a + from_double<A>(alpha) * b); }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V&, const V&, double alpha) {
    return {g, alpha == 1.0 ? g : g * alpha};
  }
};
template <> struct Formula<OpId::sub> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = false;
  static constexpr const char* kNode = "SubBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double alpha) { return static_cast<A>(a - from_double<A>(alpha) * b); }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V&, const V&, double alpha) { return {g, g * -alpha}; }
};
template <> struct Formula<OpId::mul> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "MulBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double) { return static_cast<A>(a * b); }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) { return {g * b, g * a}; }
};
template <> struct Formula<OpId::div> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "DivBackward";
  static constexpr double kLo = 0.2;  // the domain tests sample (away from b = 0)
  template <typename A> MPX_HD static A fwd(A a, A b, double) { return static_cast<A>(a / b); }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) {
    const V ga = g / b;
    return {ga, -(ga * a / b)};
  }
};
template <> struct Formula<OpId::pow> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "PowBackward";
  static constexpr double kLo = 0.2;  // the domain tests sample (a > 0)
  template <typename A> MPX_HD static A fwd(A a, A b, double) { return static_cast<A>(pow(a, b)); }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) {
    return {g * b * pow(a, b - 1.0), g * pow(a, b) * log(a)};
  }
};
template <> struct Formula<OpId::maximum> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "MaximumBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double) { return (is_nan(a) || a > b) ? a : b; }
  // Ties split the gradient evenly, as PyTorch does.
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) {
    const V tie = where(a == b, g * 0.5, zero_of(g));
    return {where(a > b, g, tie), where(a < b, g, tie)};
  }
};
template <> struct Formula<OpId::minimum> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "MinimumBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double) { return (is_nan(a) || a < b) ? a : b; }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) {
    const V tie = where(a == b, g * 0.5, zero_of(g));
    return {where(a < b, g, tie), where(a > b, g, tie)};
  }
};
/// grad where x > threshold (alpha), else 0: relu's backward (its own backward is in ops/elementwise.cpp).
template <> struct Formula<OpId::threshold_backward> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "ThresholdBackwardBackward";
  template <typename A> MPX_HD static bool keep(A, A x, double t) { return static_cast<double>(x) > t; }
  template <typename A> MPX_HD static A fwd(A g, A x, double t) { return static_cast<double>(x) > t ? g : A(0); }
};
template <> struct Formula<OpId::gelu_backward> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "GeluBackwardBackward";
  // alpha: gelu's form (0 erf, else tanh).
  template <typename A> MPX_HD static A fwd(A g, A x, double alpha) {
    return g * Formula<OpId::gelu>::derivative<A>(x, alpha == 0.0 ? 0.0 : 1.0);
  }
};
#define MPX_COMPARE_FORMULA(NAME, OP)                                             \
  template <> struct Formula<OpId::NAME> {                                        \
    static constexpr int kArity = 2;                                              \
    static constexpr bool kCompare = true, kReadsInputs = false;                  \
    template <typename A> MPX_HD static bool fwd(A a, A b, double) { return a OP b; } \
  };
MPX_COMPARE_FORMULA(eq, ==)
MPX_COMPARE_FORMULA(ne, !=)
MPX_COMPARE_FORMULA(lt, <)
MPX_COMPARE_FORMULA(le, <=)
MPX_COMPARE_FORMULA(gt, >)
MPX_COMPARE_FORMULA(ge, >=)
#undef MPX_COMPARE_FORMULA
// Logical ops: a nonzero operand (NaN included) is true.
#define MPX_LOGICAL_FORMULA(NAME, EXPR)                                          \
  template <> struct Formula<OpId::NAME> {                                       \
    static constexpr int kArity = 2;                                             \
    static constexpr bool kCompare = true, kReadsInputs = false;                 \
    template <typename A> MPX_HD static bool fwd(A a, A b, double) {             \
      const bool x = a != A(0), y = b != A(0);                                   \
      return EXPR;                                                               \
    }                                                                            \
  };
MPX_LOGICAL_FORMULA(logical_and, x && y)
MPX_LOGICAL_FORMULA(logical_or, x || y)
MPX_LOGICAL_FORMULA(logical_xor, x != y)
#undef MPX_LOGICAL_FORMULA

}  // namespace mpx::formulas

#include "ops/formulas_math.h"

namespace mpx::formulas {

/// Whether op is a binary comparison (its result is bool).
MPX_HD constexpr bool is_compare(OpId op) {
  switch (op) {
#define MPX_CASE(name) case OpId::name: return Formula<OpId::name>::kCompare;
    MPX_BINARY_OPS(MPX_CASE)
#undef MPX_CASE
    default: return false;
  }
}

// ---- cross-entropy of a row of logits x against class t, from the row's log-sum-exp ----
// (ops/loss.cpp's fused path and its CPU and CUDA kernels.) eps is the label smoothing, inv_c 1 / C.

/// -(1 - eps) log p_t - eps / C sum_c log p_c, with log p_c = x_c - lse and sx = sum_c x_c. Without smoothing sx
/// is not read: a row with -inf logits (a masked vocabulary) has a finite loss, and sx = -inf times 0 would be NaN.
template <typename A> MPX_HD A cross_entropy_row_loss(A lse, A xt, A sx, A eps, A inv_c) {
  if (eps == A(0)) return lse - xt;
  return (A(1) - eps) * (lse - xt) + eps * (lse - sx * inv_c);
}
/// g times the loss's derivative in x_c: g (p_c - (1 - eps) [c = t] - eps / C), p_c = exp(x_c - lse). With V =
/// Tensor (p = softmax, onehot a tensor) it is the differentiable form create_graph uses.
template <typename V, typename O, typename S>
MPX_HD V cross_entropy_row_grad(const V& g, const V& p, const O& onehot, S eps, S inv_c) {
  return g * (p - onehot * (S(1) - eps) - eps * inv_c);
}

}  // namespace mpx::formulas
