// Division of 32-bit indices by a divisor fixed before a kernel launch, as a multiply and a shift.
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace mpx::cuda {

/// Divides numerators in [0, 2^31) by a divisor in [1, 2^31) chosen on the host. Integer
/// division costs the GPU dozens of instructions, and index-bound kernels (pooling, strided
/// copies) do several per element; a high multiply, an add and a shift give the same quotient.
///
/// With s the smallest power with 2^s >= d and m = floor(2^32 (2^s - d) / d) + 1,
/// n / d = (mulhi(n, m) + n) >> s for every n < 2^31 (Granlund and Montgomery, 1994); the sum
/// fits 32 bits because both terms are below 2^31.
struct FastDivmod {
  uint32_t divisor = 1, multiplier = 1, shift = 0;

  FastDivmod() = default;
  /// d must be in [1, 2^31); the host checks before it launches.
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }

  MPX_HD uint32_t div(uint32_t n) const { return (mulhi(n, multiplier) + n) >> shift; }
  MPX_HD uint32_t mod(uint32_t n) const { return n - div(n) * divisor; }
  /// n / d into q and n % d into r.
  MPX_HD void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }

 private:
  MPX_HD static uint32_t mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
  }
};

}  // namespace mpx::cuda
