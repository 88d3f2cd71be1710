// IDX reader over zlib's gz* API, which also reads uncompressed files as they are.
#include "data/idx.h"

#include <zlib.h>

#include <filesystem>
#include <memory>

#include "ops/reduction.h"

namespace mpx::data {
namespace {
struct GzCloser {
  void operator()(gzFile_s* f) const { if (f) gzclose(f); }
};

// deflate's largest expansion, about 1032:1 (zlib's documentation), bounds what a gzip file of a
// given size can decompress to.
constexpr uint64_t kMaxDeflateRatio = 1032;

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void read_exact(gzFile f, void* dst, size_t n, const std::string& path, const char* what) {
  size_t got = 0;
  auto* p = static_cast<unsigned char*>(dst);
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    const int r = gzread(f, p + got, chunk);
    if (r <= 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      MPX_ERROR("read_idx: ", path, " is truncated or corrupt while reading the ", what, " (", got, " of ", n,
                " bytes read", err ? std::string("; ") + msg : std::string(), ")");
    }
    got += static_cast<size_t>(r);
  }
}
}  // namespace

Tensor read_idx(const std::string& path) {
  MPX_CHECK(std::filesystem::exists(path), "read_idx: ", path, " does not exist");
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  MPX_CHECK(f, "read_idx: cannot open ", path);
  unsigned char head[4];
  read_exact(f.get(), head, 4, path, "magic number");
  MPX_CHECK(head[0] == 0 && head[1] == 0 && head[2] == 0x08 && head[3] >= 1 && head[3] <= 4, "read_idx: ", path,
            " is not an unsigned-byte IDX file (magic ", std::hex, be32(head), "); expected 0x0000080N");
  const int nd = head[3];
  IntList shape;
  uint64_t total = 1;
  for (int i = 0; i < nd; ++i) {
    unsigned char b[4];
    read_exact(f.get(), b, 4, path, "dimensions");
    const uint32_t d = be32(b);
    MPX_CHECK(d > 0 && d < (1u << 28), "read_idx: ", path, " has an implausible dimension ", d);
    shape.push_back(d);
    total *= d;
    MPX_CHECK(total < (1ull << 34), "read_idx: ", path, " declares more data than any IDX file holds");
  }
  // Allocate only what the file can hold: a header may claim anything (a 12-byte file once asked
  // for 16.9 GB). Uncompressed, the data must be exactly the rest of the file; gzip'd, it cannot
  // exceed deflate's maximum expansion of the file's size.
  const uint64_t header_bytes = 4 + 4 * static_cast<uint64_t>(nd);
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  MPX_CHECK(!ec, "read_idx: cannot read the size of ", path, ": ", ec.message());
  if (gzdirect(f.get())) {
    MPX_CHECK(file_bytes >= header_bytes + total, "read_idx: ", path, " is truncated: its header declares ",
              shape_str(shape), " (", total, " bytes of data) but the file holds ", file_bytes - header_bytes);
    MPX_CHECK(file_bytes == header_bytes + total, "read_idx: ", path, " has data past the declared size ",
              shape_str(shape), " (", file_bytes - header_bytes - total, " extra bytes)");
  } else {
    MPX_CHECK(total <= kMaxDeflateRatio * file_bytes, "read_idx: ", path, " declares ", shape_str(shape), " (", total,
              " bytes of data), more than a gzip file of ", file_bytes, " bytes can hold (deflate expands at most ",
              kMaxDeflateRatio, "x): the header or the file is corrupt");
  }
  Tensor t = empty(shape, kUInt8);
  read_exact(f.get(), t.raw_data(), total, path, "data");
  unsigned char extra;
  MPX_CHECK(gzread(f.get(), &extra, 1) == 0, "read_idx: ", path, " has data past the declared size ", shape_str(shape));
  return t;
}

MnistSplit read_mnist(const std::string& root, bool train) {
  const std::string pre = train ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    for (const char* ext : {"", ".gz"}) {
      const std::string p = root + "/" + stem + ext;
      if (std::filesystem::exists(p)) return p;
    }
    MPX_ERROR("read_mnist: ", root, "/", stem, "[.gz] not found; install the data set (Debian: dataset-fashion-mnist) "
              "or pass the directory that holds the IDX files");
  };
  MnistSplit s;
  s.images = read_idx(find(pre + "-images-idx3-ubyte"));
  Tensor labels = read_idx(find(pre + "-labels-idx1-ubyte"));
  MPX_CHECK(s.images.dim() == 3, "read_mnist: images file in ", root, " has shape ", shape_str(s.images.sizes()),
            ", expected [N, rows, cols]");
  MPX_CHECK(labels.dim() == 1 && labels.size(0) == s.images.size(0), "read_mnist: ", s.images.size(0), " images but ",
            labels.numel(), " labels in ", root);
  s.labels = labels.to(kInt64);
  MPX_CHECK(max(s.labels).item<int64_t>() < 10, "read_mnist: labels in ", root, " exceed 9");
  return s;
}

}  // namespace mpx::data
