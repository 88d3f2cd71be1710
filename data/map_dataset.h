// LibTorch's dataset chain: `dataset.map(transform)...map(Stack<>())`, its own-class datasets
// (`Dataset<Self>`) and make_data_loader, over mpx's DataLoader.
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace mpx::data {

namespace transforms {

/// LibTorch's batch transform: ends a chain (`.map(Stack<>())`) so the loader stacks a batch's
/// examples into one Batch (data [B, ...], target [B]), as mpx's loader always does. Transforms
/// mapped after it run on the stacked batch.
template <typename E = Example<>>
struct Stack {
  static_assert(std::is_same_v<E, Example<>>, "transforms::Stack: only Stack<> (of Example<>) is supported");
};

/// LibTorch's Lambda: `fn` applied to each whole example (data and target).
template <typename Input = Example<>, typename Output = Input>
struct Lambda {
  explicit Lambda(std::function<Output(Input)> fn) : fn_(std::move(fn)) {}
  Output operator()(Input in) const { return fn_(std::move(in)); }

 private:
  std::function<Output(Input)> fn_;
};

/// LibTorch's TensorLambda: `fn` applied to each example's data.
template <typename Target = Tensor>
struct TensorLambda : Transform {
  explicit TensorLambda(std::function<Tensor(Tensor)> fn)
      : Transform([fn = std::move(fn)](const Tensor& x, Rng&) { return fn(x); }, "TensorLambda") {}
};

/// LibTorch's TensorTransform: derive from it and override `Tensor operator()(Tensor input)`; mapped
/// on a dataset it runs on each example's data. Its randomness, if any, is the global generator's
/// (torch::rand, ...), as in LibTorch; mpx's own transforms (RandomCrop, ...) draw per-sample streams
/// and are reproducible under any number of workers.
template <typename Target = Tensor>
struct TensorTransform {
  using E = Example<Tensor, Target>;
  virtual ~TensorTransform() = default;
  virtual Tensor operator()(Tensor input) = 0;
  E apply(E example) {
    example.data = (*this)(std::move(example.data));
    return example;
  }
};

}  // namespace transforms

namespace datasets {

template <typename Source, typename AppliedTransform>
class MapDataset;

/// LibTorch's `.map(transform)` for a dataset class `Self`: the dataset (copied, or moved from an
/// rvalue) with `transform` applied to each example it gives, or, after `transforms::Stack<>()`,
/// to each batch.
template <typename Self>
class Mappable {
 public:
  template <typename T>
  MapDataset<Self, T> map(T transform) const& {
    return {static_cast<const Self&>(*this), std::move(transform)};
  }
  template <typename T>
  MapDataset<Self, T> map(T transform) && {
    return {std::move(static_cast<Self&>(*this)), std::move(transform)};
  }
};

/// LibTorch's Dataset<Self>: derive `struct Mine : Dataset<Mine>` and override `get(size_t)` and
/// `size()`; pass it (or a `.map(...)` chain with a `Stack<>` in it) to make_data_loader. As in
/// LibTorch, each loading thread works on its own copy of the dataset (a dataset that cannot be
/// copied is called by one thread at a time), so `get` may keep state.
template <typename Self, typename SingleExample = Example<>>
class Dataset : public Mappable<Self> {
 public:
  using ExampleType = SingleExample;
  virtual ~Dataset() = default;
  /// The example at `index` in [0, size()).
  virtual ExampleType get(size_t index) = 0;
  /// The number of examples; make_data_loader needs it known.
  virtual std::optional<size_t> size() const = 0;
};

}  // namespace datasets

namespace detail {

template <typename T>
inline constexpr bool is_stack = false;
template <typename E>
inline constexpr bool is_stack<transforms::Stack<E>> = true;
template <typename D>
inline constexpr bool is_map = false;
template <typename S, typename T>
inline constexpr bool is_map<datasets::MapDataset<S, T>> = true;
template <typename>
inline constexpr bool always_false = false;

/// A dataset of mpx's own (const, thread-safe get_seeded) rather than LibTorch's Dataset<Self>.
template <typename D>
concept native_dataset = std::derived_from<D, data::Dataset>;

/// Whether the chain `D` has a Stack<> in it, and how many maps it is deep.
template <typename D>
constexpr bool has_stack() {
  if constexpr (is_map<D>)
    return is_stack<typename D::TransformType> || has_stack<typename D::DatasetType>();
  else
    return false;
}
template <typename D>
constexpr uint64_t depth() {
  if constexpr (is_map<D>)
    return 1 + depth<typename D::DatasetType>();
  else
    return 0;
}
/// The chain's first dataset (the one that is not a map) is one of mpx's.
template <typename D>
constexpr bool native_source() {
  if constexpr (is_map<D>)
    return native_source<typename D::DatasetType>();
  else
    return native_dataset<D>;
}

template <typename D>
std::optional<size_t> size_of(const D& d) {
  if constexpr (is_map<D>)
    return size_of(d.dataset());
  else if constexpr (native_dataset<D>)
    return static_cast<size_t>(d.size());
  else
    return d.size();
}

/// The seed of map stage `k` for the sample whose seed is `seed`: each stage draws its own stream.
inline uint64_t stage_seed(uint64_t seed, uint64_t k) { return k == 0 ? seed : sample_seed(seed, static_cast<int64_t>(k), 0); }

/// One mapped transform on one example.
template <typename T>
Example<> apply(const T& t, Example<> e, uint64_t seed) {
  if constexpr (std::derived_from<T, transforms::Transform>) {
    e.data = t(e.data, seed);
    return e;
  } else if constexpr (std::derived_from<T, transforms::TensorTransform<Tensor>>) {
    // LibTorch's operator() is not const; the chain holds the transform as a value it only reads.
    e.data = const_cast<T&>(t)(std::move(e.data));
    return e;
  } else if constexpr (std::is_invocable_r_v<Example<>, const T&, Example<>>) {
    return t(std::move(e));
  } else {
    static_assert(always_false<T>,
                  "map(): a transform is a transforms::Transform (Normalize<>, TensorLambda<>, ...), a "
                  "TensorTransform<> subclass, a callable Example<> -> Example<> (Lambda<Example<>>), or "
                  "transforms::Stack<>");
  }
}

/// Example `i` of the chain `d` up to its Stack<>: the source's, then every map's transform in order.
template <typename D>
Example<> fetch(D& d, int64_t i, uint64_t seed) {
  if constexpr (is_map<D>) {
    static_assert(!is_stack<typename D::TransformType>, "fetch: called past a Stack<>");
    return apply(d.transform(), fetch(d.dataset(), i, seed), stage_seed(seed, depth<D>()));
  } else if constexpr (native_dataset<D>) {
    return d.get_seeded(i, seed);
  } else {
    static_assert(std::is_same_v<typename D::ExampleType, Example<>>,
                  "make_data_loader: the dataset's examples must be Example<> (Tensor data and target)");
    return d.get(static_cast<size_t>(i));
  }
}

/// The part of the chain `d` before its Stack<>.
template <typename D>
auto& before_stack(D& d) {
  if constexpr (is_stack<typename D::TransformType>)
    return d.dataset();
  else
    return before_stack(d.dataset());
}

/// Whether transforms follow the Stack<> in `D`.
template <typename D>
constexpr bool maps_after_stack() {
  return !is_stack<typename D::TransformType>;
}

/// The transforms after the chain's Stack<>, in order, on a stacked batch.
template <typename D>
void apply_after_stack(const D& d, Batch& b, uint64_t seed) {
  if constexpr (!is_stack<typename D::TransformType>) {
    apply_after_stack(d.dataset(), b, seed);
    Example<> e = apply(d.transform(), Example<>(b.data, b.target), stage_seed(seed, depth<D>()));
    b.data = std::move(e.data);
    b.target = std::move(e.target);
  }
}

/// The loader's view of a chain with a Stack<> (and maps after it): examples through the
/// chain, on a copy of it per loading thread where its source is a LibTorch-style dataset.
template <typename D>
class ChainDataset final : public data::Dataset {
 public:
  explicit ChainDataset(D chain) : chain_(std::move(chain)) {
    const std::optional<size_t> n = size_of(chain_);
    MPX_CHECK(n.has_value(), "make_data_loader: the dataset's size() is unknown (nullopt); mpx's loader needs a "
              "dataset that knows its size");
    size_ = static_cast<int64_t>(*n);
  }
  int64_t size() const override { return size_; }
  Example<> get(int64_t index) const override { return get_seeded(index, sample_seed(0, 0, index)); }
  Example<> get_seeded(int64_t index, uint64_t seed) const override {
    MPX_CHECK(index >= 0 && index < size_, "dataset index ", index, " out of range [0, ", size_, ")");
    Lease l = lease();
    return fetch(before_stack(*l.chain), index, seed);
  }
  bool get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& seeds, Batch& out) const override {
    if constexpr (!maps_after_stack<D>()) {
      return false;  // the loader's own get_seeded + collate
    } else {
      std::vector<Example<>> ex;
      ex.reserve(indices.size());
      for (size_t k = 0; k < indices.size(); ++k) ex.push_back(get_seeded(indices[k], seeds[k]));
      const bool pinned = out.pinned;
      out = collate(ex, pinned);
      out.pinned = pinned;
      apply_after_stack(chain_, out, seeds.empty() ? 0 : seeds.front());
      return true;
    }
  }

 private:
  // A copy of the chain lent to one loading thread for one example; mpx's own datasets are
  // thread-safe and share the one chain.
  struct Lease {
    const ChainDataset* owner;
    D* chain;
    std::unique_ptr<D> copy;
    std::unique_lock<std::mutex> serial;  // held where the chain cannot be copied
    ~Lease() {
      if (copy) {
        std::lock_guard<std::mutex> g(owner->mu_);
        owner->spare_.push_back(std::move(copy));
      }
    }
  };
  Lease lease() const {
    auto& chain = const_cast<D&>(chain_);
    if constexpr (native_source<D>()) {
      return Lease{this, &chain, nullptr, {}};
    } else if constexpr (std::is_copy_constructible_v<D>) {
      std::lock_guard<std::mutex> g(mu_);
      std::unique_ptr<D> c;
      if (spare_.empty()) {
        c = std::make_unique<D>(chain_);
      } else {
        c = std::move(spare_.back());
        spare_.pop_back();
      }
      D* p = c.get();
      return Lease{this, p, std::move(c), {}};
    } else {
      return Lease{this, &chain, nullptr, std::unique_lock<std::mutex>(serial_)};
    }
  }

  D chain_;  // the prototype the copies are made from
  int64_t size_ = 0;
  mutable std::mutex mu_, serial_;
  mutable std::vector<std::unique_ptr<D>> spare_;
};

/// Whether the chain `D` is image transforms mapped on one of mpx's data sets that can run them
/// as part of its own transform (followed_by), so the loader gets that data set and its fused pass.
template <typename D>
constexpr bool foldable() {
  if constexpr (is_map<D>)
    return std::derived_from<typename D::TransformType, transforms::Transform> && foldable<typename D::DatasetType>();
  else
    return requires(const D& d, transforms::Transform t) {
      { d.followed_by(t) } -> std::same_as<D>;
    };
}

/// The image transforms of a foldable chain in the order they run, and its data set.
template <typename D>
const auto& fold(const D& d, std::vector<transforms::Transform>& steps) {
  if constexpr (is_map<D>) {
    const auto& source = fold(d.dataset(), steps);
    steps.push_back(d.transform());
    return source;
  } else {
    return d;
  }
}

template <typename D>
std::unique_ptr<DataLoader> loader_over(D dataset, DataLoaderOptions options) {
  if constexpr (native_dataset<D>) {
    return std::make_unique<DataLoader>(std::move(dataset), std::move(options));
  } else if constexpr (is_map<D> && is_stack<typename D::TransformType> && foldable<typename D::DatasetType>()) {
    std::vector<transforms::Transform> steps;
    const auto& source = fold(dataset.dataset(), steps);
    auto folded = steps.empty() ? source : source.followed_by(transforms::Compose(std::move(steps)));
    return std::make_unique<DataLoader>(std::move(folded), std::move(options));
  } else {
    static_assert(has_stack<D>(),
                  "make_data_loader: end the dataset's chain with .map(transforms::Stack<>()); mpx's loader gives "
                  "stacked batches, not vectors of examples");
    if constexpr (maps_after_stack<D>())
      MPX_CHECK(!options.collate_fn_, "make_data_loader: a collate_fn and transforms mapped after Stack<> cannot be "
                "combined; map them before Stack<> or do their work in the collate_fn");
    return std::make_unique<DataLoader>(std::shared_ptr<const data::Dataset>(std::make_shared<const ChainDataset<D>>(
                                            std::move(dataset))),
                                        std::move(options));
  }
}

}  // namespace detail

