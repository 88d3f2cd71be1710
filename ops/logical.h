// Boolean masks: logical ops, the NaN/Inf predicates, any/all, nonzero, masked_select and nan_to_num
// (PyTorch's names and semantics; a nonzero value, NaN included, is true).
#pragma once
#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace mpx {

/// Elementwise logical and/or/xor of two broadcastable tensors of any dtypes: bool results, not differentiable.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
/// x == 0, elementwise, as bool.
Tensor logical_not(const Tensor& x);

/// Elementwise predicates, bool results (integer and bool tensors: no NaN, no Inf).
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);

/// NaN, +Inf and -Inf replaced by `nan`, `posinf`, `neginf` (defaults: 0, the dtype's largest and lowest
/// finite values); differentiable, the replaced elements getting no gradient. Integer tensors come back as copies.
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);

/// Whether any (all) element is nonzero: a 0-d bool; over `dim` (keepdim as sum's) a bool of the reduced
/// shape. An empty tensor has no true element (any: false, all: true).
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, int64_t dim, bool keepdim = false);

/// The indices of the nonzero elements, i64 [count, x.dim()] in row-major order (PyTorch's nonzero). The
/// count is read back to the host, so on CUDA it waits for the device, as PyTorch's does.
Tensor nonzero(const Tensor& x);
/// The elements of x where mask (bool, broadcast with x) is true, 1-d in row-major order; differentiable in x.
Tensor masked_select(const Tensor& x, const Tensor& mask);

/// Masks combine with &, |, ^ and ~ (bool tensors only: integer bitwise ops are not offered).
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& x);

}  // namespace mpx
