// set_num_threads / get_num_threads over OpenMP, the runtime every CPU kernel (and oneDNN) uses.
#include "core/threads.h"

#include <omp.h>

#include "core/error.h"

namespace mpx {

void set_num_threads(int n) {
  MPX_CHECK(n >= 1, "set_num_threads: the thread count must be at least 1, got ", n);
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace mpx
