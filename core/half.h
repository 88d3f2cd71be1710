// Half (IEEE binary16) and BFloat16 storage types with round-to-nearest-even conversions.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

namespace mpx {

namespace detail {
inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
/// c ? a : b as a mask: GCC if-converts `?:` in a short loop but not always in a long fused one
/// (an optimizer step that also writes the f16 model copy), where it became a branch per element.
inline uint32_t select_bits(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}

/// f32 -> binary16, round to nearest even; overflow past 65504 (after rounding) gives inf,
/// results below the normal range become subnormals, NaN stays a (quiet) NaN with its sign.
/// Branch-free (every case is computed, then selected) so kernel loops over halves vectorize.
inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal: rebias the exponent (-112 << 23) and round half to even on the 13 dropped bits.
  const uint32_t normal = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13;
  // Below 2^-14: adding 0.5f makes the FPU's own round-to-nearest-even do the subnormal
  // rounding (anything up to half the smallest subnormal rounds to zero).
  const uint32_t subnormal = f32_bits(bits_f32(ax) + 0.5f) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  uint32_t r = select_bits(ax < 0x38800000u, subnormal, normal);
  r = select_bits(ax >= 0x477ff000u, 0x7c00u, r);  // rounds past 65504, or inf
  r = select_bits(ax > 0x7f800000u, nan, r);
  return static_cast<uint16_t>(sign | r);
}

/// binary16 -> f32, exact (NaN payloads kept); branch-free like f32_to_f16_bits.
inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  // Normal: rebias the exponent by (127 - 15) << 23; inf/NaN (exponent 31) by twice that.
  const uint32_t normal = (em << 13) + (0x38000000u << (em >= 0x7c00u));
  const uint32_t subnormal = f32_bits(static_cast<float>(static_cast<int32_t>(em)) * 5.9604644775390625e-08f);
  // A mask rather than ?: so GCC keeps the loop free of control flow.
  const uint32_t is_sub = 0u - static_cast<uint32_t>(em < 0x400u);
  return bits_f32(sign | (subnormal & is_sub) | (normal & ~is_sub));
}

/// f32 -> bfloat16 with round to nearest even; NaN stays NaN (never rounds to inf).
/// Branch-free like f32_to_f16_bits, so loops storing bfloat16 vectorize.
inline uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>(select_bits((x & 0x7fffffffu) > 0x7f800000u, nan, rounded));
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
