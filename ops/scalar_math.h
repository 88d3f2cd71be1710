// Scalar math for the formulas (ops/formulas.h): the f32 or f64 C function on the host and the device, and the
// host's branch-free f32 exp, tanh and erf that let the CPU loops vectorize. Plain C++17 for the CUDA kernel files.
#pragma once
#include <math.h>
#include <stdint.h>

#include "core/hd.h"

namespace mpx::formulas {

// ---- scalar math: the f32 or f64 C function, on the host and the device ----
#ifdef __CUDA_ARCH__
MPX_HD inline float exp(float x) { return ::expf(x); }
#else
// The host's f32 exp and tanh are written out branch-free, so the CPU loops that call them
// vectorize (libm's expf/tanhf are scalar calls without -ffast-math; tanhf alone took 20 ns an
// element in GPT-2's GELU). Both are within 3 ulp of libm over the whole range, keep inf and NaN,
// and return subnormal results of exp as libm does.
inline float exp2i_f32(int32_t n) {  // 2^n for n in [-126, 127], exactly
  const int32_t bits = (n + 127) << 23;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}
inline float exp(float x) {
  // Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, and Cephes's degree-6 polynomial for e^r.
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  const float t = xc * 1.44269504088896341f + 12582912.0f;  // round to nearest by the 2^23 + 2^22 trick
  const float n = t - 12582912.0f;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n in two factors, so results near overflow (inf) and in the subnormal range both come out right.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni / 2;
  const float y = p * exp2i_f32(n1) * exp2i_f32(ni - n1);
  return x != x ? x : y;
}
#endif
MPX_HD inline double exp(double x) { return ::exp(x); }
MPX_HD inline float log(float x) { return ::logf(x); }
MPX_HD inline double log(double x) { return ::log(x); }
MPX_HD inline float sqrt(float x) { return ::sqrtf(x); }
MPX_HD inline double sqrt(double x) { return ::sqrt(x); }
MPX_HD inline float sin(float x) { return ::sinf(x); }
MPX_HD inline double sin(double x) { return ::sin(x); }
MPX_HD inline float cos(float x) { return ::cosf(x); }
MPX_HD inline double cos(double x) { return ::cos(x); }
#ifdef __CUDA_ARCH__
MPX_HD inline float erf(float x) { return ::erff(x); }
#else
// e^x for x in [-87, 0] (erf's tail): one 2^n factor, no overflow or subnormal results to keep, and exp's polynomial
// in Estrin's form. The erf loop is latency-bound (a vector's chain of dependent FMAs, longer than the out-of-order
// window hides); the shorter chain took GELU's forward from 4.1 to 3.1 ms per 1.6 M elements on a Zen 3 core, with
// the same largest error against f64's erf (1.8e-7 relative).
inline float exp_nonpositive(float x) {
  const float xc = x < -87.0f ? -87.0f : x;
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f, r2 = r * r, r4 = r2 * r2;
  const float p = (5.0000001201e-1f + r * 1.6666665459e-1f) + r2 * (4.1665795894e-2f + r * 8.3334519073e-3f) +
                  r4 * (1.3981999507e-3f + r * 1.9875691500e-4f);
  return (p * r2 + (r + 1.0f)) * exp2i_f32(static_cast<int32_t>(n));
}
// Branch-free like exp and tanh above, so the exact GELU and its backward vectorize (libm's erff was 17 ns an
// element in a Transformer's GELU backward). |x| < 1: x P(x^2); beyond, 1 - e^{Q(|x| - 1)} with Q fitted to
// log erfc on [1, 4] (erfc(4) is below half an ulp of 1). Within 3 ulp of libm over the whole range.
inline float erf(float x) {
  const float a = x < 0.0f ? -x : x, s = x * x;
  float p = 7.897586735e-05f;
  p = p * s - 8.024151799e-04f;
  p = p * s + 5.190028364e-03f;
  p = p * s - 2.685479350e-02f;
  p = p * s + 1.128361200e-01f;
  p = p * s - 3.761262879e-01f;
  p = p * s + 1.128379166e+00f;
  const float t = (a < 4.0f ? a : 4.0f) - 1.0f;
  float q = 1.614061610e-06f;
  q = q * t - 3.267812970e-05f;
  q = q * t + 3.188289060e-04f;
  q = q * t - 2.050620737e-03f;
  q = q * t + 1.007246125e-02f;
  q = q * t - 4.157149267e-02f;
  q = q * t - 8.431064146e-01f;
  q = q * t - 2.638967445e+00f;
  q = q * t - 1.849605513e+00f;
  const float big = 1.0f - exp_nonpositive(q);  // q <= -1.85 wherever big is used (|x| >= 1)
  const float r = a < 1.0f ? x * p : (x < 0.0f ? -big : big);
  return x != x ? x : r;
}
#endif
MPX_HD inline double erf(double x) { return ::erf(x); }

// Phi(x), the standard normal distribution function, with e^{-x^2/2} (its density but for 1/sqrt(2 pi)) beside it:
// GELU's exact form is x Phi(x) and its derivative Phi(x) + x phi(x), so one exp serves both.
#ifdef __CUDA_ARCH__
MPX_HD inline float normal_cdf(float x, float* gauss) {
  *gauss = ::expf(-0.5f * x * x);
  return 0.5f * ::erfcf(-x * 0.70710678118654752440f);
}
#else
// erfc(a), a = |x| / sqrt(2), in Abramowitz and Stegun's form t P(t) e^{-a^2}, t = 1 / (1 + 0.39 a), refitted with
// a degree-6 P (within 1e-8 of erfc in f64 arithmetic; their 7.1.26, PyTorch's CPU GELU, is within 1.5e-7). Half
// the operations of 0.5 x (1 + erf(x / sqrt 2)) with erf above, no less accurate (GELU within 3.9e-7 of f64's
// against 4.5e-7, its derivative within 2.2e-7), and below zero Phi = erfc(a) / 2 keeps its digits where 1 + erf
// cancelled (GELU(-12) relative error 6e-3, was 1).
inline float normal_cdf(float x, float* gauss) {
  const float a = (x < 0.0f ? -x : x) * 0.70710678118654752440f, a2 = a * a;
  const float t = 1.0f / (0.39f * a + 1.0f);
  float p = -2.275375426e-01f;
  p = p * t + 8.866661191e-01f;
  p = p * t - 6.354030967e-01f;
  p = p * t + 6.495616436e-01f;
  p = p * t + 9.138751030e-02f;
  p = p * t + 2.353253663e-01f;
  // 0 past f32's range (not exp's clamped least value), so x e^{-x^2/2} is 0 there and NaN at infinity, as PyTorch.
  const float e = a2 < 87.0f ? exp_nonpositive(-a2) : 0.0f;
  *gauss = e;
  const float h = 0.5f * (p * t) * e;
  return x < 0.0f ? h : 1.0f - h;
}
#endif
MPX_HD inline double normal_cdf(double x, double* gauss) {
  *gauss = ::exp(-0.5 * x * x);
  return 0.5 * ::erfc(-x * 0.70710678118654752440);
}
#ifdef __CUDA_ARCH__
MPX_HD inline float tanh(float x) { return ::tanhf(x); }
#else
inline float tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  // Small |x|: the odd Taylor series to x^11 (relative error below 2e-9 at 0.3); elsewhere
  // 1 - 2 / (e^2|x| + 1), which rounds to 1 (and stays 1 at inf) for large |x|.
  const float x2 = x * x;
  const float small =
      x * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * (-0.0539682540f + x2 * (0.0218694885f +
                                                                                       x2 * -0.00886323552f)))));
  const float big = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
  const float r = a < 0.3f ? small : (x < 0.0f ? -big : big);
  return x != x ? x : r;
}
#endif
MPX_HD inline double tanh(double x) { return ::tanh(x); }
MPX_HD inline double log1p(double x) { return ::log1p(x); }
MPX_HD inline float pow(float x, float y) { return ::powf(x, y); }
MPX_HD inline double pow(double x, double y) { return ::pow(x, y); }

