// Index orders for an epoch: sequential, seeded permutations and distributed shards.
#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/random.h"

namespace mpx::data {

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  const uint64_t key = random::hash(seed, static_cast<uint64_t>(epoch), 0x51f);
  for (int64_t i = n - 1; i > 0; --i) {
    // Multiply-shift maps 64 random bits to [0, i] without modulo's bias beyond 2^-40.
    const uint64_t r = random::hash(key, static_cast<uint64_t>(i), 0x520);
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  MPX_CHECK(n >= 0, "SequentialSampler: size must be >= 0, got ", n);
}
std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> p(static_cast<size_t>(n_));
  std::iota(p.begin(), p.end(), int64_t{0});
  return p;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  MPX_CHECK(n >= 0, "RandomSampler: size must be >= 0, got ", n);
}
std::vector<int64_t> RandomSampler::indices(int64_t epoch) const { return permutation(n_, seed_, epoch); }

DistributedSampler::DistributedSampler(int64_t n, int64_t rank, int64_t world_size, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), rank_(rank), world_size_(world_size), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  MPX_CHECK(world_size >= 1, "DistributedSampler: world_size must be >= 1, got ", world_size);
  MPX_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank, " is outside [0, ", world_size, ")");
  MPX_CHECK(n >= 0, "DistributedSampler: size must be >= 0, got ", n);
  // torch's arithmetic: drop the ragged tail, or pad up to a multiple of world_size.
  if (drop_last && n % world_size != 0)
    num_samples_ = (n - world_size + world_size - 1) / world_size;
  else
    num_samples_ = (n + world_size - 1) / world_size;
  if (num_samples_ < 0) num_samples_ = 0;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all = shuffle_ ? permutation(n_, seed_, epoch) : SequentialSampler(n_).indices(epoch);
  const int64_t total = num_samples_ * world_size_;
  if (!drop_last_ && !all.empty()) {
    const size_t base = all.size();
    for (size_t k = 0; static_cast<int64_t>(all.size()) < total; ++k) all.push_back(all[k % base]);
  }
  all.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace mpx::data
