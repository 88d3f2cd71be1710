// Launchers of the CUDA fused LSTM/GRU cell kernels with POD arguments, shared by ops/cuda/rnn.cu
// and ops/cuda/rnn.cpp. All buffers contiguous [N, k*H] of dtype dt; null = absent.
#pragma once
#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// LSTM cell forward (kernels::LstmCellFn).
void launch_lstm_cell(DType dt, void* h_out, void* c_out, void* act, const void* gates, const void* c_prev, int64_t N,
                      int64_t H, cudaStream_t s);
/// LSTM cell backward (kernels::LstmCellBackwardFn); dh, dc and dc_prev may be null.
void launch_lstm_cell_backward(DType dt, void* dgates, void* dc_prev, const void* dh, const void* dc,
                               const void* act, const void* c_prev, const void* c_out, int64_t N, int64_t H,
                               cudaStream_t s);
/// GRU cell forward (kernels::GruCellFn).
void launch_gru_cell(DType dt, void* h_out, void* ws, const void* gi, const void* gh, const void* h_prev, int64_t N,
                     int64_t H, cudaStream_t s);
/// GRU cell backward (kernels::GruCellBackwardFn); dh_prev may be null.
void launch_gru_cell_backward(DType dt, void* dgi, void* dgh, void* dh_prev, const void* dh, const void* ws,
                              const void* h_prev, int64_t N, int64_t H, cudaStream_t s);

}  // namespace mpx::cuda
