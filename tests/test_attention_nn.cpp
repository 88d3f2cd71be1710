// nn::MultiheadAttention and the Transformer layers against per-head references built from their own parameters; state-dict names.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/serialize.h"
#include "core/random.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "nn/modules.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/norm.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "test_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;
using testing::rel_err;

namespace {

Tensor randn_f64(const IntList& shape, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64));
}

// -inf where a bool mask is true (MultiheadAttention's "ignore"), the values of a float mask.
Tensor additive(const Tensor& m) {
  if (m.dtype() != kBool) return m.to(kFloat64);
  return where(m, full({}, -INFINITY, kFloat64), zeros({}, kFloat64));
}

struct MhaRef {
  Tensor out, weights;  // [L, N, E], [N, heads, L, S]
};

// nn.MultiheadAttention's definition head by head on 2-d slices, in [L, N, E] layout.
MhaRef reference_mha(nn::MultiheadAttentionImpl& m, const Tensor& query, const Tensor& key, const Tensor& value,
                     const Tensor& kpm, const Tensor& attn_mask, bool is_causal = false) {
  const int64_t E = m.options.embed_dim(), nh = m.options.num_heads(), hd = E / nh;
  const int64_t L = query.size(0), N = query.size(1), S = key.size(0);
  const Tensor wq = m.qkv_same_embed_dim ? m.in_proj_weight.narrow(0, 0, E) : m.q_proj_weight;
  const Tensor wk = m.qkv_same_embed_dim ? m.in_proj_weight.narrow(0, E, E) : m.k_proj_weight;
  const Tensor wv = m.qkv_same_embed_dim ? m.in_proj_weight.narrow(0, 2 * E, E) : m.v_proj_weight;
  const Tensor& b = m.in_proj_bias;
  tensor_list outs, ws;
  for (int64_t n = 0; n < N; ++n) {
    tensor_list heads, wh;
    for (int64_t h = 0; h < nh; ++h) {
      auto proj = [&](const Tensor& x, const Tensor& w, int64_t part) {
        Tensor y = mm(x.select(1, n), w.narrow(0, h * hd, hd).t());
        return b.defined() ? y + b.narrow(0, part * E + h * hd, hd) : y;
      };
      const Tensor qh = proj(query, wq, 0), kh = proj(key, wk, 1), vh = proj(value, wv, 2);
      Tensor s = mm(qh, kh.t()) / std::sqrt(static_cast<double>(hd));
      if (attn_mask.defined()) s = s + additive(attn_mask.dim() == 2 ? attn_mask : attn_mask[n * nh + h]);
      if (kpm.defined()) s = s + additive(kpm[n]).reshape({1, S});
      if (is_causal)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = i + 1; j < S; ++j) s.data_ptr<double>()[i * S + j] = -INFINITY;
      const Tensor w = softmax(s, 1);
      heads.push_back(mm(w, vh));
      wh.push_back(w);
    }
    Tensor o = cat(heads, 1);  // [L, E]
    o = mm(o, m.out_proj->weight.t());
    if (m.out_proj->bias.defined()) o = o + m.out_proj->bias;
    outs.push_back(o);
    ws.push_back(stack(wh, 0));
  }
  return {stack(outs, 1), stack(ws, 0)};
}

nn::MultiheadAttention make_mha(nn::MultiheadAttentionOptions o) {
  manual_seed(42);
  nn::MultiheadAttention m(o);
  m->to(kFloat64);
  m->eval();
  // Non-zero biases, so a bias used in the wrong place shows.
  NoGradGuard ng;
  for (auto& p : m->parameters())
    if (p.dim() == 1) p.copy_(randn_f64(p.sizes(), 7) * 0.5);
  return m;
}

std::vector<std::string> keys(const nn::Module& m) {
  std::vector<std::string> k;
  for (const auto& item : m.state_dict()) k.push_back(item.key());
  return k;
}

}  // namespace

