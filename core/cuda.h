// The public CUDA runtime API: devices, streams, events, memory statistics, pinned memory.
// Every function is declared in every build; without the CUDA backend they throw mpx::Error
// (or report "nothing", where that is the honest answer: no devices, zero memory).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/tensor.h"

namespace mpx::cuda {

/// One device's memory: allocated counts live tensors (and kernels' scratch), each rounded up
/// to 512 bytes as torch.cuda.memory_allocated() counts them, plus the memory of CUDA graphs'
/// own allocations; reserved is what the stream-ordered pool and the graphs hold from the
/// driver (allocated + cached).
using MemoryStats = mpx::MemoryStats;
/// Statistics of a device's pool (device -1: the current device).
MemoryStats memory_stats(int device = -1);
/// Restarts the peak of memory_stats() at the current allocation.
void reset_peak_memory_stats(int device = -1);
/// Returns the pool's cached, unused memory to the driver.
void empty_cache(int device = -1);

/// LibTorch's spellings of mpx::cuda_is_available() and mpx::cuda_device_count().
inline bool is_available() { return cuda_is_available(); }
inline int64_t device_count() { return cuda_device_count(); }

/// The device new CUDA work goes to when a tensor does not say.
int current_device();
void set_device(int device);
/// Waits for all work on a device (-1: the current one).
void synchronize(int device = -1);

/// Debug aid: fill every new device allocation with 0xFF bytes (NaN in every floating dtype,
/// -1 in integers), so an output element a kernel forgot to write shows up in a comparison.
/// Also enabled by the environment variable MPX_CUDA_POISON=1.
void poison_allocations(bool on);

/// Copies between the row-major (NCHW) and channels-last (NHWC) layouts of 4-d device tensors
/// since the program started: a channels-last model should add none per training step.
int64_t layout_conversions();

/// Whether f32 matmuls may use TF32 Tensor Cores (off by default, as in PyTorch >= 1.12).
void allow_tf32(bool allow);
bool tf32_allowed();

/// cuDNN (convolutions, batch norm, fused attention): "cuDNN 9.19.0" as loaded at run time, with
/// ", frontend 1.32.0" when mpx was built with cuDNN's frontend (cuDNN's fused attention), or "not
/// built" when mpx was built without cuDNN (then CUDA convolutions and batch norm have no kernels).
std::string cudnn_version();
/// Whether convolutions time cuDNN's algorithms once per shape/dtype/layout (cudnnFind*, which
/// waits for the device) instead of taking the heuristic's first choice. Off by default.
void cudnn_benchmark(bool on);
bool cudnn_benchmark_enabled();
/// Whether convolutions may use only algorithms cuDNN reports deterministic (bitwise
/// reproducible; some are slower). Off by default.
void cudnn_deterministic(bool on);
bool cudnn_deterministic_enabled();
/// Which fused kernels scaled_dot_product_attention may use on CUDA, as PyTorch's
/// torch.backends.cuda.enable_cudnn_sdp / enable_flash_sdp. Both on by default; the environment's
/// MPX_SDPA_CUDNN=0 and MPX_SDPA_FLASH=0 turn them off at start. cuDNN's fused attention (a build
/// with cuDNN's frontend) takes f16/bf16 calls without a mask or dropout; mpx's flash kernel takes
/// f16/bf16 with masks, dropout and grouped heads; everything else, or all with both off, runs mpx's
/// row kernels. The three agree within rounding. cuDNN's backward is deterministic only under
/// cudnn_deterministic(true).
void enable_cudnn_sdp(bool on);
bool cudnn_sdp_enabled();
void enable_flash_sdp(bool on);
bool flash_sdp_enabled();
/// Times cuDNN refused a fast kernel since the program started and a slower equivalent ran
/// instead: NHWC batch norm off its persistent kernels, batch norm + add + ReLU unfused, bf16
/// batch norm through f32 copies, a convolution algorithm cuDNN listed and then would not run
/// (the next one runs), an attention call cuDNN's fused kernels would not take (mpx's flash
/// kernel runs). Results are the same; a channels-last model should add none.
int64_t cudnn_fallbacks();
/// What the latest of those fallbacks was ("" when none): the op, dtype, channels and cuDNN's status.
std::string cudnn_last_fallback();

/// Sets the current device for a scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_;
};

