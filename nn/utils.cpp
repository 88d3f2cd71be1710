// nn::utils: gradient clipping written in ops (one host sync for the total norm).
#include "nn/utils.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx::nn::utils {

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  MPX_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be positive (or infinity), got ", norm_type);
  NoGradGuard ng;
  std::vector<Tensor> grads;
  for (const auto& p : parameters)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;

  const bool inf_norm = std::isinf(norm_type);
  // Per-tensor norms stay on the device; one stack and one item() at the end.
  const Device dev = grads.front().device();
  tensor_list norms;
  norms.reserve(grads.size());
  for (const auto& g0 : grads) {
    const DType acc = g0.dtype() == kFloat64 ? kFloat64 : kFloat32;
    Tensor g = g0.to(acc).to(dev);
    Tensor n;
    if (g.numel() == 0) n = zeros({}, TensorOptions(acc).device(dev));
    else if (inf_norm) n = mpx::max(mpx::abs(g));
    else if (norm_type == 2.0) n = mpx::norm(g);
    else if (norm_type == 1.0) n = mpx::sum(mpx::abs(g));
    else n = mpx::pow(mpx::sum(mpx::pow(mpx::abs(g), norm_type)), 1.0 / norm_type);
    norms.push_back(n.to(kFloat64));
  }
  Tensor all = mpx::stack(norms);
  Tensor total_t;
  if (inf_norm) total_t = mpx::max(all);
  else if (norm_type == 2.0) total_t = mpx::norm(all);
  else if (norm_type == 1.0) total_t = mpx::sum(all);
  else total_t = mpx::pow(mpx::sum(mpx::pow(all, norm_type)), 1.0 / norm_type);
  const double total = total_t.item<double>();

  MPX_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
            " of the gradients is non-finite (", total, "), so it cannot be clipped; pass error_if_nonfinite=false "
            "to scale them anyway");
  const double coef = max_norm / (total + 1e-6);
  // PyTorch multiplies by min(coef, 1): a no-op when coef >= 1, and NaN-propagating otherwise.
  if (!(coef >= 1.0))
    for (auto& g : grads) {
      Tensor h = g;
      h.mul_(coef);
    }
  return total;
}
double clip_grad_norm_(std::initializer_list<Tensor> parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>(parameters), max_norm, norm_type, error_if_nonfinite);
}
double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  MPX_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be non-negative, got ", clip_value);
  NoGradGuard ng;
  for (const auto& p : parameters) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad();
    g.clamp_(-clip_value, clip_value);
  }
}
void clip_grad_value_(std::initializer_list<Tensor> parameters, double clip_value) {
  clip_grad_value_(std::vector<Tensor>(parameters), clip_value);
}
void clip_grad_value_(const Tensor& parameter, double clip_value) {
  clip_grad_value_(std::vector<Tensor>{parameter}, clip_value);
}

}  // namespace mpx::nn::utils
