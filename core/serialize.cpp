// Safetensors reader and writer: header validation (JSON via core/json.h), atomic saves.
#include "core/serialize.h"

#include "core/json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <unordered_set>
#include <vector>

namespace mpx {
namespace {

// ---------------------------------------------------------------------------------------
// dtype codes
// ---------------------------------------------------------------------------------------
const char* st_code(DType t) {
  switch (t) {
    case kFloat32: return "F32";
    case kFloat16: return "F16";
    case kBFloat16: return "BF16";
    case kFloat64: return "F64";
    case kInt64: return "I64";
    case kInt32: return "I32";
    case kUInt8: return "U8";
    case kBool: return "BOOL";
  }
  return "?";
}
// A file dtype: the mpx dtype it loads as and its width in the file. The codes mpx has no dtype for (PyTorch's int8,
// int16, uint16, uint32, uint64 and float8 tensors) are widened on load to a dtype that holds every value exactly.
struct FileDType {
  const char* code;
  DType dtype;
  int width;
  bool widened;
};
constexpr FileDType kFileDTypes[] = {
    {"F32", kFloat32, 4, false}, {"F16", kFloat16, 2, false},   {"BF16", kBFloat16, 2, false}, {"F64", kFloat64, 8, false},
    {"I64", kInt64, 8, false},   {"I32", kInt32, 4, false},     {"U8", kUInt8, 1, false},      {"BOOL", kBool, 1, false},
    {"I8", kInt32, 1, true},     {"I16", kInt32, 2, true},      {"U16", kInt32, 2, true},      {"U32", kInt64, 4, true},
    {"U64", kInt64, 8, true},    {"F8_E4M3", kFloat32, 1, true}, {"F8_E5M2", kFloat32, 1, true}};
const FileDType* st_dtype(const std::string& code) {
  for (const FileDType& f : kFileDTypes)
    if (code == f.code) return &f;
  return nullptr;
}

// float8 bytes as float: E4M3 (PyTorch's float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN) and E5M2 (the
// top byte of an IEEE half).
float f8_e4m3(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  const float mag = e == 15 && m == 7 ? NAN : e == 0 ? std::ldexp(static_cast<float>(m), -9)
                                                     : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return b & 0x80 ? -mag : mag;
}
float f8_e5m2(uint8_t b) {
  Half h;
  const uint16_t bits = static_cast<uint16_t>(b) << 8;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

// ---------------------------------------------------------------------------------------
// Header validation
// ---------------------------------------------------------------------------------------
struct Entry {
  std::string name;
  DType dtype;
  const FileDType* file;  // how the data are stored
  IntList shape;
  uint64_t begin, end;
};

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  MPX_ERROR("load_tensors('", file, "'): ", what);
}

/// Parses and validates the header; `buffer_size` is the number of data bytes after it.
std::vector<Entry> parse_header(const char* hdr, size_t n, uint64_t buffer_size, const std::string& file,
                                Metadata* metadata) {
  if (n == 0) bad(file, "the JSON header is empty; the file is not a safetensors file");
  const size_t u8 = json::invalid_utf8_at(hdr, n);
  if (u8 != std::string::npos) bad(file, "the header is not valid UTF-8 (byte " + std::to_string(u8) + " of the header)");
  json::Value root;
  try {
    root = json::parse(hdr, n);
  } catch (const json::ParseError& e) {
    bad(file, "invalid JSON header at byte " + std::to_string(e.pos) + " of the header: " + e.what);
  }
  if (root.kind != json::Value::Object) bad(file, "the JSON header is not an object");

  std::vector<Entry> entries;
  entries.reserve(root.members.size());
  for (const auto& [name, info] : root.members) {
    const std::string who = "tensor '" + name + "'";
    if (name == "__metadata__") {
      if (info.kind != json::Value::Object) bad(file, "\"__metadata__\" must be an object of string values");
      for (const auto& [k, v] : info.members) {
        if (v.kind != json::Value::String) bad(file, "\"__metadata__\" entry '" + k + "' is not a string");
        if (metadata) (*metadata)[k] = v.text;
      }
      continue;
    }
    if (info.kind != json::Value::Object) bad(file, who + ": its header entry is not an object");
    const json::Value *dt = nullptr, *shape = nullptr, *offs = nullptr;
    for (const auto& [k, v] : info.members) {
      if (k == "dtype") dt = &v;
      else if (k == "shape") shape = &v;
      else if (k == "data_offsets") offs = &v;
    }
    if (!dt || !shape || !offs) bad(file, who + ": the header entry needs \"dtype\", \"shape\" and \"data_offsets\"");
    Entry e;
    e.name = name;
    if (dt->kind != json::Value::String) bad(file, who + ": \"dtype\" is not a string");
    e.file = st_dtype(dt->text);
    if (!e.file) {
      std::string known;
      for (const FileDType& f : kFileDTypes) known += (known.empty() ? "" : ", ") + std::string(f.code);
      bad(file, who + ": unknown or unsupported dtype '" + dt->text + "'; mpx reads " + known);
    }
    e.dtype = e.file->dtype;
    if (shape->kind != json::Value::Array) bad(file, who + ": \"shape\" is not an array");
    // Even with a zero dim, the strides (products of the other dims) must fit in int64.
    uint64_t count = 1;
    bool overflow = false, has_zero = false;
    for (const auto& d : shape->items) {
      uint64_t v;
      if (!json::as_u63(d, &v)) bad(file, who + ": \"shape\" holds a value that is not a non-negative integer");
      e.shape.push_back(static_cast<int64_t>(v));
      if (v == 0) has_zero = true;
      else if (!overflow && __builtin_mul_overflow(count, v, &count)) overflow = true;
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(count, static_cast<uint64_t>(e.file->width), &nbytes) ||
        nbytes > static_cast<uint64_t>(INT64_MAX))
      bad(file, who + ": shape " + shape_str(e.shape) + " is too large");
    if (has_zero) nbytes = 0;
    if (offs->kind != json::Value::Array || offs->items.size() != 2 || !json::as_u63(offs->items[0], &e.begin) ||
        !json::as_u63(offs->items[1], &e.end))
      bad(file, who + ": \"data_offsets\" must be two non-negative integers [begin, end]");
    const std::string span = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.end < e.begin) bad(file, who + ": data_offsets " + span + " end before they begin");
    if (e.end > buffer_size)
      bad(file, who + ": data_offsets " + span + " lie outside the data buffer of " + std::to_string(buffer_size) +
                    " bytes; the file is truncated or corrupt");
    if (e.end - e.begin != nbytes)
      bad(file, who + ": data_offsets " + span + " span " + std::to_string(e.end - e.begin) + " bytes but " +
                    dt->text + " " + shape_str(e.shape) + " needs " + std::to_string(nbytes));
    entries.push_back(std::move(e));
  }

