// DataLoader: batches a Dataset in a seed- and epoch-determined order, optionally on worker
// threads with a bounded prefetch queue; batches always come out in order.
#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace mpx::data {

/// Loader settings, chained like torch.utils.data.DataLoader's keyword arguments.
struct DataLoaderOptions {
  DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}  // NOLINT
  /// Samples per batch.
  DataLoaderOptions& batch_size(int64_t b) { batch_size_ = b; return *this; }
  /// A new permutation every epoch (seeded by seed and epoch).
  DataLoaderOptions& shuffle(bool s = true) { shuffle_ = s; return *this; }
  /// Worker threads; 0 loads on the iterating thread. Never changes the batches' content.
  DataLoaderOptions& workers(int64_t w) { workers_ = w; return *this; }
  /// Drop the last, incomplete batch.
  DataLoaderOptions& drop_last(bool d = true) { drop_last_ = d; return *this; }
  /// Page-locked host batches (pinned by the loading threads), so `batch.data.to(cuda, true)`
  /// copies asynchronously. A no-op when no GPU is present.
  DataLoaderOptions& pin_memory(bool p = true) { pin_memory_ = p; return *this; }
  /// Base seed of the shuffle order and per-sample transforms; defaults to the seed of
  /// mpx's default generator (mpx::manual_seed) at loader construction.
  DataLoaderOptions& seed(uint64_t s) { seed_ = s; return *this; }
  /// Batches each worker may have ready ahead of the consumer (queue bound = prefetch * workers).
  DataLoaderOptions& prefetch(int64_t p) { prefetch_ = p; return *this; }
  /// Distributed seam: this process's rank among world_size; each rank sees a disjoint,
  /// equal-size shard (DistributedSampler semantics, padded by wrap-around).
  DataLoaderOptions& rank(int64_t r) { rank_ = r; return *this; }
  DataLoaderOptions& world_size(int64_t w) { world_size_ = w; return *this; }
  /// A custom sampler replacing shuffle/rank/world_size.
  DataLoaderOptions& sampler(std::shared_ptr<const Sampler> s) { sampler_ = std::move(s); return *this; }
  /// How a batch's examples become one Batch (PyTorch's collate_fn), run on the loading thread; the
  /// default, `collate`, stacks examples of one shape. `pad_collate()` pads sequences of different
  /// lengths. With a collate_fn the dataset's own get_batch is not used.
  DataLoaderOptions& collate_fn(CollateFn f) { collate_fn_ = std::move(f); return *this; }

  int64_t batch_size_;
  bool shuffle_ = false;
  int64_t workers_ = 0;
  bool drop_last_ = false;
  bool pin_memory_ = false;
  std::optional<uint64_t> seed_;
  int64_t prefetch_ = 2;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  std::shared_ptr<const Sampler> sampler_;
  CollateFn collate_fn_;
};

class EpochRun;  // one epoch's state and workers (dataloader.cpp)

/// What loading one epoch has cost so far (DataLoader::stats): how fast batches came and how long
/// the consumer waited for them. Wall-clock times in seconds.
struct LoaderStats {
  int64_t epoch = -1;    ///< the epoch these figures are of (-1 before the first begin())
  int64_t batches = 0;   ///< batches handed to the consumer
  int64_t samples = 0;   ///< samples in those batches
  double elapsed_s = 0;  ///< from begin() to the latest batch handed out
  /// Time the consumer spent in begin() / ++ waiting for its next batch: the stall. With
  /// workers(0) loading happens there, so it is all the loading time.
  double wait_s = 0;
  /// Loading time summed over the threads that loaded (workers, or the consumer with workers(0)).
  double load_s = 0;
  /// How the data set's transform runs (Dataset::transform_path): "fused: ..." or "composed: ...".
  std::string transform_path;
  /// Samples per second as the consumer received them (its own compute included).
  double images_per_s() const { return elapsed_s > 0 ? static_cast<double>(samples) / elapsed_s : 0; }
  /// Samples per second of loading thread time: what one loading thread sustains.
  double images_per_load_s() const { return load_s > 0 ? static_cast<double>(samples) / load_s : 0; }
  /// Fraction of the elapsed time the consumer stalled on data.
  double wait_fraction() const { return elapsed_s > 0 ? wait_s / elapsed_s : 0; }
};

/// Iterable over batches: `for (auto& batch : loader)`. Each full iteration is one epoch;
/// the epoch counter advances when an iteration begins (or set it with set_epoch). Errors
/// thrown by the dataset in a worker are rethrown on the iterating thread, unchanged.
/// Destroying the loader (or beginning a new iteration) mid-epoch stops and joins the workers.
class DataLoader {
 public:
  /// Borrows `dataset`: it must outlive the loader.
  DataLoader(const Dataset& dataset, DataLoaderOptions options);
  /// Shares ownership of `dataset`.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  /// Takes a temporary dataset by value (`DataLoader(FashionMNIST(root), o)`), as LibTorch's
  /// make_data_loader does, instead of borrowing one that dies at the end of the statement.
  template <typename D>
    requires(std::derived_from<D, Dataset> && !std::is_lvalue_reference_v<D>)
  DataLoader(D&& dataset, DataLoaderOptions options)
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<const D>(std::move(dataset))), std::move(options)) {}
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Batch& operator*() const;
    Batch* operator->() const { return &**this; }
    Iterator& operator++();
    bool operator==(const Iterator& o) const;
    bool operator!=(const Iterator& o) const { return !(*this == o); }

   private:
    friend class DataLoader;
    EpochRun* run_ = nullptr;  // null: end()
  };

  /// Starts an epoch (stopping any unfinished one) and returns its first batch.
  Iterator begin();
  Iterator end() { return Iterator(); }

  /// Batches per epoch.
  int64_t size() const;
  /// The epoch the next begin() uses.
  int64_t epoch() const { return epoch_; }
  /// Sets the epoch the next begin() uses (as DistributedSampler.set_epoch).
  void set_epoch(int64_t e) { epoch_ = e; }
  /// The base seed in use.
  uint64_t seed() const { return seed_; }
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }
  /// The current epoch's loading figures (the last epoch's once it has ended), for an epoch
  /// summary line; call from the iterating thread.
  LoaderStats stats() const;
  /// The dataset indices of every batch of `epoch`, in order.
  std::vector<std::vector<int64_t>> batch_indices(int64_t epoch) const;

 private:
  void init();
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<const Sampler> sampler_;
  uint64_t seed_ = 0;
  int64_t epoch_ = 0;
  std::unique_ptr<EpochRun> run_;
};

}  // namespace mpx::data
