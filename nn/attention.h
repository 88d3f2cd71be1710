// Attention modules with PyTorch's parameter names: MultiheadAttention, TransformerEncoderLayer / DecoderLayer, TransformerEncoder.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>

#include "core/arg.h"
#include "core/tensor.h"
#include "nn/container.h"
#include "nn/init.h"
#include "nn/module.h"
#include "nn/modules.h"

namespace mpx::nn {

/// Options of MultiheadAttention (LibTorch's names); kdim and vdim default to embed_dim.
struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads), kdim_(embed_dim), vdim_(embed_dim) {}
  MPX_ARG(int64_t, embed_dim);
  MPX_ARG(int64_t, num_heads);
  MPX_ARG(double, dropout) = 0.0;
  MPX_ARG(bool, bias) = true;
  /// A learned key and value row (bias_k, bias_v [1, 1, E]) appended to every sequence's keys and values.
  MPX_ARG(bool, add_bias_kv) = false;
  /// A zero key and value appended (after bias_k/bias_v) to every head's keys and values.
  MPX_ARG(bool, add_zero_attn) = false;
  MPX_ARG(int64_t, kdim);
  MPX_ARG(int64_t, vdim);
  /// Inputs and outputs [N, L, E] instead of [L, N, E].
  MPX_ARG(bool, batch_first) = false;
};

/// PyTorch's nn.MultiheadAttention. Parameters: in_proj_weight [3E, E] and in_proj_bias [3E]
/// (or q_proj_weight, k_proj_weight, v_proj_weight when kdim or vdim differ from embed_dim),
/// bias_k and bias_v [1, 1, E] with add_bias_kv, out_proj.weight, out_proj.bias: state dicts load
/// from and into PyTorch's.
class MultiheadAttentionImpl : public Module {
 public:
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);
  /// PyTorch's init: xavier_uniform_ projections, zero biases, xavier_normal_ bias_k and bias_v
  /// (out_proj.weight keeps Linear's init).
  void reset_parameters();
  /// query [L, N, E] (batch_first: [N, L, E]; unbatched [L, E]), key [S, N, kdim], value
  /// [S, N, vdim]. key_padding_mask [N, S] (bool: true = ignore that key; floating: added);
  /// attn_mask [L, S] or [N * num_heads, L, S] (same conventions). is_causal without attn_mask
  /// masks future keys (PyTorch requires the mask as well and treats the flag as a hint).
  /// Returns (output like query with embed_dim features, weights [N, L, S'] averaged over heads
  /// or [N, num_heads, L, S']; undefined unless need_weights; S' = S plus one for add_bias_kv and
  /// one for add_zero_attn, the masks extended with "take part" for those keys, as PyTorch). need_weights = false runs the
  /// fused scaled_dot_product_attention; need_weights = true builds the weights explicitly
  /// (a row with every key masked then gives NaN, as in PyTorch; the fused path gives 0).
  /// Dropout on the weights applies only in training mode.
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false);
  std::string name() const override { return "MultiheadAttention"; }
  void pretty_print(std::ostream& os) const override;

  MultiheadAttentionOptions options;
  int64_t head_dim = 0;
  bool qkv_same_embed_dim = true;
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias, bias_k, bias_v;
  Linear out_proj{nullptr};
};
MPX_MODULE(MultiheadAttention);

/// LibTorch's activation constants for Transformer layers (`.activation(mpx::nn::kGELU)`); the same values
/// nn::init takes.
using init::kGELU;
using init::kReLU;

/// A Transformer layer's feed-forward activation, as LibTorch's activation_t: kReLU or kGELU, their names
/// "relu" or "gelu", or any function of a tensor (a lambda, F::silu, ...).
struct TransformerActivation {
  TransformerActivation(const char* name);         // NOLINT: "relu" or "gelu"
  TransformerActivation(const std::string& name);  // NOLINT
  TransformerActivation(init::Nonlinearity n);     // NOLINT: kReLU or kGELU
  template <typename F>
    requires(std::is_invocable_r_v<Tensor, const F&, const Tensor&> && !std::is_convertible_v<F, std::string>)
  TransformerActivation(F fn) : name("custom"), fn(std::move(fn)) {}  // NOLINT
  Tensor operator()(const Tensor& x) const { return fn(x); }

