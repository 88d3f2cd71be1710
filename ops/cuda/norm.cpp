// CUDA batch-norm kernels on cuDNN (spatial mode): training and eval forward, and backward, with
// f32 statistics for f16/bf16/f32 activations and f64 for f64, reproducing ops/cpu/norm.cpp's
// contract; batch norm + add + ReLU on cuDNN's fused persistent NHWC kernels where it has them.
#ifdef MPX_WITH_CUDNN
#include <atomic>

#include "autograd/grad_mode.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cudnn_common.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/reduction.h"

namespace mpx::cuda {
namespace {
using cudnn::Layout;
using cudnn::Scale;
using cudnn::TensorDescriptor;

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

// Set once cuDNN has refused a low-precision dtype (some versions lack bf16 batch norm): such
// inputs then run through f32 copies, which is also what the CPU kernels compute.
std::atomic<bool> g_widen[2] = {false, false};
std::atomic<bool>& widen_flag(DType dt) { return g_widen[dt == kBFloat16 ? 1 : 0]; }
bool low_precision(DType dt) { return dt == kFloat16 || dt == kBFloat16; }

// x/y/gy/gx are either row-major [N, C, *] (cuDNN sees NCHW [N, C, S, 1]) or channels-last
// [N, C, H, W] (NHWC, which cuDNN normalizes in place of layout: no transposes around it).
void describe(TensorDescriptor& d, const Tensor& t) {
  if (cudnn::layout_of(t) == Layout::kNHWC) return d.set(t, Layout::kNHWC, "batch_norm");
  const int64_t n = t.size(0), c = t.size(1);
  d.set(t.dtype(), Layout::kNCHW, n, c, n * c == 0 ? 0 : t.numel() / (n * c), 1, "batch_norm");
}
// An empty tensor of x's shape, dtype dt and layout.
Tensor empty_as(const Tensor& x, DType dt) {
  return empty(x.sizes(), TensorOptions().dtype(dt).device(x.device()).memory_format(
                              cudnn::memory_format(cudnn::layout_of(x))));
}

// A [C] vector in the statistics dtype: t itself, or `fill` everywhere when t is undefined
// (affine=false: cuDNN always takes a scale and a shift).
Tensor stat_or(const Tensor& t, double fill, const Tensor& like_stats) {
  if (t.defined()) return cudnn::dense_in(t, Layout::kNCHW);
  return full({like_stats.size(0)}, fill, like_stats.options());
}

// One forward attempt on cuDNN; returns cuDNN's status instead of throwing, so that a dtype
// cuDNN refuses can be retried in f32.
cudnnStatus_t forward_cudnn(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd,
                            const Tensor& x, const Tensor& w, const Tensor& b, bool training, double eps) {
  TensorDescriptor xd, yd, sd;
  describe(xd, x);
  describe(yd, y);
  MPX_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(sd.get(), xd.get(), kMode), "batch_norm");
  cudnnHandle_t h = cudnn::handle(y);
  const Scale one(1.0), zero(0.0);
  const Tensor ws = stat_or(w, 1.0, invstd), bs = stat_or(b, 0.0, invstd);
  if (!training)
    return cudnnBatchNormalizationForwardInference(h, kMode, one.of(x.dtype()), zero.of(x.dtype()), xd.get(),
                                                   x.raw_data(), yd.get(), y.raw_data(), sd.get(), ws.raw_data(),
                                                   bs.raw_data(), mean.raw_data(), var.raw_data(), eps);
  // cuDNN writes the batch mean and invstd as its "saved" results, and the batch variance only
  // into a running average. With factor 1 and zeroed buffers (0 * NaN would poison them) that
  // average is the unbiased batch variance; the CPU contract wants the biased one.
  Tensor running_mean = zeros({mean.size(0)}, mean.options());
  Tensor(var).zero_();
  const cudnnStatus_t st = cudnnBatchNormalizationForwardTraining(
      h, kMode, one.of(x.dtype()), zero.of(x.dtype()), xd.get(), x.raw_data(), yd.get(), y.raw_data(), sd.get(),
      ws.raw_data(), bs.raw_data(), 1.0, running_mean.raw_data(), var.raw_data(), eps, mean.raw_data(),
      invstd.raw_data());
  if (st != CUDNN_STATUS_SUCCESS) return st;
  const int64_t M = x.numel() / x.size(1);
  if (M > 1) Tensor(var).mul_(static_cast<double>(M - 1) / static_cast<double>(M));
  return st;
}

void batch_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x0,
                        const Tensor& weight, const Tensor& bias, bool training, double eps) {
  if (x0.numel() == 0) return;
  TensorDeviceGuard g(y);
  NoGradGuard ng;
  const Tensor x = cudnn::dense_in(x0, cudnn::layout_of(x0));
  MPX_CHECK(cudnn::layout_of(y) == cudnn::layout_of(x), "batch_norm: output and input layouts differ");
  const bool widen = low_precision(x.dtype()) && widen_flag(x.dtype()).load();
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  if (!widen) {
    st = forward_cudnn(y, mean, var, invstd, x, weight, bias, training, eps);
    if (st != CUDNN_STATUS_SUCCESS && !low_precision(x.dtype()))
      MPX_CUDNN_CHECK(st, "batch_norm");  // throws with cuDNN's message
    if (st != CUDNN_STATUS_SUCCESS) widen_flag(x.dtype()).store(true);
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    const Tensor xf = x.to(kFloat32);
    Tensor yf = empty_as(x, kFloat32);
    MPX_CUDNN_CHECK(forward_cudnn(yf, mean, var, invstd, xf, weight, bias, training, eps), "batch_norm");
    Tensor(y).copy_(yf);
  }
  if (!training) Tensor(invstd).copy_(rsqrt(var + eps));
}

