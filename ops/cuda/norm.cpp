// CUDA batch-norm kernels on cuDNN: training and eval forward, and backward, with f32 statistics
// for f16/bf16/f32 activations and f64 for f64, reproducing ops/cpu/norm.cpp's contract; NHWC
// training (and batch norm + ReLU, batch norm + add + ReLU) on cuDNN's persistent kernels.
#ifdef MPX_WITH_CUDNN
#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

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

// A fast path cuDNN did not take: a refusal (shape, dtype, layout, mode) is counted for
// cuda::cudnn_fallbacks() and the caller runs the slower equivalent; any other status is a
// failure (execution, memory) that a fallback would only hide, so it throws.
void fall_back(cudnnStatus_t st, const char* op, const char* path, const Tensor& x) {
  if (!cudnn::refused(st)) cudnn::throw_error(st, op, path);
  cudnn::count_fallback(std::string(op) + ": cuDNN refused " + path + " for " + dtype_name(x.dtype()) + " " +
                            shape_str(x.sizes()) + (cudnn::layout_of(x) == Layout::kNHWC ? " channels-last" : ""),
                        st);
}

// x/y/gy/gx are either row-major [N, C, *] (cuDNN sees NCHW [N, C, S, 1]) or channels-last
// [N, C, H, W] (NHWC, which cuDNN normalizes in place of layout: no transposes around it).
void describe(TensorDescriptor& d, const Tensor& t) {
  if (cudnn::layout_of(t) == Layout::kNHWC) return d.set(t, Layout::kNHWC, "batch_norm");
  const int64_t n = t.size(0), c = t.size(1);
  d.set(t.dtype(), Layout::kNCHW, n, c, n * c == 0 ? 0 : t.numel() / (n * c), 1, "batch_norm");
}
// The descriptor of the [C] scale/bias/mean/variance buffers: 1xCx1x1 in their own dtype (f32, f64
// for f64 data), what cuDNN's header asks for (type = typeOf(x) == double ? double : float).
// Not cudnnDeriveBNTensorDescriptor: its documentation widens only HALF to FLOAT, so for bf16
// data it may describe these f32 buffers as bf16.
void describe_stats(TensorDescriptor& d, const Tensor& stats, const char* op) {
  d.set(stats.dtype(), Layout::kNCHW, 1, stats.size(0), 1, 1, op);
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

// The running statistics as cuDNN takes them: both null when there are none to update.
void* running_ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// One forward attempt on cuDNN; returns cuDNN's status instead of throwing, so that a dtype
// cuDNN refuses can be retried in f32.
cudnnStatus_t forward_cudnn(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd,
                            const Tensor& x, const Tensor& w, const Tensor& b, bool training, double eps,
                            const kernels::BnRunning& run) {
  TensorDescriptor xd, yd, sd;
  describe(xd, x);
  describe(yd, y);
  describe_stats(sd, mean, "batch_norm");
  cudnnHandle_t h = cudnn::handle(y);
  const Scale one(1.0), zero(0.0);
  const Tensor ws = stat_or(w, 1.0, invstd), bs = stat_or(b, 0.0, invstd);
  if (!training)
    return cudnnBatchNormalizationForwardInference(h, kMode, one.of(x.dtype()), zero.of(x.dtype()), xd.get(),
                                                   x.raw_data(), yd.get(), y.raw_data(), sd.get(), ws.raw_data(),
                                                   bs.raw_data(), mean.raw_data(), var.raw_data(), eps);
  // cuDNN writes the batch mean and invstd as its "saved" results and updates the running
  // statistics itself, PyTorch's rule (unbiased variance): no kernels of ours around it.
  return cudnnBatchNormalizationForwardTraining(
      h, kMode, one.of(x.dtype()), zero.of(x.dtype()), xd.get(), x.raw_data(), yd.get(), y.raw_data(), sd.get(),
      ws.raw_data(), bs.raw_data(), run.momentum, running_ptr(run.mean), running_ptr(run.var), eps, mean.raw_data(),
      invstd.raw_data());
}

// Forward through cuDNN's classic (spatial) kernels in x's layout, widening refused dtypes.
void forward_spatial(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x0,
                     const Tensor& weight, const Tensor& bias, bool training, double eps,
                     const kernels::BnRunning& run) {
  const Tensor x = cudnn::dense_in(x0, cudnn::layout_of(x0));
  MPX_CHECK(cudnn::layout_of(y) == cudnn::layout_of(x), "batch_norm: output and input layouts differ");
  const bool widen = low_precision(x.dtype()) && widen_flag(x.dtype()).load();
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  if (!widen) {
    st = forward_cudnn(y, mean, var, invstd, x, weight, bias, training, eps, run);
    if (st != CUDNN_STATUS_SUCCESS && !low_precision(x.dtype())) MPX_CUDNN_CHECK(st, "batch_norm");
    if (st != CUDNN_STATUS_SUCCESS) {
      fall_back(st, "batch_norm", "this dtype (computing in f32 from now on)", x);
      widen_flag(x.dtype()).store(true);
    }
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    const Tensor xf = x.to(kFloat32);
    Tensor yf = empty_as(x, kFloat32);
    MPX_CUDNN_CHECK(forward_cudnn(yf, mean, var, invstd, xf, weight, bias, training, eps, run), "batch_norm");
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
  describe_stats(sd, mean, "batch_norm_backward");
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

// Backward through cuDNN's classic kernels (or backward_eval) in x's layout.
void backward_spatial(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy0,
                      const Tensor& x0, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      bool training) {
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
    if (st != CUDNN_STATUS_SUCCESS) {
      fall_back(st, "batch_norm_backward", "this dtype (computing in f32 from now on)", x);
      widen_flag(x.dtype()).store(true);
    }
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    const Tensor xf = x.to(kFloat32), gyf = gy.to(kFloat32);
    Tensor dxf = empty_as(x, kFloat32);
    MPX_CUDNN_CHECK(backward_cudnn(dxf, dw, db, gyf, xf, mean, invstd, weight), "batch_norm_backward");
    Tensor(dx).copy_(dxf);
  }
  if (gx.defined() && !dx.is_same(gx)) Tensor(gx).copy_(dx);
}

// ---- NHWC training: cuDNN's persistent kernels ----
// cuDNN's classic spatial kernels measured 5x slower on NHWC than on NCHW (ResNet-50, H100), so
// channels-last training runs on the persistent "Ex" kernels PyTorch uses for channels_last
// (batch norm alone, or fused with the residual add and ReLU); their forward fills a reserve
// space the backward must get back. NHWC in eval, and any shape or dtype cuDNN refuses, goes
// through NCHW copies (its fast layout for the classic kernels).
constexpr cudnnBatchNormMode_t kPersistent = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

// The (op, dtype, channels) combinations cuDNN has refused the persistent kernels for, so each
// is asked once; one refused layer does not send the others to the fallback.
std::mutex g_refused_mu;
std::set<std::tuple<int, int, int64_t>> g_refused;
std::tuple<int, int, int64_t> refusal_key(cudnnBatchNormOps_t ops, const Tensor& x) {
  return {static_cast<int>(ops), static_cast<int>(x.dtype()), x.size(1)};
}
void refuse(cudnnBatchNormOps_t ops, const Tensor& x) {
  std::lock_guard<std::mutex> lk(g_refused_mu);
  g_refused.insert(refusal_key(ops, x));
}
bool try_persistent(const Tensor& x, cudnnBatchNormOps_t ops, bool training) {
  if (!training || x.dim() != 4 || cudnn::layout_of(x) != Layout::kNHWC) return false;
  std::lock_guard<std::mutex> lk(g_refused_mu);
  return g_refused.count(refusal_key(ops, x)) == 0;
}

// The ReLU of the fused forms, for ops other than plain BN (null for it). A descriptor holds
// only its settings, so one serves every call and thread; made once (leaked: static
// destruction order would outlive cuDNN's library).
cudnnActivationDescriptor_t relu_for(cudnnBatchNormOps_t ops) {
  static const cudnnActivationDescriptor_t relu = [] {
    cudnnActivationDescriptor_t d = nullptr;
    MPX_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d), "batch_norm_relu");
    MPX_CUDNN_CHECK(cudnnSetActivationDescriptor(d, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
                    "batch_norm_relu");
    return d;
  }();
  return ops == CUDNN_BATCHNORM_OPS_BN ? nullptr : relu;
}

// The persistent training forward, y = bn(x), relu(bn(x)) (BN_ACTIVATION) or relu(bn(x) + z)
// (BN_ADD_ACTIVATION, z defined); returns cuDNN's status, and fills `reserve`, instead of throwing.
cudnnStatus_t persistent_forward(cudnnBatchNormOps_t ops, const Tensor& y, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& b, double eps,
                                 const kernels::BnRunning& run, Tensor& reserve) {
  const bool fused = z.defined();
  TensorDescriptor xd, zd, yd, sd;
  describe(xd, x);
  describe(yd, y);
  if (fused) describe(zd, z);
  describe_stats(sd, mean, "batch_norm");
  const cudnnActivationDescriptor_t ad = relu_for(ops);
  cudnnHandle_t h = cudnn::handle(y);
  size_t ws_bytes = 0, rs_bytes = 0;
  cudnnStatus_t st = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      h, kPersistent, ops, xd.get(), fused ? zd.get() : nullptr, yd.get(), sd.get(), ad, &ws_bytes);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kPersistent, ops, ad, xd.get(), &rs_bytes);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  const Tensor ws = cudnn::workspace(y, ws_bytes);
  reserve = empty({static_cast<int64_t>(std::max<size_t>(rs_bytes, 1))},
                  TensorOptions().dtype(kUInt8).device(y.device()));
  const Scale one(1.0), zero(0.0);
  const Tensor wv = stat_or(w, 1.0, invstd), bv = stat_or(b, 0.0, invstd);
  // As in forward_cudnn: cuDNN updates the running statistics in the same call.
  return cudnnBatchNormalizationForwardTrainingEx(
      h, kPersistent, ops, one.of(x.dtype()), zero.of(x.dtype()), xd.get(), x.raw_data(), fused ? zd.get() : nullptr,
      fused ? z.raw_data() : nullptr, yd.get(), y.raw_data(), sd.get(), wv.raw_data(), bv.raw_data(), run.momentum,
      running_ptr(run.mean), running_ptr(run.var), eps, mean.raw_data(), invstd.raw_data(), ad,
      ws.defined() ? ws.raw_data() : nullptr, ws_bytes, reserve.raw_data(), rs_bytes);
}

