// The autocast weight cast cache: each f32 leaf parameter is cast once per iteration, never stale.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mpx::amp {

/// Counters of the cache since the last reset_cast_cache_stats(). Only cacheable casts count
/// (f32 leaves that require grad); `entries` is the current number of cached casts.
struct CastCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t entries = 0;
};

/// The cast AutocastGuard installs as AutocastState::cast: `t.to(to)`, served from the cache
/// when `t` is an f32 leaf that requires grad. Entries are keyed on the tensor's identity, its
/// version counter (an in-place update such as an optimizer step makes the entry stale; it is
/// replaced, never served), the target dtype and the grad mode (a cast made under no-grad has no
/// graph and is never served to a use that needs one). A served cast is the recorded,
/// differentiable cast of the first use: every use shares its ToCopyBackward node and autograd
/// accumulates their gradients into the f32 parameter. The cache is process-wide (worker
/// threads that apply a captured autocast state share the caller's casts) and thread-safe.
Tensor cached_cast(const Tensor& t, DType to);

/// Drops every cached cast (and the graphs they hold). The outermost AutocastGuard calls it on
/// exit, and amp's scale_loss at the end of each backward.
void clear_cast_cache();

/// Hit/miss counters, for tests and diagnostics.
CastCacheStats cast_cache_stats();
void reset_cast_cache_stats();

}  // namespace mpx::amp
