// The CPU thread count ops use: PyTorch's torch.set_num_threads / torch.get_num_threads.
#pragma once

namespace mpx {

/// The most threads set_num_threads accepts.
inline constexpr int kMaxNumThreads = 4096;

/// Sets how many threads CPU ops run on (OpenMP's team size for the parallel regions the
/// calling thread starts, as torch.set_num_threads): call it from the thread that runs the
/// model. `n` must be in [1, kMaxNumThreads]; OMP_NUM_THREADS sets the starting value.
void set_num_threads(int n);
/// How many threads CPU ops started from the calling thread run on (torch.get_num_threads).
int get_num_threads();

}  // namespace mpx
