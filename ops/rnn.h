// Recurrent ops: the fused LSTM/GRU cells (pointwise kernels), the cells with their GEMMs, and the
// multi-layer, optionally bidirectional sequence ops lstm, gru and the Elman rnn_tanh / rnn_relu
// (PyTorch's torch.lstm / torch.gru / torch.rnn_tanh / torch.rnn_relu).
#pragma once
#include <tuple>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mpx {

/// The pointwise half of an LSTM step (gate order i, f, g, o): gates [N, 4H] are the summed
/// pre-activations, c [N, H]; returns (h', c') with c' = f*c + i*g, h' = o*tanh(c'). One kernel
/// forward and one backward (f32 math for f16/bf16). gates and c share dtype and device.
std::pair<Tensor, Tensor> lstm_cell_fused(const Tensor& gates, const Tensor& c);
/// The pointwise half of a GRU step (gate order r, z, n): gi = x W_ih^T + b_ih, gh = h W_hh^T + b_hh
/// ([N, 3H] each), h [N, H]; returns h' = (1 - z)*n + z*h with n = tanh(gi_n + r*gh_n).
Tensor gru_cell_fused(const Tensor& gi, const Tensor& gh, const Tensor& h);

/// One LSTM step (PyTorch's torch.lstm_cell): x [N, I] (or [I]), h and c [N, H] (or [H]),
/// w_ih [4H, I], w_hh [4H, H], biases [4H] optional. Returns (h', c'). Autocast: lower, as PyTorch.
std::pair<Tensor, Tensor> lstm_cell(const Tensor& x, const Tensor& h, const Tensor& c, const Tensor& w_ih,
                                    const Tensor& w_hh, const Tensor& b_ih = {}, const Tensor& b_hh = {});
/// One GRU step (torch.gru_cell): w_ih [3H, I], w_hh [3H, H], biases [3H] optional. Returns h'.
Tensor gru_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = {},
                const Tensor& b_hh = {});

/// One Elman RNN step (torch.rnn_tanh_cell / torch.rnn_relu_cell): h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)
/// with w_ih [H, I], w_hh [H, H], biases [H] optional. Autocast: lower, as PyTorch.
Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = {},
                     const Tensor& b_hh = {});
Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = {},
                     const Tensor& b_hh = {});

/// Options of the sequence ops (PyTorch's torch.lstm/gru arguments after hx and params).
struct RnnArgs {
  bool has_biases = true;
  int64_t num_layers = 1;
  double dropout = 0.0;  ///< applied to the outputs of every layer but the last, in training
  bool train = false;
  bool bidirectional = false;
  bool batch_first = false;
  /// LSTM only (PyTorch's proj_size): when > 0 each layer and direction projects its hidden state to proj_size
  /// features with a weight w_hr [proj_size, H] (after the biases in params), so h0/h_n and the outputs have
  /// proj_size features, w_hh is [4H, proj_size] and a deeper layer's input is D*proj_size wide; c stays H.
  int64_t proj_size = 0;
};

/// Multi-layer LSTM over input [T, N, I] ([N, T, I] with batch_first; [T, I] unbatched).
/// params: per layer, per direction (forward, then reverse): w_ih, w_hh, then b_ih, b_hh when
/// has_biases, then w_hr when args.proj_size > 0 (PyTorch's flat order). h0, c0 [L*D, N, H] (D = 2 when bidirectional; [L*D, H]
/// unbatched), undefined: zeros. Returns (output [T, N, D*H], h_n, c_n). The input projections of
/// a layer run as one GEMM over all steps; each step is one GEMM and the fused cell, and each layer
/// and direction is one autograd node whose backward forms the recurrent weight's gradient in one
/// GEMM (create_graph works: it then records the steps). On CUDA the whole sequence runs on cuDNN's
/// RNN where it can. Autocast (policy lower) casts the input, states and weights to the autocast dtype.
std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, const Tensor& h0, const Tensor& c0,
                                        const tensor_list& params, const RnnArgs& args);
/// Multi-layer GRU, as lstm with one state: returns (output, h_n).
std::pair<Tensor, Tensor> gru(const Tensor& input, const Tensor& h0, const tensor_list& params, const RnnArgs& args);
/// Multi-layer Elman RNN with tanh (rnn_tanh) or ReLU (rnn_relu), as gru with [H, *] weights: returns (output, h_n).
/// Each layer and direction is one autograd node as lstm's; on CUDA too (cuDNN's RNN is not used for them).
std::pair<Tensor, Tensor> rnn_tanh(const Tensor& input, const Tensor& h0, const tensor_list& params,
                                   const RnnArgs& args);
std::pair<Tensor, Tensor> rnn_relu(const Tensor& input, const Tensor& h0, const tensor_list& params,
                                   const RnnArgs& args);

/// The recurrent cell a packed sequence op runs.
enum class RnnMode { kLstm, kGru, kRnnTanh, kRnnRelu };

/// lstm / gru / rnn_tanh / rnn_relu over a packed batch (PyTorch's data + batch_sizes overloads, what
/// nn::utils::rnn::pack_padded_sequence feeds): data [sum(batch_sizes), I] holds step t's batch_sizes[t] rows
/// after the earlier steps' (positive and non-increasing: the sequences sorted by decreasing length); states: h0
/// (and c0 for kLstm), each [L*D, N, H] with N = batch_sizes[0] or undefined (zeros). params and args as lstm's
/// (batch_first does not apply). Returns {data [sum, D*H], h_n (, c_n)}, each sequence's final state taken at its
/// own last step and the reverse direction starting at each sequence's last element, as PyTorch. Each layer and
/// direction is one autograd node as lstm's, its steps on the rows still running.
tensor_list rnn_packed(RnnMode mode, const Tensor& data, const std::vector<int64_t>& batch_sizes, const tensor_list& states,
                       const tensor_list& params, const RnnArgs& args);

}  // namespace mpx
