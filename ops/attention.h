// Scaled dot-product attention: the public op (fused O(T)-memory kernels) and its math-path reference.
#pragma once
#include <optional>

#include "core/tensor.h"

namespace mpx {

/// PyTorch's F.scaled_dot_product_attention: softmax(scale * query key^T + mask) value.
///
/// query [..., L, E], key [..., S, E], value [..., S, Ev] (usually [B, H, L, E]); the batch dims
/// of key and value equal query's, except the head dim (-3) under `enable_gqa`, where query's
/// head count must be a multiple of key's and value's (grouped-query attention: query head h
/// reads key/value head h / (H / Hk)). Returns [..., L, Ev] in query's dtype.
///
/// attn_mask: undefined, a bool mask (true = the key takes part) or a floating mask added to
/// the scores, broadcastable to [..., L, S]; is_causal masks key j for query i when j > i
/// (top-left aligned, L != S allowed) and may not be combined with attn_mask. scale defaults to
/// 1/sqrt(E). dropout_p drops attention weights (survivors scaled by 1/(1-p)) with the default
/// generator's stream, whatever the module mode: pass 0 in evaluation, as PyTorch's callers do.
///
/// A query row whose keys are all masked gives 0 (and zero gradients), on both paths: PyTorch's
/// fused kernels do the same, its math path gives NaN.
///
/// Runs the fused kernels (tiled online softmax, f32 statistics and accumulation, never an
/// L x S matrix) wherever the device has them; a floating mask that requires grad takes the
/// math path instead. Under autocast it runs in the autocast dtype. The fused backward is
/// exact but not itself differentiable: a second derivative (create_graph) through it is an
/// error that names scaled_dot_product_attention_math, which supports it.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, bool enable_gqa = false);

/// The same op built from matmul, softmax, where and dropout (it materializes the L x S weights):
/// the reference the fused kernels are tested against, and the path for higher derivatives and
/// for masks that require grad. Same arguments, checks, dropout stream and all-masked-row rule.
Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key, const Tensor& value,
                                         const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                         bool is_causal = false, std::optional<double> scale = std::nullopt,
                                         bool enable_gqa = false);

}  // namespace mpx
