// Token streams for language models: byte-level text files, llm.c's memory-mapped token shards, windows over them.
#include "data/text.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace fs = std::filesystem;

namespace mpx::data {
namespace {

// llm.c's shard layout (dev/data/data_common.py, write_datafile): 256 little-endian int32s, then
// the tokens as little-endian uint16.
constexpr int64_t kHeaderBytes = 256 * 4;
constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
// llm.c's LLaMA-3 shards (uint32 tokens) carry this magic; named in the error so the cause is plain.
constexpr int32_t kLlama3Magic = 20240801;

const char* const kMakeShards =
    "make shards with llm.c's dev/data scripts or the tiktoken one-liner in docs/data.md";

std::string byte_str(unsigned char c) {
  char buf[24];
  if (c >= 0x20 && c < 0x7f)
    std::snprintf(buf, sizeof buf, "'%c' (0x%02x)", c, c);
  else
    std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

/// Id of every byte under `chars`, -1 for bytes outside it.
std::array<int32_t, 256> id_table(const std::string& chars) {
  std::array<int32_t, 256> t;
  t.fill(-1);
  for (size_t i = 0; i < chars.size(); ++i) t[static_cast<unsigned char>(chars[i])] = static_cast<int32_t>(i);
  return t;
}

void check_read(int64_t begin, int64_t n, int64_t size, const TokenStream& s) {
  MPX_CHECK(begin >= 0 && n >= 0 && begin <= size - n, "TokenStream::read: tokens [", begin, ", ", begin + n,
            ") are outside the ", size, " tokens of ", s.describe());
}

int32_t le32(const unsigned char* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) |
                              (uint32_t{p[3]} << 24));
}

/// A text file's bytes as ids: at most 256 distinct characters, so one byte per token.
class TextStream final : public TokenStream {
 public:
  TextStream(std::string path, std::vector<uint8_t> ids, int64_t vocab)
      : path_(std::move(path)), ids_(std::move(ids)), vocab_(vocab) {}
  int64_t size() const override { return static_cast<int64_t>(ids_.size()); }
  void read(int64_t begin, int64_t n, int64_t* out) const override {
    check_read(begin, n, size(), *this);
    const uint8_t* p = ids_.data() + begin;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  }
  int64_t vocab_size() const override { return vocab_; }
  std::string describe() const override { return path_; }

