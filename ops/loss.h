// Loss functions. All compute in f32 (or f64) whatever the input dtype.
#pragma once
#include <string>

#include "core/tensor.h"

namespace mpx {

/// How a loss combines per-element values.
enum class Reduction { None, Mean, Sum };

/// logits [N, C] or [N, C, d1, ...], target i64 class indices [N] / [N, d1, ...].
/// ignore_index targets contribute nothing (and are excluded from the mean);
/// label_smoothing mixes the one-hot target with the uniform distribution.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0, const Tensor& weight = {});
/// On a GPU, class targets are validated on the device and the result reaches the host one call
/// later (a step never waits for it): this raises the error of any finished check that found an
/// out-of-range class. With `wait`, it first waits for every pending check. cross_entropy and
/// nll_loss call it themselves.
void report_target_checks(bool wait = false);
/// Negative log-likelihood of log-probabilities [N, C] (or [N, C, ...]) with i64 targets.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100, const Tensor& weight = {});
/// ATen's argument order, `torch::nll_loss(out, target, /*weight=*/{}, torch::Reduction::Sum)`.
inline Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                       Reduction reduction = Reduction::Mean, int64_t ignore_index = -100) {
  return nll_loss(log_probs, target, reduction, ignore_index, weight);
}
/// Numerically stable sigmoid + binary cross-entropy; pos_weight optional.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::Mean, const Tensor& weight = {},
                                        const Tensor& pos_weight = {});
/// BCE on probabilities; banned under autocast (use binary_cross_entropy_with_logits).
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                            const Tensor& weight = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);

/// Huber loss (PyTorch's huber_loss): 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); d = input - target.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);
/// Poisson negative log-likelihood: exp(input) - target * input (log_input), else input - target * log(input + eps);
/// full adds Stirling's approximation of log(target!) where target > 1. Autocast: fp32.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input = true, bool full = false,
                        double eps = 1e-8, Reduction reduction = Reduction::Mean);
/// Gaussian negative log-likelihood 0.5 (log(var) + (input - target)^2 / var) (+ 0.5 log(2 pi) with full), var clamped
/// below at eps in value only (the gradient passes as PyTorch's in-place clamp lets it). var: input's shape, that
/// shape without the last dim, or a last dim of 1; negative entries are an error. Autocast: fp32.
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, bool full = false,
                         double eps = 1e-6, Reduction reduction = Reduction::Mean);
/// Kullback-Leibler divergence of `target` from `input` log-probabilities (PyTorch's kl_div): pointwise
/// target * (log(target) - input), 0 where target is 0 (with log_target, target holds log-probabilities:
/// exp(target) * (target - input)). reduction "mean" (over elements, PyTorch's default), "batchmean" (the sum over
/// the batch size: the mathematical KL divergence), "sum" or "none". Autocast: fp32.
Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction = "mean", bool log_target = false);

/// Parses "none" | "mean" | "sum".
Reduction reduction_from_name(const std::string& name);

}  // namespace mpx

namespace mpx::kernels {
/// Gather along the class dim: out[n, i] = in[n, target[n, i], i] (0 where target is
/// ignore_index). `in` is a [N, C, inner] view with any strides (stride 0 allowed for an
/// expanded class weight); target is contiguous i64 [N, inner]; out contiguous [N, inner].
using NllPickFn = void (*)(const Tensor& out, const Tensor& in, const Tensor& target, int64_t ignore_index);
/// The adjoint scatter: out (contiguous [N, C, inner], zeroed by the kernel) gets
/// g[n, i] at class target[n, i]; ignored targets scatter nothing.
using NllScatterFn = void (*)(const Tensor& out, const Tensor& g, const Tensor& target, int64_t ignore_index);
/// Cross-entropy of each row of contiguous logits x [N, C], read in their own dtype and computed in f32 (f64 for
/// f64): lse[r] = log sum_c exp(x[r, c]) and loss[r] = formulas::cross_entropy_row_loss, 0 where target[r] is
/// ignore_index, NaN where it is out of range (the op layer reports it). loss, lse: contiguous [N], compute dtype.
using CrossEntropyRowsFn = void (*)(const Tensor& loss, const Tensor& lse, const Tensor& x, const Tensor& target,
                                    int64_t ignore_index, double smoothing);
/// dx (contiguous [N, C], x's dtype) = formulas::cross_entropy_row_grad with the row's gradient g[r] (compute dtype,
/// [N]) and p = exp(x - lse); rows whose target is ignored or out of range get 0.
using CrossEntropyRowsBackwardFn = void (*)(const Tensor& dx, const Tensor& g, const Tensor& x, const Tensor& target,
                                            const Tensor& lse, int64_t ignore_index, double smoothing);
}  // namespace mpx::kernels
