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
};

/// One pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x)); attention is
/// causal on scaled_dot_product_attention, the MLP is c_fc, GELU (tanh form), c_proj.
struct GPTBlockImpl : nn::Module {
  explicit GPTBlockImpl(const GPTConfig& c);
  Tensor forward(const Tensor& x);
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
  GPTConfig config;
  nn::Embedding wte{nullptr}, wpe{nullptr};
  nn::Dropout drop{nullptr};
  nn::ModuleList h{nullptr};
  nn::LayerNorm ln_f{nullptr};
};
MPX_MODULE(GPT);

}  // namespace mpx::models
