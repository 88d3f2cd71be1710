// SGD: options validation and the hand-off to the fused sgd_step kernel.
#include "optim/sgd.h"

#include <cmath>

#include "ops/dispatch.h"

namespace mpx::optim {

std::map<std::string, double> SGDOptions::to_map() const {
  return {{"lr", lr_},
          {"momentum", momentum_},
          {"dampening", dampening_},
          {"weight_decay", weight_decay_},
          {"nesterov", nesterov_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

void SGDOptions::from_map(const std::map<std::string, double>& m) {
  for (const auto& [k, v] : m) {
    if (k == "lr") lr_ = v;
    else if (k == "momentum") momentum_ = v;
    else if (k == "dampening") dampening_ = v;
    else if (k == "weight_decay") weight_decay_ = v;
    else if (k == "nesterov") nesterov_ = v != 0;
    else if (k == "maximize") maximize_ = v != 0;
    else MPX_ERROR("SGD has no hyper-parameter '", k, "'");
  }
}

void SGDOptions::validate() const {
  MPX_CHECK(std::isfinite(lr_) && lr_ >= 0, "SGD: invalid learning rate ", lr_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(momentum_) && momentum_ >= 0, "SGD: invalid momentum ", momentum_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(dampening_), "SGD: invalid dampening ", dampening_);
  MPX_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, "SGD: invalid weight_decay ", weight_decay_,
            "; it must be >= 0");
  MPX_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0), "SGD: Nesterov momentum requires a momentum > 0 and "
            "zero dampening (got momentum ", momentum_, ", dampening ", dampening_, "); set .momentum(0.9).dampening(0) "
            "or turn nesterov off");
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& defaults) : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults)
    : Optimizer("SGD", std::move(groups), std::make_unique<SGDOptions>(defaults)) {}

std::vector<std::string> SGD::buffer_names(const OptimizerOptions& options) const {
  const auto& o = static_cast<const SGDOptions&>(options);
  if (o.momentum() != 0) return {"momentum_buffer"};
  return {};
}

void SGD::apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device, DType dt) {
  const auto& o = static_cast<const SGDOptions&>(options);
  kernels::SgdHyper h;
  h.lr = o.lr();
  h.momentum = o.momentum();
  h.dampening = o.dampening();
  h.weight_decay = o.weight_decay();
  h.nesterov = o.nesterov();
  h.maximize = o.maximize();
  dispatch::kernel<kernels::SgdStepFn>(OpId::sgd_step, device, dt)(tensors, h);
}

}  // namespace mpx::optim