 private:
  std::string path_;
  std::vector<uint8_t> ids_;
  int64_t vocab_;
};

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  MPX_CHECK(fs::exists(st), "open_text: ", path, " does not exist; give the path of a text file");
  MPX_CHECK(!fs::is_directory(st), "open_text: ", path, " is a directory; give the path of a text file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  MPX_CHECK(f, "open_text: cannot open ", path, ": ", std::strerror(errno), "; check its permissions");
  std::string text;
  char buf[1 << 16];
  size_t got;
  // A bound on what is read: a pipe or a device (/dev/zero) may never end, and a text this large belongs in token
  // shards, which are memory-mapped instead.
  constexpr size_t kMaxText = size_t{2} << 30;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) {
    if (text.size() + got > kMaxText) {
      std::fclose(f);
      MPX_ERROR("open_text: ", path, " holds more than ", kMaxText >> 30, " GiB",
                fs::is_regular_file(st) ? "" : " (it is not a regular file)", "; a text this large belongs in token "
                "shards: tokenize it (docs/data.md) and read them with open_token_shards (mpx gpt --tokens)");
    }
    text.append(buf, got);
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  MPX_CHECK(!failed, "open_text: reading ", path, " failed after ", text.size(), " bytes: ", std::strerror(err));
  MPX_CHECK(!text.empty(), "open_text: ", path, " is empty; a language model needs a text to train on");
  return text;
}

/// One memory-mapped shard whose header has been checked.
struct Shard {
  std::string path;
  void* map = nullptr;
  size_t map_bytes = 0;
  int64_t count = 0;
  Shard() = default;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  ~Shard() {
    if (map) ::munmap(map, map_bytes);
  }
  const unsigned char* tokens() const { return static_cast<const unsigned char*>(map) + kHeaderBytes; }
};

std::unique_ptr<Shard> open_shard(const std::string& path) {
  const std::string where = "open_token_shards: " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MPX_CHECK(fd >= 0, where, ": cannot open: ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  MPX_CHECK(::fstat(fd, &st) == 0, where, ": cannot stat: ", std::strerror(errno));
  MPX_CHECK(S_ISREG(st.st_mode), where, " is not a regular file (a directory?); give shard files or a pattern for them");
  const int64_t bytes = static_cast<int64_t>(st.st_size);
  MPX_CHECK(bytes >= kHeaderBytes, where, ": the file ends at byte ", bytes, ", inside the ", kHeaderBytes,
            "-byte header; it is not an llm.c token shard, or it was cut short (", kMakeShards, ")");
  auto s = std::make_unique<Shard>();
  s->path = path;
  s->map_bytes = static_cast<size_t>(bytes);
  // Mapped, not read: a shard is often hundreds of megabytes and a run reads only its windows.
  void* p = ::mmap(nullptr, s->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  MPX_CHECK(p != MAP_FAILED, where, ": cannot memory-map ", bytes, " bytes: ", std::strerror(errno));
  s->map = p;
  const auto* h = static_cast<const unsigned char*>(p);
  const int32_t magic = le32(h), version = le32(h + 4), count = le32(h + 8);
  if (magic == kLlama3Magic)
    MPX_ERROR(where, ": magic ", magic, " at byte 0 is llm.c's LLaMA-3 shard (uint32 tokens), which is not supported; "
              "only GPT-2 shards (magic ", kShardMagic, ", uint16 tokens) are read");
  MPX_CHECK(magic == kShardMagic, where, ": wrong magic ", magic, " at byte 0 (an llm.c token shard starts with ",
            kShardMagic, "); the file is not a token shard: ", kMakeShards);
  MPX_CHECK(version == kShardVersion, where, ": version ", version, " at byte 4 is not supported (expected ",
            kShardVersion, ", uint16 tokens); ", kMakeShards);
  MPX_CHECK(count >= 0, where, ": the token count at byte 8 is ", count, ", negative; the header is corrupt");
  const int64_t expected = kHeaderBytes + 2 * int64_t{count};
  MPX_CHECK(bytes >= expected, where, ": truncated: the header (byte 8) declares ", count, " tokens, which end at byte ",
            expected, ", but the file ends at byte ", bytes, " (", expected - bytes,
            " bytes missing); re-create or re-download the shard");
  MPX_CHECK(bytes == expected, where, ": ", bytes - expected, " trailing bytes from byte ", expected, " after the ",
            count, " tokens the header (byte 8) declares; the count or the file is wrong: re-create the shard");
  s->count = count;
  return s;
}

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  MPX_CHECK(rc == 0 || rc == GLOB_NOMATCH, "open_token_shards: listing the files matching '", pattern,
            "' failed (glob error ", rc, ")");
  // Byte order, not the locale's collation, so every machine and rank sees the same sequence.
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    const bool wild = pattern.find_first_of("*?[") != std::string::npos;
    std::error_code ec;
    // A literal name that happens to hold '[' or '?' still names its file.
    if (wild && fs::exists(pattern, ec)) return {pattern};
    MPX_CHECK(wild, "open_token_shards: ", pattern, " does not exist; give a shard file or a pattern such as "
              "data/train_*.bin");
    MPX_ERROR("open_token_shards: no file matches '", pattern, "'; check the folder and the pattern (* and ? "
              "match within one name, e.g. data/fineweb_train_*.bin)");
  }
  return files;
}

/// llm.c shards, concatenated; tokens are checked against the vocabulary as they are read, so
/// opening stays cheap however large the shards.
class ShardStream final : public TokenStream {
 public:
  ShardStream(std::string pattern, std::vector<std::unique_ptr<Shard>> shards, int64_t vocab)
      : pattern_(std::move(pattern)), shards_(std::move(shards)), vocab_(vocab) {
    int64_t at = 0;
    for (const auto& s : shards_) {
      starts_.push_back(at);
      at += s->count;
    }
    total_ = at;
  }
  int64_t size() const override { return total_; }
  void read(int64_t begin, int64_t n, int64_t* out) const override {
    check_read(begin, n, total_, *this);
    if (n == 0) return;
    // The last shard starting at or before `begin`: past any empty shards that start there too.
    size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
    while (n > 0) {
      const Shard& s = *shards_[k];
      const int64_t local = begin - starts_[k];
      const int64_t take = std::min(n, s.count - local);
      const unsigned char* p = s.tokens() + 2 * local;
      for (int64_t i = 0; i < take; ++i) {
        const int64_t v = int64_t{p[2 * i]} | (int64_t{p[2 * i + 1]} << 8);
        if (v >= vocab_) bad_token(s, local + i, v);
        out[i] = v;
      }
      out += take;
      begin += take;
      n -= take;
      ++k;
    }
  }
  int64_t vocab_size() const override { return vocab_; }
  std::string describe() const override {
    if (shards_.size() == 1) return shards_[0]->path;
    return std::to_string(shards_.size()) + " shards matching '" + pattern_ + "' (" + shards_.front()->path +
           " .. " + shards_.back()->path + ")";
  }

