// MultiheadAttention and the Transformer layers: PyTorch's forward passes on the fused attention op.
#include "nn/attention.h"

#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "ops/activation.h"
#include "ops/shape.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx::nn {
namespace F = functional;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// A bool mask (true = masked out, MultiheadAttention's convention) as -inf/0 in dtype; a floating one cast.
Tensor additive_mask(const Tensor& m, DType dt) {
  if (m.dtype() == kBool) {
    NoGradGuard ng;
    const TensorOptions o = TensorOptions(dt).device(m.device());
    return where(m, full({}, -kInf, o), zeros({}, o));
  }
  MPX_CHECK(is_floating(m.dtype()), "MultiheadAttention: masks must be bool (true = ignore) or floating (added), got ",
            ops::describe(m));
  return m.to(dt);
}

// The -inf/0 mask of key j > query i, [L, S].
Tensor causal_mask(int64_t L, int64_t S, DType dt, Device dev) {
  NoGradGuard ng;
  const TensorOptions o = TensorOptions(dt).device(dev);
  const Tensor i = arange(static_cast<double>(L), TensorOptions(kInt64).device(dev)).reshape({L, 1});
  const Tensor j = arange(static_cast<double>(S), TensorOptions(kInt64).device(dev)).reshape({1, S});
  return where(gt(j, i), full({}, -kInf, o), zeros({}, o));
}

Tensor activation(const TransformerActivation& a, const Tensor& x) { return a(x); }

void check_activation(const char* module, const TransformerActivation& a) {
  MPX_CHECK(a.fn != nullptr, module, ": the activation function is empty");
}

std::function<Tensor(const Tensor&)> named_activation(const std::string& name) {
  if (name == "relu") return [](const Tensor& x) { return mpx::relu(x); };
  if (name == "gelu") return [](const Tensor& x) { return mpx::gelu(x); };
  MPX_ERROR("Transformer layer: activation must be \"relu\" or \"gelu\" (or kReLU, kGELU, or a function of a tensor), "
            "got \"", name, "\"");
}
}  // namespace

TransformerActivation::TransformerActivation(const char* n)
    : TransformerActivation(std::string(n != nullptr ? n : "(null)")) {}
TransformerActivation::TransformerActivation(const std::string& n) : name(n), fn(named_activation(n)) {}
TransformerActivation::TransformerActivation(init::Nonlinearity n) {
  MPX_CHECK(n == init::kReLU || n == init::kGELU, "Transformer layer: the activation must be kReLU or kGELU, or a "
            "function of a tensor");
  *this = TransformerActivation(n == init::kReLU ? "relu" : "gelu");
}

// ---------------------------------------------------------------- MultiheadAttention

MultiheadAttentionImpl::MultiheadAttentionImpl(const MultiheadAttentionOptions& o) : options(o) {
  const int64_t E = o.embed_dim();
  MPX_CHECK(E > 0 && o.num_heads() > 0, "MultiheadAttention: embed_dim (", E, ") and num_heads (", o.num_heads(),
            ") must be positive");
  MPX_CHECK(E % o.num_heads() == 0, "MultiheadAttention: embed_dim (", E, ") must be divisible by num_heads (",
            o.num_heads(), ")");
  MPX_CHECK(o.kdim() > 0 && o.vdim() > 0, "MultiheadAttention: kdim (", o.kdim(), ") and vdim (", o.vdim(),
            ") must be positive");
  MPX_CHECK(o.dropout() >= 0.0 && o.dropout() <= 1.0, "MultiheadAttention: dropout must be in [0, 1], got ",
            o.dropout());
  head_dim = E / o.num_heads();
  qkv_same_embed_dim = o.kdim() == E && o.vdim() == E;
  // PyTorch's registration order, so state dicts list the same keys in the same order.
  if (qkv_same_embed_dim) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({E, E}));
    k_proj_weight = register_parameter("k_proj_weight", empty({E, o.kdim()}));
    v_proj_weight = register_parameter("v_proj_weight", empty({E, o.vdim()}));
  }
  if (o.bias()) in_proj_bias = register_parameter("in_proj_bias", empty({3 * E}));
  if (o.add_bias_kv()) {
    bias_k = register_parameter("bias_k", empty({1, 1, E}));
    bias_v = register_parameter("bias_v", empty({1, 1, E}));
  }
  out_proj = register_module("out_proj", Linear(LinearOptions(E, E).bias(o.bias())));
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  if (qkv_same_embed_dim) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
  if (bias_k.defined()) {
    init::xavier_normal_(bias_k);
    init::xavier_normal_(bias_v);
  }
}

