// Tests of the token data layer (data/text.h): character vocabularies, text files, llm.c shards, windows; and
// batching sequences of different lengths (pad_collate).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "data/data.h"
#include "tests/test_files.h"

using namespace mpx;
using namespace mpx::data;
using Catch::Contains;
namespace fs = std::filesystem;
using mpx::testing::TempDir;
using mpx::testing::write_bytes;

namespace {


void put_le32(std::vector<uint8_t>& b, size_t at, int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  for (int k = 0; k < 4; ++k) b[at + static_cast<size_t>(k)] = static_cast<uint8_t>(u >> (8 * k));
}

/// An llm.c shard of `tokens`; the header fields can be set wrong on purpose.
std::vector<uint8_t> shard(const std::vector<uint16_t>& tokens, int32_t magic = 20240520, int32_t version = 1,
                           int64_t count = -1) {
  std::vector<uint8_t> b(1024 + 2 * tokens.size(), 0);
  put_le32(b, 0, magic);
  put_le32(b, 4, version);
  put_le32(b, 8, static_cast<int32_t>(count < 0 ? static_cast<int64_t>(tokens.size()) : count));
  for (size_t i = 0; i < tokens.size(); ++i) {
    b[1024 + 2 * i] = static_cast<uint8_t>(tokens[i] & 0xff);
    b[1024 + 2 * i + 1] = static_cast<uint8_t>(tokens[i] >> 8);
  }
  return b;
}

std::vector<uint16_t> iota_tokens(size_t n, uint16_t first) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(first + i);
  return t;
}

std::vector<int64_t> all(const TokenStream& s) {
  std::vector<int64_t> out(static_cast<size_t>(s.size()));
  s.read(0, s.size(), out.data());
  return out;
}

std::vector<int64_t> values(const Tensor& t) {
  const int64_t* p = t.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

}  // namespace

TEST_CASE("CharVocab: from_text sorts the distinct bytes and round-trips", "[text]") {
  const CharVocab v = CharVocab::from_text("hello world\n");
  CHECK(v.chars == "\n dehlorw");
  CHECK(v.size() == 9);
  const auto ids = v.encode("world hello");
  CHECK(ids.size() == 11);
  CHECK(ids[0] == 8);  // 'w' is the largest byte
  CHECK(v.decode(std::vector<int64_t>(ids.begin(), ids.end())) == "world hello");
  const CharVocab again = CharVocab::from_chars(v.chars);
  CHECK(again.encode("hello") == v.encode("hello"));
  // Bytes above 0x7f (UTF-8) are characters too, sorted as unsigned.
  CHECK(CharVocab::from_text("a\xc3\xa9").chars == "a\xa9\xc3");
}

TEST_CASE("CharVocab: errors name the byte and its position", "[text]") {
  CHECK_THROWS_WITH(CharVocab::from_text(""), Contains("empty"));
  CHECK_THROWS_WITH(CharVocab::from_chars(""), Contains("empty"));
  CHECK_THROWS_WITH(CharVocab::from_chars("abca"), Contains("'a'") && Contains("twice") && Contains("0 and 3"));
  const CharVocab v = CharVocab::from_text("abc");
  CHECK_THROWS_WITH(v.encode("abxc"), Contains("'x'") && Contains("position 2"));
  CHECK_THROWS_WITH(v.encode("a\n"), Contains("0x0a") && Contains("position 1"));
  CHECK_THROWS_WITH(v.decode({0, 1, 3}), Contains("id 3") && Contains("position 2") && Contains("[0, 3)"));
  CHECK_THROWS_WITH(v.decode({-1}), Contains("id -1"));
}