// The persistent backward of a forward of `ops` that filled `reserve`: gx, gw, gb (and gz for
// BN_ADD_ACTIVATION; the activation's mask from y and the bias) all written; callers pass
// scratch for those not wanted. Returns cuDNN's status instead of throwing, so that a refusal
// falls back as the forward's does.
cudnnStatus_t persistent_backward(cudnnBatchNormOps_t ops, const Tensor& gx, const Tensor& gz, const Tensor& gw,
                                  const Tensor& gb, const Tensor& gy, const Tensor& x, const Tensor& y,
                                  const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& b,
                                  const Tensor& reserve) {
  const bool act_on = ops != CUDNN_BATCHNORM_OPS_BN, fused = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  const char* op = fused ? "batch_norm_add_relu_backward" : act_on ? "batch_norm_relu_backward" : "batch_norm_backward";
  TensorDescriptor xd, yd, gyd, gzd, gxd, sd;
  describe(xd, x);
  describe(gyd, gy);
  describe(gxd, gx);
  if (act_on) describe(yd, y);
  if (fused) describe(gzd, gz);
  describe_stats(sd, mean, op);
  const cudnnActivationDescriptor_t ad = relu_for(ops);
  cudnnHandle_t h = cudnn::handle(x);
  size_t ws_bytes = 0;
  // yDesc: x's for plain BN, as PyTorch and Paddle pass to the query (the call itself takes none).
  const cudnnStatus_t st = cudnnGetBatchNormalizationBackwardExWorkspaceSize(
      h, kPersistent, ops, xd.get(), act_on ? yd.get() : xd.get(), gyd.get(), fused ? gzd.get() : nullptr, gxd.get(),
      sd.get(), ad, &ws_bytes);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  const Tensor ws = cudnn::workspace(x, ws_bytes);
  const Scale one(1.0), zero(0.0);
  const Tensor wv = stat_or(w, 1.0, invstd), bv = stat_or(b, 0.0, invstd);
  // eps is unused: cuDNN takes the saved invstd as it is.
  return cudnnBatchNormalizationBackwardEx(
      h, kPersistent, ops, one.of(x.dtype()), zero.of(x.dtype()), one.of(x.dtype()), zero.of(x.dtype()), xd.get(),
      x.raw_data(), act_on ? yd.get() : nullptr, act_on ? y.raw_data() : nullptr, gyd.get(), gy.raw_data(),
      fused ? gzd.get() : nullptr, fused ? gz.raw_data() : nullptr, gxd.get(), gx.raw_data(), sd.get(), wv.raw_data(),
      act_on ? bv.raw_data() : nullptr, gw.raw_data(), gb.raw_data(), 1e-5, mean.raw_data(), invstd.raw_data(), ad,
      ws.defined() ? ws.raw_data() : nullptr, ws_bytes, reserve.raw_data(), static_cast<size_t>(reserve.numel()));
}

