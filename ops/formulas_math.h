// Formulas of the rounding, logarithmic, trigonometric and hyperbolic unary ops and of the binary atan2, hypot,
// logaddexp, fmod, remainder and floor_divide (the rest of the elementwise family is in ops/formulas.h, which
// includes this file after its flags and Grads).
#pragma once
#include <type_traits>

namespace mpx::formulas {

// ---- rounding: integers pass through; the gradient is zero almost everywhere (PyTorch's) ----
#define MPX_ROUNDING_FORMULA(NAME, NODE, FN)                                                        \
  template <> struct Formula<OpId::NAME> {                                                          \
    static constexpr int kArity = 1, kFlags = kKeepsInts;                                           \
    static constexpr const char* kNode = NODE;                                                      \
    template <typename A> MPX_HD static A fwd(A x, double, double) {                                \
      if constexpr (std::is_floating_point<A>::value) return FN(x);                                 \
      else return x;                                                                                \
    }                                                                                               \
    template <typename V> MPX_HD static V bwd(const V& g, const V&, const V&, double, double) { return g * 0.0; } \
  };
MPX_ROUNDING_FORMULA(floor, "FloorBackward", floor)
MPX_ROUNDING_FORMULA(ceil, "CeilBackward", ceil)
MPX_ROUNDING_FORMULA(round, "RoundBackward", round_even)
MPX_ROUNDING_FORMULA(trunc, "TruncBackward", trunc)
#undef MPX_ROUNDING_FORMULA
template <> struct Formula<OpId::frac> {
  static constexpr int kArity = 1, kFlags = 0;
  static constexpr const char* kNode = "FracBackward";
  template <typename A> MPX_HD static A fwd(A x, double, double) { return x - trunc(x); }
  template <typename V> MPX_HD static V bwd(const V& g, const V&, const V&, double, double) { return g; }
};

// ---- one-function formulas: fwd calls FN; the derivative is written in V (Tensor or double) ----
#define MPX_MATH_FORMULA(NAME, NODE, FLAGS, FN, LO, HI, GRAD)                                         \
  template <> struct Formula<OpId::NAME> {                                                          \
    static constexpr int kArity = 1, kFlags = FLAGS;                                                \
    static constexpr const char* kNode = NODE;                                                      \
    static constexpr double kLo = LO, kHi = HI; /* the domain tests sample */                       \
    template <typename A> MPX_HD static A fwd(A x, double, double) { return FN(x); }                \
    template <typename V> MPX_HD static V bwd(const V& g, const V& x, const V& y, double, double) { \
      (void)x;                                                                                      \
      (void)y;                                                                                      \
      return GRAD;                                                                                  \
    }                                                                                               \
  };
MPX_MATH_FORMULA(log1p, "Log1pBackward", 0, log1p, -0.8, 3.0, g / (x + 1.0))
MPX_MATH_FORMULA(expm1, "Expm1Backward", kSavesOutput, expm1, -3.0, 3.0, g * (y + 1.0))
MPX_MATH_FORMULA(log2, "Log2Backward", 0, log2, 0.2, 3.0, g / (x * 0.6931471805599453))
MPX_MATH_FORMULA(log10, "Log10Backward", 0, log10, 0.2, 3.0, g / (x * 2.302585092994046))
MPX_MATH_FORMULA(exp2, "Exp2Backward", kSavesOutput, exp2, -3.0, 3.0, g * y * 0.6931471805599453)
MPX_MATH_FORMULA(tan, "TanBackward", kSavesOutput, tan, -1.3, 1.3, g * (y * y + 1.0))
MPX_MATH_FORMULA(atan, "AtanBackward", 0, atan, -3.0, 3.0, g / (x * x + 1.0))
MPX_MATH_FORMULA(asin, "AsinBackward", 0, asin, -0.9, 0.9, g / sqrt(1.0 - x * x))
MPX_MATH_FORMULA(acos, "AcosBackward", 0, acos, -0.9, 0.9, -(g / sqrt(1.0 - x * x)))
MPX_MATH_FORMULA(sinh, "SinhBackward", 0, sinh, -3.0, 3.0, g * cosh(x))
MPX_MATH_FORMULA(cosh, "CoshBackward", 0, cosh, -3.0, 3.0, g * sinh(x))
MPX_MATH_FORMULA(asinh, "AsinhBackward", 0, asinh, -3.0, 3.0, g / sqrt(x * x + 1.0))
MPX_MATH_FORMULA(acosh, "AcoshBackward", 0, acosh, 1.2, 4.0, g / sqrt(x * x - 1.0))
MPX_MATH_FORMULA(atanh, "AtanhBackward", 0, atanh, -0.9, 0.9, g / (1.0 - x * x))
MPX_MATH_FORMULA(erfc, "ErfcBackward", 0, erfc, -3.0, 3.0, g * exp(-(x * x)) * -1.1283791670955126)  // -2/sqrt(pi)
MPX_MATH_FORMULA(erfinv, "ErfinvBackward", kSavesOutput, erfinv, -0.9, 0.9, g * exp(y * y) * 0.886226925452758)
#undef MPX_MATH_FORMULA

// ---- binary ----
template <> struct Formula<OpId::atan2> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "Atan2Backward";
  template <typename A> MPX_HD static A fwd(A a, A b, double) { return atan2(a, b); }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) {
    const V d = a * a + b * b;
    return {g * b / d, -(g * a / d)};
  }
};
template <> struct Formula<OpId::hypot> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "HypotBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double) { return hypot(a, b); }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) {
    const V h = hypot(a, b);
    return {g * a / h, g * b / h};
  }
};
// log(e^a + e^b) as max + log1p(e^-|a - b|); equal infinities give themselves (their difference would be NaN).
template <> struct Formula<OpId::logaddexp> {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kReadsInputs = true;
  static constexpr const char* kNode = "LogaddexpBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double) {
    if (a == b && (a - a) != (a - a)) return a;  // +-inf twice
    const A m = a > b ? a : b;
    return m + log1p(exp(-abs_of(a - b)));
  }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) {
    return {g * sigmoid(a - b), g * sigmoid(b - a)};
  }
};

