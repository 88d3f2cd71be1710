// Tests for safetensors I/O: round trips, the golden files, malformed input, corruption fuzzing and atomic saves.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>

#include "core/random.h"
#include "core/metadata.h"
#include "core/serialize.h"
#include "ops/elementwise.h"
#include "ops/shape.h"
#include "tests/paths.h"
#include "tests/test_util.h"

using namespace mpx;
namespace fs = std::filesystem;

namespace {

// A scratch directory per process, removed at exit.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("mpx_test_serialize_" + std::to_string(::getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};
fs::path test_dir() {
  static const ScratchDir dir;
  return dir.path;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const fs::path& p, const std::string& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// Files in `dir` whose name contains ".tmp-" (leftovers of a failed save).
int temp_files_in(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) ++n;
  return n;
}

// Bytewise equality of shape, dtype and contents.
bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * x.element_size()) == 0;
}

// A safetensors blob from a raw header string and a zero-filled buffer of `data` bytes.
std::string blob(const std::string& header, size_t data) {
  std::string b(8, '\0');
  const uint64_t n = header.size();
  for (int k = 0; k < 8; ++k) b[k] = static_cast<char>((n >> (8 * k)) & 0xff);
  return b + header + std::string(data, '\0');
}

std::string error_of(const std::string& bytes) {
  try {
    deserialize_tensors(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TensorDict sample_dict() {
  manual_seed(7);
  return {{"a.weight", randn({3, 4})},
          {"a.bias", randn({4}).to(kFloat16)},
          {"b", arange(6.0, TensorOptions(kInt64)).reshape({2, 3})},
          {"c", tensor<uint8_t>({1, 2, 3})},
          {"d", scalar_tensor(2.5, kFloat64)},
          {"e", empty({0, 3})}};
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype, 0-dim and empty tensors", "[serialize]") {
  manual_seed(1);
  TensorDict in;
  in["f32"] = randn({2, 3});
  in["f16"] = randn({5}).to(kFloat16);
  in["bf16"] = randn({2, 2, 2}).to(kBFloat16);
  in["f64"] = randn({3, 1}, kFloat64);
  in["i64"] = tensor<int64_t>({-1, 0, INT64_MAX, INT64_MIN}, {2, 2});
  in["i32"] = tensor<int32_t>({7, -7, 1 << 30});
  in["u8"] = tensor<uint8_t>({0, 1, 255});
  in["bool"] = tensor<bool>({true, false, true, true});
  in["scalar"] = scalar_tensor(3.25);
  in["scalar_i64"] = scalar_tensor(-5, kInt64);
  in["empty"] = empty({0});
  in["empty2"] = empty({2, 0, 3}, kFloat16);
  in["empty_bool"] = empty({0}, kBool);
  in["odd"] = tensor<uint8_t>({9});  // a 1-byte tensor before wider ones must not misalign them

  const fs::path p = test_dir() / "all.safetensors";
  save_tensors(in, p.string(), {{"k", "v"}});
  Metadata meta;
  TensorDict out = load_tensors(p.string(), &meta);
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    REQUIRE(out.count(name));
    CHECK(same_tensor(out[name], t));
    CHECK(out[name].device().is_cpu());
    CHECK_FALSE(out[name].requires_grad());
  }
  CHECK(out["scalar"].dim() == 0);
  CHECK(out["scalar"].item<double>() == 3.25);
  CHECK(meta == Metadata{{"k", "v"}});

  // The layout follows the spec: LE length, header padded to 8, every tensor aligned to its width.
  const std::string bytes = read_bytes(p);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<unsigned char>(bytes[k]);
  CHECK(n % 8 == 0);
  CHECK(bytes[8] == '{');
  CHECK(bytes == serialize_tensors(in, {{"k", "v"}}));
}

TEST_CASE("safetensors saves non-contiguous and expanded tensors as dense data", "[serialize]") {
  manual_seed(2);
  Tensor base = randn({4, 6});
  TensorDict in{{"t", base.t()}, {"s", base.slice(1, 1, 6, 2)}, {"x", randn({1, 3}).expand({4, 3})},
                {"cl", randn({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast)}};
  REQUIRE_FALSE(in["t"].is_contiguous());
  const fs::path p = test_dir() / "noncontig.safetensors";
  save_tensors(in, p.string());
  TensorDict out = load_tensors(p.string());
  for (const auto& [name, t] : in) {
    INFO(name);
    CHECK(out[name].is_contiguous());
    CHECK(same_tensor(out[name], t.contiguous()));
  }
}

TEST_CASE("safetensors metadata and names with special characters round trip", "[serialize]") {
  Metadata meta{{"quote\"back\\slash", "line\nbreak\ttab"}, {"unicode", "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"},
                {"empty", ""}, {"ctrl", std::string("\x01\x1f", 2)}};
  TensorDict in{{"name with \"quotes\" and \\ and \xC3\xA9", ones({2})}, {"layer.0.weight", zeros({1})}};
  Metadata back;
  TensorDict out = deserialize_tensors(serialize_tensors(in, meta), &back);
  CHECK(back == meta);
  REQUIRE(out.size() == 2);
  CHECK(out.count("name with \"quotes\" and \\ and \xC3\xA9"));

  // \u escapes as Python's json.dumps writes them (including a surrogate pair) decode to UTF-8.
  std::string hdr = R"({"__metadata__":{"k":"caf\u00e9 \ud83d\ude00 \/"},"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  Metadata m2;
  deserialize_tensors(blob(hdr, 1), &m2);
  CHECK(m2["k"] == "caf\xC3\xA9 \xF0\x9F\x98\x80 /");
}

TEST_CASE("safetensors reads the PyTorch-written golden files", "[serialize][golden]") {
  const std::string dir = mpx::testing::test_data_dir() + "/golden/";
  struct Expect { const char* file; size_t tensors; };
  for (Expect e : {Expect{"conv.safetensors", 32}, Expect{"loss.safetensors", 16}, Expect{"norm_pool.safetensors", 32},
                   Expect{"optim.safetensors", 32}}) {
    INFO(e.file);
    Metadata meta;
    TensorDict t = load_tensors(dir + e.file, &meta);
    CHECK(t.size() == e.tensors);
    CHECK(meta.at("generator") == "tests/golden/gen_golden.py");
    CHECK(meta.count("torch"));
    // Our own save of the same tensors reads back identically.
    TensorDict again = deserialize_tensors(serialize_tensors(t, meta));
    for (const auto& [k, v] : t) CHECK(same_tensor(again.at(k), v));
  }
  TensorDict loss = load_tensors(dir + "loss.safetensors");
  CHECK(loss.at("ce_plain.loss").dim() == 0);
  CHECK(loss.at("ce_plain.loss").dtype() == kFloat64);
  CHECK(loss.at("ce_plain.loss").item<double>() == 2.8410736723506687);
  Tensor target = loss.at("ce_plain.target");
  REQUIRE(target.dtype() == kInt64);
  CHECK(std::vector<int64_t>(target.data_ptr<int64_t>(), target.data_ptr<int64_t>() + 6) ==
        std::vector<int64_t>{4, 4, 3, 0, 3, 4});
  Tensor p0 = load_tensors(dir + "optim.safetensors").at("sgd.p0");
  CHECK(p0.sizes() == IntList{5, 3});
  CHECK(p0.data_ptr<double>()[0] == 1.5409961082440433);  // torch.manual_seed(0); torch.randn(...)
  CHECK(p0.data_ptr<double>()[2] == -2.1787893820745574);
}

TEST_CASE("safetensors rejects malformed input with a message naming the problem", "[serialize]") {
  const std::string good = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(error_of(blob(good, 8)).empty());

  struct Case { std::string bytes; const char* expect; };
  std::string huge(8, '\0');
  huge[7] = 0x10;  // 2^60
  std::string over_file = blob(good, 8);
  over_file[0] = static_cast<char>(0xff);
  over_file[1] = 0x01;
  const Case cases[] = {
      {"", "too short"},
      {"abc", "too short"},
      {huge, "100 MB"},
      {over_file, "exceeds"},
      {blob("", 0), "empty"},
      {blob("{", 0), "invalid JSON"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8), "invalid JSON"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}},)", 8), "invalid JSON"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],}})", 8), "invalid JSON"},
      {blob("[1,2]", 0), "not an object"},
      {blob(R"({"x":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})", 16), "unknown or unsupported dtype 'C64'"},
      {blob(R"({"x":{"dtype":"I16","shape":[2],"data_offsets":[0,8]}})", 8), "I16 [2] needs 4"},
      {blob(R"({"x":{"dtype":3,"shape":[2],"data_offsets":[0,4]}})", 4), "\"dtype\" is not a string"},
      {blob(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative integer"},
      {blob(R"({"x":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8), "non-negative integer"},
      {blob(R"({"x":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}})", 8), "non-negative integer"},
      {blob(R"({"x":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8), "too large"},
      {blob(R"({"x":{"dtype":"F64","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})", 0), "too large"},
      {blob("[" + [] { std::string r; for (int i = 0; i < 1'000'001; ++i) r += "0,"; return r; }() + "0]", 0),
       "more than 1000000 JSON values"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8), "outside the data buffer"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "end before"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "needs 8"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "data_offsets"},
      {blob(R"({"x":{"dtype":"F32","shape":[2]}})", 8), "needs \"dtype\", \"shape\" and \"data_offsets\""},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
       "duplicate name \"x\""},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "overlaps"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})", 20),
       "hole"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), "hole"},
      {blob(good, 12), "trailing"},
      {blob(R"({"__metadata__":{"k":1}})", 0), "__metadata__"},
      {blob(R"({"__metadata__":[]})", 0), "__metadata__"},
      {blob(R"({"x":[]})", 0), "not an object"},
      {blob("{\"x\xff\":{}}", 0), "UTF-8"},
      {blob(R"({"x":"\ud800"})", 0), "surrogate"},
      {blob(std::string(5000, '[') + std::string(5000, ']'), 0), "nesting"},
      {blob("{\"a\":\"line\nbreak\"}", 0), "control character"},
      {blob(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x)", 8), "trailing characters"},
  };
  for (const auto& c : cases) {
    INFO("expect: " << c.expect);
    const std::string msg = error_of(c.bytes);
    CHECK_THAT(msg, Catch::Contains(c.expect));
  }

  // Files: the message names the path.
  const fs::path p = test_dir() / "truncated.safetensors";
  std::string full = serialize_tensors(sample_dict());
  write_bytes(p, full.substr(0, full.size() - 3));
  CHECK_THROWS_WITH(load_tensors(p.string()), Catch::Contains(p.string()) && Catch::Contains("data buffer"));
  write_bytes(p, full.substr(0, 20));
  CHECK_THROWS_WITH(load_tensors(p.string()), Catch::Contains(p.string()) && Catch::Contains("truncated"));
  write_bytes(p, "");
  CHECK_THROWS_WITH(load_tensors(p.string()), Catch::Contains("too short"));
  CHECK_THROWS_WITH(load_tensors((test_dir() / "missing.safetensors").string()), Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(load_tensors(test_dir().string()), Catch::Contains("not a regular file"));
}

