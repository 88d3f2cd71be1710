// Half (IEEE binary16) and BFloat16 storage types with round-to-nearest-even conversions.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

namespace mpx {

namespace detail {
inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

/// f32 -> binary16, round to nearest even; overflow past 65504 (after rounding) gives inf,
/// results below the normal range become subnormals, NaN stays a (quiet) NaN with its sign.
inline uint16_t f32_to_f16_bits(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (ax < 0x38800000u) {  // below 2^-14: subnormal half or zero
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
    // Add the value to 0.5 (as float) so the FPU's own RNE does the subnormal rounding.
    float r = bits_f32(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (f32_bits(r) - 0x3f000000u));
  }
  uint32_t mant_odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round half to even
  return static_cast<uint16_t>(sign | (ax >> 13));
}

inline float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;  // mant * 2^-24, exact
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// f32 -> bfloat16 with round to nearest even; NaN stays NaN (never rounds to inf).
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
inline float bf16_bits_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }
}  // namespace detail

/// IEEE 754 binary16. Arithmetic happens in float; storage is 16 bits.
struct Half {
  uint16_t x = 0;
  Half() = default;
  Half(float f) : x(detail::f32_to_f16_bits(f)) {}  // NOLINT: implicit like LibTorch's Half
  static Half from_bits(uint16_t b) { Half h; h.x = b; return h; }
  operator float() const { return detail::f16_bits_to_f32(x); }  // NOLINT
};

/// bfloat16: the top 16 bits of an f32, rounded to nearest even.
struct BFloat16 {
  uint16_t x = 0;
  BFloat16() = default;
  BFloat16(float f) : x(detail::f32_to_bf16_bits(f)) {}  // NOLINT
  static BFloat16 from_bits(uint16_t b) { BFloat16 h; h.x = b; return h; }
  operator float() const { return detail::bf16_bits_to_f32(x); }  // NOLINT
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace mpx
