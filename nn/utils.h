// nn::utils: gradient clipping (clip_grad_norm_, clip_grad_value_), norms and flat vectors over parameter lists.
#pragma once
#include <initializer_list>
#include <limits>
#include <vector>

#include "core/tensor.h"

namespace mpx::nn::utils {

/// Scales the gradients of `parameters` in place so that their combined norm (the norm of
/// the per-tensor norms) is at most max_norm, and returns the total norm before clipping.
/// norm_type may be any p > 0 or infinity (max |g|). Parameters without a gradient are
/// skipped (total 0 when none has one). A non-finite total norm throws when
/// error_if_nonfinite, otherwise the gradients are still scaled (as PyTorch does, which
/// turns them into NaN so a loss scaler skips the step).
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
double clip_grad_norm_(std::initializer_list<Tensor> parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

/// Clamps every gradient element into [-clip_value, clip_value] in place.
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);
void clip_grad_value_(std::initializer_list<Tensor> parameters, double clip_value);
void clip_grad_value_(const Tensor& parameter, double clip_value);

/// The norm of the tensors' norms (PyTorch's get_total_norm; what clip_grad_norm_ clips): a 0-d f64 tensor on
/// the first tensor's device, 0 for none. error_if_nonfinite reads it back and throws on inf or NaN.
Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0, bool error_if_nonfinite = false);

/// The parameters flattened and concatenated into one 1-d tensor (differentiable, as PyTorch's).
Tensor parameters_to_vector(const std::vector<Tensor>& parameters);
/// Copies consecutive slices of vec into the parameters, in order (no gradient recorded); vec must hold exactly
/// as many elements as they do.
void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters);

}  // namespace mpx::nn::utils
