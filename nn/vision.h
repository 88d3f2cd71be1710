// Resizing and pooling layers (LibTorch's names): Upsample, PixelShuffle, PixelUnshuffle, MaxPool1d, AvgPool1d,
// AdaptiveAvgPool1d, AdaptiveMaxPool1d/2d; their options and F:: forms (F::interpolate, F::pixel_shuffle, ...).
#pragma once
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/options.h"
#include "ops/op_utils.h"
#include "ops/pooling.h"
#include "ops/resize.h"

namespace mpx::nn {

/// Options of F::interpolate and Upsample: size or scale_factor (one value for every spatial dim, or one each),
/// mode "nearest" (default), "nearest-exact", "linear", "bilinear", "trilinear"; align_corners for the linear modes.
struct InterpolateFuncOptions {
  MPX_ARG(std::optional<IntList>, size) = std::nullopt;
  MPX_ARG(std::optional<std::vector<double>>, scale_factor) = std::nullopt;
  MPX_ARG(std::string, mode) = "nearest";
  MPX_ARG(std::optional<bool>, align_corners) = std::nullopt;
};
using UpsampleOptions = InterpolateFuncOptions;

struct PixelShuffleOptions {
  PixelShuffleOptions(int64_t upscale_factor) : upscale_factor_(upscale_factor) {}  // NOLINT
  MPX_ARG(int64_t, upscale_factor);
};
struct PixelUnshuffleOptions {
  PixelUnshuffleOptions(int64_t downscale_factor) : downscale_factor_(downscale_factor) {}  // NOLINT
  MPX_ARG(int64_t, downscale_factor);
};
using PixelShuffleFuncOptions = PixelShuffleOptions;
using PixelUnshuffleFuncOptions = PixelUnshuffleOptions;

struct MaxPool1dOptions {
  MaxPool1dOptions(int64_t kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  MPX_ARG(int64_t, kernel_size);
  MPX_ARG(int64_t, stride);
  MPX_ARG(int64_t, padding) = 0;
  MPX_ARG(int64_t, dilation) = 1;
  MPX_ARG(bool, ceil_mode) = false;
};
struct AvgPool1dOptions {
  AvgPool1dOptions(int64_t kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  MPX_ARG(int64_t, kernel_size);
  MPX_ARG(int64_t, stride);
  MPX_ARG(int64_t, padding) = 0;
  MPX_ARG(bool, ceil_mode) = false;
  MPX_ARG(bool, count_include_pad) = true;
};
struct AdaptiveAvgPool1dOptions {
  AdaptiveAvgPool1dOptions(int64_t output_size) : output_size_(output_size) {}  // NOLINT
  MPX_ARG(int64_t, output_size);
};
struct AdaptiveMaxPool1dOptions {
  AdaptiveMaxPool1dOptions(int64_t output_size) : output_size_(output_size) {}  // NOLINT
  MPX_ARG(int64_t, output_size);
};
struct AdaptiveMaxPool2dOptions {
  AdaptiveMaxPool2dOptions(ExpandingArray2 output_size) : output_size_(output_size) {}  // NOLINT
  MPX_ARG(ExpandingArray2, output_size);
};
using MaxPool1dFuncOptions = MaxPool1dOptions;
using AdaptiveMaxPool1dFuncOptions = AdaptiveMaxPool1dOptions;
using AdaptiveMaxPool2dFuncOptions = AdaptiveMaxPool2dOptions;
using AvgPool1dFuncOptions = AvgPool1dOptions;
using AdaptiveAvgPool1dFuncOptions = AdaptiveAvgPool1dOptions;

namespace functional {
using nn::AdaptiveAvgPool1dFuncOptions;
using nn::AdaptiveMaxPool1dFuncOptions;
using nn::AdaptiveMaxPool2dFuncOptions;
using nn::AvgPool1dFuncOptions;
using nn::MaxPool1dFuncOptions;
using nn::PixelShuffleFuncOptions;
using nn::PixelUnshuffleFuncOptions;
using InterpolateFuncOptions = nn::InterpolateFuncOptions;
inline Tensor interpolate(const Tensor& x, const InterpolateFuncOptions& o = {}) {
  return mpx::interpolate(x, o.size().value_or(IntList{}), o.scale_factor().value_or(std::vector<double>{}), o.mode(),
                          o.align_corners());
}
inline Tensor pixel_shuffle(const Tensor& x, const PixelShuffleFuncOptions& o) { return mpx::pixel_shuffle(x, o.upscale_factor()); }
inline Tensor pixel_unshuffle(const Tensor& x, const PixelUnshuffleFuncOptions& o) {
  return mpx::pixel_unshuffle(x, o.downscale_factor());
}
namespace detail {
// A 1-d pool of [N, C, L] (or unbatched [C, L]) input as the 2-d one over [N, C, 1, L].
template <typename F> Tensor pool1d(const char* op, const Tensor& x, F pool2d) {
  MPX_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), op, ": input must be [N, C, L] or [C, L], got ",
            ops::describe(x));
  const Tensor x4 = x.dim() == 3 ? x.unsqueeze(2) : x.unsqueeze(0).unsqueeze(2);
  const Tensor y = pool2d(x4).squeeze(2);
  return x.dim() == 3 ? y : y.squeeze(0);
}
}  // namespace detail
inline Tensor max_pool1d(const Tensor& x, const MaxPool1dFuncOptions& o) {
  return detail::pool1d("max_pool1d", x, [&](const Tensor& x4) {
    return mpx::max_pool2d(x4, {1, o.kernel_size()}, {1, o.stride()}, {0, o.padding()}, {1, o.dilation()}, o.ceil_mode());
  });
}
inline Tensor avg_pool1d(const Tensor& x, const AvgPool1dFuncOptions& o) {
  return detail::pool1d("avg_pool1d", x, [&](const Tensor& x4) {
    return mpx::avg_pool2d(x4, {1, o.kernel_size()}, {1, o.stride()}, {0, o.padding()}, o.ceil_mode(),
                           o.count_include_pad());
  });
}
inline Tensor adaptive_avg_pool1d(const Tensor& x, const AdaptiveAvgPool1dFuncOptions& o) {
  return detail::pool1d("adaptive_avg_pool1d", x,
                        [&](const Tensor& x4) { return mpx::adaptive_avg_pool2d(x4, {1, o.output_size()}); });
}
inline Tensor adaptive_max_pool1d(const Tensor& x, const AdaptiveMaxPool1dFuncOptions& o) {
  return detail::pool1d("adaptive_max_pool1d", x,
                        [&](const Tensor& x4) { return mpx::adaptive_max_pool2d(x4, {1, o.output_size()}); });
}
/// Max pooling of [N, C, H, W] (or [C, H, W]) to output_size over PyTorch's adaptive bins.
inline Tensor adaptive_max_pool2d(const Tensor& x, const AdaptiveMaxPool2dFuncOptions& o) {
  return mpx::adaptive_max_pool2d(x, {o.output_size()[0], o.output_size()[1]});
}
}  // namespace functional

/// A layer whose forward(x) is F::fn(x, options).
#define MPX_FUNCTIONAL_LAYER(Name, Options, fn)                                      \
  class Name##Impl : public Module {                                                 \
   public:                                                                           \
    explicit Name##Impl(const Options& options) : options(options) {}                \
    Tensor forward(const Tensor& x) { return functional::fn(x, options); }           \
    std::string name() const override { return #Name; }                             \
    Options options;                                                                 \
  };                                                                                 \
  MPX_MODULE(Name);
MPX_FUNCTIONAL_LAYER(PixelShuffle, PixelShuffleOptions, pixel_shuffle)
MPX_FUNCTIONAL_LAYER(PixelUnshuffle, PixelUnshuffleOptions, pixel_unshuffle)
MPX_FUNCTIONAL_LAYER(MaxPool1d, MaxPool1dOptions, max_pool1d)
MPX_FUNCTIONAL_LAYER(AvgPool1d, AvgPool1dOptions, avg_pool1d)
MPX_FUNCTIONAL_LAYER(AdaptiveAvgPool1d, AdaptiveAvgPool1dOptions, adaptive_avg_pool1d)
MPX_FUNCTIONAL_LAYER(AdaptiveMaxPool1d, AdaptiveMaxPool1dOptions, adaptive_max_pool1d)
MPX_FUNCTIONAL_LAYER(AdaptiveMaxPool2d, AdaptiveMaxPool2dOptions, adaptive_max_pool2d)
#undef MPX_FUNCTIONAL_LAYER

/// F::interpolate as a layer (LibTorch's Upsample): `Upsample(UpsampleOptions().scale_factor({{2}}).mode("bilinear"))`.
class UpsampleImpl : public Module {
 public:
  explicit UpsampleImpl(const UpsampleOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& x) { return functional::interpolate(x, options); }
  std::string name() const override { return "Upsample"; }
  UpsampleOptions options;
};
MPX_MODULE(Upsample);

}  // namespace mpx::nn
