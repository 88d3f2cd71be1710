// ReduceLROnPlateau: learning rates cut when a watched metric stops improving (PyTorch's scheduler of that name).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/arg.h"
#include "optim/optimizer.h"

namespace mpx::optim {

/// Options of ReduceLROnPlateau (PyTorch's keyword arguments and defaults).
struct ReduceLROnPlateauOptions {
  /// "min": the metric should fall (a loss); "max": rise (an accuracy).
  MPX_ARG(std::string, mode) = "min";
  /// Each cut multiplies the lr by factor (< 1).
  MPX_ARG(double, factor) = 0.1;
  /// Steps without improvement tolerated before a cut.
  MPX_ARG(int64_t, patience) = 10;
  /// What counts as an improvement: beyond best * (1 -/+ threshold) ("rel") or best -/+ threshold ("abs").
  MPX_ARG(double, threshold) = 1e-4;
  MPX_ARG(std::string, threshold_mode) = "rel";
  /// Steps after a cut during which bad steps are not counted.
  MPX_ARG(int64_t, cooldown) = 0;
  /// Floors of the lr: one for every group, or one per group.
  MPX_ARG(std::vector<double>, min_lr) = std::vector<double>{0.0};
  /// Cuts smaller than eps are not made.
  MPX_ARG(double, eps) = 1e-8;
};

/// Cuts every group's lr by `factor` once the metric passed to step() has not improved for more than
/// `patience` steps (PyTorch's ReduceLROnPlateau): call step(validation_loss) after each evaluation. A NaN
/// metric counts as no improvement.
class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  ReduceLROnPlateau(const ReduceLROnPlateau&) = delete;
  ReduceLROnPlateau& operator=(const ReduceLROnPlateau&) = delete;

  /// Records one evaluation's metric and cuts the lrs when the plateau has lasted long enough.
  void step(double metric);
  /// The learning rates after the last step, one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  /// Steps taken; the best metric so far; bad steps in a row; steps of cooldown left.
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_; }
  int64_t cooldown_counter() const { return cooldown_left_; }

  /// Counters and the best metric as named scalars ("last_epoch", "best", "num_bad_epochs",
  /// "cooldown_counter", "last_lr.<g>"); the lrs themselves live in the optimizer's state.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  bool better(double metric) const;
  Optimizer* opt_;
  ReduceLROnPlateauOptions o_;
  std::vector<double> min_lrs_, last_lr_;
  double best_;
  int64_t last_epoch_ = 0, num_bad_ = 0, cooldown_left_ = 0;
};

}  // namespace mpx::optim
