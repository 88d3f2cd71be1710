// Indexing ops for sequence models: index_select/add, gather/scatter, masked_fill, tril/triu, embedding, topk, sort, multinomial.
#pragma once
#include <cstdint>
#include <tuple>

#include "core/tensor.h"

namespace mpx {

// Every op here keeps its input's dtype under autocast (policy none in ops/ops.def), takes
// negative dims as LibTorch does, accepts i64 or i32 index tensors on the data's device, and
// refuses an out-of-range index with an error naming the op, the value, its position and the
// valid range (checked before any kernel runs, on the CPU and on CUDA alike).

/// self's slices at `index` (1-d, or 0-d for one slice) along dim: size index.numel() at dim.
/// Differentiable in self (the gradient is index_add into zeros).
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index);
/// Out of place: a copy of self with alpha * source's slice j added at slice index[j] along
/// dim; duplicate indices accumulate (in index order on the CPU). source has self's shape
/// except size index.numel() at dim, and self's dtype. Differentiable in self and source.
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0);
/// out[i][j][k] = self[index[i][j][k]][j][k] for dim 0 (and alike): out has index's shape;
/// index has self's rank and index.size(d) <= self.size(d) for d != dim. Differentiable in self.
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index);
/// Out of place: a copy of self with out[index[i][j][k]][j][k] = src[i][j][k] for dim 0 (and
/// alike), over index's shape (src may be larger; only its leading index-shaped block is read).
/// With duplicate indices the CPU keeps the last write. Differentiable in self and src.
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
/// scatter with every written element set to `value`. Differentiable in self.
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, double value);
/// scatter that adds (duplicates accumulate). Differentiable in self and src.
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
/// value where the bool `mask` is true, self elsewhere; mask and self broadcast together.
/// An integer or bool self takes only values it represents exactly. Differentiable in self.
Tensor masked_fill(const Tensor& self, const Tensor& mask, double value);
/// masked_fill with a 0-d `value` tensor (converted to self's dtype); differentiable in self
/// and in value (which gets the sum of the gradient over the filled positions).
Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value);
/// cond ? a : b with a scalar b, on the masked_fill kernel: no tensor of b is made (only the
/// negated bool condition, one byte per element). The result keeps a's dtype (f32 for an
/// integer a with a fractional b, as PyTorch promotes). Differentiable in a.
Tensor where(const Tensor& cond, const Tensor& a, double b);
/// cond ? a : b with a scalar a (see the overload above; the condition is used as it is).
Tensor where(const Tensor& cond, double a, const Tensor& b);
/// The lower triangle of the last two dims: elements with col - row <= diagonal, zeros elsewhere.
Tensor tril(const Tensor& self, int64_t diagonal = 0);
/// The upper triangle of the last two dims: elements with col - row >= diagonal, zeros elsewhere.
Tensor triu(const Tensor& self, int64_t diagonal = 0);
/// Rows of weight [V, D] at `indices` (any shape, i64 or i32): indices.shape + [D], in the
/// weight's dtype whatever autocast says. The gradient (embedding_backward) sums the rows'
/// gradients per index in f32 (f64 for f64); rows whose index is padding_idx (-1: none, else
/// in [0, V)) get none. deterministic: a fixed summation order on CUDA too (sorts the indices;
/// the default there uses atomics). Differentiable in weight, to any order.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1, bool deterministic = false);
/// In place and outside autograd, as PyTorch's embedding_renorm_: each row of weight that
/// `indices` references whose norm_type-norm exceeds max_norm is scaled to max_norm / (norm + 1e-7).
/// norm_type > 0 (inf: the largest magnitude).
void embedding_renorm_(const Tensor& weight, const Tensor& indices, double max_norm, double norm_type = 2.0);
/// The k largest (largest = false: smallest) entries of self along dim and their i64 indices,
/// both with size k at dim. Always in sorted order (descending for largest; `sorted` = false is
/// accepted, PyTorch leaves that order unspecified); ties keep the lower index first and NaN
/// counts as larger than every number. The values are differentiable (the gradient is scattered
/// back to the chosen positions).
std::tuple<Tensor, Tensor> topk(const Tensor& self, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);
/// self sorted along dim, ascending (descending: largest first), and the i64 positions the values came from.
/// Always stable: equal values keep their order (`stable` is accepted for PyTorch's signature); NaN sorts as
/// larger than every number, as in PyTorch. The values are differentiable (topk's backward).
std::tuple<Tensor, Tensor> sort(const Tensor& self, int64_t dim = -1, bool descending = false, bool stable = false);
/// The indices of sort(self, dim, descending, stable).
Tensor argsort(const Tensor& self, int64_t dim = -1, bool descending = false, bool stable = false);
/// num_samples category indices (i64) per row of probs ([C] or [R, C], non-negative, finite,
/// each row with a positive sum; need not be normalized), with or without replacement; without,
/// a row needs at least num_samples positive entries. Draws come from the default generator
/// (manual_seed), the same numbers on the CPU and on CUDA.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);

}  // namespace mpx
