// Stochastic rounding of f32 values to bf16/f16 bits and its Philox key layout, written once for the CPU and CUDA optimizer steps.
//
// Rounding x to the low-precision grid: with lo the grid value below |x| (towards zero) and hi
// the next one, |x| becomes hi with probability (|x| - lo) / (hi - lo) and lo otherwise, so the
// stored value equals x in expectation. It is done as "add uniform random bits below the kept
// mantissa, then truncate": the random word's top k bits (k = the bits dropped, at most 32)
// are added to x's magnitude in units of the dropped bits' lowest place.
// - bf16 keeps f32's exponent, so every finite value (subnormals too) drops the low 16 bits.
// - f16: normal results drop 13 bits; below 2^-14 the grid is f16's subnormal spacing 2^-24,
//   and the fraction of it is taken to 32 bits (values below 2^-56 never round up).
// - Overflow: a value between the largest finite value and the next binade's start rounds up
//   to inf with its distance ratio (inf standing where 2^128, or 65536 for f16, would be);
//   f16 values from 65536 up are inf, as round-to-nearest makes them.
// - inf stays inf and NaN stays a quiet NaN with its sign, as the round-to-nearest conversions
//   of core/half.h give. Zeros (either sign) and values already on the grid are unchanged.
// Plain C++17 so the CUDA kernel files can include it.
#pragma once
#include <stdint.h>
#include <string.h>

#include "core/hd.h"
#include "core/philox.h"

namespace mpx::sround {

/// The f32's bits.
MPX_HD inline uint32_t f32_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
#endif
}

/// x rounded stochastically to bf16 bits with the random word r.
MPX_HD inline uint16_t bf16_bits(float x, uint32_t r) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN, quieted
  // The carry out of the dropped bits rounds the magnitude up; it never reaches the sign bit.
  return static_cast<uint16_t>((u + (r >> 16)) >> 16);
}

/// x rounded stochastically to IEEE binary16 bits with the random word r.
MPX_HD inline uint16_t f16_bits(float x, uint32_t r) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u, ax = u & 0x7fffffffu;
  uint32_t h;
  if (ax > 0x7f800000u) {
    h = 0x7e00u | ((ax >> 13) & 0x3ffu);  // NaN, quieted
  } else if (ax >= 0x47800000u) {
    h = 0x7c00u;  // 65536 and up (and inf): past the grid
  } else if (ax >= 0x38800000u) {
    // f16 normal: rebias the exponent by 112 and drop 13 bits; a carry into the exponent is the
    // next binade (from 65504, inf).
    h = (ax - 0x38000000u + (r >> 19)) >> 13;
  } else {
    // f16 subnormal: |x| in units of 2^-24 as a 32.32 fixed-point number (exact: the mantissa
    // has 24 bits and is shifted right by at least 14).
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | (e != 0 ? 0x800000u : 0u);
    const uint32_t shift = 126u - (e != 0 ? e : 1u);
    const uint64_t fixed = (static_cast<uint64_t>(m) << 32) >> (shift < 63u ? shift : 63u);
    h = static_cast<uint32_t>((fixed + r) >> 32);
  }
  return static_cast<uint16_t>(sign | h);
}

/// The random words of element `element` of parameter `id` in step `step` under `seed`: Philox
/// with key = seed and counter = (element, step, id). Word 0 rounds the parameter, words 1-3
/// its state buffers in order (SGD's momentum; Adam's exp_avg, exp_avg_sq, max_exp_avg_sq), so
/// every rounded value of a step has its own draw, and a step taken again after a resume draws
/// the same words. Steps past 2^32 wrap.
MPX_HD inline random::Philox4 draw(uint64_t seed, uint32_t id, uint64_t step, uint64_t element) {
  return random::philox4x32_10(static_cast<uint32_t>(element), static_cast<uint32_t>(element >> 32),
                               static_cast<uint32_t>(step), id, static_cast<uint32_t>(seed),
                               static_cast<uint32_t>(seed >> 32));
}

}  // namespace mpx::sround