void MultiheadAttentionImpl::pretty_print(std::ostream& os) const {
  os << "MultiheadAttention(embed_dim=" << options.embed_dim() << ", num_heads=" << options.num_heads()
     << ", dropout=" << options.dropout() << ", batch_first=" << (options.batch_first() ? "true" : "false");
  if (options.add_bias_kv()) os << ", add_bias_kv=true";
  if (options.add_zero_attn()) os << ", add_zero_attn=true";
  os << ")";
}

std::tuple<Tensor, Tensor> MultiheadAttentionImpl::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                           const Tensor& key_padding_mask, bool need_weights,
                                                           const Tensor& attn_mask, bool average_attn_weights,
                                                           bool is_causal) {
  const int64_t E = options.embed_dim(), nh = options.num_heads(), hd = head_dim;
  MPX_CHECK(query.defined() && key.defined() && value.defined(), "MultiheadAttention: query, key and value must be defined");
  MPX_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() && value.dim() == query.dim(),
            "MultiheadAttention: query, key and value must all be 3-d ([L, N, E], or [N, L, E] with batch_first) or "
            "all 2-d (unbatched), got query ", ops::describe(query), ", key ", ops::describe(key), ", value ",
            ops::describe(value));
  const bool batched = query.dim() == 3;
  // Work in [L, N, E].
  Tensor q = query, k = key, v = value, kpm = key_padding_mask;
  if (!batched) {
    q = q.unsqueeze(1), k = k.unsqueeze(1), v = v.unsqueeze(1);
    if (kpm.defined()) kpm = kpm.unsqueeze(0);
  } else if (options.batch_first()) {
    q = q.transpose(0, 1), k = k.transpose(0, 1), v = v.transpose(0, 1);
  }
  const int64_t L = q.size(0), N = q.size(1), S = k.size(0);
  MPX_CHECK(q.size(2) == E && k.size(2) == options.kdim() && v.size(2) == options.vdim(),
            "MultiheadAttention: expected query, key and value features ", E, ", ", options.kdim(), ", ",
            options.vdim(), ", got query ", ops::describe(query), ", key ", ops::describe(key), ", value ",
            ops::describe(value));
  MPX_CHECK(k.size(1) == N && v.size(1) == N && v.size(0) == S, "MultiheadAttention: key ", ops::describe(key),
            " and value ", ops::describe(value), " must match query's batch (", N, ") and each other's length");

  Tensor wq, wk, wv, bq, bk, bv;
  if (qkv_same_embed_dim) {
    const tensor_list w = split(in_proj_weight, E, 0);
    wq = w[0], wk = w[1], wv = w[2];
  } else {
    wq = q_proj_weight, wk = k_proj_weight, wv = v_proj_weight;
  }
  if (in_proj_bias.defined()) {
    const tensor_list b = split(in_proj_bias, E, 0);
    bq = b[0], bk = b[1], bv = b[2];
  }
  Tensor kp = mpx::linear(k, wk, bk), vp = mpx::linear(v, wv, bv);
  // add_bias_kv, then add_zero_attn: extra keys every query may attend to (the masks get "take part" columns).
  const int64_t extra = (bias_k.defined() ? 1 : 0) + (options.add_zero_attn() ? 1 : 0);
  if (bias_k.defined()) {
    kp = cat({kp, bias_k.to(kp.dtype()).expand({1, N, E})}, 0);
    vp = cat({vp, bias_v.to(vp.dtype()).expand({1, N, E})}, 0);
  }
  if (options.add_zero_attn()) {
    kp = cat({kp, zeros({1, N, E}, kp.options())}, 0);
    vp = cat({vp, zeros({1, N, E}, vp.options())}, 0);
  }
  // [L, N, E] -> [N, heads, L, head_dim] views (the fused kernel takes any strides but the last).
  auto heads = [&](const Tensor& x, int64_t len) { return x.reshape({len, N, nh, hd}).permute({1, 2, 0, 3}); };
  const Tensor qh = heads(mpx::linear(q, wq, bq), L), kh = heads(kp, S + extra), vh = heads(vp, S + extra);

  // One additive mask broadcastable to [N, heads, L, S].
  const DType mdt = qh.dtype();
  Tensor mask;
  if (attn_mask.defined()) {
    Tensor am = additive_mask(attn_mask, mdt);
    if (am.dim() == 2) {
      MPX_CHECK(am.size(0) == L && am.size(1) == S, "MultiheadAttention: a 2-d attn_mask must be [L, S] = [", L, ", ",
                S, "], got ", ops::describe(attn_mask));
      am = am.reshape({1, 1, L, S});
    } else {
      MPX_CHECK(am.dim() == 3 && am.size(0) == N * nh && am.size(1) == L && am.size(2) == S,
                "MultiheadAttention: attn_mask must be [L, S] or [N * num_heads, L, S] = [", N * nh, ", ", L, ", ", S,
                "], got ", ops::describe(attn_mask));
      am = am.reshape({N, nh, L, S});
    }
    mask = am;
  }
  if (kpm.defined()) {
    MPX_CHECK(kpm.dim() == 2 && kpm.size(0) == N && kpm.size(1) == S, "MultiheadAttention: key_padding_mask must be [N, S] = [",
              N, ", ", S, "], got ", ops::describe(key_padding_mask));
    const Tensor pm = additive_mask(kpm, mdt).reshape({N, 1, 1, S});
    mask = mask.defined() ? mask + pm : pm;
  }
  // is_causal alone goes to the fused kernel as a flag; next to other masks (or extra keys) it becomes one.
  bool causal_flag = false;
  if (is_causal && !attn_mask.defined()) {
    if (mask.defined() || need_weights || extra > 0) {
      const Tensor cm = causal_mask(L, S, mdt, qh.device()).reshape({1, 1, L, S});
      mask = mask.defined() ? mask + cm : cm;
    } else {
      causal_flag = true;
    }
  }
  if (mask.defined() && extra > 0) {
    IntList pad = mask.sizes();
    pad.back() = extra;
    mask = cat({mask, zeros(pad, mask.options())}, -1);
  }
  const double p = is_training() ? options.dropout() : 0.0;

  Tensor out, weights;
  if (!need_weights) {
    out = mpx::scaled_dot_product_attention(qh, kh, vh, mask, p, causal_flag);
  } else {
    Tensor s = mpx::matmul(qh * (1.0 / std::sqrt(static_cast<double>(hd))), kh.transpose(-2, -1));
    if (mask.defined()) s = s + mask;
    Tensor w = mpx::softmax(s, -1);
    if (p > 0.0) w = mpx::dropout(w, p, true);
    out = mpx::matmul(w.to(vh.dtype()), vh);
    weights = average_attn_weights ? mpx::mean(w, {1}) : w;
  }
  // [N, heads, L, hd] -> [L, N, E] -> out_proj.
  Tensor o = out_proj(out.permute({2, 0, 1, 3}).reshape({L, N, E}));
  if (!batched) {
    o = o.squeeze(1);
    if (weights.defined()) weights = weights.squeeze(0);
  } else if (options.batch_first()) {
    o = o.transpose(0, 1);
  }
  return {o, weights};
}

