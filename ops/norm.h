// Normalization ops: batch_norm (train/eval, running statistics), layer_norm, group_norm.
#pragma once
#include "core/tensor.h"

namespace mpx {

/// Batch norm over dim 1 of [N, C, *]. In training, normalizes with batch statistics and
/// (when given) updates running_mean/running_var in place with `momentum` (unbiased var);
/// in eval, uses the running statistics. weight/bias optional (affine=false).
/// Statistics are computed in f32 (or f64 for f64 input); the output has x's dtype.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
/// relu(batch_norm(x) + z) in one pass, the end of every ResNet block (cuDNN's fused
/// batch-norm + add + activation on NHWC f16 activations; one rounding of the result on every
/// device). z has x's shape, dtype and device; otherwise (broadcasting, a dtype the add would
/// promote) the composite runs. The statistics and running updates are batch_norm's.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& z, const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                           double eps = 1e-5);
/// relu(batch_norm(x)) in one pass, the conv, batch norm, ReLU of every ResNet block and stem
/// (cuDNN's fused batch-norm + activation on NHWC activations; one rounding of the result on
/// every device). Statistics, running updates and errors are batch_norm's.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
/// Layer norm over the trailing dims given by normalized_shape.
Tensor layer_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
/// RMS norm over the trailing dims given by normalized_shape: x / sqrt(mean(x^2) + eps) * weight
/// (PyTorch's torch.nn.functional.rms_norm; eps defaults to the dtype's machine epsilon there,
/// here when `eps` is negative). Statistics in f32; autocast runs it in f32, as layer_norm.
Tensor rms_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight = {}, double eps = -1.0);
/// Group norm of [N, C, *] with C divisible by num_groups.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

}  // namespace mpx

namespace mpx::kernels {
/// Row norms (OpIds layer_norm_fwd, rms_norm_fwd) over x [rows, D] contiguous: y (x's dtype,
/// contiguous) = (x - mean) * rstd * w + b, where the RMS form has no mean (and no b). mean (layer
/// norm only; undefined for RMS) and rstd are [rows] in the statistics dtype (f32, f64 for f64);
/// w and b are [D] in any floating dtype or undefined.
using RowNormFn = void (*)(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                           const Tensor& w, const Tensor& b, double eps);
/// Their backward: dx (x's dtype), dw and db ([D], f32; f64 for f64; each may be undefined,
/// db always for RMS) from dy [rows, D] contiguous and the forward's statistics.
using RowNormBackwardFn = void (*)(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy,
                                   const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& w);
/// The running statistics a training forward updates in place, PyTorch's rule with the unbiased
/// batch variance: r = (1 - momentum) r + momentum s. [C], contiguous, in the statistics dtype;
/// undefined (both): nothing to update.
struct BnRunning {
  Tensor mean, var;
  double momentum = 0.1;
};
/// Batch norm forward over x contiguous [N, C, S] -> y (x's dtype); x and y may instead both
/// be channels-last [N, C, H, W] (NHWC-dense). mean/var/invstd are [C]
/// in the statistics dtype (f32, f64 for f64 input); weight/bias are [C] in that dtype or
/// undefined. training: computes the batch mean from x and writes it (var is scratch the kernel
/// may leave unwritten), and updates `running` in place when it is given, as cuDNN does in the
/// same call; eval: reads mean/var (the running statistics). invstd = 1/sqrt(var + eps) is
/// written in both. Returns what the backward needs beyond the statistics (cuDNN's reserve space
/// for its persistent NHWC kernels), or an undefined tensor.
using BatchNormFn = Tensor (*)(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd,
                               const Tensor& x, const Tensor& weight, const Tensor& bias, bool training, double eps,
                               const BnRunning& running);
/// Batch norm backward: any of gx (x's dtype, [N, C, S]), gweight, gbias ([C], statistics
/// dtype) may be undefined when not needed. gy and x contiguous [N, C, S] (or channels-last
/// [N, C, H, W], as in the forward); `reserve` is what the forward returned.
using BatchNormBackwardFn = void (*)(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy,
                                     const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                                     const Tensor& reserve, bool training);
/// Fused y = max(bn(x) + z, 0) (one rounding): x, z, y share shape, dtype and layout; the rest
/// as BatchNormFn, including the returned reserve.
using BatchNormAddReluFn = Tensor (*)(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd,
                                      const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias,
                                      bool training, double eps, const BnRunning& running);
/// Its backward: gr = gy where y > 0, else 0; gz = gr; gx, gweight, gbias are batch norm's
/// backward of gr. Any of gx, gz, gweight, gbias may be undefined; `reserve` is the forward's
/// (cuDNN's fused backward also takes the bias).
using BatchNormAddReluBackwardFn = void (*)(const Tensor& gx, const Tensor& gz, const Tensor& gweight,
                                            const Tensor& gbias, const Tensor& gy, const Tensor& x, const Tensor& y,
                                            const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                                            const Tensor& bias, const Tensor& reserve, bool training);
/// Fused y = max(bn(x), 0) (one rounding): the arguments and the returned reserve as BatchNormFn.
using BatchNormReluFn = BatchNormFn;
/// Its backward: gx, gweight, gbias are batch norm's backward of gy where y > 0 (else 0); any
/// may be undefined. y, bias and reserve as in BatchNormAddReluBackwardFn.
using BatchNormReluBackwardFn = void (*)(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy,
                                         const Tensor& x, const Tensor& y, const Tensor& mean, const Tensor& invstd,
                                         const Tensor& weight, const Tensor& bias, const Tensor& reserve,
                                         bool training);
}  // namespace mpx::kernels
