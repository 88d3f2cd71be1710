// Padding layers (PyTorch's names): ReflectionPad, ReplicationPad, CircularPad, ZeroPad and ConstantPad, 1d to 3d.
#pragma once
#include <initializer_list>
#include <ostream>
#include <string>

#include "core/arg.h"
#include "nn/module.h"
#include "ops/op_utils.h"
#include "ops/pad.h"

namespace mpx::nn {

/// The padding of a D-d padding layer: one value for every side, or 2 D values (left, right) from the last dim
/// backwards, as F::pad takes them: `ReflectionPad2dOptions(3)`, `ReflectionPad2dOptions({1, 1, 2, 0})`.
template <size_t D>
struct PadOptions {
  PadOptions(int64_t p) : padding_(2 * D, p) {}  // NOLINT: `ReflectionPad2d(3)` reads naturally
  PadOptions(std::initializer_list<int64_t> p) : PadOptions(IntList(p)) {}
  PadOptions(IntList p) : padding_(std::move(p)) {  // NOLINT
    if (padding_.size() == 1) padding_.assign(2 * D, padding_[0]);
    MPX_CHECK(padding_.size() == 2 * D, "a ", D, "-d padding layer takes 1 or ", 2 * D, " padding values, got ",
              padding_.size());
  }
  MPX_ARG(IntList, padding);
};
/// PadOptions with the fill value of ConstantPad: `ConstantPad1dOptions({1, 2}, 3.5)`.
template <size_t D>
struct ConstantPadOptions {
  ConstantPadOptions(PadOptions<D> p, double value) : padding_(p.padding()), value_(value) {}
  MPX_ARG(IntList, padding);
  MPX_ARG(double, value);
};

namespace detail {
inline void print_padding(std::ostream& os, const IntList& p) {
  os << '(';
  for (size_t i = 0; i < p.size(); ++i) os << (i ? ", " : "") << p[i];
  os << ')';
}
// PyTorch's reprs: "ReflectionPad2d((1, 1, 2, 0))", "ConstantPad1d(padding=(1, 2), value=3.5)".
template <size_t D> void print_pad(std::ostream& os, const char* name, const PadOptions<D>& o) {
  os << name << '(';
  print_padding(os, o.padding());
  os << ')';
}
template <size_t D> void print_pad(std::ostream& os, const char* name, const ConstantPadOptions<D>& o) {
  os << name << "(padding=";
  print_padding(os, o.padding());
  os << ", value=" << o.value() << ')';
}
}  // namespace detail

/// A padding layer: forward(x) is mpx::pad(x, padding, mode, value); Name##Options is its options type.
#define MPX_PAD_LAYER(Name, D, mode, Opts, value_expr)                                              \
  using Name##Options = Opts<D>;                                                                   \
  class Name##Impl : public Module {                                                               \
   public:                                                                                         \
    explicit Name##Impl(const Name##Options& options) : options(options) {}                        \
    Tensor forward(const Tensor& x) { return mpx::pad(x, options.padding(), mode, value_expr); }   \
    std::string name() const override { return #Name; }                                           \
    void pretty_print(std::ostream& os) const override { detail::print_pad(os, #Name, options); }  \
    Name##Options options;                                                                         \
  };                                                                                               \
  MPX_MODULE(Name);

#define MPX_PAD_LAYERS(Name, mode)                               \
  MPX_PAD_LAYER(Name##1d, 1, mode, PadOptions, 0.0)             \
  MPX_PAD_LAYER(Name##2d, 2, mode, PadOptions, 0.0)             \
  MPX_PAD_LAYER(Name##3d, 3, mode, PadOptions, 0.0)
MPX_PAD_LAYERS(ReflectionPad, "reflect")
MPX_PAD_LAYERS(ReplicationPad, "replicate")
MPX_PAD_LAYERS(CircularPad, "circular")
MPX_PAD_LAYERS(ZeroPad, "constant")
#undef MPX_PAD_LAYERS
MPX_PAD_LAYER(ConstantPad1d, 1, "constant", ConstantPadOptions, options.value())
MPX_PAD_LAYER(ConstantPad2d, 2, "constant", ConstantPadOptions, options.value())
MPX_PAD_LAYER(ConstantPad3d, 3, "constant", ConstantPadOptions, options.value())
#undef MPX_PAD_LAYER

}  // namespace mpx::nn