TEST_CASE("MultiheadAttention equals its definition: masks, need_weights, batch_first", "[nn][attention]") {
  const int64_t L = 5, S = 7, N = 3, E = 8, nh = 2;
  const Tensor q = randn_f64({L, N, E}, 1), k = randn_f64({S, N, E}, 2), v = randn_f64({S, N, E}, 3);
  Tensor kpm = gt(randn_f64({N, S}, 4), 0.8);
  kpm.data_ptr<bool>()[0] = false;  // at least one key visible per row of sample 0
  const Tensor bool_mask = gt(randn_f64({L, S}, 5), 1.0);
  const Tensor float_mask = randn_f64({N * nh, L, S}, 6);
  struct Case {
    const char* name;
    Tensor kpm, mask;
  };
  const std::vector<Case> cases = {{"no mask", {}, {}},
                                   {"key_padding_mask", kpm, {}},
                                   {"bool attn_mask [L, S]", {}, bool_mask},
                                   {"float attn_mask [N * heads, L, S] and key_padding_mask", kpm, float_mask}};
  for (bool batch_first : {false, true}) {
    auto m = make_mha(nn::MultiheadAttentionOptions(E, nh).batch_first(batch_first));
    for (const Case& c : cases) {
      const MhaRef ref = reference_mha(*m, q, k, v, c.kpm, c.mask);
      auto in = [&](const Tensor& t) { return batch_first ? t.transpose(0, 1) : t; };
      for (bool need_weights : {true, false}) {
        for (bool average : {true, false}) {
          INFO(c.name << (batch_first ? " batch_first" : "") << " need_weights " << need_weights << " average " << average);
          auto [out, w] = m(in(q), in(k), in(v), c.kpm, need_weights, c.mask, average);
          CHECK(rel_err(out, in(ref.out)) < 1e-12);
          if (!need_weights) {
            CHECK(!w.defined());
          } else {
            CHECK(rel_err(w, average ? mean(ref.weights, {1}) : ref.weights) < 1e-12);
          }
        }
      }
    }
  }
}

TEST_CASE("MultiheadAttention: kdim/vdim, is_causal, unbatched input, gradients", "[nn][attention]") {
  const int64_t L = 4, S = 6, N = 2, E = 6;
  auto m = make_mha(nn::MultiheadAttentionOptions(E, 3).kdim(5).vdim(7));
  CHECK(keys(*m) == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                              "out_proj.weight", "out_proj.bias"});
  const Tensor q = randn_f64({L, N, E}, 1), k = randn_f64({S, N, 5}, 2), v = randn_f64({S, N, 7}, 3);
  CHECK(rel_err(std::get<0>(m(q, k, v)), reference_mha(*m, q, k, v, {}, {}).out) < 1e-12);

  auto s = make_mha(nn::MultiheadAttentionOptions(E, 2));
  const Tensor x = randn_f64({L, N, E}, 4);
  const Tensor causal_ref = reference_mha(*s, x, x, x, {}, {}, true).out;
  CHECK(rel_err(std::get<0>(s(x, x, x, Tensor(), false, Tensor(), true, true)), causal_ref) < 1e-12);
  CHECK(rel_err(std::get<0>(s(x, x, x, Tensor(), true, Tensor(), true, true)), causal_ref) < 1e-12);
  // Unbatched [L, E].
  auto [o1, w1] = s(x.select(1, 1), x.select(1, 1), x.select(1, 1));
  CHECK(o1.sizes() == IntList{L, E});
  CHECK(w1.sizes() == IntList{L, L});
  CHECK(rel_err(o1, reference_mha(*s, x, x, x, {}, {}).out.select(1, 1)) < 1e-12);
  // Gradients reach every parameter.
  sum(std::get<0>(s(x, x, x, Tensor(), false))).backward();
  for (const auto& p : s->parameters()) CHECK(p.grad().defined());
  // Bad shapes.
  CHECK_THROWS_WITH(s(x, x, x, ones({N, L + 1}, kBool)), Catch::Contains("key_padding_mask"));
  CHECK_THROWS_WITH(s(x, x, x, Tensor(), true, ones({L, L + 1}, kBool)), Catch::Contains("attn_mask"));
  CHECK_THROWS_WITH(s(x, x, randn_f64({L, N, E + 1}, 5)), Catch::Contains("features"));
  CHECK_THROWS_WITH(nn::MultiheadAttention(5, 2), Catch::Contains("divisible"));
}

