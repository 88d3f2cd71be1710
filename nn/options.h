// Options structs with chained setters for nn layers, losses and functional calls (LibTorch names).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>

#include "core/arg.h"
#include "core/expanding_array.h"
#include "core/tensor.h"
#include "ops/loss.h"

namespace mpx::nn {

/// F::pad's modes (ops/pad.h says what each does), also Conv1d/Conv2d's padding_mode (kZeros is kConstant there).
enum class PadMode { Constant, Reflect, Replicate, Circular };
inline constexpr PadMode kConstant = PadMode::Constant;
inline constexpr PadMode kZeros = PadMode::Constant;
inline constexpr PadMode kReflect = PadMode::Reflect;
inline constexpr PadMode kReplicate = PadMode::Replicate;
inline constexpr PadMode kCircular = PadMode::Circular;
/// The mode's name as mpx::pad takes it ("constant", "reflect", ...).
inline const char* pad_mode_name(PadMode m) {
  static const char* const names[] = {"constant", "reflect", "replicate", "circular"};
  return names[static_cast<int>(m)];
}

/// A 2-element size: accepts one integer (used for both) or a pair `{h, w}`.
using ExpandingArray2 = ExpandingArray<2>;

/// LibTorch-style reduction constants: `.reduction(mpx::nn::kSum)`.
inline constexpr Reduction kNone = Reduction::None;
inline constexpr Reduction kMean = Reduction::Mean;
inline constexpr Reduction kSum = Reduction::Sum;

/// A loss reduction given as the enum or as its name ("none", "mean", "sum").
struct ReductionArg {
  Reduction value = Reduction::Mean;
  ReductionArg() = default;
  ReductionArg(Reduction r) : value(r) {}  // NOLINT
  ReductionArg(const char* name) : value(reduction_from_name(name)) {}  // NOLINT
  ReductionArg(const std::string& name) : value(reduction_from_name(name)) {}  // NOLINT
  operator Reduction() const { return value; }  // NOLINT
};

// ---------------------------------------------------------------- layers

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  MPX_ARG(int64_t, in_features);
  MPX_ARG(int64_t, out_features);
  MPX_ARG(bool, bias) = true;
};

struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray2 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  MPX_ARG(int64_t, in_channels);
  MPX_ARG(int64_t, out_channels);
  MPX_ARG(ExpandingArray2, kernel_size);
  MPX_ARG(ExpandingArray2, stride) = 1;
  MPX_ARG(ExpandingArray2, padding) = 0;
  MPX_ARG(ExpandingArray2, dilation) = 1;
  MPX_ARG(int64_t, groups) = 1;
  MPX_ARG(bool, bias) = true;
  /// How `padding` fills: zeros (kZeros), or the input reflected, replicated or wrapped (kReflect, kReplicate,
  /// kCircular: mpx::pad before an unpadded convolution), as PyTorch's padding_mode.
  MPX_ARG(PadMode, padding_mode) = kZeros;
};

struct Conv1dOptions {
  Conv1dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  MPX_ARG(int64_t, in_channels);
  MPX_ARG(int64_t, out_channels);
  MPX_ARG(int64_t, kernel_size);
  MPX_ARG(int64_t, stride) = 1;
  MPX_ARG(int64_t, padding) = 0;
  MPX_ARG(int64_t, dilation) = 1;
  MPX_ARG(int64_t, groups) = 1;
  MPX_ARG(bool, bias) = true;
  /// As Conv2dOptions::padding_mode.
  MPX_ARG(PadMode, padding_mode) = kZeros;
};

struct ConvTranspose1dOptions {
  ConvTranspose1dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  MPX_ARG(int64_t, in_channels);
  MPX_ARG(int64_t, out_channels);
  MPX_ARG(int64_t, kernel_size);
  MPX_ARG(int64_t, stride) = 1;
  MPX_ARG(int64_t, padding) = 0;
  MPX_ARG(int64_t, output_padding) = 0;
  MPX_ARG(int64_t, dilation) = 1;
  MPX_ARG(int64_t, groups) = 1;
  MPX_ARG(bool, bias) = true;
};

struct ConvTranspose2dOptions {
  ConvTranspose2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray2 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  MPX_ARG(int64_t, in_channels);
  MPX_ARG(int64_t, out_channels);
  MPX_ARG(ExpandingArray2, kernel_size);
  MPX_ARG(ExpandingArray2, stride) = 1;
  MPX_ARG(ExpandingArray2, padding) = 0;
  MPX_ARG(ExpandingArray2, output_padding) = 0;
  MPX_ARG(ExpandingArray2, dilation) = 1;
  MPX_ARG(int64_t, groups) = 1;
  MPX_ARG(bool, bias) = true;
};

