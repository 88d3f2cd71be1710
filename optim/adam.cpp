// Adam and AdamW: options validation and the hand-off to the fused adam_step kernel.
#include "optim/adam.h"

#include <cmath>

#include "ops/dispatch.h"

namespace mpx::optim {

template <bool D>
std::map<std::string, double> AdamOptionsT<D>::to_map() const {
  return {{"lr", lr_},
          {"beta1", std::get<0>(betas_)},
          {"beta2", std::get<1>(betas_)},
          {"eps", eps_},
          {"weight_decay", weight_decay_},
          {"amsgrad", amsgrad_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

template <bool D>
void AdamOptionsT<D>::from_map(const std::map<std::string, double>& m) {
  for (const auto& [k, v] : m) {
    if (k == "lr") lr_ = v;
    else if (k == "beta1") std::get<0>(betas_) = v;
    else if (k == "beta2") std::get<1>(betas_) = v;
    else if (k == "eps") eps_ = v;
    else if (k == "weight_decay") weight_decay_ = v;
    else if (k == "amsgrad") amsgrad_ = v != 0;
    else if (k == "maximize") maximize_ = v != 0;
    else MPX_ERROR(D ? "AdamW" : "Adam", " has no hyper-parameter '", k, "'");
  }
}

template <bool D>
void AdamOptionsT<D>::validate() const {
  const char* n = D ? "AdamW" : "Adam";
  const double b1 = std::get<0>(betas_), b2 = std::get<1>(betas_);
  MPX_CHECK(std::isfinite(lr_) && lr_ >= 0, n, ": invalid learning rate ", lr_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(eps_) && eps_ >= 0, n, ": invalid eps ", eps_, "; it must be >= 0");
  MPX_CHECK(b1 >= 0 && b1 < 1, n, ": invalid beta1 ", b1, "; betas must lie in [0, 1)");
  MPX_CHECK(b2 >= 0 && b2 < 1, n, ": invalid beta2 ", b2, "; betas must lie in [0, 1)");
  MPX_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, n, ": invalid weight_decay ", weight_decay_,
            "; it must be >= 0");
}

template class AdamOptionsT<false>;
template class AdamOptionsT<true>;

namespace {
std::vector<std::string> adam_buffers(bool amsgrad) {
  if (amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}
template <bool D>
void run_adam(const AdamOptionsT<D>& o, const kernels::StepTensors& ts, Device device, DType dt) {
  kernels::AdamHyper h;
  h.lr = o.lr();
  h.beta1 = std::get<0>(o.betas());
  h.beta2 = std::get<1>(o.betas());
  h.eps = o.eps();
  h.weight_decay = o.weight_decay();
  h.decoupled_weight_decay = D;
  h.amsgrad = o.amsgrad();
  h.maximize = o.maximize();
  // The kernel indexes buffers by position: exp_avg, exp_avg_sq, then max_exp_avg_sq.
  dispatch::kernel<kernels::AdamStepFn>(OpId::adam_step, device, dt)(ts, h);
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& defaults)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : Optimizer("Adam", std::move(groups), std::make_unique<AdamOptions>(defaults)) {}
std::vector<std::string> Adam::buffer_names(const OptimizerOptions& o) const {
  return adam_buffers(static_cast<const AdamOptions&>(o).amsgrad());
}
void Adam::apply(const OptimizerOptions& o, const kernels::StepTensors& ts, Device device, DType dt) {
  run_adam(static_cast<const AdamOptions&>(o), ts, device, dt);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& defaults)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults)
    : Optimizer("AdamW", std::move(groups), std::make_unique<AdamWOptions>(defaults)) {}
std::vector<std::string> AdamW::buffer_names(const OptimizerOptions& o) const {
  return adam_buffers(static_cast<const AdamWOptions&>(o).amsgrad());
}
void AdamW::apply(const OptimizerOptions& o, const kernels::StepTensors& ts, Device device, DType dt) {
  run_adam(static_cast<const AdamWOptions&>(o), ts, device, dt);
}

}  // namespace mpx::optim
