// Internal: matrix products on 16-column f32 panels (AVX2/FMA) where they beat oneDNN 2.6 (see gemm_panels.cpp).
#pragma once
#include <memory>

#include "core/tensor.h"

namespace mpx::cpu::panels {
/// Whether mm_packed runs on these panels rather than oneDNN's packed product here: built with AVX2 and FMA, on a
/// CPU without AVX-512, where oneDNN 2.6's packed f32 product of [16, 512] x [512, 2048] runs at ~42 GFLOP/s on a
/// Zen 3 core and these panels at ~90.
bool preferred();
/// kernels::GemmPackedFn's contract for f32, bf16 and f16: out = a @ b + beta * out, b packed into `plan` (widened
/// to f32) on the first call (any strides), a 2-d with any strides, out contiguous; f32 sums, each output rounded once.
/// Returns false, having written nothing, for another dtype, an empty product, or a b that is not the plan's; and
/// always where the build lacks AVX2/FMA.
bool matmul_packed(const Tensor& out, const Tensor& a, const Tensor& b, double beta, std::shared_ptr<void>& plan);
/// out = alpha * a @ b + beta * out for f32, bf16 or f16 2-d a, b with any strides, out contiguous (kernels::GemmFn's
/// contract: f32 sums, each output rounded once), both operands packed (and widened) per call. Returns false, having
/// written nothing, for another dtype or an empty product; and always where the build lacks AVX2/FMA.
bool matmul(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta);
}  // namespace mpx::cpu::panels
