// Launchers of the CUDA row reductions, softmax family, dropout and nll pick/scatter (POD arguments,
// shared by ops/cuda/reduction.cu and ops/cuda/reduction.cpp).
#pragma once
#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// Bytes of device workspace a row reduction over `rows` lanes of `cols` elements (`inner`
/// apart) needs on the current device: non-zero only when long rows are split across blocks.
/// Every launcher below that takes `ws` needs at least this much.
int64_t rows_workspace_bytes(int64_t rows, int64_t cols, int64_t inner);

/// out[r] = sum (or mean) of row r of a contiguous [rows, cols] input; dt in f32, f64, f16, bf16, i64.
/// mode: 0 sum, 1 mean, 2 sum of squares.
void launch_sum(DType dt, void* out, const void* in, int64_t rows, int64_t cols, int mode, void* ws, cudaStream_t s);
/// out[r] = sum of squared deviations of row r / max(0, cols - correction); floating dt.
void launch_var(DType dt, void* out, const void* in, int64_t rows, int64_t cols, double correction, void* ws,
                cudaStream_t s);
/// values[r], indices[r] = the max (min) of row r and its first index; the first NaN wins.
void launch_arg_reduce(DType dt, bool is_max, void* values, int64_t* indices, const void* in, int64_t rows,
                       int64_t cols, void* ws, cudaStream_t s);
/// out = the running sum (`prod`: product) of in along the middle dim of contiguous [outer, n, inner] (from the end
/// with `reverse`); dt in f32, f64, f16, bf16, i64 (ops/cuda/scan.cu).
void launch_cumsum(DType dt, void* out, const void* in, int64_t outer, int64_t n, int64_t inner, bool reverse,
                   bool prod, cudaStream_t s);
/// Softmax / log_softmax over the middle dim of contiguous [outer, n, inner].
void launch_softmax(DType dt, void* out, const void* in, int64_t outer, int64_t n, int64_t inner, bool log, void* ws,
                    cudaStream_t s);
/// Fused softmax / log_softmax backward over contiguous [outer, n, inner] tensors.
void launch_softmax_backward(DType dt, void* gin, const void* g, const void* y, int64_t outer, int64_t n,
                             int64_t inner, bool log, void* ws, cudaStream_t s);
/// out = in * mask * scale over n contiguous elements; with `draw` the u8 mask is first filled
/// with uniform(seed, offset + i) >= p (core/random.h, bit-identical to the CPU).
void launch_dropout(DType dt, void* out, uint8_t* mask, const void* in, int64_t n, uint64_t seed, uint64_t offset,
                    double p, double scale, bool draw, cudaStream_t s);
/// out[n, i] = in[n, target[n, i], i] (0 for ignored targets, NaN for out-of-range ones, which
/// the op layer reports on its next call); `in` is a 3-d
/// [N, C, inner] view with any strides, target and out contiguous [N, inner].
void launch_nll_pick(DType dt, void* out, const TensorDesc& in, const int64_t* target, int64_t ignore_index,
                     cudaStream_t s);
/// out (contiguous [N, C, inner]) = g[n, i] at class target[n, i], zero elsewhere.
void launch_nll_scatter(DType dt, void* out, const void* g, const int64_t* target, int64_t N, int64_t C,
                        int64_t inner, int64_t ignore_index, cudaStream_t s);

/// loss[r], lse[r] (compute type, [N]) of the cross-entropy of each row of contiguous logits x [N, C] against
/// target[r] (kernels::CrossEntropyRowsFn).
void launch_cross_entropy_rows(DType dt, void* loss, void* lse, const void* x, const int64_t* target, int64_t N,
                               int64_t C, int64_t ignore_index, double smoothing, void* ws, cudaStream_t s);
/// dx (contiguous [N, C], x's dtype) of those rows for their gradient g [N] (kernels::CrossEntropyRowsBackwardFn).
void launch_cross_entropy_backward(DType dt, void* dx, const void* g, const void* x, const int64_t* target,
                                   const void* lse, int64_t N, int64_t C, int64_t ignore_index, double smoothing,
                                   cudaStream_t s);

}  // namespace mpx::cuda