TEST_CASE("safetensors widens the dtypes PyTorch writes and mpx lacks: int8/16, uint16/32/64, float8", "[serialize]") {
  // One tensor per code, its little-endian bytes after the header.
  auto one = [](const std::string& code, int64_t n, const std::vector<unsigned char>& bytes) {
    std::string b = blob("{\"x\":{\"dtype\":\"" + code + "\",\"shape\":[" + std::to_string(n) + "],\"data_offsets\":[0," +
                             std::to_string(bytes.size()) + "]}}",
                         0);
    return deserialize_tensors(b + std::string(bytes.begin(), bytes.end())).at("x");
  };
  const Tensor i8 = one("I8", 3, {0x80, 0xff, 0x7f});
  CHECK(i8.dtype() == kInt32);
  CHECK(testing::same_values(i8, tensor<int32_t>({-128, -1, 127})));
  CHECK(testing::same_values(one("I16", 2, {0x00, 0x80, 0x34, 0x12}), tensor<int32_t>({-32768, 0x1234})));
  CHECK(testing::same_values(one("U16", 2, {0xff, 0xff, 0x01, 0x00}), tensor<int32_t>({65535, 1})));
  const Tensor u32 = one("U32", 1, {0xff, 0xff, 0xff, 0xff});
  CHECK(u32.dtype() == kInt64);
  CHECK(u32.item<int64_t>() == 4294967295);
  CHECK(one("U64", 1, {1, 0, 0, 0, 0, 0, 0, 0x40}).item<int64_t>() == (int64_t{1} << 62) + 1);
  CHECK_THROWS_WITH(one("U64", 1, {0, 0, 0, 0, 0, 0, 0, 0x80}), Catch::Contains("beyond i64"));
  // float8: 0x38 = 1.0, 0x7e = 448 (the largest), 0x01 = 2^-9 (the smallest subnormal), 0xc0 = -2, 0x7f NaN (E4M3fn);
  // E5M2 is the top byte of a half: 0x3c = 1.0, 0x7c = inf, 0x01 = 2^-16.
  const Tensor e4 = one("F8_E4M3", 5, {0x38, 0x7e, 0x01, 0xc0, 0x7f});
  CHECK(e4.dtype() == kFloat32);
  const float* p = e4.data_ptr<float>();
  CHECK(p[0] == 1.0f);
  CHECK(p[1] == 448.0f);
  CHECK(p[2] == std::ldexp(1.0f, -9));
  CHECK(p[3] == -2.0f);
  CHECK(std::isnan(p[4]));
  const Tensor e5 = one("F8_E5M2", 3, {0x3c, 0x7c, 0x01});
  CHECK(e5.data_ptr<float>()[0] == 1.0f);
  CHECK(std::isinf(e5.data_ptr<float>()[1]));
  CHECK(e5.data_ptr<float>()[2] == std::ldexp(1.0f, -16));
}