// Training backward on cuDNN with the saved batch mean and invstd; throws-free like forward_cudnn.
cudnnStatus_t backward_cudnn(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                             const Tensor& mean, const Tensor& invstd, const Tensor& w) {
  TensorDescriptor xd, gyd, gxd, sd;
  describe(xd, x);
  describe(gyd, gy);
  describe(gxd, gx);
  MPX_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(sd.get(), xd.get(), kMode), "batch_norm_backward");
  cudnnHandle_t h = cudnn::handle(x);
  const Scale one(1.0), zero(0.0);
  const Tensor ws = stat_or(w, 1.0, invstd);
  // Unused: with the saved statistics given, cuDNN does not recompute invstd from eps.
  const double eps = 1e-5;
  return cudnnBatchNormalizationBackward(h, kMode, one.of(x.dtype()), zero.of(x.dtype()), one.of(x.dtype()),
                                         zero.of(x.dtype()), xd.get(), x.raw_data(), gyd.get(), gy.raw_data(),
                                         gxd.get(), gx.raw_data(), sd.get(), ws.raw_data(), gw.raw_data(),
                                         gb.raw_data(), eps, mean.raw_data(), invstd.raw_data());
}

// Eval-mode backward (statistics are constants, which cuDNN's backward cannot express):
// gx = gy * w * invstd, gw = sum(gy * (x - mean)) * invstd, gb = sum(gy), in the stats dtype.
void backward_eval(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                   const Tensor& mean, const Tensor& invstd, const Tensor& w) {
  const DType sd = mean.dtype();
  const int64_t C = x.size(1);
  IntList bshape(static_cast<size_t>(x.dim()), 1), dims;  // [1, C, 1, ...] and every dim but 1
  bshape[1] = C;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != 1) dims.push_back(d);
  const Tensor gyf = gy.to(sd);
  if (gb.defined()) Tensor(gb).copy_(sum(gyf, dims));
  if (gw.defined()) Tensor(gw).copy_(sum(gyf * (x.to(sd) - mean.view(bshape)), dims) * invstd);
  if (gx.defined()) {
    const Tensor k = w.defined() ? w * invstd : invstd;
    Tensor(gx).copy_(gyf * k.view(bshape));
  }
}

