// Learning-rate schedulers (StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LambdaLR, LinearWarmup,
// ConstantLR, PolynomialLR, CosineAnnealingWarmRestarts, OneCycleLR) with PyTorch's formulas.
#pragma once
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/arg.h"
#include "optim/optimizer.h"

namespace mpx::optim {

/// Base of the schedulers. Like PyTorch's, each step() computes the new lr of every group
/// from the group's *current* lr (the "chainable" form), so several schedulers stepping the
/// same optimizer compose (e.g. two multiplicative decays). The first scheduler attached to
/// a group records its lr as the group's initial_lr; every scheduler starts from that.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances one step (or epoch) and writes the new learning rates into the optimizer.
  void step();
  /// The learning rates this scheduler set last, one per param group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  /// Steps taken since construction (0 right after it).
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() { return *opt_; }
  /// The closed-form learning rates at `epoch` (what an uninterrupted run gives, up to rounding).
  virtual std::vector<double> closed_form_lr(int64_t epoch) const = 0;
  /// Goes back to epoch 0 and sets the epoch-0 learning rates (PyTorch's step(0)).
  virtual void restart();

  /// Counters and learning rates as named scalars ("last_epoch", "base_lrs.<g>", "last_lr.<g>").
  virtual std::map<std::string, double> state_dict() const;
  /// Restores state_dict(); does not touch the optimizer (its lrs live in its own state dict).
  virtual void load_state_dict(const std::map<std::string, double>& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  /// PyTorch's chainable get_lr() at last_epoch_, from the groups' current lrs.
  virtual std::vector<double> chained_lr() const = 0;
  /// One step: ++last_epoch_ and apply chained_lr(). LinearWarmup overrides it to hand over.
  virtual void advance();
  /// Derived constructors call this last: epoch 0 and its learning rates.
  void initial_step();
  std::vector<double> current_lrs() const;
  void set_lrs(const std::vector<double>& lrs);

  Optimizer* opt_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

/// lr = initial_lr * gamma^(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  std::vector<double> closed_form_lr(int64_t epoch) const override;

 protected:
  std::vector<double> chained_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = initial_lr * gamma^(number of milestones <= epoch); repeated milestones count twice.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  std::vector<double> closed_form_lr(int64_t epoch) const override;

 protected:
  std::vector<double> chained_lr() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

/// lr = initial_lr * gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  std::vector<double> closed_form_lr(int64_t epoch) const override;

 protected:
  std::vector<double> chained_lr() const override;

 private:
  double gamma_;
};

/// lr = initial_lr * lambda(epoch) (PyTorch's LambdaLR with one function for every group): the form of
/// transformers' get_linear_schedule_with_warmup and friends. Not chainable (it sets, not scales).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda);
  std::vector<double> closed_form_lr(int64_t epoch) const override;

 protected:
  std::vector<double> chained_lr() const override;

 private:
  std::function<double(int64_t)> lambda_;
};

/// lr = eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (and back up after T_max, as PyTorch).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  std::vector<double> closed_form_lr(int64_t epoch) const override;

 protected:
  std::vector<double> chained_lr() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear warm-up from start_factor * initial_lr to initial_lr over warmup_steps steps (PyTorch's
/// LinearLR). With `after`, hands over when the warm-up ends: at step warmup_steps the wrapped
/// scheduler restarts at its epoch 0 and every later step() steps it (PyTorch's
/// SequentialLR([LinearLR, after], milestones=[warmup_steps])). Construct `after` on the same
/// optimizer; this scheduler owns it.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor = 1.0 / 3.0,
               std::unique_ptr<LRScheduler> after = nullptr);
  std::vector<double> closed_form_lr(int64_t epoch) const override;
  void restart() override;
  /// The scheduler that takes over after the warm-up (null when none).
  LRScheduler* after() { return after_.get(); }
  std::map<std::string, double> state_dict() const override;
  void load_state_dict(const std::map<std::string, double>& state) override;

 protected:
  std::vector<double> chained_lr() const override;
  void advance() override;

 private:
  int64_t warmup_steps_;
  double start_factor_;
  std::unique_ptr<LRScheduler> after_;
};

