// AveragedModel, SWALR and update_bn (optim/swa_utils.h), with PyTorch's update rules.
#include "optim/swa_utils.h"

#include <cmath>
#include <numbers>

#include "autograd/grad_mode.h"
#include "nn/modules.h"
#include "ops/op_utils.h"

namespace mpx::optim {

std::vector<std::pair<std::string, Tensor>> AveragedModel::entries(const nn::Module& m) {
  std::vector<std::pair<std::string, Tensor>> r;
  for (const auto& p : m.named_parameters()) r.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers()) r.emplace_back(b.key(), b.value());
  return r;
}

AveragedModel::AveragedModel(std::shared_ptr<nn::Module> average, const nn::Module& model, AveragedModelOptions options)
    : average_(std::move(average)), options_(std::move(options)) {
  MPX_CHECK(average_ != nullptr, "AveragedModel: the average module is null; build a second instance of the model");
  MPX_CHECK(average_.get() != &model, "AveragedModel: the average must be a second instance of the model's "
            "architecture, not the model itself");
  if (options_.ema_decay())
    MPX_CHECK(*options_.ema_decay() >= 0.0 && *options_.ema_decay() <= 1.0,
              "AveragedModel: ema_decay must lie in [0, 1], got ", *options_.ema_decay());
  // The average starts as the model (PyTorch deep-copies it); buffers too, whatever use_buffers says.
  const auto mine = entries(*average_), theirs = entries(model);
  MPX_CHECK(mine.size() == theirs.size(), "AveragedModel: the average has ", mine.size(), " parameters and buffers, ",
            "the model ", theirs.size(), "; build the average with the model's architecture and options");
  NoGradGuard ng;
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto& [name, a] = mine[i];
    const auto& [mname, m] = theirs[i];
    MPX_CHECK(name == mname && a.sizes() == m.sizes(), "AveragedModel: entry ", i, " of the average is '", name, "' ",
              ops::describe(a), " but the model's is '", mname, "' ", ops::describe(m),
              "; build the average with the model's architecture and options");
    Tensor(a).copy_(m.detach());
  }
}

void AveragedModel::update_parameters(const nn::Module& model) {
  // Parameters first, then buffers: the first `averaged` entries are folded in, the rest (buffers without
  // use_buffers) copied.
  const auto mine = entries(*average_), theirs = entries(model);
  MPX_CHECK(mine.size() == theirs.size(), "AveragedModel::update_parameters: the model has ", theirs.size(),
            " parameters and buffers, the average ", mine.size(), "; pass the model the average was built from");
  const size_t averaged = options_.use_buffers() ? mine.size() : average_->parameters().size();
  NoGradGuard ng;
  for (size_t i = 0; i < mine.size(); ++i) {
    Tensor a = mine[i].second;
    const Tensor& m0 = theirs[i].second;
    MPX_CHECK(a.sizes() == m0.sizes(), "AveragedModel::update_parameters: '", mine[i].first, "' is ",
              ops::describe(a), " in the average but ", ops::describe(m0), " in the model");
    // The model's values in the average's dtype and device: an f32 average of f16 weights averages in f32.
    const Tensor m = m0.detach().to(a.device()).to(a.dtype());
    if (i >= averaged || n_averaged_ == 0) {
      a.copy_(m);
    } else if (options_.avg_fn()) {
      a.copy_(options_.avg_fn()(a, m, n_averaged_));
    } else {
      // EMA: a += (1 - decay) (m - a); SWA: a += (m - a) / (n + 1). Integer buffers (num_batches_tracked) in f64.
      const double w = options_.ema_decay() ? 1.0 - *options_.ema_decay() : 1.0 / static_cast<double>(n_averaged_ + 1);
      if (is_floating(a.dtype())) a.lerp_(m, w);
      else a.copy_(a.to(kFloat64) + (m.to(kFloat64) - a.to(kFloat64)) * w);
    }
  }
  ++n_averaged_;
}

nn::StateDict AveragedModel::state_dict() const {
  nn::StateDict d;
  d.insert("n_averaged", full({}, static_cast<double>(n_averaged_), TensorOptions(kInt64)));
  for (const auto& e : average_->state_dict()) d.insert("module." + e.key(), e.value());
  return d;
}