void batch_norm_backward(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy0,
                         const Tensor& x0, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         bool training) {
  if (x0.numel() == 0) return;
  TensorDeviceGuard g(x0);
  NoGradGuard ng;
  const Layout L = cudnn::layout_of(x0);
  const Tensor x = cudnn::dense_in(x0, L), gy = cudnn::dense_in(gy0, L);
  if (!training) {
    backward_eval(gx, gweight, gbias, gy, x, mean, invstd, weight);
    return;
  }
  // cuDNN writes all three gradients: scratch for those not asked for.
  const TensorOptions so = mean.options();
  const Tensor dx = gx.defined() ? cudnn::dense_in(gx, L) : empty_as(x, x.dtype());
  const Tensor dw = gweight.defined() ? gweight : empty({x.size(1)}, so);
  const Tensor db = gbias.defined() ? gbias : empty({x.size(1)}, so);
  const bool widen = low_precision(x.dtype()) && widen_flag(x.dtype()).load();
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  if (!widen) {
    st = backward_cudnn(dx, dw, db, gy, x, mean, invstd, weight);
    if (st != CUDNN_STATUS_SUCCESS && !low_precision(x.dtype())) MPX_CUDNN_CHECK(st, "batch_norm_backward");
    if (st != CUDNN_STATUS_SUCCESS) widen_flag(x.dtype()).store(true);
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    const Tensor xf = x.to(kFloat32), gyf = gy.to(kFloat32);
    Tensor dxf = empty_as(x, kFloat32);
    MPX_CUDNN_CHECK(backward_cudnn(dxf, dw, db, gyf, xf, mean, invstd, weight), "batch_norm_backward");
    Tensor(dx).copy_(dxf);
  }
  if (gx.defined() && !dx.is_same(gx)) Tensor(gx).copy_(dx);
}

// ---- batch norm + add + ReLU ----
// cuDNN fuses the three in training for NHWC activations (persistent mode: the reserve space
// its forward fills must reach the backward). Everything else, and any shape or dtype it
// refuses, runs batch norm in NCHW (its fast layout) and the add + ReLU as elementwise ops.
constexpr cudnnBatchNormMode_t kPersistent = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
constexpr cudnnBatchNormOps_t kAddRelu = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;

// Set once cuDNN has refused the fused kernels for f16 / bf16 / f32 / f64.
std::atomic<bool> g_no_fused[4] = {false, false, false, false};
std::atomic<bool>& no_fused(DType dt) {
  return g_no_fused[dt == kFloat16 ? 0 : dt == kBFloat16 ? 1 : dt == kFloat32 ? 2 : 3];
}

class ReluDescriptor {
 public:
  ReluDescriptor() {
    MPX_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d_), "batch_norm_add_relu");
    MPX_CUDNN_CHECK(cudnnSetActivationDescriptor(d_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
                    "batch_norm_add_relu");
  }
  ~ReluDescriptor() { cudnnDestroyActivationDescriptor(d_); }
  ReluDescriptor(const ReluDescriptor&) = delete;
  ReluDescriptor& operator=(const ReluDescriptor&) = delete;
  cudnnActivationDescriptor_t get() const { return d_; }

 private:
  cudnnActivationDescriptor_t d_ = nullptr;
};

bool try_fused(const Tensor& x, bool training) {
  return training && cudnn::layout_of(x) == Layout::kNHWC && !no_fused(x.dtype()).load();
}

