// Image structure checks before decoding, all found by fuzz_image: stb_image 2.27 builds a JPEG
// Huffman table of as many codes as a DHT segment declares into a 257-entry array (newer stb
// versions check the count), grows its PNG IDAT buffer to each chunk's declared length before
// reading it, so a 64-byte PNG could make it allocate 2 GB, and decodes a truncated BMP in full.
#include "data/image_check.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace mpx::data {
namespace {

// Buffered sequential reads; the end of the file is a sticky state that just ends a walk (the
// decoder reports truncation itself).
class Reader {
 public:
  explicit Reader(std::FILE* f) : f_(f) {}
  bool eof() const { return eof_; }
  int byte() {
    if (pos_ == len_ && !fill()) return -1;
    return buf_[pos_++];
  }
  int u16() {
    const int hi = byte(), lo = byte();
    return eof_ ? -1 : (hi << 8) | lo;
  }
  void skip(uint64_t n) {
    const uint64_t here = len_ - pos_;
    if (n <= here) {
      pos_ += n;
      return;
    }
    pos_ = len_;
    if (std::fseek(f_, static_cast<long>(n - here), SEEK_CUR) != 0) eof_ = true;
  }
  // Moves to the next 0xFF byte (entropy-coded JPEG data is skipped this way, a buffer at a time).
  void to_next_ff() {
    while (!eof_) {
      if (pos_ == len_ && !fill()) return;
      const void* p = std::memchr(buf_ + pos_, 0xff, len_ - pos_);
      if (p) {
        pos_ = static_cast<size_t>(static_cast<const unsigned char*>(p) - buf_);
        return;
      }
      pos_ = len_;
    }
  }