TEST_CASE("open_text: a file's bytes as ids of its own or a given vocabulary", "[text]") {
  TempDir tmp;
  const std::string p = tmp / "input.txt";
  write_bytes(p, {'b', 'a', 'n', 'a', 'n', 'a', '\n'});
  CharVocab v;
  auto s = open_text(p, v);
  CHECK(v.chars == "\nabn");
  CHECK(s->size() == 7);
  CHECK(s->vocab_size() == 4);
  CHECK(s->describe() == p);
  CHECK(all(*s) == std::vector<int64_t>{2, 1, 3, 1, 3, 1, 0});
  std::vector<int64_t> mid(3);
  s->read(2, 3, mid.data());
  CHECK(mid == std::vector<int64_t>{3, 1, 3});
  CHECK_THROWS_WITH(s->read(5, 3, mid.data()), Contains("[5, 8)") && Contains(p));

  // A stored vocabulary is kept as it is, even with characters the file lacks.
  CharVocab given = CharVocab::from_chars("nab\nz");
  auto g = open_text(p, given);
  CHECK(given.chars == "nab\nz");
  CHECK(g->vocab_size() == 5);
  CHECK(all(*g) == std::vector<int64_t>{2, 1, 0, 1, 0, 1, 3});
}

TEST_CASE("open_text: errors name the file", "[text]") {
  TempDir tmp;
  CharVocab v;
  const std::string missing = tmp / "missing.txt";
  CHECK_THROWS_WITH(open_text(missing, v), Contains(missing) && Contains("does not exist"));
  CHECK_THROWS_WITH(open_text(tmp.path.string(), v), Contains(tmp.path.string()) && Contains("directory"));
  const std::string empty_file = tmp / "empty.txt";
  write_bytes(empty_file, {});
  CHECK_THROWS_WITH(open_text(empty_file, v), Contains(empty_file) && Contains("empty"));
  CHECK(v.chars.empty());  // a failed open leaves the vocabulary as it was
  const std::string p = tmp / "input.txt";
  write_bytes(p, {'a', 'b', 'a', 'Q', 'a'});
  CharVocab ab = CharVocab::from_chars("ab");
  CHECK_THROWS_WITH(open_text(p, ab), Contains(p) && Contains("'Q'") && Contains("offset 3"));
}

TEST_CASE("open_token_shards: one shard is read as written", "[text]") {
  TempDir tmp;
  const std::string p = tmp / "train_000.bin";
  const std::vector<uint16_t> t{0, 1, 50256, 300, 65535 - 1, 7};
  write_bytes(p, shard(t));
  auto s = open_token_shards(p, 65535);
  CHECK(s->size() == 6);
  CHECK(s->vocab_size() == 65535);
  CHECK(s->describe() == p);
  CHECK(all(*s) == std::vector<int64_t>{0, 1, 50256, 300, 65534, 7});
  // An empty shard is valid: it holds no tokens.
  const std::string e = tmp / "empty.bin";
  write_bytes(e, shard({}));
  CHECK(open_token_shards(e)->size() == 0);
}

TEST_CASE("open_token_shards: shards concatenate in name order", "[text]") {
  TempDir tmp;
  // Written out of order, with an empty shard between: the stream follows the sorted names.
  write_bytes(tmp / "train_002.bin", shard(iota_tokens(4, 200)));
  write_bytes(tmp / "train_001.bin", shard({}));
  write_bytes(tmp / "train_000.bin", shard(iota_tokens(3, 100)));
  write_bytes(tmp / "val_000.bin", shard(iota_tokens(5, 900)));
  auto s = open_token_shards(tmp / "train_*.bin");
  CHECK(s->size() == 7);
  CHECK(all(*s) == std::vector<int64_t>{100, 101, 102, 200, 201, 202, 203});
  CHECK_THAT(s->describe(), Contains("3 shards") && Contains("train_000.bin") && Contains("train_002.bin"));
  // A read across the shard boundary (and the empty shard), and one starting exactly on it.
  std::vector<int64_t> mid(3);
  s->read(2, 3, mid.data());
  CHECK(mid == std::vector<int64_t>{102, 200, 201});
  s->read(3, 3, mid.data());
  CHECK(mid == std::vector<int64_t>{200, 201, 202});
  // '?' matches one character.
  CHECK(open_token_shards(tmp / "train_00?.bin")->size() == 7);
  CHECK(open_token_shards(tmp / "*_000.bin")->size() == 8);
}

