// AutocastGuard: the RAII switch for the autocast stage every op runs (policies in ops/ops.def).
#pragma once
#include <string>

#include "amp/cast_cache.h"
#include "ops/op_utils.h"

namespace mpx::amp {

/// Enables (or, nested, disables) autocast to `dtype` (kFloat16 or kBFloat16) for this
/// thread until the guard leaves scope; the previous state is restored then. Guards nest
/// freely: an inner `AutocastGuard(kFloat32, false)` (any dtype when disabled, as
/// torch.autocast(..., enabled=False)) runs a region in full precision. While
/// enabled, casts go through the weight cast cache (cached_cast); when the outermost guard of
/// the thread exits, the cache is cleared.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = kFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState saved_;
};

/// True when ops on this thread currently autocast.
inline bool is_autocast_enabled() { return autocast_state().enabled; }
/// The dtype ops on this thread autocast to (meaningful while enabled).
inline DType get_autocast_dtype() { return autocast_state().dtype; }
/// How many AutocastGuards are live on this thread (0 outside any region).
int autocast_nesting();

/// A copy of this thread's autocast state, to hand to another thread.
inline AutocastState capture_autocast_state() { return autocast_state(); }

/// Applies a captured autocast state to the current thread for its lifetime, restoring the
/// thread's own state afterwards. Every thread the library starts to run part of a forward pass
/// does this with the state captured by the thread that started it, so autocast (and the shared
/// weight cast cache) reaches it exactly as if the work ran on the caller's thread:
///   auto st = amp::capture_autocast_state();
///   std::thread w([st] { amp::ScopedAutocastState s(st); run_forward_part(); });
/// It does not count as a guard: leaving it never clears the cache (the caller's guard does).
class ScopedAutocastState {
 public:
  explicit ScopedAutocastState(const AutocastState& state) : saved_(autocast_state()) { autocast_state() = state; }
  ~ScopedAutocastState() { autocast_state() = saved_; }
  ScopedAutocastState(const ScopedAutocastState&) = delete;
  ScopedAutocastState& operator=(const ScopedAutocastState&) = delete;

 private:
  AutocastState saved_;
};

}  // namespace mpx::amp