namespace datasets {

/// A dataset with a transform applied (LibTorch's MapDataset; made by `.map(transform)`).
template <typename Source, typename AppliedTransform>
class MapDataset : public Mappable<MapDataset<Source, AppliedTransform>> {
 public:
  using DatasetType = Source;
  using TransformType = AppliedTransform;
  MapDataset(Source dataset, AppliedTransform transform)
      : dataset_(std::move(dataset)), transform_(std::move(transform)) {}
  /// The source's size (nullopt where the source does not know it).
  std::optional<size_t> size() const { return detail::size_of(dataset_); }
  /// The example at `index` through the chain (a chain with a Stack<> gives batches only, from the loader).
  Example<> get(size_t index)
    requires(!detail::has_stack<MapDataset>())
  {
    const auto i = static_cast<int64_t>(index);
    return detail::fetch(*this, i, sample_seed(0, 0, i));
  }
  /// The examples at `indices` through the chain (LibTorch's get_batch): stacked into one Example<>
  /// where the chain has a Stack<> (with the maps after it applied), else a vector of examples.
  auto get_batch(const std::vector<size_t>& indices) {
    auto examples = [&](auto& chain) {
      std::vector<Example<>> ex;
      ex.reserve(indices.size());
      for (size_t i : indices) ex.push_back(fetch_checked(chain, i));
      return ex;
    };
    if constexpr (detail::has_stack<MapDataset>()) {
      Batch b = collate(examples(detail::before_stack(*this)));
      detail::apply_after_stack(*this, b, indices.empty() ? 0 : sample_seed(0, 0, static_cast<int64_t>(indices[0])));
      return Example<>(std::move(b.data), std::move(b.target));
    } else {
      return examples(*this);
    }
  }
  /// get_batch of one index (LibTorch's `dataset.get_batch(0)`).
  auto get_batch(size_t index) { return get_batch(std::vector<size_t>{index}); }
  const Source& dataset() const { return dataset_; }
  Source& dataset() { return dataset_; }
  const AppliedTransform& transform() const { return transform_; }

