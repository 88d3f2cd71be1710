// Weight averaging (PyTorch's torch.optim.swa_utils): AveragedModel (SWA's equal-weight mean or an EMA of the
// weights), the SWALR schedule and update_bn.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/arg.h"
#include "nn/module.h"
#include "optim/scheduler.h"

namespace mpx::optim {

/// avg_fn(averaged, current, num_averaged): the new average of one tensor (PyTorch's avg_fn).
using AvgFn = std::function<Tensor(const Tensor& averaged, const Tensor& current, int64_t num_averaged)>;

struct AveragedModelOptions {
  /// An exponential moving average with this decay (PyTorch's multi_avg_fn=get_ema_multi_avg_fn(decay)): each
  /// update moves the average by (1 - decay) of the way to the model. Unset: SWA's equal-weight running mean.
  MPX_ARG(std::optional<double>, ema_decay) = std::nullopt;
  /// Any other averaging rule; takes precedence over ema_decay.
  MPX_ARG(AvgFn, avg_fn) = nullptr;
  /// Average the buffers too (batch norm's running statistics); otherwise they are copied from the model.
  MPX_ARG(bool, use_buffers) = false;
};

/// A running average of a model's weights, kept in a second instance of its architecture (PyTorch's
/// AveragedModel; C++ modules cannot be deep-copied generically, so the caller builds `average` as it built the
/// model). The average takes the model's parameters and buffers at construction, converted to its own dtypes and
/// device: build it in f32 while the model trains in f16/bf16 (amp O2/O3) and the average keeps f32 precision.
/// Evaluate through the average's own holder; `update_parameters` after each optimizer step (or epoch).
///
///     Net ema_net;  // same architecture as `net`
///     optim::AveragedModel ema(ema_net.ptr(), *net, optim::AveragedModelOptions().ema_decay(0.999));
///     ... opt.step(); ema.update_parameters(*net); ... ema_net(x)
class AveragedModel {
 public:
  AveragedModel(std::shared_ptr<nn::Module> average, const nn::Module& model, AveragedModelOptions options = {});

  /// Folds the model's current parameters (and buffers with use_buffers) into the average; the first call after
  /// construction copies them, as PyTorch's. Without use_buffers the buffers are copied. The model must have the
  /// average's architecture (the same names and shapes, in order).
  void update_parameters(const nn::Module& model);
  /// The averaged instance.
  nn::Module& module() { return *average_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return average_; }
  /// Updates folded in so far (PyTorch's n_averaged buffer).
  int64_t n_averaged() const { return n_averaged_; }
  /// PyTorch's layout: "n_averaged" and the averaged module's entries under "module.".
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

 private:
  /// m's parameters, then its buffers, by name.
  static std::vector<std::pair<std::string, Tensor>> entries(const nn::Module& m);

  std::shared_ptr<nn::Module> average_;
  AveragedModelOptions options_;
  int64_t n_averaged_ = 0;
};

/// Anneals each group's learning rate from its value at construction to swa_lr over anneal_epochs steps, then keeps
/// it there (PyTorch's SWALR): lr = swa_lr * a + lr_start * (1 - a), with a = (1 - cos(pi t)) / 2 ("cos") or t
/// ("linear") for t = min(1, step / anneal_epochs). One swa_lr for every group, or one per group.
class SWALR : public LRScheduler {
 public:
  SWALR(Optimizer& optimizer, std::vector<double> swa_lr, int64_t anneal_epochs = 10,
        const std::string& anneal_strategy = "cos");
  SWALR(Optimizer& optimizer, double swa_lr, int64_t anneal_epochs = 10, const std::string& anneal_strategy = "cos")
      : SWALR(optimizer, std::vector<double>{swa_lr}, anneal_epochs, anneal_strategy) {}
  std::vector<double> closed_form_lr(int64_t epoch) const override;

 protected:
  std::vector<double> chained_lr() const override;

 private:
  double alpha(double t) const;

  std::vector<double> swa_lrs_, start_lrs_;
  int64_t anneal_epochs_;
  bool cosine_;
};

/// Recomputes every batch norm's running statistics of `model` as the plain mean over one pass of data (PyTorch's
/// update_bn): resets them, sets momentum to None (a cumulative average), calls `run_batches` (which runs the model's
/// forward over the data), then restores the momenta and the training mode. The averaged weights of SWA need this:
/// the statistics the model gathered belong to other weights.
void update_bn(nn::Module& model, const std::function<void()>& run_batches);

}  // namespace mpx::optim