// ---------------------------------------------------------------- TransformerEncoderLayer

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& o) : options(o) {
  check_activation("TransformerEncoderLayer", o.activation());
  MPX_CHECK(o.dim_feedforward() > 0, "TransformerEncoderLayer: dim_feedforward must be positive, got ",
            o.dim_feedforward());
  self_attn = register_module("self_attn", MultiheadAttention(MultiheadAttentionOptions(o.d_model(), o.nhead())
                                                                  .dropout(o.dropout())
                                                                  .bias(o.bias())
                                                                  .batch_first(o.batch_first())));
  linear1 = register_module("linear1", Linear(LinearOptions(o.d_model(), o.dim_feedforward()).bias(o.bias())));
  dropout = register_module("dropout", Dropout(o.dropout()));
  linear2 = register_module("linear2", Linear(LinearOptions(o.dim_feedforward(), o.d_model()).bias(o.bias())));
  norm1 = register_module("norm1", LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).bias(o.bias())));
  norm2 = register_module("norm2", LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).bias(o.bias())));
  dropout1 = register_module("dropout1", Dropout(o.dropout()));
  dropout2 = register_module("dropout2", Dropout(o.dropout()));
}

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask,
                                            const Tensor& src_key_padding_mask, bool is_causal) {
  auto sa = [&](const Tensor& x) {
    return dropout1(std::get<0>(self_attn->forward(x, x, x, src_key_padding_mask, false, src_mask, true, is_causal)));
  };
  auto ff = [&](const Tensor& x) {
    return dropout2(linear2(dropout(activation(options.activation(), linear1(x)))));
  };
  Tensor x = src;
  if (options.norm_first()) {
    x = x + sa(norm1(x));
    x = x + ff(norm2(x));
  } else {
    x = norm1(x + sa(x));
    x = norm2(x + ff(x));
  }
  return x;
}