/// A CUDA stream (non-owning handle). Every op on a device runs on that device's current
/// stream, which is one non-blocking stream mpx creates per device unless set otherwise.
struct Stream {
  void* handle = nullptr;  ///< the cudaStream_t
  int device = 0;
  /// Blocks the host until the stream's work is done.
  void synchronize() const;
  friend bool operator==(const Stream& a, const Stream& b) { return a.handle == b.handle && a.device == b.device; }
};
/// The current stream of a device (-1: the current device).
Stream current_stream(int device = -1);
/// A new non-blocking stream on a device, alive until the process ends.
Stream new_stream(int device = -1);
void set_current_stream(const Stream& s);

/// Makes `s` its device's current stream for a scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

/// A CUDA event for ordering streams and timing device work.
class Event {
 public:
  explicit Event(bool enable_timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  /// Records the event on a stream (default: the current stream of the current device).
  void record(const Stream& s);
  void record();
  /// Makes `s` wait for the recorded work without blocking the host.
  void wait(const Stream& s) const;
  void synchronize() const;
  /// True when the recorded work has finished.
  bool query() const;
  /// Milliseconds between this event and a later one (both recorded, timing enabled).
  float elapsed_ms(const Event& end) const;

 private:
  void* ev_ = nullptr;
  int device_ = 0;
};

/// A page-locked copy of a CPU tensor (fast, asynchronous host-to-device copies).
Tensor pin_memory(const Tensor& t);
/// `nbytes` of page-locked host memory, from a cache of freed blocks of that size; what
/// `TensorOptions::pinned_memory` allocates. Throws without a CUDA device.
std::shared_ptr<void> allocate_pinned(size_t nbytes);
/// True when a CPU tensor's memory is page-locked.
bool is_pinned(const Tensor& t);

/// Capture and replay of the device work issued on the current stream (a CUDA graph), for
/// training steps of static shapes. Shapes and addresses are frozen at capture: refill input
/// tensors in place (copy_) between replays; tensors created during capture (the loss, new
/// gradients) live in graph-owned memory at fixed addresses and hold the latest replay's
/// values. Nothing in a captured region may wait for the device (no item(), no host copies);
/// run the step eagerly a few times first so that lazily created state (optimizer buffers,
/// library workspaces) exists before capture.
class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  /// Starts capturing the current device's work on a side stream, current until capture_end().
  void capture_begin();
  void capture_end();
  /// Launches the captured work on the current stream (asynchronously).
  void replay();
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
/// True while the current thread is capturing a Graph on the current device.
bool is_capturing();

/// Small device tensors copied to page-locked host memory without waiting for the device: a
/// flag or a scale can be looked at a step later, once the copy has landed, instead of
/// stalling the step that produced it (amp's lagging overflow message uses this).
class HostReadback {
 public:
  /// Starts the copies on the current stream of the tensors' device.
  explicit HostReadback(const tensor_list& tensors);
  /// Waits for copies still in flight: their page-locked buffers go back to a shared cache.
  ~HostReadback();
  HostReadback(const HostReadback&) = delete;
  HostReadback& operator=(const HostReadback&) = delete;
  /// True once every copy has finished (never blocks).
  bool ready() const;
  /// Element 0 of tensor i as a double; waits for the copies if they are still in flight.
  double value(size_t i) const;

 private:
  tensor_list host_;
  std::shared_ptr<Event> done_;
};

/// One device's properties, for `mpx info` and heuristics.
struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  int64_t total_memory = 0;
  int64_t l2_cache = 0;
};
DeviceProperties device_properties(int device = -1);
/// "CUDA runtime 13.0, driver 13.0, cuBLAS 13.1.0" (what the build links and finds).
std::string version_string();

}  // namespace mpx::cuda
