// mpx::profiler: per-op kernel time (CPU wall time, CUDA event time) of everything dispatched while it records.
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

/// Starts recording every kernel call made through the op table (a kernel that calls other ops
/// is one call: its inner ops count as its own time). Costs a few microseconds per call on a
/// GPU (two events), so it is for finding where time goes, not for timing.
void start();
/// Stops recording (already recorded GPU calls are resolved by results()).
void stop();
bool recording();
/// Clears what was recorded.
void reset();
/// The rows so far, longest total first. Waits for recorded GPU work to finish.
std::vector<OpStat> results();
/// results() as an aligned table: op, device, dtype, calls, total ms, ms per call, share, and host
/// ms per call (on a GPU, the host's cost of a call: where it exceeds the device's, launches
/// cannot keep the device busy).
/// `top` rows at most (0: all), the rest summed into one line.
std::string report(size_t top = 25);

}  // namespace mpx::profiler
