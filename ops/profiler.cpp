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

// A call in flight or recorded: host start time, and the two events of a CUDA call.
struct Call {
  Key key;
  Clock::time_point t0;
  std::unique_ptr<cuda::Event> start, end;
  double host_ms = -1;  // set when the call returns
  bool ended = false;   // the CUDA call's end event was recorded
};
struct Total {
  int64_t calls = 0;
  double ms = 0, host_ms = 0;
};

struct State {
  std::mutex m;
  std::vector<Call> calls;  // slots; resolved into `totals` by results()
  uint64_t generation = 0;  // bumped whenever `calls` is cleared: slot indices from before are stale
  std::map<Key, Total> totals;
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
    Total& t = s.totals[c.key];
    ++t.calls;
    const double host_ms = std::max(0.0, c.host_ms);
    t.host_ms += host_ms;
    if (c.start) {
      c.end->synchronize();  // elapsed time is only defined once the end event has completed
      t.ms += c.start->elapsed_ms(*c.end);
    } else {
      t.ms += host_ms;
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
    c.t0 = Clock::now();
    if (gpu) {
      // The events (and the capture check) belong to the kernel's device, whose current stream
      // the kernel runs on, not to whatever device is current.
      cuda::DeviceGuard on_device(dev.index);
      if (cuda::is_capturing()) return;  // events recorded into a graph would time nothing useful
      c.start = std::make_unique<cuda::Event>(true);
      c.end = std::make_unique<cuda::Event>(true);
      c.start->record();
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
  c.host_ms = std::chrono::duration<double, std::milli>(Clock::now() - c.t0).count();
  if (c.end) {
    try {
      c.end->record();
      c.ended = true;
    } catch (...) {  // a destructor cannot report it; the call stays unresolved
    }
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
    out.push_back(
        OpStat{op_name(op), dev == DeviceType::kCUDA ? "cuda" : "cpu", dtype_name(dt), v.calls, v.ms, v.host_ms});
  }
  std::stable_sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) { return a.ms > b.ms; });
  return out;
}

std::string report(size_t top) {
  const auto rows = results();
  double total = 0, host_total = 0;
  for (const auto& r : rows) total += r.ms, host_total += r.host_ms;
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-28s %-6s %-5s %9s %11s %10s %7s %11s %12s\n", "op", "device", "dtype", "calls",
                "total ms", "ms/call", "share", "host ms", "host ms/call");
  out += buf;
  OpStat rest{"(the rest)", "", "", 0, 0, 0};
  auto line = [&](const OpStat& r, bool per_call) {
    char ms_call[32] = "", host_call[32] = "";
    if (per_call) {
      const double n = static_cast<double>(std::max<int64_t>(r.calls, 1));
      std::snprintf(ms_call, sizeof ms_call, "%.4f", r.ms / n);
      std::snprintf(host_call, sizeof host_call, "%.4f", r.host_ms / n);
    }
    std::snprintf(buf, sizeof buf, "%-28s %-6s %-5s %9lld %11.3f %10s %6.1f%% %11.3f %12s\n", r.op.c_str(),
                  r.device.c_str(), r.dtype.c_str(), static_cast<long long>(r.calls), r.ms, ms_call,
                  total > 0 ? 100.0 * r.ms / total : 0.0, r.host_ms, host_call);
    out += buf;
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    if (top > 0 && i >= top) {
      rest.calls += rows[i].calls, rest.ms += rows[i].ms, rest.host_ms += rows[i].host_ms;
      continue;
    }
    line(rows[i], true);
  }
  if (rest.calls > 0) line(rest, false);
  std::snprintf(buf, sizeof buf, "%-28s %-6s %-5s %9s %11.3f %10s %7s %11.3f\n", "total", "", "", "", total, "", "",
                host_total);
  out += buf;
  return out;
}
}  // namespace profiler
}  // namespace mpx
