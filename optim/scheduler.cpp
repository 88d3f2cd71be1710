// Learning-rate schedulers: PyTorch's chainable update rules, closed forms, and scalar state dicts.
#include "optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mpx::optim {

// ---- base ----
LRScheduler::LRScheduler(Optimizer& optimizer) : opt_(&optimizer) {
  for (auto& g : opt_->param_groups()) {
    if (!g.has_initial_lr()) g.set_initial_lr(g.lr());
    base_lrs_.push_back(g.initial_lr());
  }
}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> r;
  for (const auto& g : opt_->param_groups()) r.push_back(g.lr());
  return r;
}

void LRScheduler::set_lrs(const std::vector<double>& lrs) {
  auto& groups = opt_->param_groups();
  MPX_CHECK(groups.size() == lrs.size(), "LR scheduler: the optimizer has ", groups.size(),
            " param groups but the scheduler was built for ", lrs.size(), "; create the scheduler after adding groups");
  for (size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(lrs[g]);
  last_lr_ = lrs;
}

void LRScheduler::initial_step() {
  last_epoch_ = 0;
  set_lrs(chained_lr());
}

void LRScheduler::advance() {
  ++last_epoch_;
  set_lrs(chained_lr());
}

void LRScheduler::step() { advance(); }

void LRScheduler::restart() {
  last_epoch_ = 0;
  set_lrs(closed_form_lr(0));
}

std::map<std::string, double> LRScheduler::state_dict() const {
  std::map<std::string, double> s{{"last_epoch", static_cast<double>(last_epoch_)}};
  for (size_t g = 0; g < base_lrs_.size(); ++g) s["base_lrs." + std::to_string(g)] = base_lrs_[g];
  for (size_t g = 0; g < last_lr_.size(); ++g) s["last_lr." + std::to_string(g)] = last_lr_[g];
  return s;
}

void LRScheduler::load_state_dict(const std::map<std::string, double>& s) {
  auto it = s.find("last_epoch");
  MPX_CHECK(it != s.end(), "LR scheduler load_state_dict: 'last_epoch' is missing");
  std::vector<double> base(base_lrs_.size()), last(base_lrs_.size());
  for (size_t g = 0; g < base.size(); ++g) {
    auto b = s.find("base_lrs." + std::to_string(g));
    auto l = s.find("last_lr." + std::to_string(g));
    MPX_CHECK(b != s.end() && l != s.end(), "LR scheduler load_state_dict: no learning rates for param group ", g,
              "; the state was saved for a different optimizer");
    base[g] = b->second;
    last[g] = l->second;
  }
  MPX_CHECK(!s.count("base_lrs." + std::to_string(base.size())), "LR scheduler load_state_dict: the state has more "
            "param groups than the optimizer (", base.size(), ")");
  last_epoch_ = static_cast<int64_t>(it->second);
  base_lrs_ = base;
  last_lr_ = last;
}

// ---- StepLR ----
StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  MPX_CHECK(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
  MPX_CHECK(std::isfinite(gamma) && gamma >= 0, "StepLR: gamma must be finite and >= 0, got ", gamma);
  initial_step();
}
std::vector<double> StepLR::chained_lr() const {
  std::vector<double> r = current_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return r;
  for (auto& v : r) v *= gamma_;
  return r;
}
std::vector<double> StepLR::closed_form_lr(int64_t e) const {
  std::vector<double> r;
  for (double b : base_lrs_) r.push_back(b * std::pow(gamma_, static_cast<double>(e / step_size_)));
  return r;
}

// ---- ExponentialLR ----
ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  MPX_CHECK(std::isfinite(gamma) && gamma >= 0, "ExponentialLR: gamma must be finite and >= 0, got ", gamma);
  initial_step();
}
std::vector<double> ExponentialLR::chained_lr() const {
  std::vector<double> r = current_lrs();
  if (last_epoch_ == 0) return r;
  for (auto& v : r) v *= gamma_;
  return r;
}
std::vector<double> ExponentialLR::closed_form_lr(int64_t e) const {
  std::vector<double> r;
  for (double b : base_lrs_) r.push_back(b * std::pow(gamma_, static_cast<double>(e)));
  return r;
}

