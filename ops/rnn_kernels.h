// Kernel signatures of the fused recurrent cells (ops.def rows lstm_cell_fused ... gru_cell_fused_backward).
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
}  // namespace mpx::kernels
