// Resizing ops: interpolate (nearest, nearest-exact, linear, bilinear, trilinear) and pixel_shuffle / pixel_unshuffle.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mpx {

/// PyTorch's F.interpolate over the spatial dims of [N, C, W], [N, C, H, W] or [N, C, D, H, W] input: give `size`
/// (one per spatial dim, or one for all) or `scale_factor` (likewise; the output is floor(in * factor) and, as
/// PyTorch without recompute_scale_factor, the factor itself maps output to input coordinates). Modes "nearest"
/// (PyTorch's legacy floor(dst * scale)), "nearest-exact" (pixel centres), "linear" (3-d), "bilinear" (4-d),
/// "trilinear" (5-d) with align_corners (default false). Separable: one gather-and-blend pass per spatial dim.
/// Autocast: fp32, as PyTorch's upsampling ops. Differentiable.
Tensor interpolate(const Tensor& x, const IntList& size, const std::vector<double>& scale_factor = {},
                   const std::string& mode = "nearest", std::optional<bool> align_corners = std::nullopt);
/// [N, C r^2, H, W] -> [N, C, H r, W r] (PyTorch's pixel_shuffle; any leading batch dims).
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
/// The inverse: [N, C, H r, W r] -> [N, C r^2, H, W].
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);

}  // namespace mpx

namespace mpx::kernels {
/// One separable resampling pass (OpId::resample_dim): with x contiguous [outer, n_in, inner] and out contiguous
/// [outer, n_out, inner], out[o, j, :] = w[2j] x[o, idx[2j], :] + w[2j + 1] x[o, idx[2j + 1], :] (idx i64 and w in
/// x's dtype, both [2 n_out], on the host). Its adjoint (OpId::resample_dim_backward) writes gx [outer, n_in, inner]
/// (zeroing it first) from g [outer, n_out, inner] with the same idx and w.
using ResampleFn = void (*)(const Tensor& out, const Tensor& x, const Tensor& idx, const Tensor& w);
}  // namespace mpx::kernels
