// nn::init: PyTorch's initialization formulas over Tensor::uniform_/normal_/fill_.
#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/op_utils.h"

namespace mpx::nn::init {

namespace {
void check_defined(const Tensor& t, const char* fn) {
  MPX_CHECK(t.defined(), "nn::init::", fn, ": the tensor is undefined (an absent parameter?)");
  MPX_CHECK(t.is_floating_point(), "nn::init::", fn, ": expected a floating tensor, got ", ops::describe(t));
}
int64_t fan(const Tensor& t, FanMode mode) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  return mode == FanMode::FanIn ? in : out;
}
}  // namespace

double calculate_gain(Nonlinearity n, double param) {
  switch (n) {
    case Nonlinearity::Linear: case Nonlinearity::Conv1D: case Nonlinearity::Conv2D: case Nonlinearity::Conv3D:
    case Nonlinearity::ConvTranspose1D: case Nonlinearity::ConvTranspose2D: case Nonlinearity::ConvTranspose3D:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::SELU: return 3.0 / 4.0;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  MPX_CHECK(t.defined() && t.dim() >= 2, "nn::init: fan in and fan out cannot be computed for a tensor with fewer "
            "than 2 dimensions (got ", t.defined() ? ops::describe(t) : std::string("undefined"), ")");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(Tensor t, double low, double high) {
  check_defined(t, "uniform_");
  MPX_CHECK(low <= high, "nn::init::uniform_: low (", low, ") must not exceed high (", high, ")");
  NoGradGuard ng;
  t.uniform_(low, high);
  return t;
}
Tensor normal_(Tensor t, double mean, double std) {
  check_defined(t, "normal_");
  MPX_CHECK(std >= 0.0, "nn::init::normal_: std must be non-negative, got ", std);
  NoGradGuard ng;
  t.normal_(mean, std);
  return t;
}
Tensor constant_(Tensor t, double value) {
  MPX_CHECK(t.defined(), "nn::init::constant_: the tensor is undefined");
  NoGradGuard ng;
  t.fill_(value);
  return t;
}
Tensor zeros_(Tensor t) { return constant_(std::move(t), 0.0); }
Tensor ones_(Tensor t) { return constant_(std::move(t), 1.0); }

Tensor xavier_uniform_(Tensor t, double gain) {
  check_defined(t, "xavier_uniform_");
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(in + out));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(std::move(t), -bound, bound);
}
Tensor xavier_normal_(Tensor t, double gain) {
  check_defined(t, "xavier_normal_");
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  return normal_(std::move(t), 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)));
}
Tensor kaiming_uniform_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_defined(t, "kaiming_uniform_");
  if (t.numel() == 0) return t;  // PyTorch warns and leaves zero-element tensors alone
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode)));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(std::move(t), -bound, bound);
}
Tensor kaiming_normal_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_defined(t, "kaiming_normal_");
  if (t.numel() == 0) return t;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode)));
  return normal_(std::move(t), 0.0, std);
}

}  // namespace mpx::nn::init