  // The tensors must tile the buffer exactly: no overlaps, no holes, nothing left over.
  std::vector<const Entry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    if (e->begin < expected)
      bad(file, "tensor '" + e->name + "' overlaps tensor '" + prev->name + "' (its data starts at byte " +
                    std::to_string(e->begin) + ", before " + std::to_string(expected) + ")");
    if (e->begin > expected)
      bad(file, "the data buffer has a hole: bytes [" + std::to_string(expected) + ", " + std::to_string(e->begin) +
                    ") belong to no tensor (before tensor '" + e->name + "')");
    expected = e->end;
    prev = e;
  }
  if (expected != buffer_size)
    bad(file, "the tensors cover " + std::to_string(expected) + " bytes but the data buffer holds " +
                  std::to_string(buffer_size) + "; the file has trailing garbage or is corrupt");
  return entries;
}

void swap_bytes_inplace(void* p, size_t nbytes, size_t width) {
  if (width == 1) return;
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i + width <= nbytes; i += width) std::reverse(b + i, b + i + width);
}

// The little-endian values of a widened entry into t (i32, i64 or f32), one conversion chosen per entry.
void widen(const Entry& e, const std::vector<unsigned char>& raw, const Tensor& t) {
  const size_t w = static_cast<size_t>(e.file->width), n = raw.size() / w;
  auto each = [&]<typename D>(D* out, auto convert) {
    for (size_t i = 0; i < n; ++i) {
      uint64_t v = 0;
      for (size_t k = w; k-- > 0;) v = (v << 8) | raw[i * w + k];
      out[i] = convert(v, i);
    }
  };
  const std::string code = e.file->code;
  if (code == "F8_E4M3") each(t.data_ptr<float>(), [](uint64_t v, size_t) { return f8_e4m3(static_cast<uint8_t>(v)); });
  else if (code == "F8_E5M2") each(t.data_ptr<float>(), [](uint64_t v, size_t) { return f8_e5m2(static_cast<uint8_t>(v)); });
  else if (code == "I8") each(t.data_ptr<int32_t>(), [](uint64_t v, size_t) { return int32_t{static_cast<int8_t>(v)}; });
  else if (code == "I16") each(t.data_ptr<int32_t>(), [](uint64_t v, size_t) { return int32_t{static_cast<int16_t>(v)}; });
  else if (code == "U16") each(t.data_ptr<int32_t>(), [](uint64_t v, size_t) { return static_cast<int32_t>(v); });
  else if (code == "U32") each(t.data_ptr<int64_t>(), [](uint64_t v, size_t) { return static_cast<int64_t>(v); });
  else  // U64
    each(t.data_ptr<int64_t>(), [&](uint64_t v, size_t i) {
      MPX_CHECK(v <= static_cast<uint64_t>(INT64_MAX), "safetensors: tensor '", e.name, "' (U64) holds ", v,
                " at element ", i, ", beyond i64, the widest integer mpx has");
      return static_cast<int64_t>(v);
    });
}