/// Options of BatchNorm1d/2d. momentum = nullopt uses a cumulative moving average.
struct BatchNormOptions {
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  MPX_ARG(int64_t, num_features);
  MPX_ARG(double, eps) = 1e-5;
  MPX_ARG(std::optional<double>, momentum) = 0.1;
  MPX_ARG(bool, affine) = true;
  MPX_ARG(bool, track_running_stats) = true;
};
/// LibTorch's per-rank names of the same options.
using BatchNorm1dOptions = BatchNormOptions;
using BatchNorm2dOptions = BatchNormOptions;
using BatchNorm3dOptions = BatchNormOptions;

struct LayerNormOptions {
  LayerNormOptions(IntList normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  MPX_ARG(IntList, normalized_shape);
  MPX_ARG(double, eps) = 1e-5;
  MPX_ARG(bool, elementwise_affine) = true;
  /// With elementwise_affine, whether there is a learned bias (PyTorch's LayerNorm(bias=False)).
  MPX_ARG(bool, bias) = true;
};

struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  MPX_ARG(int64_t, num_groups);
  MPX_ARG(int64_t, num_channels);
  MPX_ARG(double, eps) = 1e-5;
  MPX_ARG(bool, affine) = true;
};

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  MPX_ARG(int64_t, num_embeddings);
  MPX_ARG(int64_t, embedding_dim);
  MPX_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
  /// Rows looked up with a norm above max_norm are renormalized in place first (PyTorch's max_norm).
  MPX_ARG(std::optional<double>, max_norm) = std::nullopt;
  MPX_ARG(double, norm_type) = 2.0;
};

/// Options of Embedding::from_pretrained (LibTorch's EmbeddingFromPretrainedOptions).
struct EmbeddingFromPretrainedOptions {
  /// The table is not trained (requires_grad false).
  MPX_ARG(bool, freeze) = true;
  MPX_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
  MPX_ARG(std::optional<double>, max_norm) = std::nullopt;
  MPX_ARG(double, norm_type) = 2.0;
};

/// `inplace` is accepted for source compatibility; mpx always computes out of place.
struct ReLUOptions {
  ReLUOptions(bool inplace = false) : inplace_(inplace) {}  // NOLINT
  MPX_ARG(bool, inplace);
};
struct ReLU6Options {
  ReLU6Options(bool inplace = false) : inplace_(inplace) {}  // NOLINT
  MPX_ARG(bool, inplace);
};
struct LeakyReLUOptions {
  LeakyReLUOptions() = default;
  MPX_ARG(double, negative_slope) = 0.01;
  MPX_ARG(bool, inplace) = false;
};
/// approximate: "none" (exact erf form) or "tanh".
struct GELUOptions {
  GELUOptions() = default;
  MPX_ARG(std::string, approximate) = "none";
};
struct SiLUOptions {
  SiLUOptions(bool inplace = false) : inplace_(inplace) {}  // NOLINT
  MPX_ARG(bool, inplace);
};
struct SoftmaxOptions {
  SoftmaxOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  MPX_ARG(int64_t, dim);
};
struct LogSoftmaxOptions {
  LogSoftmaxOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  MPX_ARG(int64_t, dim);
};

