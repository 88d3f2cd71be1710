// GradScaler: dynamic loss scaling with torch.amp's state machine, fused unscale + inf check.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/arg.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace mpx::amp {

/// torch.amp's defaults; min_scale 0 means no floor, max_scale is apex's 2^24 ceiling.
/// Falling below min_scale is an error (a collapsing scale means divergence) unless
/// clamp_at_min_scale is set: then a backoff stops at min_scale, as apex's min_loss_scale does.
struct GradScalerOptions {
  MPX_ARG(double, init_scale) = 65536.0;
  MPX_ARG(double, growth_factor) = 2.0;
  MPX_ARG(double, backoff_factor) = 0.5;
  MPX_ARG(int64_t, growth_interval) = 2000;
  MPX_ARG(double, min_scale) = 0.0;
  MPX_ARG(double, max_scale) = 16777216.0;
  MPX_ARG(bool, enabled) = true;
  MPX_ARG(bool, clamp_at_min_scale) = false;
};

/// What GradScaler::step returns: whether the optimizer stepped. The decision is made where the
/// gradients live (on a GPU the step kernels skip themselves), so converting this to bool reads
/// the overflow flag: a device synchronization. Ignoring it costs nothing.
class StepResult {
 public:
  explicit StepResult(Tensor found_inf = {}) : found_inf_(std::move(found_inf)) {}
  operator bool() const { return !found_inf_.defined() || found_inf_.item_double() == 0.0; }  // NOLINT

 private:
  Tensor found_inf_;
};

/// Scales losses, unscales an optimizer's gradients in one fused pass that also detects
/// inf/NaN (writing a device-side found_inf flag), skips the steps of overflowed optimizers
/// and grows/backs off the scale. The usual loop:
///   scaler.scale(loss).backward(); scaler.unscale_(opt) /*optional*/; scaler.step(opt); scaler.update();
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale (a differentiable op; the identity when disabled).
  Tensor scale(const Tensor& loss);
  /// Divides the gradients the optimizer will use (masters' gradients for f16/bf16
  /// parameters, written in f32) by the scale and records whether any is inf/NaN.
  /// A second call before update() or a call after step() for the same optimizer is an error.
  void unscale_(optim::Optimizer& optimizer);
  /// optimizer.step() unless an inf/NaN gradient was found. Without an earlier unscale_, the
  /// gradients are only checked here and the step's kernels unscale them as they read them; the
  /// skip itself happens in the step's kernels, so nothing waits for the device. Returns whether
  /// the optimizer stepped (see StepResult).
  StepResult step(optim::Optimizer& optimizer);
  /// Backs off on overflow (any optimizer stepped this iteration found inf/NaN), grows after
  /// growth_interval clean steps (only to a finite value, at most max_scale). With
  /// `new_scale`, sets the scale instead. A backoff below min_scale throws, or stops at
  /// min_scale with clamp_at_min_scale.
  void update(std::optional<double> new_scale = std::nullopt);

  double get_scale() const;
  /// The scale as the f32 0-dim tensor it is kept in (on the gradients' device; no host read).
  const Tensor& scale_tensor() const { return scale_; }
  bool is_enabled() const { return options_.enabled(); }
  const GradScalerOptions& options() const { return options_; }
  /// Steps skipped because of inf/NaN gradients, and steps taken, since construction (reading
  /// them synchronizes with the device that holds the count).
  int64_t skipped_steps() const;
  int64_t clean_steps() const { return attempted_ - skipped_steps(); }
  /// The found_inf flag (f32 0-dim tensor, on the gradients' device; 1.0 when any gradient was
  /// inf/NaN) of the last unscale_ of this optimizer, kept after update(). Reading it on the host
  /// syncs a device. Throws when this scaler never unscaled the optimizer.
  Tensor found_inf(const optim::Optimizer& optimizer) const;

  /// scale, growth_factor, backoff_factor, growth_interval, _growth_tracker (torch.amp's keys).
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    Tensor found_inf;
  };
  GradScalerOptions options_;
  // The loss-scale state lives on the device of the gradients it scales (f32 0-dim tensors, moved
  // there by scale()), so update() is a kernel and no step waits for the host.
  Tensor scale_, growth_tracker_, skipped_;
  int64_t attempted_ = 0;
  void place(Device d);
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_opt_;
};

}  // namespace mpx::amp