 private:
  [[noreturn]] void bad_token(const Shard& s, int64_t index, int64_t v) const {
    MPX_ERROR("token shard ", s.path, ": token ", v, " at byte ", kHeaderBytes + 2 * index,
              " is not below the vocabulary size ", vocab_,
              "; the shard was made with another tokenizer: use shards of the model's tokenizer, or a larger "
              "vocab_size");
  }
  std::string pattern_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<int64_t> starts_;
  int64_t total_ = 0, vocab_;
};

class SliceStream final : public TokenStream {
 public:
  SliceStream(std::shared_ptr<const TokenStream> base, int64_t begin, int64_t end)
      : base_(std::move(base)), begin_(begin), end_(end) {}
  int64_t size() const override { return end_ - begin_; }
  void read(int64_t begin, int64_t n, int64_t* out) const override {
    check_read(begin, n, size(), *this);
    base_->read(begin_ + begin, n, out);
  }
  int64_t vocab_size() const override { return base_->vocab_size(); }
  std::string describe() const override {
    return "tokens [" + std::to_string(begin_) + ", " + std::to_string(end_) + ") of " + base_->describe();
  }

 private:
  std::shared_ptr<const TokenStream> base_;
  int64_t begin_, end_;
};

}  // namespace

CharVocab CharVocab::from_text(const std::string& text) {
  MPX_CHECK(!text.empty(), "CharVocab::from_text: the text is empty; a vocabulary needs at least one character");
  std::array<bool, 256> seen{};
  for (char ch : text) seen[static_cast<unsigned char>(ch)] = true;
  CharVocab v;
  for (int c = 0; c < 256; ++c)
    if (seen[static_cast<size_t>(c)]) v.chars.push_back(static_cast<char>(c));
  return v;
}

CharVocab CharVocab::from_chars(const std::string& chars) {
  MPX_CHECK(!chars.empty(), "CharVocab::from_chars: the vocabulary is empty; a stored vocabulary lists at least "
            "one character (is the checkpoint from a character-level run?)");
  std::array<int64_t, 256> first;
  first.fill(-1);
  for (size_t i = 0; i < chars.size(); ++i) {
    const auto c = static_cast<unsigned char>(chars[i]);
    MPX_CHECK(first[c] < 0, "CharVocab::from_chars: byte ", byte_str(c), " appears twice (at ", first[c], " and ", i,
              "); a vocabulary lists each character once, so the stored one is corrupt");
    first[c] = static_cast<int64_t>(i);
  }
  return CharVocab{chars};
}

std::vector<int32_t> CharVocab::encode(const std::string& text) const {
  const auto ids = id_table(chars);
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    MPX_CHECK(ids[c] >= 0, "CharVocab::encode: byte ", byte_str(c), " at position ", i, " is not in the vocabulary of ",
              size(), " characters; use only characters of the text the model was trained on");
    out[i] = ids[c];
  }
  return out;
}

std::string CharVocab::decode(const std::vector<int64_t>& ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    MPX_CHECK(ids[i] >= 0 && ids[i] < size(), "CharVocab::decode: id ", ids[i], " at position ", i,
              " is outside the vocabulary [0, ", size(), "); the ids come from a model with another vocabulary");
    out[i] = chars[static_cast<size_t>(ids[i])];
  }
  return out;
}

std::shared_ptr<TokenStream> open_text(const std::string& path, CharVocab& vocab) {
  return text_tokens(read_text_file(path), vocab, path);
}

