// Fused multi-tensor amp kernels: unscale every gradient of an optimizer and detect inf/NaN in one pass.
#pragma once
#include "core/tensor.h"

namespace mpx {

/// For every i: grads_out[i] = grads_in[i] * inv_scale, computed in f32 (f64 for f64 tensors),
/// and sets `found_inf` (an f32 0-dim tensor) to 1.0 when any input element is inf or NaN; it
/// is never reset to 0 here, so several calls accumulate into one flag (as torch.amp's
/// _amp_foreach_non_finite_check_and_unscale_). grads_out[i] is f32 (or f64 for f64 inputs) or
/// grads_in[i]'s own dtype (f16/bf16 rounded once: apex's O3, which has no f32 masters to
/// unscale into), has grads_in[i]'s shape and may be grads_in[i] itself; an empty grads_out only
/// checks (the unscale then happens inside a fused optimizer step). inv_scale is an f32 0-dim
/// tensor. All tensors live on one device and nothing is read back to the host, so on a device
/// the flag stays device-side. Not differentiable; the outputs' versions are bumped.
void unscale_check_inf_(const tensor_list& grads_in, const tensor_list& grads_out, const Tensor& inv_scale,
                        const Tensor& found_inf);

/// torch.amp's _amp_update_scale_ where the tensors live (no host read): on found_inf != 0,
/// scale *= backoff, growth_tracker = 0 and skipped += 1; otherwise growth_tracker += 1 and,
/// when it reaches growth_interval, scale *= growth (only to a finite value, at most max_scale,
/// never below the current scale) and growth_tracker = 0. All four are f32 0-dim tensors on
/// one device (skipped may be undefined).
void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped, const Tensor& found_inf,
                   double growth_factor, double backoff_factor, int64_t growth_interval, double max_scale);

namespace kernels {
/// Kernel signature of the unscale_check_inf row (registered under dtype f32). Every pair
/// (in[i], out[i]) has equal shapes and strides and is dense, so it may be walked flat; an
/// empty `out` means check only.
using UnscaleCheckInfFn = void (*)(const tensor_list& in, const tensor_list& out, const Tensor& inv_scale,
                                   const Tensor& found_inf);
/// Kernel signature of the update_scale row (registered under dtype f32).
using UpdateScaleFn = void (*)(const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped,
                               const Tensor& found_inf, double growth_factor, double backoff_factor,
                               int64_t growth_interval, double max_scale);
}  // namespace kernels

}  // namespace mpx