TEST_CASE("safetensors survives random corruption without crashing", "[serialize][fuzz]") {
  const std::string good = serialize_tensors(sample_dict(), {{"format", "pt"}});
  uint64_t hdr = 0;
  for (int k = 7; k >= 0; --k) hdr = (hdr << 8) | static_cast<unsigned char>(good[k]);
  std::mt19937_64 rng(12345);
  int ok = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string b = good;
    const int kind = static_cast<int>(rng() % 4);
    if (kind == 0) {  // truncate
      b.resize(rng() % b.size());
    } else if (kind == 1) {  // flip bits in the length or the header (data flips are always valid)
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) b[rng() % (8 + hdr)] ^= static_cast<char>(1u << (rng() % 8));
    } else if (kind == 2) {  // overwrite a header byte with a JSON-significant character
      static const char kChars[] = "{}[]\",:0123456789-.eE \\u";
      b[8 + rng() % hdr] = kChars[rng() % (sizeof(kChars) - 1)];
    } else {  // random bytes anywhere, or garbage appended
      if (rng() % 2) b += std::string(1 + rng() % 16, static_cast<char>(rng()));
      else b[rng() % b.size()] = static_cast<char>(rng());
    }
    try {
      TensorDict t = deserialize_tensors(b);
      ++ok;
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(ok + rejected == 3000);
  CHECK(rejected > 1000);
}

