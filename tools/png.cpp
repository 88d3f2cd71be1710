// PNG encoding with zlib: signature, IHDR, one IDAT (filter 0 rows, deflate), IEND, CRC-32 per chunk.
#include "tools/png.h"

#include <zlib.h>

#include "core/error.h"
#include "tools/metrics.h"

namespace mpx::cli {

namespace {

void put32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void chunk(std::string& out, const char type[4], const std::string& data) {
  put32(out, static_cast<uint32_t>(data.size()));
  std::string body(type, 4);
  body += data;
  out += body;
  put32(out, static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
}

}  // namespace

std::string encode_png(const std::vector<uint8_t>& pixels, int width, int height, int channels) {
  MPX_CHECK(width > 0 && height > 0 && (channels == 1 || channels == 3),
            "encode_png: need a positive size and 1 or 3 channels, got ", width, "x", height, "x", channels);
  const size_t row = static_cast<size_t>(width) * channels;
  MPX_CHECK(pixels.size() == row * height, "encode_png: ", pixels.size(), " bytes for a ", width, "x", height, "x",
            channels, " image");
  // Each scanline is prefixed by its filter type; 0 (none) keeps the writer trivial and the
  // files are small anyway (a few hundred pixels square).
  std::string raw;
  raw.reserve((row + 1) * height);
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(pixels.data() + row * y), row);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::string z(zlen, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()),
                           static_cast<uLong>(raw.size()), Z_BEST_COMPRESSION);
  MPX_CHECK(rc == Z_OK, "encode_png: zlib compress2 failed with code ", rc);
  z.resize(zlen);

  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  put32(ihdr, static_cast<uint32_t>(width));
  put32(ihdr, static_cast<uint32_t>(height));
  ihdr.push_back(8);                               // bit depth
  ihdr.push_back(channels == 1 ? 0 : 2);           // colour type: grey / RGB
  ihdr.append(std::string("\0\0\0", 3));           // deflate, adaptive filtering, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", "");
  return out;
}

void write_png(const std::string& path, const std::vector<uint8_t>& pixels, int width, int height, int channels) {
  write_file_atomic(path, encode_png(pixels, width, height, channels));
}

}  // namespace mpx::cli
