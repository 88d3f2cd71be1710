// nn layers and losses: XxxImpl modules with PyTorch's default initialization, and their
// MPX_MODULE holders (Linear, Conv2d, BatchNorm2d, ReLU, ..., CrossEntropyLoss).
#pragma once
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "autograd/grad_mode.h"
#include "nn/container.h"
#include "nn/module.h"
#include "nn/options.h"
#include "nn/rnn_options.h"

namespace mpx::nn {

// ---------------------------------------------------------------- linear and convolution

/// y = x W^T + b with W [out, in]; init: kaiming_uniform_(a=sqrt(5)) weight, U(+-1/sqrt(in)) bias.
class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true)
      : LinearImpl(LinearOptions(in_features, out_features).bias(bias)) {}
  explicit LinearImpl(const LinearOptions& options);
  /// Re-draws the parameters with PyTorch's default init.
  void reset_parameters();
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Linear"; }
  void pretty_print(std::ostream& os) const override;

  LinearOptions options;
  Tensor weight;
  Tensor bias;
};
MPX_MODULE(Linear);

/// 2-d convolution, weight [out, in/groups, kh, kw]; PyTorch's default init (as Linear).
class Conv2dImpl : public Module {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray2 kernel_size)
      : Conv2dImpl(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  explicit Conv2dImpl(const Conv2dOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Conv2d"; }
  void pretty_print(std::ostream& os) const override;

  Conv2dOptions options;
  Tensor weight;
  Tensor bias;
};
MPX_MODULE(Conv2d);

/// 1-d convolution over [N, C, L] (or [C, L]), weight [out, in/groups, k]; PyTorch's default init.
class Conv1dImpl : public Module {
 public:
  Conv1dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : Conv1dImpl(Conv1dOptions(in_channels, out_channels, kernel_size)) {}
  explicit Conv1dImpl(const Conv1dOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Conv1d"; }
  void pretty_print(std::ostream& os) const override;

  Conv1dOptions options;
  Tensor weight;
  Tensor bias;
};
MPX_MODULE(Conv1d);

/// Transposed 2-d convolution, weight [in, out/groups, kh, kw]; PyTorch's default init.
/// Transposed 1-d convolution; weight [in, out/groups, k], as PyTorch's.
class ConvTranspose1dImpl : public Module {
 public:
  ConvTranspose1dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : ConvTranspose1dImpl(ConvTranspose1dOptions(in_channels, out_channels, kernel_size)) {}
  explicit ConvTranspose1dImpl(const ConvTranspose1dOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& x);
  std::string name() const override { return "ConvTranspose1d"; }
  void pretty_print(std::ostream& os) const override;

  ConvTranspose1dOptions options;
  Tensor weight;
  Tensor bias;
};
MPX_MODULE(ConvTranspose1d);

class ConvTranspose2dImpl : public Module {
 public:
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray2 kernel_size)
      : ConvTranspose2dImpl(ConvTranspose2dOptions(in_channels, out_channels, kernel_size)) {}
  explicit ConvTranspose2dImpl(const ConvTranspose2dOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& x);
  std::string name() const override { return "ConvTranspose2d"; }
  void pretty_print(std::ostream& os) const override;

  ConvTranspose2dOptions options;
  Tensor weight;
  Tensor bias;
};
MPX_MODULE(ConvTranspose2d);

// ---------------------------------------------------------------- normalization

/// What batch norm and instance norm share (PyTorch's _NormBase): the options, weight (ones) and bias (zeros) with
/// affine, buffers running_mean (zeros), running_var (ones) and num_batches_tracked (i64 0) with
/// track_running_stats, under PyTorch's names, and the printout "BatchNorm2d(64, eps=1e-05, momentum=0.1, ...)".
template <typename Options>
class NormBase : public Module {
 public:
  NormBase(const Options& o, const char* what) : options(o) {
    MPX_CHECK(o.num_features() > 0, what, ": num_features must be positive, got ", o.num_features());
    if (o.affine()) {
      weight = register_parameter("weight", empty({o.num_features()}));
      bias = register_parameter("bias", empty({o.num_features()}));
    }
    if (o.track_running_stats()) {
      running_mean = register_buffer("running_mean", zeros({o.num_features()}));
      running_var = register_buffer("running_var", ones({o.num_features()}));
      num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, TensorOptions(kInt64)));
    }
    reset_parameters();
  }
  void reset_running_stats() {
    if (!options.track_running_stats()) return;
    NoGradGuard ng;
    running_mean.zero_();
    running_var.fill_(1.0);
    num_batches_tracked.zero_();
  }
  void reset_parameters() {
    reset_running_stats();
    if (!options.affine()) return;
    NoGradGuard ng;
    weight.fill_(1.0);
    bias.zero_();
  }
  void pretty_print(std::ostream& os) const override {
    os << name() << "(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
    if (options.momentum()) os << *options.momentum();
    else os << "None";
    os << ", affine=" << (options.affine() ? "true" : "false")
       << ", track_running_stats=" << (options.track_running_stats() ? "true" : "false") << ")";
  }

  Options options;
  Tensor weight;
  Tensor bias;
  Tensor running_mean;
  Tensor running_var;
  Tensor num_batches_tracked;
};