TEST_CASE("safetensors save is atomic", "[serialize]") {
  const fs::path dir = test_dir() / "atomic";
  fs::create_directories(dir);
  const fs::path p = dir / "model.safetensors";
  TensorDict first{{"w", ones({4, 4})}};
  save_tensors(first, p.string());
  const std::string before = read_bytes(p);

  SECTION("a write failing halfway leaves the old file and no temp file") {
    detail::inject_save_failure(100);
    TensorDict second{{"w", zeros({64, 64})}, {"b", zeros({64})}};
    CHECK_THROWS_WITH(save_tensors(second, p.string()), Catch::Contains("write failed"));
    CHECK(read_bytes(p) == before);
    CHECK(temp_files_in(dir) == 0);
    CHECK(same_tensor(load_tensors(p.string()).at("w"), first["w"]));
  }
  SECTION("a tensor that can't be saved leaves the old file") {
    TensorDict bad{{"w", zeros({2})}, {"u", Tensor()}};
    CHECK_THROWS_WITH(save_tensors(bad, p.string()), Catch::Contains("'u' is undefined"));
    TensorDict reserved{{"__metadata__", zeros({2})}};
    CHECK_THROWS_WITH(save_tensors(reserved, p.string()), Catch::Contains("reserved"));
    CHECK(read_bytes(p) == before);
    CHECK(temp_files_in(dir) == 0);
  }
  SECTION("a target that cannot be replaced (a directory) leaves no temp file") {
    const fs::path d = dir / "is_a_dir";
    fs::create_directories(d / "child");
    CHECK_THROWS_WITH(save_tensors(first, d.string()), Catch::Contains("cannot replace"));
    CHECK(fs::is_directory(d / "child"));
    CHECK(temp_files_in(dir) == 0);
  }
  SECTION("a missing directory is a clear error") {
    CHECK_THROWS_WITH(save_tensors(first, (dir / "no" / "such" / "x.safetensors").string()),
                      Catch::Contains("cannot create the temporary file"));
  }
  SECTION("a successful save replaces the file") {
    TensorDict second{{"w", zeros({2, 2})}};
    save_tensors(second, p.string());
    CHECK(same_tensor(load_tensors(p.string()).at("w"), second["w"]));
    CHECK(temp_files_in(dir) == 0);
  }
}

