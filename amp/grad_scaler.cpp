// GradScaler: torch.amp's dynamic loss-scale state machine over the fused unscale_check_inf_ op.
#include "amp/grad_scaler.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/amp.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"

namespace mpx::amp {
namespace {

// A dense f32 tensor laid out like `like` (row-major or channels-last), for master gradients.
Tensor empty_f32_like(const Tensor& like) {
  TensorOptions o = TensorOptions().dtype(kFloat32).device(like.device());
  if (!like.is_contiguous() && like.dim() == 4 && like.is_contiguous(MemoryFormat::ChannelsLast))
    o.memory_format(MemoryFormat::ChannelsLast);
  return empty(like.sizes(), o);
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  MPX_CHECK(std::isfinite(o.init_scale()) && o.init_scale() > 0, "GradScaler: init_scale must be positive and finite, got ",
            o.init_scale());
  MPX_CHECK(o.growth_factor() > 1.0, "GradScaler: growth_factor must be > 1 (the scale grows after clean steps), got ",
            o.growth_factor());
  MPX_CHECK(o.backoff_factor() > 0.0 && o.backoff_factor() < 1.0,
            "GradScaler: backoff_factor must be in (0, 1) (the scale shrinks on overflow), got ", o.backoff_factor());
  MPX_CHECK(o.growth_interval() > 0, "GradScaler: growth_interval must be a positive number of steps, got ",
            o.growth_interval());
  // A clamping floor may sit above the scale (apex's min_loss_scale applies only on a backoff).
  MPX_CHECK(o.min_scale() >= 0 && (o.clamp_at_min_scale() || o.min_scale() <= o.init_scale()), "GradScaler: min_scale (",
            o.min_scale(), ") must be in [0, init_scale = ", o.init_scale(), "]; 0 means no floor");
  MPX_CHECK(o.max_scale() >= o.init_scale(), "GradScaler: max_scale (", o.max_scale(), ") is below init_scale (",
            o.init_scale(), "); raise max_scale or lower init_scale");
  scale_ = scalar_tensor(o.init_scale(), TensorOptions(kFloat32));
  growth_tracker_ = zeros({}, TensorOptions(kFloat32));
  skipped_ = zeros({}, TensorOptions(kFloat32));
}

void GradScaler::place(Device d) {
  if (scale_.device() == d) return;
  scale_ = scale_.to(d);
  growth_tracker_ = growth_tracker_.to(d);
  skipped_ = skipped_.to(d);
}

int64_t GradScaler::skipped_steps() const { return static_cast<int64_t>(skipped_.item_double()); }

Tensor GradScaler::scale(const Tensor& loss) {
  if (!is_enabled()) return loss;
  MPX_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler::scale: expected a floating loss, got ",
            ops::describe(loss));
  // The scale lives where the gradients will be (torch.amp initialises it lazily the same way).
  place(loss.device());
  return mul(loss, scale_);
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!is_enabled()) return;
  PerOptimizer& st = per_opt_[&optimizer];
  MPX_CHECK(st.stage != Stage::kUnscaled,
            "GradScaler::unscale_: already called for this optimizer since the last update(); "
            "call it at most once per optimizer per iteration (step() unscales only if you have not)");
  MPX_CHECK(st.stage != Stage::kStepped,
            "GradScaler::unscale_: called after step() for this optimizer; unscale before step() "
            "(e.g. to clip gradients), then call update() to start the next iteration");
  NoGradGuard ng;
  // One fused call per device: inputs, outputs (f32 master grads or the grads themselves).
  struct PerDevice {
    Device device;
    tensor_list in, out;
  };
  std::vector<PerDevice> devices;
  auto bucket = [&](Device d) -> PerDevice& {
    for (auto& b : devices)
      if (b.device == d) return b;
    devices.push_back({d, {}, {}});
    return devices.back();
  };
  for (auto& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params()) {
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      PerDevice& b = bucket(g.device());
      const Tensor& m = optimizer.master(p);
      if (m.impl() != p.impl()) {
        // The step reads a master's own .grad in preference to the parameter's: unscale into it.
        // A fresh tensor rather than the old master grad: a caller may still hold that one.
        Tensor mg = empty_f32_like(m);
        m.set_grad(mg);
        b.in.push_back(g);
        b.out.push_back(mg);
      } else {
        b.in.push_back(g);
        b.out.push_back(g);
      }
    }
  }
  // inv_scale is computed on the device, in f64 then rounded to f32 as torch.amp does: no host read.
  const Device home = devices.empty() ? scale_.device() : devices.front().device;
  Tensor found = zeros({}, TensorOptions(kFloat32).device(home));
  for (auto& b : devices) {
    Tensor s = scale_.device() == b.device ? scale_ : scale_.to(b.device);
    Tensor inv = reciprocal(s.to(kFloat64)).to(kFloat32);
    Tensor f = b.device == home ? found : zeros({}, TensorOptions(kFloat32).device(b.device));
    unscale_check_inf_(b.in, b.out, inv, f);
    if (b.device != home) found = found + f.to(home);
  }
  st.found_inf = found;
  st.stage = Stage::kUnscaled;
}

