// Fuzz target: safetensors parsed from memory (header JSON, dtypes, shapes, offsets, metadata).
#include <cstdint>

#include "core/serialize.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mpx::fuzz::expect_clean_failure([&] {
    mpx::Metadata meta;
    const mpx::TensorDict tensors = mpx::deserialize_tensors(data, size, &meta);
    // Read every byte each tensor claims: a bad offset that got through shows up under ASan.
    uint64_t sum = 0;
    for (const auto& [name, t] : tensors) {
      const auto* p = static_cast<const unsigned char*>(t.raw_data());
      const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
      for (int64_t i = 0; i < n; ++i) sum += p[i];
    }
    for (const auto& [k, v] : meta) sum += k.size() + v.size();
    if (sum == 0xdeadbeef) std::puts("");  // keeps the reads
  });
  return 0;
}
