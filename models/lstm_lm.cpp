// The LSTM language model's construction (weight tying, initialisation) and forward pass.
#include "models/lstm_lm.h"

namespace mpx::models {

LSTMLMImpl::LSTMLMImpl(const LSTMLMConfig& c) : config(c) {
  MPX_CHECK(c.vocab_size > 0 && c.n_embd > 0 && c.n_layer > 0, "LSTMLM: vocab_size (", c.vocab_size, "), n_embd (",
            c.n_embd, ") and n_layer (", c.n_layer, ") must be positive");
  MPX_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "LSTMLM: dropout must be in [0, 1), got ", c.dropout);
  wte = register_module("wte", nn::Embedding(c.vocab_size, c.n_embd));
  lstm = register_module("lstm", nn::LSTM(nn::LSTMOptions(c.n_embd, c.n_embd)
                                              .num_layers(c.n_layer)
                                              .dropout(c.n_layer > 1 ? c.dropout : 0.0)
                                              .batch_first(true)));
  drop = register_module("drop", nn::Dropout(c.dropout));
  lm_head = register_module("lm_head", nn::Linear(c.n_embd, c.vocab_size));
  NoGradGuard ng;
  // The default N(0, 1) embedding would, as the tied projection, start with logits of
  // magnitude ~sqrt(n_embd); uniform(-0.1, 0.1) keeps the first loss near ln V.
  nn::init::uniform_(wte->weight, -0.1, 0.1);
  nn::init::zeros_(lm_head->bias);
  if (c.tie_weights) {
    // One tensor held by both modules; registered under wte only, so state_dict, parameters()
    // and optimizers see it once.
    lm_head->unregister_module("weight");
    lm_head->weight = wte->weight;
  } else {
    nn::init::uniform_(lm_head->weight, -0.1, 0.1);
  }
}

Tensor LSTMLMImpl::forward(const Tensor& idx) { return forward(idx, nullptr); }

Tensor LSTMLMImpl::forward(const Tensor& idx, LSTMLMState* state) {
  MPX_CHECK(idx.dim() == 2, "LSTMLM: input must be token indices [B, T], got ", shape_str(idx.sizes()));
  auto [out, hc] = lstm(drop(wte(idx)), state ? state->hc : std::nullopt);
  if (state) state->hc = hc;
  return lm_head(drop(out));
}

void LSTMLMState::detach() {
  if (hc) hc = std::make_tuple(std::get<0>(*hc).detach(), std::get<1>(*hc).detach());
}

}  // namespace mpx::models