// The fused training forward; returns cuDNN's status (and fills `reserve`) instead of throwing.
cudnnStatus_t fused_forward_cudnn(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd,
                                  const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& b, double eps,
                                  Tensor& reserve) {
  TensorDescriptor xd, zd, yd, sd;
  describe(xd, x);
  describe(zd, z);
  describe(yd, y);
  MPX_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(sd.get(), xd.get(), kPersistent), "batch_norm_add_relu");
  const ReluDescriptor act;
  cudnnHandle_t h = cudnn::handle(y);
  size_t ws_bytes = 0, rs_bytes = 0;
  cudnnStatus_t st = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      h, kPersistent, kAddRelu, xd.get(), zd.get(), yd.get(), sd.get(), act.get(), &ws_bytes);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kPersistent, kAddRelu, act.get(), xd.get(),
                                                              &rs_bytes);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  const Tensor ws = cudnn::workspace(y, ws_bytes);
  reserve = empty({static_cast<int64_t>(std::max<size_t>(rs_bytes, 1))},
                  TensorOptions().dtype(kUInt8).device(y.device()));
  const Scale one(1.0), zero(0.0);
  const Tensor wv = stat_or(w, 1.0, invstd), bv = stat_or(b, 0.0, invstd);
  // As in forward_cudnn: the batch variance arrives through a zeroed running average.
  Tensor running_mean = zeros({mean.size(0)}, mean.options());
  Tensor(var).zero_();
  st = cudnnBatchNormalizationForwardTrainingEx(
      h, kPersistent, kAddRelu, one.of(x.dtype()), zero.of(x.dtype()), xd.get(), x.raw_data(), zd.get(),
      z.raw_data(), yd.get(), y.raw_data(), sd.get(), wv.raw_data(), bv.raw_data(), 1.0, running_mean.raw_data(),
      var.raw_data(), eps, mean.raw_data(), invstd.raw_data(), act.get(), ws.defined() ? ws.raw_data() : nullptr,
      ws_bytes, reserve.raw_data(), rs_bytes);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  const int64_t M = x.numel() / x.size(1);
  if (M > 1) Tensor(var).mul_(static_cast<double>(M - 1) / static_cast<double>(M));
  return st;
}

Tensor batch_norm_add_relu_forward(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd,
                                   const Tensor& x0, const Tensor& z0, const Tensor& weight, const Tensor& bias,
                                   bool training, double eps) {
  TensorDeviceGuard g(y);
  NoGradGuard ng;
  const Layout L = cudnn::layout_of(x0);
  const Tensor x = cudnn::dense_in(x0, L), z = cudnn::dense_in(z0, L);
  if (try_fused(x, training)) {
    Tensor reserve;
    const Tensor yd = cudnn::dense_in(y, L);
    const cudnnStatus_t st = fused_forward_cudnn(yd, mean, var, invstd, x, z, weight, bias, eps, reserve);
    if (st == CUDNN_STATUS_SUCCESS) {
      if (!yd.is_same(y)) Tensor(y).copy_(yd);
      return reserve;
    }
    no_fused(x.dtype()).store(true);
  }
  // Batch norm in NCHW, then y = relu(bn + z) in y's own layout.
  const Tensor xn = L == Layout::kNHWC ? x.contiguous() : x;
  Tensor bn = empty(xn.sizes(), xn.options());
  batch_norm_forward(bn, mean, var, invstd, xn, weight, bias, training, eps);
  Tensor(y).copy_(relu(bn + z));
  return Tensor();
}

