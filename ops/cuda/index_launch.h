// Launchers of the CUDA index-family kernels (ops/cuda/index.cu), called by ops/cuda/index.cpp with POD arguments.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

// Index arguments are contiguous i64 on the device. An index outside its range is never
// followed: reads give zero, writes are skipped (the op layer has already refused it).

/// out (contiguous, src's sizes with n at dim) = src gathered at idx[0..n) along dim; src.sizes
/// must already hold out's sizes (n at dim) and src's own strides; V = src's size at dim.
void launch_index_select(int elem_size, void* out, const TensorDesc& src, int dim, const int64_t* idx, int64_t V,
                         cudaStream_t s);
/// out [outer, V, inner] (contiguous) += alpha * src [outer, n, inner] at rows idx[0..n) (atomics).
void launch_index_add(DType dt, void* out, const void* src, const int64_t* idx, int64_t outer, int64_t V, int64_t n,
                      int64_t inner, double alpha, cudaStream_t s);
/// out (contiguous, index's shape) = in[.. idx[e] at dim ..]; in.sizes hold index's sizes, with
/// in's strides; V = in's size at dim.
void launch_gather(int elem_size, void* out, const TensorDesc& in, int dim, const int64_t* idx, int64_t V,
                   cudaStream_t s);
/// out[.. idx[e] at dim ..] = src[e] (or += with add, by atomics); out.sizes hold index's sizes
/// with out's strides; V = out's size at dim; src contiguous of index's shape.
void launch_scatter(DType dt, bool add, const TensorDesc& out, int dim, const int64_t* idx, const void* src,
                    int64_t V, cudaStream_t s);
/// out (contiguous, n elements) = mask ? value_bits : in; in and mask (bool) strided views of out's shape.
void launch_masked_fill(int elem_size, void* out, const TensorDesc& in, const TensorDesc& mask, uint64_t value_bits,
                        cudaStream_t s);
/// out (contiguous) = tril/triu of in over its last two dims.
void launch_tri(int elem_size, bool lower, void* out, const TensorDesc& in, int64_t diagonal, cudaStream_t s);
/// out [N, D] = weight [V, D] rows at idx.
void launch_embedding(int elem_size, void* out, const void* weight, const int64_t* idx, int64_t N, int64_t V,
                      int64_t D, cudaStream_t s);
/// Bytes of device workspace launch_embedding_backward needs (0 unless deterministic or f16/bf16).
size_t embedding_backward_workspace(DType dt, int64_t N, int64_t V, int64_t D, bool deterministic);
/// grad_weight [V, D] = sum of grad [N, D] rows per index (padding_idx rows skipped), in f32
/// (f64 for f64): by atomics, or deterministic (indices radix-sorted, each run summed in order).
void launch_embedding_backward(DType dt, void* grad_weight, const void* grad, const int64_t* idx, int64_t N,
                               int64_t V, int64_t D, int64_t padding_idx, bool deterministic, void* workspace,
                               size_t workspace_bytes, cudaStream_t s);
/// values/indices [outer, k, inner] = the top k of in [outer, n, inner] (contiguous) along n, sorted.
void launch_topk(DType dt, void* values, int64_t* indices, const void* in, int64_t outer, int64_t n, int64_t inner,
                 int64_t k, bool largest, cudaStream_t s);
/// values/indices [outer, n, inner] = in [outer, n, inner] (contiguous) sorted along n in topk's order (ties by index:
/// stable). Work buffers of lanes * P entries (P: n rounded up to a power of two): keys (doubles, or i64 for integer
/// dtypes) and idx.
void launch_sort(DType dt, void* values, int64_t* indices, const void* in, int64_t outer, int64_t n, int64_t inner,
                 bool largest, void* keys, int64_t* idx, int64_t P, cudaStream_t s);
/// out [R, S] i64 = draws from probs [R, C] (contiguous); workspace: R * C doubles without replacement.
void launch_multinomial(DType dt, int64_t* out, const void* probs, int64_t R, int64_t C, int64_t S, bool replacement,
                        uint64_t seed, uint64_t offset, double* workspace, cudaStream_t s);

}  // namespace mpx::cuda
