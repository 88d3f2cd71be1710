// Allocators: 64-byte aligned CPU memory and the per-device-type seam the CUDA pool plugs into.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace mpx {

/// Memory provider for one device type. Returned memory is freed by the deleter of the
/// shared_ptr, so storages never need to know which allocator made them.
struct Allocator {
  virtual ~Allocator() = default;
  virtual std::shared_ptr<void> allocate(size_t nbytes, Device device) = 0;
  /// Copies nbytes between two allocations of (possibly) different devices. The copy is
  /// complete when this returns, unless `async_owner` is given: then a host-to-device copy
  /// from pinned memory may still be in flight on the device's current stream, and the
  /// allocator keeps `async_owner` (the source's storage) alive until it has finished.
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes,
                    const std::shared_ptr<void>& async_owner = nullptr) = 0;
};

/// Returns the allocator registered for a device type; throws if that backend is not built.
Allocator& allocator_for(DeviceType type);
/// Installs the allocator for a device type (the CUDA backend calls this at load time).
void set_allocator(DeviceType type, Allocator* alloc);

/// Bytes held by the allocations of one device's allocator.
struct MemoryStats {
  int64_t allocated = 0;       ///< bytes in live tensors (and kernels' scratch tensors)
  int64_t reserved = 0;        ///< bytes the allocator holds (CUDA: allocated + the pool's cache)
  int64_t peak_allocated = 0;  ///< high-water mark of `allocated` since the last reset
};

namespace detail {
/// Bytes of one allocator's live allocations and their high-water mark, counted by the
/// allocator itself (a driver's pool statistics count in the driver's own units).
struct ByteCounter {
  std::atomic<int64_t> allocated{0}, peak{0};
  void add(int64_t n) {
    const int64_t now = allocated.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  void sub(int64_t n) { allocated.fetch_sub(n, std::memory_order_relaxed); }
  void reset_peak() { peak.store(allocated.load(std::memory_order_relaxed), std::memory_order_relaxed); }
};
}  // namespace detail

namespace cpu {
/// Bytes in live CPU tensors, as the allocator counts them (rounded up to kCpuAlignment);
/// memory libraries allocate on their own (oneDNN scratch, the C++ runtime) is not included.
/// The CPU counterpart of cuda::memory_stats(): a step's peak is comparable across devices.
MemoryStats memory_stats();
/// Restarts the peak of memory_stats() at the current allocation.
void reset_peak_memory_stats();
}  // namespace cpu

/// Alignment of every CPU allocation: one cache line, and enough for AVX-512 loads.
inline constexpr size_t kCpuAlignment = 64;

}  // namespace mpx
