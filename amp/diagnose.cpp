// amp's overflow diagnosis: the inf/NaN check of gradients without unscaling, and where an overflow came from.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "amp/amp_internal.h"
#include "autograd/grad_mode.h"
#include "ops/amp.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx::amp::detail {
namespace {

bool finite_all(const Tensor& t) {
  NoGradGuard ng;
  // inf * 0 and NaN * 0 are NaN: one reduction tells whether anything is non-finite.
  return std::isfinite(sum(t.detach().to(kFloat32) * 0.0).item_double());
}

}  // namespace

// The inf/NaN flag of an optimizer's gradients without unscaling them (a static unit scale has
// nothing to unscale): one fused read pass per device, the flag left where the gradients are.
Tensor check_finite(const optim::Optimizer& opt) {
  NoGradGuard ng;
  std::vector<std::pair<Device, tensor_list>> by_device;
  for (const auto& p : opt.parameters()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& d) { return d.first == g.device(); });
    if (it == by_device.end()) by_device.push_back({g.device(), {g}});
    else it->second.push_back(g);
  }
  if (by_device.empty()) return Tensor();
  Tensor found;
  for (auto& [dev, grads] : by_device) {
    Tensor f = zeros({}, TensorOptions(kFloat32).device(dev));
    unscale_check_inf_(grads, {}, ones({}, TensorOptions(kFloat32).device(dev)), f);
    found = found.defined() ? found + f.to(found.device()) : f;
  }
  return found;
}

// Where the first non-finite value of an overflowed iteration is: the loss itself, or the first
// parameter (in model order, then optimizer order) whose gradient is non-finite.
std::string diagnose_overflow(int loss_id, double scale_at_overflow, double new_scale, bool dynamic,
                              const Tensor& loss, const std::vector<optim::Optimizer*>& optimizers,
                              const std::vector<std::shared_ptr<nn::Module>>& models) {
  std::ostringstream os;
  os << "amp diagnose: loss scaler " << loss_id << " overflowed at " << (dynamic ? "" : "its static ") << "loss scale "
     << num(scale_at_overflow) << ": ";
  if (!finite_all(loss)) {
    os << "the loss itself is non-finite (" << loss.detach().to(kFloat32).item_double()
       << "); the forward pass produced inf/NaN, which no loss scale can fix";
    return os.str();
  }
  auto grad_of = [](optim::Optimizer& o, const Tensor& p) {
    const Tensor& target = o.master(p);
    return target.grad().defined() ? target.grad() : p.grad();
  };
  std::string where;
  for (size_t mi = 0; mi < models.size() && where.empty(); ++mi)
    for (const auto& [name, p] : models[mi]->named_parameters()) {
      optim::Optimizer* owner = nullptr;
      for (auto* o : optimizers)
        for (const auto& q : o->parameters())
          if (q.impl() == p.impl()) owner = o;
      if (!owner) continue;
      const Tensor gr = grad_of(*owner, p);
      if (gr.defined() && !finite_all(gr)) {
        where = "the first non-finite gradient is that of parameter \"" + name + "\" (" + ops::describe(p) +
                (models.size() > 1 ? ", model " + std::to_string(mi) : "") + ")";
        break;
      }
    }
  for (size_t k = 0; k < optimizers.size() && where.empty(); ++k) {
    const auto ps = optimizers[k]->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      const Tensor gr = grad_of(*optimizers[k], ps[i]);
      if (gr.defined() && !finite_all(gr)) {
        where = "the first non-finite gradient is that of parameter " + std::to_string(i) + " of optimizer " +
                std::to_string(k) + " (" + ops::describe(ps[i]) + ")";
        break;
      }
    }
  }
  os << (where.empty() ? std::string("no non-finite gradient found after the fact") : where);
  if (dynamic) os << "; the step is skipped and the scale reduced to " << num(new_scale);
  else os << "; the step is skipped and the static scale kept (lower it, or use a dynamic scale)";
  return os.str();
}


}  // namespace mpx::amp::detail
