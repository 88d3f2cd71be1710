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
/// "trilinear" (5-d) with align_corners (default false). Separable: the last two dims in one pass (a second for the depth of 5-d input).
/// Autocast: fp32, as PyTorch's upsampling ops. Differentiable.
Tensor interpolate(const Tensor& x, const IntList& size, const std::vector<double>& scale_factor = {},
                   const std::string& mode = "nearest", std::optional<bool> align_corners = std::nullopt);
/// [N, C r^2, H, W] -> [N, C, H r, W r] (PyTorch's pixel_shuffle; any leading batch dims).
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
/// The inverse: [N, C, H r, W r] -> [N, C r^2, H, W].
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);

}  // namespace mpx

namespace mpx::kernels {
/// interpolate's resampling of the last two dims (OpId::resample): with x contiguous [outer, Hi, Wi] and out
/// contiguous [outer, Ho, Wo], out[o] = H(W(x[o])), where each axis maps output position j to input positions
/// i[2j] and i[2j + 1] with weights w[2j] and w[2j + 1] (i: i64 [2 n_out]; w: [2 n_out] in f32, f64 for f64 data;
/// on the tensors' device). An undefined w means nearest (i[2j] alone, copied); an undefined i and w mean the axis
/// is kept (n_out = n_in). The first positions never decrease along j and i[2j + 1] is i[2j] or i[2j] + 1, as
/// nearest and linear sampling make them. The adjoint (OpId::resample_backward) writes gx [outer, Hi, Wi] whole
/// from g [outer, Ho, Wo] with the same maps.
using ResampleFn = void (*)(const Tensor& out, const Tensor& x, const Tensor& ih, const Tensor& wh, const Tensor& iw,
                            const Tensor& ww);
}  // namespace mpx::kernels
