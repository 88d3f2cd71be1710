// SGD with momentum, dampening, weight decay and Nesterov momentum (PyTorch's exact update).
#pragma once
#include "optim/optimizer.h"

namespace mpx::optim {

/// Options of SGD; `SGDOptions(0.05).momentum(0.9).nesterov(true)`.
class SGDOptions : public OptimizerCloneableOptions<SGDOptions> {
 public:
  SGDOptions(double lr) : lr_(lr) {}  // NOLINT: LibTorch's SGDOptions(lr)
  MPX_ARG(double, lr);
  MPX_ARG(double, momentum) = 0;
  MPX_ARG(double, dampening) = 0;
  MPX_ARG(double, weight_decay) = 0;
  MPX_ARG(bool, nesterov) = false;
  /// Maximizes the objective (steps along +grad).
  MPX_ARG(bool, maximize) = false;

 public:
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  std::map<std::string, double> to_map() const override;
  void from_map(const std::map<std::string, double>& m) override;
  void validate() const override;
};

/// Stochastic gradient descent. Per parameter, in the compute precision (f32; f64 for f64 params):
///   d = g + wd * p;  buf = d on the first step, else momentum * buf + (1 - dampening) * d;
///   d = nesterov ? d + momentum * buf : buf;  p -= lr * d.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& defaults);
  SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults);

 protected:
  std::vector<std::string> buffer_names(const OptimizerOptions& options) const override;
  void apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device,
             DType compute_dtype) override;
};

}  // namespace mpx::optim