// ---------------------------------------------------------------- TransformerDecoderLayer

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(const TransformerDecoderLayerOptions& o) : options(o) {
  check_activation("TransformerDecoderLayer", o.activation());
  MPX_CHECK(o.dim_feedforward() > 0, "TransformerDecoderLayer: dim_feedforward must be positive, got ",
            o.dim_feedforward());
  const auto mha = MultiheadAttentionOptions(o.d_model(), o.nhead())
                       .dropout(o.dropout())
                       .bias(o.bias())
                       .batch_first(o.batch_first());
  self_attn = register_module("self_attn", MultiheadAttention(mha));
  multihead_attn = register_module("multihead_attn", MultiheadAttention(mha));
  linear1 = register_module("linear1", Linear(LinearOptions(o.d_model(), o.dim_feedforward()).bias(o.bias())));
  dropout = register_module("dropout", Dropout(o.dropout()));
  linear2 = register_module("linear2", Linear(LinearOptions(o.dim_feedforward(), o.d_model()).bias(o.bias())));
  norm1 = register_module("norm1", LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).bias(o.bias())));
  norm2 = register_module("norm2", LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).bias(o.bias())));
  norm3 = register_module("norm3", LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).bias(o.bias())));
  dropout1 = register_module("dropout1", Dropout(o.dropout()));
  dropout2 = register_module("dropout2", Dropout(o.dropout()));
  dropout3 = register_module("dropout3", Dropout(o.dropout()));
}

Tensor TransformerDecoderLayerImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                            const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                            const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                            bool memory_is_causal) {
  auto sa = [&](const Tensor& x) {
    return dropout1(std::get<0>(self_attn->forward(x, x, x, tgt_key_padding_mask, false, tgt_mask, true, tgt_is_causal)));
  };
  auto mha = [&](const Tensor& x) {
    return dropout2(std::get<0>(multihead_attn->forward(x, memory, memory, memory_key_padding_mask, false, memory_mask,
                                                        true, memory_is_causal)));
  };
  auto ff = [&](const Tensor& x) {
    return dropout3(linear2(dropout(activation(options.activation(), linear1(x)))));
  };
  Tensor x = tgt;
  if (options.norm_first()) {
    x = x + sa(norm1(x));
    x = x + mha(norm2(x));
    x = x + ff(norm3(x));
  } else {
    x = norm1(x + sa(x));
    x = norm2(x + mha(x));
    x = norm3(x + ff(x));
  }
  return x;
}

// ---------------------------------------------------------------- TransformerEncoder

namespace {
// num copies of a layer holder, each starting with its parameters (PyTorch deep-copies the layer) and its mode.
template <typename Layer> ModuleList copies_of(const Layer& proto, int64_t num) {
  ModuleList list;
  const StateDict state = proto->state_dict();
  for (int64_t i = 0; i < num; ++i) {
    Layer layer(proto->options);
    layer->load_state_dict(state);
    layer->train(proto->is_training());
    list->push_back(layer);
  }
  return list;
}
}  // namespace

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerEncoderOptions& o) : options(o) {
  MPX_CHECK(!o.encoder_layer().is_empty(), "TransformerEncoder: encoder_layer is empty");
  MPX_CHECK(o.num_layers() >= 0, "TransformerEncoder: num_layers must be non-negative, got ", o.num_layers());
  layers = register_module("layers", copies_of(o.encoder_layer(), o.num_layers()));
  if (!o.norm().is_empty()) norm = register_module("norm", o.norm());
}

