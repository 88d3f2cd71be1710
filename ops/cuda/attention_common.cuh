// What the CUDA attention kernels share: the dropout draw of one attention weight, the CPU kernel's expression.
#pragma once
#include <cstdint>

#include "core/random.h"
#include "ops/cuda/attention_launch.h"

namespace mpx::cuda {

/// The dropout multiplier of weight (b, h, i, j): 0 or 1 / (1 - p), drawn so CPU and CUDA masks agree.
template <typename A>
__device__ __forceinline__ A sdpa_dropout_factor(const SdpaGeom& g, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (g.dropout_p <= 0.0) return A(1);
  const uint64_t pos = g.offset + static_cast<uint64_t>(((b * g.H + h) * g.L + i) * g.S + j);
  const A keep = g.dropout_p >= 1.0 ? A(0) : static_cast<A>(1.0 / (1.0 - g.dropout_p));
  return random::uniform(g.seed, pos) >= g.dropout_p ? keep : A(0);
}

}  // namespace mpx::cuda
