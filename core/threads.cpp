// set_num_threads / get_num_threads over OpenMP, the runtime every CPU kernel (and oneDNN) uses.
#include "core/threads.h"

#include <omp.h>

#include "core/error.h"

namespace mpx {

void set_num_threads(int n) {
  MPX_CHECK(n >= 1, "set_num_threads: the thread count must be at least 1, got ", n);
  // OpenMP's runtime cannot report a thread it fails to create: it crashes or exits the process in the next parallel
  // region. Far past any core count, refuse here instead.
  MPX_CHECK(n <= kMaxNumThreads, "set_num_threads: ", n, " threads is more than ", kMaxNumThreads,
            " (more threads than cores only slows the kernels); use at most the machine's core count");
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace mpx