void AveragedModel::load_state_dict(const nn::StateDict& state) {
  nn::StateDict inner;
  const Tensor* n = nullptr;
  for (const auto& e : state) {
    if (e.key() == "n_averaged") n = &e.value();
    else if (e.key().rfind("module.", 0) == 0) inner.insert(e.key().substr(7), e.value());
    else MPX_ERROR("AveragedModel::load_state_dict: unexpected key '", e.key(), "'; expected 'n_averaged' and ",
                   "'module.' entries (PyTorch's AveragedModel layout)");
  }
  MPX_CHECK(n != nullptr && n->numel() == 1, "AveragedModel::load_state_dict: 'n_averaged' is missing");
  average_->load_state_dict(inner);
  n_averaged_ = static_cast<int64_t>(n->to(kFloat64).item<double>());
}

// ---- SWALR ----

SWALR::SWALR(Optimizer& optimizer, std::vector<double> swa_lr, int64_t anneal_epochs, const std::string& strategy)
    : LRScheduler(optimizer), swa_lrs_(std::move(swa_lr)), anneal_epochs_(anneal_epochs), cosine_(strategy == "cos") {
  MPX_CHECK(strategy == "cos" || strategy == "linear", "SWALR: anneal_strategy must be \"cos\" or \"linear\", got \"",
            strategy, "\"");
  MPX_CHECK(anneal_epochs >= 0, "SWALR: anneal_epochs must be >= 0, got ", anneal_epochs);
  const size_t groups = optimizer.param_groups().size();
  if (swa_lrs_.size() == 1) swa_lrs_.assign(groups, swa_lrs_[0]);
  MPX_CHECK(swa_lrs_.size() == groups, "SWALR: ", swa_lrs_.size(), " swa_lr values for ", groups,
            " param groups; give one, or one per group");
  start_lrs_ = current_lrs();
  initial_step();
}

double SWALR::alpha(double t) const { return cosine_ ? (1.0 - std::cos(std::numbers::pi * t)) / 2.0 : t; }

std::vector<double> SWALR::chained_lr() const {
  // PyTorch's form: recover the annealing's start from the current lr and the previous step's alpha.
  const int64_t step = anneal_epochs_ == 0 ? std::max<int64_t>(1, last_epoch_) : last_epoch_;
  const double span = static_cast<double>(std::max<int64_t>(1, anneal_epochs_));
  const double prev_alpha = alpha(std::clamp(static_cast<double>(step - 1) / span, 0.0, 1.0));
  const double a = alpha(std::clamp(static_cast<double>(step) / span, 0.0, 1.0));
  std::vector<double> r = current_lrs();
  for (size_t g = 0; g < r.size(); ++g) {
    const double start = prev_alpha == 1.0 ? swa_lrs_[g] : (r[g] - prev_alpha * swa_lrs_[g]) / (1.0 - prev_alpha);
    r[g] = swa_lrs_[g] * a + start * (1.0 - a);
  }
  return r;
}

std::vector<double> SWALR::closed_form_lr(int64_t epoch) const {
  const int64_t step = anneal_epochs_ == 0 ? std::max<int64_t>(1, epoch) : epoch;
  const double a =
      alpha(std::clamp(static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, anneal_epochs_)), 0.0, 1.0));
  std::vector<double> r;
  for (size_t g = 0; g < swa_lrs_.size(); ++g) r.push_back(swa_lrs_[g] * a + start_lrs_[g] * (1.0 - a));
  return r;
}

// ---- update_bn ----

void update_bn(nn::Module& model, const std::function<void()>& run_batches) {
  struct Saved {
    nn::BatchNormImplBase* bn;
    std::optional<double> momentum;
  };
  std::vector<Saved> saved;
  for (const auto& m : model.modules()) {
    auto* bn = dynamic_cast<nn::BatchNormImplBase*>(m.get());
    if (bn == nullptr || !bn->options.track_running_stats()) continue;
    bn->reset_running_stats();
    saved.push_back({bn, bn->options.momentum()});
    bn->options.momentum(std::nullopt);
  }
  if (saved.empty()) return;
  const bool was_training = model.is_training();
  model.train();
  try {
    run_batches();
  } catch (...) {
    for (const Saved& s : saved) s.bn->options.momentum(s.momentum);
    model.train(was_training);
    throw;
  }
  for (const Saved& s : saved) s.bn->options.momentum(s.momentum);
  model.train(was_training);
}

}  // namespace mpx::optim