/// lr = initial_lr * factor until total_iters steps, then initial_lr (PyTorch's ConstantLR).
class ConstantLR : public LRScheduler {
 public:
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3.0, int64_t total_iters = 5);
  std::vector<double> closed_form_lr(int64_t epoch) const override;

 protected:
  std::vector<double> chained_lr() const override;

 private:
  double factor_;
  int64_t total_iters_;
};

/// lr = initial_lr * (1 - min(epoch, total_iters) / total_iters)^power: a decay to 0 at total_iters
/// (PyTorch's PolynomialLR; power 1 is the linear decay of BERT-style recipes).
class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);
  std::vector<double> closed_form_lr(int64_t epoch) const override;

 protected:
  std::vector<double> chained_lr() const override;

 private:
  int64_t total_iters_;
  double power_;
};

/// SGDR (PyTorch's CosineAnnealingWarmRestarts): a cosine from initial_lr to eta_min over T_i steps, then a
/// restart at initial_lr with T_i *= T_mult; T_0 is the first period. Steps are whole (step() advances one).
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1, double eta_min = 0.0);
  std::vector<double> closed_form_lr(int64_t epoch) const override;
  void restart() override;
  /// Adds "T_cur" and "T_i" to the base's state.
  std::map<std::string, double> state_dict() const override;
  void load_state_dict(const std::map<std::string, double>& state) override;

 protected:
  std::vector<double> chained_lr() const override;
  void advance() override;

 private:
  // The position inside the period that `epoch` falls in, and that period's length.
  std::pair<int64_t, int64_t> position(int64_t epoch) const;
  int64_t t_0_, t_mult_;
  double eta_min_;
  int64_t t_cur_ = 0, t_i_;
};

/// Options of OneCycleLR (PyTorch's keyword arguments and defaults).
struct OneCycleLROptions {
  /// The share of the steps spent raising the lr.
  MPX_ARG(double, pct_start) = 0.3;
  /// "cos" or "linear".
  MPX_ARG(std::string, anneal_strategy) = "cos";
  /// Cycles the momentum (SGD's momentum, Adam's beta1) inversely to the lr, between these two.
  MPX_ARG(bool, cycle_momentum) = true;
  MPX_ARG(double, base_momentum) = 0.85;
  MPX_ARG(double, max_momentum) = 0.95;
  /// The first lr is max_lr / div_factor, the last that / final_div_factor.
  MPX_ARG(double, div_factor) = 25.0;
  MPX_ARG(double, final_div_factor) = 1e4;
  /// Three phases (up, back down to the first lr, then to the last) instead of two.
  MPX_ARG(bool, three_phase) = false;
};

/// The 1cycle policy (PyTorch's OneCycleLR): from max_lr / div_factor up to max_lr over pct_start of
/// total_steps, then down to the first lr / final_div_factor at the end; step() after every batch. It sets
/// the lrs itself (the optimizer's own lr is not used) and, with cycle_momentum, the groups' momentum or
/// beta1. Stepping past total_steps is an error, as in PyTorch.
class OneCycleLR : public LRScheduler {
 public:
  /// max_lrs: one per param group, or one for all.
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps, OneCycleLROptions options = {});
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleLROptions options = {})
      : OneCycleLR(optimizer, std::vector<double>{max_lr}, total_steps, std::move(options)) {}
  std::vector<double> closed_form_lr(int64_t epoch) const override;
  /// The momentum (or beta1) at `epoch`, one per group (empty without cycle_momentum).
  std::vector<double> momentum_at(int64_t epoch) const;
  void restart() override;

 protected:
  std::vector<double> chained_lr() const override;
  void advance() override;

 private:
  struct Phase {
    double end_step;
    int lr_from, lr_to;  // 0 initial, 1 max, 2 min
    bool m_from_max, m_to_max;  // the momentum at either end: max_momentum, else base_momentum
  };
  // The phase `epoch` lies in and how far through it (0..1).
  std::pair<const Phase*, double> locate(int64_t epoch) const;
  double anneal(double from, double to, double pct) const;
  void set_momenta(int64_t epoch);
  OneCycleLROptions o_;
  int64_t total_steps_;
  std::vector<std::array<double, 3>> lrs_;  // per group: initial, max, min
  std::vector<Phase> phases_;
  std::string momentum_key_;  // "momentum" or "beta1"
};

}  // namespace mpx::optim