// ---- LambdaLR ----
LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda)
    : LRScheduler(optimizer), lambda_(std::move(lr_lambda)) {
  MPX_CHECK(lambda_, "LambdaLR: lr_lambda is empty");
  initial_step();
}
std::vector<double> LambdaLR::chained_lr() const { return closed_form_lr(last_epoch_); }
std::vector<double> LambdaLR::closed_form_lr(int64_t e) const {
  const double f = lambda_(e);
  MPX_CHECK(std::isfinite(f), "LambdaLR: lr_lambda(", e, ") returned ", f, "; it must be a finite factor");
  std::vector<double> r;
  for (double b : base_lrs_) r.push_back(b * f);
  return r;
}

// ---- MultiStepLR ----
MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  MPX_CHECK(std::isfinite(gamma) && gamma >= 0, "MultiStepLR: gamma must be finite and >= 0, got ", gamma);
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}
std::vector<double> MultiStepLR::chained_lr() const {
  std::vector<double> r = current_lrs();
  const auto hits = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (hits == 0) return r;
  for (auto& v : r) v *= std::pow(gamma_, static_cast<double>(hits));
  return r;
}
std::vector<double> MultiStepLR::closed_form_lr(int64_t e) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), e) - milestones_.begin();
  std::vector<double> r;
  for (double b : base_lrs_) r.push_back(b * std::pow(gamma_, static_cast<double>(passed)));
  return r;
}

// ---- CosineAnnealingLR ----
CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  MPX_CHECK(T_max >= 1, "CosineAnnealingLR: T_max must be >= 1, got ", T_max);
  MPX_CHECK(std::isfinite(eta_min) && eta_min >= 0, "CosineAnnealingLR: eta_min must be finite and >= 0, got ", eta_min);
  initial_step();
}
std::vector<double> CosineAnnealingLR::chained_lr() const {
  constexpr double pi = std::numbers::pi;
  std::vector<double> r = current_lrs();
  if (last_epoch_ == 0) return r;
  const double T = static_cast<double>(t_max_), e = static_cast<double>(last_epoch_);
  const int64_t m = 2 * t_max_;
  const int64_t phase = (((last_epoch_ - 1 - t_max_) % m) + m) % m;  // Python's modulo
  for (size_t g = 0; g < r.size(); ++g) {
    if (phase == 0) r[g] = r[g] + (base_lrs_[g] - eta_min_) * (1 - std::cos(pi / T)) / 2;
    else r[g] = (1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) * (r[g] - eta_min_) + eta_min_;
  }
  return r;
}
std::vector<double> CosineAnnealingLR::closed_form_lr(int64_t e) const {
  std::vector<double> r;
  for (double b : base_lrs_)
    r.push_back(eta_min_ + (b - eta_min_) * (1 + std::cos(std::numbers::pi * static_cast<double>(e) / t_max_)) / 2);
  return r;
}

// ---- LinearWarmup ----
LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor,
                           std::unique_ptr<LRScheduler> after)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps), start_factor_(start_factor), after_(std::move(after)) {
  MPX_CHECK(warmup_steps >= 0, "LinearWarmup: warmup_steps must be >= 0, got ", warmup_steps);
  MPX_CHECK(start_factor > 0 && start_factor <= 1, "LinearWarmup: start_factor must lie in (0, 1], got ", start_factor);
  MPX_CHECK(!after_ || &after_->optimizer() == opt_, "LinearWarmup: the wrapped scheduler must drive the same optimizer");
  // Like SequentialLR: whatever the wrapped scheduler did at construction is undone.
  set_lrs(base_lrs_);
  last_epoch_ = 0;
  if (warmup_steps_ == 0) {
    if (after_) {
      after_->restart();
      last_lr_ = after_->get_last_lr();
    }
  } else {
    set_lrs(chained_lr());
  }
}

