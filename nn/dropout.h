// The other dropouts (PyTorch's names): channel dropout (Dropout1d/2d/3d), AlphaDropout and FeatureAlphaDropout.
#pragma once
#include <ostream>
#include <string>

#include "nn/module.h"
#include "nn/options.h"

namespace mpx::nn {

namespace functional {
/// Zeroes whole channels of [N, C, L] (or unbatched [C, L]) with probability p and scales the rest by 1/(1-p): one
/// draw per (sample, channel), from the default generator's stream as dropout's. Identity unless training.
Tensor dropout1d(const Tensor& x, const DropoutFuncOptions& options = {});
/// Channel dropout of [N, C, H, W] (or [C, H, W]).
Tensor dropout2d(const Tensor& x, const DropoutFuncOptions& options = {});
/// Channel dropout of [N, C, D, H, W] (or [C, D, H, W]).
Tensor dropout3d(const Tensor& x, const DropoutFuncOptions& options = {});
/// Dropout for SELU networks: dropped elements take SELU's negative saturation value and the result is shifted
/// and scaled so that zero mean and unit variance are kept. Identity unless training.
Tensor alpha_dropout(const Tensor& x, const DropoutFuncOptions& options = {});
/// alpha_dropout with one draw per (sample, channel) of [N, C, *].
Tensor feature_alpha_dropout(const Tensor& x, const DropoutFuncOptions& options = {});
}  // namespace functional

/// A dropout layer over F::fn; p in [0, 1]; active in training mode only.
#define MPX_DROPOUT_LAYER(Name, fn)                                                                         \
  class Name##Impl : public Module {                                                                        \
   public:                                                                                                  \
    explicit Name##Impl(const DropoutOptions& options = {}) : options(options) {                            \
      MPX_CHECK(options.p() >= 0.0 && options.p() <= 1.0, #Name ": probability must be in [0, 1], got ",  \
                options.p());                                                                               \
    }                                                                                                       \
    Tensor forward(const Tensor& x) {                                                                       \
      return functional::fn(x, functional::DropoutFuncOptions().p(options.p()).training(is_training()));    \
    }                                                                                                       \
    std::string name() const override { return #Name; }                                                    \
    void pretty_print(std::ostream& os) const override {                                                    \
      os << #Name "(p=" << options.p() << ", inplace=" << (options.inplace() ? "true" : "false") << ")";    \
    }                                                                                                       \
    DropoutOptions options;                                                                                 \
  };                                                                                                        \
  using Name##Options = DropoutOptions;                                                                     \
  MPX_MODULE(Name);
MPX_DROPOUT_LAYER(Dropout1d, dropout1d)
MPX_DROPOUT_LAYER(Dropout2d, dropout2d)
MPX_DROPOUT_LAYER(Dropout3d, dropout3d)
MPX_DROPOUT_LAYER(AlphaDropout, alpha_dropout)
MPX_DROPOUT_LAYER(FeatureAlphaDropout, feature_alpha_dropout)
#undef MPX_DROPOUT_LAYER

}  // namespace mpx::nn
