// AutocastGuard: the RAII switch for the autocast stage every op runs (policies in ops/ops.def).
#pragma once
#include "ops/op_utils.h"

namespace mpx::amp {

/// Enables (or, nested, disables) autocast to `dtype` (kFloat16 or kBFloat16) for this
/// thread until the guard leaves scope; the previous state is restored then.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = kFloat16, bool enabled = true) : saved_(autocast_state()) {
    MPX_CHECK(is_reduced_float(dtype), "AutocastGuard: dtype must be kFloat16 or kBFloat16, got ", dtype_name(dtype));
    autocast_state().enabled = enabled;
    autocast_state().dtype = dtype;
  }
  ~AutocastGuard() { autocast_state() = saved_; }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState saved_;
};

/// True when ops on this thread currently autocast.
inline bool is_autocast_enabled() { return autocast_state().enabled; }

}  // namespace mpx::amp