 private:
  template <typename D>
  static Example<> fetch_checked(D& d, size_t index) {
    const std::optional<size_t> n = detail::size_of(d);
    MPX_CHECK(!n || index < *n, "get_batch: index ", index, " is out of range for a dataset of ", *n, " examples");
    const auto i = static_cast<int64_t>(index);
    return detail::fetch(d, i, sample_seed(0, 0, i));
  }
  Source dataset_;
  AppliedTransform transform_;
};

/// LibTorch's free-function spelling of `dataset.map(transform)`.
template <typename D, typename T>
MapDataset<D, T> map(D dataset, T transform) {
  return {std::move(dataset), std::move(transform)};
}

}  // namespace datasets

namespace samplers {
using data::DistributedSampler;
using data::RandomSampler;
using data::Sampler;
using data::SequentialSampler;

/// LibTorch's distributed samplers, in its argument order: this rank's share of `size` examples, shuffled
/// each epoch (Random) or in order (Sequential). With allow_duplicates the last share is padded by wrapping
/// around so every rank gets ceil(size / num_replicas); without, the tail is dropped.
struct DistributedRandomSampler : DistributedSampler {
  explicit DistributedRandomSampler(size_t size, size_t num_replicas = 1, size_t rank = 0, bool allow_duplicates = true)
      : DistributedSampler(static_cast<int64_t>(size), static_cast<int64_t>(rank), static_cast<int64_t>(num_replicas),
                           /*shuffle=*/true, /*seed=*/0, /*drop_last=*/!allow_duplicates) {}
};
struct DistributedSequentialSampler : DistributedSampler {
  explicit DistributedSequentialSampler(size_t size, size_t num_replicas = 1, size_t rank = 0,
                                        bool allow_duplicates = true)
      : DistributedSampler(static_cast<int64_t>(size), static_cast<int64_t>(rank), static_cast<int64_t>(num_replicas),
                           /*shuffle=*/false, /*seed=*/0, /*drop_last=*/!allow_duplicates) {}
};
}  // namespace samplers