/// Shared by BatchNorm1d/2d. Training normalizes with batch statistics and updates the running ones; eval uses the
/// running statistics.
class BatchNormImplBase : public NormBase<BatchNormOptions> {
 public:
  explicit BatchNormImplBase(const BatchNormOptions& options) : NormBase(options, "BatchNorm") {}
  Tensor forward(const Tensor& x);
  /// relu(forward(x) + residual) as one fused op (batch_norm_add_relu): the end of a ResNet
  /// block, one pass over memory instead of three. With forward hooks registered it runs
  /// the hooked forward, then the add and ReLU, so hooks see what they always saw.
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  /// relu(forward(x)) as one fused op (batch_norm_relu): the conv, batch norm, ReLU of ResNet
  /// blocks and stems. Hooks as forward_add_relu.
  Tensor forward_relu(const Tensor& x);
  bool is_batchnorm() const override { return true; }

  /// Training-mode statistics over more than this process's batch: set by
  /// nn::convert_sync_batchnorm and nn::SyncBatchNorm (cross-rank mean/variance). Called with
  /// the input and the running-average factor; it updates the running statistics itself.
  std::function<Tensor(BatchNormImplBase&, const Tensor& x, double factor)> sync_forward;

 protected:
  virtual void check_input_dim(const Tensor& x) const = 0;

 private:
  // Batch norm, or the fused form with a ReLU (after the add of `residual` when it is defined),
  // with this module's statistics policy.
  Tensor run(const Tensor& x, const Tensor& residual, bool relu);
};

/// Batch norm over [N, C] or [N, C, L].
class BatchNorm1dImpl : public BatchNormImplBase {
 public:
  explicit BatchNorm1dImpl(const BatchNormOptions& options) : BatchNormImplBase(options) {}
  explicit BatchNorm1dImpl(int64_t num_features) : BatchNormImplBase(BatchNormOptions(num_features)) {}
  std::string name() const override { return "BatchNorm1d"; }

 protected:
  void check_input_dim(const Tensor& x) const override;
};
MPX_MODULE(BatchNorm1d);

/// Batch norm over [N, C, H, W].
class BatchNorm2dImpl : public BatchNormImplBase {
 public:
  explicit BatchNorm2dImpl(const BatchNormOptions& options) : BatchNormImplBase(options) {}
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNormImplBase(BatchNormOptions(num_features)) {}
  std::string name() const override { return "BatchNorm2d"; }

 protected:
  void check_input_dim(const Tensor& x) const override;
};
MPX_MODULE(BatchNorm2d);

/// Layer norm over the trailing normalized_shape dims; weight ones, bias zeros.
class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(const LayerNormOptions& options);
  explicit LayerNormImpl(IntList normalized_shape) : LayerNormImpl(LayerNormOptions(std::move(normalized_shape))) {}
  void reset_parameters();
  Tensor forward(const Tensor& x);
  std::string name() const override { return "LayerNorm"; }
  void pretty_print(std::ostream& os) const override;

  LayerNormOptions options;
  Tensor weight;
  Tensor bias;
};
MPX_MODULE(LayerNorm);

/// RMS norm over the trailing normalized_shape dims (PyTorch's nn.RMSNorm): weight ones; eps
/// unset uses the input dtype's machine epsilon.
class RMSNormImpl : public Module {
 public:
  explicit RMSNormImpl(const RMSNormOptions& options);
  explicit RMSNormImpl(IntList normalized_shape) : RMSNormImpl(RMSNormOptions(std::move(normalized_shape))) {}
  void reset_parameters();
  Tensor forward(const Tensor& x);
  std::string name() const override { return "RMSNorm"; }
  void pretty_print(std::ostream& os) const override;

  RMSNormOptions options;
  Tensor weight;
};
MPX_MODULE(RMSNorm);

