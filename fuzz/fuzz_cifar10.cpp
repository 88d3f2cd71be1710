// Fuzz target: the CIFAR-10 binary reader (a test_batch.bin of any content).
#include <unistd.h>

#include <cstdint>
#include <filesystem>

#include "data/datasets.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string r = std::string(tmp && *tmp ? tmp : "/tmp") + "/mpx-fuzz-cifar-" + std::to_string(::getpid());
    std::filesystem::create_directories(r);
    return r;
  }();
  std::FILE* f = std::fopen((root + "/test_batch.bin").c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  mpx::fuzz::expect_clean_failure([&] {
    mpx::data::CIFAR10 ds(root, /*train=*/false);
    for (int64_t i = 0; i < ds.size(); ++i) (void)ds.get(i);
  });
  return 0;
}
