// RMSprop (plain, centered, with momentum) with torch.optim.RMSprop's single-tensor update.
#pragma once
#include "optim/optimizer.h"

namespace mpx::optim {

/// Options of RMSprop; `RMSpropOptions(1e-3).momentum(0.9).centered(true)`.
class RMSpropOptions : public OptimizerCloneableOptions<RMSpropOptions> {
 public:
  RMSpropOptions(double lr = 1e-2) : lr_(lr) {}  // NOLINT: LibTorch's RMSpropOptions(lr)
  MPX_ARG(double, lr);
  /// Smoothing constant of the running average of squared gradients.
  MPX_ARG(double, alpha) = 0.99;
  MPX_ARG(double, eps) = 1e-8;
  MPX_ARG(double, weight_decay) = 0;
  MPX_ARG(double, momentum) = 0;
  /// Normalizes by the estimated variance (square_avg - grad_avg^2) instead of the raw second moment.
  MPX_ARG(bool, centered) = false;
  MPX_ARG(bool, maximize) = false;

 public:
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  std::map<std::string, double> to_map() const override;
  void from_map(const std::map<std::string, double>& m) override;
  void validate() const override;
};

/// RMSprop. Per parameter, in the compute precision (f32; f64 for f64 params):
///   g += wd * p;  v = alpha v + (1 - alpha) g^2;  (centered: a = alpha a + (1 - alpha) g, v' = v - a^2)
///   d = g / (sqrt(v') + eps);  (momentum: buf = momentum buf + d, d = buf);  p -= lr * d.
/// State buffers (PyTorch's names): square_avg, momentum_buffer (momentum > 0), grad_avg (centered).
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, const RMSpropOptions& defaults = {});
  RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& defaults = {});

 protected:
  std::vector<std::string> buffer_names(const OptimizerOptions& options) const override;
  void apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device,
             DType compute_dtype) override;
};

}  // namespace mpx::optim
