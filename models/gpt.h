// GPT-2 (Radford et al. 2019) with Hugging Face's parameter names, and small configurations for CPUs.
#pragma once
#include <string>
#include <vector>

#include "nn/nn.h"

namespace mpx::models {

/// A GPT-2 shape. Presets: gpt2 (124 M), gpt2-medium, gpt2-large, gpt2-xl, and gpt-tiny (4 layers,
/// width 128, context 128) and gpt-mini (6 layers, width 384, context 256) for CPUs.
struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t n_ctx = 1024;     ///< the longest sequence (learned positions)
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;     ///< embedding, attention and residual dropout (GPT-2's is 0.1; 0 trains deterministically)
  double layer_norm_eps = 1e-5;
  /// A named preset with `vocab` tokens (gpt2's own vocabulary when 0); throws naming the known presets.
  static GPTConfig preset(const std::string& name, int64_t vocab = 0);
  /// The preset names.
  static std::vector<std::string> presets();
  /// The presets by name: `models::gpt2(GPTConfig::gpt2_medium())`.
  static GPTConfig gpt2() { return preset("gpt2"); }
  static GPTConfig gpt2_medium() { return preset("gpt2-medium"); }
  static GPTConfig gpt2_large() { return preset("gpt2-large"); }
  static GPTConfig gpt2_xl() { return preset("gpt2-xl"); }
  static GPTConfig gpt_tiny(int64_t vocab = 0) { return preset("gpt-tiny", vocab); }
  static GPTConfig gpt_mini(int64_t vocab = 0) { return preset("gpt-mini", vocab); }
};

/// The keys and values of the tokens a GPT has already seen, so that generating a token runs only
/// that token through the model (Hugging Face's past_key_values). GPT::forward(idx, &cache) fills
/// it: one [B, n_head, n_ctx, head_dim] buffer per layer for keys and one for values, in the
/// attention's dtype (bf16 under bf16 autocast), allocated at the first call. For inference only:
/// the call refuses to run with gradients enabled.
struct GPTKVCache {
  std::vector<Tensor> keys, values;
  int64_t length = 0;  ///< the tokens held: the position of the next token
  /// Forgets the tokens; the buffers stay for the next sequence (replaced if it needs others).
  void clear() { length = 0; }
};

/// One pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x)); attention is
/// causal on scaled_dot_product_attention, the MLP is c_fc, GELU (tanh form; one linear_gelu call), c_proj.
struct GPTBlockImpl : nn::Module {
  explicit GPTBlockImpl(const GPTConfig& c);
  Tensor forward(const Tensor& x);
  /// x holds the tokens after the `cache->length` cached ones; this block's keys and values
  /// (layer `layer` of the cache) are appended, and attention reads all of them.
  Tensor forward(const Tensor& x, GPTKVCache* cache, size_t layer);
  GPTConfig config;
  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
  nn::Dropout drop{nullptr};
};
MPX_MODULE(GPTBlock);

/// GPT-2: token (wte) and position (wpe) embeddings, n_layer blocks (h.0 ...), a final LayerNorm
/// (ln_f) and the output projection tied to wte. Parameter names follow Hugging Face's GPT2Model
/// (wte.weight, h.0.ln_1.weight, h.0.attn.c_attn.weight, ...), with nn::Linear's [out, in] layout
/// (Hugging Face's Conv1D stores [in, out]). Initialised as GPT-2: N(0, 0.02), residual
/// projections N(0, 0.02 / sqrt(2 n_layer)), zero biases.
struct GPTImpl : nn::Module {
  explicit GPTImpl(const GPTConfig& c);
  /// idx i64 [B, T] with T <= n_ctx -> logits [B, T, vocab].
  Tensor forward(const Tensor& idx);
  /// idx i64 [B, T]: the tokens that follow the cache's (positions cache->length ...), whose keys
  /// and values are appended to it -> logits [B, T, vocab], equal (to rounding) to the last T rows
  /// of forward() on the whole sequence. A null cache is forward(idx). Throws when gradients are
  /// enabled, when the cache would pass n_ctx, or when it holds tokens of another batch size,
  /// dtype, device or model (an empty cache takes any).
  Tensor forward(const Tensor& idx, GPTKVCache* cache);
  /// ln_f's output [B, T, n_embd] for idx after the cache's tokens (null: from position 0):
  /// generation projects only the last row onto the vocabulary.
  Tensor features(const Tensor& idx, GPTKVCache* cache = nullptr);
  GPTConfig config;
  /// Activation checkpointing per block (Hugging Face's gradient_checkpointing_enable()): in training each block
  /// keeps only its input and is recomputed in the backward (nn::utils::checkpoint), the same gradients for about
  /// a third more compute and a fraction of the activation memory.
  bool gradient_checkpointing = false;
  nn::Embedding wte{nullptr}, wpe{nullptr};
  nn::Dropout drop{nullptr};
  nn::ModuleList h{nullptr};
  nn::LayerNorm ln_f{nullptr};
};
MPX_MODULE(GPT);

/// A GPT-2 of configuration `c` (GPT(c)), as the other zoo factories: `models::gpt2(GPTConfig::gpt2())`.
inline GPT gpt2(const GPTConfig& c = GPTConfig::gpt2()) { return GPT(c); }

}  // namespace mpx::models
