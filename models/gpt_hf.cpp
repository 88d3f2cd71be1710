// Hugging Face GPT-2 state dicts to and from models::GPT: names, Conv1D transposes, strict checks with actionable errors.
#include "models/gpt_hf.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "core/json.h"
#include "ops/elementwise.h"

namespace mpx::models {

namespace {

const std::string kPrefix = "transformer.";
const std::string kLmHead = "lm_head.weight";
constexpr size_t kMaxListed = 20;  // a width mismatch misshapes every tensor; the first ones say enough

std::string strip_prefix(const std::string& name) {
  return name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
}

// "h.<N>.<rest>" -> N (and rest), or -1 for names outside the blocks.
int64_t block_index(const std::string& name, std::string* rest = nullptr) {
  if (name.rfind("h.", 0) != 0) return -1;
  const size_t dot = name.find('.', 2);
  if (dot == std::string::npos || dot == 2) return -1;
  int64_t n = 0;
  for (size_t i = 2; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9' || n > 1'000'000) return -1;
    n = n * 10 + (name[i] - '0');
  }
  if (rest) *rest = name.substr(dot + 1);
  return n;
}

// The causal-mask buffers older transformers versions saved; they hold no weights.
bool is_mask_buffer(const std::string& name) {
  std::string rest;
  return block_index(name, &rest) >= 0 && (rest == "attn.bias" || rest == "attn.masked_bias");
}

// Hugging Face's Conv1D keeps these as [in, out]; nn::Linear as [out, in].
bool is_conv1d_weight(const std::string& name) {
  std::string rest;
  return block_index(name, &rest) >= 0 && (rest == "attn.c_attn.weight" || rest == "attn.c_proj.weight" ||
                                           rest == "mlp.c_fc.weight" || rest == "mlp.c_proj.weight");
}

struct Entry {
  std::string file_name;  // as the checkpoint spells it, for errors
  Tensor tensor;
};

// The checkpoint's tensors under prefix-less names, lm_head.weight left out.
std::map<std::string, Entry> by_model_name(const TensorDict& hf) {
  std::map<std::string, Entry> out;
  for (const auto& [name, t] : hf) {
    if (name == kLmHead) continue;
    const std::string key = strip_prefix(name);
    auto [it, fresh] = out.emplace(key, Entry{name, t});
    MPX_CHECK(fresh, "Hugging Face GPT-2 weights: both '", it->second.file_name, "' and '", name,
              "' are present; a state dict uses the 'transformer.' prefix on all of its tensors or on none, "
              "so remove one of the two");
  }
  return out;
}

const Tensor& require(const std::map<std::string, Entry>& found, const std::string& name, int64_t dims) {
  auto it = found.find(name);
  MPX_CHECK(it != found.end(), "Hugging Face GPT-2 weights: no '", name, "' (or '", kPrefix, name,
            "'); pass the model.safetensors of a GPT2LMHeadModel or GPT2Model checkpoint");
  MPX_CHECK(it->second.tensor.dim() == dims, "Hugging Face GPT-2 weights: '", it->second.file_name, "' has shape ",
            shape_str(it->second.tensor.sizes()), ", expected ", dims, " dimensions; is this a GPT-2 checkpoint?");
  return it->second.tensor;
}

std::string describe(const GPTConfig& c) {
  return detail::str_cat("vocab_size=", c.vocab_size, ", n_ctx=", c.n_ctx, ", n_layer=", c.n_layer,
                         ", n_embd=", c.n_embd);
}

}  // namespace

GPTConfig hf_gpt2_config(const TensorDict& hf, int64_t n_head) {
  const auto found = by_model_name(hf);
  const Tensor& wte = require(found, "wte.weight", 2);
  const Tensor& wpe = require(found, "wpe.weight", 2);
  MPX_CHECK(wte.size(1) == wpe.size(1), "Hugging Face GPT-2 weights: wte is ", shape_str(wte.sizes()), " but wpe is ",
            shape_str(wpe.sizes()), "; both must have the model's width as their second dimension");
  std::set<int64_t> blocks;
  for (const auto& [name, e] : found)
    if (const int64_t i = block_index(name); i >= 0) blocks.insert(i);
  MPX_CHECK(!blocks.empty(), "Hugging Face GPT-2 weights: no transformer blocks (h.0.*); pass a complete GPT-2 "
            "state dict");
  const auto n_layer = static_cast<int64_t>(blocks.size());
  MPX_CHECK(*blocks.rbegin() == n_layer - 1, "Hugging Face GPT-2 weights: the blocks are not numbered h.0 .. h.",
            n_layer - 1, " (the highest is h.", *blocks.rbegin(), "); the checkpoint is incomplete");

  GPTConfig c;
  c.vocab_size = wte.size(0);
  c.n_embd = wte.size(1);
  c.n_ctx = wpe.size(0);
  c.n_layer = n_layer;
  c.n_head = n_head;
  if (n_head <= 0) {
    c.n_head = 0;
    for (const auto& p : GPTConfig::presets()) {
      const GPTConfig pc = GPTConfig::preset(p);
      if (pc.n_embd == c.n_embd && pc.n_layer == c.n_layer) c.n_head = pc.n_head;
    }
    if (c.n_head == 0 && c.n_embd % 64 == 0) c.n_head = c.n_embd / 64;  // GPT-2's head width
    MPX_CHECK(c.n_head > 0, "Hugging Face GPT-2 weights: the number of heads of a width-", c.n_embd,
              " model cannot be inferred (no preset has this width and ", c.n_layer,
              " layers, and the width is no multiple of 64); pass n_head (the checkpoint's config.json has it)");
  }
  MPX_CHECK(c.n_embd % c.n_head == 0, "Hugging Face GPT-2 weights: n_head = ", c.n_head, " does not divide the width ",
            c.n_embd, "; pass the n_head of the checkpoint's config.json");
  return c;
}

GPTConfig hf_gpt2_config(const TensorDict& hf, const std::string& config_json) {
  std::ifstream in(config_json, std::ios::binary);
  MPX_CHECK(in, "hf_gpt2_config: cannot read '", config_json, "'; pass the config.json saved with the weights");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json::Value cfg;
  try {
    cfg = json::parse(text.data(), text.size());
  } catch (const json::ParseError& e) {
    MPX_ERROR("hf_gpt2_config: '", config_json, "' is not JSON (byte ", e.pos, ": ", e.what, ")");
  }
  auto field = [&](const char* name) -> int64_t {
    const json::Value* v = cfg.find(name);
    uint64_t n = 0;
    MPX_CHECK(v && json::as_u63(*v, &n) && n > 0, "hf_gpt2_config: '", config_json, "' has no positive integer \"",
              name, "\"; is it a GPT-2 config.json?");
    return static_cast<int64_t>(n);
  };
  GPTConfig c = hf_gpt2_config(hf, field("n_head"));
  for (const auto& [name, have] : {std::pair<const char*, int64_t>{"n_embd", c.n_embd}, {"n_layer", c.n_layer},
                                   {"n_positions", c.n_ctx}, {"vocab_size", c.vocab_size}})
    if (cfg.find(name)) {
      const int64_t want = field(name);
      MPX_CHECK(want == have, "hf_gpt2_config: '", config_json, "' says ", name, " = ", want, " but the weights have ",
                have, "; the config.json belongs to another model");
    }
  return c;
}

void load_hf_gpt2(GPTImpl& model, const TensorDict& hf) {
  const auto found = by_model_name(hf);
  std::set<std::string> used;
  std::vector<std::string> problems;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (parameter, value in its layout), applied once all is checked

  for (const auto& item : model.state_dict()) {
    const std::string& name = item.key();
    const Tensor& dst = item.value();
    auto it = found.find(name);
    if (it == found.end()) {
      problems.push_back(detail::str_cat("missing '", name, "' (or '", kPrefix, name, "')"));
      continue;
    }
    const Tensor& src = it->second.tensor;
    const std::string& file_name = it->second.file_name;
    used.insert(name);
    const bool conv = is_conv1d_weight(name) && dst.dim() == 2;
    const IntList want = conv ? IntList{dst.size(1), dst.size(0)} : dst.sizes();
    if (!src.is_floating_point()) {
      problems.push_back(detail::str_cat("'", file_name, "' holds ", dtype_name(src.dtype()), ", not floating point"));
    } else if (src.sizes() != want) {
      problems.push_back(detail::str_cat("'", file_name, "' has shape ", shape_str(src.sizes()), ", this model needs ",
                                         shape_str(want), conv ? " (Conv1D's [in, out])" : ""));
    } else {
      copies.emplace_back(dst, conv ? src.t().contiguous() : src);
    }
  }
  for (const auto& [name, e] : found)
    if (!used.contains(name) && !is_mask_buffer(name))
      problems.push_back(detail::str_cat("unexpected '", e.file_name, "'"));

  // models::GPT's output projection is wte itself, so only a tied lm_head can be represented.
  if (auto lm = hf.find(kLmHead); lm != hf.end()) {
    auto wte = found.find("wte.weight");
    if (wte != found.end()) {
      const Tensor& w = wte->second.tensor;
      const Tensor& l = lm->second;
      if (l.sizes() != w.sizes()) {
        problems.push_back(detail::str_cat("'", kLmHead, "' has shape ", shape_str(l.sizes()), " but '",
                                           wte->second.file_name, "' ", shape_str(w.sizes()),
                                           "; GPT-2 ties the two, so they must be the same tensor"));
      } else if (!equal(l.to(w.device(), w.dtype()), w)) {
        problems.push_back(detail::str_cat(
            "'", kLmHead, "' differs from '", wte->second.file_name,
            "': this checkpoint's output projection is untied, and models::GPT always projects with wte (tied, "
            "as GPT-2), so it cannot hold it; use a checkpoint whose lm_head is tied to wte"));
      }
    }
  }

  if (!problems.empty()) {
    std::string msg = detail::str_cat("load_hf_gpt2: the checkpoint does not fit this GPT (", describe(model.config),
                                      "); nothing was loaded:");
    for (size_t i = 0; i < problems.size() && i < kMaxListed; ++i) msg += "\n  " + problems[i];
    if (problems.size() > kMaxListed) msg += detail::str_cat("\n  ... and ", problems.size() - kMaxListed, " more");
    try {
      const std::string theirs = describe(hf_gpt2_config(hf, 1));
      msg += theirs == describe(model.config)
                 ? "\nThe checkpoint has this model's shape, so it is incomplete or holds more than GPT-2: "
                   "re-export it with transformers' save_pretrained."
                 : "\nThe checkpoint describes " + theirs +
                       "; build the model from models::hf_gpt2_config(tensors) so the shapes match.";
    } catch (const Error&) {
      msg += "\nPass the model.safetensors of a Hugging Face GPT2LMHeadModel or GPT2Model.";
    }
    throw Error(msg);
  }

  NoGradGuard ng;
  for (auto& [dst, src] : copies) dst.copy_(src.to(dst.device(), dst.dtype()));
}

TensorDict hf_gpt2_state(const GPTImpl& model) {
  TensorDict out;
  for (const auto& item : model.state_dict()) {
    const Tensor& t = item.value();
    out.emplace(kPrefix + item.key(), is_conv1d_weight(item.key()) ? t.t().contiguous() : t.contiguous());
  }
  return out;
}

void save_hf_gpt2(const GPTImpl& model, const std::string& path) {
  save_tensors(hf_gpt2_state(model), path, Metadata{{"format", "pt"}});
}

}  // namespace mpx::models
