// Internal: the oneDNN matmul path that ops/cpu/linalg.cpp tries before its Eigen kernels.
#pragma once
#include <memory>

#include "core/tensor.h"

namespace mpx::cpu::onednn {
/// The activation a matmul applies after its bias (oneDNN eltwise post-ops).
enum class Activation : int { kNone = 0, kRelu = 1, kGeluTanh = 2, kGeluErf = 3 };
/// out = alpha * a @ b + beta * out (+ bias[m] on every row, then `act`), for a [n, k]
/// and b [k, m] with a unit stride in either dim, or batched a [B, n, k], b [B, k, m] (batch
/// stride 0 broadcasts); out contiguous. f32 everywhere; bf16 where the CPU runs oneDNN's bf16
/// kernels natively (AVX-512 and newer: f32 accumulation, one rounding of each output, the same
/// contract as the Eigen path). bias, when defined, is [m] contiguous in out's dtype or f32, and
/// then alpha = 1 and beta = 0. Returns false, having written nothing, when oneDNN has only its
/// reference loops for the case (the caller then runs Eigen).
bool matmul(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta, const Tensor& bias = {},
            Activation act = Activation::kNone);
/// out = a @ b + beta * out with b packed once into the primitive's layout (kernels::GemmPackedFn's
/// contract), f32 and native bf16 as matmul; a 2-d, b 2-d with a unit stride in either dim.
bool matmul_packed(const Tensor& out, const Tensor& a, const Tensor& b, double beta, std::shared_ptr<void>& plan);
/// Whether bf16 matrix products run on oneDNN here.
bool matmul_bf16_native();
}  // namespace mpx::cpu::onednn