std::vector<double> LinearWarmup::chained_lr() const {
  std::vector<double> r = current_lrs();
  const double s = start_factor_, T = static_cast<double>(warmup_steps_);
  if (last_epoch_ == 0) {
    for (auto& v : r) v *= s;
  } else if (last_epoch_ <= warmup_steps_) {
    const double f = 1 + (1 - s) / (T * s + static_cast<double>(last_epoch_ - 1) * (1 - s));
    for (auto& v : r) v *= f;
  }
  return r;
}

void LinearWarmup::advance() {
  ++last_epoch_;
  if (after_ && last_epoch_ >= warmup_steps_) {
    if (last_epoch_ == warmup_steps_) after_->restart();
    else after_->step();
    last_lr_ = after_->get_last_lr();
    return;
  }
  set_lrs(chained_lr());
}

void LinearWarmup::restart() {
  last_epoch_ = 0;
  if (warmup_steps_ == 0 && after_) {
    after_->restart();
    last_lr_ = after_->get_last_lr();
    return;
  }
  set_lrs(closed_form_lr(0));
}

std::vector<double> LinearWarmup::closed_form_lr(int64_t e) const {
  if (e >= warmup_steps_) {
    if (after_) return after_->closed_form_lr(e - warmup_steps_);
    return base_lrs_;
  }
  std::vector<double> r;
  const double f = start_factor_ + (1 - start_factor_) * static_cast<double>(e) / static_cast<double>(warmup_steps_);
  for (double b : base_lrs_) r.push_back(b * f);
  return r;
}

std::map<std::string, double> LinearWarmup::state_dict() const {
  auto s = LRScheduler::state_dict();
  if (after_)
    for (const auto& [k, v] : after_->state_dict()) s["after." + k] = v;
  return s;
}

void LinearWarmup::load_state_dict(const std::map<std::string, double>& state) {
  std::map<std::string, double> own, inner;
  for (const auto& [k, v] : state) {
    if (k.rfind("after.", 0) == 0) inner[k.substr(6)] = v;
    else own[k] = v;
  }
  MPX_CHECK(inner.empty() == (after_ == nullptr), "LinearWarmup load_state_dict: the state ",
            inner.empty() ? "has no" : "has a", " wrapped scheduler but this one ", after_ ? "has one" : "does not");
  if (after_) after_->load_state_dict(inner);
  LRScheduler::load_state_dict(own);
}

// ---- ConstantLR ----
ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer), factor_(factor), total_iters_(total_iters) {
  MPX_CHECK(factor >= 0 && factor <= 1, "ConstantLR: factor must lie in [0, 1], got ", factor);
  MPX_CHECK(total_iters >= 0, "ConstantLR: total_iters must be >= 0, got ", total_iters);
  initial_step();
}
std::vector<double> ConstantLR::chained_lr() const {
  std::vector<double> r = current_lrs();
  if (last_epoch_ == 0) {
    for (auto& v : r) v *= factor_;
  } else if (last_epoch_ == total_iters_) {
    for (size_t g = 0; g < r.size(); ++g) r[g] = factor_ > 0 ? r[g] / factor_ : base_lrs_[g];
  }
  return r;
}
std::vector<double> ConstantLR::closed_form_lr(int64_t e) const {
  std::vector<double> r;
  for (double b : base_lrs_) r.push_back(e >= total_iters_ ? b : b * factor_);
  return r;
}

// ---- PolynomialLR ----
PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(optimizer), total_iters_(total_iters), power_(power) {
  MPX_CHECK(total_iters >= 1, "PolynomialLR: total_iters must be >= 1, got ", total_iters);
  MPX_CHECK(std::isfinite(power) && power >= 0, "PolynomialLR: power must be finite and >= 0, got ", power);
  initial_step();
}
std::vector<double> PolynomialLR::chained_lr() const {
  std::vector<double> r = current_lrs();
  if (last_epoch_ == 0 || last_epoch_ > total_iters_) return r;
  const double T = static_cast<double>(total_iters_), e = static_cast<double>(last_epoch_);
  const double f = std::pow((1.0 - e / T) / (1.0 - (e - 1) / T), power_);
  for (auto& v : r) v *= f;
  return r;
}
std::vector<double> PolynomialLR::closed_form_lr(int64_t e) const {
  const double f = std::pow(1.0 - static_cast<double>(std::min(e, total_iters_)) / static_cast<double>(total_iters_),
                            power_);
  std::vector<double> r;
  for (double b : base_lrs_) r.push_back(b * f);
  return r;
}

