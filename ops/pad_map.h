// pad's per-axis maps as the CPU and CUDA kernels read them: where each output position reads, and which outputs
// read each input position. Plain C++17 for the CUDA kernel files.
#pragma once
#include <stdint.h>

#include "core/hd.h"

namespace mpx::padmap {

/// One axis of a pad (a view of the i64 map of ops/pad.h's PadFn), laid out as [n_out sources | n_in + 1 offsets |
/// n_out readers]: output j reads input src(j), or the fill value where that is -1; input k is read by the outputs
/// reader(begin(k)) .. reader(end(k) - 1), in ascending order.
struct Axis {
  const int64_t* map;
  int64_t n_in, n_out;
  MPX_HD int64_t src(int64_t j) const { return map[j]; }
  MPX_HD int64_t begin(int64_t k) const { return map[n_out + k]; }
  MPX_HD int64_t end(int64_t k) const { return map[n_out + k + 1]; }
  MPX_HD int64_t reader(int64_t r) const { return map[n_out + n_in + 1 + r]; }
};

/// The length of an axis's map.
MPX_HD inline int64_t map_size(int64_t n_in, int64_t n_out) { return 2 * n_out + n_in + 1; }

}  // namespace mpx::padmap
