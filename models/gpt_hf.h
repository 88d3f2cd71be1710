// Hugging Face GPT-2 checkpoints: strict loading of GPT2LMHeadModel/GPT2Model weights into models::GPT, and writing that layout back.
#pragma once
#include <string>

#include "core/serialize.h"
#include "models/gpt.h"

namespace mpx::models {

/// The GPTConfig a Hugging Face GPT-2 state dict describes (vocab, context, width and layers
/// from the tensors' shapes; heads from `n_head`, which the weights do not determine: 0 takes
/// the count of the preset (GPTConfig::presets) with that width and depth, or width / 64).
/// Throws naming the first missing tensor, and when 0 heads cannot be inferred.
GPTConfig hf_gpt2_config(const TensorDict& hf, int64_t n_head = 0);
/// As above with the heads from the model's config.json (transformers' `n_head`), and its
/// `n_embd`, `n_layer`, `n_positions` and `vocab_size` checked against the tensors: the way to
/// read a checkpoint whose head width is not GPT-2's 64, which the weights alone cannot tell.
GPTConfig hf_gpt2_config(const TensorDict& hf, const std::string& config_json);

/// Copies a Hugging Face GPT-2 state dict into `model`, strictly: names such as
/// `h.0.attn.c_attn.weight` with or without the `transformer.` prefix, Conv1D weights
/// ([in, out]) transposed into nn::Linear's [out, in], `lm_head.weight` accepted when it equals
/// wte (tied) and refused otherwise, attention-mask buffers (`attn.bias`, `attn.masked_bias`)
/// ignored. Values are converted to each parameter's dtype and device. Any other missing,
/// unexpected or misshapen tensor is an mpx::Error listing every such name; the model is only
/// written once the whole dict has been checked, so a refused dict leaves it unchanged.
void load_hf_gpt2(GPTImpl& model, const TensorDict& hf);

/// `model`'s weights in the layout transformers' save_pretrained writes for GPT2LMHeadModel:
/// `transformer.` prefix, Conv1D [in, out] weights, contiguous tensors on the model's device
/// (sharing its memory where no transpose was needed, as state_dict does), and no
/// `lm_head.weight` (transformers omits it because it is tied to wte, and re-ties it on load).
/// Save it with the metadata {"format": "pt"} (save_hf_gpt2 does) so from_pretrained accepts it.
TensorDict hf_gpt2_state(const GPTImpl& model);

/// Writes hf_gpt2_state(model) to `path` (a model.safetensors for a transformers model
/// directory, next to a config.json) with the metadata transformers writes.
void save_hf_gpt2(const GPTImpl& model, const std::string& path);

}  // namespace mpx::models