TEST_CASE("MultiheadAttention with add_bias_kv and add_zero_attn gives torch.nn.MultiheadAttention's outputs",
          "[nn][attention]") {
  // tests/golden/make_transformer_reference.py: kdim 6, vdim 5, batch_first, both extra keys, both masks.
  const TensorDict file =
      load_tensors(mpx::testing::test_data_dir() + "/golden/transformer/mha_bias_kv_zero_attn.safetensors");
  const std::map<std::string, Tensor> weights = testing::model_weights(file);
  nn::MultiheadAttention m(
      nn::MultiheadAttentionOptions(8, 2).add_bias_kv(true).add_zero_attn(true).kdim(6).vdim(5).batch_first(true));
  CHECK(m->named_parameters()["bias_k"].sizes() == IntList{1, 1, 8});
  m->load_state_dict(weights);  // strict: bias_k and bias_v under PyTorch's names
  const Tensor q = file.at("ref.q"), k = file.at("ref.k"), v = file.at("ref.v");
  const Tensor kpm = file.at("ref.key_padding_mask");
  auto [out, w] = m(q, k, v, kpm, true, file.at("ref.attn_mask"), false);
  CHECK(w.sizes() == IntList{2, 2, 3, 6});  // four keys, bias_k's and the zero one
  CHECK(max(abs(out - file.at("ref.out"))).item<double>() < 1e-5);
  CHECK(max(abs(w - file.at("ref.weights"))).item<double>() < 1e-5);
  // The fused path (no weights) gives the same.
  const Tensor fused = std::get<0>(m(q, k, v, kpm, false));
  CHECK(max(abs(fused - file.at("ref.out_no_weights"))).item<double>() < 1e-5);
  // is_causal alone next to the extra keys: the causal mask over the real keys, the extra ones always attended.
  const Tensor causal = std::get<0>(m(q, k, v, Tensor(), false, Tensor(), true, true));
  const Tensor explicit_mask = triu(ones({3, 4}, kBool), 1);
  CHECK(max(abs(causal - std::get<0>(m(q, k, v, Tensor(), false, explicit_mask)))).item<double>() < 1e-6);
  sum(out).backward();
  CHECK(m->bias_k.grad().defined());
  CHECK(m->bias_v.grad().defined());
}

TEST_CASE("MultiheadAttention uses PyTorch's init and names", "[nn][attention]") {
  nn::MultiheadAttention m(16, 4);
  CHECK(keys(*m) == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(m->in_proj_weight.sizes() == IntList{48, 16});
  CHECK(max(abs(m->in_proj_bias)).item<double>() == 0.0);
  CHECK(max(abs(m->out_proj->bias)).item<double>() == 0.0);
  // xavier_uniform_ on [48, 16]: bound sqrt(6 / (16 + 48)).
  CHECK(max(abs(m->in_proj_weight)).item<double>() <= std::sqrt(6.0 / 64.0));
}

namespace {
Tensor ln(const nn::LayerNorm& n, const Tensor& x) {
  return layer_norm(x, {x.size(-1)}, n->weight, n->bias, n->options.eps());
}
Tensor lin(const nn::Linear& l, const Tensor& x) { return matmul(x, l->weight.t()) + l->bias; }
Tensor act(const std::string& a, const Tensor& x) { return a == "relu" ? relu(x) : gelu(x); }
}  // namespace

TEST_CASE("TransformerEncoderLayer: post-norm and pre-norm equal their definitions", "[nn][attention]") {
  const int64_t S = 6, N = 2, E = 8;
  const Tensor x = randn_f64({S, N, E}, 1);
  Tensor kpm = gt(randn_f64({N, S}, 2), 0.5);
  kpm.data_ptr<bool>()[0] = false;
  for (bool norm_first : {false, true}) {
    for (const char* a : {"relu", "gelu"}) {
      INFO("norm_first " << norm_first << " " << a);
      manual_seed(9);
      nn::TransformerEncoderLayer layer(
          nn::TransformerEncoderLayerOptions(E, 2).dim_feedforward(16).norm_first(norm_first).activation(a));
      layer->to(kFloat64);
      layer->eval();
      auto sa = [&](const Tensor& t) { return reference_mha(*layer->self_attn, t, t, t, kpm, {}).out; };
      auto ff = [&](const Tensor& t) { return lin(layer->linear2, act(a, lin(layer->linear1, t))); };
      Tensor ref = x;
      if (norm_first) {
        ref = ref + sa(ln(layer->norm1, ref));
        ref = ref + ff(ln(layer->norm2, ref));
      } else {
        ref = ln(layer->norm1, ref + sa(ref));
        ref = ln(layer->norm2, ref + ff(ref));
      }
      CHECK(rel_err(layer(x, Tensor(), kpm), ref) < 1e-12);
    }
  }
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(E, 2).dim_feedforward(16));
  CHECK(keys(*layer) == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                                 "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                                 "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                                                 "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(E, 2).activation("tanh")),
                    Catch::Contains("activation"));
}

