// Internal to the CUDA module (core/cuda_runtime.cpp, core/cuda_memory.cpp, the kernels): devices, streams, memory and capture bookkeeping they share.
#pragma once
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "core/cuda.h"
#include "core/cuda_check.h"

namespace mpx::cuda {

/// Most devices mpx addresses (per-device tables are this long).
inline constexpr int kMaxDevices = 64;

/// A per-device handle made by `make(device)` on first use: thread-safe, and lock-free once made.
/// Each caller keeps its own static table and mutex.
template <typename T, typename Make>
T lazy_per_device(std::array<std::atomic<T>, kMaxDevices>& table, std::mutex& m, int device, Make make) {
  if (T v = table[device].load()) return v;
  std::lock_guard<std::mutex> l(m);
  if (!table[device].load()) table[device].store(make(device));
  return table[device].load();
}

/// Visible devices; 0 without a driver or a device (not an error for a CPU-only run).
int device_count_raw();
/// The current device, checked to exist. (The module's own: a call to the public
/// current_device() would go round through libmpx and back.)
int current_device_raw();
/// A device index checked against the visible devices; negative means the current device.
int resolve(int device);
/// The current stream of a device as a cudaStream_t (a negative index: the current device).
cudaStream_t stream_of(int device);

/// Capture bookkeeping of the stream-ordered allocator: a capture that begins makes frees of
/// older memory wait; its end issues them (see core/cuda_memory.cpp).
void capture_started();
void end_capture_and_flush();

/// core/cuda_memory.cpp's side of the backend: the pool's statistics, trimming, pinned memory.
MemoryStats pool_memory_stats(int device);
void pool_reset_peak(int device);
void pool_empty_cache(int device);
std::shared_ptr<void> pinned_allocate(size_t nbytes);
bool pinned_query(const Tensor& t);
/// "cuDNN 9.19.0" as loaded, or "not built" (ops/cuda/cudnn_common.cpp).
std::string cudnn_version_string();

}  // namespace mpx::cuda
