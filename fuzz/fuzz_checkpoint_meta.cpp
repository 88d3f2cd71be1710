// Fuzz target: a checkpoint's metadata, from the safetensors header through the range-checked
// reads the CLI makes of each field on --resume.
#include <cstdint>

#include "core/metadata.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mpx::fuzz::expect_clean_failure([&] {
    mpx::Metadata meta;
    (void)mpx::deserialize_tensors(data, size, &meta);
    using namespace mpx::metadata;
    const std::string f = "<fuzz>";
    for (const char* k : {"epoch", "step_in_epoch", "global_step", "skipped_steps", "threads"})
      mpx::fuzz::expect_clean_failure([&] { (void)get_int(meta, k, f, 0, int64_t{1} << 40); });
    for (const char* k : {"rng.seed", "rng.offset"})
      mpx::fuzz::expect_clean_failure([&] { (void)get_u64(meta, k, f); });
    for (const char* k : {"amp.loss_scaler0.loss_scale", "partial.loss_sum"})
      mpx::fuzz::expect_clean_failure([&] { (void)get_double(meta, k, f, 0.0); });
  });
  return 0;
}
