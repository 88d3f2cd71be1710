// Shape ops: views (as Tensor methods), cat/stack, unbind, diag, flip/roll/repeat/repeat_interleave, and sum_to for
// broadcasting gradients.
#pragma once
#include <optional>

#include "core/tensor.h"

namespace mpx {

/// LibTorch's free-function spellings of the view methods (`torch::flatten(x, 1)`, `torch::reshape(x, shape)`);
/// reshape is one function so nn::Functional(reshape, shape) can bind it.
inline Tensor reshape(const Tensor& x, const IntList& shape) { return x.reshape(shape); }
inline Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1) { return x.flatten(start_dim, end_dim); }
inline Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) { return x.transpose(d0, d1); }
inline Tensor permute(const Tensor& x, const IntList& dims) { return x.permute(dims); }
inline Tensor squeeze(const Tensor& x) { return x.squeeze(); }
inline Tensor squeeze(const Tensor& x, int64_t dim) { return x.squeeze(dim); }
inline Tensor unsqueeze(const Tensor& x, int64_t dim) { return x.unsqueeze(dim); }
inline Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) { return x.narrow(dim, start, length); }
inline Tensor select(const Tensor& x, int64_t dim, int64_t index) { return x.select(dim, index); }

/// Concatenates along `dim`; shapes must agree elsewhere. Differentiable.
Tensor cat(const tensor_list& tensors, int64_t dim = 0);
/// Stacks along a new dimension `dim`. Differentiable.
Tensor stack(const tensor_list& tensors, int64_t dim = 0);
/// Splits into pieces of `size` along dim (views).
tensor_list split(const Tensor& t, int64_t size, int64_t dim = 0);
tensor_list chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);
/// The slices along dim, as views (PyTorch's unbind).
tensor_list unbind(const Tensor& t, int64_t dim = 0);
/// Sums a broadcast tensor back down to `shape`. Differentiable.
Tensor sum_to(const Tensor& t, const IntList& shape);
/// Copies `src` into a zero tensor of `shape` at the region given by a strided view;
/// the backward of narrow/slice/select. Differentiable in src.
Tensor slice_backward(const Tensor& src, const IntList& shape, int64_t dim, int64_t start, int64_t step);
/// src written into the diagonal (offset, d1, d2) of a zero tensor of `shape`: the backward of Tensor::diagonal.
/// Differentiable in src.
Tensor diagonal_backward(const Tensor& src, const IntList& shape, int64_t offset, int64_t d1, int64_t d2);
/// A 1-d tensor as diagonal `offset` of a square matrix, or a matrix's diagonal `offset` as a new 1-d tensor
/// (PyTorch's diag). Differentiable.
Tensor diag(const Tensor& t, int64_t offset = 0);
/// One-hot encoding of i64 class indices in [0, num_classes) as i64 (not differentiable); num_classes -1 takes the
/// largest index + 1, as PyTorch.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
/// A copy with the order of elements reversed along each of `dims` (PyTorch's flip). Differentiable.
Tensor flip(const Tensor& t, const IntList& dims);
/// The tensor tiled `repeats[d]` times along each dim (PyTorch's Tensor.repeat): repeats may be longer than t's
/// dims, adding leading ones. Differentiable (the gradient sums the tiles).
Tensor repeat(const Tensor& t, const IntList& repeats);
/// Elements shifted along each of `dims` by the matching shift, wrapping around (PyTorch's roll): element i goes
/// to (i + shift) mod size; with no dims, over the flattened tensor, reshaped back. Differentiable.
Tensor roll(const Tensor& t, const IntList& shifts, const IntList& dims = {});
/// Each element repeated `repeats` times in a row along dim (PyTorch's repeat_interleave with an integer count);
/// without dim, over the flattened tensor. Differentiable (the gradient sums each run).
Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim = std::nullopt);

}  // namespace mpx