// Output buffers for the persistent backward: t itself when dense in x's layout, else scratch.
Tensor out_like(const Tensor& t, const Tensor& x) { return t.defined() ? cudnn::dense_in(t, cudnn::layout_of(x)) : empty_as(x, x.dtype()); }
Tensor stat_out(const Tensor& t, const Tensor& mean) { return t.defined() ? t : empty({mean.size(0)}, mean.options()); }
void copy_back(const Tensor& dst, const Tensor& src) {
  if (dst.defined() && !src.is_same(dst)) Tensor(dst).copy_(src);
}

Tensor batch_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd,
                          const Tensor& x0, const Tensor& weight, const Tensor& bias, bool training, double eps,
                          const kernels::BnRunning& run) {
  if (x0.numel() == 0) return Tensor();
  TensorDeviceGuard g(y);
  NoGradGuard ng;
  const Layout L = cudnn::layout_of(x0);
  if (try_persistent(x0, CUDNN_BATCHNORM_OPS_BN, training)) {
    Tensor reserve;
    const Tensor x = cudnn::dense_in(x0, L), yd = cudnn::dense_in(y, L);
    const cudnnStatus_t st =
        persistent_forward(CUDNN_BATCHNORM_OPS_BN, yd, mean, invstd, x, Tensor(), weight, bias, eps, run, reserve);
    if (st == CUDNN_STATUS_SUCCESS) {
      copy_back(y, yd);
      return reserve;
    }
    fall_back(st, "batch_norm", "its persistent NHWC kernels", x);
    refuse(CUDNN_BATCHNORM_OPS_BN, x);
  }
  if (L == Layout::kNHWC) {
    Tensor yn = empty(y.sizes(), y.options().memory_format(MemoryFormat::Contiguous));
    forward_spatial(yn, mean, var, invstd, x0.contiguous(), weight, bias, training, eps, run);
    Tensor(y).copy_(yn);
  } else {
    forward_spatial(y, mean, var, invstd, x0, weight, bias, training, eps, run);
  }
  return Tensor();
}