/// Group norm of [N, C, *]; weight ones, bias zeros (per channel).
class GroupNormImpl : public Module {
 public:
  explicit GroupNormImpl(const GroupNormOptions& options);
  GroupNormImpl(int64_t num_groups, int64_t num_channels) : GroupNormImpl(GroupNormOptions(num_groups, num_channels)) {}
  void reset_parameters();
  Tensor forward(const Tensor& x);
  std::string name() const override { return "GroupNorm"; }
  void pretty_print(std::ostream& os) const override;

  GroupNormOptions options;
  Tensor weight;
  Tensor bias;
};
MPX_MODULE(GroupNorm);

/// Lookup table [num_embeddings, dim], init N(0, 1) (padding row zero).
class EmbeddingImpl : public Module {
 public:
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  void reset_parameters();
  Tensor forward(const Tensor& indices);
  std::string name() const override { return "Embedding"; }
  void pretty_print(std::ostream& os) const override;

  EmbeddingOptions options;
  Tensor weight;
};
namespace detail {
/// What Embedding and EmbeddingBag share: checks the sizes, wraps a negative padding_idx into [0, num) in place,
/// registers `weight` [num, dim] on m and initializes it (reset_embedding_table).
Tensor register_embedding_table(Module& m, const char* module, int64_t num, int64_t dim,
                                std::optional<int64_t>& padding_idx);
/// N(0, 1) with a zero padding row, as PyTorch.
void reset_embedding_table(const Tensor& weight, std::optional<int64_t> padding_idx);
}  // namespace detail

/// The Embedding holder (MPX_MODULE's, plus LibTorch's from_pretrained).
class Embedding : public ModuleHolder<EmbeddingImpl> {
 public:
  using ModuleHolder<EmbeddingImpl>::ModuleHolder;
  using Impl = EmbeddingImpl;
  /// An Embedding whose table is `embeddings` [num_embeddings, dim] (its values, dtype and device; the padding
  /// row kept as given), frozen unless options.freeze(false).
  static Embedding from_pretrained(const Tensor& embeddings, const EmbeddingFromPretrainedOptions& options = {});
};

// ---------------------------------------------------------------- activations

class ReLUImpl : public Module {
 public:
  explicit ReLUImpl(const ReLUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "ReLU"; }
  void pretty_print(std::ostream& os) const override;
  ReLUOptions options;
};
MPX_MODULE(ReLU);

class ReLU6Impl : public Module {
 public:
  explicit ReLU6Impl(const ReLU6Options& options = {}) : options(options) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "ReLU6"; }
  void pretty_print(std::ostream& os) const override;
  ReLU6Options options;
};
MPX_MODULE(ReLU6);

class LeakyReLUImpl : public Module {
 public:
  explicit LeakyReLUImpl(const LeakyReLUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "LeakyReLU"; }
  void pretty_print(std::ostream& os) const override;
  LeakyReLUOptions options;
};
MPX_MODULE(LeakyReLU);

class GELUImpl : public Module {
 public:
  explicit GELUImpl(const GELUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "GELU"; }
  void pretty_print(std::ostream& os) const override;
  GELUOptions options;
};
MPX_MODULE(GELU);

class SiLUImpl : public Module {
 public:
  explicit SiLUImpl(const SiLUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "SiLU"; }
  SiLUOptions options;
};
MPX_MODULE(SiLU);

class TanhImpl : public Module {
 public:
  TanhImpl() = default;
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Tanh"; }
};
MPX_MODULE(Tanh);

class SigmoidImpl : public Module {
 public:
  SigmoidImpl() = default;
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Sigmoid"; }
};
MPX_MODULE(Sigmoid);

class SoftmaxImpl : public Module {
 public:
  explicit SoftmaxImpl(const SoftmaxOptions& options) : options(options) {}
  explicit SoftmaxImpl(int64_t dim) : options(dim) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Softmax"; }
  void pretty_print(std::ostream& os) const override;
  SoftmaxOptions options;
};
MPX_MODULE(Softmax);

class LogSoftmaxImpl : public Module {
 public:
  explicit LogSoftmaxImpl(const LogSoftmaxOptions& options) : options(options) {}
  explicit LogSoftmaxImpl(int64_t dim) : options(dim) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "LogSoftmax"; }
  void pretty_print(std::ostream& os) const override;
  LogSoftmaxOptions options;
};
MPX_MODULE(LogSoftmax);

// ---------------------------------------------------------------- pooling, dropout, shape

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : options(options) {}
  explicit MaxPool2dImpl(ExpandingArray2 kernel_size) : options(kernel_size) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "MaxPool2d"; }
  void pretty_print(std::ostream& os) const override;
  MaxPool2dOptions options;
};
MPX_MODULE(MaxPool2d);

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(const AvgPool2dOptions& options) : options(options) {}
  explicit AvgPool2dImpl(ExpandingArray2 kernel_size) : options(kernel_size) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "AvgPool2d"; }
  void pretty_print(std::ostream& os) const override;
  AvgPool2dOptions options;
};
MPX_MODULE(AvgPool2d);

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options) : options(options) {}
  explicit AdaptiveAvgPool2dImpl(ExpandingArray2 output_size) : options(output_size) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  void pretty_print(std::ostream& os) const override;
  AdaptiveAvgPool2dOptions options;
};
MPX_MODULE(AdaptiveAvgPool2d);