std::shared_ptr<TokenStream> text_tokens(const std::string& text, CharVocab& vocab, const std::string& name) {
  MPX_CHECK(!text.empty(), "text_tokens: ", name, " is empty; a language model needs a text to train on");
  if (vocab.chars.empty()) vocab = CharVocab::from_text(text);
  const auto table = id_table(vocab.chars);
  std::vector<uint8_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    MPX_CHECK(table[c] >= 0, "open_text: ", name, ": byte ", byte_str(c), " at offset ", i,
              " is not in the given vocabulary of ", vocab.size(),
              " characters; the text holds characters the model was not trained on: use text with the same "
              "characters, or train a new vocabulary from this file");
    ids[i] = static_cast<uint8_t>(table[c]);
  }
  return std::make_shared<TextStream>(name, std::move(ids), vocab.size());
}

std::shared_ptr<TokenStream> open_token_shards(const std::string& glob, int64_t vocab_size) {
  MPX_CHECK(vocab_size >= 1, "open_token_shards: vocab_size ", vocab_size, " must be at least 1");
  std::vector<std::unique_ptr<Shard>> shards;
  for (const std::string& f : glob_files(glob)) shards.push_back(open_shard(f));
  return std::make_shared<ShardStream>(glob, std::move(shards), vocab_size);
}

std::shared_ptr<TokenStream> slice(std::shared_ptr<const TokenStream> s, int64_t begin, int64_t end) {
  MPX_CHECK(s, "slice: the token stream is null");
  MPX_CHECK(begin >= 0 && begin <= end && end <= s->size(), "slice: [", begin, ", ", end,
            ") is not a range inside the ", s->size(), " tokens of ", s->describe());
  return std::make_shared<SliceStream>(std::move(s), begin, end);
}

TokenWindows::TokenWindows(std::shared_ptr<const TokenStream> tokens, int64_t context, int64_t stride)
    : tokens_(std::move(tokens)), context_(context), stride_(stride == 0 ? context : stride) {
  MPX_CHECK(tokens_, "TokenWindows: the token stream is null");
  MPX_CHECK(context_ >= 1, "TokenWindows: context ", context, " must be at least 1");
  MPX_CHECK(stride_ >= 1, "TokenWindows: stride ", stride, " must be at least 1 (0 means the context)");
  MPX_CHECK(tokens_->size() >= context_ + 1, "TokenWindows: ", tokens_->describe(), " holds ", tokens_->size(),
            " tokens, fewer than the ", context_ + 1, " that one window of context ", context_,
            " needs (its target is shifted by one); use a shorter context or more tokens");
}

int64_t TokenWindows::size() const { return (tokens_->size() - context_ - 1) / stride_ + 1; }

Example<> TokenWindows::get(int64_t index) const {
  MPX_CHECK(index >= 0 && index < size(), "TokenWindows: index ", index, " is out of range for ", size(), " windows");
  Example<> e{empty({context_}, kInt64), empty({context_}, kInt64)};
  tokens_->read(index * stride_, context_, e.data.data_ptr<int64_t>());
  tokens_->read(index * stride_ + 1, context_, e.target.data_ptr<int64_t>());
  return e;
}

bool TokenWindows::get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& sample_seeds,
                             Batch& out) const {
  (void)sample_seeds;  // windows have no randomness
  if (indices.empty()) return false;
  const auto b = static_cast<int64_t>(indices.size());
  const int64_t n = size();
  for (int64_t i : indices)
    MPX_CHECK(i >= 0 && i < n, "TokenWindows: index ", i, " is out of range for ", n, " windows");
  out.data = empty({b, context_}, TensorOptions(kInt64).pinned_memory(out.pinned));
  out.target = empty({b, context_}, TensorOptions(kInt64).pinned_memory(out.pinned));
  int64_t* d = out.data.data_ptr<int64_t>();
  int64_t* t = out.target.data_ptr<int64_t>();
  for (int64_t k = 0; k < b; ++k) {
    const int64_t start = indices[static_cast<size_t>(k)] * stride_;
    tokens_->read(start, context_, d + k * context_);
    tokens_->read(start + 1, context_, t + k * context_);
  }
  return true;
}

}  // namespace mpx::data