/// stride defaults to the kernel size.
struct MaxPool2dOptions {
  MaxPool2dOptions(ExpandingArray2 kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  MPX_ARG(ExpandingArray2, kernel_size);
  MPX_ARG(ExpandingArray2, stride);
  MPX_ARG(ExpandingArray2, padding) = 0;
  MPX_ARG(ExpandingArray2, dilation) = 1;
  MPX_ARG(bool, ceil_mode) = false;
};
struct AvgPool2dOptions {
  AvgPool2dOptions(ExpandingArray2 kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  MPX_ARG(ExpandingArray2, kernel_size);
  MPX_ARG(ExpandingArray2, stride);
  MPX_ARG(ExpandingArray2, padding) = 0;
  MPX_ARG(bool, ceil_mode) = false;
  MPX_ARG(bool, count_include_pad) = true;
};
struct AdaptiveAvgPool2dOptions {
  AdaptiveAvgPool2dOptions(ExpandingArray2 output_size) : output_size_(output_size) {}  // NOLINT
  MPX_ARG(ExpandingArray2, output_size);
};

struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT
  MPX_ARG(double, p);
  MPX_ARG(bool, inplace) = false;
};
struct FlattenOptions {
  FlattenOptions() = default;
  MPX_ARG(int64_t, start_dim) = 1;
  MPX_ARG(int64_t, end_dim) = -1;
};

// ---------------------------------------------------------------- losses

struct CrossEntropyLossOptions {
  CrossEntropyLossOptions() = default;
  MPX_ARG(Tensor, weight) = {};
  MPX_ARG(int64_t, ignore_index) = -100;
  MPX_ARG(ReductionArg, reduction) = Reduction::Mean;
  MPX_ARG(double, label_smoothing) = 0.0;
};
struct NLLLossOptions {
  NLLLossOptions() = default;
  MPX_ARG(Tensor, weight) = {};
  MPX_ARG(int64_t, ignore_index) = -100;
  MPX_ARG(ReductionArg, reduction) = Reduction::Mean;
};
struct BCEWithLogitsLossOptions {
  BCEWithLogitsLossOptions() = default;
  MPX_ARG(Tensor, weight) = {};
  MPX_ARG(ReductionArg, reduction) = Reduction::Mean;
  MPX_ARG(Tensor, pos_weight) = {};
};
struct BCELossOptions {
  BCELossOptions() = default;
  MPX_ARG(Tensor, weight) = {};
  MPX_ARG(ReductionArg, reduction) = Reduction::Mean;
};
struct MSELossOptions {
  MSELossOptions() = default;
  /// `L1Loss(kSum)` / `F::l1_loss(a, b, "sum")`: the reduction converts to the options.
  template <typename R>
    requires std::is_convertible_v<R, ReductionArg>
  MSELossOptions(R reduction) : reduction_(reduction) {}  // NOLINT
  MPX_ARG(ReductionArg, reduction) = Reduction::Mean;
};
struct L1LossOptions {
  L1LossOptions() = default;
  /// `L1Loss(kSum)` / `F::l1_loss(a, b, "sum")`: the reduction converts to the options.
  template <typename R>
    requires std::is_convertible_v<R, ReductionArg>
  L1LossOptions(R reduction) : reduction_(reduction) {}  // NOLINT
  MPX_ARG(ReductionArg, reduction) = Reduction::Mean;
};
struct SmoothL1LossOptions {
  SmoothL1LossOptions() = default;
  /// `L1Loss(kSum)` / `F::l1_loss(a, b, "sum")`: the reduction converts to the options.
  template <typename R>
    requires std::is_convertible_v<R, ReductionArg>
  SmoothL1LossOptions(R reduction) : reduction_(reduction) {}  // NOLINT
  MPX_ARG(ReductionArg, reduction) = Reduction::Mean;
  MPX_ARG(double, beta) = 1.0;
};
/// Options of KLDivLoss / F::kl_div: reduction "mean" (PyTorch's default, over elements), "batchmean" (the KL
/// divergence proper), "sum" or "none"; log_target: the target holds log-probabilities.
struct KLDivLossOptions {
  KLDivLossOptions() = default;
  KLDivLossOptions(const char* reduction) : reduction_(reduction) {}  // NOLINT
  MPX_ARG(std::string, reduction) = "mean";
  MPX_ARG(bool, log_target) = false;
};

/// Options of CTCLoss / F::ctc_loss (PyTorch's keyword arguments and defaults).
struct CTCLossOptions {
  CTCLossOptions() = default;
  MPX_ARG(int64_t, blank) = 0;
  MPX_ARG(ReductionArg, reduction) = Reduction::Mean;
  /// Impossible alignments (too few frames) give 0 and no gradient instead of inf.
  MPX_ARG(bool, zero_infinity) = false;
};

/// Options of ELU / CELU (alpha: the negative saturation value).
struct ELUOptions {
  ELUOptions() = default;
  MPX_ARG(double, alpha) = 1.0;
};
using CELUOptions = ELUOptions;
/// Options of Hardtanh: the clamp range.
struct HardtanhOptions {
  HardtanhOptions() = default;
  MPX_ARG(double, min_val) = -1.0;
  MPX_ARG(double, max_val) = 1.0;
};
/// Options of GLU: the dim halved into value and gate.
struct GLUOptions {
  GLUOptions(int64_t dim = -1) : dim_(dim) {}  // NOLINT
  MPX_ARG(int64_t, dim);
};
/// Options of Softplus.
struct SoftplusOptions {
  SoftplusOptions() = default;
  MPX_ARG(double, beta) = 1.0;
  MPX_ARG(double, threshold) = 20.0;
};

// ---------------------------------------------------------------- functional-only options

namespace functional {

struct SoftmaxFuncOptions {
  SoftmaxFuncOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  MPX_ARG(int64_t, dim);
  MPX_ARG(std::optional<DType>, dtype) = std::nullopt;
};
struct LogSoftmaxFuncOptions {
  LogSoftmaxFuncOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  MPX_ARG(int64_t, dim);
  MPX_ARG(std::optional<DType>, dtype) = std::nullopt;
};
struct DropoutFuncOptions {
  DropoutFuncOptions() = default;
  MPX_ARG(double, p) = 0.5;
  MPX_ARG(bool, training) = true;
  MPX_ARG(bool, inplace) = false;
};
using ReLUFuncOptions = ReLUOptions;
using ReLU6FuncOptions = ReLU6Options;
using LeakyReLUFuncOptions = LeakyReLUOptions;
using GELUFuncOptions = GELUOptions;
using ELUFuncOptions = ELUOptions;
using CELUFuncOptions = CELUOptions;
using HardtanhFuncOptions = HardtanhOptions;
using GLUFuncOptions = GLUOptions;

struct Conv2dFuncOptions {
  Conv2dFuncOptions() = default;
  MPX_ARG(Tensor, bias) = {};
  MPX_ARG(ExpandingArray2, stride) = 1;
  MPX_ARG(ExpandingArray2, padding) = 0;
  MPX_ARG(ExpandingArray2, dilation) = 1;
  MPX_ARG(int64_t, groups) = 1;
};
struct Conv1dFuncOptions {
  Conv1dFuncOptions() = default;
  MPX_ARG(Tensor, bias) = {};
  MPX_ARG(int64_t, stride) = 1;
  MPX_ARG(int64_t, padding) = 0;
  MPX_ARG(int64_t, dilation) = 1;
  MPX_ARG(int64_t, groups) = 1;
};
struct ConvTranspose1dFuncOptions {
  ConvTranspose1dFuncOptions() = default;
  MPX_ARG(Tensor, bias) = {};
  MPX_ARG(int64_t, stride) = 1;
  MPX_ARG(int64_t, padding) = 0;
  MPX_ARG(int64_t, output_padding) = 0;
  MPX_ARG(int64_t, groups) = 1;
  MPX_ARG(int64_t, dilation) = 1;
};
struct ConvTranspose2dFuncOptions {
  ConvTranspose2dFuncOptions() = default;
  MPX_ARG(Tensor, bias) = {};
  MPX_ARG(ExpandingArray2, stride) = 1;
  MPX_ARG(ExpandingArray2, padding) = 0;
  MPX_ARG(ExpandingArray2, output_padding) = 0;
  MPX_ARG(int64_t, groups) = 1;
  MPX_ARG(ExpandingArray2, dilation) = 1;
};
using MaxPool2dFuncOptions = MaxPool2dOptions;
using AvgPool2dFuncOptions = AvgPool2dOptions;
using AdaptiveAvgPool2dFuncOptions = AdaptiveAvgPool2dOptions;

struct BatchNormFuncOptions {
  BatchNormFuncOptions() = default;
  MPX_ARG(Tensor, weight) = {};
  MPX_ARG(Tensor, bias) = {};
  MPX_ARG(bool, training) = false;
  MPX_ARG(std::optional<double>, momentum) = 0.1;
  MPX_ARG(double, eps) = 1e-5;
};
struct LayerNormFuncOptions {
  LayerNormFuncOptions(IntList normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  MPX_ARG(IntList, normalized_shape);
  MPX_ARG(Tensor, weight) = {};
  MPX_ARG(Tensor, bias) = {};
  MPX_ARG(double, eps) = 1e-5;
};
struct GroupNormFuncOptions {
  GroupNormFuncOptions(int64_t num_groups) : num_groups_(num_groups) {}  // NOLINT
  MPX_ARG(int64_t, num_groups);
  MPX_ARG(Tensor, weight) = {};
  MPX_ARG(Tensor, bias) = {};
  MPX_ARG(double, eps) = 1e-5;
};

using CrossEntropyFuncOptions = CrossEntropyLossOptions;
using NLLLossFuncOptions = NLLLossOptions;
using BinaryCrossEntropyWithLogitsFuncOptions = BCEWithLogitsLossOptions;
using BinaryCrossEntropyFuncOptions = BCELossOptions;
using MSELossFuncOptions = MSELossOptions;
using L1LossFuncOptions = L1LossOptions;
using SmoothL1LossFuncOptions = SmoothL1LossOptions;
using KLDivFuncOptions = KLDivLossOptions;
using CTCLossFuncOptions = CTCLossOptions;
/// Options of F::normalize (PyTorch's defaults: the 2-norm along dim 1).
struct NormalizeFuncOptions {
  MPX_ARG(double, p) = 2.0;
  MPX_ARG(int64_t, dim) = 1;
  MPX_ARG(double, eps) = 1e-12;
};
/// Options of F::cosine_similarity.
struct CosineSimilarityFuncOptions {
  MPX_ARG(int64_t, dim) = 1;
  MPX_ARG(double, eps) = 1e-8;
};

using nn::PadMode;
using nn::kConstant;
using nn::kReflect;
using nn::kReplicate;
using nn::kCircular;
/// pad lists (left, right) pairs starting from the last dimension, as in PyTorch.
struct PadFuncOptions {
  PadFuncOptions(IntList pad) : pad_(std::move(pad)) {}  // NOLINT
  MPX_ARG(IntList, pad);
  MPX_ARG(PadMode, mode) = PadMode::Constant;
  MPX_ARG(double, value) = 0.0;
};

}  // namespace functional
}  // namespace mpx::nn
