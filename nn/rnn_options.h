// Options of the recurrent layers (LSTM, GRU, RNN and their cells) and of RMSNorm (LibTorch's names).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/arg.h"
#include "core/tensor.h"

namespace mpx::nn {

/// Options of nn::LSTM (LibTorch's LSTMOptions).
struct LSTMOptions {
  LSTMOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  MPX_ARG(int64_t, input_size);
  MPX_ARG(int64_t, hidden_size);
  MPX_ARG(int64_t, num_layers) = 1;
  /// Whether the layers have bias_ih/bias_hh.
  MPX_ARG(bool, bias) = true;
  /// Input and output [N, T, *] instead of [T, N, *] (the states stay [L*D, N, H]).
  MPX_ARG(bool, batch_first) = false;
  /// Dropout on the outputs of every layer but the last, in training.
  MPX_ARG(double, dropout) = 0.0;
  MPX_ARG(bool, bidirectional) = false;
  /// When > 0 (and below hidden_size), each layer projects h to proj_size features with weight_hr_l{k}
  /// [proj_size, hidden_size]: outputs and h_n get proj_size features, c_n keeps hidden_size.
  MPX_ARG(int64_t, proj_size) = 0;
};

/// Options of nn::GRU (LibTorch's GRUOptions).
struct GRUOptions {
  GRUOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  MPX_ARG(int64_t, input_size);
  MPX_ARG(int64_t, hidden_size);
  MPX_ARG(int64_t, num_layers) = 1;
  MPX_ARG(bool, bias) = true;
  MPX_ARG(bool, batch_first) = false;
  MPX_ARG(double, dropout) = 0.0;
  MPX_ARG(bool, bidirectional) = false;
};

/// Options of nn::RNN, the Elman RNN (LibTorch's RNNOptions): nonlinearity "tanh" or "relu".
struct RNNOptions {
  RNNOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  MPX_ARG(int64_t, input_size);
  MPX_ARG(int64_t, hidden_size);
  MPX_ARG(int64_t, num_layers) = 1;
  MPX_ARG(std::string, nonlinearity) = "tanh";
  MPX_ARG(bool, bias) = true;
  MPX_ARG(bool, batch_first) = false;
  MPX_ARG(double, dropout) = 0.0;
  MPX_ARG(bool, bidirectional) = false;
};

/// Options of nn::LSTMCell and nn::GRUCell (LibTorch's LSTMCellOptions / GRUCellOptions).
struct LSTMCellOptions {
  LSTMCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  MPX_ARG(int64_t, input_size);
  MPX_ARG(int64_t, hidden_size);
  MPX_ARG(bool, bias) = true;
};
using GRUCellOptions = LSTMCellOptions;

/// Options of nn::RNNCell (LibTorch's RNNCellOptions): nonlinearity "tanh" or "relu".
struct RNNCellOptions {
  RNNCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  MPX_ARG(int64_t, input_size);
  MPX_ARG(int64_t, hidden_size);
  MPX_ARG(bool, bias) = true;
  MPX_ARG(std::string, nonlinearity) = "tanh";
};

/// Options of nn::RMSNorm (PyTorch's nn.RMSNorm): eps unset = the input dtype's machine epsilon.
struct RMSNormOptions {
  RMSNormOptions(IntList normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  MPX_ARG(IntList, normalized_shape);
  MPX_ARG(std::optional<double>, eps) = std::nullopt;
  MPX_ARG(bool, elementwise_affine) = true;
};

namespace functional {
/// Options of F::rms_norm: weight optional, eps unset = the input dtype's machine epsilon.
struct RMSNormFuncOptions {
  RMSNormFuncOptions(IntList normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  MPX_ARG(IntList, normalized_shape);
  MPX_ARG(Tensor, weight) = {};
  MPX_ARG(std::optional<double>, eps) = std::nullopt;
};
}  // namespace functional

}  // namespace mpx::nn
