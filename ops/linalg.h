// Linear algebra ops: matmul (numpy semantics), mm, bmm, addmm, linear, dot.
#pragma once
#include "core/tensor.h"

namespace mpx {

/// numpy-style matmul: 1-d·1-d dot, 2-d mm, batched with broadcasting for >2-d.
Tensor matmul(const Tensor& a, const Tensor& b);
/// [n, k] @ [k, m].
Tensor mm(const Tensor& a, const Tensor& b);
/// [B, n, k] @ [B, k, m].
Tensor bmm(const Tensor& a, const Tensor& b);
/// beta * self + alpha * (a @ b), self broadcast to [n, m].
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
/// x @ w^T + b with x [..., in], w [out, in], b [out] (optional).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {});
Tensor dot(const Tensor& a, const Tensor& b);

}  // namespace mpx

namespace mpx::kernels {
/// out[n, m] = alpha * op(a) @ op(b) + beta * out, for 2-d a, b with any strides
/// (row- or column-major); out contiguous. Accumulates in f32 (f64 for f64).
using GemmFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta);
}  // namespace mpx::kernels