TEST_CASE("open_token_shards: every bad header is an error naming file and offset", "[text]") {
  TempDir tmp;
  const auto t = iota_tokens(10, 1);
  auto expect = [&](const std::string& name, const std::vector<uint8_t>& bytes, const std::string& offset,
                    const std::string& what) {
    const std::string p = tmp / name;
    write_bytes(p, bytes);
    INFO(name);
    CHECK_THROWS_WITH(open_token_shards(p), Contains(p) && Contains(offset) && Contains(what));
    // Checked up front: a bad shard among good ones fails the open, before any read.
    CHECK_THROWS_WITH(open_token_shards(tmp / "*.bin"), Contains(p));
    fs::remove(p);
  };
  write_bytes(tmp / "a_good.bin", shard(t));
  expect("bad_magic.bin", shard(t, 12345), "byte 0", "wrong magic 12345");
  expect("llama3.bin", shard(t, 20240801, 7), "byte 0", "LLaMA-3");
  expect("bad_version.bin", shard(t, 20240520, 2), "byte 4", "version 2");
  expect("negative.bin", shard(t, 20240520, 1, 0xffffffffLL), "byte 8", "-1");
  expect("truncated.bin", shard(t, 20240520, 1, 11), "byte 1046", "truncated");  // 11 tokens end at 1046
  auto cut = shard(t);
  cut.resize(cut.size() - 1);
  expect("cut.bin", cut, "ends at byte 1043", "truncated");
  auto trailing = shard(t);
  trailing.push_back(0);
  trailing.push_back(0);
  trailing.push_back(0);
  expect("trailing.bin", trailing, "from byte 1044", "3 trailing bytes");
  expect("short.bin", std::vector<uint8_t>(1000, 0), "ends at byte 1000", "header");
  expect("zero.bin", {}, "ends at byte 0", "header");

  const std::string nowhere = tmp / "nowhere.bin";
  CHECK_THROWS_WITH(open_token_shards(nowhere), Contains(nowhere) && Contains("does not exist"));
  const std::string nomatch = tmp / "train_*.bin";
  CHECK_THROWS_WITH(open_token_shards(nomatch), Contains(nomatch) && Contains("no file matches"));
  fs::create_directories(tmp.path / "sub.bin");
  CHECK_THROWS_WITH(open_token_shards(tmp / "*.bin"), Contains("sub.bin") && Contains("not a regular file"));
  CHECK_THROWS_WITH(open_token_shards(tmp / "a_good.bin", 0), Contains("vocab_size 0"));
}

TEST_CASE("open_token_shards: a token outside the vocabulary fails when read", "[text]") {
  TempDir tmp;
  write_bytes(tmp / "a.bin", shard({1, 2, 3}));
  write_bytes(tmp / "b.bin", shard({4, 60000, 5}));
  auto s = open_token_shards(tmp / "*.bin", 50257);  // opening does not read the tokens
  std::vector<int64_t> out(6);
  s->read(0, 4, out.data());
  CHECK(out[3] == 4);
  s->read(5, 1, out.data());
  CHECK(out[0] == 5);
  CHECK_THROWS_WITH(s->read(2, 3, out.data()),
                    Contains(tmp / "b.bin") && Contains("token 60000") && Contains("byte 1026") && Contains("50257"));
  CHECK(all(*open_token_shards(tmp / "*.bin", 65536))[4] == 60000);
}