// ---- CosineAnnealingWarmRestarts ----
CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult,
                                                         double eta_min)
    : LRScheduler(optimizer), t_0_(T_0), t_mult_(T_mult), eta_min_(eta_min), t_i_(T_0) {
  MPX_CHECK(T_0 >= 1, "CosineAnnealingWarmRestarts: T_0 must be >= 1, got ", T_0);
  MPX_CHECK(T_mult >= 1, "CosineAnnealingWarmRestarts: T_mult must be >= 1, got ", T_mult);
  MPX_CHECK(std::isfinite(eta_min) && eta_min >= 0, "CosineAnnealingWarmRestarts: eta_min must be finite and >= 0, got ",
            eta_min);
  initial_step();
}
std::pair<int64_t, int64_t> CosineAnnealingWarmRestarts::position(int64_t e) const {
  if (t_mult_ == 1) return {e % t_0_, t_0_};
  int64_t t = e, ti = t_0_;
  while (t >= ti) {
    t -= ti;
    ti *= t_mult_;
  }
  return {t, ti};
}
std::vector<double> CosineAnnealingWarmRestarts::chained_lr() const {
  std::vector<double> r;
  const double c = (1 + std::cos(std::numbers::pi * static_cast<double>(t_cur_) / static_cast<double>(t_i_))) / 2;
  for (double b : base_lrs_) r.push_back(eta_min_ + (b - eta_min_) * c);
  return r;
}
void CosineAnnealingWarmRestarts::advance() {
  ++last_epoch_;
  if (++t_cur_ >= t_i_) {
    t_cur_ -= t_i_;
    t_i_ *= t_mult_;
  }
  set_lrs(chained_lr());
}
void CosineAnnealingWarmRestarts::restart() {
  t_cur_ = 0;
  t_i_ = t_0_;
  LRScheduler::restart();
}
std::vector<double> CosineAnnealingWarmRestarts::closed_form_lr(int64_t e) const {
  const auto [t, ti] = position(e);
  const double c = (1 + std::cos(std::numbers::pi * static_cast<double>(t) / static_cast<double>(ti))) / 2;
  std::vector<double> r;
  for (double b : base_lrs_) r.push_back(eta_min_ + (b - eta_min_) * c);
  return r;
}
std::map<std::string, double> CosineAnnealingWarmRestarts::state_dict() const {
  auto s = LRScheduler::state_dict();
  s["T_cur"] = static_cast<double>(t_cur_);
  s["T_i"] = static_cast<double>(t_i_);
  return s;
}
void CosineAnnealingWarmRestarts::load_state_dict(const std::map<std::string, double>& state) {
  const auto cur = state.find("T_cur"), ti = state.find("T_i");
  MPX_CHECK(cur != state.end() && ti != state.end(), "CosineAnnealingWarmRestarts load_state_dict: 'T_cur' or 'T_i' ",
            "is missing; the state was saved by another scheduler");
  LRScheduler::load_state_dict(state);
  t_cur_ = static_cast<int64_t>(cur->second);
  t_i_ = static_cast<int64_t>(ti->second);
}

