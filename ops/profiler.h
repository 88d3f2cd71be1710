// mpx::profiler: per-op kernel time (CPU wall time, CUDA event time) of everything dispatched while it records, and where memory peaked.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpx::profiler {

/// One (op, device, dtype) row: how often its kernel ran and for how long in total.
struct OpStat {
  std::string op, device, dtype;
  int64_t calls = 0;
  double ms = 0;       ///< CPU: wall time of the calls; CUDA: device time between events around them
  double host_ms = 0;  ///< wall time of the calls on the host (CUDA: preparing and launching the kernels)
};

/// Where one device's allocated memory peaked while the profiler recorded (its peak since the
/// last reset_peak_memory_stats(): reset it before start() to find the recorded steps' own).
/// A kernel is charged with what was allocated from the end of the device's previous recorded
/// kernel to its own end: an op allocates its outputs just before its kernel runs.
struct MemoryPeak {
  std::string device;       ///< "cpu", "cuda:0", ...
  std::string op, dtype;    ///< the kernel charged with the peak
  int64_t call = 0;         ///< its index among the recorded calls, from 0
  int64_t live_before = 0;  ///< bytes allocated when the device's previous recorded kernel ended
  int64_t peak = 0;         ///< the peak, in bytes (cpu::/cuda::memory_stats().peak_allocated)
};

/// Starts recording every kernel call made through the op table (a kernel that calls other ops
/// is one call: its inner ops count as its own time). Costs a few microseconds per call on a
/// GPU (two events, two reads of the memory statistics), so it is for finding where time and
/// memory go, not for timing.
void start();
/// Stops recording (already recorded GPU calls are resolved by results()).
void stop();
bool recording();
/// Clears what was recorded.
void reset();
/// The rows so far, longest total first. Waits for recorded GPU work to finish.
std::vector<OpStat> results();
/// Per device, where its memory peaked among the recorded calls (see MemoryPeak).
std::vector<MemoryPeak> memory_peaks();
/// results() as an aligned table: op, device, dtype, calls, total ms, ms per call, share, and host
/// ms per call (on a GPU, the host's cost of a call: where it exceeds the device's, launches
/// cannot keep the device busy).
/// `top` rows at most (0: all), the rest summed into one line; then one line per device saying
/// where its memory peaked (memory_peaks()).
std::string report(size_t top = 25);

}  // namespace mpx::profiler
