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
  /// Copies nbytes between two allocations of (possibly) different devices.
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) = 0;
};

/// Returns the allocator registered for a device type; throws if that backend is not built.
Allocator& allocator_for(DeviceType type);
/// Installs the allocator for a device type (the CUDA backend calls this at load time).
void set_allocator(DeviceType type, Allocator* alloc);

/// Alignment of every CPU allocation: one cache line, and enough for AVX-512 loads.
inline constexpr size_t kCpuAlignment = 64;

}  // namespace mpx
