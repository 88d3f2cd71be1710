// Host stand-in for cub::DeviceRadixSort::SortPairs in the emulated kernel tests: a stable sort on the key bits.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace cub {
struct DeviceRadixSort {
  template <typename K, typename V>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out, const V* values_in,
                               V* values_out, int n, int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t = nullptr) {
    if (temp == nullptr) {
      temp_bytes = 16;
      return cudaSuccess;
    }
    const uint64_t mask = (end_bit - begin_bit >= 64 ? ~uint64_t(0) : ((uint64_t(1) << (end_bit - begin_bit)) - 1))
                          << begin_bit;
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return (static_cast<uint64_t>(keys_in[a]) & mask) < (static_cast<uint64_t>(keys_in[b]) & mask);
    });
    for (int i = 0; i < n; ++i) {
      keys_out[i] = keys_in[order[i]];
      values_out[i] = values_in[order[i]];
    }
    return cudaSuccess;
  }
};
}  // namespace cub