 private:
  bool fill() {
    len_ = std::fread(buf_, 1, sizeof buf_, f_);
    pos_ = 0;
    eof_ = len_ == 0;
    return !eof_;
  }
  std::FILE* f_;
  unsigned char buf_[16384];
  size_t pos_ = 0, len_ = 0;
  bool eof_ = false;
};

// The tables of one DHT segment of `len` payload bytes: at most 256 codes each.
std::string check_dht(Reader& r, int len) {
  while (len > 0 && !r.eof()) {
    r.byte();  // table class and id
    int codes = 0;
    // Bytes past the end count as 0, as stb_image reads them: a truncated table is checked too.
    for (int i = 0; i < 16; ++i) codes += std::max(0, r.byte());
    if (codes > 256) return "corrupt JPEG: a Huffman table declares " + std::to_string(codes) + " codes (at most 256)";
    r.skip(static_cast<uint64_t>(codes));
    len -= 17 + codes;
  }
  return "";
}

// Walks the markers as stb_image reads them (padding between segments skipped to the next 0xFF;
// after SOS, entropy-coded data up to a marker other than FF00 and RSTn) and checks every DHT,
// including those between the scans of a progressive JPEG.
std::string jpeg_problem(Reader& r) {
  int pending = -1;  // a marker found while skipping entropy-coded data
  while (!r.eof()) {
    int m = pending;
    pending = -1;
    if (m < 0) {
      r.to_next_ff();
      do m = r.byte();
      while (m == 0xff);
    }
    if (r.eof() || m == 0xd9) return "";                 // EOI
    if ((m >= 0xd0 && m <= 0xd7) || m == 0x01) continue;  // standalone markers
    const int len = r.u16();
    if (len < 2) return "";
    if (m == 0xc4) {
      if (std::string p = check_dht(r, len - 2); !p.empty()) return p;
      continue;
    }
    r.skip(static_cast<uint64_t>(len - 2));
    if (m != 0xda) continue;
    while (!r.eof()) {  // SOS: the scan's data
      r.to_next_ff();
      r.byte();
      int n = r.byte();
      while (n == 0xff) n = r.byte();
      if (n != 0x00 && !(n >= 0xd0 && n <= 0xd7)) {
        pending = n;
        break;
      }
    }
  }
  return "";
}

// Every chunk (length, type, data, CRC) must fit in what is left of the file.
std::string png_problem(Reader& r, int64_t file_bytes) {
  int64_t at = 8;  // after the signature
  while (!r.eof()) {
    uint32_t len = 0;
    for (int i = 0; i < 4; ++i) len = (len << 8) | static_cast<uint32_t>(std::max(0, r.byte()));
    if (r.eof()) return "";
    const int64_t left = std::max<int64_t>(0, file_bytes - at - 12);
    if (static_cast<int64_t>(len) > left)
      return "corrupt or truncated PNG: a chunk declares " + std::to_string(len) + " bytes but the file has " +
             std::to_string(left) + " left";
    char type[4];
    for (char& c : type) c = static_cast<char>(r.byte());
    if (std::memcmp(type, "IEND", 4) == 0) return "";
    // stb_image copies an empty IDAT into its not yet allocated buffer (memcpy to null).
    if (len == 0 && std::memcmp(type, "IDAT", 4) == 0) return "unsupported PNG: an empty IDAT chunk";
    r.skip(uint64_t{len} + 4);
    at += 12 + static_cast<int64_t>(len);
  }
  return "";
}

// An uncompressed BMP stores every row whole from the header's data offset on, so the file must
// hold the rows it declares. stb_image reads past the end as zeros instead of failing: an 87-byte
// BMP declaring 2048 x 1536 pixels was decoded (and allocated) in full, seconds per read under the
// sanitizers (found by fuzz_image as a timeout), and a few bytes could claim the whole pixel limit.
std::string bmp_problem(Reader& r, int64_t file_bytes) {
  auto le = [&r](int bytes) {
    uint32_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint32_t>(std::max(0, r.byte())) << (8 * i);
    return v;
  };
  le(2);  // the second reserved field: the signature check read the first 8 bytes
  const int64_t offset = le(4);
  const uint32_t header = le(4);
  int64_t w = 0, h = 0;
  if (header == 12) {
    w = le(2), h = le(2);
  } else {
    w = static_cast<int32_t>(le(4)), h = std::abs(int64_t{static_cast<int32_t>(le(4))});  // < 0: top-down rows
  }
  le(2);  // planes
  const int64_t bits = le(2);
  const int32_t compression = header == 12 ? 0 : static_cast<int32_t>(le(4));
  // What stb_image refuses by itself (other header sizes, RLE and other compressions, odd depths,
  // sizes beyond its 2^24 limit) is left to it. It reads the compression as a signed number and
  // refuses only 1, 2 and 4 and above, so a negative one is read as plain rows too (fuzz_image).
  if (header != 12 && header != 40 && header != 56 && header != 108 && header != 124) return "";
  if (r.eof() || compression == 1 || compression == 2 || compression >= 4) return "";
  if (bits != 1 && bits != 4 && bits != 8 && bits != 16 && bits != 24 && bits != 32) return "";
  if (w <= 0 || h <= 0 || w > (int64_t{1} << 24) || h > (int64_t{1} << 24)) return "";
  const int64_t row = (w * bits + 7) / 8, stride = (row + 3) / 4 * 4;
  const int64_t need = offset + stride * (h - 1) + row;  // the last row's padding may be missing
  if (need <= file_bytes) return "";
  return "corrupt or truncated BMP: its header declares " + std::to_string(w) + " x " + std::to_string(h) +
         " pixels of " + std::to_string(bits) + " bits, " + std::to_string(need) + " bytes with the header, but the file has " +
         std::to_string(file_bytes);
}

}  // namespace

std::string image_structure_problem(std::FILE* f) {
  const long start = std::ftell(f);
  std::fseek(f, 0, SEEK_END);
  const int64_t file_bytes = std::ftell(f) - start;
  std::fseek(f, start, SEEK_SET);
  Reader r(f);
  unsigned char sig[8] = {};
  for (auto& b : sig) b = static_cast<unsigned char>(r.byte());
  static const unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::string problem;
  if (!r.eof() && std::equal(sig, sig + 8, kPng)) {
    problem = png_problem(r, file_bytes);
  } else if (!r.eof() && sig[0] == 'B' && sig[1] == 'M') {
    problem = bmp_problem(r, file_bytes);
  } else if (sig[0] == 0xff) {  // a JPEG if SOI follows: stb_image skips 0xFF fill bytes before it too
    std::clearerr(f);
    std::fseek(f, start + 1, SEEK_SET);
    Reader j(f);
    int m = j.byte();
    while (m == 0xff) m = j.byte();
    if (m == 0xd8) problem = jpeg_problem(j);
  }
  std::clearerr(f);
  std::fseek(f, start, SEEK_SET);
  return problem;
}

bool is_jpeg(std::FILE* f) {
  const long start = std::ftell(f);
  int c = std::fgetc(f);
  bool jpeg = false;
  if (c == 0xff) {
    while ((c = std::fgetc(f)) == 0xff) {
    }
    jpeg = c == 0xd8;
  }
  std::clearerr(f);
  std::fseek(f, start, SEEK_SET);
  return jpeg;
}

}  // namespace mpx::data