void batch_norm_backward(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy0,
                         const Tensor& x0, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         const Tensor& reserve, bool training) {
  if (x0.numel() == 0) return;
  TensorDeviceGuard g(x0);
  NoGradGuard ng;
  const Layout L = cudnn::layout_of(x0);
  if (reserve.defined()) {  // the forward ran on the persistent kernels
    const Tensor x = cudnn::dense_in(x0, L), gy = cudnn::dense_in(gy0, L);
    const Tensor dx = out_like(gx, x), dw = stat_out(gweight, mean), db = stat_out(gbias, mean);
    const cudnnStatus_t st = persistent_backward(CUDNN_BATCHNORM_OPS_BN, dx, Tensor(), dw, db, gy, x, Tensor(), mean,
                                                 invstd, weight, Tensor(), reserve);
    if (st == CUDNN_STATUS_SUCCESS) {
      copy_back(gx, dx);
      return;
    }
    // Refused: the classic kernels below take the same saved mean and invstd (and overwrite
    // all of gx, gweight, gbias); later forwards skip the persistent kernels too.
    fall_back(st, "batch_norm_backward", "its persistent NHWC kernels", x);
    refuse(CUDNN_BATCHNORM_OPS_BN, x);
  }
  if (L == Layout::kNHWC) {
    const Tensor dx = gx.defined() ? empty(gx.sizes(), gx.options().memory_format(MemoryFormat::Contiguous)) : gx;
    backward_spatial(dx, gweight, gbias, gy0.contiguous(), x0.contiguous(), mean, invstd, weight, training);
    copy_back(gx, dx);
  } else {
    backward_spatial(gx, gweight, gbias, gy0, x0, mean, invstd, weight, training);
  }
}

