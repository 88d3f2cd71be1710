// Internal: the oneDNN f32/bf16 convolution path that ops/cpu/conv.cpp tries before its Eigen kernels.
#pragma once
#include <string>

#include "ops/conv.h"

namespace mpx::cpu::onednn {
// Each returns false (having written nothing) when oneDNN cannot run the case; the caller
// then uses the im2col + Eigen kernel. Activations (x, y, gx, gy) may be NCHW-contiguous or
// channels-last, each on its own; weights are contiguous [O, C/groups, kh, kw] (or, with one
// group, channels-last); all f32, or
// all bf16 (a bias f32 or bf16; conv_transpose2d's bias f32 only).
bool conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const kernels::Conv2dParams& p);
bool conv_backward_input(const Tensor& gx, const Tensor& gy, const Tensor& w, const Tensor& b,
                         const kernels::Conv2dParams& p);
bool conv_backward_weight(const Tensor& gw, const Tensor& gy, const Tensor& x, const kernels::Conv2dParams& p);
// Convolutions as one oneDNN matmul each (conv_gemm_onednn.cpp): bf16 on small maps where AMX
// runs it, and 1x1 outputs that read one kernel tap or the whole input (f32 and bf16); the same
// contract, false when the case is not one of those. Tried first by the three above.
bool gemm_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const kernels::Conv2dParams& p);
bool gemm_conv_backward_input(const Tensor& gx, const Tensor& gy, const Tensor& w, const kernels::Conv2dParams& p);
bool gemm_conv_backward_weight(const Tensor& gw, const Tensor& gy, const Tensor& x, const kernels::Conv2dParams& p);
// Whether oneDNN runs bf16 convolutions on this CPU with real kernels (AVX-512 and newer).
bool bf16_native();
// "oneDNN 2.6.3 (cpu isa ...)".
std::string version();
}  // namespace mpx::cpu::onednn
