// Recurrent layers: nn::LSTM, nn::GRU, nn::RNN, nn::LSTMCell, nn::GRUCell, nn::RNNCell (LibTorch's API,
// PyTorch's parameter names, layouts and initialization).
#pragma once
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "nn/module.h"
#include "nn/packed_sequence.h"
#include "nn/rnn_options.h"

namespace mpx::nn {

/// Multi-layer LSTM. Parameters per layer k (and "_reverse" for the second direction):
/// weight_ih_l{k} [4H, in], weight_hh_l{k} [4H, R], bias_ih_l{k} [4H], bias_hh_l{k} [4H] (gate
/// order i, f, g, o), then weight_hr_l{k} [P, H] when proj_size P > 0, all uniform(-1/sqrt(H), 1/sqrt(H));
/// R = P when projecting, else H. On the CPU each layer's steps run on the GEMM and the fused pointwise
/// cell; on CUDA the whole sequence runs on cuDNN's RNN where it takes the call (not with proj_size).
class LSTMImpl : public Module {
 public:
  explicit LSTMImpl(const LSTMOptions& options);
  LSTMImpl(int64_t input_size, int64_t hidden_size) : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  void reset_parameters();
  /// input [T, N, I] ([N, T, I] with batch_first, [T, I] unbatched); hx = (h0 [L*D, N, R], c0 [L*D, N, H]),
  /// zeros when absent. Returns (output [T, N, D*R], (h_n, c_n)).
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                         std::optional<std::tuple<Tensor, Tensor>> hx = {});
  /// A packed batch (utils::rnn::pack_padded_sequence): every sequence runs its own length; the output is packed
  /// as the input, and h_n, c_n hold each sequence's last step, in the input's batch order (as hx).
  std::tuple<utils::rnn::PackedSequence, std::tuple<Tensor, Tensor>> forward_with_packed_input(
      const utils::rnn::PackedSequence& input, std::optional<std::tuple<Tensor, Tensor>> hx = {});
  std::string name() const override { return "LSTM"; }
  void pretty_print(std::ostream& os) const override;
  /// The parameters in PyTorch's flat order (per layer, per direction: w_ih, w_hh, b_ih, b_hh, w_hr).
  const std::vector<Tensor>& flat_weights() const { return flat_weights_; }

  LSTMOptions options;

 private:
  std::vector<Tensor> flat_weights_;
};
MPX_MODULE(LSTM);

/// Multi-layer GRU (gate order r, z, n); parameters as LSTM's with 3H rows.
class GRUImpl : public Module {
 public:
  explicit GRUImpl(const GRUOptions& options);
  GRUImpl(int64_t input_size, int64_t hidden_size) : GRUImpl(GRUOptions(input_size, hidden_size)) {}
  void reset_parameters();
  /// input as LSTM's; hx [L*D, N, H] (undefined: zeros). Returns (output, h_n).
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = {});
  /// A packed batch, as LSTM's: (packed output, h_n).
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                           const Tensor& hx = {});
  std::string name() const override { return "GRU"; }
  void pretty_print(std::ostream& os) const override;
  const std::vector<Tensor>& flat_weights() const { return flat_weights_; }

  GRUOptions options;

 private:
  std::vector<Tensor> flat_weights_;
};
MPX_MODULE(GRU);

/// Multi-layer Elman RNN: h_t = tanh (or relu) of x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh; parameters as
/// LSTM's with H rows (weight_ih_l0 [H, in], weight_hh_l0 [H, H], ...).
class RNNImpl : public Module {
 public:
  explicit RNNImpl(const RNNOptions& options);
  RNNImpl(int64_t input_size, int64_t hidden_size) : RNNImpl(RNNOptions(input_size, hidden_size)) {}
  void reset_parameters();
  /// input as LSTM's; hx [L*D, N, H] (undefined: zeros). Returns (output, h_n).
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = {});
  /// A packed batch, as LSTM's: (packed output, h_n).
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                           const Tensor& hx = {});
  std::string name() const override { return "RNN"; }
  void pretty_print(std::ostream& os) const override;
  const std::vector<Tensor>& flat_weights() const { return flat_weights_; }

  RNNOptions options;

 private:
  std::vector<Tensor> flat_weights_;
};
MPX_MODULE(RNN);

/// One LSTM step: weight_ih [4H, I], weight_hh [4H, H], bias_ih, bias_hh [4H].
class LSTMCellImpl : public Module {
 public:
  explicit LSTMCellImpl(const LSTMCellOptions& options);
  LSTMCellImpl(int64_t input_size, int64_t hidden_size) : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size)) {}
  void reset_parameters();
  /// input [N, I] (or [I]); hx = (h, c) [N, H], zeros when absent. Returns (h', c').
  std::tuple<Tensor, Tensor> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = {});
  std::string name() const override { return "LSTMCell"; }
  void pretty_print(std::ostream& os) const override;

  LSTMCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};
MPX_MODULE(LSTMCell);

/// One GRU step: weight_ih [3H, I], weight_hh [3H, H], bias_ih, bias_hh [3H].
class GRUCellImpl : public Module {
 public:
  explicit GRUCellImpl(const GRUCellOptions& options);
  GRUCellImpl(int64_t input_size, int64_t hidden_size) : GRUCellImpl(GRUCellOptions(input_size, hidden_size)) {}
  void reset_parameters();
  /// input [N, I] (or [I]); hx [N, H], zeros when undefined. Returns h'.
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  std::string name() const override { return "GRUCell"; }
  void pretty_print(std::ostream& os) const override;

  GRUCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};
MPX_MODULE(GRUCell);

/// One Elman RNN step: weight_ih [H, I], weight_hh [H, H], bias_ih, bias_hh [H].
class RNNCellImpl : public Module {
 public:
  explicit RNNCellImpl(const RNNCellOptions& options);
  RNNCellImpl(int64_t input_size, int64_t hidden_size) : RNNCellImpl(RNNCellOptions(input_size, hidden_size)) {}
  void reset_parameters();
  /// input [N, I] (or [I]); hx [N, H], zeros when undefined. Returns h'.
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  std::string name() const override { return "RNNCell"; }
  void pretty_print(std::ostream& os) const override;

  RNNCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};
MPX_MODULE(RNNCell);

}  // namespace mpx::nn