StepResult GradScaler::step(optim::Optimizer& optimizer) {
  if (!is_enabled()) {
    optimizer.step();
    return StepResult();
  }
  {
    auto it = per_opt_.find(&optimizer);
    MPX_CHECK(it == per_opt_.end() || it->second.stage != Stage::kStepped,
              "GradScaler::step: already called for this optimizer since the last update(); call update() "
              "once per iteration, after the steps");
  }
  bool any_grad = false;
  for (const auto& group : optimizer.param_groups())
    for (const Tensor& p : group.params()) any_grad |= p.grad().defined();
  // torch.amp refuses this too ("No inf checks were recorded"): a step with nothing to check has lost its backward.
  MPX_CHECK(any_grad, "GradScaler::step: no parameter of this optimizer has a gradient, so there is nothing to check "
                      "for inf/NaN; run scaler.scale(loss).backward() first");
  PerOptimizer& st = per_opt_[&optimizer];
  Tensor inv;  // defined when the step kernels unscale as they read
  if (st.stage == Stage::kReady) {
    tensor_list grads;
    bool one_device = true;
    for (const auto& group : optimizer.param_groups())
      for (const Tensor& p : group.params()) {
        const Tensor g = p.grad();
        if (!g.defined()) continue;
        one_device &= g.device() == scale_.device();
        grads.push_back(g);
      }
    if (one_device) {
      // Check only; the unscale is fused into the step (one pass over the gradients fewer).
      NoGradGuard ng;
      inv = reciprocal(scale_.to(kFloat64)).to(kFloat32);
      st.found_inf = zeros({}, TensorOptions(kFloat32).device(scale_.device()));
      unscale_check_inf_(grads, {}, inv, st.found_inf);
      st.stage = Stage::kUnscaled;
    } else {
      unscale_(optimizer);
    }
  }
  // The kernels skip themselves when found_inf is set: no host read of the flag here.
  const Tensor found = st.found_inf.device() == scale_.device() ? st.found_inf : st.found_inf.to(scale_.device());
  optimizer.set_amp_step_inputs(st.found_inf, inv);
  optimizer.step();
  st.stage = Stage::kStepped;
  {
    NoGradGuard ng;
    skipped_.add_(found.clamp(0.0, 1.0));  // a flag summed over devices counts one skip
  }
  ++attempted_;
  return StepResult(st.found_inf);
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!is_enabled()) return;
  if (new_scale) {
    MPX_CHECK(std::isfinite(*new_scale) && *new_scale > 0, "GradScaler::update: new_scale must be positive and finite, got ",
              *new_scale);
    MPX_CHECK(options_.clamp_at_min_scale() || *new_scale >= options_.min_scale(), "GradScaler::update: new_scale ",
              *new_scale, " is below min_scale ",
              options_.min_scale(), "; pass a larger scale or lower min_scale");
    scale_ = scalar_tensor(*new_scale, TensorOptions(kFloat32).device(scale_.device()));
    for (auto& [opt, st] : per_opt_) st.stage = Stage::kReady;
    return;
  }
  NoGradGuard ng;
  Tensor found;
  for (auto& [opt, st] : per_opt_) {
    if (st.stage == Stage::kReady) continue;
    const Tensor f = st.found_inf.device() == scale_.device() ? st.found_inf : st.found_inf.to(scale_.device());
    found = found.defined() ? found + f : f;
  }
  MPX_CHECK(found.defined(), "GradScaler::update: no inf/NaN checks were recorded since the last update(); call "
                             "unscale_(optimizer) or step(optimizer) for at least one optimizer first");
  // The iteration is over whatever follows: the next one starts clean even if this update throws.
  for (auto& [opt, st] : per_opt_) st.stage = Stage::kReady;
  // torch.amp's _amp_update_scale_ as a kernel where the scale lives. Only the erroring min_scale
  // floor needs the new value on the host, so only such a scaler synchronizes here.
  const bool floor = options_.min_scale() > 0;
  const Tensor before = floor && !options_.clamp_at_min_scale() ? scale_.clone() : Tensor();
  update_scale_(scale_, growth_tracker_, Tensor(), found, options_.growth_factor(), options_.backoff_factor(),
                options_.growth_interval(), options_.max_scale());
  if (floor && options_.clamp_at_min_scale()) {
    // apex: on overflow the scale becomes max(min_scale, scale * backoff); a clean step leaves it
    // (the floor times a 0/1 flag is 0 then, below any positive scale).
    scale_.copy_(maximum(scale_, found.clamp(0.0, 1.0) * options_.min_scale()));
  }
  if (before.defined()) {
    const double next = scale_.item_double();
    if (next < options_.min_scale()) {
      const double cur = before.item_double();
      scale_.copy_(before);
      MPX_ERROR("GradScaler: gradients overflowed again at loss scale ", fmt(cur), "; backing off to ", fmt(next),
                " would fall below min_scale ", fmt(options_.min_scale()),
                ". The scale is collapsing: the loss or forward pass is probably inf/NaN, or the learning rate "
                "diverged. Check the loss for inf/NaN, lower the learning rate, or lower min_scale");
    }
  }
}

