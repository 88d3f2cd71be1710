// Softmax family and dropout.
#pragma once
#include "core/tensor.h"

namespace mpx {

/// Softmax along dim, computed in f32 (f64 for f64) and returned in the input dtype,
/// or in `dtype` when given.
Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
/// Inverted dropout: zeroes with probability p and scales survivors by 1/(1-p) when
/// training; identity otherwise. Uses the seeded default generator.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
/// PReLU (PyTorch's F.prelu): x where x > 0, else weight * x, with weight holding 1 value or one
/// per channel (x.size(1)). Runs in the autocast dtype under autocast, as in PyTorch.
Tensor prelu(const Tensor& x, const Tensor& weight);

}  // namespace mpx

namespace mpx::kernels {
/// Softmax over the middle dim of a contiguous [outer, n, inner] input; out has the
/// input's dtype and layout. `log` selects log_softmax.
using SoftmaxFn = void (*)(const Tensor& out, const Tensor& in, int64_t outer, int64_t n, int64_t inner, bool log);
/// Fused first-order backward over contiguous [outer, n, inner] tensors of one dtype:
/// softmax: gin = y * (g - sum(g * y)); log_softmax: gin = g - exp(y) * sum(g).
using SoftmaxBackwardFn = void (*)(const Tensor& gin, const Tensor& g, const Tensor& y, int64_t outer, int64_t n,
                                   int64_t inner, bool log);
/// Dropout over contiguous tensors of one dtype: out = in * mask * scale. With `draw`
/// the kernel first fills the u8 mask (keep when uniform(seed, offset + i) >= p);
/// otherwise it reads the given mask (the backward).
using DropoutFn = void (*)(const Tensor& out, const Tensor& mask, const Tensor& in, uint64_t seed, uint64_t offset,
                           double p, double scale, bool draw);
}  // namespace mpx::kernels