/// Reads the data of validated entries with `read(offset_in_buffer, dst, n)`.
TensorDict materialize(const std::vector<Entry>& entries, const std::function<void(uint64_t, void*, size_t)>& read) {
  TensorDict out;
  for (const auto& e : entries) {
    Tensor t = empty(e.shape, TensorOptions().dtype(e.dtype));
    const size_t nbytes = static_cast<size_t>(e.end - e.begin);
    if (e.file->widened) {
      std::vector<unsigned char> raw(nbytes);
      if (nbytes) read(e.begin, raw.data(), nbytes);
      widen(e, raw, t);
      out.emplace(e.name, std::move(t));
      continue;
    }
    if (nbytes) read(e.begin, t.raw_data(), nbytes);
    if constexpr (std::endian::native == std::endian::big) swap_bytes_inplace(t.raw_data(), nbytes, element_size(e.dtype));
    if (e.dtype == kBool) {
      // Any byte other than 0/1 would be an invalid C++ bool; normalise like numpy does.
      auto* b = static_cast<unsigned char*>(t.raw_data());
      for (size_t i = 0; i < nbytes; ++i) b[i] = b[i] != 0;
    }
    out.emplace(e.name, std::move(t));
  }
  return out;
}

uint64_t read_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | b[k];
  return v;
}

// ---------------------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------------------
struct Layout {
  std::string prefix;  // 8-byte length + padded header
  std::vector<std::pair<std::string, Tensor>> order;
};

Layout plan(const TensorDict& tensors, const Metadata& metadata, const char* who, const std::string& file) {
  for (const auto& [name, t] : tensors) {
    MPX_CHECK(!name.empty(), who, "('", file, "'): tensor names must not be empty");
    MPX_CHECK(name != "__metadata__", who, "('", file, "'): '__metadata__' is reserved by the format; rename the tensor");
    MPX_CHECK(t.defined(), who, "('", file, "'): tensor '", name, "' is undefined; only defined tensors can be saved");
    MPX_CHECK(json::invalid_utf8_at(name.data(), name.size()) == std::string::npos, who, "('", file, "'): tensor name '",
              name, "' is not valid UTF-8");
  }
  for (const auto& [k, v] : metadata)
    MPX_CHECK(json::invalid_utf8_at(k.data(), k.size()) == std::string::npos &&
                  json::invalid_utf8_at(v.data(), v.size()) == std::string::npos,
              who, "('", file, "'): metadata entry '", k, "' is not valid UTF-8");
  Layout L;
  for (const auto& kv : tensors) L.order.emplace_back(kv.first, kv.second);
  // Widest elements first, so every tensor starts aligned to its element size when the
  // buffer is 8-byte aligned (readers that mmap can then cast in place).
  std::stable_sort(L.order.begin(), L.order.end(), [](const auto& a, const auto& b) {
    return a.second.element_size() > b.second.element_size();
  });
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool f2 = true;
    for (const auto& [k, v] : metadata) {
      if (!f2) h += ',';
      f2 = false;
      json::append_string(h, k);
      h += ':';
      json::append_string(h, v);
    }
    h += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : L.order) {
    if (!first) h += ',';
    first = false;
    json::append_string(h, name);
    h += ":{\"dtype\":\"";
    h += st_code(t.dtype());
    h += "\",\"shape\":[";
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d) h += ',';
      h += std::to_string(t.sizes()[d]);
    }
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + nbytes) + "]}";
    offset += nbytes;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  MPX_CHECK(h.size() <= kMaxSafetensorsHeader, who, "('", file, "'): the header would be ", h.size(),
            " bytes, over the format's 100 MB limit; save fewer tensors per file");
  L.prefix.resize(8);
  const uint64_t n = h.size();
  for (int k = 0; k < 8; ++k) L.prefix[k] = static_cast<char>((n >> (8 * k)) & 0xff);
  L.prefix += h;
  return L;
}

