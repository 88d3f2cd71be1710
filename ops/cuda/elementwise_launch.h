// Launchers of the CUDA elementwise kernels (POD arguments only; shared by the .cu and the .cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launch.h"
#include "ops/op_id.h"

namespace mpx::cuda {

/// out = op(in) with `in` already broadcast to out's shape (stride 0 where expanded).
/// op is an op of MPX_UNARY_OPS / MPX_PARAM_UNARY_OPS (ops/formulas.h).
void launch_unary(OpId op, const TensorDesc& out, const TensorDesc& in, double p0, double p1, cudaStream_t s);
/// out = op(a, b) for an op of MPX_BINARY_OPS; a and b share the compute dtype, out is that
/// dtype or bool for comparisons.
void launch_binary(OpId op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b, double alpha,
                   cudaStream_t s);
/// out = op(a, b, c) for where (a is the bool condition), addcmul and addcdiv (a is self), with
/// `value` the scalar of addcmul / addcdiv.
void launch_ternary(OpId op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b, const TensorDesc& c,
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
