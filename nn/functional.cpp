// nn::functional: thin, option-struct front ends over the differentiable ops in ops/.
#include "nn/functional.h"

#include <algorithm>
#include <cmath>

#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/ctc.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/op_utils.h"
#include "ops/pad.h"
#include "ops/pooling.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx::nn::functional {

// ---- activations ----
Tensor relu(const Tensor& x, const ReLUFuncOptions&) { return mpx::relu(x); }
Tensor relu6(const Tensor& x, const ReLU6FuncOptions&) { return mpx::clamp(x, 0.0, 6.0); }
Tensor leaky_relu(const Tensor& x, const LeakyReLUFuncOptions& o) { return mpx::leaky_relu(x, o.negative_slope()); }
Tensor gelu(const Tensor& x, const GELUFuncOptions& o) { return mpx::gelu(x, o.approximate()); }
Tensor silu(const Tensor& x) { return mpx::silu(x); }
Tensor sigmoid(const Tensor& x) { return mpx::sigmoid(x); }
Tensor tanh(const Tensor& x) { return mpx::tanh(x); }
Tensor softmax(const Tensor& x, const SoftmaxFuncOptions& o) { return mpx::softmax(x, o.dim(), o.dtype()); }
Tensor log_softmax(const Tensor& x, const LogSoftmaxFuncOptions& o) { return mpx::log_softmax(x, o.dim(), o.dtype()); }
Tensor dropout(const Tensor& x, const DropoutFuncOptions& o) {
  MPX_CHECK(o.p() >= 0.0 && o.p() <= 1.0, "dropout: probability must be in [0, 1], got ", o.p());
  return mpx::dropout(x, o.p(), o.training());
}

// ---- linear and convolution ----
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { return mpx::linear(x, weight, bias); }
Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dFuncOptions& o) {
  return mpx::conv2d(x, weight, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}
Tensor conv1d(const Tensor& x, const Tensor& weight, const Conv1dFuncOptions& o) {
  return mpx::conv1d(x, weight, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const ConvTranspose1dFuncOptions& o) {
  return mpx::conv_transpose1d(x, w, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(), o.dilation());
}
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const ConvTranspose2dFuncOptions& o) {
  return mpx::conv_transpose2d(x, weight, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(),
                               o.dilation());
}

// ---- pooling ----
Tensor max_pool2d(const Tensor& x, const MaxPool2dFuncOptions& o) {
  return mpx::max_pool2d(x, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}
Tensor avg_pool2d(const Tensor& x, const AvgPool2dFuncOptions& o) {
  return mpx::avg_pool2d(x, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(), o.count_include_pad());
}
Tensor adaptive_avg_pool2d(const Tensor& x, const AdaptiveAvgPool2dFuncOptions& o) {
  return mpx::adaptive_avg_pool2d(x, o.output_size());
}

// ---- normalization ----
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& o) {
  MPX_CHECK(o.training() || (running_mean.defined() && running_var.defined()),
            "batch_norm: running_mean and running_var are required when training is false; pass "
            "BatchNormFuncOptions().training(true) to normalize with batch statistics");
  return mpx::batch_norm(x, running_mean, running_var, o.weight(), o.bias(), o.training(), o.momentum().value_or(0.1),
                         o.eps());
}
Tensor layer_norm(const Tensor& x, const LayerNormFuncOptions& o) {
  return mpx::layer_norm(x, o.normalized_shape(), o.weight(), o.bias(), o.eps());
}
Tensor rms_norm(const Tensor& x, const RMSNormFuncOptions& o) {
  return mpx::rms_norm(x, o.normalized_shape(), o.weight(), o.eps().value_or(-1.0));
}
Tensor group_norm(const Tensor& x, const GroupNormFuncOptions& o) {
  return mpx::group_norm(x, o.num_groups(), o.weight(), o.bias(), o.eps());
}

// ---- losses ----
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyFuncOptions& o) {
  return mpx::cross_entropy(input, target, o.reduction(), o.ignore_index(), o.label_smoothing(), o.weight());
}
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossFuncOptions& o) {
  return mpx::nll_loss(input, target, o.reduction(), o.ignore_index(), o.weight());
}
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BinaryCrossEntropyWithLogitsFuncOptions& o) {
  return mpx::binary_cross_entropy_with_logits(input, target, o.reduction(), o.weight(), o.pos_weight());
}
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BinaryCrossEntropyFuncOptions& o) {
  return mpx::binary_cross_entropy(input, target, o.reduction(), o.weight());
}
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& o) {
  return mpx::mse_loss(input, target, o.reduction());
}
Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& o) {
  return mpx::l1_loss(input, target, o.reduction());
}
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossFuncOptions& o) {
  return mpx::smooth_l1_loss(input, target, o.reduction(), o.beta());
}

// ---- shape ----
Tensor elu(const Tensor& x, const ELUFuncOptions& o) { return mpx::elu(x, o.alpha()); }
Tensor celu(const Tensor& x, const CELUFuncOptions& o) { return mpx::celu(x, o.alpha()); }
Tensor hardtanh(const Tensor& x, const HardtanhFuncOptions& o) {
  MPX_CHECK(o.min_val() <= o.max_val(), "hardtanh: min_val (", o.min_val(), ") is greater than max_val (", o.max_val(), ")");
  return mpx::hardtanh(x, o.min_val(), o.max_val());
}
Tensor glu(const Tensor& x, const GLUFuncOptions& o) { return mpx::glu(x, o.dim()); }

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CTCLossFuncOptions& o) {
  return mpx::ctc_loss(log_probs, targets, input_lengths, target_lengths, o.blank(), o.reduction().value,
                       o.zero_infinity());
}

Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& o) {
  return mpx::kl_div(input, target, o.reduction(), o.log_target());
}
Tensor normalize(const Tensor& x, const NormalizeFuncOptions& o) {
  MPX_CHECK(x.defined(), "normalize: input is undefined");
  const int64_t dim = wrap_dim(o.dim(), std::max<int64_t>(x.dim(), 1), "normalize: dim");
  return x / clamp_min(vector_norm(x, o.p(), {dim}, true), o.eps());
}
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, const CosineSimilarityFuncOptions& o) {
  return mpx::cosine_similarity(x1, x2, o.dim(), o.eps());
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) { return x.flatten(start_dim, end_dim); }

Tensor pad(const Tensor& x, const PadFuncOptions& o) {
  return mpx::pad(x, o.pad(), pad_mode_name(o.mode()), o.value());
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx,
                 std::optional<double> max_norm, double norm_type) {
  MPX_CHECK(weight.defined() && weight.dim() == 2, "embedding: weight must be [num_embeddings, dim], got ",
            ops::describe(weight));
  const int64_t n = weight.size(0);
  int64_t pad = -1;
  if (padding_idx) {
    pad = *padding_idx < 0 ? *padding_idx + n : *padding_idx;
    MPX_CHECK(pad >= 0 && pad < n, "embedding: padding_idx ", *padding_idx, " is out of range for ", n, " embeddings");
  }
  if (max_norm) mpx::embedding_renorm_(weight, indices, *max_norm, norm_type);
  return mpx::embedding(weight, indices, pad);
}

}  // namespace mpx::nn::functional
