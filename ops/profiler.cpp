// The kernel profiler behind dispatch::KernelRef: host timing for CPU kernels, event pairs for CUDA kernels, summed per (op, device, dtype).
#include "ops/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "core/allocator.h"
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
  Device dev;
  int64_t index = 0;                      // among the calls recorded since reset()
  int64_t live_before = 0, peak_before = 0;  // the device's memory when the call began
};
struct Total {
  int64_t calls = 0;
  double ms = 0, host_ms = 0;
};

// Where a device's memory peaked (the call charged with it), and what was live when the
// device's last recorded call ended.
struct PeakAt {
  Key key{};
  int64_t index = 0, live_before = 0, peak = -1;
  int64_t live_at_end = -1;
};

struct State {
  std::mutex m;
  std::vector<Call> calls;  // slots; resolved into `totals` by results()
  uint64_t generation = 0;  // bumped whenever `calls` is cleared: slot indices from before are stale
  std::map<Key, Total> totals;
  int64_t recorded = 0;                // calls recorded since reset()
  std::map<std::string, PeakAt> peaks;  // by device name
};

// Bytes allocated now and their peak on a kernel's device.
std::pair<int64_t, int64_t> memory_of(Device dev) {
  const MemoryStats st = dev.type == DeviceType::kCUDA ? cuda::memory_stats(dev.index) : cpu::memory_stats();
  return {st.allocated, st.peak_allocated};
}
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
    c.dev = dev;
    if (gpu) {
      // The events (and the capture check) belong to the kernel's device, whose current stream
      // the kernel runs on, not to whatever device is current.
      cuda::DeviceGuard on_device(dev.index);
      if (cuda::is_capturing()) return;  // events recorded into a graph would time nothing useful
      std::tie(c.live_before, c.peak_before) = memory_of(dev);
      c.start = std::make_unique<cuda::Event>(true);
      c.end = std::make_unique<cuda::Event>(true);
      c.t0 = Clock::now();
      c.start->record();
    } else {
      std::tie(c.live_before, c.peak_before) = memory_of(dev);
      c.t0 = Clock::now();
    }
    State& s = state();
    std::lock_guard<std::mutex> l(s.m);
    c.index = s.recorded++;
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
  const auto t1 = Clock::now();
  State& s = state();
  std::lock_guard<std::mutex> l(s.m);
  // results() or reset() while the kernel ran: the slot is gone (or now another call's).
  if (t_generation != s.generation || static_cast<size_t>(slot_) >= s.calls.size()) return;
  Call& c = s.calls[static_cast<size_t>(slot_)];
  c.host_ms = std::chrono::duration<double, std::milli>(t1 - c.t0).count();
  try {
    const auto [live, peak] = memory_of(c.dev);
    PeakAt& p = s.peaks[c.dev.str()];
    if (std::max(peak, c.peak_before) > p.peak) {
      p.key = c.key, p.index = c.index, p.peak = std::max(peak, c.peak_before);
      p.live_before = p.live_at_end >= 0 ? p.live_at_end : c.live_before;
    }
    p.live_at_end = live;
  } catch (...) {  // a destructor cannot report it; the peak stays where it was
  }
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
  s.recorded = 0;
  s.peaks.clear();
}

std::vector<MemoryPeak> memory_peaks() {
  State& s = state();
  std::lock_guard<std::mutex> l(s.m);
  std::vector<MemoryPeak> out;
  for (const auto& [dev, p] : s.peaks) {
    const auto& [op, type, dt] = p.key;
    (void)type;
    out.push_back(MemoryPeak{dev, op_name(op), dtype_name(dt), p.index, p.live_before, p.peak});
  }
  return out;
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
  const auto mib = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  for (const auto& p : memory_peaks()) {
    std::snprintf(buf, sizeof buf,
                  "memory peak on %s: %.1f MiB at call %lld (%s %s), %.1f MiB live after the call before it "
                  "(+%.1f MiB: its outputs and scratch, and whatever else was allocated between the two)\n",
                  p.device.c_str(), mib(p.peak), static_cast<long long>(p.call), p.op.c_str(), p.dtype.c_str(),
                  mib(p.live_before), mib(p.peak - p.live_before));
    out += buf;
  }
  return out;
}
}  // namespace profiler
}  // namespace mpx
