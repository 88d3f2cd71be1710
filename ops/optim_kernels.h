// Kernel signatures of the fused multi-tensor optimizer steps (ops.def rows sgd_step, adam_step, rmsprop_step, adagrad_step, lamb_step).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mpx::kernels {

/// The tensors one fused optimizer kernel call updates; entry i of every list belongs to
/// parameter i. All tensors of one entry share shape and strides and are dense (row-major or
/// channels-last), so a kernel may walk them as flat arrays.
struct StepTensors {
  /// What the update is computed on: the f32 master of a f16/bf16 parameter, or the parameter
  /// itself, in the kernel's dtype (f32 or f64) or, for an f32 kernel, f16/bf16 (a parameter
  /// without master: read as f32, the result rounded once, to nearest or stochastically).
  tensor_list params;
  /// Gradients, any floating dtype (read as the kernel's dtype).
  tensor_list grads;
  /// Low-precision model copies to overwrite with the rounded result (undefined when
  /// params[i] is the model parameter).
  tensor_list models;
  /// states[k][i]: the k-th state buffer of parameter i, in params[i]'s dtype, or f32 for a
  /// f16/bf16 params[i] under stochastic rounding. SGD: {momentum} (undefined when momentum is
  /// 0); Adam: {exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad only)}; RMSprop: {square_avg,
  /// then momentum_buffer (momentum > 0 only), then grad_avg (centered only)}; Adagrad: {sum};
  /// LAMB: {exp_avg, exp_avg_sq}.
  std::vector<tensor_list> states;
  /// Per parameter: the step number being taken (1 for the first; Adam's bias corrections),
  /// unless `counts` is given.
  std::vector<int64_t> steps;
  /// Per parameter: true when its state buffers were just created (SGD initialises the
  /// momentum buffer to the gradient, as PyTorch does).
  std::vector<uint8_t> fresh;
  /// Optional amp inputs that keep a mixed-precision step free of host synchronization (all
  /// f32 0-dim tensors on the parameters' device). found_inf != 0: the kernel leaves every
  /// tensor untouched (the overflow skip, decided where the flag lives). inv_scale: gradients
  /// are multiplied by it as they are read (an unscale fused into the step).
  Tensor found_inf, inv_scale;
  /// Optional, per parameter: an f64 0-dim tensor on its device counting the steps it has taken.
  /// Given, the step number is counts[i] + 1 (steps[i] is ignored), the state is fresh when
  /// fresh[i] is set or counts[i] is 0, and a step that is not skipped adds 1 to each. The
  /// numbering then lives where the kernels run: steps skipped on the device's found_inf flag
  /// keep it true without a host read, and a CUDA graph's replays (whose host arguments are
  /// frozen at capture) advance it.
  tensor_list counts;
  /// Stochastic rounding (Optimizer::set_stochastic_rounding): every store into a f16/bf16
  /// params[i] or f16/bf16 state buffer rounds stochastically (ops/stochastic_round.h) with the
  /// words of sround::draw(seed, ids[i], step number, element index); off, to nearest even.
  bool stochastic_rounding = false;
  uint64_t seed = 0;
  /// Per parameter, with stochastic_rounding: its index in the optimizer, the Philox stream that
  /// keeps two parameters' draws apart.
  std::vector<uint32_t> ids;
};

/// Hyper-parameters of an SGD step with PyTorch's semantics.
struct SgdHyper {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

/// Hyper-parameters of an Adam / AdamW step (torch 1.13's single-tensor formulas).
struct AdamHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * wd instead of g += wd * p
  bool amsgrad = false, maximize = false;
};

/// Hyper-parameters of an RMSprop step (torch.optim.RMSprop's single-tensor formulas).
struct RmspropHyper {
  double lr = 0, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0;
  bool centered = false, maximize = false;
};

/// Hyper-parameters of an Adagrad step (torch.optim.Adagrad's single-tensor formulas). A fresh
/// `sum` buffer holds zeros; the kernel reads it as initial_accumulator_value instead.
struct AdagradHyper {
  double lr = 0, lr_decay = 0, weight_decay = 0, eps = 1e-10, initial_accumulator_value = 0;
  bool maximize = false;
};

/// Hyper-parameters of a LAMB step (apex's FusedLAMB: multi_tensor_lamb's two stages). Per
/// parameter: g /= max(1, global_grad_norm / max_grad_norm) (no clipping when max_grad_norm <= 0);
/// L2 mode (adam_w_mode false): g += wd * p; m = b1 m + b3 g (b3 = 1 - b1 with grad_averaging,
/// else 1); v = b2 v + (1 - b2) g^2; u = (m / bc1) / (sqrt(v / bc2) + eps) (bc = 1 without
/// bias_correction); decoupled mode: u += wd * p; then with the norms of p (before the step) and
/// u, p -= r u with r = lr * |p| / |u| when weight decay is on or use_nvlamb (and both norms are
/// non-zero), else r = lr.
struct LambHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0, max_grad_norm = 1.0;
  bool bias_correction = true, grad_averaging = true, adam_w_mode = true, use_nvlamb = false;
  /// The norm of every gradient the whole step reads, unscaled (f64 0-dim on the parameters'
  /// device; computed before the first group, as apex does over all groups).
  Tensor global_grad_norm;
};

using SgdStepFn = void (*)(const StepTensors& tensors, const SgdHyper& hyper);
using AdamStepFn = void (*)(const StepTensors& tensors, const AdamHyper& hyper);
using RmspropStepFn = void (*)(const StepTensors& tensors, const RmspropHyper& hyper);
using AdagradStepFn = void (*)(const StepTensors& tensors, const AdagradHyper& hyper);
using LambStepFn = void (*)(const StepTensors& tensors, const LambHyper& hyper);

}  // namespace mpx::kernels
