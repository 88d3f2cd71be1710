// Activation modules past the basic ones of nn/modules.h (LibTorch's names): ELU, CELU, SELU, Mish, Hardsigmoid,
// Hardswish, LogSigmoid, Softsign, Hardtanh, GLU, Softplus; each calls its F:: form.
#pragma once
#include <string>

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/options.h"

namespace mpx::nn {

/// An activation without options: forward(x) = fn(x).
#define MPX_PLAIN_ACTIVATION(Name, fn)                                  \
  class Name##Impl : public Module {                                    \
   public:                                                              \
    Tensor forward(const Tensor& x) { return functional::fn(x); }       \
    std::string name() const override { return #Name; }                \
  };                                                                    \
  MPX_MODULE(Name);
MPX_PLAIN_ACTIVATION(SELU, selu)
MPX_PLAIN_ACTIVATION(Mish, mish)
MPX_PLAIN_ACTIVATION(Hardsigmoid, hardsigmoid)
MPX_PLAIN_ACTIVATION(Hardswish, hardswish)
MPX_PLAIN_ACTIVATION(LogSigmoid, logsigmoid)
MPX_PLAIN_ACTIVATION(Softsign, softsign)
#undef MPX_PLAIN_ACTIVATION

/// An activation with an options struct: forward(x) = F::fn(x, options).
#define MPX_OPTIONS_ACTIVATION(Name, Options, fn)                                                  \
  class Name##Impl : public Module {                                                               \
   public:                                                                                         \
    explicit Name##Impl(const Options& options = {}) : options(options) {}                         \
    Tensor forward(const Tensor& x) { return functional::fn(x, options); }                         \
    std::string name() const override { return #Name; }                                           \
    Options options;                                                                               \
  };                                                                                               \
  MPX_MODULE(Name);
MPX_OPTIONS_ACTIVATION(ELU, ELUOptions, elu)
MPX_OPTIONS_ACTIVATION(CELU, CELUOptions, celu)
MPX_OPTIONS_ACTIVATION(Hardtanh, HardtanhOptions, hardtanh)
MPX_OPTIONS_ACTIVATION(GLU, GLUOptions, glu)
#undef MPX_OPTIONS_ACTIVATION

/// log(1 + exp(beta x)) / beta, linear above threshold (LibTorch's Softplus).
class SoftplusImpl : public Module {
 public:
  explicit SoftplusImpl(const SoftplusOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& x) { return functional::softplus(x, options.beta(), options.threshold()); }
  std::string name() const override { return "Softplus"; }
  SoftplusOptions options;
};
MPX_MODULE(Softplus);

}  // namespace mpx::nn
