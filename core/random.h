// Seeded, counter-based random numbers: element i of a draw depends only on (seed, offset + i),
// so results are identical for any thread count and can be reproduced on the GPU.
#pragma once
#include <cmath>
#include <cstdint>
#include <mutex>

// The hash and the draws below also compile as device code, so CUDA kernels produce the
// same stream as the CPU.
#if defined(__CUDACC__)
#define MPX_RANDOM_HD __host__ __device__
#else
#define MPX_RANDOM_HD
#endif

namespace mpx {

/// Seeds the default generator (CPU and, when built, CUDA draws).
void manual_seed(uint64_t seed);

class Tensor;
/// The default generator's state, its seed and offset as a 2-element i64 CPU tensor: saved beside
/// a checkpoint and given back to set_rng_state, the draws that follow (dropout masks, shuffles,
/// initializations) repeat exactly (torch.get_rng_state / set_rng_state).
Tensor get_rng_state();
/// Restores a state get_rng_state returned; anything else is refused.
void set_rng_state(const Tensor& state);

namespace random {

/// 64-bit mix of (key, counter, stream); a stateless hash in the spirit of Philox. The constant
/// keeps (0, 0, 0) from being a fixed point: without it seed 0's first uniform draw was exactly 0.
MPX_RANDOM_HD inline uint64_t hash(uint64_t key, uint64_t counter, uint64_t stream) {
  uint64_t z = key * 0x9E3779B97F4A7C15ull + counter * 0xD1B54A32D192ED03ull + stream * 0x8CB92BA72F3D8DD7ull +
               0x243F6A8885A308D3ull;
  z ^= z >> 30; z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27; z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  z += key;
  z ^= z >> 29; z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 32;
  return z;
}
/// Uniform in [0, 1) with 53 random bits.
MPX_RANDOM_HD inline double uniform(uint64_t seed, uint64_t pos, uint64_t stream = 0) {
  return static_cast<double>(hash(seed, pos, stream) >> 11) * (1.0 / 9007199254740992.0);
}
/// Standard normal by Box-Muller over two independent streams of the same position.
MPX_RANDOM_HD inline double normal(uint64_t seed, uint64_t pos) {
  const double u1 = 1.0 - uniform(seed, pos, 1);  // (0, 1]: log stays finite
  const double u2 = uniform(seed, pos, 2);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// The default generator: a seed and an offset that each draw advances by its size.
class Generator {
 public:
  void seed(uint64_t s) { std::lock_guard<std::mutex> l(m_); seed_ = s; offset_ = 0; }
  /// Reserves n positions; returns (seed, first position).
  std::pair<uint64_t, uint64_t> reserve(uint64_t n) {
    std::lock_guard<std::mutex> l(m_);
    auto r = std::make_pair(seed_, offset_);
    offset_ += n;
    return r;
  }
  uint64_t current_seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { std::lock_guard<std::mutex> l(m_); seed_ = seed; offset_ = offset; }

 private:
  std::mutex m_;
  uint64_t seed_ = 0x5eed;
  uint64_t offset_ = 0;
};
Generator& default_generator();

}  // namespace random
}  // namespace mpx
