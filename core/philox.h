// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): a counter-based generator written once for host and device.
#pragma once
#include <stdint.h>

#include "core/hd.h"

namespace mpx::random {

/// Four 32-bit words of one Philox draw.
struct Philox4 {
  uint32_t v[4];
};

/// The 10-round Philox4x32 bijection of `counter` under `key`, as Random123's philox4x32_10 and
/// cuRAND's Philox4_32_10: every (key, counter) pair gives independent-looking words, so a
/// draw needs no state, and a CUDA kernel computes the same words as the CPU.
MPX_HD inline Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;  // the Weyl sequence that varies the key between rounds
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

}  // namespace mpx::random