/// Zeroes elements with probability p in training mode (scaling the rest by 1/(1-p)).
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(const DropoutOptions& options = {});
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Dropout"; }
  void pretty_print(std::ostream& os) const override;
  DropoutOptions options;
};
MPX_MODULE(Dropout);

class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(const FlattenOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Flatten"; }
  void pretty_print(std::ostream& os) const override;
  FlattenOptions options;
};
MPX_MODULE(Flatten);

class IdentityImpl : public Module {
 public:
  IdentityImpl() = default;
  Tensor forward(const Tensor& x) { return x; }
  std::string name() const override { return "Identity"; }
};
MPX_MODULE(Identity);

/// A function as a module, to put it in a Sequential (LibTorch's nn::Functional): any callable from
/// Tensor to Tensor (`Functional([](const Tensor& x) { return x.relu(); })`), or a function and the
/// arguments that follow the input (`Functional(mpx::leaky_relu, 0.2)`). It has no parameters.
class FunctionalImpl : public Module {
 public:
  using Function = std::function<Tensor(const Tensor&)>;
  explicit FunctionalImpl(Function fn) : fn_(std::move(fn)) {}
  template <typename Fn, typename Arg, typename... Args>
  FunctionalImpl(Fn fn, Arg arg, Args... args)
      : fn_([fn, arg, args...](const Tensor& x) { return fn(x, arg, args...); }) {}
  Tensor forward(const Tensor& x) { return fn_(x); }
  std::string name() const override { return "Functional"; }

 private:
  Function fn_;
};
MPX_MODULE(Functional);

// ---------------------------------------------------------------- losses (forward(input, target))

class CrossEntropyLossImpl : public Module {
 public:
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string name() const override { return "CrossEntropyLoss"; }
  CrossEntropyLossOptions options;
  Tensor weight;
};
MPX_MODULE(CrossEntropyLoss);

class NLLLossImpl : public Module {
 public:
  explicit NLLLossImpl(const NLLLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string name() const override { return "NLLLoss"; }
  NLLLossOptions options;
  Tensor weight;
};
MPX_MODULE(NLLLoss);

class BCEWithLogitsLossImpl : public Module {
 public:
  explicit BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string name() const override { return "BCEWithLogitsLoss"; }
  BCEWithLogitsLossOptions options;
  Tensor weight;
  Tensor pos_weight;
};
MPX_MODULE(BCEWithLogitsLoss);

class BCELossImpl : public Module {
 public:
  explicit BCELossImpl(const BCELossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string name() const override { return "BCELoss"; }
  BCELossOptions options;
  Tensor weight;
};
MPX_MODULE(BCELoss);

class MSELossImpl : public Module {
 public:
  explicit MSELossImpl(const MSELossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string name() const override { return "MSELoss"; }
  MSELossOptions options;
};
MPX_MODULE(MSELoss);

class L1LossImpl : public Module {
 public:
  explicit L1LossImpl(const L1LossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string name() const override { return "L1Loss"; }
  L1LossOptions options;
};
MPX_MODULE(L1Loss);

class SmoothL1LossImpl : public Module {
 public:
  explicit SmoothL1LossImpl(const SmoothL1LossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string name() const override { return "SmoothL1Loss"; }
  SmoothL1LossOptions options;
};
MPX_MODULE(SmoothL1Loss);

/// Kullback-Leibler divergence loss (LibTorch's KLDivLoss): forward(log-probabilities, target).
class KLDivLossImpl : public Module {
 public:
  explicit KLDivLossImpl(const KLDivLossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string name() const override { return "KLDivLoss"; }
  KLDivLossOptions options;
};
MPX_MODULE(KLDivLoss);

/// Connectionist temporal classification loss (LibTorch's CTCLoss): forward(log_probs [T, N, C], targets,
/// input_lengths, target_lengths), F::ctc_loss.
class CTCLossImpl : public Module {
 public:
  explicit CTCLossImpl(const CTCLossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                 const Tensor& target_lengths);
  std::string name() const override { return "CTCLoss"; }
  CTCLossOptions options;
};
MPX_MODULE(CTCLoss);

}  // namespace mpx::nn
