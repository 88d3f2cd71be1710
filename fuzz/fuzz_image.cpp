// Fuzz target: every image decoder the loader uses (read_image, the header check ImageFolder runs,
// and ImagePipeline's reduced-size region decode).
#include <cstdint>

#include "data/datasets.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // 4 M pixels (not the default 179 M) keeps each run fast under the sanitizers; the decoders'
  // allocations scale with it, and with kMaxImagePixels they stay within -malloc_limit_mb too.
  static const bool limited = (mpx::data::set_max_image_pixels(int64_t{1} << 22), true);
  (void)limited;
  const std::string path = mpx::fuzz::scratch_file(data, size, ".img");
  (void)mpx::data::image_header_problem(path);
  for (int channels : {3, 0}) {
    mpx::fuzz::expect_clean_failure([&] {
      if (mpx::fuzz::touch(mpx::data::read_image(path, channels)) == 0xdeadbeef) std::puts("");
    });
  }
  // Two crops (seeded from the input, so a finding replays) at whatever DCT scale they pick.
  static const auto train = mpx::data::ImagePipeline::train(32), eval = mpx::data::ImagePipeline::eval(40, 32);
  for (const auto* p : {&train, &eval}) {
    mpx::fuzz::expect_clean_failure([&] {
      if (mpx::fuzz::touch(p->load(path, size)) == 0xdeadbeef) std::puts("");
    });
  }
  return 0;
}
