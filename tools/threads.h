// CPU thread defaults of the mpx commands for shared machines: a passive OpenMP wait policy and a thread count re-chosen by measured step time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpx::cli {

/// Called first thing by the training commands: unless the user chose a wait policy (OMP_WAIT_POLICY or
/// GOMP_SPINCOUNT), re-executes the program with OMP_WAIT_POLICY=PASSIVE. OpenMP reads the
/// policy once, before main, and its default spinning makes a waiting thread burn the core that
/// another process (or the thread it waits for) needs. Returns only when no re-exec happened.
void prefer_passive_openmp(char** argv);

/// The default thread count: this process's share of the cores, less the data loader's worker
/// threads (at least 1); OMP_NUM_THREADS when set. With `local_ranks` processes of one job on this
/// machine the share is cores / local_ranks, unless the launcher already pinned this process to
/// fewer cores than the machine has (its share is then those cores).
int default_threads(int64_t loader_workers, int local_ranks = 1);

/// Re-chooses the OpenMP thread count while training, for machines shared with other jobs: every
/// `hold` steps it times `probe` steps at each candidate count (the maximum, halvings of it, 1)
/// and keeps the fastest. Disabled (the count stays fixed) when `enabled` is false: an explicit
/// --threads or OMP_NUM_THREADS, --deterministic (bit-identity needs one count), or a GPU run.
class ThreadTuner {
 public:
  ThreadTuner(int max_threads, bool enabled, int64_t probe = 4, int64_t hold = 200);
  /// Sets the thread count for the coming step.
  void before_step();
  /// Reports the wall time the step took (the CPU computes synchronously).
  void after_step(double seconds);
  /// The count in use.
  int current() const { return current_; }
  bool enabled() const { return enabled_; }

 private:
  std::vector<int> candidates_;
  std::vector<std::vector<double>> times_;
  bool enabled_;
  int64_t probe_, hold_, step_in_phase_ = 0;
  int probing_ = 0;  // index of the candidate being timed; -1 while holding the choice
  int current_;
};

}  // namespace mpx::cli
