// AutocastGuard: sets the thread's autocast state, installs the weight cast cache, clears it at the outermost exit.
#include "amp/autocast.h"

namespace mpx::amp {
namespace {
int& depth() {
  thread_local int d = 0;
  return d;
}
}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : saved_(autocast_state()) {
  // A disabled guard casts nothing, so any dtype will do (torch.autocast(..., enabled=False)).
  MPX_CHECK(!enabled || is_reduced_float(dtype), "AutocastGuard: dtype must be kFloat16 or kBFloat16 to autocast, got ",
            dtype_name(dtype), "; pass enabled=false to turn autocast off for a region");
  AutocastState& st = autocast_state();
  st.enabled = enabled;
  if (is_reduced_float(dtype)) st.dtype = dtype;  // a disabled f32 guard keeps the dtype an inner one may re-enable
  st.cast = &cached_cast;
  ++depth();
}

AutocastGuard::~AutocastGuard() {
  autocast_state() = saved_;
  if (--depth() == 0) clear_cast_cache();
}

int autocast_nesting() { return depth(); }

}  // namespace mpx::amp
