// The kernel profiler behind dispatch::KernelRef: host timing for CPU kernels, event pairs for CUDA kernels, summed per (op, device, dtype).
#include "ops/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "core/cuda.h"
#include "ops/dispatch.h"

namespace mpx {
namespace dispatch::detail {
std::atomic<bool> g_profiling{false};
}  // namespace dispatch::detail

namespace {
using Key = std::tuple<OpId, DeviceType, DType>;
using Clock = std::chrono::steady_clock;

// A call in flight or recorded: host start time, or the two events of a CUDA call.
struct Call {
  Key key;
  Clock::time_point t0;
  std::unique_ptr<cuda::Event> start, end;
  double host_ms = -1;  // set when the CPU call ends
  bool ended = false;   // the CUDA call's end event was recorded
};

struct State {
  std::mutex m;
  std::vector<Call> calls;  // slots; resolved into `totals` by results()
  uint64_t generation = 0;  // bumped whenever `calls` is cleared: slot indices from before are stale
  std::map<Key, std::pair<int64_t, double>> totals;
};
State& state() {
  static State s;
  return s;
}
thread_local int t_depth = 0;  // kernels running on this thread (nested ones are not recorded)
// The generation of this thread's recorded call (at most one: nested calls are not recorded).
// A scope whose slot was cleared by results()/reset() on another thread (a loader worker's
// CPU kernel) must not write into whichever new call now has the same index.
thread_local uint64_t t_generation = 0;

void resolve(State& s) {
  bool gpu = false;
  for (const auto& c : s.calls) gpu = gpu || c.start != nullptr;
  // Waiting for an event is forbidden on a thread that is capturing a CUDA graph (it would
  // invalidate the capture): say so instead.
  MPX_CHECK(!gpu || !cuda::is_capturing(), "profiler::results: cannot wait for the GPU during a CUDA graph "
            "capture; call it after capture_end()");
  for (auto& c : s.calls) {
    if (c.start && !c.ended) continue;  // still running on another thread: its end is not recorded
    auto& [n, ms] = s.totals[c.key];
    ++n;
    if (c.start) {
      c.end->synchronize();  // elapsed time is only defined once the end event has completed
      ms += c.start->elapsed_ms(*c.end);
    } else {
      ms += std::max(0.0, c.host_ms);
    }
  }
  s.calls.clear();
  ++s.generation;
}
}  // namespace

namespace dispatch::detail {
ProfileScope::ProfileScope(OpId op, Device dev, DType dt) {
  if (t_depth++ > 0) return;
  try {
    const bool gpu = dev.type == DeviceType::kCUDA;
    Call c;
    c.key = Key{op, dev.type, dt};
    if (gpu) {
      // The events (and the capture check) belong to the kernel's device, whose current stream
      // the kernel runs on, not to whatever device is current.
      cuda::DeviceGuard on_device(dev.index);
      if (cuda::is_capturing()) return;  // events recorded into a graph would time nothing useful
      c.start = std::make_unique<cuda::Event>(true);
      c.end = std::make_unique<cuda::Event>(true);
      c.start->record();
    } else {
      c.t0 = Clock::now();
    }
    State& s = state();
    std::lock_guard<std::mutex> l(s.m);
    slot_ = static_cast<int>(s.calls.size());
    t_generation = s.generation;
    s.calls.push_back(std::move(c));
  } catch (...) {
    --t_depth;  // the destructor does not run when the constructor throws
    throw;
  }
}

ProfileScope::~ProfileScope() {
  --t_depth;
  if (slot_ < 0) return;
  State& s = state();
  std::lock_guard<std::mutex> l(s.m);
  // results() or reset() while the kernel ran: the slot is gone (or now another call's).
  if (t_generation != s.generation || static_cast<size_t>(slot_) >= s.calls.size()) return;
  Call& c = s.calls[static_cast<size_t>(slot_)];
  if (c.end) {
    try {
      c.end->record();
      c.ended = true;
    } catch (...) {  // a destructor cannot report it; the call stays unresolved
    }
  } else {
    c.host_ms = std::chrono::duration<double, std::milli>(Clock::now() - c.t0).count();
  }
}
}  // namespace dispatch::detail

namespace profiler {
void start() { dispatch::detail::g_profiling.store(true); }
void stop() { dispatch::detail::g_profiling.store(false); }
bool recording() { return dispatch::detail::g_profiling.load(); }

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> l(s.m);
  s.calls.clear();
  ++s.generation;
  s.totals.clear();
}

std::vector<OpStat> results() {
  State& s = state();
  std::lock_guard<std::mutex> l(s.m);
  resolve(s);
  std::vector<OpStat> out;
  for (const auto& [k, v] : s.totals) {
    const auto& [op, dev, dt] = k;
    out.push_back(OpStat{op_name(op), dev == DeviceType::kCUDA ? "cuda" : "cpu", dtype_name(dt), v.first, v.second});
  }
  std::stable_sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) { return a.ms > b.ms; });
  return out;
}

std::string report(size_t top) {
  const auto rows = results();
  double total = 0;
  for (const auto& r : rows) total += r.ms;
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-28s %-6s %-5s %9s %11s %10s %7s\n", "op", "device", "dtype", "calls", "total ms",
                "ms/call", "share");
  out += buf;
  OpStat rest{"(the rest)", "", "", 0, 0};
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (top > 0 && i >= top) {
      rest.calls += r.calls, rest.ms += r.ms;
      continue;
    }
    std::snprintf(buf, sizeof buf, "%-28s %-6s %-5s %9lld %11.3f %10.4f %6.1f%%\n", r.op.c_str(), r.device.c_str(),
                  r.dtype.c_str(), static_cast<long long>(r.calls), r.ms, r.ms / static_cast<double>(r.calls),
                  total > 0 ? 100.0 * r.ms / total : 0.0);
    out += buf;
  }
  if (rest.calls > 0) {
    std::snprintf(buf, sizeof buf, "%-28s %-6s %-5s %9lld %11.3f %10s %6.1f%%\n", rest.op.c_str(), "", "",
                  static_cast<long long>(rest.calls), rest.ms, "", total > 0 ? 100.0 * rest.ms / total : 0.0);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "%-28s %-6s %-5s %9s %11.3f\n", "total", "", "", "", total);
  out += buf;
  return out;
}
}  // namespace profiler
}  // namespace mpx
