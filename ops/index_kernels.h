// Kernel signatures of the index family (ops.def rows index_select ... multinomial; ops/index.h).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mpx::kernels {
// Index tensors reach every kernel as contiguous i64 already checked by the op layer on the CPU
// (on CUDA the kernels guard memory: an out-of-range index is never read or written; it raises a
// device-side flag that the op layer turns into an error). Outputs are contiguous unless said.

/// out = in.index_select(dim, index): in any strides, index [n], out contiguous with size n at dim.
using IndexSelectFn = void (*)(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
/// out.index_add_(dim, index, src, alpha) in place: out contiguous, src contiguous with size
/// index.numel() at dim. The CPU kernel adds in index order (deterministic).
using IndexAddFn = void (*)(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, double alpha);
/// out = in.gather(dim, index): out and index contiguous of one shape, in any strides
/// (index.size(d) <= in.size(d) for d != dim).
using GatherFn = void (*)(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
/// scatter (out[.. index ..] = src) and scatter_add (+=) in place on out (contiguous, holding
/// self already); index and src contiguous of index's shape (src cut to it by the op layer).
using ScatterFn = void (*)(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
/// out = mask ? value : in, with in and the bool mask given as views of out's shape (stride 0
/// where broadcast); out contiguous. value is already representable in out's dtype.
using MaskedFillFn = void (*)(const Tensor& out, const Tensor& in, const Tensor& mask, double value);
/// tril / triu over the last two dims: out = in where (j - i <= diagonal) for tril
/// (j - i >= diagonal for triu), else 0. in any strides, out contiguous of in's shape.
using TriFn = void (*)(const Tensor& out, const Tensor& in, int64_t diagonal);
/// out [N, D] = weight[indices[n], :]; weight [V, D] contiguous, indices [N].
using EmbeddingFn = void (*)(const Tensor& out, const Tensor& weight, const Tensor& indices);
/// grad_weight [V, D] (the kernel zeroes it first) gets the sum of grad [N, D] rows per index,
/// accumulated in f32 (f64 for f64); rows whose index is padding_idx (-1: none) add nothing.
/// deterministic: a fixed summation order on every device (the CPU's is always fixed; CUDA sorts
/// the indices first, as PyTorch's embedding_dense_backward).
using EmbeddingBackwardFn = void (*)(const Tensor& grad_weight, const Tensor& grad, const Tensor& indices,
                                     int64_t padding_idx, bool deterministic);
/// The k largest (or smallest) entries along `dim` of in (any strides): values (in's dtype) and
/// indices (i64) contiguous with size k at dim; sorted (descending for largest) when asked, and
/// ties keep the lower index first. NaN counts as larger than every number, as in PyTorch.
using TopkFn = void (*)(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, int64_t dim,
                        bool largest, bool sorted);
/// Draws num_samples category indices per row of probs [R, C] (contiguous, non-negative, rows
/// with a positive finite sum; checked by the op layer) into out i64 [R, num_samples], with or
/// without replacement, from the counter-based stream (seed, offset) as the rand kernels.
using MultinomialFn = void (*)(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement,
                               uint64_t seed, uint64_t offset);
}  // namespace mpx::kernels
