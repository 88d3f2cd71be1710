// Reductions over dimensions: sum, mean, max/min (values and indices), argmax, var (and var_mean), norm, logsumexp; the running sum cumsum.
#pragma once
#include <utility>

#include "core/tensor.h"

namespace mpx {

/// Sum of all elements (integral inputs sum in i64). Accumulates in f64 on the CPU; on CUDA f16/bf16/f32
/// accumulate in f32 (as PyTorch does there), so sums that cancel may differ beyond f32 rounding.
Tensor sum(const Tensor& x);
/// Sum over `dims` (empty: all dims).
Tensor sum(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const IntList& dims, bool keepdim = false);
/// Largest element; the gradient is shared evenly among ties.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
/// (values, i64 indices) along dim; the gradient goes to the returned index.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
/// Elementwise max/min of two tensors (LibTorch's torch::max(a, b): maximum, minimum).
inline Tensor max(const Tensor& a, const Tensor& b) { return a.maximum(b); }
inline Tensor min(const Tensor& a, const Tensor& b) { return a.minimum(b); }
Tensor amax(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
/// Variance over dims with Bessel's correction when `unbiased`.
Tensor var(const Tensor& x, const IntList& dims, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, const IntList& dims, bool unbiased = true, bool keepdim = false);
/// (var, mean) and (std, mean) over dims, PyTorch's var_mean/std_mean: both in one dtype (f32 under autocast, as
/// var), each differentiable.
std::pair<Tensor, Tensor> var_mean(const Tensor& x, const IntList& dims, bool unbiased = true, bool keepdim = false);
std::pair<Tensor, Tensor> std_mean(const Tensor& x, const IntList& dims, bool unbiased = true, bool keepdim = false);
/// Euclidean (p = 2) norm of all elements: one pass summing squares (f16/bf16 in f32), no x * x temporary.
Tensor norm(const Tensor& x);
/// log(sum(exp(x))) over dims (empty: all), as max + log(sum(exp(x - max))) so large values do not overflow; a slice
/// of -inf gives -inf and one holding +inf gives +inf, as PyTorch. Integer inputs compute in f32. Autocast: fp32.
Tensor logsumexp(const Tensor& x, const IntList& dims, bool keepdim = false);
/// The ord-norm over dims (empty: all) of floating x, PyTorch's torch.linalg.vector_norm: ord >= 1 or inf (the largest
/// magnitude). Autocast: fp32. (F::normalize divides by it.)
Tensor vector_norm(const Tensor& x, double ord, const IntList& dims, bool keepdim = false);
/// The cosine of the angle between x1 and x2 (broadcast) along dim: sum of (x1 / ||x1||) * (x2 / ||x2||), each norm
/// clamped below at eps (PyTorch's cosine_similarity). Autocast: fp32.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
/// The running sum along dim (PyTorch's cumsum): out[..., i, ...] = sum of x[..., :i+1, ...]. Integer and bool
/// inputs sum in i64; f16/bf16/f32 accumulate in f64 on the CPU and in f32 on CUDA, one rounding per output.
/// The gradient is the reversed running sum of the output's. Autocast: fp32, as PyTorch.
Tensor cumsum(const Tensor& x, int64_t dim);
/// The running product along dim (PyTorch's cumprod), accumulated as cumsum's sums are. Its gradient holds where
/// x has zeros: PyTorch's formula (the running sums of g y divided by x before a lane's first zero, the product
/// around the first zero at it, zero after). Autocast: fp32.
Tensor cumprod(const Tensor& x, int64_t dim);
/// The product of all elements (0-d) or along dim (PyTorch's prod; the last slice of cumprod, so it keeps cumprod's
/// gradient with zeros; an empty dim gives 1). Integer and bool inputs multiply in i64. Autocast: fp32.
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false);

/// One dim as a plain integer (`sum(x, 1)`), as LibTorch's IntArrayRef takes it.
template <DimIndex I> Tensor sum(const Tensor& x, I dim, bool keepdim = false) { return x.sum(dim, keepdim); }
template <DimIndex I> Tensor mean(const Tensor& x, I dim, bool keepdim = false) { return x.mean(dim, keepdim); }
template <DimIndex I> Tensor amax(const Tensor& x, I dim, bool keepdim = false) {
  return amax(x, IntList{static_cast<int64_t>(dim)}, keepdim);
}
template <DimIndex I> Tensor amin(const Tensor& x, I dim, bool keepdim = false) {
  return amin(x, IntList{static_cast<int64_t>(dim)}, keepdim);
}
template <DimIndex I> Tensor var(const Tensor& x, I dim, bool unbiased = true, bool keepdim = false) {
  return x.var(dim, unbiased, keepdim);
}
template <DimIndex I> Tensor std(const Tensor& x, I dim, bool unbiased = true, bool keepdim = false) {
  return std(x, IntList{static_cast<int64_t>(dim)}, unbiased, keepdim);
}
template <DimIndex I> Tensor logsumexp(const Tensor& x, I dim, bool keepdim = false) { return x.logsumexp(dim, keepdim); }
/// The flat index of the largest (smallest) element, 0-dim i64.
inline Tensor argmax(const Tensor& x) { return x.argmax(); }
inline Tensor argmin(const Tensor& x) { return x.argmin(); }

}  // namespace mpx

namespace mpx::kernels {
/// Row reduction: `in` is contiguous [rows, cols]; out is contiguous [rows].
/// param: for sum, 0 sums, 1 divides by cols (mean), 2 sums squares (norm's, each square formed in the
/// accumulation type); for var, the correction.
/// The CPU's sum also takes a contiguous [outer, rows, inner] `in` and reduces its outer and
/// inner dims (a per-channel sum of NCHW data without first moving the channels out).
using ReduceFn = void (*)(const Tensor& out, const Tensor& in, double param);
/// Arg-reduction over rows of a contiguous [rows, cols] input: values and i64 indices.
using ArgReduceFn = void (*)(const Tensor& values, const Tensor& indices, const Tensor& in);
/// Running sum along the middle dim of contiguous [outer, n, inner] `in` into `out` of the same shape and dtype;
/// `reverse` sums from the end (cumsum's backward).
using ScanFn = void (*)(const Tensor& out, const Tensor& in, bool reverse);
}  // namespace mpx::kernels
