// LAMB (layer-wise adaptive moments, You et al. 2019) with apex FusedLAMB's options and update.
#pragma once
#include "optim/adam.h"

namespace mpx::optim {

/// Options of LAMB with apex's FusedLAMB defaults; `LAMBOptions(2e-3).weight_decay(0.01)`.
class LAMBOptions : public OptimizerCloneableOptions<LAMBOptions> {
 public:
  LAMBOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: as the other options, LAMBOptions(lr)
  MPX_ARG(double, lr);
  MPX_ARG(Betas, betas) = Betas(0.9, 0.999);
  MPX_ARG(double, eps) = 1e-6;
  MPX_ARG(double, weight_decay) = 0.01;
  /// Gradients are divided by max(1, global norm / max_grad_norm) first (the norm over every
  /// group's gradients, unscaled); 0 turns the clipping off.
  MPX_ARG(double, max_grad_norm) = 1.0;
  MPX_ARG(bool, bias_correction) = true;
  /// m = b1 m + (1 - b1) g; false: m = b1 m + g.
  MPX_ARG(bool, grad_averaging) = true;
  /// Decoupled weight decay added to the update (true) or L2 added to the gradient (false).
  MPX_ARG(bool, adam_w_mode) = true;
  /// Apply the trust ratio even to parameters without weight decay (NVIDIA's NVLAMB).
  MPX_ARG(bool, use_nvlamb) = false;

 public:
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  std::map<std::string, double> to_map() const override;
  void from_map(const std::map<std::string, double>& m) override;
  void validate() const override;
};

/// LAMB as apex's FusedLAMB computes it (kernels::LambHyper has the formulas): Adam moments on
/// the clipped gradient, then per tensor the step lr * |p| / |update| along the update. State
/// buffers: exp_avg, exp_avg_sq. Parameter groups are the usual way to exempt biases and norms
/// from weight decay (which also exempts them from the trust ratio unless use_nvlamb).
class LAMB : public Optimizer {
 public:
  LAMB(std::vector<Tensor> params, const LAMBOptions& defaults = {});
  LAMB(std::vector<ParamGroup> groups, const LAMBOptions& defaults = {});

 protected:
  std::vector<std::string> buffer_names(const OptimizerOptions& options) const override;
  void apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device,
             DType compute_dtype) override;
  void begin_step() override;

 private:
  Tensor global_grad_norm_;  // this step's, f64 0-dim on the first gradient's device
};

}  // namespace mpx::optim
