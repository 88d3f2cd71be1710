// Hugging Face GPT-2 weights in and out of models::GPT (counts, round trips, errors, transformers' logits); the LSTM LM.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <mpx/mpx.h>

#include "models/gpt.h"
#include "models/gpt_hf.h"
#include "models/lstm_lm.h"
#include "tests/paths.h"

using namespace mpx;
using models::GPTConfig;
namespace F = mpx::nn::functional;
namespace fs = std::filesystem;

namespace {

// A file name under the system's temp directory, removed when the scope ends.
struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& stem)
      : path(fs::temp_directory_path() / (stem + "_" + std::to_string(::getpid()) + ".safetensors")) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  std::string str() const { return path.string(); }
};

// GPT2LMHeadModel's unique parameters from its config: wte, wpe, per block two LayerNorms
// (4C), c_attn (3C^2 + 3C), attn.c_proj (C^2 + C), c_fc (4C^2 + 4C), mlp.c_proj (4C^2 + C),
// and ln_f; lm_head is wte.
int64_t gpt2_param_count(const GPTConfig& c) {
  const int64_t C = c.n_embd;
  return c.vocab_size * C + c.n_ctx * C + c.n_layer * (12 * C * C + 13 * C) + 2 * C;
}

int64_t unique_param_count(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

GPTConfig small_config() {
  GPTConfig c;
  c.vocab_size = 50, c.n_ctx = 16, c.n_layer = 2, c.n_head = 4, c.n_embd = 32;
  return c;
}

Tensor sample_ids(int64_t vocab, int64_t B, int64_t T) {
  std::vector<int64_t> v(static_cast<size_t>(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7 + 3) % static_cast<size_t>(vocab));
  return tensor(v, {B, T});
}

Tensor logits_of(models::GPT& m, const Tensor& ids) {
  m->eval();
  NoGradGuard ng;
  return m->forward(ids);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
}

TensorDict without_prefix(const TensorDict& d) {
  TensorDict out;
  for (const auto& [k, v] : d) out.emplace(k.rfind("transformer.", 0) == 0 ? k.substr(12) : k, v);
  return out;
}

// The mpx::Error message load_hf_gpt2 throws for `hf` (empty when it loads).
std::string load_error(models::GPT& m, const TensorDict& hf) {
  try {
    models::load_hf_gpt2(*m, hf);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Reference counts: sum of p.numel() over GPT2LMHeadModel(GPT2Config(n_layer, n_head, n_embd,
// n_positions, vocab_size=50257)).parameters() (unique, so lm_head counts once), built on
// torch's meta device with transformers 5.24 / torch 2.15.
TEST_CASE("gpt_hf: preset parameter counts equal transformers' GPT2LMHeadModel", "[gpt_hf]") {
  const std::vector<std::pair<std::string, int64_t>> hf = {
      {"gpt2", 124439808},       {"gpt2-medium", 354823168}, {"gpt2-large", 774030080},
      {"gpt2-xl", 1557611200},   {"gpt-tiny", 7242624},      {"gpt-mini", 30044544},
  };
  REQUIRE(hf.size() == GPTConfig::presets().size());
  for (const auto& [name, count] : hf) {
    INFO(name);
    CHECK(gpt2_param_count(GPTConfig::preset(name)) == count);
  }
  // The formula against built models (the large presets would allocate gigabytes).
  for (const GPTConfig& c : {GPTConfig::preset("gpt-tiny", 1000), small_config()}) {
    models::GPT m(c);
    CHECK(unique_param_count(*m) == gpt2_param_count(c));
  }
}

TEST_CASE("gpt_hf: hf_gpt2_state has transformers' layout", "[gpt_hf]") {
  manual_seed(1);
  models::GPT m(small_config());
  const TensorDict hf = models::hf_gpt2_state(*m);
  CHECK(hf.size() == 12 * 2 + 4);  // no lm_head.weight: transformers omits the tied copy
  CHECK(hf.count("lm_head.weight") == 0);
  for (const auto& [k, v] : hf) {
    INFO(k);
    CHECK(k.rfind("transformer.", 0) == 0);
    CHECK(v.is_contiguous());
  }
  CHECK(hf.at("transformer.h.0.attn.c_attn.weight").sizes() == IntList{32, 96});
  CHECK(hf.at("transformer.h.1.mlp.c_fc.weight").sizes() == IntList{32, 128});
  CHECK(hf.at("transformer.h.1.mlp.c_proj.weight").sizes() == IntList{128, 32});
  CHECK(equal(hf.at("transformer.h.1.mlp.c_fc.weight"), (*m->h)[1]->as<models::GPTBlockImpl>()->c_fc->weight.t()));
  CHECK(hf.at("transformer.wte.weight").sizes() == IntList{50, 32});

  const GPTConfig c = models::hf_gpt2_config(hf, 4);
  CHECK((c.vocab_size == 50 && c.n_ctx == 16 && c.n_layer == 2 && c.n_head == 4 && c.n_embd == 32));
  // Width 32 matches no preset and is no multiple of 64: the caller must say.
  CHECK_THROWS_WITH(models::hf_gpt2_config(hf), Catch::Contains("pass n_head"));
  CHECK_THROWS_WITH(models::hf_gpt2_config(hf, 5), Catch::Contains("does not divide"));
  TensorDict no_wpe = hf;
  no_wpe.erase("transformer.wpe.weight");
  CHECK_THROWS_WITH(models::hf_gpt2_config(no_wpe, 4), Catch::Contains("wpe.weight"));

  // Or from the config.json saved with the weights, whose shapes it must agree with.
  TempFile cfg("mpx_gpt_hf_config");
  auto write = [&](const std::string& text) { std::ofstream(cfg.path) << text; };
  write(R"({"n_head": 4, "n_embd": 32, "n_layer": 2, "n_positions": 16, "vocab_size": 50, "model_type": "gpt2"})");
  CHECK(models::hf_gpt2_config(hf, cfg.str()).n_head == 4);
  write(R"({"n_head": 4, "n_embd": 64})");
  CHECK_THROWS_WITH(models::hf_gpt2_config(hf, cfg.str()), Catch::Contains("n_embd = 64 but the weights have 32"));
  write(R"({"n_embd": 32})");
  CHECK_THROWS_WITH(models::hf_gpt2_config(hf, cfg.str()), Catch::Contains("no positive integer \"n_head\""));
  write("{not json");
  CHECK_THROWS_WITH(models::hf_gpt2_config(hf, cfg.str()), Catch::Contains("is not JSON"));
  CHECK_THROWS_WITH(models::hf_gpt2_config(hf, cfg.str() + ".missing"), Catch::Contains("cannot read"));

  // The heads of a preset's shape come from the preset (gpt-tiny: 4 heads of width 32).
  models::GPT tiny(GPTConfig::preset("gpt-tiny", 64));
  CHECK(models::hf_gpt2_config(models::hf_gpt2_state(*tiny)).n_head == 4);
}

TEST_CASE("gpt_hf: round trip through a safetensors file gives identical logits", "[gpt_hf]") {
  manual_seed(2);
  models::GPT a(small_config());
  const Tensor ids = sample_ids(50, 2, 16);
  const Tensor want = logits_of(a, ids);
  TempFile f("mpx_gpt_hf_roundtrip");
  models::save_hf_gpt2(*a, f.str());
  Metadata meta;
  const TensorDict loaded = load_tensors(f.str(), &meta);
  CHECK(meta["format"] == "pt");  // from_pretrained refuses safetensors of another format

  for (bool prefixed : {true, false}) {
    INFO("transformer. prefix: " << prefixed);
    manual_seed(3);
    models::GPT b(small_config());
    REQUIRE(max_abs_diff(logits_of(b, ids), want) > 1e-3);
    models::load_hf_gpt2(*b, prefixed ? loaded : without_prefix(loaded));
    CHECK(equal(logits_of(b, ids), want));
  }

  SECTION("a tied lm_head.weight and the attention-mask buffers are accepted") {
    TensorDict hf = loaded;
    hf["lm_head.weight"] = hf.at("transformer.wte.weight").clone();
    hf["transformer.h.0.attn.bias"] = ones({1, 1, 16, 16});
    hf["transformer.h.1.attn.masked_bias"] = full({}, -1e4);
    models::GPT b(small_config());
    models::load_hf_gpt2(*b, hf);
    CHECK(equal(logits_of(b, ids), want));
  }
  SECTION("values are converted to the parameters' dtype") {
    TensorDict hf;
    for (const auto& [k, v] : loaded) hf[k] = v.to(kFloat64);
    models::GPT b(small_config());
    b->to(kFloat64);
    models::load_hf_gpt2(*b, hf);
    CHECK(b->wte->weight.dtype() == kFloat64);
    CHECK(max_abs_diff(logits_of(b, ids), want) < 1e-4);
  }
}

TEST_CASE("gpt_hf: load_hf_gpt2 refuses what does not fit, naming it", "[gpt_hf]") {
  manual_seed(4);
  models::GPT a(small_config());
  const TensorDict good = models::hf_gpt2_state(*a);
  models::GPT b(small_config());
  const Tensor before = b->wte->weight.clone();

  TensorDict hf = good;
  std::string err;
  SECTION("a missing tensor") {
    hf.erase("transformer.h.1.ln_2.bias");
    err = load_error(b, hf);
    CHECK_THAT(err, Catch::Contains("missing 'h.1.ln_2.bias'"));
  }
  SECTION("a wrong shape") {
    hf["transformer.h.0.attn.c_attn.weight"] = zeros({96, 32});  // nn::Linear's layout, not Conv1D's
    err = load_error(b, hf);
    CHECK_THAT(err, Catch::Contains("'transformer.h.0.attn.c_attn.weight' has shape [96, 32]"));
    CHECK_THAT(err, Catch::Contains("[32, 96]"));
  }
  SECTION("an unexpected name") {
    hf["transformer.h.2.ln_1.weight"] = ones({32});
    err = load_error(b, hf);
    CHECK_THAT(err, Catch::Contains("unexpected 'transformer.h.2.ln_1.weight'"));
    CHECK_THAT(err, Catch::Contains("n_layer=3"));  // what the checkpoint describes
    CHECK_THAT(err, Catch::Contains("hf_gpt2_config"));
  }
  SECTION("an untied lm_head") {
    hf["lm_head.weight"] = good.at("transformer.wte.weight") + 1.0;
    err = load_error(b, hf);
    CHECK_THAT(err, Catch::Contains("'lm_head.weight' differs from 'transformer.wte.weight'"));
  }
  SECTION("both spellings of one name") {
    hf["wte.weight"] = good.at("transformer.wte.weight");
    err = load_error(b, hf);
    CHECK_THAT(err, Catch::Contains("'transformer.' prefix"));
  }
  SECTION("integer values") {
    hf["transformer.ln_f.bias"] = zeros({32}, TensorOptions(kInt64));
    err = load_error(b, hf);
    CHECK_THAT(err, Catch::Contains("not floating point"));
  }
  SECTION("another model's width lists the first tensors and what the checkpoint is") {
    GPTConfig wide = small_config();
    wide.n_embd = 64;
    models::GPT w(wide);
    err = load_error(b, models::hf_gpt2_state(*w));
    CHECK_THAT(err, Catch::Contains("more"));
    CHECK_THAT(err, Catch::Contains("n_embd=64"));
  }
  CHECK(!err.empty());
  CHECK(equal(b->wte->weight, before));  // a refused dict leaves the model as it was
}

TEST_CASE("gpt_hf: logits equal transformers' on its own tiny GPT-2", "[gpt_hf]") {
  const std::string dir = mpx::testing::test_data_dir() + "/golden/gpt2_tiny/";
  const TensorDict hf = load_tensors(dir + "model.safetensors");
  const TensorDict ref = load_tensors(dir + "reference.safetensors");
  const GPTConfig c = models::hf_gpt2_config(hf, 4);  // config.json's n_head
  models::GPT m(c);
  models::load_hf_gpt2(*m, hf);
  const Tensor logits = logits_of(m, ref.at("input_ids"));
  REQUIRE(logits.sizes() == ref.at("logits").sizes());
  CHECK(max_abs_diff(logits, ref.at("logits")) < 1e-4);

  // Written back, the file holds what transformers' save_pretrained wrote: the same names,
  // shapes and bits.
  TempFile f("mpx_gpt_hf_export");
  models::save_hf_gpt2(*m, f.str());
  const TensorDict back = load_tensors(f.str());
  REQUIRE(back.size() == hf.size());
  for (const auto& [k, v] : hf) {
    INFO(k);
    REQUIRE(back.count(k) == 1);
    CHECK(equal(back.at(k), v));
  }
  // To check that transformers loads it: set MPX_GPT2_EXPORT to a file name, then run
  // tests/golden/make_gpt2_reference.py --check on that file.
  if (const char* out = std::getenv("MPX_GPT2_EXPORT")) models::save_hf_gpt2(*m, out);
}

TEST_CASE("lstm_lm: shapes, names and tied weights", "[lstm_lm]") {
  manual_seed(5);
  models::LSTMLMConfig c;
  c.vocab_size = 20, c.n_embd = 16, c.n_layer = 2;
  models::LSTMLM m(c);
  const Tensor ids = sample_ids(10, 3, 7);  // tokens 10..19 never occur
  const Tensor logits = m(ids);
  CHECK(logits.sizes() == IntList{3, 7, 20});

  std::vector<std::string> names;
  for (const auto& item : m->state_dict()) names.push_back(item.key());
  CHECK(names == std::vector<std::string>{"wte.weight", "lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0",
                                          "lstm.bias_hh_l0", "lstm.weight_ih_l1", "lstm.weight_hh_l1",
                                          "lstm.bias_ih_l1", "lstm.bias_hh_l1", "lm_head.bias"});
  CHECK(m->lm_head->weight.is_same(m->wte->weight));
  CHECK(unique_param_count(*m) == 20 * 16 + 2 * (2 * 4 * 16 * 16 + 2 * 4 * 16) + 20);

  // Rows of tokens absent from the input get gradient only through the projection.
  F::cross_entropy(logits.reshape({21, 20}), sample_ids(20, 1, 21).reshape({21})).backward();
  const Tensor g = m->wte->weight.grad();
  REQUIRE(g.defined());
  CHECK(max(abs(g.narrow(0, 15, 5))).item<double>() > 0);

  // to() moves the one shared tensor, so the tie survives it.
  m->to(kFloat64);
  CHECK(m->lm_head->weight.is_same(m->wte->weight));
  CHECK(m->lm_head->weight.dtype() == kFloat64);
  CHECK(m(ids).dtype() == kFloat64);

  c.tie_weights = false;
  models::LSTMLM u(c);
  CHECK(!u->lm_head->weight.is_same(u->wte->weight));
  CHECK(u->state_dict().contains("lm_head.weight"));
  CHECK(unique_param_count(*u) == unique_param_count(*m) + 20 * 16);
}

TEST_CASE("lstm_lm: loss falls on a repeating sequence", "[lstm_lm]") {
  manual_seed(6);
  models::LSTMLMConfig c;
  c.vocab_size = 8, c.n_embd = 32, c.n_layer = 2, c.dropout = 0.1;
  models::LSTMLM m(c);
  const int64_t B = 4, T = 16;
  std::vector<int64_t> x, y;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) x.push_back((b + t) % 8), y.push_back((b + t + 1) % 8);
  const Tensor xs = tensor(x, {B, T}), ys = tensor(y, {B * T});
  optim::Adam opt(m->parameters(), optim::AdamOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(m(xs).reshape({B * T, 8}), ys);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  INFO("first " << first << ", last " << last);
  CHECK(std::abs(first - std::log(8.0)) < 0.2);  // uniform-ish start
  CHECK(last < 0.3 * first);
}

TEST_CASE("models::gpt2 and the GPTConfig factories name the presets", "[gpt]") {
  using models::GPTConfig;
  CHECK(GPTConfig::gpt2().n_layer == 12);
  CHECK(GPTConfig::gpt2_medium().n_embd == 1024);
  CHECK(GPTConfig::gpt2_large().n_layer == 36);
  CHECK(GPTConfig::gpt2_xl().n_head == 25);
  CHECK(GPTConfig::gpt_tiny(65).vocab_size == 65);
  CHECK(GPTConfig::gpt_mini().n_ctx == 256);
  const models::GPT m = models::gpt2(GPTConfig::gpt_tiny(50));
  CHECK(m->config.n_embd == 128);
  CHECK(m->named_parameters().contains("h.3.attn.c_attn.weight"));
}