// ---- rounding, logarithms, trigonometric and hyperbolic functions, and division-like binary functions ----
#define MPX_SCALAR_FN(NAME, CF, CD) \
  MPX_HD inline float NAME(float x) { return ::CF(x); } \
  MPX_HD inline double NAME(double x) { return ::CD(x); }
MPX_SCALAR_FN(floor, floorf, floor)
MPX_SCALAR_FN(ceil, ceilf, ceil)
MPX_SCALAR_FN(trunc, truncf, trunc)
MPX_SCALAR_FN(round_even, rintf, rint)  // halves to even, as PyTorch's round (the default rounding mode)
MPX_SCALAR_FN(expm1, expm1f, expm1)
MPX_SCALAR_FN(log2, log2f, log2)
MPX_SCALAR_FN(log10, log10f, log10)
MPX_SCALAR_FN(exp2, exp2f, exp2)
MPX_SCALAR_FN(tan, tanf, tan)
MPX_SCALAR_FN(atan, atanf, atan)
MPX_SCALAR_FN(asin, asinf, asin)
MPX_SCALAR_FN(acos, acosf, acos)
MPX_SCALAR_FN(sinh, sinhf, sinh)
MPX_SCALAR_FN(cosh, coshf, cosh)
MPX_SCALAR_FN(asinh, asinhf, asinh)
MPX_SCALAR_FN(acosh, acoshf, acosh)
MPX_SCALAR_FN(atanh, atanhf, atanh)
MPX_SCALAR_FN(erfc, erfcf, erfc)
#undef MPX_SCALAR_FN
MPX_HD inline float log1p(float x) { return ::log1pf(x); }
MPX_HD inline float atan2(float y, float x) { return ::atan2f(y, x); }
MPX_HD inline double atan2(double y, double x) { return ::atan2(y, x); }
MPX_HD inline float hypot(float x, float y) { return ::hypotf(x, y); }
MPX_HD inline double hypot(double x, double y) { return ::hypot(x, y); }
MPX_HD inline float fmod(float x, float y) { return ::fmodf(x, y); }
MPX_HD inline double fmod(double x, double y) { return ::fmod(x, y); }

#ifdef __CUDA_ARCH__
MPX_HD inline float erfinv(float x) { return ::erfinvf(x); }
MPX_HD inline double erfinv(double x) { return ::erfinv(x); }
#else
// The C library has no erfinv: Giles's single-precision approximation ("Approximating the erfinv function", 2010)
// refined by two Newton steps on erf in f64 (on erfc's tail near +-1, where 1 - |y| is exact and erf would cancel).
inline double erfinv(double y) {
  if (!(y > -1.0 && y < 1.0)) return y == 1.0 ? HUGE_VAL : y == -1.0 ? -HUGE_VAL : NAN;
  double w = -::log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = ::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * y;
  for (int i = 0; i < 2; ++i) {
    const double r = y > 0.5 ? (1.0 - y) - ::erfc(x) : y < -0.5 ? ::erfc(-x) - (1.0 + y) : ::erf(x) - y;
    x -= r / (1.1283791670955126 * ::exp(-x * x));
  }
  return x;
}
inline float erfinv(float x) { return static_cast<float>(erfinv(static_cast<double>(x))); }
#endif

}  // namespace mpx::formulas
