// An LSTM language model: embedding, a stacked nn::LSTM, and an output projection tied to the embedding.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "nn/nn.h"

namespace mpx::models {

/// The LSTM language model's shape (Zaremba et al.'s medium model, scaled down by default).
struct LSTMLMConfig {
  int64_t vocab_size = 256;
  int64_t n_embd = 256;     ///< embedding width, and the LSTM's hidden size
  int64_t n_layer = 2;
  double dropout = 0.0;     ///< on the embedding, between layers and before the projection
  bool tie_weights = true;  ///< the output projection shares the embedding's weight
};

/// The state an LSTM language model carries from one call to the next: every layer's h and c
/// after the last token seen (none: a zero state), for generating a token at a time or for
/// truncated backpropagation through time (detach() it between windows).
struct LSTMLMState {
  std::optional<std::tuple<Tensor, Tensor>> hc;
  void clear() { hc.reset(); }
  /// The same state cut from the graph that produced it.
  void detach();
};

/// Embedding (`wte`), nn::LSTM (`lstm`, batch_first, PyTorch's parameter names), dropout and
/// the output projection (`lm_head`). With tie_weights, lm_head->weight is wte->weight itself
/// (one tensor: gradients of both uses reach it, to() moves it once) and the state dict lists
/// it only as `wte.weight`, next to `lm_head.bias`; untied, lm_head is an ordinary nn::Linear.
/// Embedding and projection start uniform(-0.1, 0.1) with a zero bias (as PyTorch's
/// word_language_model example), the LSTM with PyTorch's default.
struct LSTMLMImpl : nn::Module {
  explicit LSTMLMImpl(const LSTMLMConfig& c);
  /// idx i64 [B, T] -> logits [B, T, vocab], each sequence starting from a zero state.
  Tensor forward(const Tensor& idx);
  /// idx i64 [B, T] -> logits [B, T, vocab], starting from `state` (a zero state when it holds
  /// none) and leaving in it the state after the last token; a null state is forward(idx).
  Tensor forward(const Tensor& idx, LSTMLMState* state);
  LSTMLMConfig config;
  nn::Embedding wte{nullptr};
  nn::LSTM lstm{nullptr};
  nn::Dropout drop{nullptr};
  nn::Linear lm_head{nullptr};
};
MPX_MODULE(LSTMLM);

}  // namespace mpx::models