double GradScaler::get_scale() const { return is_enabled() ? scale_.item_double() : 1.0; }

Tensor GradScaler::found_inf(const optim::Optimizer& optimizer) const {
  auto it = per_opt_.find(&optimizer);
  MPX_CHECK(it != per_opt_.end() && it->second.found_inf.defined(),
            "GradScaler::found_inf: this optimizer has not been unscaled by this scaler; call unscale_ or step first");
  return it->second.found_inf;
}

std::map<std::string, double> GradScaler::state_dict() const {
  if (!is_enabled()) return {};
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor()},
          {"backoff_factor", options_.backoff_factor()},
          {"growth_interval", static_cast<double>(options_.growth_interval())},
          {"_growth_tracker", growth_tracker_.item_double()}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  if (!is_enabled()) return;
  MPX_CHECK(!state.empty(), "GradScaler::load_state_dict: the state is empty, probably saved from a disabled "
                            "GradScaler; load a state from an enabled one or leave the scaler at its defaults");
  for (const char* k : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    MPX_CHECK(state.count(k), "GradScaler::load_state_dict: missing key \"", k,
              "\"; expected the keys of GradScaler::state_dict() (torch.amp's names)");
  const double s = state.at("scale");
  MPX_CHECK(std::isfinite(s) && s > 0, "GradScaler::load_state_dict: scale must be positive and finite, got ", s);
  const double gf = state.at("growth_factor"), bf = state.at("backoff_factor");
  MPX_CHECK(gf > 1.0, "GradScaler::load_state_dict: growth_factor must be > 1, got ", gf);
  MPX_CHECK(bf > 0.0 && bf < 1.0, "GradScaler::load_state_dict: backoff_factor must be in (0, 1), got ", bf);
  const double gi = state.at("growth_interval"), gt = state.at("_growth_tracker");
  MPX_CHECK(gi >= 1 && gi == std::floor(gi), "GradScaler::load_state_dict: growth_interval must be a positive integer, got ", gi);
  MPX_CHECK(gt >= 0 && gt == std::floor(gt), "GradScaler::load_state_dict: _growth_tracker must be a non-negative integer, got ", gt);
  options_.growth_factor(gf).backoff_factor(bf).growth_interval(static_cast<int64_t>(gi));
  growth_tracker_ = scalar_tensor(gt, TensorOptions(kFloat32).device(scale_.device()));
  scale_ = scalar_tensor(s, TensorOptions(kFloat32).device(scale_.device()));
}

}  // namespace mpx::amp
