// Regression, likelihood, margin and embedding losses past those of nn/modules.h, LibTorch's names: HuberLoss,
// PoissonNLLLoss, GaussianNLLLoss, SoftMarginLoss, MultiLabelSoftMarginLoss, MultiMarginLoss, MarginRankingLoss,
// HingeEmbeddingLoss, CosineEmbeddingLoss, TripletMarginLoss, PairwiseDistance; their options and F:: forms.
#pragma once
#include <string>

#include "nn/module.h"
#include "nn/options.h"
#include "ops/margin_loss.h"

namespace mpx::nn {

/// The reduction, and the `Loss(kSum)` / `F::loss(a, b, "sum")` spelling of it.
#define MPX_LOSS_REDUCTION(Options)                         \
  Options() = default;                                      \
  template <typename R>                                     \
    requires std::is_convertible_v<R, ReductionArg>         \
  Options(R reduction) : reduction_(reduction) {} /*NOLINT*/ \
  MPX_ARG(ReductionArg, reduction) = Reduction::Mean;

struct HuberLossOptions {
  MPX_LOSS_REDUCTION(HuberLossOptions)
  MPX_ARG(double, delta) = 1.0;
};
struct PoissonNLLLossOptions {
  MPX_LOSS_REDUCTION(PoissonNLLLossOptions)
  /// The input is log(rate) (true) or the rate itself.
  MPX_ARG(bool, log_input) = true;
  /// Adds Stirling's approximation of log(target!).
  MPX_ARG(bool, full) = false;
  MPX_ARG(double, eps) = 1e-8;
};
struct GaussianNLLLossOptions {
  MPX_LOSS_REDUCTION(GaussianNLLLossOptions)
  MPX_ARG(bool, full) = false;
  MPX_ARG(double, eps) = 1e-6;
};
struct SoftMarginLossOptions {
  MPX_LOSS_REDUCTION(SoftMarginLossOptions)
};
struct MultiLabelSoftMarginLossOptions {
  MPX_LOSS_REDUCTION(MultiLabelSoftMarginLossOptions)
  MPX_ARG(Tensor, weight) = {};
};
struct MultiMarginLossOptions {
  MPX_LOSS_REDUCTION(MultiMarginLossOptions)
  MPX_ARG(int64_t, p) = 1;
  MPX_ARG(double, margin) = 1.0;
  MPX_ARG(Tensor, weight) = {};
};
struct MarginRankingLossOptions {
  MPX_LOSS_REDUCTION(MarginRankingLossOptions)
  MPX_ARG(double, margin) = 0.0;
};
struct HingeEmbeddingLossOptions {
  MPX_LOSS_REDUCTION(HingeEmbeddingLossOptions)
  MPX_ARG(double, margin) = 1.0;
};
struct CosineEmbeddingLossOptions {
  MPX_LOSS_REDUCTION(CosineEmbeddingLossOptions)
  MPX_ARG(double, margin) = 0.0;
};
struct TripletMarginLossOptions {
  MPX_LOSS_REDUCTION(TripletMarginLossOptions)
  MPX_ARG(double, margin) = 1.0;
  MPX_ARG(double, p) = 2.0;
  MPX_ARG(double, eps) = 1e-6;
  /// Uses the smaller of d(anchor, negative) and d(positive, negative).
  MPX_ARG(bool, swap) = false;
};
#undef MPX_LOSS_REDUCTION
struct PairwiseDistanceOptions {
  MPX_ARG(double, p) = 2.0;
  MPX_ARG(double, eps) = 1e-6;
  MPX_ARG(bool, keepdim) = false;
};

using HuberLossFuncOptions = HuberLossOptions;
using PoissonNLLLossFuncOptions = PoissonNLLLossOptions;
using GaussianNLLLossFuncOptions = GaussianNLLLossOptions;
using SoftMarginLossFuncOptions = SoftMarginLossOptions;
using MultiLabelSoftMarginLossFuncOptions = MultiLabelSoftMarginLossOptions;
using MultiMarginLossFuncOptions = MultiMarginLossOptions;
using MarginRankingLossFuncOptions = MarginRankingLossOptions;
using HingeEmbeddingLossFuncOptions = HingeEmbeddingLossOptions;
using CosineEmbeddingLossFuncOptions = CosineEmbeddingLossOptions;
using TripletMarginLossFuncOptions = TripletMarginLossOptions;
using PairwiseDistanceFuncOptions = PairwiseDistanceOptions;

namespace functional {
inline Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossFuncOptions& o = {}) {
  return mpx::huber_loss(input, target, o.reduction(), o.delta());
}
inline Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNLLLossFuncOptions& o = {}) {
  return mpx::poisson_nll_loss(input, target, o.log_input(), o.full(), o.eps(), o.reduction());
}
inline Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                                const GaussianNLLLossFuncOptions& o = {}) {
  return mpx::gaussian_nll_loss(input, target, var, o.full(), o.eps(), o.reduction());
}
inline Tensor soft_margin_loss(const Tensor& input, const Tensor& target, const SoftMarginLossFuncOptions& o = {}) {
  return mpx::soft_margin_loss(input, target, o.reduction());
}
inline Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target,
                                          const MultiLabelSoftMarginLossFuncOptions& o = {}) {
  return mpx::multilabel_soft_margin_loss(input, target, o.weight(), o.reduction());
}
inline Tensor multi_margin_loss(const Tensor& input, const Tensor& target, const MultiMarginLossFuncOptions& o = {}) {
  return mpx::multi_margin_loss(input, target, o.p(), o.margin(), o.weight(), o.reduction());
}
inline Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                                  const MarginRankingLossFuncOptions& o = {}) {
  return mpx::margin_ranking_loss(x1, x2, target, o.margin(), o.reduction());
}
inline Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, const HingeEmbeddingLossFuncOptions& o = {}) {
  return mpx::hinge_embedding_loss(input, target, o.margin(), o.reduction());
}
inline Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                                    const CosineEmbeddingLossFuncOptions& o = {}) {
  return mpx::cosine_embedding_loss(x1, x2, target, o.margin(), o.reduction());
}
inline Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                                  const TripletMarginLossFuncOptions& o = {}) {
  return mpx::triplet_margin_loss(anchor, positive, negative, o.margin(), o.p(), o.eps(), o.swap(), o.reduction());
}
inline Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, const PairwiseDistanceFuncOptions& o = {}) {
  return mpx::pairwise_distance(x1, x2, o.p(), o.eps(), o.keepdim());
}
}  // namespace functional

