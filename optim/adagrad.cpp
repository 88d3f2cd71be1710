// Adagrad: options validation and the hand-off to the fused adagrad_step kernel.
#include "optim/adagrad.h"

#include <cmath>

#include "ops/dispatch.h"

namespace mpx::optim {

std::map<std::string, double> AdagradOptions::to_map() const {
  return {{"lr", lr_},
          {"lr_decay", lr_decay_},
          {"weight_decay", weight_decay_},
          {"initial_accumulator_value", initial_accumulator_value_},
          {"eps", eps_},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

void AdagradOptions::from_map(const std::map<std::string, double>& m) {
  for (const auto& [k, v] : m) {
    if (k == "lr") lr_ = v;
    else if (k == "lr_decay") lr_decay_ = v;
    else if (k == "weight_decay") weight_decay_ = v;
    else if (k == "initial_accumulator_value") initial_accumulator_value_ = v;
    else if (k == "eps") eps_ = v;
    else if (k == "maximize") maximize_ = v != 0;
    else MPX_ERROR("Adagrad has no hyper-parameter '", k, "'");
  }
}

void AdagradOptions::validate() const {
  MPX_CHECK(std::isfinite(lr_) && lr_ >= 0, "Adagrad: invalid learning rate ", lr_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(lr_decay_) && lr_decay_ >= 0, "Adagrad: invalid lr_decay ", lr_decay_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, "Adagrad: invalid weight_decay ", weight_decay_,
            "; it must be >= 0");
  MPX_CHECK(std::isfinite(initial_accumulator_value_) && initial_accumulator_value_ >= 0,
            "Adagrad: invalid initial_accumulator_value ", initial_accumulator_value_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(eps_) && eps_ >= 0, "Adagrad: invalid eps ", eps_, "; it must be >= 0");
}

Adagrad::Adagrad(std::vector<Tensor> params, const AdagradOptions& defaults)
    : Adagrad(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
Adagrad::Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& defaults)
    : Optimizer("Adagrad", std::move(groups), std::make_unique<AdagradOptions>(defaults)) {}

std::vector<std::string> Adagrad::buffer_names(const OptimizerOptions&) const { return {"sum"}; }

void Adagrad::apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device, DType dt) {
  const auto& o = static_cast<const AdagradOptions&>(options);
  kernels::AdagradHyper h;
  h.lr = o.lr();
  h.lr_decay = o.lr_decay();
  h.weight_decay = o.weight_decay();
  h.eps = o.eps();
  h.initial_accumulator_value = o.initial_accumulator_value();
  h.maximize = o.maximize();
  dispatch::kernel<kernels::AdagradStepFn>(OpId::adagrad_step, device, dt)(tensors, h);
}

}  // namespace mpx::optim