// relu(bn(x) + z) (z defined) or relu(bn(x)) on the fused persistent kernels; else batch norm
// as batch_norm runs it, then the add and ReLU.
Tensor fused_forward(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x0,
                     const Tensor& z0, const Tensor& weight, const Tensor& bias, bool training, double eps,
                     const kernels::BnRunning& run) {
  TensorDeviceGuard g(y);
  NoGradGuard ng;
  const Layout L = cudnn::layout_of(x0);
  const bool add = z0.defined();
  const cudnnBatchNormOps_t ops = add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  if (try_persistent(x0, ops, training)) {
    Tensor reserve;
    const Tensor x = cudnn::dense_in(x0, L), z = add ? cudnn::dense_in(z0, L) : Tensor(), yd = cudnn::dense_in(y, L);
    const cudnnStatus_t st = persistent_forward(ops, yd, mean, invstd, x, z, weight, bias, eps, run, reserve);
    if (st == CUDNN_STATUS_SUCCESS) {
      copy_back(y, yd);
      return reserve;
    }
    fall_back(st, add ? "batch_norm_add_relu" : "batch_norm_relu", "its fused NHWC kernels", x);
    refuse(ops, x);
  }
  Tensor bn = empty_as(x0, x0.dtype());
  const Tensor bn_reserve = batch_norm_forward(bn, mean, var, invstd, x0, weight, bias, training, eps, run);
  Tensor(y).copy_(relu(add ? bn + z0 : bn));
  // The backward then runs batch norm's own backward, which needs this reserve: handed over as
  // a [1, n] view, where the fused forward's is [n].
  return bn_reserve.defined() ? bn_reserve.view({1, -1}) : Tensor();
}

