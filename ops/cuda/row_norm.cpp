// Registers the CUDA row-norm kernels (layer_norm_fwd/bwd, rms_norm_fwd/bwd; launchers in row_norm.cu).
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/row_norm_launch.h"
#include "ops/dispatch.h"
#include "ops/norm.h"

namespace mpx::cuda {
namespace {

DType stat_dtype(DType x) { return x == kFloat64 ? kFloat64 : kFloat32; }
void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

void check_dense(const char* op, const Tensor& t) {
  MPX_CHECK(!t.defined() || t.is_contiguous(), op, ": the CUDA kernel expects a contiguous tensor, got strides ",
            shape_str(t.strides()), " for shape ", shape_str(t.sizes()), "; call .contiguous() first");
}
// A [D] parameter in the statistics dtype, dense (the contract allows any floating dtype).
Tensor as_stat(const Tensor& t, DType sd) {
  if (!t.defined()) return t;
  return t.dtype() == sd && t.is_contiguous() ? t : t.to(sd).contiguous();
}

template <bool Rms>
void fwd(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
         double eps) {
  const char* op = Rms ? "rms_norm" : "layer_norm";
  check_dense(op, x);
  check_dense(op, y);
  TensorDeviceGuard g(x);
  const DType sd = stat_dtype(x.dtype());
  const Tensor ws = as_stat(w, sd), bs = Rms ? Tensor() : as_stat(b, sd);
  launch_row_norm_fwd(x.dtype(), Rms, y.raw_data(), Rms ? nullptr : ptr(mean), rstd.raw_data(), x.raw_data(),
                      ptr(ws), ptr(bs), x.size(0), x.size(1), eps, stream_of(x));
}

template <bool Rms>
void bwd(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& mean,
         const Tensor& rstd, const Tensor& w) {
  const char* op = Rms ? "rms_norm backward" : "layer_norm backward";
  check_dense(op, x);
  check_dense(op, dy);
  check_dense(op, dx);
  TensorDeviceGuard g(x);
  const DType sd = stat_dtype(x.dtype());
  const Tensor ws = as_stat(w, sd);
  // Partial sums of the parameter gradients per tile of rows (stream-ordered pool).
  const Tensor part = dw.defined() || (!Rms && db.defined())
                          ? empty({2 * row_norm_param_tiles(x.size(0)) * x.size(1)},
                                  TensorOptions().dtype(sd).device(x.device()))
                          : Tensor();
  launch_row_norm_bwd(x.dtype(), Rms, ptr(dx), ptr(dw), Rms ? nullptr : ptr(db), dy.raw_data(), x.raw_data(),
                      Rms ? nullptr : ptr(mean), rstd.raw_data(), ptr(ws), ptr(part), x.size(0), x.size(1),
                      stream_of(x));
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_row_norm) {
  using D = DeviceType;
  using dispatch::register_kernel;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    register_kernel<OpId::layer_norm_fwd>(D::kCUDA, dt, &fwd<false>);
    register_kernel<OpId::layer_norm_bwd>(D::kCUDA, dt, &bwd<false>);
    register_kernel<OpId::rms_norm_fwd>(D::kCUDA, dt, &fwd<true>);
    register_kernel<OpId::rms_norm_bwd>(D::kCUDA, dt, &bwd<true>);
  }
}

}  // namespace mpx::cuda
