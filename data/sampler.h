// Samplers: which dataset indices an epoch visits and in what order, a pure function of
// (seed, epoch) so the order never depends on worker count or timing.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace mpx::data {

/// Chooses the index order of one epoch.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices for `epoch`; must be deterministic in (construction arguments, epoch).
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  /// How many indices every epoch yields.
  virtual int64_t size() const = 0;
};

/// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

/// A fresh permutation of [0, n) per epoch, seeded by (seed, epoch).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

/// torch.utils.data.DistributedSampler: every rank draws the same (optionally shuffled)
/// order, pads it by wrap-around to a multiple of world_size (or drops the tail when
/// drop_last), and takes indices rank, rank + world_size, ... — disjoint equal-size shards.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t rank, int64_t world_size, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return num_samples_; }

 private:
  int64_t n_, rank_, world_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
};

/// A permutation of [0, n) that depends only on (seed, epoch) (Fisher-Yates over mpx's
/// counter-based random numbers).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace mpx::data
