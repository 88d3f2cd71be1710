// Launchers of the CUDA pad kernels (POD arguments, shared by ops/cuda/pad.cu and ops/cuda/pad.cpp).
#pragma once
#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// pad's pass between [outer, di, hi, wi] (the forward's input) and [outer, do, ho, wo], with each axis's map on
/// the device in padmap::Axis's layout (ops/pad_map.h).
struct PadGeom {
  int64_t outer = 0, di = 1, hi = 1, wi = 1, d_out = 1, h_out = 1, w_out = 1;
  const int64_t* md = nullptr;
  const int64_t* mh = nullptr;
  const int64_t* mw = nullptr;
};

/// out = the gather, one thread per output element, copying elem_size-byte words; value_bits: the fill value's bits
/// in the output dtype.
void launch_pad(int elem_size, const PadGeom& g, void* out, const void* x, uint64_t value_bits, cudaStream_t s);
/// gx = the adjoint applied to gy: one thread per gx element sums its readers (D, then H, then W, ascending) in f32
/// for f16/bf16, so the sums are deterministic, need no atomics and equal the CPU kernel's. dt: a floating dtype.
void launch_pad_backward(DType dt, const PadGeom& g, void* gx, const void* gy, cudaStream_t s);

}  // namespace mpx::cuda
