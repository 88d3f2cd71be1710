// Adam (L2 weight decay) and AdamW (decoupled weight decay) with torch 1.13's single-tensor update.
#pragma once
#include <tuple>

#include "optim/optimizer.h"

namespace mpx::optim {

/// (beta1, beta2) of Adam's moving averages.
using Betas = std::tuple<double, double>;

/// Options shared by Adam and AdamW; `Decoupled` only changes the defaults and the name.
template <bool Decoupled>
class AdamOptionsT : public OptimizerCloneableOptions<AdamOptionsT<Decoupled>> {
 public:
  AdamOptionsT(double lr = 1e-3) : lr_(lr) {}  // NOLINT: LibTorch's AdamOptions(lr)
  MPX_ARG(double, lr);
  MPX_ARG(Betas, betas) = Betas(0.9, 0.999);
  MPX_ARG(double, eps) = 1e-8;
  /// Adam: L2 penalty added to the gradient; AdamW: decoupled decay p *= 1 - lr * wd (default 1e-2).
  MPX_ARG(double, weight_decay) = Decoupled ? 1e-2 : 0.0;
  MPX_ARG(bool, amsgrad) = false;
  MPX_ARG(bool, maximize) = false;

 public:
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  std::map<std::string, double> to_map() const override;
  void from_map(const std::map<std::string, double>& m) override;
  void validate() const override;
};
using AdamOptions = AdamOptionsT<false>;
using AdamWOptions = AdamOptionsT<true>;
extern template class AdamOptionsT<false>;
extern template class AdamOptionsT<true>;

/// Adam. Per parameter, in the compute precision (f32; f64 for f64 params), with t the step:
///   g += wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  (amsgrad: v' = max(v', v))
///   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& defaults = {});
  Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults = {});

 protected:
  std::vector<std::string> buffer_names(const OptimizerOptions& options) const override;
  void apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device,
             DType compute_dtype) override;
};

/// AdamW: Adam with decoupled weight decay (p *= 1 - lr * wd before the Adam update).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& defaults = {});
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults = {});

 protected:
  std::vector<std::string> buffer_names(const OptimizerOptions& options) const override;
  void apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device,
             DType compute_dtype) override;
};

}  // namespace mpx::optim
