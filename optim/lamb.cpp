// LAMB: options validation, the global gradient norm over every group, and the hand-off to the fused lamb_step kernel.
#include "optim/lamb.h"

#include <cmath>

#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx::optim {

std::map<std::string, double> LAMBOptions::to_map() const {
  return {{"lr", lr_},
          {"beta1", std::get<0>(betas_)},
          {"beta2", std::get<1>(betas_)},
          {"eps", eps_},
          {"weight_decay", weight_decay_},
          {"max_grad_norm", max_grad_norm_},
          {"bias_correction", bias_correction_ ? 1.0 : 0.0},
          {"grad_averaging", grad_averaging_ ? 1.0 : 0.0},
          {"adam_w_mode", adam_w_mode_ ? 1.0 : 0.0},
          {"use_nvlamb", use_nvlamb_ ? 1.0 : 0.0}};
}

void LAMBOptions::from_map(const std::map<std::string, double>& m) {
  for (const auto& [k, v] : m) {
    if (k == "lr") lr_ = v;
    else if (k == "beta1") std::get<0>(betas_) = v;
    else if (k == "beta2") std::get<1>(betas_) = v;
    else if (k == "eps") eps_ = v;
    else if (k == "weight_decay") weight_decay_ = v;
    else if (k == "max_grad_norm") max_grad_norm_ = v;
    else if (k == "bias_correction") bias_correction_ = v != 0;
    else if (k == "grad_averaging") grad_averaging_ = v != 0;
    else if (k == "adam_w_mode") adam_w_mode_ = v != 0;
    else if (k == "use_nvlamb") use_nvlamb_ = v != 0;
    else MPX_ERROR("LAMB has no hyper-parameter '", k, "'");
  }
}

void LAMBOptions::validate() const {
  const double b1 = std::get<0>(betas_), b2 = std::get<1>(betas_);
  MPX_CHECK(std::isfinite(lr_) && lr_ >= 0, "LAMB: invalid learning rate ", lr_, "; it must be >= 0");
  MPX_CHECK(std::isfinite(eps_) && eps_ >= 0, "LAMB: invalid eps ", eps_, "; it must be >= 0");
  MPX_CHECK(b1 >= 0 && b1 < 1, "LAMB: invalid beta1 ", b1, "; betas must lie in [0, 1)");
  MPX_CHECK(b2 >= 0 && b2 < 1, "LAMB: invalid beta2 ", b2, "; betas must lie in [0, 1)");
  MPX_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, "LAMB: invalid weight_decay ", weight_decay_,
            "; it must be >= 0");
  MPX_CHECK(std::isfinite(max_grad_norm_) && max_grad_norm_ >= 0, "LAMB: invalid max_grad_norm ", max_grad_norm_,
            "; it must be >= 0 (0 turns the clipping off)");
}

LAMB::LAMB(std::vector<Tensor> params, const LAMBOptions& defaults)
    : LAMB(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
LAMB::LAMB(std::vector<ParamGroup> groups, const LAMBOptions& defaults)
    : Optimizer("LAMB", std::move(groups), std::make_unique<LAMBOptions>(defaults)) {}

std::vector<std::string> LAMB::buffer_names(const OptimizerOptions&) const { return {"exp_avg", "exp_avg_sq"}; }

void LAMB::begin_step() {
  // apex: one norm over every group's gradients, before any group steps. It stays on the
  // device (no host read); under a fused unscale the gradients are still scaled, and the norm
  // is unscaled here.
  tensor_list norms;
  Device dev = Device(DeviceType::kCPU);
  for (const auto& g : param_groups())
    for (const Tensor& p : g.params()) {
      const Tensor grad = step_gradient(p);
      if (!grad.defined()) continue;
      if (norms.empty()) dev = grad.device();
      // f32 accumulation (f64 for f64 gradients), combined in f64.
      const DType acc = grad.dtype() == kFloat64 ? kFloat64 : kFloat32;
      const Tensor n = grad.numel() == 0 ? zeros({}, TensorOptions(kFloat64).device(grad.device()))
                                         : mpx::norm(grad.to(acc)).to(kFloat64);
      norms.push_back(n.device() == dev ? n : n.to(dev));
    }
  if (norms.empty()) {
    global_grad_norm_ = Tensor();
    return;
  }
  Tensor total = mpx::norm(mpx::stack(norms));
  if (amp_inv_scale().defined()) total = total * amp_inv_scale().to(dev).to(kFloat64);
  global_grad_norm_ = total.contiguous();
}

void LAMB::apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device, DType dt) {
  const auto& o = static_cast<const LAMBOptions&>(options);
  kernels::LambHyper h;
  h.lr = o.lr();
  h.beta1 = std::get<0>(o.betas());
  h.beta2 = std::get<1>(o.betas());
  h.eps = o.eps();
  h.weight_decay = o.weight_decay();
  h.max_grad_norm = o.max_grad_norm();
  h.bias_correction = o.bias_correction();
  h.grad_averaging = o.grad_averaging();
  h.adam_w_mode = o.adam_w_mode();
  h.use_nvlamb = o.use_nvlamb();
  h.global_grad_norm = global_grad_norm_.device() == device ? global_grad_norm_ : global_grad_norm_.to(device);
  dispatch::kernel<kernels::LambStepFn>(OpId::lamb_step, device, dt)(tensors, h);
}

}  // namespace mpx::optim