TEST_CASE("Transformer layers take LibTorch's activation forms: kReLU, kGELU and a function", "[nn][attention]") {
  const Tensor x = randn({5, 2, 8});
  auto run = [&](const nn::TransformerActivation& a) {
    manual_seed(3);
    nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0)
                                          .activation(a));
    return layer(x);
  };
  CHECK(equal(run(nn::kGELU), run("gelu")));
  CHECK(equal(run(nn::kReLU), run("relu")));
  CHECK_FALSE(equal(run(nn::kGELU), run(nn::kReLU)));
  // A function: the feed-forward block is linear2(act(linear1(x))), here with SiLU.
  manual_seed(3);
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0)
                                        .activation([](const Tensor& t) { return silu(t); }));
  CHECK(layer->options.activation().name == "custom");
  CHECK_FALSE(allclose(layer(x), run(nn::kGELU), 1e-3, 1e-3));
  CHECK(allclose(layer(x), run([](const Tensor& t) { return t * t.sigmoid(); }), 1e-5, 1e-6));
  nn::TransformerDecoderLayer dec(nn::TransformerDecoderLayerOptions(8, 2).dim_feedforward(16).activation(nn::kGELU));
  CHECK(dec->options.activation().name == "gelu");
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(8, 2).activation(nn::init::kTanh)),
                    Catch::Contains("kReLU or kGELU"));
  CHECK_THROWS_WITH(nn::init::calculate_gain(nn::kGELU), Catch::Contains("GELU"));
}

