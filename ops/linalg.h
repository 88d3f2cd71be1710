// Linear algebra ops: matmul (numpy semantics), mm, bmm, addmm, linear, linear_relu, linear_gelu, dot, einsum.
#pragma once
#include <memory>
#include <string>

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
/// x @ w^T + b with x [..., in], w [out, in], b [out] (optional). On CUDA the bias is added
/// in cuBLASLt's epilogue and the backward's bias gradient comes out of the weight-gradient GEMM.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {});
/// relu(x @ w^T + b): one cuBLASLt call with the bias+ReLU epilogue on CUDA, relu(linear(x, w, b))
/// elsewhere. Differentiable (the backward masks the gradient with the output's sign).
Tensor linear_relu(const Tensor& x, const Tensor& w, const Tensor& b);
/// gelu(linear(x, w, b), approximate) ("none" or "tanh"). Where no backward is recorded (inference), the GELU
/// runs in the GEMM's epilogue on devices that have one (oneDNN's post-op on the CPU): no pass over the
/// pre-activation. With gradients recorded it is linear then gelu, since gelu's backward needs the pre-activation.
Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, const std::string& approximate = "none");
Tensor dot(const Tensor& a, const Tensor& b);
/// Einstein summation with PyTorch's semantics: "bhqd,bhkd->bhqk", implicit output (the labels used once, in
/// alphabetical order), '...' for broadcast dims, a label repeated in one operand for its diagonal, size-1 dims
/// broadcast. Contracts left to right through bmm (so autocast lowers it as it does bmm); integer operands by
/// broadcast products. Differentiable.
Tensor einsum(const std::string& equation, const tensor_list& operands);
/// beta * self + alpha * bmm(b1, b2), self broadcasting to the product's [B, n, p] (PyTorch's baddbmm; beta 0
/// ignores self, NaN included). Autocast: lower, as bmm. Differentiable.
Tensor baddbmm(const Tensor& self, const Tensor& b1, const Tensor& b2, double beta = 1.0, double alpha = 1.0);
/// The outer product of two 1-d tensors: out[i, j] = a[i] b[j]. Differentiable.
Tensor outer(const Tensor& a, const Tensor& b);
/// The sum of a matrix's main diagonal (a 0-d tensor). Differentiable.
Tensor trace(const Tensor& x);

}  // namespace mpx

namespace mpx::kernels {
/// out[n, m] = alpha * op(a) @ op(b) + beta * out, for 2-d a, b with any strides
/// (row- or column-major); out contiguous. Accumulates in f32 (f64 for f64).
using GemmFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta);

/// out = a @ b + beta * out for many calls with one right operand (OpId::mm_packed: a recurrent
/// layer's steps): the first call with an empty `plan` packs b into the library's own layout for
/// a's shape and keeps it there; later calls with that plan reuse it, packing b again only for a
/// shape of a whose product reads another layout (a packed sequence's steps lose rows as its
/// sequences end). The caller keeps b unchanged while it holds the plan. Returns false, having
/// written nothing, where the device library has no such path or b is not the plan's (the caller
/// then runs OpId::mm).
using GemmPackedFn = bool (*)(const Tensor& out, const Tensor& a, const Tensor& b, double beta,
                              std::shared_ptr<void>& plan);

/// Batched GEMM (OpId::bmm): out[i] = alpha * a[i] @ b[i] + beta * out[i] for a [B, n, k],
/// b [B, k, m] with any strides (batch stride 0 for a broadcast operand); out [B, n, m] contiguous.
using BmmFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta);

/// The fused GEMM forms behind linear (GemmEpilogueFn).
enum class GemmEpilogue : int {
  kBias,      ///< out = a @ b + bias, bias [m] added to every row
  kBiasRelu,  ///< out = relu(a @ b + bias)
  kBiasGrad,  ///< out = a @ b, and bias[i] = sum_j a[i, j] (bias [n]): linear's weight and bias gradients
  kBiasGeluTanh,  ///< out = gelu(a @ b + bias), tanh form (inference: the pre-activation is not kept)
  kBiasGeluErf,   ///< out = gelu(a @ b + bias), erf form
};
/// A GEMM with a fused epilogue (OpId::linear; registered where a device library has one).
/// a [n, k], b [k, m] with any strides, out [n, m] and bias contiguous, all of one dtype.
/// Returns false, having written nothing, when the library has no algorithm for the case
/// (the caller then computes it unfused).
using GemmEpilogueFn = bool (*)(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                                GemmEpilogue epilogue);
}  // namespace mpx::kernels
