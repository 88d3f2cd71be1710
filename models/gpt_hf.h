// Hugging Face GPT-2 checkpoints: strict loading of GPT2LMHeadModel/GPT2Model weights into models::GPT, and writing that layout back.
#pragma once
#include <string>

#include "core/serialize.h"
#include "models/gpt.h"

namespace mpx::models {

/// The GPTConfig a Hugging Face GPT-2 state dict describes (vocab, context, width and layers
/// from the tensors' shapes; heads from `n_head`, which the weights do not determine: 0 takes
/// the matching GPT-2 preset's count, or width / 64). Throws naming the first missing tensor.
GPTConfig hf_gpt2_config(const TensorDict& hf, int64_t n_head = 0);

/// Copies a Hugging Face GPT-2 state dict into `model`, strictly: names such as
/// `h.0.attn.c_attn.weight` with or without the `transformer.` prefix, Conv1D weights
/// ([in, out]) transposed into nn::Linear's [out, in], `lm_head.weight` accepted when it equals
/// wte (tied) and refused otherwise, attention-mask buffers (`attn.bias`, `attn.masked_bias`)
/// ignored. Any other missing, unexpected or misshapen tensor is an mpx::Error naming it.
void load_hf_gpt2(GPTImpl& model, const TensorDict& hf);

/// `model`'s weights in Hugging Face's GPT2LMHeadModel layout (`transformer.` prefix, Conv1D
/// [in, out] weights, `lm_head.weight` tied to wte), for mpx::save: transformers loads it.
TensorDict hf_gpt2_state(const GPTImpl& model);

}  // namespace mpx::models