void batch_norm_add_relu_backward(const Tensor& gx, const Tensor& gz, const Tensor& gweight, const Tensor& gbias,
                                  const Tensor& gy0, const Tensor& x0, const Tensor& y0, const Tensor& mean,
                                  const Tensor& invstd, const Tensor& weight, const Tensor& bias,
                                  const Tensor& reserve, bool training) {
  TensorDeviceGuard g(x0);
  NoGradGuard ng;
  const Layout L = cudnn::layout_of(x0);
  const Tensor x = cudnn::dense_in(x0, L), y = cudnn::dense_in(y0, L), gy = cudnn::dense_in(gy0, L);
  const TensorOptions so = mean.options();
  if (reserve.defined()) {
    // The forward ran fused: so does the backward, which needs every output buffer.
    const Tensor dx = gx.defined() ? cudnn::dense_in(gx, L) : empty_as(x, x.dtype());
    const Tensor dz = gz.defined() ? cudnn::dense_in(gz, L) : empty_as(x, x.dtype());
    const Tensor dw = gweight.defined() ? gweight : empty({x.size(1)}, so);
    const Tensor db = gbias.defined() ? gbias : empty({x.size(1)}, so);
    TensorDescriptor xd, yd, gyd, dzd, dxd, sd;
    describe(xd, x);
    describe(yd, y);
    describe(gyd, gy);
    describe(dzd, dz);
    describe(dxd, dx);
    MPX_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(sd.get(), xd.get(), kPersistent), "batch_norm_add_relu_backward");
    const ReluDescriptor act;
    cudnnHandle_t h = cudnn::handle(x);
    size_t ws_bytes = 0;
    MPX_CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, kPersistent, kAddRelu, xd.get(), yd.get(),
                                                                      gyd.get(), dzd.get(), dxd.get(), sd.get(),
                                                                      act.get(), &ws_bytes),
                    "batch_norm_add_relu_backward");
    const Tensor ws = cudnn::workspace(x, ws_bytes);
    const Scale one(1.0), zero(0.0);
    const Tensor wv = stat_or(weight, 1.0, invstd), bv = stat_or(bias, 0.0, invstd);
    // eps is unused: cuDNN takes the saved invstd as it is.
    MPX_CUDNN_CHECK(
        cudnnBatchNormalizationBackwardEx(
            h, kPersistent, kAddRelu, one.of(x.dtype()), zero.of(x.dtype()), one.of(x.dtype()), zero.of(x.dtype()),
            xd.get(), x.raw_data(), yd.get(), y.raw_data(), gyd.get(), gy.raw_data(), dzd.get(), dz.raw_data(),
            dxd.get(), dx.raw_data(), sd.get(), wv.raw_data(), bv.raw_data(), dw.raw_data(), db.raw_data(), 1e-5,
            mean.raw_data(), invstd.raw_data(), act.get(), ws.defined() ? ws.raw_data() : nullptr, ws_bytes,
            reserve.raw_data(), static_cast<size_t>(reserve.numel())),
        "batch_norm_add_relu_backward");
    if (gx.defined() && !dx.is_same(gx)) Tensor(gx).copy_(dx);
    if (gz.defined() && !dz.is_same(gz)) Tensor(gz).copy_(dz);
    return;
  }
  // The forward's fallback: the ReLU's mask, then batch norm's backward in NCHW.
  const Tensor gr = threshold_backward(gy, y, 0.0);
  if (gz.defined()) Tensor(gz).copy_(gr);
  if (!gx.defined() && !gweight.defined() && !gbias.defined()) return;
  const bool nhwc = L == Layout::kNHWC;
  const Tensor dx = gx.defined() && nhwc ? empty(x.sizes(), x.options().memory_format(MemoryFormat::Contiguous)) : gx;
  batch_norm_backward(dx, gweight, gbias, nhwc ? gr.contiguous() : gr, nhwc ? x.contiguous() : x, mean, invstd,
                      weight, training);
  if (gx.defined() && !dx.is_same(gx)) Tensor(gx).copy_(dx);
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_norm) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    dispatch::register_kernel(OpId::batch_norm, DeviceType::kCUDA, dt,
                              reinterpret_cast<void*>(static_cast<kernels::BatchNormFn>(&batch_norm_forward)));
    dispatch::register_kernel(
        OpId::batch_norm_backward, DeviceType::kCUDA, dt,
        reinterpret_cast<void*>(static_cast<kernels::BatchNormBackwardFn>(&batch_norm_backward)));
    dispatch::register_kernel(
        OpId::batch_norm_add_relu, DeviceType::kCUDA, dt,
        reinterpret_cast<void*>(static_cast<kernels::BatchNormAddReluFn>(&batch_norm_add_relu_forward)));
    dispatch::register_kernel(
        OpId::batch_norm_add_relu_backward, DeviceType::kCUDA, dt,
        reinterpret_cast<void*>(static_cast<kernels::BatchNormAddReluBackwardFn>(&batch_norm_add_relu_backward)));
  }
}

}  // namespace mpx::cuda
#endif  // MPX_WITH_CUDNN
