// Launchers of the CUDA elementwise kernels (POD arguments only; shared by the .cu and the .cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// Unary ops; the codes are runtime arguments so each dtype compiles one kernel, not one per op.
enum class UnaryOp : int {
  neg, abs, sign, sqrt, rsqrt, reciprocal, exp, log, sin, cos, erf, tanh, sigmoid, relu, leaky_relu, gelu, silu,
  softplus, pow_scalar, clamp
};
/// Binary ops: arithmetic (output in the input dtype), threshold_backward, and comparisons
/// (eq..ge, output bool).
enum class BinaryOp : int { add, sub, mul, div, pow, maximum, minimum, threshold_backward, eq, ne, lt, le, gt, ge };
/// Ternary ops: where (a is the bool condition), addcmul and addcdiv (a is self).
enum class TernaryOp : int { where, addcmul, addcdiv };

/// out = op(in) with `in` already broadcast to out's shape (stride 0 where expanded).
void launch_unary(UnaryOp op, const TensorDesc& out, const TensorDesc& in, double p0, double p1, cudaStream_t s);
/// out = op(a, b); a and b share the compute dtype, out is that dtype or bool for comparisons.
void launch_binary(BinaryOp op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b, double alpha,
                   cudaStream_t s);
/// out = op(a, b, c) with `value` the scalar of addcmul / addcdiv.
void launch_ternary(TernaryOp op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b, const TensorDesc& c,
                    double value, cudaStream_t s);
/// Strided copy with conversion between any two dtypes (the CPU's rounding and casting rules).
void launch_copy(const TensorDesc& out, const TensorDesc& src, cudaStream_t s);
/// Every element of out (any strides) = value converted to out's dtype.
void launch_fill(const TensorDesc& out, double value, cudaStream_t s);
/// Counter-based draws into a contiguous out: element i uses position offset + i of `seed`
/// (uniform in [a, b), floored for integers; or normal with mean a and std b).
void launch_rand(bool normal, const TensorDesc& out, uint64_t seed, uint64_t offset, double a, double b,
                 cudaStream_t s);

}  // namespace mpx::cuda