/// Streams the file through `sink`, one tensor at a time (at most one tensor's CPU copy alive).
void emit(const Layout& L, const std::function<void(const void*, size_t)>& sink) {
  sink(L.prefix.data(), L.prefix.size());
  for (const auto& [name, t] : L.order) {
    if (t.numel() == 0) continue;
    Tensor c = t.detach();
    if (!c.device().is_cpu()) c = c.to(Device::cpu());
    c = c.contiguous();
    const size_t nbytes = static_cast<size_t>(c.numel()) * c.element_size();
    if constexpr (std::endian::native == std::endian::big) {
      std::vector<unsigned char> tmp(static_cast<const unsigned char*>(c.raw_data()),
                                     static_cast<const unsigned char*>(c.raw_data()) + nbytes);
      swap_bytes_inplace(tmp.data(), nbytes, c.element_size());
      sink(tmp.data(), nbytes);
    } else {
      sink(c.raw_data(), nbytes);
    }
  }
}

std::atomic<int64_t> g_fail_after{-1};

std::string errno_str(int e) { return std::strerror(e); }

}  // namespace

namespace detail {
void inject_save_failure(int64_t bytes) { g_fail_after.store(bytes); }
}  // namespace detail

// ---------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------
std::string serialize_tensors(const TensorDict& tensors, const Metadata& metadata) {
  Layout L = plan(tensors, metadata, "serialize_tensors", "<memory>");
  std::string out;
  emit(L, [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

TensorDict deserialize_tensors(const void* data, size_t size, Metadata* metadata, const std::string& name) {
  const auto* b = static_cast<const unsigned char*>(data);
  if (size < 8)
    bad(name, "only " + std::to_string(size) + " bytes, too short for the 8-byte header length; the data is truncated "
              "or not safetensors");
  const uint64_t n = read_u64_le(b);
  if (n > kMaxSafetensorsHeader)
    bad(name, "the header length " + std::to_string(n) + " is over the 100 MB limit; the data is corrupt or not safetensors");
  if (n > size - 8)
    bad(name, "the header length " + std::to_string(n) + " exceeds the " + std::to_string(size - 8) +
              " bytes that follow it; the data is truncated");
  Metadata meta;
  auto entries = parse_header(reinterpret_cast<const char*>(b + 8), n, size - 8 - n, name, &meta);
  const unsigned char* buf = b + 8 + n;
  TensorDict out = materialize(entries, [&](uint64_t off, void* dst, size_t len) { std::memcpy(dst, buf + off, len); });
  if (metadata) *metadata = std::move(meta);
  return out;
}

TensorDict load_tensors(const std::string& path, Metadata* metadata) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) bad(path, "cannot open the file: " + errno_str(errno));
  struct Closer {
    std::FILE* f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  struct stat st {};
  if (fstat(fileno(f), &st) != 0) bad(path, "cannot stat the file: " + errno_str(errno));
  if (!S_ISREG(st.st_mode)) bad(path, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8)
    bad(path, "the file is " + std::to_string(size) + " bytes, too short for the 8-byte header length; it is truncated "
              "or not a safetensors file");
  auto read_at = [&](uint64_t off, void* dst, size_t len, const char* what) {
    if (fseeko(f, static_cast<off_t>(off), SEEK_SET) != 0 || std::fread(dst, 1, len, f) != len)
      bad(path, std::string("read error in ") + what + " (the file changed or is unreadable)");
  };
  unsigned char lenbuf[8];
  read_at(0, lenbuf, 8, "the header length");
  const uint64_t n = read_u64_le(lenbuf);
  if (n > kMaxSafetensorsHeader)
    bad(path, "the header length " + std::to_string(n) + " is over the 100 MB limit; the file is corrupt or not a "
              "safetensors file");
  if (n > size - 8)
    bad(path, "the header length " + std::to_string(n) + " exceeds the " + std::to_string(size - 8) +
              " bytes after it; the file is truncated");
  std::string hdr(static_cast<size_t>(n), '\0');
  if (n) read_at(8, hdr.data(), hdr.size(), "the header");
  Metadata meta;
  auto entries = parse_header(hdr.data(), hdr.size(), size - 8 - n, path, &meta);
  TensorDict out = materialize(entries, [&](uint64_t off, void* dst, size_t len) { read_at(8 + n + off, dst, len, "tensor data"); });
  if (metadata) *metadata = std::move(meta);
  return out;
}

namespace {
// The file a path names once symbolic links are followed: saving through a link replaces its target, as writing
// to it in place would, and leaves the link a link.
std::string link_target(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = path;
  std::error_code ec;
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    const fs::path t = fs::read_symlink(p, ec);
    if (ec) break;
    p = t.is_absolute() ? t : p.parent_path() / t;
  }
  return p.string();
}
}  // namespace

void save_tensors(const TensorDict& tensors, const std::string& user_path, const Metadata& metadata) {
  MPX_CHECK(!user_path.empty(), "save_tensors: the path is empty");
  Layout L = plan(tensors, metadata, "save_tensors", user_path);
  const std::string path = link_target(user_path);

  // Temp file next to the target so the final rename stays within one file system.
  std::random_device rd;
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    char suffix[32];
    const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull) ^
                       static_cast<uint64_t>(getpid());
    std::snprintf(suffix, sizeof(suffix), ".tmp-%016llx", static_cast<unsigned long long>(r));
    tmp = path + suffix;
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    MPX_ERROR("save_tensors('", path, "'): cannot create the temporary file '", tmp, "': ", errno_str(errno),
              "; check that the directory exists and is writable");
  struct stat old {};
  if (::stat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode)) (void)::fchmod(fd, old.st_mode & 07777);

  try {
    int64_t budget = g_fail_after.exchange(-1);
    auto sink = [&](const void* p, size_t n) {
      const char* c = static_cast<const char*>(p);
      while (n > 0) {
        size_t chunk = std::min<size_t>(n, size_t{1} << 30);
        if (budget >= 0) {
          if (static_cast<int64_t>(chunk) > budget) chunk = static_cast<size_t>(budget);
          if (chunk == 0) MPX_ERROR("save_tensors('", path, "'): write failed: injected failure (test hook)");
          budget -= static_cast<int64_t>(chunk);
        }
        const ssize_t w = ::write(fd, c, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) MPX_ERROR("save_tensors('", path, "'): write failed: ", errno_str(errno), " (disk full?)");
        c += w;
        n -= static_cast<size_t>(w);
      }
    };
    emit(L, sink);
    if (::fsync(fd) != 0) MPX_ERROR("save_tensors('", path, "'): fsync failed: ", errno_str(errno));
    const int cfd = fd;
    fd = -1;
    if (::close(cfd) != 0) MPX_ERROR("save_tensors('", path, "'): close failed: ", errno_str(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      MPX_ERROR("save_tensors('", path, "'): cannot replace the target: ", errno_str(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable; failure here cannot lose data that is already in place.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void save(const TensorDict& tensors, const std::string& path, const Metadata& metadata) {
  save_tensors(tensors, path, metadata);
}
void save(const Tensor& tensor, const std::string& path) { save_tensors({{"tensor", tensor}}, path); }

Tensor load_tensor(const std::string& path) {
  TensorDict all = load_tensors(path);
  if (all.size() != 1) {
    std::string names;
    for (const auto& kv : all) names += (names.empty() ? "" : ", ") + kv.first;
    MPX_ERROR("load_tensor('", path, "'): expected exactly one tensor, the file holds ", all.size(),
              all.empty() ? "" : " (" + names + ")", "; use load_tensors() for several");
  }
  return all.begin()->second;
}
void load(Tensor& tensor, const std::string& path) { tensor = load_tensor(path); }
void load(TensorDict& tensors, const std::string& path) { tensors = load_tensors(path); }
void save(const std::vector<Tensor>& tensors, const std::string& path) {
  TensorDict d;
  for (size_t i = 0; i < tensors.size(); ++i) d.emplace(std::to_string(i), tensors[i]);
  save_tensors(d, path);
}
void load(std::vector<Tensor>& tensors, const std::string& path) {
  TensorDict d = load_tensors(path);
  std::vector<Tensor> out(d.size());
  for (auto& [name, t] : d) {
    size_t i = out.size();
    try {
      size_t used = 0;
      i = std::stoul(name, &used);
      if (used != name.size()) i = out.size();
    } catch (const std::exception&) {
    }
    MPX_CHECK(i < out.size() && !out[i].defined(), "load: ", path, " holds a tensor named \"", name,
              "\"; a list saved by save(std::vector<Tensor>, path) names its ", out.size(), " tensors 0 to ",
              out.size() - 1, ". Load named tensors into a TensorDict instead");
    out[i] = std::move(t);
  }
  tensors = std::move(out);
}

}  // namespace mpx
