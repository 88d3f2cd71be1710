// An LSTM language model: embedding, a stacked nn::LSTM, and an output projection tied to the embedding.
#pragma once
#include <cstdint>
#include <string>

#include "nn/nn.h"

namespace mpx::models {

/// The LSTM language model's shape (Zaremba et al.'s medium model, scaled down by default).
struct LSTMLMConfig {
  int64_t vocab_size = 256;
  int64_t n_embd = 256;     ///< embedding width, and the LSTM's hidden size when tied
  int64_t n_layer = 2;
  double dropout = 0.0;     ///< on the embedding, between layers and before the projection
  bool tie_weights = true;  ///< the output projection shares the embedding's weight
};

/// Embedding (`wte`), nn::LSTM (`lstm`, batch_first, PyTorch's parameter names), dropout and
/// the output projection (`lm_head`, its weight tied to wte's when tie_weights).
struct LSTMLMImpl : nn::Module {
  explicit LSTMLMImpl(const LSTMLMConfig& c);
  /// idx i64 [B, T] -> logits [B, T, vocab].
  Tensor forward(const Tensor& idx);
  LSTMLMConfig config;
  nn::Embedding wte{nullptr};
  nn::LSTM lstm{nullptr};
  nn::Dropout drop{nullptr};
  nn::Linear lm_head{nullptr};
};
MPX_MODULE(LSTMLM);

}  // namespace mpx::models
