// A minimal PNG writer (8-bit grey or RGB, zlib deflate) for the sample grids `mpx dcgan` saves.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpx::cli {

/// Encodes `pixels` (row-major, `channels` 1 = grey or 3 = RGB, 8 bits each) as a PNG file image.
std::string encode_png(const std::vector<uint8_t>& pixels, int width, int height, int channels);
/// encode_png written atomically to `path`.
void write_png(const std::string& path, const std::vector<uint8_t>& pixels, int width, int height, int channels);

}  // namespace mpx::cli