// Division-like ops: the sign of the result follows a (fmod, C's) or b (remainder, Python's); floor_divide rounds
// the quotient down as PyTorch does. Integer divisors of 0 give 0 here (the public functions refuse them first,
// so no kernel traps); -1 never reaches the division, whose most negative quotient would trap.
// kDivides: tests keep the divisor samples nonzero; the domain [-2.9, 3.1) puts no quotient of the derivative
// test's grid on an integer, where these functions jump.
template <typename A> MPX_HD A int_mod(A a, A b) { return (b == A(0) || b == A(-1)) ? A(0) : static_cast<A>(a % b); }
struct DivisionLike {
  static constexpr int kArity = 2;
  static constexpr bool kCompare = false, kDivides = true;
  static constexpr double kLo = -2.9, kHi = 3.1;
};
template <> struct Formula<OpId::fmod> : DivisionLike {
  static constexpr bool kReadsInputs = true;
  static constexpr const char* kNode = "FmodBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double) {
    if constexpr (std::is_floating_point<A>::value) return fmod(a, b);
    else return int_mod(a, b);
  }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) {
    return {g, -(g * trunc(a / b))};
  }
};
template <> struct Formula<OpId::remainder> : DivisionLike {
  static constexpr bool kReadsInputs = true;
  static constexpr const char* kNode = "RemainderBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double) {
    const A r = Formula<OpId::fmod>::fwd(a, b, 0.0);
    return (r != A(0) && ((r < A(0)) != (b < A(0)))) ? static_cast<A>(r + b) : r;
  }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V& a, const V& b, double) {
    return {g, -(g * floor(a / b))};
  }
};
template <> struct Formula<OpId::floor_divide> : DivisionLike {
  static constexpr bool kReadsInputs = false;
  static constexpr const char* kNode = "FloorDivideBackward";
  template <typename A> MPX_HD static A fwd(A a, A b, double) {
    if constexpr (std::is_floating_point<A>::value) {
      if (b == A(0)) return a / b;
      const A mod = fmod(a, b);
      A div = (a - mod) / b;
      if (mod != A(0) && ((b < A(0)) != (mod < A(0)))) div -= A(1);
      if (div == A(0)) return (a / b < A(0)) ? -A(0) : A(0);
      A fl = floor(div);
      if (div - fl > A(0.5)) fl += A(1);
      return fl;
    } else {
      using U = std::make_unsigned_t<A>;
      if (b == A(0)) return A(0);
      if (b == A(-1)) return static_cast<A>(U(0) - static_cast<U>(a));
      const A q = static_cast<A>(a / b);
      return (a % b != A(0) && ((a < A(0)) != (b < A(0)))) ? static_cast<A>(q - 1) : q;
    }
  }
  template <typename V> MPX_HD static Grads<V> bwd(const V& g, const V&, const V&, double) { return {g * 0.0, g * 0.0}; }
};

}  // namespace mpx::formulas
