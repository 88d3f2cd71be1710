// RMSprop: options validation and the hand-off to the fused rmsprop_step kernel.
#include "optim/rmsprop.h"

#include <cmath>

#include "ops/dispatch.h"

namespace mpx::optim {

std::map<std::string, double> RMSpropOptions::to_map() const {
  return {{"lr", lr_},
          {"alpha", alpha_},
          {"eps", eps_},
          {"weight_decay", weight_decay_},
          {"momentum", momentum_},
          {"centered", centered_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

void RMSpropOptions::from_map(const std::map<std::string, double>& m) {
  for (const auto& [k, v] : m) {
    if (k == "lr") lr_ = v;
    else if (k == "alpha") alpha_ = v;
    else if (k == "eps") eps_ = v;
    else if (k == "weight_decay") weight_decay_ = v;
    else if (k == "momentum") momentum_ = v;
    else if (k == "centered") centered_ = v != 0;
    else if (k == "maximize") maximize_ = v != 0;
    else MPX_ERROR("RMSprop has no hyper-parameter '", k, "'");
  }
}

void RMSpropOptions::validate() const {
  MPX_CHECK(std::isfinite(lr_) && lr_ >= 0, "RMSprop: invalid learning rate ", lr_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(eps_) && eps_ >= 0, "RMSprop: invalid eps ", eps_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(alpha_) && alpha_ >= 0, "RMSprop: invalid alpha ", alpha_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(momentum_) && momentum_ >= 0, "RMSprop: invalid momentum ", momentum_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, "RMSprop: invalid weight_decay ", weight_decay_,
            "; it must be >= 0");
}

RMSprop::RMSprop(std::vector<Tensor> params, const RMSpropOptions& defaults)
    : RMSprop(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
RMSprop::RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& defaults)
    : Optimizer("RMSprop", std::move(groups), std::make_unique<RMSpropOptions>(defaults)) {}

std::vector<std::string> RMSprop::buffer_names(const OptimizerOptions& options) const {
  // In the kernel's order: square_avg, then momentum_buffer and grad_avg where the options use them.
  const auto& o = static_cast<const RMSpropOptions&>(options);
  std::vector<std::string> names{"square_avg"};
  if (o.momentum() > 0) names.push_back("momentum_buffer");
  if (o.centered()) names.push_back("grad_avg");
  return names;
}

void RMSprop::apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device, DType dt) {
  const auto& o = static_cast<const RMSpropOptions&>(options);
  kernels::RmspropHyper h;
  h.lr = o.lr();
  h.alpha = o.alpha();
  h.eps = o.eps();
  h.weight_decay = o.weight_decay();
  h.momentum = o.momentum();
  h.centered = o.centered();
  h.maximize = o.maximize();
  dispatch::kernel<kernels::RmspropStepFn>(OpId::rmsprop_step, device, dt)(tensors, h);
}

}  // namespace mpx::optim