  /// "relu", "gelu" or "custom".
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
};

/// Options of TransformerEncoderLayer / TransformerDecoderLayer (PyTorch's defaults).
struct TransformerLayerOptions {
  TransformerLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  MPX_ARG(int64_t, d_model);
  MPX_ARG(int64_t, nhead);
  MPX_ARG(int64_t, dim_feedforward) = 2048;
  MPX_ARG(double, dropout) = 0.1;
  MPX_ARG(TransformerActivation, activation) = kReLU;
  MPX_ARG(double, layer_norm_eps) = 1e-5;
  MPX_ARG(bool, batch_first) = false;
  /// Pre-norm (x + f(norm(x))) instead of post-norm (norm(x + f(x))).
  MPX_ARG(bool, norm_first) = false;
  MPX_ARG(bool, bias) = true;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

/// PyTorch's nn.TransformerEncoderLayer: self_attn, linear1, dropout, linear2, norm1, norm2,
/// dropout1, dropout2 (the same names and state-dict keys).
class TransformerEncoderLayerImpl : public Module {
 public:
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerEncoderLayerImpl(TransformerEncoderLayerOptions(d_model, nhead)) {}
  explicit TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& options);
  /// src [S, N, E] (batch_first: [N, S, E]); src_mask and src_key_padding_mask as in
  /// MultiheadAttention; is_causal masks future positions.
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  std::string name() const override { return "TransformerEncoderLayer"; }

  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn{nullptr};
  Linear linear1{nullptr}, linear2{nullptr};
  Dropout dropout{nullptr}, dropout1{nullptr}, dropout2{nullptr};
  LayerNorm norm1{nullptr}, norm2{nullptr};
};
MPX_MODULE(TransformerEncoderLayer);

/// PyTorch's nn.TransformerDecoderLayer: self_attn, multihead_attn, linear1, dropout, linear2,
/// norm1, norm2, norm3, dropout1, dropout2, dropout3.
class TransformerDecoderLayerImpl : public Module {
 public:
  TransformerDecoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerDecoderLayerImpl(TransformerDecoderLayerOptions(d_model, nhead)) {}
  explicit TransformerDecoderLayerImpl(const TransformerDecoderLayerOptions& options);
  /// tgt [T, N, E] and memory [S, N, E] (batch_first: batch first); masks as in MultiheadAttention.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  std::string name() const override { return "TransformerDecoderLayer"; }

  TransformerDecoderLayerOptions options;
  MultiheadAttention self_attn{nullptr}, multihead_attn{nullptr};
  Linear linear1{nullptr}, linear2{nullptr};
  Dropout dropout{nullptr}, dropout1{nullptr}, dropout2{nullptr}, dropout3{nullptr};
  LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
};
MPX_MODULE(TransformerDecoderLayer);

/// Options of TransformerEncoder: the layer to copy num_layers times and an optional final norm.
struct TransformerEncoderOptions {
  TransformerEncoderOptions(TransformerEncoderLayer encoder_layer, int64_t num_layers)
      : encoder_layer_(std::move(encoder_layer)), num_layers_(num_layers) {}
  TransformerEncoderOptions(const TransformerEncoderLayerOptions& layer, int64_t num_layers)
      : encoder_layer_(TransformerEncoderLayer(layer)), num_layers_(num_layers) {}
  MPX_ARG(TransformerEncoderLayer, encoder_layer);
  MPX_ARG(int64_t, num_layers);
  /// Applied after the last layer when set (PyTorch's `norm`).
  MPX_ARG(LayerNorm, norm) = nullptr;
};

/// PyTorch's nn.TransformerEncoder: layers.0 ... layers.{n-1}, each starting as a copy of
/// encoder_layer's parameters (PyTorch deep-copies it), then the optional norm.
class TransformerEncoderImpl : public Module {
 public:
  TransformerEncoderImpl(TransformerEncoderLayer encoder_layer, int64_t num_layers)
      : TransformerEncoderImpl(TransformerEncoderOptions(std::move(encoder_layer), num_layers)) {}
  explicit TransformerEncoderImpl(const TransformerEncoderOptions& options);
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  std::string name() const override { return "TransformerEncoder"; }

