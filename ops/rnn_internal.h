// Shared by the recurrent family's sources (ops/rnn.cpp, ops/rnn_layer.cpp): the cells' differentiable
// backward formulas and the whole-sequence layer nodes (LSTM, GRU, Elman).
#pragma once
#include <tuple>
#include <vector>

#include "core/tensor.h"
#include "ops/rnn.h"

namespace mpx::rnn_detail {

/// g in `like`'s dtype, contiguous; zeros of like's shape when g is undefined (an output nobody used).
Tensor dense_grad(const Tensor& g, const Tensor& like);

/// The LSTM cell's gradients written with differentiable ops (for create_graph), in f32 (f64 for f64):
/// {dgates [N, 4H], dc_prev [N, H]} from dh, dc (either undefined: zero), the pre-activations and c_prev.
tensor_list lstm_cell_backward_composite(const Tensor& dh, const Tensor& dc, const Tensor& gates, const Tensor& c);
/// The GRU cell's likewise: {dgi [N, 3H], dgh [N, 3H], the direct part of dh_prev [N, H]}.
tensor_list gru_cell_backward_composite(const Tensor& dh, const Tensor& gi, const Tensor& gh, const Tensor& h);

/// Checks a recurrent op's flat parameters (PyTorch's order: per layer and direction w_ih, w_hh, then b_ih, b_hh when
/// has_biases) against G gates, the input's last dim and its dtype, naming the first that does not fit; returns H.
int64_t check_rnn_params(const char* op, int64_t G, const Tensor& input, const tensor_list& params, const RnnArgs& a);

/// One direction of one LSTM layer over the whole sequence, as one autograd node. gi [T, N, 4H] holds every
/// step's input projection with both biases, h0 and c0 [N, H], w_hh [4H, H]; `reverse` runs t = T-1 .. 0.
/// Returns (out [T, N, H] in time order, h_T, c_T). The backward keeps each step's gate gradients and forms
/// w_hh's gradient in one GEMM over all T*N rows (the step-by-step graph would take T GEMMs of depth N and
/// T-1 adds of the whole matrix); under create_graph it recomputes the steps as a differentiable graph.
/// w_hr [P, H] (undefined: none) projects each step's h to P features (PyTorch's proj_size): h0, h_T and out then
/// have P features, w_hh is [4H, P], and w_hr's gradient is one GEMM too.
/// With batch_sizes (a packed sequence's: positive, non-increasing, N = batch_sizes[0]) gi is the packed
/// [sum(batch_sizes), 4H], time t's batch_sizes[t] rows after the earlier times', and out is packed likewise;
/// each step runs on the rows still running, so a sequence's final state is taken at its own last step and,
/// reversed, it starts from h0/c0 at its own last element.
std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& gi, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                                              const Tensor& w_hr, bool reverse,
                                              const std::vector<int64_t>& batch_sizes = {});
/// One direction of one GRU layer likewise: gi [T, N, 3H] = x W_ih^T + b_ih, h0 [N, H], w_hh [3H, H],
/// b_hh [3H] (undefined: none). Returns (out [T, N, H], h_T).
std::pair<Tensor, Tensor> gru_layer(const Tensor& gi, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh,
                                    bool reverse, const std::vector<int64_t>& batch_sizes = {});

/// One direction of one Elman RNN layer likewise: gi [T, N, H] = x W_ih^T + b_ih + b_hh, h0 [N, H], w_hh [H, H];
/// h_t = tanh (relu: max(0, .)) of gi_t + h_{t-1} W_hh^T. Returns (out [T, N, H], h_T).
std::pair<Tensor, Tensor> elman_layer(const Tensor& gi, const Tensor& h0, const Tensor& w_hh, bool relu, bool reverse,
                                      const std::vector<int64_t>& batch_sizes = {});

}  // namespace mpx::rnn_detail
