// Adagrad with a learning-rate decay and torch.optim.Adagrad's single-tensor update.
#pragma once
#include "optim/optimizer.h"

namespace mpx::optim {

/// Options of Adagrad; `AdagradOptions(0.1).lr_decay(1e-4).initial_accumulator_value(0.1)`.
class AdagradOptions : public OptimizerCloneableOptions<AdagradOptions> {
 public:
  AdagradOptions(double lr = 1e-2) : lr_(lr) {}  // NOLINT: LibTorch's AdagradOptions(lr)
  MPX_ARG(double, lr);
  /// The rate at step t is lr / (1 + (t - 1) * lr_decay).
  MPX_ARG(double, lr_decay) = 0;
  MPX_ARG(double, weight_decay) = 0;
  /// What the sum of squared gradients starts from.
  MPX_ARG(double, initial_accumulator_value) = 0;
  MPX_ARG(double, eps) = 1e-10;
  MPX_ARG(bool, maximize) = false;

 public:
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  std::map<std::string, double> to_map() const override;
  void from_map(const std::map<std::string, double>& m) override;
  void validate() const override;
};

/// Adagrad. Per parameter, in the compute precision (f32; f64 for f64 params), with t the step:
///   g += wd * p;  sum += g^2;  p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps).
/// State buffer (PyTorch's name): sum, starting at initial_accumulator_value.
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, const AdagradOptions& defaults = {});
  Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& defaults = {});

 protected:
  std::vector<std::string> buffer_names(const OptimizerOptions& options) const override;
  void apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device,
             DType compute_dtype) override;
};

}  // namespace mpx::optim
