// Fuzz target: the IDX reader (plain and gzip'd, told apart by content as for real files).
#include <cstdint>

#include "data/idx.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpx::fuzz::scratch_file(data, size, ".idx");
  mpx::fuzz::expect_clean_failure([&] {
    if (mpx::fuzz::touch(mpx::data::read_idx(path)) == 0xdeadbeef) std::puts("");
  });
  return 0;
}