TEST_CASE("slice: a range of a stream", "[text]") {
  TempDir tmp;
  write_bytes(tmp / "s.bin", shard(iota_tokens(20, 0)));
  auto s = open_token_shards(tmp / "s.bin");
  auto tail = slice(s, 15, 20);
  CHECK(tail->size() == 5);
  CHECK(tail->vocab_size() == s->vocab_size());
  CHECK(all(*tail) == std::vector<int64_t>{15, 16, 17, 18, 19});
  CHECK_THAT(tail->describe(), Contains("[15, 20)") && Contains("s.bin"));
  auto inner = slice(tail, 1, 3);
  CHECK(all(*inner) == std::vector<int64_t>{16, 17});
  CHECK(slice(s, 7, 7)->size() == 0);
  std::vector<int64_t> out(4);
  CHECK_THROWS_WITH(tail->read(3, 4, out.data()), Contains("[3, 7)"));
  CHECK_THROWS_WITH(slice(s, 10, 21), Contains("[10, 21)") && Contains("20 tokens"));
  CHECK_THROWS_WITH(slice(s, 5, 4), Contains("[5, 4)"));
  CHECK_THROWS_WITH(slice(s, -1, 4), Contains("[-1, 4)"));
  CHECK_THROWS(slice(nullptr, 0, 0));
}

TEST_CASE("TokenWindows: contents and size", "[text]") {
  TempDir tmp;
  write_bytes(tmp / "s.bin", shard(iota_tokens(40, 100)));
  auto s = open_token_shards(tmp / "s.bin");
  TokenWindows w(slice(s, 0, 20), 4);  // stride = context
  CHECK(w.context() == 4);
  CHECK(w.stride() == 4);
  CHECK(w.size() == 4);  // (20 - 4 - 1) / 4 + 1
  for (int64_t i = 0; i < w.size(); ++i) {
    const Example<> e = w.get(i);
    REQUIRE(e.data.sizes() == IntList{4});
    REQUIRE(e.target.sizes() == IntList{4});
    CHECK(e.data.dtype() == kInt64);
    for (int64_t k = 0; k < 4; ++k) {
      CHECK(values(e.data)[static_cast<size_t>(k)] == 100 + 4 * i + k);
      CHECK(values(e.target)[static_cast<size_t>(k)] == 100 + 4 * i + k + 1);
    }
  }
  TokenWindows overlap(s, 5, 2);
  CHECK(values(overlap.get(3).data) == std::vector<int64_t>{106, 107, 108, 109, 110});
  CHECK(values(overlap.get(3).target) == std::vector<int64_t>{107, 108, 109, 110, 111});
  // The size is every window whose target fits: the last one fits, one more would not.
  for (int64_t n = 2; n <= 40; ++n)
    for (int64_t context = 1; context < n && context <= 7; ++context)
      for (int64_t stride = 1; stride <= 9; ++stride) {
        TokenWindows x(slice(s, 0, n), context, stride);
        INFO("n " << n << " context " << context << " stride " << stride);
        CHECK(x.size() == (n - context - 1) / stride + 1);
        CHECK((x.size() - 1) * stride + context + 1 <= n);
        CHECK(x.size() * stride + context + 1 > n);
      }
  CHECK(TokenWindows(slice(s, 0, 5), 4).size() == 1);  // exactly context + 1 tokens
}

TEST_CASE("TokenWindows: errors", "[text]") {
  TempDir tmp;
  write_bytes(tmp / "s.bin", shard(iota_tokens(10, 0)));
  auto s = open_token_shards(tmp / "s.bin");
  CHECK_THROWS_WITH(TokenWindows(s, 10), Contains("10 tokens") && Contains("11") && Contains("s.bin"));
  CHECK_THROWS_WITH(TokenWindows(s, 0), Contains("context 0"));
  CHECK_THROWS_WITH(TokenWindows(s, 4, -1), Contains("stride -1"));
  CHECK_THROWS(TokenWindows(nullptr, 4));
  TokenWindows w(s, 3);
  CHECK(w.size() == 3);
  CHECK_THROWS_WITH(w.get(3), Contains("index 3"));
  CHECK_THROWS_WITH(w.get(-1), Contains("index -1"));
  Batch b;
  CHECK_THROWS_WITH(w.get_batch({0, 3}, {0, 0}, b), Contains("index 3"));
  // A bad token inside a window surfaces from get and get_batch, naming the shard.
  write_bytes(tmp / "bad.bin", shard({1, 2, 3, 4, 65000, 6, 7}));
  TokenWindows bad(open_token_shards(tmp / "bad.bin"), 2);
  CHECK_NOTHROW(bad.get(0));
  CHECK_THROWS_WITH(bad.get(1), Contains("bad.bin") && Contains("byte 1032"));
  CHECK_THROWS_WITH(bad.get_batch({0, 1}, {0, 0}, b), Contains("bad.bin"));
}

