// Kernel signatures of the fused recurrent cells (ops.def rows lstm_cell_fused ... gru_cell_fused_backward) and of
// whole fused sequences (rnn_fused, rnn_fused_backward: cuDNN's RNN).
#pragma once
#include "core/tensor.h"

namespace mpx::kernels {
// All tensors contiguous [N, k*H] of one dtype; pointwise math in f32 (f64 for f64).

/// LSTM cell pointwise part (PyTorch's gate order i, f, g, o): gates [N, 4H] holds the
/// pre-activations x W_ih^T + b_ih + h W_hh^T + b_hh; c_prev [N, H]. Writes c_out = f*c_prev + i*g,
/// h_out = o*tanh(c_out), and act [N, 4H] = (sigmoid i, sigmoid f, tanh g, sigmoid o) for the backward.
using LstmCellFn = void (*)(const Tensor& h_out, const Tensor& c_out, const Tensor& act, const Tensor& gates,
                            const Tensor& c_prev);
/// Its backward: dgates [N, 4H] (pre-activation gradients) and dc_prev [N, H] from dh and dc
/// (either may be undefined: zero), the forward's act, c_prev and c_out.
using LstmCellBackwardFn = void (*)(const Tensor& dgates, const Tensor& dc_prev, const Tensor& dh,
                                    const Tensor& dc, const Tensor& act, const Tensor& c_prev, const Tensor& c_out);
/// GRU cell pointwise part (PyTorch's gate order r, z, n): gi [N, 3H] = x W_ih^T + b_ih,
/// gh [N, 3H] = h W_hh^T + b_hh, h_prev [N, H]. r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z),
/// n = tanh(gi_n + r * gh_n), h_out = (1 - z) * n + z * h_prev; ws [N, 4H] = (r, z, n, gh_n).
using GruCellFn = void (*)(const Tensor& h_out, const Tensor& ws, const Tensor& gi, const Tensor& gh,
                           const Tensor& h_prev);
/// Its backward: dgi [N, 3H], dgh [N, 3H], dh_prev [N, H] from dh (the forward's ws and h_prev).
using GruCellBackwardFn = void (*)(const Tensor& dgi, const Tensor& dgh, const Tensor& dh_prev, const Tensor& dh,
                                   const Tensor& ws, const Tensor& h_prev);

/// A whole multi-layer LSTM or GRU sequence for rnn_fused: time-major input [T, N, I], states
/// [L * D, N, H], parameters in PyTorch's flat order (w_ih, w_hh[, b_ih, b_hh] per layer and
/// direction), all contiguous, one dtype, one device; no dropout between layers.
struct RnnParams {
  bool lstm = true;  ///< LSTM (gates i, f, g, o), else GRU (r, z, n)
  int64_t num_layers = 1, hidden = 0;
  bool bidirectional = false, has_biases = true;
  bool training = false;  ///< keep what the backward needs (reserve space)
};
/// Forward: y [T, N, D * H], hy (and cy for an LSTM) [L * D, N, H] from x and hx, cx (undefined:
/// zeros). Returns false, writing nothing, where the backend refuses the configuration (the op
/// then runs cell by cell); else fills `weights` (the parameters in the backend's own layout) and,
/// when training, `reserve`, both kept for the backward.
using RnnFn = bool (*)(const Tensor& y, const Tensor& hy, const Tensor& cy, Tensor& weights, Tensor& reserve,
                       const Tensor& x, const Tensor& hx, const Tensor& cx, const tensor_list& params,
                       const RnnParams& p);
/// Backward from dy (defined) and dhy, dcy (undefined: zero): dx, dhx and dcx (undefined: not
/// wanted) and dparams (one per parameter, its shape, written whole).
using RnnBackwardFn = void (*)(const Tensor& dx, const Tensor& dhx, const Tensor& dcx, const tensor_list& dparams,
                               const Tensor& x, const Tensor& hx, const Tensor& cx, const Tensor& y,
                               const Tensor& dy, const Tensor& dhy, const Tensor& dcy, const Tensor& weights,
                               const Tensor& reserve, const RnnParams& p);
}  // namespace mpx::kernels