/// LibTorch's make_data_loader: a loader that owns `dataset` (one of mpx's, or a LibTorch-style
/// chain with a `.map(transforms::Stack<>())`). `SamplerType` picks the order as LibTorch's
/// does: RandomSampler (the default) shuffles every epoch, SequentialSampler does not.
/// Iterate as `for (auto& batch : *loader)`; a batch has `data` and `target`.
template <typename SamplerType = samplers::RandomSampler, typename D>
std::unique_ptr<DataLoader> make_data_loader(D dataset, DataLoaderOptions options) {
  static_assert(std::is_same_v<SamplerType, RandomSampler> || std::is_same_v<SamplerType, SequentialSampler>,
                "make_data_loader<SamplerType>: RandomSampler or SequentialSampler; pass other samplers as an "
                "object, make_data_loader(dataset, sampler, options)");
  options.shuffle(std::is_same_v<SamplerType, RandomSampler>);
  return detail::loader_over(std::move(dataset), std::move(options));
}

/// make_data_loader with default options and `batch_size`.
template <typename SamplerType = samplers::RandomSampler, typename D>
std::unique_ptr<DataLoader> make_data_loader(D dataset, size_t batch_size) {
  return make_data_loader<SamplerType>(std::move(dataset), DataLoaderOptions(static_cast<int64_t>(batch_size)));
}

/// make_data_loader with a sampler object (DistributedSampler, or one of your own) choosing the order.
template <typename D, std::derived_from<Sampler> S>
std::unique_ptr<DataLoader> make_data_loader(D dataset, S sampler, DataLoaderOptions options = {}) {
  options.sampler(std::make_shared<const S>(std::move(sampler)));
  return detail::loader_over(std::move(dataset), std::move(options));
}

}  // namespace mpx::data