TEST_CASE("TransformerDecoderLayer equals its definition, batch_first and causal self-attention", "[nn][attention]") {
  const int64_t T = 5, S = 7, N = 2, E = 8;
  const Tensor tgt = randn_f64({T, N, E}, 1), mem = randn_f64({S, N, E}, 2);
  for (bool norm_first : {false, true}) {
    INFO("norm_first " << norm_first);
    manual_seed(3);
    nn::TransformerDecoderLayer layer(nn::TransformerDecoderLayerOptions(E, 2).dim_feedforward(12).norm_first(norm_first));
    layer->to(kFloat64);
    layer->eval();
    auto sa = [&](const Tensor& t) { return reference_mha(*layer->self_attn, t, t, t, {}, {}, true).out; };
    auto ca = [&](const Tensor& t) { return reference_mha(*layer->multihead_attn, t, mem, mem, {}, {}).out; };
    auto ff = [&](const Tensor& t) { return lin(layer->linear2, relu(lin(layer->linear1, t))); };
    Tensor ref = tgt;
    if (norm_first) {
      ref = ref + sa(ln(layer->norm1, ref));
      ref = ref + ca(ln(layer->norm2, ref));
      ref = ref + ff(ln(layer->norm3, ref));
    } else {
      ref = ln(layer->norm1, ref + sa(ref));
      ref = ln(layer->norm2, ref + ca(ref));
      ref = ln(layer->norm3, ref + ff(ref));
    }
    CHECK(rel_err(layer(tgt, mem, Tensor(), Tensor(), Tensor(), Tensor(), true), ref) < 1e-12);
  }
  manual_seed(3);
  nn::TransformerDecoderLayer bf(nn::TransformerDecoderLayerOptions(E, 2).dim_feedforward(12).batch_first(true));
  bf->to(kFloat64);
  bf->eval();
  nn::TransformerDecoderLayer sf(nn::TransformerDecoderLayerOptions(E, 2).dim_feedforward(12));
  sf->to(kFloat64);
  sf->eval();
  sf->load_state_dict(bf->state_dict());
  CHECK(rel_err(bf(tgt.transpose(0, 1), mem.transpose(0, 1)), sf(tgt, mem).transpose(0, 1)) < 1e-12);
  std::vector<std::string> want;
  for (const char* p : {"self_attn", "multihead_attn"})
    for (const char* s : {".in_proj_weight", ".in_proj_bias", ".out_proj.weight", ".out_proj.bias"})
      want.push_back(std::string(p) + s);
  for (const char* s : {"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                        "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"})
    want.push_back(s);
  CHECK(keys(*bf) == want);
}

TEST_CASE("TransformerEncoder stacks copies of its layer and the final norm", "[nn][attention]") {
  const int64_t S = 5, N = 2, E = 8;
  manual_seed(4);
  nn::TransformerEncoderLayer proto(nn::TransformerEncoderLayerOptions(E, 2).dim_feedforward(16).batch_first(true));
  nn::TransformerEncoder enc(nn::TransformerEncoderOptions(proto, 2).norm(nn::LayerNorm(nn::LayerNormOptions({E}))));
  enc->to(kFloat64);
  enc->eval();
  proto->to(kFloat64);
  proto->eval();
  const auto k = keys(*enc);
  REQUIRE(k.size() == 2 * 12 + 2);
  CHECK(k.front() == "layers.0.self_attn.in_proj_weight");
  CHECK(k[12] == "layers.1.self_attn.in_proj_weight");
  CHECK(k.back() == "norm.bias");
  // Every copy starts as the prototype.
  auto& l0 = enc->layers->at<nn::TransformerEncoderLayerImpl>(0);
  auto& l1 = enc->layers->at<nn::TransformerEncoderLayerImpl>(1);
  CHECK(testing::same_values(l0.linear1->weight, proto->linear1->weight));
  CHECK(testing::same_values(l1.self_attn->in_proj_weight, proto->self_attn->in_proj_weight));
  CHECK(!l0.linear1->weight.is_same(l1.linear1->weight));
  const Tensor x = randn_f64({N, S, E}, 5);
  const Tensor ref = layer_norm(proto(proto(x, Tensor(), Tensor(), true), Tensor(), Tensor(), true), {E},
                                enc->norm->weight, enc->norm->bias);
  const Tensor out = enc(x, Tensor(), Tensor(), true);
  CHECK(rel_err(out, ref) < 1e-12);
  sum(out).backward();
  for (const auto& p : enc->parameters()) CHECK(p.grad().defined());
}

TEST_CASE("nn::Transformer loads torch.nn.Transformer's state dict and gives its output (post- and pre-norm)",
          "[nn][attention]") {
  for (const std::string name : {"post_norm_relu", "pre_norm_gelu"}) {
    INFO(name);
    // tests/golden/make_transformer_reference.py: PyTorch's weights under its names, and under "ref." its run.
    const TensorDict file = load_tensors(mpx::testing::test_data_dir() + "/golden/transformer/" + name + ".safetensors");
    const std::map<std::string, Tensor> weights = testing::model_weights(file);
    const bool pre = name == "pre_norm_gelu";
    nn::Transformer model(nn::TransformerOptions(16, 2).num_encoder_layers(2).num_decoder_layers(2).dim_feedforward(32)
                              .dropout(0.0).activation(pre ? "gelu" : "relu").batch_first(true).norm_first(pre));
    model->load_state_dict(weights);  // strict: every name and shape matches both ways
    model->eval();
    const Tensor tgt_mask = nn::TransformerImpl::generate_square_subsequent_mask(4);
    CHECK(testing::same_values(tgt_mask, file.at("ref.tgt_mask")));
    const Tensor pad = file.at("ref.src_key_padding_mask");
    const Tensor out = model(file.at("ref.src"), file.at("ref.tgt"), Tensor(), tgt_mask, Tensor(), pad, Tensor(), pad);
    CHECK(out.sizes() == IntList{2, 4, 16});
    CHECK(max(abs(out - file.at("ref.out"))).item<double>() < 2e-5);
    // The decoder alone over the encoder's output is the same function.
    const Tensor memory = model->encoder(file.at("ref.src"), Tensor(), pad);
    CHECK(max(abs(model->decoder(file.at("ref.tgt"), memory, tgt_mask, Tensor(), Tensor(), pad) - out)).item<double>() <
          1e-6);
  }
}

TEST_CASE("nn::Transformer: xavier-uniform matrices, PyTorch's layout of names, clear errors", "[nn][attention]") {
  manual_seed(3);
  nn::Transformer model(nn::TransformerOptions(8, 2).num_encoder_layers(1).num_decoder_layers(1).dim_feedforward(12));
  for (const auto& item : model->named_parameters()) {
    const Tensor& p = item.value();
    INFO(item.key());
    if (p.dim() < 2) continue;
    const double bound = std::sqrt(6.0 / static_cast<double>(p.size(0) + p.size(1)));
    CHECK(max(abs(p)).item<double>() <= bound);
  }
  const nn::StateDict sd = model->state_dict();
  for (const char* key : {"encoder.layers.0.self_attn.in_proj_weight", "encoder.norm.weight",
                          "decoder.layers.0.multihead_attn.out_proj.weight", "decoder.norm.bias"})
    CHECK(sd.contains(key));
  CHECK_THROWS_WITH(model(randn({5, 2, 8}), randn({4, 3, 8})), Catch::Contains("the same batch size"));
  CHECK_THROWS_WITH(model(randn({5, 2, 8}), randn({4, 2, 6})), Catch::Contains("d_model = 8"));
  // Unbatched [S, E] / [T, E] inputs, as PyTorch takes them.
  model->eval();
  CHECK(model(randn({5, 8}), randn({4, 8})).sizes() == IntList{4, 8});
}

TEST_CASE("LayerNorm(bias=false) and the Transformer layers' bias(false) have PyTorch's parameters",
          "[nn][attention]") {
  const auto key_set = [](const nn::Module& m) {
    const std::vector<std::string> k = keys(m);
    return std::set<std::string>(k.begin(), k.end());
  };
  nn::LayerNorm ln(nn::LayerNormOptions({6}).bias(false));
  CHECK(key_set(*ln) == std::set<std::string>{"weight"});
  const Tensor x = randn({3, 6});
  {
    NoGradGuard g;
    ln->weight.uniform_(0.5, 1.5);
  }
  const Tensor y = ln(x);
  CHECK(allclose(y, F::layer_norm(x, F::LayerNormFuncOptions({6}).weight(ln->weight).bias(zeros({6}))), 1e-6, 1e-6));
  y.sum().backward();
  CHECK(ln->weight.grad().defined());
  std::ostringstream printed;
  ln->pretty_print(printed);
  CHECK(printed.str().find("bias=False") != std::string::npos);
  // torch.nn.TransformerEncoderLayer(8, 2, bias=False).state_dict().keys(), and the decoder's.
  nn::TransformerEncoderLayer enc(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).bias(false));
  CHECK(key_set(*enc) == std::set<std::string>{"self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight",
                                            "linear2.weight", "norm1.weight", "norm2.weight"});
  nn::TransformerDecoderLayer dec(nn::TransformerDecoderLayerOptions(8, 2).dim_feedforward(16).bias(false));
  CHECK(key_set(*dec) == std::set<std::string>{"self_attn.in_proj_weight", "self_attn.out_proj.weight",
                                            "multihead_attn.in_proj_weight", "multihead_attn.out_proj.weight",
                                            "linear1.weight", "linear2.weight", "norm1.weight", "norm2.weight",
                                            "norm3.weight"});
  nn::Transformer tr(nn::TransformerOptions().d_model(8).nhead(2).num_encoder_layers(1).num_decoder_layers(1)
                         .dim_feedforward(16).bias(false));
  for (const auto& k : key_set(*tr)) CHECK(k.find("bias") == std::string::npos);
  CHECK(key_set(*tr).count("encoder.norm.weight") == 1);
}