// The backward of fused_forward: `add` says which op ran (gz is its z's gradient, or undefined).
void fused_backward(bool add, const Tensor& gx, const Tensor& gz, const Tensor& gweight, const Tensor& gbias,
                    const Tensor& gy0, const Tensor& x0, const Tensor& y0, const Tensor& mean, const Tensor& invstd,
                    const Tensor& weight, const Tensor& bias, const Tensor& reserve, bool training) {
  TensorDeviceGuard g(x0);
  NoGradGuard ng;
  const Layout L = cudnn::layout_of(x0);
  const cudnnBatchNormOps_t ops = add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  const char* op = add ? "batch_norm_add_relu_backward" : "batch_norm_relu_backward";
  if (reserve.defined() && reserve.dim() == 1) {  // the forward ran fused
    const Tensor x = cudnn::dense_in(x0, L), y = cudnn::dense_in(y0, L), gy = cudnn::dense_in(gy0, L);
    const Tensor dx = out_like(gx, x), dz = add ? out_like(gz, x) : Tensor();
    const Tensor dw = stat_out(gweight, mean), db = stat_out(gbias, mean);
    const cudnnStatus_t st = persistent_backward(ops, dx, dz, dw, db, gy, x, y, mean, invstd, weight, bias, reserve);
    if (st == CUDNN_STATUS_SUCCESS) {
      copy_back(gx, dx);
      copy_back(gz, dz);
      return;
    }
    fall_back(st, op, "its fused NHWC kernels", x);
    refuse(ops, x);  // and compose it below
  }
  // The forward's fallback: the ReLU's mask, then batch norm's backward (with its reserve).
  const Tensor gr = threshold_backward(gy0, y0, 0.0);
  copy_back(gz, gr);
  if (!gx.defined() && !gweight.defined() && !gbias.defined()) return;
  // Only the [1, n] reserve is batch norm's own; the fused forward's [n] one is not.
  batch_norm_backward(gx, gweight, gbias, gr, x0, mean, invstd, weight,
                      reserve.defined() && reserve.dim() == 2 ? reserve.view({-1}) : Tensor(), training);
}

Tensor batch_norm_relu_forward(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd,
                               const Tensor& x, const Tensor& weight, const Tensor& bias, bool training, double eps,
                               const kernels::BnRunning& run) {
  return fused_forward(y, mean, var, invstd, x, Tensor(), weight, bias, training, eps, run);
}
void batch_norm_add_relu_backward(const Tensor& gx, const Tensor& gz, const Tensor& gweight, const Tensor& gbias,
                                  const Tensor& gy, const Tensor& x, const Tensor& y, const Tensor& mean,
                                  const Tensor& invstd, const Tensor& weight, const Tensor& bias,
                                  const Tensor& reserve, bool training) {
  fused_backward(true, gx, gz, gweight, gbias, gy, x, y, mean, invstd, weight, bias, reserve, training);
}
void batch_norm_relu_backward(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy,
                              const Tensor& x, const Tensor& y, const Tensor& mean, const Tensor& invstd,
                              const Tensor& weight, const Tensor& bias, const Tensor& reserve, bool training) {
  fused_backward(false, gx, Tensor(), gweight, gbias, gy, x, y, mean, invstd, weight, bias, reserve, training);
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_norm) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    dispatch::register_kernel<OpId::batch_norm>(DeviceType::kCUDA, dt, &batch_norm_forward);
    dispatch::register_kernel<OpId::batch_norm_backward>(DeviceType::kCUDA, dt, &batch_norm_backward);
    dispatch::register_kernel<OpId::batch_norm_add_relu>(DeviceType::kCUDA, dt, &fused_forward);
    dispatch::register_kernel<OpId::batch_norm_add_relu_backward>(DeviceType::kCUDA, dt, &batch_norm_add_relu_backward);
    dispatch::register_kernel<OpId::batch_norm_relu>(DeviceType::kCUDA, dt, &batch_norm_relu_forward);
    dispatch::register_kernel<OpId::batch_norm_relu_backward>(DeviceType::kCUDA, dt, &batch_norm_relu_backward);
  }
}

}  // namespace mpx::cuda
#endif  // MPX_WITH_CUDNN
