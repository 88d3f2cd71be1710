// DevicePrefetcher: apex's data_prefetcher — the next batch is copied to the device on a side stream while the current step computes.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "core/arg.h"
#include "core/tensor.h"
#include "data/dataloader.h"

namespace mpx::data {

/// What the prefetcher does to each batch's `data` on the device.
struct PrefetchOptions {
  PrefetchOptions() = default;
  /// Per-channel (dim 1) mean and standard deviation, applied on the device as
  /// `(data - mean) / std` in f32; one value applies to every channel. Empty: no normalization.
  /// u8 data is first scaled to [0, 1] (as ToTensor), so the values are those of
  /// transforms::Normalize, e.g. {0.485, 0.456, 0.406} and {0.229, 0.224, 0.225}.
  MPX_ARG(std::vector<double>, mean);
  MPX_ARG(std::vector<double>, std);
  /// The data's dtype on the device (floating). f16/bf16 halve what the model's first cast reads.
  MPX_ARG(DType, dtype) = kFloat32;
  /// The data's layout on the device; ChannelsLast feeds a channels-last model without a copy.
  MPX_ARG(MemoryFormat, memory_format) = MemoryFormat::Contiguous;
};

/// Iterates a DataLoader's batches with `data` and `target` already on `device`, like apex's
/// data_prefetcher: while the caller's step for batch i runs on the current stream, batch i+1
/// is copied (from the loader's pinned memory: set DataLoaderOptions::pin_memory) and
/// normalized on a side stream; the current stream waits for that work only when batch i+1 is
/// handed out, so the copies overlap the computation and the host never blocks on them.
/// Device tensors are allocated on the consumer's stream, so their memory is reused only after
/// the step that last read them. On the CPU (or when the data already lives on `device`) the
/// same conversions happen in place of the copy, with the same results.
///
///     data::DevicePrefetcher prefetcher(loader, Device::cuda(0), data::PrefetchOptions().mean(m).std(s));
///     for (data::Batch& b : prefetcher) { auto loss = F::cross_entropy(net(b.data), b.target); ... }
///
/// Each begin() starts a new epoch of the loader (stopping an unfinished one). Errors of the
/// dataset or of the options surface from begin() or ++ as mpx::Error. Borrows `loader`.
class DevicePrefetcher {
 public:
  DevicePrefetcher(DataLoader& loader, Device device, PrefetchOptions options = {});
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Batch& operator*() const;
    Batch* operator->() const { return &**this; }
    Iterator& operator++();
    bool operator==(const Iterator& o) const { return p_ == o.p_; }
    bool operator!=(const Iterator& o) const { return !(*this == o); }

   private:
    friend class DevicePrefetcher;
    DevicePrefetcher* p_ = nullptr;  // null: end()
  };

  Iterator begin();
  Iterator end() { return Iterator(); }
  /// Batches per epoch (the loader's).
  int64_t size() const { return loader_.size(); }
  Device device() const { return device_; }
  const PrefetchOptions& options() const { return options_; }

 private:
  struct Slot;
  void preload();
  void stage(const Batch& host, Slot& slot);
  bool promote();
  Batch transfer(const Batch& host);
  DataLoader& loader_;
  Device device_;
  PrefetchOptions options_;
  DataLoader::Iterator it_;
  std::unique_ptr<Slot> current_, next_;
  std::exception_ptr failed_;  // the loader failed after the batch in next_
  Tensor mean_, inv_std_;  // [1, C, 1, 1] f32 on device_, made on first use
  void* side_ = nullptr;   // the side stream (cudaStream_t) of device_, made on first use
};

}  // namespace mpx::data