TEST_CASE("TokenWindows: get_batch equals get, and the loader batches through it", "[text]") {
  TempDir tmp;
  const std::string p = tmp / "input.txt";
  std::string text;
  for (int i = 0; i < 300; ++i) text.push_back(static_cast<char>('a' + (i * 7 + i / 5) % 26));
  write_bytes(p, std::vector<uint8_t>(text.begin(), text.end()));
  CharVocab v;
  auto w = std::make_shared<TokenWindows>(open_text(p, v), 8, 5);
  const std::vector<int64_t> idx{7, 0, 41, 7, 58};
  Batch b;
  REQUIRE(w->get_batch(idx, std::vector<uint64_t>(idx.size(), 0), b));
  REQUIRE(b.data.sizes() == IntList{5, 8});
  REQUIRE(b.target.sizes() == IntList{5, 8});
  CHECK(b.data.dtype() == kInt64);
  const Batch ref = collate({w->get(7), w->get(0), w->get(41), w->get(7), w->get(58)});
  CHECK(values(b.data) == values(ref.data));
  CHECK(values(b.target) == values(ref.target));
  CHECK_FALSE(w->get_batch({}, {}, b));

  // Two loader threads share the windows; every batch matches the windows it names.
  DataLoader loader(w, DataLoaderOptions(6).workers(2).shuffle().seed(3));
  std::multiset<int64_t> seen;
  for (auto& batch : loader) {
    REQUIRE(batch.data.size(1) == 8);
    for (size_t k = 0; k < batch.indices.size(); ++k) {
      const Example<> e = w->get(batch.indices[k]);
      const auto row = values(batch.data);
      const auto trow = values(batch.target);
      CHECK(std::vector<int64_t>(row.begin() + static_cast<long>(k) * 8, row.begin() + static_cast<long>(k + 1) * 8) ==
            values(e.data));
      CHECK(std::vector<int64_t>(trow.begin() + static_cast<long>(k) * 8,
                                 trow.begin() + static_cast<long>(k + 1) * 8) == values(e.target));
      seen.insert(batch.indices[k]);
    }
  }
  CHECK(static_cast<int64_t>(seen.size()) == w->size());
  CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == seen.size());
}

TEST_CASE("TokenWindows: DistributedSampler gives 2 ranks disjoint windows covering all", "[text]") {
  TempDir tmp;
  write_bytes(tmp / "s.bin", shard(iota_tokens(1001, 0)));
  auto s = open_token_shards(tmp / "s.bin");
  TokenWindows w(s, 10);  // (1001 - 11) / 10 + 1 = 100 windows
  REQUIRE(w.size() == 100);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const auto r0 = DistributedSampler(w.size(), 0, 2, true, 5).indices(epoch);
    const auto r1 = DistributedSampler(w.size(), 1, 2, true, 5).indices(epoch);
    CHECK(r0.size() == 50);
    CHECK(r1.size() == 50);
    std::set<int64_t> a(r0.begin(), r0.end()), b(r1.begin(), r1.end()), both;
    CHECK(a.size() == 50);
    for (int64_t i : b) CHECK(a.count(i) == 0);
    both.insert(a.begin(), a.end());
    both.insert(b.begin(), b.end());
    CHECK(both.size() == 100);
    // The ranks' windows are disjoint in tokens too (stride = context: only a target's last token is shared).
    std::set<int64_t> tokens0;
    for (int64_t i : r0)
      for (int64_t t : values(w.get(i).data)) tokens0.insert(t);
    for (int64_t i : r1)
      for (int64_t t : values(w.get(i).data)) CHECK(tokens0.count(t) == 0);
  }
  // An odd count pads by wrap-around: still every window, one read twice.
  TokenWindows odd(slice(s, 0, 991), 10);
  REQUIRE(odd.size() == 99);
  std::set<int64_t> cover;
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i : DistributedSampler(odd.size(), r, 2, true, 5).indices(0)) cover.insert(i);
  CHECK(cover.size() == 99);
}

