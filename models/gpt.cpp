// GPT-2's blocks, forward pass, presets and initialisation.
#include "models/gpt.h"

#include <cmath>

#include "ops/attention.h"
#include "ops/shape.h"

namespace mpx::models {
namespace F = nn::functional;

GPTConfig GPTConfig::preset(const std::string& name, int64_t vocab) {
  GPTConfig c;
  if (name == "gpt2") {
  } else if (name == "gpt2-medium") {
    c.n_layer = 24, c.n_head = 16, c.n_embd = 1024;
  } else if (name == "gpt2-large") {
    c.n_layer = 36, c.n_head = 20, c.n_embd = 1280;
  } else if (name == "gpt2-xl") {
    c.n_layer = 48, c.n_head = 25, c.n_embd = 1600;
  } else if (name == "gpt-tiny") {
    c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.n_ctx = 128;
  } else if (name == "gpt-mini") {
    c.n_layer = 6, c.n_head = 6, c.n_embd = 384, c.n_ctx = 256;
  } else {
    std::string known;
    for (const auto& p : presets()) known += (known.empty() ? "" : ", ") + p;
    MPX_ERROR("GPT: unknown configuration '", name, "'; known: ", known);
  }
  if (vocab > 0) c.vocab_size = vocab;
  return c;
}

std::vector<std::string> GPTConfig::presets() { return {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt-tiny", "gpt-mini"}; }

namespace {
void check_config(const GPTConfig& c) {
  MPX_CHECK(c.vocab_size > 0 && c.n_ctx > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0,
            "GPT: vocab_size, n_ctx, n_layer, n_head and n_embd must be positive");
  MPX_CHECK(c.n_embd % c.n_head == 0, "GPT: n_embd (", c.n_embd, ") must be divisible by n_head (", c.n_head, ")");
}
}  // namespace

GPTBlockImpl::GPTBlockImpl(const GPTConfig& c) : config(c) {
  const int64_t C = c.n_embd;
  ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({C}).eps(c.layer_norm_eps)));
  // Hugging Face nests the projections as attn.c_attn / attn.c_proj and mlp.c_fc / mlp.c_proj.
  auto attn = std::make_shared<nn::Module>();
  c_attn = attn->register_module("c_attn", nn::Linear(C, 3 * C));
  attn_proj = attn->register_module("c_proj", nn::Linear(C, C));
  register_module("attn", attn);
  ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({C}).eps(c.layer_norm_eps)));
  auto mlp = std::make_shared<nn::Module>();
  c_fc = mlp->register_module("c_fc", nn::Linear(C, 4 * C));
  mlp_proj = mlp->register_module("c_proj", nn::Linear(4 * C, C));
  register_module("mlp", mlp);
  drop = register_module("drop", nn::Dropout(c.dropout));
  NoGradGuard ng;
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (nn::Linear* l : {&c_attn, &c_fc}) nn::init::normal_((*l)->weight, 0.0, 0.02);
  for (nn::Linear* l : {&attn_proj, &mlp_proj}) nn::init::normal_((*l)->weight, 0.0, proj_std);
  for (nn::Linear* l : {&c_attn, &attn_proj, &c_fc, &mlp_proj}) nn::init::zeros_((*l)->bias);
}

Tensor GPTBlockImpl::forward(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = config.n_embd, H = config.n_head, D = C / H;
  const tensor_list qkv = split(c_attn(ln_1(x)), C, 2);  // [B, T, 3C] as three [B, T, C] views
  auto heads = [&](int64_t i) { return qkv[static_cast<size_t>(i)].view({B, T, H, D}).transpose(1, 2); };
  Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), {}, is_training() ? config.dropout : 0.0,
                                          /*is_causal=*/true);
  y = y.transpose(1, 2).reshape({B, T, C});
  Tensor h = x + drop(attn_proj(y));
  return h + drop(mlp_proj(F::gelu(c_fc(ln_2(h)), F::GELUFuncOptions().approximate("tanh"))));
}

GPTImpl::GPTImpl(const GPTConfig& c) : config(c) {
  check_config(c);
  wte = register_module("wte", nn::Embedding(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", nn::Embedding(c.n_ctx, c.n_embd));
  drop = register_module("drop", nn::Dropout(c.dropout));
  h = register_module("h", nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(GPTBlock(c));
  ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_eps)));
  NoGradGuard ng;
  nn::init::normal_(wte->weight, 0.0, 0.02);
  nn::init::normal_(wpe->weight, 0.0, 0.02);
}

Tensor GPTImpl::forward(const Tensor& idx) {
  MPX_CHECK(idx.dim() == 2, "GPT: input must be token indices [B, T], got ", shape_str(idx.sizes()));
  const int64_t T = idx.size(1);
  MPX_CHECK(T <= config.n_ctx, "GPT: sequence length ", T, " exceeds the context n_ctx = ", config.n_ctx,
            "; crop the input to its last ", config.n_ctx, " tokens");
  Tensor pos = arange(static_cast<double>(T), TensorOptions(kInt64).device(idx.device()));
  Tensor x = drop(wte(idx) + wpe(pos));
  for (const auto& m : *h) x = m->as<GPTBlockImpl>()->forward(x);
  // The output projection shares wte's weight (tied embeddings), as GPT-2.
  return F::linear(ln_f(x), wte->weight);
}

}  // namespace mpx::models
