// GPT-2's blocks, forward pass, presets and initialisation.
#include "models/gpt.h"

#include <cmath>

#include "nn/checkpoint.h"
#include "ops/attention.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/op_utils.h"
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

Tensor GPTBlockImpl::forward(const Tensor& x) { return forward(x, nullptr, 0); }

Tensor GPTBlockImpl::forward(const Tensor& x, GPTKVCache* cache, size_t layer) {
  const int64_t B = x.size(0), T = x.size(1), C = config.n_embd, H = config.n_head, D = C / H;
  const tensor_list qkv = split(c_attn(ln_1(x)), C, 2);  // [B, T, 3C] as three [B, T, C] views
  auto heads = [&](int64_t i) { return qkv[static_cast<size_t>(i)].view({B, T, H, D}).transpose(1, 2); };
  Tensor k = heads(1), v = heads(2), mask;
  bool causal = true;
  if (cache) {
    const int64_t past = cache->length;
    Tensor &K = cache->keys[layer], &V = cache->values[layer];
    const IntList shape = {B, H, config.n_ctx, D};
    const bool fits = K.defined() && K.sizes() == shape && K.dtype() == k.dtype() && K.device() == k.device();
    if (past == 0 && !fits) {
      K = empty(shape, k.options());
      V = empty(shape, v.options());
    }
    MPX_CHECK(past == 0 || fits, "GPT: the cache holds ", past, " tokens as ", K.defined() ? ops::describe(K) : "nothing",
              ", this call needs ", shape_str(shape), " ", dtype_name(k.dtype()), " on ", k.device().str(),
              " (another batch size, dtype, device or model); clear() the cache to start a new sequence");
    K.narrow(2, past, T).copy_(k);
    V.narrow(2, past, T).copy_(v);
    k = K.narrow(2, 0, past + T);
    v = V.narrow(2, 0, past + T);
    // Query i (position past + i) sees keys 0 ... past + i: PyTorch's is_causal aligns the
    // triangle top-left, so past the first call it is a mask (none for a single query).
    if (past > 0) {
      causal = false;
      if (T > 1) mask = tril(ones({T, past + T}, TensorOptions(kBool).device(x.device())), past);
    }
  }
  Tensor y = scaled_dot_product_attention(heads(0), k, v, mask, is_training() ? config.dropout : 0.0, causal);
  y = y.transpose(1, 2).reshape({B, T, C});
  Tensor h = x + drop(attn_proj(y));
  // c_fc and its GELU as one op: in inference the GELU runs in the GEMM's epilogue.
  return h + drop(mlp_proj(linear_gelu(ln_2(h), c_fc->weight, c_fc->bias, "tanh")));
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

Tensor GPTImpl::features(const Tensor& idx, GPTKVCache* cache) {
  MPX_CHECK(idx.dim() == 2, "GPT: input must be token indices [B, T], got ", shape_str(idx.sizes()));
  const int64_t T = idx.size(1), past = cache ? cache->length : 0;
  if (cache) {
    MPX_CHECK(!GradMode::is_enabled(), "GPT: a key/value cache is for inference; run under NoGradGuard");
    MPX_CHECK(past + T <= config.n_ctx, "GPT: the cache holds ", past, " tokens and ", T,
              " more would pass the context n_ctx = ", config.n_ctx, "; clear() it and run the last ", config.n_ctx,
              " tokens at most");
    cache->keys.resize(h->size());
    cache->values.resize(h->size());
  } else {
    MPX_CHECK(T <= config.n_ctx, "GPT: sequence length ", T, " exceeds the context n_ctx = ", config.n_ctx,
              "; crop the input to its last ", config.n_ctx, " tokens");
  }
  Tensor pos = arange(static_cast<double>(past), static_cast<double>(past + T), 1.0,
                      TensorOptions(kInt64).device(idx.device()));
  Tensor x = drop(wte(idx) + wpe(pos));
  for (size_t i = 0; i < h->size(); ++i) {
    if (gradient_checkpointing && !cache && x.requires_grad()) {
      const std::shared_ptr<nn::Module> block = (*h)[i];  // the node keeps the block until its backward
      x = nn::utils::checkpoint([block](const Tensor& t) { return block->as<GPTBlockImpl>()->forward(t); }, x);
    } else {
      x = (*h)[i]->as<GPTBlockImpl>()->forward(x, cache, i);
    }
  }
  if (cache) cache->length = past + T;
  return ln_f(x);
}

// The output projection shares wte's weight (tied embeddings), as GPT-2.
Tensor GPTImpl::forward(const Tensor& idx) { return F::linear(features(idx), wte->weight); }

Tensor GPTImpl::forward(const Tensor& idx, GPTKVCache* cache) { return F::linear(features(idx, cache), wte->weight); }

}  // namespace mpx::models