namespace {
// Sequence i: i % 5 + 1 token ids (all equal to i), and a label: the class i % 3 or, per token, i.
class Ragged : public Dataset {
 public:
  explicit Ragged(bool per_token) : per_token_(per_token) {}
  int64_t size() const override { return 11; }
  Example<> get(int64_t i) const override {
    const int64_t n = i % 5 + 1;
    const Tensor ids = full({n}, static_cast<double>(i), TensorOptions(kInt64));
    return {ids, per_token_ ? full({n}, static_cast<double>(i), TensorOptions(kInt64))
                            : full({}, static_cast<double>(i % 3), TensorOptions(kInt64))};
  }

 private:
  bool per_token_;
};
}  // namespace

TEST_CASE("DataLoader with pad_collate batches sequences of different lengths, on workers too", "[data][loader]") {
  for (bool per_token : {false, true})
    for (int64_t workers : {0, 2}) {
      INFO("per-token targets " << per_token << ", workers " << workers);
      Ragged ds(per_token);
      DataLoader loader(ds, DataLoaderOptions(4).shuffle(true).seed(3).workers(workers).collate_fn(pad_collate(-1)));
      int64_t seen = 0;
      for (const Batch& b : loader) {
        const int64_t B = static_cast<int64_t>(b.indices.size());
        REQUIRE(b.lengths.defined());
        REQUIRE(b.lengths.sizes() == IntList{B});
        int64_t longest = 0;
        for (int64_t k = 0; k < B; ++k) longest = std::max(longest, b.lengths[k].item<int64_t>());
        CHECK(b.data.sizes() == IntList{B, longest});
        for (int64_t k = 0; k < B; ++k) {
          const int64_t i = b.indices[static_cast<size_t>(k)], n = i % 5 + 1;
          CHECK(b.lengths[k].item<int64_t>() == n);
          for (int64_t t = 0; t < longest; ++t) {
            CHECK(b.data[k][t].item<int64_t>() == (t < n ? i : -1));
            if (per_token) CHECK(b.target[k][t].item<int64_t>() == (t < n ? i : -100));
          }
          if (!per_token) CHECK(b.target[k].item<int64_t>() == i % 3);
        }
        seen += B;
      }
      CHECK(seen == ds.size());
    }
  // Time-major padding, and the errors: the default collate names the fix; mismatched trailing dims are named.
  Ragged ds(false);
  DataLoader tm(ds, DataLoaderOptions(3).collate_fn(pad_collate(0.0, -100.0, false)));
  const Batch first = *tm.begin();
  CHECK(first.data.sizes() == IntList{3, 3});  // lengths 1, 2, 3: [T_max, B]
  CHECK(first.data[2][0].item<int64_t>() == 0);
  CHECK(first.data[2][2].item<int64_t>() == 2);
  DataLoader plain(ds, DataLoaderOptions(3));
  CHECK_THROWS_WITH(plain.begin(), Contains("collate_fn(data::pad_collate())"));
  std::vector<Example<>> bad = {{zeros({2, 3}), Tensor()}, {zeros({4, 2}), Tensor()}};
  CHECK_THROWS_WITH(pad_collate()(bad, false), Contains("only the first (length) dim may differ"));
  bad = {{zeros({}), Tensor()}};
  CHECK_THROWS_WITH(pad_collate()(bad, false), Contains("needs a length dim first"));
}
