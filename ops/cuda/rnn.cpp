// Registers the CUDA fused LSTM/GRU cell kernels (launchers in rnn.cu). The GEMMs of a step are
// linear's/addmm's (cuBLASLt); cuDNN's RNN is not used yet.
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/rnn_launch.h"
#include "ops/dispatch.h"
#include "ops/rnn_kernels.h"

namespace mpx::cuda {
namespace {

void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

void check_dense(const char* op, std::initializer_list<Tensor> ts) {
  for (const Tensor& t : ts)
    MPX_CHECK(!t.defined() || t.is_contiguous(), op, ": the CUDA kernel expects contiguous tensors, got strides ",
              shape_str(t.strides()), " for shape ", shape_str(t.sizes()), "; call .contiguous() first");
}

void lstm_cell(const Tensor& h_out, const Tensor& c_out, const Tensor& act, const Tensor& gates, const Tensor& c_prev) {
  check_dense("lstm_cell_fused", {h_out, c_out, act, gates, c_prev});
  TensorDeviceGuard g(c_prev);
  launch_lstm_cell(c_prev.dtype(), h_out.raw_data(), c_out.raw_data(), act.raw_data(), gates.raw_data(),
                   c_prev.raw_data(), c_prev.size(0), c_prev.size(1), stream_of(c_prev));
}

void lstm_cell_backward(const Tensor& dgates, const Tensor& dc_prev, const Tensor& dh, const Tensor& dc,
                        const Tensor& act, const Tensor& c_prev, const Tensor& c_out) {
  check_dense("lstm_cell_fused_backward", {dgates, dc_prev, dh, dc, act, c_prev, c_out});
  TensorDeviceGuard g(c_prev);
  launch_lstm_cell_backward(c_prev.dtype(), dgates.raw_data(), ptr(dc_prev), ptr(dh), ptr(dc), act.raw_data(),
                            c_prev.raw_data(), c_out.raw_data(), c_prev.size(0), c_prev.size(1), stream_of(c_prev));
}

void gru_cell(const Tensor& h_out, const Tensor& ws, const Tensor& gi, const Tensor& gh, const Tensor& h_prev) {
  check_dense("gru_cell_fused", {h_out, ws, gi, gh, h_prev});
  TensorDeviceGuard g(h_prev);
  launch_gru_cell(h_prev.dtype(), h_out.raw_data(), ws.raw_data(), gi.raw_data(), gh.raw_data(), h_prev.raw_data(),
                  h_prev.size(0), h_prev.size(1), stream_of(h_prev));
}

void gru_cell_backward(const Tensor& dgi, const Tensor& dgh, const Tensor& dh_prev, const Tensor& dh,
                       const Tensor& ws, const Tensor& h_prev) {
  check_dense("gru_cell_fused_backward", {dgi, dgh, dh_prev, dh, ws, h_prev});
  TensorDeviceGuard g(h_prev);
  launch_gru_cell_backward(h_prev.dtype(), dgi.raw_data(), dgh.raw_data(), ptr(dh_prev), dh.raw_data(),
                           ws.raw_data(), h_prev.raw_data(), h_prev.size(0), h_prev.size(1), stream_of(h_prev));
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_rnn) {
  using D = DeviceType;
  using dispatch::register_kernel;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    register_kernel<OpId::lstm_cell_fused>(D::kCUDA, dt, &lstm_cell);
    register_kernel<OpId::lstm_cell_fused_backward>(D::kCUDA, dt, &lstm_cell_backward);
    register_kernel<OpId::gru_cell_fused>(D::kCUDA, dt, &gru_cell);
    register_kernel<OpId::gru_cell_fused_backward>(D::kCUDA, dt, &gru_cell_backward);
  }
}

}  // namespace mpx::cuda
