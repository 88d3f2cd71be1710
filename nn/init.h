// nn::init: in-place parameter initializers (LibTorch's torch::nn::init), seeded by mpx::manual_seed.
#pragma once
#include <cstdint>
#include <utility>

#include "core/tensor.h"

namespace mpx::nn::init {

/// The nonlinearity a layer feeds, for calculate_gain.
enum class Nonlinearity { Linear, Conv1D, Conv2D, Conv3D, ConvTranspose1D, ConvTranspose2D, ConvTranspose3D,
                          Sigmoid, Tanh, ReLU, LeakyReLU, SELU, GELU };
/// Whether kaiming init preserves the variance of activations (fan_in) or of gradients (fan_out).
enum class FanMode { FanIn, FanOut };

inline constexpr Nonlinearity kLinear = Nonlinearity::Linear;
inline constexpr Nonlinearity kConv1D = Nonlinearity::Conv1D;
inline constexpr Nonlinearity kConv2D = Nonlinearity::Conv2D;
inline constexpr Nonlinearity kConv3D = Nonlinearity::Conv3D;
inline constexpr Nonlinearity kConvTranspose1D = Nonlinearity::ConvTranspose1D;
inline constexpr Nonlinearity kConvTranspose2D = Nonlinearity::ConvTranspose2D;
inline constexpr Nonlinearity kConvTranspose3D = Nonlinearity::ConvTranspose3D;
inline constexpr Nonlinearity kSigmoid = Nonlinearity::Sigmoid;
inline constexpr Nonlinearity kTanh = Nonlinearity::Tanh;
inline constexpr Nonlinearity kReLU = Nonlinearity::ReLU;
inline constexpr Nonlinearity kLeakyReLU = Nonlinearity::LeakyReLU;
inline constexpr Nonlinearity kSELU = Nonlinearity::SELU;
/// No gain of its own (calculate_gain refuses it, as PyTorch's); a Transformer layer's activation.
inline constexpr Nonlinearity kGELU = Nonlinearity::GELU;
inline constexpr FanMode kFanIn = FanMode::FanIn;
inline constexpr FanMode kFanOut = FanMode::FanOut;

/// PyTorch's recommended gain: 1 for linear/conv/sigmoid, 5/3 tanh, sqrt(2) relu,
/// sqrt(2 / (1 + param^2)) leaky_relu (param = negative slope, default 0.01), 3/4 selu.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

/// (fan_in, fan_out) of a weight with at least 2 dims: size(1) and size(0) times the
/// receptive field (the product of the remaining dims).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);
/// PyTorch's spelling.
inline std::pair<int64_t, int64_t> _calculate_fan_in_and_fan_out(const Tensor& tensor) {
  return calculate_fan_in_and_fan_out(tensor);
}

// All of these fill `tensor` in place under NoGradGuard and return it.
Tensor uniform_(Tensor tensor, double low = 0.0, double high = 1.0);
Tensor normal_(Tensor tensor, double mean = 0.0, double std = 1.0);
Tensor constant_(Tensor tensor, double value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);
/// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor tensor, double gain = 1.0);
/// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor tensor, double gain = 1.0);
/// U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor kaiming_uniform_(Tensor tensor, double a = 0.0, FanMode mode = kFanIn, Nonlinearity nonlinearity = kLeakyReLU);
/// N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(Tensor tensor, double a = 0.0, FanMode mode = kFanIn, Nonlinearity nonlinearity = kLeakyReLU);
/// N(mean, std^2) truncated to [a, b] (PyTorch's trunc_normal_: inverse-CDF sampling, so a narrow window costs
/// nothing extra). a and b are absolute values, as in PyTorch, not multiples of std.
Tensor trunc_normal_(Tensor tensor, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);
/// A (semi-)orthogonal matrix times gain (Saxe et al.; PyTorch's orthogonal_): the tensor seen as
/// [size(0), numel / size(0)] has orthonormal rows, or columns when it has more rows than columns. The QR
/// of a normal draw, signs fixed by R's diagonal, as PyTorch; recurrent weights are the usual use.
Tensor orthogonal_(Tensor tensor, double gain = 1.0);
/// The identity in a 2-d tensor (ones on the diagonal of a rectangular one).
Tensor eye_(Tensor tensor);

}  // namespace mpx::nn::init
