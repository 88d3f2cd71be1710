// Allocators: 64-byte aligned CPU memory and the per-device-type seam the CUDA pool plugs into.
#pragma once
#include <cstddef>
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

/// Alignment of every CPU allocation: one cache line, and enough for AVX-512 loads.
inline constexpr size_t kCpuAlignment = 64;

}  // namespace mpx