/// A loss module: forward(inputs...) = F::fn(inputs..., options).
#define MPX_LOSS_MODULE(Name, fn, Params, Args)                        \
  class Name##Impl : public Module {                                   \
   public:                                                             \
    explicit Name##Impl(const Name##Options& options = {}) : options(options) {} \
    Tensor forward Params { return functional::fn Args; }              \
    std::string name() const override { return #Name; }               \
    Name##Options options;                                             \
  };                                                                   \
  MPX_MODULE(Name);
MPX_LOSS_MODULE(HuberLoss, huber_loss, (const Tensor& input, const Tensor& target), (input, target, options))
MPX_LOSS_MODULE(PoissonNLLLoss, poisson_nll_loss, (const Tensor& input, const Tensor& target), (input, target, options))
MPX_LOSS_MODULE(GaussianNLLLoss, gaussian_nll_loss, (const Tensor& input, const Tensor& target, const Tensor& var),
                (input, target, var, options))
MPX_LOSS_MODULE(SoftMarginLoss, soft_margin_loss, (const Tensor& input, const Tensor& target), (input, target, options))
MPX_LOSS_MODULE(MultiLabelSoftMarginLoss, multilabel_soft_margin_loss, (const Tensor& input, const Tensor& target),
                (input, target, options))
MPX_LOSS_MODULE(MultiMarginLoss, multi_margin_loss, (const Tensor& input, const Tensor& target), (input, target, options))
MPX_LOSS_MODULE(MarginRankingLoss, margin_ranking_loss, (const Tensor& x1, const Tensor& x2, const Tensor& target),
                (x1, x2, target, options))
MPX_LOSS_MODULE(HingeEmbeddingLoss, hinge_embedding_loss, (const Tensor& input, const Tensor& target),
                (input, target, options))
MPX_LOSS_MODULE(CosineEmbeddingLoss, cosine_embedding_loss, (const Tensor& x1, const Tensor& x2, const Tensor& target),
                (x1, x2, target, options))
MPX_LOSS_MODULE(TripletMarginLoss, triplet_margin_loss,
                (const Tensor& anchor, const Tensor& positive, const Tensor& negative),
                (anchor, positive, negative, options))
MPX_LOSS_MODULE(PairwiseDistance, pairwise_distance, (const Tensor& x1, const Tensor& x2), (x1, x2, options))
#undef MPX_LOSS_MODULE

}  // namespace mpx::nn