namespace {
// Minimal stand-ins for nn modules: state_dict() as a std::map, or as key()/value() items.
struct MapModule {
  TensorDict params{{"weight", zeros({2, 2})}, {"bias", zeros({2})}};
  TensorDict state_dict() const { return params; }
  void load_state_dict(const TensorDict& d, bool strict) {
    if (strict) MPX_CHECK(d.size() == params.size(), "strict load: key mismatch");
    for (auto& [k, v] : d)
      if (params.count(k)) params[k] = v;
  }
};
struct Item {
  std::string k;
  Tensor v;
  const std::string& key() const { return k; }
  const Tensor& value() const { return v; }
};
struct ItemModule {
  std::vector<Item> items{{"a", ones({3})}};
  std::vector<Item> state_dict() const { return items; }
  void load_state_dict(const TensorDict& d) { items[0].v = d.at("a"); }
};
}  // namespace

TEST_CASE("mpx::save / mpx::load for modules, tensors and tensor maps", "[serialize]") {
  const fs::path p = test_dir() / "module.safetensors";
  auto m = std::make_shared<MapModule>();
  m->params["weight"] = full({2, 2}, 3.0);
  save(m, p.string());  // through the shared_ptr
  Metadata meta;
  CHECK(load_tensors(p.string(), &meta).size() == 2);
  CHECK(meta["format"] == "pt");
  MapModule fresh;
  load(fresh, p.string());
  CHECK(same_tensor(fresh.params["weight"], full({2, 2}, 3.0)));

  ItemModule im;
  im.items[0].v = full({3}, 7.0);
  save(im, p.string());
  ItemModule im2;
  load(im2, p.string());
  CHECK(same_tensor(im2.items[0].v, full({3}, 7.0)));

  Tensor t = arange(5.0, TensorOptions(kFloat32));
  save(t, p.string());
  Tensor back;
  load(back, p.string());
  CHECK(same_tensor(back, t));
  CHECK(same_tensor(load_tensor(p.string()), t));

  save(sample_dict(), p.string());
  CHECK_THROWS_WITH(load_tensor(p.string()), Catch::Contains("exactly one tensor"));
  TensorDict all;
  load(all, p.string());
  CHECK(all.size() == sample_dict().size());
}

// Before: checkpoint fields went through strtod/stoull unchecked ("1e300" or "nan" cast to int64 was
// undefined behaviour, "-5" trained extra epochs, a bad rng.seed gave the bare text "(stoull)").
TEST_CASE("checkpoint metadata reads are typed and range-checked, naming the field and the file", "[serialize]") {
  using namespace mpx::metadata;
  const Metadata m = {{"epoch", "3"},          {"neg", "-5"},           {"big", "1e300"},
                      {"nan", "nan"},          {"frac", "1.5"},         {"space", " 3"},
                      {"seed", "18446744073709551615"}, {"seed_over", "18446744073709551616"},
                      {"seed_bad", "12ab"},    {"scale", "32768.0"},    {"inf", "inf"},
                      {"ctrl", std::string("7\x01", 2)}};
  const std::string f = "run/checkpoint.safetensors";
  CHECK(get_int(m, "epoch", f, 0, 100) == 3);
  CHECK_THROWS_WITH(get_int(m, "neg", f, 0, 100),
                    Catch::Contains("field \"neg\"") && Catch::Contains("\"-5\"") && Catch::Contains("from 0 to 100") &&
                        Catch::Contains(f));
  for (const char* k : {"big", "nan", "frac", "space", "ctrl"}) {
    INFO(k);
    CHECK_THROWS_WITH(get_int(m, k, f, 0, 100), Catch::Contains(std::string("field \"") + k + "\""));
  }
  CHECK_THROWS_WITH(get_int(m, "ctrl", f, 0, 100), Catch::Contains("\"7?\""));  // control characters are not echoed
  CHECK(get_u64(m, "seed", f) == 18446744073709551615ull);
  CHECK_THROWS_WITH(get_u64(m, "seed_over", f), Catch::Contains("unsigned 64-bit"));
  CHECK_THROWS_WITH(get_u64(m, "seed_bad", f), Catch::Contains("\"seed_bad\"") && Catch::Contains("\"12ab\""));
  CHECK_THROWS_WITH(get_u64(m, "neg", f), Catch::Contains("\"neg\""));
  CHECK(get_double(m, "scale", f, 0.0) == 32768.0);
  CHECK_THROWS_WITH(get_double(m, "inf", f), Catch::Contains("finite"));
  CHECK_THROWS_WITH(get_double(m, "nan", f), Catch::Contains("finite"));
  CHECK_THROWS_WITH(get_double(m, "scale", f, 0.0, 1000.0), Catch::Contains("<= 1000"));
  CHECK_THROWS_WITH(get_int(m, "missing", f, 0, 1), Catch::Contains("lacks the field \"missing\"") && Catch::Contains(f));
}