  TransformerEncoderOptions options;
  ModuleList layers{nullptr};
  LayerNorm norm{nullptr};
};
MPX_MODULE(TransformerEncoder);

/// Options of TransformerDecoder: the layer to copy num_layers times and an optional final norm.
struct TransformerDecoderOptions {
  TransformerDecoderOptions(TransformerDecoderLayer decoder_layer, int64_t num_layers)
      : decoder_layer_(std::move(decoder_layer)), num_layers_(num_layers) {}
  TransformerDecoderOptions(const TransformerDecoderLayerOptions& layer, int64_t num_layers)
      : decoder_layer_(TransformerDecoderLayer(layer)), num_layers_(num_layers) {}
  MPX_ARG(TransformerDecoderLayer, decoder_layer);
  MPX_ARG(int64_t, num_layers);
  /// Applied after the last layer when set (PyTorch's `norm`).
  MPX_ARG(LayerNorm, norm) = nullptr;
};

/// PyTorch's nn.TransformerDecoder: layers.0 ... layers.{n-1}, copies of decoder_layer, then the
/// optional norm.
class TransformerDecoderImpl : public Module {
 public:
  TransformerDecoderImpl(TransformerDecoderLayer decoder_layer, int64_t num_layers)
      : TransformerDecoderImpl(TransformerDecoderOptions(std::move(decoder_layer), num_layers)) {}
  explicit TransformerDecoderImpl(const TransformerDecoderOptions& options);
  /// As TransformerDecoderLayer::forward, through every layer.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  std::string name() const override { return "TransformerDecoder"; }

  TransformerDecoderOptions options;
  ModuleList layers{nullptr};
  LayerNorm norm{nullptr};
};
MPX_MODULE(TransformerDecoder);

/// Options of nn::Transformer (PyTorch's defaults: the base model of "Attention Is All You Need").
struct TransformerOptions {
  TransformerOptions() = default;
  TransformerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  MPX_ARG(int64_t, d_model) = 512;
  MPX_ARG(int64_t, nhead) = 8;
  MPX_ARG(int64_t, num_encoder_layers) = 6;
  MPX_ARG(int64_t, num_decoder_layers) = 6;
  MPX_ARG(int64_t, dim_feedforward) = 2048;
  MPX_ARG(double, dropout) = 0.1;
  MPX_ARG(TransformerActivation, activation) = kReLU;
  MPX_ARG(double, layer_norm_eps) = 1e-5;
  MPX_ARG(bool, batch_first) = false;
  MPX_ARG(bool, norm_first) = false;
  MPX_ARG(bool, bias) = true;
};

/// PyTorch's nn.Transformer: `encoder` (a TransformerEncoder with a final LayerNorm) and `decoder`
/// (a TransformerDecoder with one), the same state-dict keys (encoder.layers.0.self_attn.in_proj_weight,
/// ..., decoder.norm.bias); every matrix initialized xavier_uniform_ as PyTorch's _reset_parameters.
class TransformerImpl : public Module {
 public:
  TransformerImpl() : TransformerImpl(TransformerOptions()) {}
  explicit TransformerImpl(const TransformerOptions& options);
  /// src [S, N, E] and tgt [T, N, E] (batch_first: [N, *, E]) -> [T, N, E]: the encoder on src, the
  /// decoder on tgt over its output; masks and flags as the layers take them (memory_mask and
  /// memory_key_padding_mask are the decoder's cross-attention ones; PyTorch's default for the
  /// latter is src_key_padding_mask's absence, not its copy).
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool src_is_causal = false, bool tgt_is_causal = false, bool memory_is_causal = false);
  /// A float [sz, sz] mask: 0 on and below the diagonal, -inf above (PyTorch's
  /// Transformer.generate_square_subsequent_mask).
  static Tensor generate_square_subsequent_mask(int64_t sz, const TensorOptions& options = {});
  std::string name() const override { return "Transformer"; }

  TransformerOptions options;
  TransformerEncoder encoder{nullptr};
  TransformerDecoder decoder{nullptr};
};
MPX_MODULE(Transformer);

}  // namespace mpx::nn

namespace mpx {
/// LibTorch spells these torch::kReLU and torch::kGELU.
using nn::kGELU;
using nn::kReLU;
}  // namespace mpx
