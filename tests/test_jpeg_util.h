// Test images for the JPEG and fused-transform tests: photograph-like pixels (smooth fields,
// edges, grain) written as JPEGs with stb_image_write, and a temporary folder.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "tests/test_files.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

/// Catch2 v2 has no SKIP: the case warns and passes when the build lacks what it tests.
#define MPX_JPEG_SKIP(why) \
  do {                     \
    WARN("skipped: " why); \
    return;                \
  } while (0)

namespace mpx_test {

using mpx::testing::TempDir;

/// u8 RGB [h][w][3]: low-frequency colour fields, a few hard-edged shapes and fine grain, so
/// JPEG coding, chroma subsampling and resampling all have something to get wrong.
inline std::vector<unsigned char> photo_like(int w, int h, uint32_t seed) {
  std::vector<unsigned char> px(static_cast<size_t>(w) * h * 3);
  uint32_t s = seed * 2654435761u + 1;
  auto rnd = [&] {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    return static_cast<double>(s) / 4294967296.0;
  };
  double f[3][4];
  for (auto& c : f)
    for (double& v : c) v = rnd();
  const double cx = w * (0.3 + 0.4 * rnd()), cy = h * (0.3 + 0.4 * rnd()), r = 0.25 * std::min(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        double v = 128 + 60 * std::sin(x * (0.01 + 0.05 * f[c][0]) + 6.28 * f[c][1]) *
                             std::cos(y * (0.01 + 0.05 * f[c][2]) + 6.28 * f[c][3]);
        if ((x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r) v = 255 - v * 0.7;  // a disc with a hard rim
        if (x > w * 2 / 3 && y < h / 3) v = c == 0 ? 230 : 40;                     // a saturated block
        v += 24 * (rnd() - 0.5);                                                    // grain
        px[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<unsigned char>(std::clamp(v, 0.0, 255.0));
      }
  return px;
}

/// Writes photo_like(w, h, seed) as a JPEG of `quality` (stb_image_write subsamples chroma 4:2:0
/// at quality <= 90, none above).
inline std::string write_photo_jpeg(const std::filesystem::path& p, int w, int h, uint32_t seed, int quality = 90) {
  const auto px = photo_like(w, h, seed);
  std::filesystem::create_directories(p.parent_path());
  if (!stbi_write_jpg(p.string().c_str(), w, h, 3, px.data(), quality)) return "";
  return p.string();
}

inline std::vector<unsigned char> read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}
inline void write_bytes(const std::string& p, const std::vector<unsigned char>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace mpx_test
