// CPU thread defaults for shared machines: passive OpenMP waiting and a step-time-driven thread count.
#include "tools/threads.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/threads.h"

namespace mpx::cli {

void prefer_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Without /proc (or exec rights) the run goes on with the active policy; the variable set
  // above stops a loop in any case.
}

int default_threads(int64_t loader_workers, int local_ranks) {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) return std::atoi(env);
  int cores = omp_get_num_procs();  // the cores this process may run on
  const int machine = static_cast<int>(std::thread::hardware_concurrency());
  if (local_ranks > 1 && (machine <= 0 || cores >= machine)) cores /= local_ranks;
  return std::max<int>(1, cores - static_cast<int>(loader_workers));
}

ThreadTuner::ThreadTuner(int max_threads, bool enabled, int64_t probe, int64_t hold)
    : enabled_(enabled && max_threads > 1), probe_(std::max<int64_t>(2, probe)), hold_(hold), current_(max_threads) {
  for (int t = max_threads; t >= 1; t /= 2) candidates_.push_back(t);
  if (candidates_.back() != 1) candidates_.push_back(1);
  times_.resize(candidates_.size());
}

void ThreadTuner::before_step() {
  if (!enabled_) return;
  const int want = probing_ >= 0 ? candidates_[static_cast<size_t>(probing_)] : current_;
  if (want != mpx::get_num_threads()) mpx::set_num_threads(want);
}

void ThreadTuner::after_step(double seconds) {
  if (!enabled_) return;
  ++step_in_phase_;
  if (probing_ < 0) {
    if (step_in_phase_ >= hold_) probing_ = 0, step_in_phase_ = 0;
    return;
  }
  // The first step at a new count pays for waking or creating threads: not representative.
  if (step_in_phase_ > 1) times_[static_cast<size_t>(probing_)].push_back(seconds);
  if (step_in_phase_ < probe_) return;
  step_in_phase_ = 0;
  if (++probing_ < static_cast<int>(candidates_.size())) return;
  double best = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    auto& t = times_[i];
    std::sort(t.begin(), t.end());
    const double median = t.empty() ? 1e300 : t[t.size() / 2];
    if (i == 0 || median < best) best = median, current_ = candidates_[i];
    t.clear();
  }
  probing_ = -1;
}

}  // namespace mpx::cli
