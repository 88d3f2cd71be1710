// Fuzz target: the IDX reader (plain and gzip'd, told apart by content as for real files).
#include <cstdint>

#include "data/idx.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpx::fuzz::scratch_file(data, size, ".idx");
  mpx::fuzz::expect_clean_failure([&] {
    const mpx::Tensor t = mpx::data::read_idx(path);
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    uint64_t sum = 0;
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) sum += p[i];
    if (sum == 0xdeadbeef) std::puts("");
  });
  return 0;
}
