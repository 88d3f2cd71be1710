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
  MPX_CHECK(is_reduced_float(dtype), "AutocastGuard: dtype must be kFloat16 or kBFloat16, got ", dtype_name(dtype));
  AutocastState& st = autocast_state();
  st.enabled = enabled;
  st.dtype = dtype;
  st.cast = &cached_cast;
  ++depth();
}

AutocastGuard::~AutocastGuard() {
  autocast_state() = saved_;
  if (--depth() == 0) clear_cast_cache();
}

int autocast_nesting() { return depth(); }

}  // namespace mpx::amp
