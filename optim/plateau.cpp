// ReduceLROnPlateau: PyTorch's improvement test, patience, cooldown and floors.
#include "optim/plateau.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mpx::optim {

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : opt_(&optimizer), o_(std::move(options)) {
  const size_t groups = opt_->param_groups().size();
  MPX_CHECK(o_.mode() == "min" || o_.mode() == "max", "ReduceLROnPlateau: mode must be \"min\" or \"max\", got \"",
            o_.mode(), "\"");
  MPX_CHECK(o_.threshold_mode() == "rel" || o_.threshold_mode() == "abs",
            "ReduceLROnPlateau: threshold_mode must be \"rel\" or \"abs\", got \"", o_.threshold_mode(), "\"");
  MPX_CHECK(o_.factor() >= 0 && o_.factor() < 1, "ReduceLROnPlateau: factor must lie in [0, 1), got ", o_.factor());
  MPX_CHECK(o_.patience() >= 0 && o_.cooldown() >= 0, "ReduceLROnPlateau: patience and cooldown must be >= 0");
  MPX_CHECK(std::isfinite(o_.threshold()) && o_.threshold() >= 0, "ReduceLROnPlateau: threshold must be finite and >= 0");
  const auto& m = o_.min_lr();
  MPX_CHECK(m.size() == 1 || m.size() == groups, "ReduceLROnPlateau: ", m.size(), " min_lr values for ", groups,
            " param groups; give one for all or one per group");
  for (size_t g = 0; g < groups; ++g) {
    min_lrs_.push_back(m.size() == 1 ? m[0] : m[g]);
    last_lr_.push_back(opt_->param_groups()[g].lr());
  }
  best_ = o_.mode() == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::better(double a) const {
  const double t = o_.threshold();
  const bool rel = o_.threshold_mode() == "rel";
  if (o_.mode() == "min") return rel ? a < best_ * (1 - t) : a < best_ - t;
  return rel ? a > best_ * (1 + t) : a > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (better(metric)) {
    best_ = metric;
    num_bad_ = 0;
  } else {
    ++num_bad_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    num_bad_ = 0;
  }
  auto& groups = opt_->param_groups();
  if (num_bad_ > o_.patience()) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const double old = groups[g].lr(), cut = std::max(old * o_.factor(), min_lrs_[g]);
      if (old - cut > o_.eps()) groups[g].set_lr(cut);
    }
    cooldown_left_ = o_.cooldown();
    num_bad_ = 0;
  }
  for (size_t g = 0; g < groups.size(); ++g) last_lr_[g] = groups[g].lr();
}

std::map<std::string, double> ReduceLROnPlateau::state_dict() const {
  std::map<std::string, double> s{{"last_epoch", static_cast<double>(last_epoch_)},
                                  {"best", best_},
                                  {"num_bad_epochs", static_cast<double>(num_bad_)},
                                  {"cooldown_counter", static_cast<double>(cooldown_left_)}};
  for (size_t g = 0; g < last_lr_.size(); ++g) s["last_lr." + std::to_string(g)] = last_lr_[g];
  return s;
}

void ReduceLROnPlateau::load_state_dict(const std::map<std::string, double>& s) {
  for (const char* k : {"last_epoch", "best", "num_bad_epochs", "cooldown_counter"})
    MPX_CHECK(s.count(k), "ReduceLROnPlateau load_state_dict: '", k, "' is missing; the state was saved by another ",
              "scheduler");
  std::vector<double> last(last_lr_.size());
  for (size_t g = 0; g < last.size(); ++g) {
    const auto it = s.find("last_lr." + std::to_string(g));
    MPX_CHECK(it != s.end(), "ReduceLROnPlateau load_state_dict: no learning rate for param group ", g,
              "; the state was saved for a different optimizer");
    last[g] = it->second;
  }
  last_epoch_ = static_cast<int64_t>(s.at("last_epoch"));
  best_ = s.at("best");
  num_bad_ = static_cast<int64_t>(s.at("num_bad_epochs"));
  cooldown_left_ = static_cast<int64_t>(s.at("cooldown_counter"));
  last_lr_ = last;
}

}  // namespace mpx::optim
