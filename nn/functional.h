// nn::functional: free-function forms of every layer and loss (LibTorch's torch::nn::functional).
// Use as `namespace F = mpx::nn::functional;`.
#pragma once
#include <optional>

#include "core/tensor.h"
#include "nn/options.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/pooling.h"
#include "ops/shape.h"
#include "nn/rnn_options.h"

namespace mpx::nn::functional {

// ---- the free ops of ops/ that torch.nn.functional (or torch) spells the same: F::gather(...) ----
using mpx::argsort;
using mpx::gather;
using mpx::hardsigmoid;
using mpx::hardswish;
using mpx::logsigmoid;
using mpx::mish;
using mpx::selu;
using mpx::softsign;
using mpx::index_add;
using mpx::index_select;
using mpx::masked_fill;
using mpx::multinomial;
using mpx::one_hot;
using mpx::prelu;
using mpx::scaled_dot_product_attention;
using mpx::scatter;
using mpx::scatter_add;
using mpx::softplus;
using mpx::sort;
using mpx::topk;
using mpx::tril;
using mpx::triu;
using mpx::where;

// ---- activations ----
Tensor relu(const Tensor& x, const ReLUFuncOptions& options = {});
/// min(max(x, 0), 6).
Tensor relu6(const Tensor& x, const ReLU6FuncOptions& options = {});
Tensor leaky_relu(const Tensor& x, const LeakyReLUFuncOptions& options = {});
/// Exact (erf) GELU, or the tanh approximation with GELUFuncOptions().approximate("tanh").
Tensor gelu(const Tensor& x, const GELUFuncOptions& options = {});
Tensor silu(const Tensor& x);
Tensor elu(const Tensor& x, const ELUFuncOptions& options = {});
/// elu with the input divided by alpha: continuously differentiable at 0.
Tensor celu(const Tensor& x, const CELUFuncOptions& options = {});
Tensor hardtanh(const Tensor& x, const HardtanhFuncOptions& options = {});
/// a * sigmoid(b) for the halves of x along options.dim().
Tensor glu(const Tensor& x, const GLUFuncOptions& options = {});
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor softmax(const Tensor& x, const SoftmaxFuncOptions& options);
Tensor log_softmax(const Tensor& x, const LogSoftmaxFuncOptions& options);
/// Inverted dropout (identity when options.training() is false); uses the seeded generator.
Tensor dropout(const Tensor& x, const DropoutFuncOptions& options = {});

// ---- linear and convolution ----
/// x @ w^T + b.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dFuncOptions& options = {});
/// x [N, C, L] or [C, L], weight [out, C/groups, k] (PyTorch's F.conv1d).
Tensor conv1d(const Tensor& x, const Tensor& weight, const Conv1dFuncOptions& options = {});
/// x [N, C, L] or [C, L], weight [C, out/groups, k] (PyTorch's F.conv_transpose1d).
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const ConvTranspose1dFuncOptions& options = {});
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const ConvTranspose2dFuncOptions& options = {});

// ---- pooling ----
Tensor max_pool2d(const Tensor& x, const MaxPool2dFuncOptions& options);
Tensor avg_pool2d(const Tensor& x, const AvgPool2dFuncOptions& options);
/// `F::max_pool2d(x, 2)` (square kernel, stride = kernel) and the explicit forms: mpx's own.
using mpx::avg_pool2d;
using mpx::max_pool2d;
Tensor adaptive_avg_pool2d(const Tensor& x, const AdaptiveAvgPool2dFuncOptions& options);

// ---- normalization ----
/// Batch norm over dim 1 with the given running statistics (either may be undefined when
/// training). In training, running stats are updated in place with options.momentum().
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& options = {});
Tensor layer_norm(const Tensor& x, const LayerNormFuncOptions& options);
/// x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape dims (PyTorch's F.rms_norm).
Tensor rms_norm(const Tensor& x, const RMSNormFuncOptions& options);
Tensor group_norm(const Tensor& x, const GroupNormFuncOptions& options);

// ---- losses ----
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyFuncOptions& options = {});
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossFuncOptions& options = {});
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BinaryCrossEntropyWithLogitsFuncOptions& options = {});
/// BCE on probabilities; refused under autocast (use binary_cross_entropy_with_logits).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const BinaryCrossEntropyFuncOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& options = {});
Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& options = {});
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossFuncOptions& options = {});
/// input: log-probabilities; target: probabilities (log-probabilities with log_target). mpx::kl_div.
Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& options = {});
/// log_probs [T, N, C], targets [N, S] or concatenated, lengths i64 [N]: mpx::ctc_loss.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CTCLossFuncOptions& options = {});
/// x / max(||x||_p, eps) along options.dim (PyTorch's F.normalize; the norm in f32 under autocast).
Tensor normalize(const Tensor& x, const NormalizeFuncOptions& options = {});
/// mpx::cosine_similarity along options.dim.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, const CosineSimilarityFuncOptions& options = {});

// ---- shape ----
/// Flattens dims start_dim..end_dim into one (torch.flatten's defaults: all dims).
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
/// mpx::pad with options: `F::pad(x, F::PadFuncOptions({1, 1, 2, 2}).mode(F::kReflect))`; negative pads crop.
Tensor pad(const Tensor& x, const PadFuncOptions& options);
/// Rows of `weight` [num_embeddings, dim] selected by the i64 or i32 `indices` -> [*indices.shape, dim],
/// in the weight's dtype (also under autocast). With padding_idx (negative counts from the end)
/// that row receives no gradient; with max_norm, the rows looked up are first renormalized in
/// place to a norm_type-norm of at most max_norm (mpx::embedding_renorm_, as PyTorch).
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt,
                 std::optional<double> max_norm = std::nullopt, double norm_type = 2.0);

}  // namespace mpx::nn::functional
