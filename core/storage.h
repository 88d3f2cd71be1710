// Storage: a reference-counted block of device memory shared by a tensor and its views.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace mpx {

/// Memory shared among views. The version counter lives here so that every view of
/// the same memory sees in-place writes (autograd's saved-tensor check relies on it).
struct StorageImpl {
  std::shared_ptr<void> data;
  size_t nbytes = 0;
  Device device;
  std::atomic<uint64_t> version{0};
  /// Counts in-place ops recorded by autograd on a tensor using this memory: each gives that
  /// tensor a new history, which views taken before it do not follow.
  std::atomic<uint64_t> rebases{0};
};

}  // namespace mpx
