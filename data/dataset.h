// Dataset: the random-access source of (data, target) examples that a DataLoader batches.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mpx::data {

/// One sample: `data` (any shape, e.g. f32 [C,H,W]) and `target` (usually a 0-dim i64 class).
/// A template, as LibTorch's, so `Example<>` (Tensor data and target) is the usual spelling; the
/// loader batches `Example<>`.
template <typename Data = Tensor, typename Target = Tensor>
struct Example {
  using DataType = Data;
  using TargetType = Target;
  Example() = default;
  Example(Data d, Target t) : data(std::move(d)), target(std::move(t)) {}
  Data data;
  Target target;
};

/// A batch: `data` [B, ...] and `target` [B] (or [B, ...] for non-scalar targets). An Example<> of
/// batched tensors, so LibTorch's `for (const Example<>& batch : *loader)` reads it.
struct Batch : Example<> {
  /// The dataset indices of the samples, in batch order.
  std::vector<int64_t> indices;
  /// i64 [B]: each example's length along its first dim, where the collate padded them (pad_collate);
  /// undefined otherwise.
  Tensor lengths;
  /// Page-locked memory wanted: the loader sets it (pin_memory with a GPU present) before it asks
  /// Dataset::get_batch for the batch, and a get_batch that allocates the batch allocates with
  /// `TensorOptions::pinned_memory(pinned)`, so the batch is filled once, in pinned memory,
  /// instead of filled and then copied there.
  bool pinned = false;
};

/// Random-access data set. `get` is called concurrently from loader worker threads, so
/// implementations must be safe to call from several threads at once (read-only state).
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of examples.
  virtual int64_t size() const = 0;
  /// The example at `index` in [0, size()), with the dataset's default randomness.
  virtual Example<> get(int64_t index) const = 0;
  /// The example at `index`, with random transforms driven by `sample_seed` (the loader
  /// derives it from its seed, the epoch and the index so runs reproduce). Datasets without
  /// randomness need not override it.
  virtual Example<> get_seeded(int64_t index, uint64_t sample_seed) const { return get(index); }
  /// Loads the examples `indices` (with their `sample_seeds`) straight into one batch, for data
  /// sets whose examples have a fixed shape: no per-example tensors, no copy into the batch.
  /// Returns false (the default) for the loader to call get_seeded and collate instead; the
  /// result must equal what that gives.
  virtual bool get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& sample_seeds,
                         Batch& out) const {
    (void)indices, (void)sample_seeds, (void)out;
    return false;
  }
  /// How the data set's transform runs, for DataLoader::stats(): "fused: ..." (one pass, from
  /// the file where it says so), "composed: ..." (step by step, and why), or "" when there is
  /// nothing to say.
  virtual std::string transform_path() const { return {}; }
};

/// The seed a loader hands to `Dataset::get_seeded` for a sample: a hash of
/// (loader seed, epoch, index), independent of worker count and timing.
uint64_t sample_seed(uint64_t loader_seed, int64_t epoch, int64_t index);

/// Stacks examples into a batch (data [B, ...], targets [B] when each target has one element).
/// All examples must share data shape and dtype; the error names the first mismatch.
/// `pinned`: into page-locked memory (needs a CUDA device; see Batch::pinned).
Batch collate(const std::vector<Example<>>& examples, bool pinned = false);

/// A batch from its examples (DataLoaderOptions::collate_fn); `pinned` as collate's.
using CollateFn = std::function<Batch(const std::vector<Example<>>& examples, bool pinned)>;

/// A collate for sequences of different lengths (token ids, audio frames: data [T_i, ...] with the
/// same trailing dims and dtype): data padded with `padding_value` to [B, T_max, ...] (batch_first)
/// or [T_max, B, ...], `lengths` [B]; targets of one element each are stacked to [B], longer ones
/// ([T_i, ...], per-token labels) padded the same way with `target_padding_value` (-100: the losses'
/// default ignore_index). Pass lengths on to pack_padded_sequence or to a key-padding mask.
CollateFn pad_collate(double padding_value = 0.0, double target_padding_value = -100.0, bool batch_first = true);

/// Prints "mpx: warning: <msg>" to stderr (serialised across threads).
void warn(const std::string& msg);

}  // namespace mpx::data
