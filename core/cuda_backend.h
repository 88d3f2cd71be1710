// Internal: what libmpx asks of the CUDA module (libmpx_cuda), which it loads on first use so that a program that never touches a GPU never maps the CUDA libraries.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/cuda.h"

namespace mpx::cuda::detail {

/// The CUDA runtime as the module implements it. core/cuda_api.cpp turns every public function
/// of core/cuda.h into a call here; preferences (TF32, cuDNN switches, poisoning) and counters
/// live in libmpx itself, so setting them loads nothing.
struct Backend {
  virtual ~Backend() = default;
  virtual int device_count() = 0;
  virtual int current_device() = 0;
  virtual void set_device(int device) = 0;
  virtual void synchronize(int device) = 0;
  /// The raw device switch DeviceGuard needs (no visibility check: the caller resolved it).
  virtual int get_device_raw() = 0;
  virtual void set_device_raw(int device) = 0;

  virtual MemoryStats memory_stats(int device) = 0;
  virtual void reset_peak_memory_stats(int device) = 0;
  virtual void empty_cache(int device) = 0;
  virtual std::shared_ptr<void> allocate_pinned(size_t nbytes) = 0;
  virtual bool is_pinned(const Tensor& t) = 0;

  virtual Stream current_stream(int device) = 0;
  virtual Stream new_stream(int device) = 0;
  virtual void set_current_stream(const Stream& s) = 0;
  virtual void stream_synchronize(const Stream& s) = 0;

  virtual void* event_create(bool timing) = 0;
  virtual void event_destroy(void* ev) = 0;
  virtual void event_record(void* ev, const Stream& s) = 0;
  virtual void event_wait(void* ev, const Stream& s) = 0;
  virtual void event_synchronize(void* ev) = 0;
  virtual bool event_query(void* ev) = 0;
  virtual float event_elapsed_ms(void* start, void* end) = 0;

  /// A graph's state lives in the module; libmpx holds it as an opaque pointer.
  virtual void* graph_create() = 0;
  virtual void graph_destroy(void* g) = 0;
  virtual void graph_capture_begin(void* g) = 0;
  virtual void graph_capture_end(void* g) = 0;
  virtual void graph_replay(void* g) = 0;
  virtual bool graph_captured(void* g) = 0;
  virtual bool is_capturing() = 0;

  /// Starts device-to-host copies of `tensors` into new page-locked tensors on their device's
  /// current stream; returns that stream (HostReadback records its event there).
  virtual Stream readback_start(const tensor_list& tensors, tensor_list& host) = 0;

  virtual DeviceProperties device_properties(int device) = 0;
  virtual std::string version_string() = 0;
  virtual std::string cudnn_version() = 0;
};

/// The module's backend, loading the module on the first call; null when this mpx was built
/// without CUDA or the module (or a CUDA library it needs) does not load: module_problem() says why.
Backend* backend();
/// The backend if the module is already loaded; never loads it (queries about state that only
/// the module could have made, such as "is this memory pinned", answer "no" without it).
Backend* loaded_backend();
/// Why backend() is null ("" when it is not).
std::string module_problem();
/// The module's one exported entry, `extern "C" Backend* mpx_cuda_backend()`, is looked up
/// by name after it has loaded.

/// Read by the module's allocator: whether new device memory is filled with 0xFF bytes.
bool poison_enabled();
/// Counts one cuDNN fallback for cuda::cudnn_fallbacks() with its description.
void note_cudnn_fallback(const std::string& what);
/// Counts one copy between the row-major and channels-last layouts (cuda::layout_conversions).
void count_layout_conversion();

}  // namespace mpx::cuda::detail
