// nn::utils: gradient clipping written in ops (one host sync for the total norm).
#include "nn/utils.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx::nn::utils {

Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type, bool error_if_nonfinite) {
  MPX_CHECK(norm_type > 0.0, "get_total_norm: norm_type must be positive (or infinity), got ", norm_type);
  NoGradGuard ng;
  std::vector<Tensor> ts;
  for (const auto& t : tensors)
    if (t.defined()) ts.push_back(t);
  if (ts.empty()) return zeros({}, TensorOptions(kFloat64));
  const bool inf_norm = std::isinf(norm_type);
  // Per-tensor norms stay on the device; one stack at the end.
  const Device dev = ts.front().device();
  tensor_list norms;
  norms.reserve(ts.size());
  for (const auto& t0 : ts) {
    const DType acc = t0.dtype() == kFloat64 ? kFloat64 : kFloat32;
    Tensor g = t0.to(acc).to(dev);
    Tensor n;
    if (g.numel() == 0) n = zeros({}, TensorOptions(acc).device(dev));
    else if (inf_norm) n = mpx::max(mpx::abs(g));
    else if (norm_type == 2.0) n = mpx::norm(g);
    else if (norm_type == 1.0) n = mpx::sum(mpx::abs(g));
    else n = mpx::pow(mpx::sum(mpx::pow(mpx::abs(g), norm_type)), 1.0 / norm_type);
    norms.push_back(n.to(kFloat64));
  }
  Tensor all = mpx::stack(norms);
  Tensor total;
  if (inf_norm) total = mpx::max(all);
  else if (norm_type == 2.0) total = mpx::norm(all);
  else if (norm_type == 1.0) total = mpx::sum(all);
  else total = mpx::pow(mpx::sum(mpx::pow(all, norm_type)), 1.0 / norm_type);
  if (error_if_nonfinite) {
    const double v = total.item<double>();
    MPX_CHECK(std::isfinite(v), "get_total_norm: the total norm of order ", norm_type, " is non-finite (", v, ")");
  }
  return total;
}

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  MPX_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be positive (or infinity), got ", norm_type);
  NoGradGuard ng;
  std::vector<Tensor> grads;
  for (const auto& p : parameters)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  const double total = get_total_norm(grads, norm_type).item<double>();
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

Tensor parameters_to_vector(const std::vector<Tensor>& parameters) {
  MPX_CHECK(!parameters.empty(), "parameters_to_vector: no parameters");
  tensor_list flat;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& p = parameters[i];
    MPX_CHECK(p.defined(), "parameters_to_vector: parameter ", i, " is undefined");
    MPX_CHECK(p.device() == parameters[0].device(), "parameters_to_vector: parameter ", i, " is on ",
              p.device().str(), " but parameter 0 on ", parameters[0].device().str(), "; move them to one device");
    flat.push_back(p.reshape({-1}));
  }
  return mpx::cat(flat, 0);
}

void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters) {
  MPX_CHECK(vec.defined() && vec.dim() == 1, "vector_to_parameters: expected a 1-d vector, got ",
            vec.defined() ? shape_str(vec.sizes()) : std::string("an undefined tensor"));
  int64_t total = 0;
  for (const Tensor& p : parameters) total += p.defined() ? p.numel() : 0;
  MPX_CHECK(vec.numel() == total, "vector_to_parameters: the vector has ", vec.numel(), " elements but the parameters ",
            "hold ", total);
  NoGradGuard ng;
  int64_t at = 0;
  for (const Tensor& p0 : parameters) {
    if (!p0.defined()) continue;
    Tensor p = p0;
    p.copy_(vec.narrow(0, at, p.numel()).reshape(p.sizes()));
    at += p.numel();
  }
}

}  // namespace mpx::nn::utils
