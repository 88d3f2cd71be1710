// Registers the CUDA kernels of the reduction, softmax/dropout, nll and cross-entropy-rows families (same signatures
// as the CPU kernels in ops/cpu/{reduction,activation,loss}.cpp); launchers live in reduction.cu.
#include "ops/activation.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/reduction_launch.h"
#include "ops/dispatch.h"
#include "ops/loss.h"
#include "ops/reduction.h"

namespace mpx::cuda {
namespace {

// Device scratch for the partial results of rows split across blocks (stream-ordered pool;
// freed on the same stream after the launches that use it).
Tensor workspace(const Tensor& like, int64_t rows, int64_t cols, int64_t inner) {
  const int64_t bytes = rows_workspace_bytes(rows, cols, inner);
  return bytes ? empty({bytes}, TensorOptions().dtype(kUInt8).device(like.device())) : Tensor();
}
void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

void check_dense(const char* op, const Tensor& t) {
  MPX_CHECK(t.is_contiguous(), op, ": the CUDA kernel expects a contiguous tensor, got strides ",
            shape_str(t.strides()), " for shape ", shape_str(t.sizes()), "; call .contiguous() first");
}

void sum_kernel(const Tensor& out, const Tensor& in, double param) {
  if (out.numel() == 0) return;
  check_dense("sum", in);
  const int64_t rows = in.size(0), cols = in.size(1);
  TensorDeviceGuard g(out);
  cudaStream_t s = stream_of(out);
  Tensor ws = workspace(out, rows, cols, 1);
  launch_sum(out.dtype(), out.raw_data(), in.raw_data(), rows, cols, static_cast<int>(param), ptr(ws), s);
}

template <bool kProd>
void cumsum_kernel(const Tensor& out, const Tensor& in, bool reverse) {
  if (out.numel() == 0) return;
  check_dense(kProd ? "cumprod" : "cumsum", in);
  TensorDeviceGuard g(out);
  launch_cumsum(out.dtype(), out.raw_data(), in.raw_data(), in.size(0), in.size(1), in.size(2), reverse, kProd,
                stream_of(out));
}

void var_kernel(const Tensor& out, const Tensor& in, double correction) {
  if (out.numel() == 0) return;
  check_dense("var", in);
  const int64_t rows = in.size(0), cols = in.size(1);
  TensorDeviceGuard g(out);
  cudaStream_t s = stream_of(out);
  Tensor ws = workspace(out, rows, cols, 1);
  launch_var(out.dtype(), out.raw_data(), in.raw_data(), rows, cols, correction, ptr(ws), s);
}

template <bool IsMax>
void arg_reduce_kernel(const Tensor& values, const Tensor& indices, const Tensor& in) {
  if (values.numel() == 0) return;
  check_dense(IsMax ? "max" : "min", in);
  const int64_t rows = in.size(0), cols = in.size(1);
  TensorDeviceGuard g(values);
  cudaStream_t s = stream_of(values);
  Tensor ws = workspace(values, rows, cols, 1);
  launch_arg_reduce(in.dtype(), IsMax, values.raw_data(), indices.data_ptr<int64_t>(), in.raw_data(), rows, cols,
                    ptr(ws), s);
}

void softmax_kernel(const Tensor& out, const Tensor& in, int64_t outer, int64_t n, int64_t inner, bool log) {
  if (out.numel() == 0) return;
  check_dense(log ? "log_softmax" : "softmax", in);
  TensorDeviceGuard g(out);
  cudaStream_t s = stream_of(out);
  Tensor ws = workspace(out, outer * inner, n, inner);
  launch_softmax(out.dtype(), out.raw_data(), in.raw_data(), outer, n, inner, log, ptr(ws), s);
}

void softmax_backward_kernel(const Tensor& gin, const Tensor& gr, const Tensor& y, int64_t outer, int64_t n,
                             int64_t inner, bool log) {
  if (gin.numel() == 0) return;
  check_dense("softmax backward", gr);
  check_dense("softmax backward", y);
  TensorDeviceGuard g(gin);
  cudaStream_t s = stream_of(gin);
  Tensor ws = workspace(gin, outer * inner, n, inner);
  launch_softmax_backward(gin.dtype(), gin.raw_data(), gr.raw_data(), y.raw_data(), outer, n, inner, log, ptr(ws), s);
}

void dropout_kernel(const Tensor& out, const Tensor& mask, const Tensor& in, uint64_t seed, uint64_t offset, double p,
                    double scale, bool draw) {
  if (out.numel() == 0) return;
  check_dense("dropout", in);
  check_dense("dropout", mask);
  TensorDeviceGuard g(out);
  cudaStream_t s = stream_of(out);
  launch_dropout(out.dtype(), out.raw_data(), mask.data_ptr<uint8_t>(), in.raw_data(), out.numel(), seed, offset, p,
                 scale, draw, s);
}

void nll_pick_kernel(const Tensor& out, const Tensor& in, const Tensor& target, int64_t ignore_index) {
  if (out.numel() == 0) return;
  check_dense("nll_loss", target);
  TensorDeviceGuard g(out);
  cudaStream_t s = stream_of(out);
  launch_nll_pick(out.dtype(), out.raw_data(), desc(in, "nll_loss"), target.data_ptr<int64_t>(), ignore_index, s);
}

void nll_scatter_kernel(const Tensor& out, const Tensor& gr, const Tensor& target, int64_t ignore_index) {
  if (out.numel() == 0) return;
  check_dense("nll_loss backward", gr);
  check_dense("nll_loss backward", target);
  TensorDeviceGuard g(out);
  cudaStream_t s = stream_of(out);
  launch_nll_scatter(out.dtype(), out.raw_data(), gr.raw_data(), target.data_ptr<int64_t>(), out.size(0), out.size(1),
                     out.size(2), ignore_index, s);
}

void cross_entropy_kernel(const Tensor& loss, const Tensor& lse, const Tensor& x, const Tensor& target,
                          int64_t ignore_index, double smoothing) {
  if (loss.numel() == 0) return;
  check_dense("cross_entropy", x);
  check_dense("cross_entropy", target);
  TensorDeviceGuard g(loss);
  const int64_t N = x.size(0), C = x.size(1);
  Tensor ws = workspace(loss, N, C, 1);
  launch_cross_entropy_rows(x.dtype(), loss.raw_data(), lse.raw_data(), x.raw_data(), target.data_ptr<int64_t>(), N,
                            C, ignore_index, smoothing, ptr(ws), stream_of(loss));
}

void cross_entropy_backward_kernel(const Tensor& dx, const Tensor& gr, const Tensor& x, const Tensor& target,
                                   const Tensor& lse, int64_t ignore_index, double smoothing) {
  if (dx.numel() == 0) return;
  for (const Tensor* t : {&gr, &x, &target, &lse}) check_dense("cross_entropy backward", *t);
  TensorDeviceGuard g(dx);
  launch_cross_entropy_backward(x.dtype(), dx.raw_data(), gr.raw_data(), x.raw_data(), target.data_ptr<int64_t>(),
                                lse.raw_data(), x.size(0), x.size(1), ignore_index, smoothing, stream_of(dx));
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_reduction) {
  using D = DeviceType;
  using dispatch::register_kernel;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    register_kernel<OpId::sum>(D::kCUDA, dt, &sum_kernel);
    register_kernel<OpId::var>(D::kCUDA, dt, &var_kernel);
    register_kernel<OpId::softmax>(D::kCUDA, dt, &softmax_kernel);
    register_kernel<OpId::log_softmax>(D::kCUDA, dt, &softmax_kernel);
    register_kernel<OpId::softmax_backward>(D::kCUDA, dt, &softmax_backward_kernel);
    register_kernel<OpId::log_softmax_backward>(D::kCUDA, dt, &softmax_backward_kernel);
    register_kernel<OpId::dropout>(D::kCUDA, dt, &dropout_kernel);
    register_kernel<OpId::nll_loss>(D::kCUDA, dt, &nll_pick_kernel);
    register_kernel<OpId::nll_loss_backward>(D::kCUDA, dt, &nll_scatter_kernel);
    register_kernel<OpId::cross_entropy_rows>(D::kCUDA, dt, &cross_entropy_kernel);
    register_kernel<OpId::cross_entropy_rows_backward>(D::kCUDA, dt, &cross_entropy_backward_kernel);
  }
  register_kernel<OpId::sum>(D::kCUDA, kInt64, &sum_kernel);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64}) {
    register_kernel<OpId::cumsum>(D::kCUDA, dt, &cumsum_kernel<false>);
    register_kernel<OpId::cumprod>(D::kCUDA, dt, &cumsum_kernel<true>);
  }
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8}) {
    register_kernel<OpId::max_dim>(D::kCUDA, dt, &arg_reduce_kernel<true>);
    register_kernel<OpId::min_dim>(D::kCUDA, dt, &arg_reduce_kernel<false>);
  }
}

}  // namespace mpx::cuda
