// nn::init: PyTorch's initialization formulas over Tensor::uniform_/normal_/fill_.
#include "nn/init.h"

#include <Eigen/QR>

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/op_utils.h"
#include "ops/shape.h"

namespace mpx::nn::init {

namespace {
void check_defined(const Tensor& t, const char* fn) {
  MPX_CHECK(t.defined(), "nn::init::", fn, ": the tensor is undefined (an absent parameter?)");
  MPX_CHECK(t.is_floating_point(), "nn::init::", fn, ": expected a floating tensor, got ", ops::describe(t));
}
// erf^-1 in double: a rational first guess (Giles, 2010) refined by two Newton steps on erf.
double erfinv(double y) {
  if (y <= -1.0) return -INFINITY;
  if (y >= 1.0) return INFINITY;
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    double p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                     0.246640727, 1.50140941})
      p = c + p * w;
    x = p * y;
  } else {
    w = std::sqrt(w) - 3.0;
    double p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      p = c + p * w;
    x = p * y;
  }
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
  return x;
}
// Draws `n` doubles from the default generator (the same stream a CPU uniform_/normal_ fill takes).
std::vector<double> draw(int64_t n, bool normal) {
  Tensor t = empty({n}, TensorOptions(kFloat64));
  if (normal) t.normal_(0.0, 1.0);
  else t.uniform_(0.0, 1.0);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + n);
}
// Writes host values (row-major, t's shape) into t on its device and in its dtype.
Tensor write(Tensor t, const std::vector<double>& v) {
  NoGradGuard ng;
  t.copy_(tensor(v, t.sizes()).to(t.device()).to(t.dtype()));
  return t;
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
    case Nonlinearity::GELU:
      MPX_ERROR("nn::init::calculate_gain: GELU has no recommended gain (PyTorch has none either); pass kReLU's, or "
                "a gain of your own to the init");
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  MPX_CHECK(t.defined() && t.dim() >= 2, "nn::init: fan in and fan out cannot be computed for a tensor with fewer "
            "than 2 dimensions (got ", ops::describe(t), ")");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(Tensor t, double low, double high) {
  check_defined(t, "uniform_");
  MPX_CHECK(low <= high, "nn::init::uniform_: low (", low, ") must not exceed high (", high, ")");
  if (t.numel() == 0) return t;  // a no-op, as kaiming_*'s (xavier's bound on [0, 0] is infinite)
  NoGradGuard ng;
  t.uniform_(low, high);
  return t;
}
Tensor normal_(Tensor t, double mean, double std) {
  check_defined(t, "normal_");
  MPX_CHECK(std >= 0.0, "nn::init::normal_: std must be non-negative, got ", std);
  if (t.numel() == 0) return t;
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

Tensor trunc_normal_(Tensor t, double mean, double std, double a, double b) {
  check_defined(t, "trunc_normal_");
  MPX_CHECK(std > 0.0 && std::isfinite(std), "nn::init::trunc_normal_: std must be positive and finite, got ", std);
  MPX_CHECK(a < b, "nn::init::trunc_normal_: the window [a, b] = [", a, ", ", b, "] is empty");
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double lo = 2.0 * cdf((a - mean) / std) - 1.0, hi = 2.0 * cdf((b - mean) / std) - 1.0;
  std::vector<double> v = draw(t.numel(), false);
  for (double& x : v) x = std::clamp(mean + std * std::sqrt(2.0) * erfinv(lo + (hi - lo) * x), a, b);
  return write(std::move(t), v);
}

Tensor orthogonal_(Tensor t, double gain) {
  check_defined(t, "orthogonal_");
  MPX_CHECK(t.dim() >= 2, "nn::init::orthogonal_: only tensors with 2 or more dimensions are supported, got ",
            ops::describe(t));
  if (t.numel() == 0) return t;
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  const bool wide = rows < cols;  // QR of the transpose, so Q has orthonormal rows
  const int64_t m = wide ? cols : rows, n = wide ? rows : cols;
  const std::vector<double> g = draw(rows * cols, true);
  // The draw as [rows, cols] row-major, transposed when wide: A is m x n with m >= n.
  Eigen::MatrixXd A(m, n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) (wide ? A(c, r) : A(r, c)) = g[static_cast<size_t>(r * cols + c)];
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(A);
  Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(m, n);
  const Eigen::MatrixXd R = qr.matrixQR().topRows(n).triangularView<Eigen::Upper>();
  for (int64_t j = 0; j < n; ++j)
    if (R(j, j) < 0) q.col(j) *= -1.0;  // PyTorch's sign fix: Q's distribution is then uniform (Haar)
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] = gain * (wide ? q(c, r) : q(r, c));
  return write(std::move(t), v);
}

Tensor eye_(Tensor t) {
  check_defined(t, "eye_");
  MPX_CHECK(t.dim() == 2, "nn::init::eye_: only 2-d tensors are supported, got ", ops::describe(t));
  std::vector<double> v(static_cast<size_t>(t.numel()), 0.0);
  for (int64_t i = 0; i < std::min(t.size(0), t.size(1)); ++i) v[static_cast<size_t>(i * t.size(1) + i)] = 1.0;
  return write(std::move(t), v);
}

}  // namespace mpx::nn::init