// ---- OneCycleLR ----
OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
                       OneCycleLROptions options)
    : LRScheduler(optimizer), o_(std::move(options)), total_steps_(total_steps) {
  const size_t groups = opt_->param_groups().size();
  MPX_CHECK(total_steps >= 1, "OneCycleLR: total_steps must be >= 1, got ", total_steps);
  MPX_CHECK(max_lrs.size() == 1 || max_lrs.size() == groups, "OneCycleLR: ", max_lrs.size(), " max_lrs for ", groups,
            " param groups; give one for all or one per group");
  MPX_CHECK(o_.pct_start() >= 0 && o_.pct_start() <= 1, "OneCycleLR: pct_start must lie in [0, 1], got ", o_.pct_start());
  MPX_CHECK(o_.anneal_strategy() == "cos" || o_.anneal_strategy() == "linear",
            "OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got \"", o_.anneal_strategy(), "\"");
  MPX_CHECK(o_.div_factor() > 0 && o_.final_div_factor() > 0, "OneCycleLR: div_factor and final_div_factor must be > 0");
  for (size_t g = 0; g < groups; ++g) {
    const double top = max_lrs.size() == 1 ? max_lrs[0] : max_lrs[g];
    MPX_CHECK(std::isfinite(top) && top >= 0, "OneCycleLR: max_lr must be finite and >= 0, got ", top);
    const double first = top / o_.div_factor();
    lrs_.push_back({first, top, first / o_.final_div_factor()});
    opt_->param_groups()[g].set_initial_lr(first);
    base_lrs_[g] = first;
  }
  const double T = static_cast<double>(total_steps), up = o_.pct_start() * T;
  if (o_.three_phase())
    phases_ = {{up - 1, 0, 1, true, false}, {2 * up - 2, 1, 0, false, true}, {T - 1, 0, 2, true, true}};
  else
    phases_ = {{up - 1, 0, 1, true, false}, {T - 1, 1, 2, false, true}};
  if (o_.cycle_momentum()) {
    const auto m = opt_->param_groups()[0].options().to_map();
    momentum_key_ = m.count("beta1") ? "beta1" : m.count("momentum") ? "momentum" : "";
    MPX_CHECK(!momentum_key_.empty(), "OneCycleLR: cycle_momentum needs an optimizer with a momentum or beta1 option; ",
              "pass OneCycleLROptions().cycle_momentum(false)");
  }
  initial_step();
  set_momenta(0);
}
std::pair<const OneCycleLR::Phase*, double> OneCycleLR::locate(int64_t epoch) const {
  const double e = static_cast<double>(epoch);
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (e <= p.end_step || i + 1 == phases_.size()) {
      // A phase of no length (pct_start * total_steps <= 1) is at its end (PyTorch divides by zero there).
      return {&p, p.end_step > start ? (e - start) / (p.end_step - start) : 1.0};
    }
    start = p.end_step;
  }
  return {&phases_.back(), 1.0};
}
double OneCycleLR::anneal(double from, double to, double pct) const {
  if (o_.anneal_strategy() == "linear") return (to - from) * pct + from;
  return to + (from - to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
}
std::vector<double> OneCycleLR::closed_form_lr(int64_t epoch) const {
  const auto [p, pct] = locate(epoch);
  std::vector<double> r;
  for (const auto& l : lrs_) r.push_back(anneal(l[static_cast<size_t>(p->lr_from)], l[static_cast<size_t>(p->lr_to)], pct));
  return r;
}
std::vector<double> OneCycleLR::momentum_at(int64_t epoch) const {
  if (momentum_key_.empty()) return {};
  const auto [p, pct] = locate(epoch);
  const double lo = o_.base_momentum(), hi = o_.max_momentum();
  return std::vector<double>(lrs_.size(), anneal(p->m_from_max ? hi : lo, p->m_to_max ? hi : lo, pct));
}
void OneCycleLR::set_momenta(int64_t epoch) {
  const std::vector<double> m = momentum_at(epoch);
  for (size_t g = 0; g < m.size(); ++g) opt_->param_groups()[g].options().from_map({{momentum_key_, m[g]}});
}
std::vector<double> OneCycleLR::chained_lr() const { return closed_form_lr(last_epoch_); }
void OneCycleLR::advance() {
  MPX_CHECK(last_epoch_ + 1 <= total_steps_, "OneCycleLR: tried to step ", last_epoch_ + 1, " times; total_steps is ",
            total_steps_, " (give total_steps = epochs * steps per epoch, counting every step() call)");
  LRScheduler::advance();
  set_momenta(last_epoch_);
}
void OneCycleLR::restart() {
  LRScheduler::restart();
  set_momenta(0);
}

}  // namespace mpx::optim