Tensor TransformerEncoderImpl::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                       bool is_causal) {
  Tensor x = src;
  for (const auto& m : *layers) {
    auto* layer = m->as<TransformerEncoderLayerImpl>();
    x = layer->forward(x, mask, src_key_padding_mask, is_causal);
  }
  if (!norm.is_empty()) x = norm(x);
  return x;
}

// ---------------------------------------------------------------- TransformerDecoder, Transformer

TransformerDecoderImpl::TransformerDecoderImpl(const TransformerDecoderOptions& o) : options(o) {
  MPX_CHECK(!o.decoder_layer().is_empty(), "TransformerDecoder: decoder_layer is empty");
  MPX_CHECK(o.num_layers() >= 0, "TransformerDecoder: num_layers must be non-negative, got ", o.num_layers());
  layers = register_module("layers", copies_of(o.decoder_layer(), o.num_layers()));
  if (!o.norm().is_empty()) norm = register_module("norm", o.norm());
}

Tensor TransformerDecoderImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                       const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                       const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                       bool memory_is_causal) {
  Tensor x = tgt;
  for (const auto& m : *layers)
    x = m->as<TransformerDecoderLayerImpl>()->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                                                      memory_key_padding_mask, tgt_is_causal, memory_is_causal);
  if (!norm.is_empty()) x = norm(x);
  return x;
}

TransformerImpl::TransformerImpl(const TransformerOptions& o) : options(o) {
  const TransformerLayerOptions layer = TransformerLayerOptions(o.d_model(), o.nhead())
                                            .dim_feedforward(o.dim_feedforward())
                                            .dropout(o.dropout())
                                            .activation(o.activation())
                                            .layer_norm_eps(o.layer_norm_eps())
                                            .batch_first(o.batch_first())
                                            .norm_first(o.norm_first())
                                            .bias(o.bias());
  auto final_norm = [&] { return LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).bias(o.bias())); };
  encoder = register_module(
      "encoder", TransformerEncoder(TransformerEncoderOptions(layer, o.num_encoder_layers()).norm(final_norm())));
  decoder = register_module(
      "decoder", TransformerDecoder(TransformerDecoderOptions(layer, o.num_decoder_layers()).norm(final_norm())));
  NoGradGuard ng;
  for (const Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor TransformerImpl::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                                const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                                const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask,
                                bool src_is_causal, bool tgt_is_causal, bool memory_is_causal) {
  MPX_CHECK(src.defined() && tgt.defined(), "Transformer: src and tgt must be defined");
  const int64_t batch_dim = options.batch_first() ? 0 : 1;
  MPX_CHECK(src.dim() != 3 || tgt.dim() != 3 || src.size(batch_dim) == tgt.size(batch_dim),
            "Transformer: src and tgt must have the same batch size, got ", ops::describe(src), " and ",
            ops::describe(tgt), options.batch_first() ? " (batch_first: dim 0)" : " (dim 1; batch_first is off)");
  MPX_CHECK(src.size(-1) == options.d_model() && tgt.size(-1) == options.d_model(),
            "Transformer: the feature dim of src and tgt must be d_model = ", options.d_model(), ", got ",
            ops::describe(src), " and ", ops::describe(tgt));
  const Tensor memory = encoder(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
                 memory_is_causal);
}

Tensor TransformerImpl::generate_square_subsequent_mask(int64_t sz, const TensorOptions& o) {
  MPX_CHECK(sz >= 0, "Transformer::generate_square_subsequent_mask: size must be non-negative, got ", sz);
  TensorOptions f = o;
  if (!is_floating(f.dtype_)) f.dtype(kFloat32);
  return triu(full({sz, sz}, -INFINITY, f), 1);
}

}  // namespace mpx::nn
