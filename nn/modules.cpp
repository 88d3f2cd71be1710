// nn layers and losses: construction with PyTorch's reset_parameters, forward via nn::functional.
#include "nn/modules.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/op_utils.h"
#include "ops/pad.h"

namespace mpx::nn {

namespace F = functional;

namespace {
std::ostream& operator<<(std::ostream& os, const ExpandingArray2& a) { return os << "[" << a[0] << ", " << a[1] << "]"; }
const char* bool_str(bool b) { return b ? "true" : "false"; }

/// PyTorch's Linear/_ConvNd.reset_parameters: kaiming_uniform_(a=sqrt(5)) on the weight,
/// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias.
void reset_weight_and_bias(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

void check_positive(int64_t v, const char* module, const char* what) {
  MPX_CHECK(v > 0, module, ": ", what, " must be positive, got ", v);
}

// The channel checks every convolution module makes.
void check_channels(const char* module, int64_t in, int64_t out, int64_t groups) {
  check_positive(in, module, "in_channels");
  check_positive(out, module, "out_channels");
  check_positive(groups, module, "groups");
  MPX_CHECK(in % groups == 0 && out % groups == 0, module, ": in_channels (", in, ") and out_channels (", out,
            ") must be divisible by groups (", groups, ")");
}
}  // namespace

// ---------------------------------------------------------------- Linear

LinearImpl::LinearImpl(const LinearOptions& o) : options(o) {
  MPX_CHECK(o.in_features() >= 0 && o.out_features() >= 0, "Linear: in_features (", o.in_features(),
            ") and out_features (", o.out_features(), ") must be non-negative");
  weight = register_parameter("weight", empty({o.out_features(), o.in_features()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_features()}));
  reset_parameters();
}
void LinearImpl::reset_parameters() { reset_weight_and_bias(weight, bias); }
Tensor LinearImpl::forward(const Tensor& x) { return F::linear(x, weight, bias); }
void LinearImpl::pretty_print(std::ostream& os) const {
  os << "Linear(in_features=" << options.in_features() << ", out_features=" << options.out_features()
     << ", bias=" << bool_str(options.bias()) << ")";
}

// ---------------------------------------------------------------- Conv2d

Conv2dImpl::Conv2dImpl(const Conv2dOptions& o) : options(o) {
  check_channels("Conv2d", o.in_channels(), o.out_channels(), o.groups());
  check_positive(o.kernel_size()[0], "Conv2d", "kernel_size[0]");
  check_positive(o.kernel_size()[1], "Conv2d", "kernel_size[1]");
  weight = register_parameter(
      "weight", empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()[0], o.kernel_size()[1]}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}
void Conv2dImpl::reset_parameters() { reset_weight_and_bias(weight, bias); }
Tensor Conv2dImpl::forward(const Tensor& x) {
  const bool zeros = options.padding_mode() == kZeros;
  const ExpandingArray2 p = options.padding();
  return F::conv2d(zeros ? x : mpx::pad(x, {p[1], p[1], p[0], p[0]}, pad_mode_name(options.padding_mode())), weight,
                   F::Conv2dFuncOptions()
                       .bias(bias)
                       .stride(options.stride())
                       .padding(zeros ? p : ExpandingArray2(0))
                       .dilation(options.dilation())
                       .groups(options.groups()));
}
void Conv2dImpl::pretty_print(std::ostream& os) const {
  os << "Conv2d(" << options.in_channels() << ", " << options.out_channels() << ", kernel_size=" << options.kernel_size()
     << ", stride=" << options.stride();
  if (options.padding() != ExpandingArray2(0)) os << ", padding=" << options.padding();
  if (options.dilation() != ExpandingArray2(1)) os << ", dilation=" << options.dilation();
  if (options.groups() != 1) os << ", groups=" << options.groups();
  if (!options.bias()) os << ", bias=false";
  if (options.padding_mode() != kZeros) os << ", padding_mode=" << pad_mode_name(options.padding_mode());
  os << ")";
}

// ---------------------------------------------------------------- Conv1d

Conv1dImpl::Conv1dImpl(const Conv1dOptions& o) : options(o) {
  check_positive(o.kernel_size(), "Conv1d", "kernel_size");
  check_channels("Conv1d", o.in_channels(), o.out_channels(), o.groups());
  weight = register_parameter("weight", empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}
void Conv1dImpl::reset_parameters() { reset_weight_and_bias(weight, bias); }
Tensor Conv1dImpl::forward(const Tensor& x) {
  const bool zeros = options.padding_mode() == kZeros;
  const int64_t p = options.padding();
  return F::conv1d(zeros ? x : mpx::pad(x, {p, p}, pad_mode_name(options.padding_mode())), weight,
                   F::Conv1dFuncOptions()
                       .bias(bias)
                       .stride(options.stride())
                       .padding(zeros ? p : 0)
                       .dilation(options.dilation())
                       .groups(options.groups()));
}
namespace {
// Conv1d and ConvTranspose1d as PyTorch prints them; output_padding (the transposed one's) only when set.
template <typename O>
void print_conv1d(std::ostream& os, const char* name, const O& o, int64_t output_padding) {
  os << name << "(" << o.in_channels() << ", " << o.out_channels() << ", kernel_size=(" << o.kernel_size()
     << ",), stride=(" << o.stride() << ",)";
  if (o.padding() != 0) os << ", padding=(" << o.padding() << ",)";
  if (output_padding != 0) os << ", output_padding=(" << output_padding << ",)";
  if (o.dilation() != 1) os << ", dilation=(" << o.dilation() << ",)";
  if (o.groups() != 1) os << ", groups=" << o.groups();
  if (!o.bias()) os << ", bias=false";
  if constexpr (requires { o.padding_mode(); })
    if (o.padding_mode() != kZeros) os << ", padding_mode=" << pad_mode_name(o.padding_mode());
  os << ")";
}
}  // namespace
void Conv1dImpl::pretty_print(std::ostream& os) const { print_conv1d(os, "Conv1d", options, 0); }

// ---------------------------------------------------------------- ConvTranspose1d

ConvTranspose1dImpl::ConvTranspose1dImpl(const ConvTranspose1dOptions& o) : options(o) {
  check_positive(o.kernel_size(), "ConvTranspose1d", "kernel_size");
  check_channels("ConvTranspose1d", o.in_channels(), o.out_channels(), o.groups());
  weight = register_parameter("weight", empty({o.in_channels(), o.out_channels() / o.groups(), o.kernel_size()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}
void ConvTranspose1dImpl::reset_parameters() { reset_weight_and_bias(weight, bias); }
Tensor ConvTranspose1dImpl::forward(const Tensor& x) {
  return F::conv_transpose1d(x, weight,
                             F::ConvTranspose1dFuncOptions()
                                 .bias(bias)
                                 .stride(options.stride())
                                 .padding(options.padding())
                                 .output_padding(options.output_padding())
                                 .groups(options.groups())
                                 .dilation(options.dilation()));
}
void ConvTranspose1dImpl::pretty_print(std::ostream& os) const {
  print_conv1d(os, "ConvTranspose1d", options, options.output_padding());
}

// ---------------------------------------------------------------- ConvTranspose2d

ConvTranspose2dImpl::ConvTranspose2dImpl(const ConvTranspose2dOptions& o) : options(o) {
  check_channels("ConvTranspose2d", o.in_channels(), o.out_channels(), o.groups());
  check_positive(o.kernel_size()[0], "ConvTranspose2d", "kernel_size[0]");
  check_positive(o.kernel_size()[1], "ConvTranspose2d", "kernel_size[1]");
  weight = register_parameter(
      "weight", empty({o.in_channels(), o.out_channels() / o.groups(), o.kernel_size()[0], o.kernel_size()[1]}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}
void ConvTranspose2dImpl::reset_parameters() { reset_weight_and_bias(weight, bias); }
Tensor ConvTranspose2dImpl::forward(const Tensor& x) {
  return F::conv_transpose2d(x, weight,
                             F::ConvTranspose2dFuncOptions()
                                 .bias(bias)
                                 .stride(options.stride())
                                 .padding(options.padding())
                                 .output_padding(options.output_padding())
                                 .groups(options.groups())
                                 .dilation(options.dilation()));
}
void ConvTranspose2dImpl::pretty_print(std::ostream& os) const {
  os << "ConvTranspose2d(" << options.in_channels() << ", " << options.out_channels()
     << ", kernel_size=" << options.kernel_size() << ", stride=" << options.stride();
  if (options.padding() != ExpandingArray2(0)) os << ", padding=" << options.padding();
  if (options.output_padding() != ExpandingArray2(0)) os << ", output_padding=" << options.output_padding();
  if (options.dilation() != ExpandingArray2(1)) os << ", dilation=" << options.dilation();
  if (options.groups() != 1) os << ", groups=" << options.groups();
  if (!options.bias()) os << ", bias=false";
  os << ")";
}

// ---------------------------------------------------------------- BatchNorm

Tensor BatchNormImplBase::forward(const Tensor& x) { return run(x, Tensor(), false); }
Tensor BatchNormImplBase::forward_add_relu(const Tensor& x, const Tensor& residual) {
  if (has_forward_hooks()) return F::relu(detail::call_forward_hooked(*this, x) + residual);
  return run(x, residual, true);
}
Tensor BatchNormImplBase::forward_relu(const Tensor& x) {
  if (has_forward_hooks()) return F::relu(detail::call_forward_hooked(*this, x));
  return run(x, Tensor(), true);
}
Tensor BatchNormImplBase::run(const Tensor& x, const Tensor& residual, bool relu) {
  check_input_dim(x);
  MPX_CHECK(x.size(1) == options.num_features(), name(), ": expected ", options.num_features(),
            " channels in dim 1, got input ", ops::describe(x));
  double factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats()) {
    NoGradGuard ng;
    num_batches_tracked.add_(1.0);
    // momentum = None: a cumulative moving average over the batches seen so far.
    if (!options.momentum()) factor = 1.0 / num_batches_tracked.item<double>();
  }
  // Without running statistics eval also normalizes with the batch's own statistics.
  const bool use_batch_stats = is_training() || !running_mean.defined();
  const bool pass_running = !is_training() || options.track_running_stats();
  const Tensor rm = pass_running ? running_mean : Tensor(), rv = pass_running ? running_var : Tensor();
  if (sync_forward && is_training()) {
    Tensor y = sync_forward(*this, x, factor);
    if (residual.defined()) y = y + residual;
    return relu ? F::relu(y) : y;
  }
  if (residual.defined())
    return mpx::batch_norm_add_relu(x, residual, rm, rv, weight, bias, use_batch_stats, factor, options.eps());
  if (relu) return mpx::batch_norm_relu(x, rm, rv, weight, bias, use_batch_stats, factor, options.eps());
  return F::batch_norm(x, rm, rv,
                       F::BatchNormFuncOptions()
                           .weight(weight)
                           .bias(bias)
                           .training(use_batch_stats)
                           .momentum(factor)
                           .eps(options.eps()));
}
void BatchNorm1dImpl::check_input_dim(const Tensor& x) const {
  MPX_CHECK(x.dim() == 2 || x.dim() == 3, "BatchNorm1d: expected 2D or 3D input ([N, C] or [N, C, L]), got ",
            ops::describe(x));
}
void BatchNorm2dImpl::check_input_dim(const Tensor& x) const {
  MPX_CHECK(x.dim() == 4, "BatchNorm2d: expected 4D input [N, C, H, W], got ", ops::describe(x));
}

// ---------------------------------------------------------------- LayerNorm, GroupNorm, Embedding

LayerNormImpl::LayerNormImpl(const LayerNormOptions& o) : options(o) {
  MPX_CHECK(!o.normalized_shape().empty(), "LayerNorm: normalized_shape must not be empty");
  if (o.elementwise_affine()) {
    weight = register_parameter("weight", empty(o.normalized_shape()));
    if (o.bias()) bias = register_parameter("bias", empty(o.normalized_shape()));
  }
  reset_parameters();
}
void LayerNormImpl::reset_parameters() {
  if (!options.elementwise_affine()) return;
  init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}
Tensor LayerNormImpl::forward(const Tensor& x) {
  return F::layer_norm(x, F::LayerNormFuncOptions(options.normalized_shape()).weight(weight).bias(bias).eps(options.eps()));
}
void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm(" << shape_str(options.normalized_shape()) << ", eps=" << options.eps()
     << ", elementwise_affine=" << bool_str(options.elementwise_affine());
  if (options.elementwise_affine() && !options.bias()) os << ", bias=False";
  os << ")";
}

RMSNormImpl::RMSNormImpl(const RMSNormOptions& o) : options(o) {
  MPX_CHECK(!o.normalized_shape().empty(), "RMSNorm: normalized_shape must not be empty");
  MPX_CHECK(!o.eps() || *o.eps() >= 0.0, "RMSNorm: eps must be non-negative, got ", *o.eps());
  if (o.elementwise_affine()) weight = register_parameter("weight", empty(o.normalized_shape()));
  reset_parameters();
}
void RMSNormImpl::reset_parameters() {
  if (options.elementwise_affine()) init::ones_(weight);
}
Tensor RMSNormImpl::forward(const Tensor& x) {
  return F::rms_norm(x, F::RMSNormFuncOptions(options.normalized_shape()).weight(weight).eps(options.eps()));
}
void RMSNormImpl::pretty_print(std::ostream& os) const {
  os << "RMSNorm(" << shape_str(options.normalized_shape()) << ", eps=";
  if (options.eps()) os << *options.eps();
  else os << "None";
  os << ", elementwise_affine=" << bool_str(options.elementwise_affine()) << ")";
}

GroupNormImpl::GroupNormImpl(const GroupNormOptions& o) : options(o) {
  check_positive(o.num_groups(), "GroupNorm", "num_groups");
  MPX_CHECK(o.num_channels() % o.num_groups() == 0, "GroupNorm: num_channels (", o.num_channels(),
            ") must be divisible by num_groups (", o.num_groups(), ")");
  if (o.affine()) {
    weight = register_parameter("weight", empty({o.num_channels()}));
    bias = register_parameter("bias", empty({o.num_channels()}));
  }
  reset_parameters();
}
void GroupNormImpl::reset_parameters() {
  if (!options.affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}
Tensor GroupNormImpl::forward(const Tensor& x) {
  return F::group_norm(x, F::GroupNormFuncOptions(options.num_groups()).weight(weight).bias(bias).eps(options.eps()));
}
void GroupNormImpl::pretty_print(std::ostream& os) const {
  os << "GroupNorm(" << options.num_groups() << ", " << options.num_channels() << ", eps=" << options.eps()
     << ", affine=" << bool_str(options.affine()) << ")";
}

namespace detail {
Tensor register_embedding_table(Module& m, const char* module, int64_t num, int64_t dim,
                                std::optional<int64_t>& padding_idx) {
  check_positive(num, module, "num_embeddings");
  check_positive(dim, module, "embedding_dim");
  if (padding_idx) {
    const int64_t p = *padding_idx;
    MPX_CHECK(p >= -num && p < num, module, ": padding_idx ", p, " must be within [-", num, ", ", num, ")");
    if (p < 0) padding_idx = p + num;
  }
  Tensor w = m.register_parameter("weight", empty({num, dim}));
  reset_embedding_table(w, padding_idx);
  return w;
}
void reset_embedding_table(const Tensor& weight, std::optional<int64_t> padding_idx) {
  init::normal_(weight);
  if (padding_idx) {
    NoGradGuard ng;
    weight.select(0, *padding_idx).zero_();
  }
}
}  // namespace detail

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& o) : options(o) {
  std::optional<int64_t> pad = o.padding_idx();
  weight = detail::register_embedding_table(*this, "Embedding", o.num_embeddings(), o.embedding_dim(), pad);
  options.padding_idx(pad);
}
void EmbeddingImpl::reset_parameters() { detail::reset_embedding_table(weight, options.padding_idx()); }
Tensor EmbeddingImpl::forward(const Tensor& indices) {
  return F::embedding(indices, weight, options.padding_idx(), options.max_norm(), options.norm_type());
}
Embedding Embedding::from_pretrained(const Tensor& embeddings, const EmbeddingFromPretrainedOptions& o) {
  MPX_CHECK(embeddings.defined() && embeddings.dim() == 2 && is_floating(embeddings.dtype()),
            "Embedding::from_pretrained: embeddings must be a floating 2-d table [num_embeddings, dim], got ",
            ops::describe(embeddings));
  Embedding m(EmbeddingOptions(embeddings.size(0), embeddings.size(1))
                  .padding_idx(o.padding_idx())
                  .max_norm(o.max_norm())
                  .norm_type(o.norm_type()));
  m->to(embeddings.device(), embeddings.dtype());
  {
    NoGradGuard ng;
    m->weight.copy_(embeddings);
  }
  m->weight.set_requires_grad(!o.freeze());
  return m;
}

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(num_embeddings=" << options.num_embeddings() << ", embedding_dim=" << options.embedding_dim();
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  if (options.max_norm()) os << ", max_norm=" << *options.max_norm();
  os << ")";
}

// ---------------------------------------------------------------- activations

Tensor ReLUImpl::forward(const Tensor& x) { return F::relu(x); }
void ReLUImpl::pretty_print(std::ostream& os) const { os << "ReLU(" << (options.inplace() ? "inplace=true" : "") << ")"; }
Tensor ReLU6Impl::forward(const Tensor& x) { return F::relu6(x); }
void ReLU6Impl::pretty_print(std::ostream& os) const {
  os << "ReLU6(" << (options.inplace() ? "inplace=true" : "") << ")";
}
Tensor LeakyReLUImpl::forward(const Tensor& x) { return F::leaky_relu(x, options); }
void LeakyReLUImpl::pretty_print(std::ostream& os) const {
  os << "LeakyReLU(negative_slope=" << options.negative_slope() << ")";
}
Tensor GELUImpl::forward(const Tensor& x) { return F::gelu(x, options); }
void GELUImpl::pretty_print(std::ostream& os) const { os << "GELU(approximate=" << options.approximate() << ")"; }
Tensor SiLUImpl::forward(const Tensor& x) { return F::silu(x); }
Tensor TanhImpl::forward(const Tensor& x) { return F::tanh(x); }
Tensor SigmoidImpl::forward(const Tensor& x) { return F::sigmoid(x); }
Tensor SoftmaxImpl::forward(const Tensor& x) { return F::softmax(x, options.dim()); }
void SoftmaxImpl::pretty_print(std::ostream& os) const { os << "Softmax(dim=" << options.dim() << ")"; }
Tensor LogSoftmaxImpl::forward(const Tensor& x) { return F::log_softmax(x, options.dim()); }
void LogSoftmaxImpl::pretty_print(std::ostream& os) const { os << "LogSoftmax(dim=" << options.dim() << ")"; }

// ---------------------------------------------------------------- pooling, dropout, shape

Tensor MaxPool2dImpl::forward(const Tensor& x) { return F::max_pool2d(x, options); }
void MaxPool2dImpl::pretty_print(std::ostream& os) const {
  os << "MaxPool2d(kernel_size=" << options.kernel_size() << ", stride=" << options.stride()
     << ", padding=" << options.padding() << ", dilation=" << options.dilation()
     << ", ceil_mode=" << bool_str(options.ceil_mode()) << ")";
}
Tensor AvgPool2dImpl::forward(const Tensor& x) { return F::avg_pool2d(x, options); }
void AvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AvgPool2d(kernel_size=" << options.kernel_size() << ", stride=" << options.stride()
     << ", padding=" << options.padding() << ")";
}
Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& x) { return F::adaptive_avg_pool2d(x, options); }
void AdaptiveAvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AdaptiveAvgPool2d(output_size=" << options.output_size() << ")";
}

DropoutImpl::DropoutImpl(const DropoutOptions& o) : options(o) {
  MPX_CHECK(o.p() >= 0.0 && o.p() <= 1.0, "Dropout: probability must be in [0, 1], got ", o.p());
}
Tensor DropoutImpl::forward(const Tensor& x) {
  return F::dropout(x, F::DropoutFuncOptions().p(options.p()).training(is_training()));
}
void DropoutImpl::pretty_print(std::ostream& os) const {
  os << "Dropout(p=" << options.p() << ", inplace=" << bool_str(options.inplace()) << ")";
}
Tensor FlattenImpl::forward(const Tensor& x) { return F::flatten(x, options.start_dim(), options.end_dim()); }
void FlattenImpl::pretty_print(std::ostream& os) const {
  os << "Flatten(start_dim=" << options.start_dim() << ", end_dim=" << options.end_dim() << ")";
}

// ---------------------------------------------------------------- losses

CrossEntropyLossImpl::CrossEntropyLossImpl(const CrossEntropyLossOptions& o) : options(o) {
  MPX_CHECK(o.label_smoothing() >= 0.0 && o.label_smoothing() <= 1.0,
            "CrossEntropyLoss: label_smoothing must be in [0, 1], got ", o.label_smoothing());
  // Registered as buffers so to(device) moves them; options share the same handles.
  if (o.weight().defined()) weight = register_buffer("weight", o.weight());
}
Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::cross_entropy(input, target, options);
}
NLLLossImpl::NLLLossImpl(const NLLLossOptions& o) : options(o) {
  if (o.weight().defined()) weight = register_buffer("weight", o.weight());
}
Tensor NLLLossImpl::forward(const Tensor& input, const Tensor& target) { return F::nll_loss(input, target, options); }
BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& o) : options(o) {
  if (o.weight().defined()) weight = register_buffer("weight", o.weight());
  if (o.pos_weight().defined()) pos_weight = register_buffer("pos_weight", o.pos_weight());
}
Tensor BCEWithLogitsLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::binary_cross_entropy_with_logits(input, target, options);
}
BCELossImpl::BCELossImpl(const BCELossOptions& o) : options(o) {
  if (o.weight().defined()) weight = register_buffer("weight", o.weight());
}
Tensor BCELossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::binary_cross_entropy(input, target, options);
}
Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) { return F::mse_loss(input, target, options); }
Tensor L1LossImpl::forward(const Tensor& input, const Tensor& target) { return F::l1_loss(input, target, options); }
Tensor SmoothL1LossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::smooth_l1_loss(input, target, options);
}
Tensor KLDivLossImpl::forward(const Tensor& input, const Tensor& target) { return F::kl_div(input, target, options); }
Tensor CTCLossImpl::forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                            const Tensor& target_lengths) {
  return F::ctc_loss(log_probs, targets, input_lengths, target_lengths, options);
}

}  // namespace mpx::nn
