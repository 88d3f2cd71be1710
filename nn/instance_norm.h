// Instance norm (PyTorch's names): F::instance_norm and InstanceNorm1d/2d/3d, per-sample statistics of each channel.
#pragma once
#include <optional>
#include <ostream>
#include <string>

#include "core/arg.h"
#include "nn/module.h"
#include "nn/modules.h"

namespace mpx::nn {

/// InstanceNorm1d/2d/3d's options; PyTorch's defaults (no affine parameters, no running statistics).
struct InstanceNormOptions {
  InstanceNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  MPX_ARG(int64_t, num_features);
  MPX_ARG(double, eps) = 1e-5;
  /// None leaves the running statistics as they are (PyTorch passes momentum 0 then).
  MPX_ARG(std::optional<double>, momentum) = 0.1;
  MPX_ARG(bool, affine) = false;
  MPX_ARG(bool, track_running_stats) = false;
};

namespace functional {
struct InstanceNormFuncOptions {
  MPX_ARG(Tensor, running_mean) = {};
  MPX_ARG(Tensor, running_var) = {};
  MPX_ARG(Tensor, weight) = {};
  MPX_ARG(Tensor, bias) = {};
  /// False: normalize with the running statistics (eval with track_running_stats).
  MPX_ARG(bool, use_input_stats) = true;
  MPX_ARG(double, momentum) = 0.1;
  MPX_ARG(double, eps) = 1e-5;
};
/// Normalizes each (sample, channel) of [N, C, *] over its own spatial positions, as batch norm of [1, N C, *]
/// (one fused op; statistics in f32 for f16/bf16 input, the output in x's dtype). With running statistics and
/// use_input_stats, they move towards the batch's mean of the per-instance statistics (unbiased variance), as
/// PyTorch's. Differentiable in x, weight and bias.
Tensor instance_norm(const Tensor& x, const InstanceNormFuncOptions& options = {});
}  // namespace functional

/// The instance norm layers: InstanceNorm1d takes [N, C, L] or unbatched [C, L], 2d [N, C, H, W] or [C, H, W], 3d
/// [N, C, D, H, W] or [C, D, H, W]. Parameters weight/bias (affine) and buffers running_mean, running_var and
/// num_batches_tracked (track_running_stats) by PyTorch's names, so state dicts load both ways.
class InstanceNormImplBase : public NormBase<InstanceNormOptions> {
 public:
  InstanceNormImplBase(const InstanceNormOptions& options, int64_t spatial_dims)
      : NormBase(options, "InstanceNorm"), spatial_dims_(spatial_dims) {}
  Tensor forward(const Tensor& x);

 private:
  int64_t spatial_dims_;
};

#define MPX_INSTANCE_NORM(D)                                                                                      \
  class InstanceNorm##D##dImpl : public InstanceNormImplBase {                                                   \
   public:                                                                                                       \
    explicit InstanceNorm##D##dImpl(const InstanceNormOptions& options) : InstanceNormImplBase(options, D) {}    \
    std::string name() const override { return "InstanceNorm" #D "d"; }                                          \
  };                                                                                                             \
  MPX_MODULE(InstanceNorm##D##d);
MPX_INSTANCE_NORM(1)
MPX_INSTANCE_NORM(2)
MPX_INSTANCE_NORM(3)
#undef MPX_INSTANCE_NORM

}  // namespace mpx::nn
