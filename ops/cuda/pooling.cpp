// Registers the CUDA pooling kernels (same signatures as ops/cpu/pooling.cpp); they take dense NCHW
// or channels-last tensors as they come, and the launchers live in ops/cuda/pooling.cu.
#include <initializer_list>

#include "ops/cuda/cuda_common.h"
#include "ops/cuda/pooling_launch.h"
#include "ops/dispatch.h"
#include "ops/pooling.h"

namespace mpx::cuda {
namespace {
using kernels::Pool2dParams;

// The layout the tensors of one call share: channels-last when any of them is dense only that
// way (a tensor with C == 1 or H == W == 1 is dense both ways and reads the same in either).
bool pick_nhwc(const char* op, std::initializer_list<const Tensor*> ts) {
  bool nhwc = false;
  for (const Tensor* t : ts)
    if (!t->is_contiguous() && t->is_contiguous(MemoryFormat::ChannelsLast)) nhwc = true;
  const MemoryFormat f = nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  for (const Tensor* t : ts)
    MPX_CHECK(t->dim() == 4 && t->is_contiguous(f), op,
              ": the CUDA kernel expects 4-d tensors that are all dense NCHW or all channels-last, got shape ",
              shape_str(t->sizes()), " with strides ", shape_str(t->strides()),
              nhwc ? " next to a channels-last tensor" : "",
              "; call .contiguous() (or .contiguous(ChannelsLast)) first");
  return nhwc;
}

PoolGeom geom(const Tensor& in, const Tensor& out, bool nhwc) {
  PoolGeom g;
  g.N = in.size(0);
  g.C = in.size(1);
  g.H = in.size(2);
  g.W = in.size(3);
  g.Ho = out.size(2);
  g.Wo = out.size(3);
  g.nhwc = nhwc;
  return g;
}
PoolGeom geom(const Tensor& in, const Tensor& out, bool nhwc, const Pool2dParams& p) {
  PoolGeom g = geom(in, out, nhwc);
  g.kh = p.kernel[0];
  g.kw = p.kernel[1];
  g.sh = p.stride[0];
  g.sw = p.stride[1];
  g.ph = p.padding[0];
  g.pw = p.padding[1];
  g.dh = p.dilation[0];
  g.dw = p.dilation[1];
  g.count_include_pad = p.count_include_pad;
  return g;
}

void max_pool(const Tensor& y, const Tensor& idx, const Tensor& x, const Pool2dParams& p) {
  if (y.numel() == 0) return;
  const bool nhwc = pick_nhwc("max_pool2d", {&y, &idx, &x});
  TensorDeviceGuard g(y);
  launch_max_pool2d(y.dtype(), geom(x, y, nhwc, p), y.raw_data(), idx.data_ptr<int64_t>(), x.raw_data(),
                    stream_of(y));
}

void max_pool_backward(const Tensor& gx, const Tensor& gy, const Tensor& idx, const Pool2dParams& p) {
  if (gx.numel() == 0) return;
  const bool nhwc = pick_nhwc("max_pool2d backward", {&gx, &gy, &idx});
  TensorDeviceGuard g(gx);
  launch_max_pool2d_backward(gx.dtype(), geom(gx, gy, nhwc, p), gx.raw_data(), gy.raw_data(),
                             idx.data_ptr<int64_t>(), stream_of(gx));
}

void avg_pool(const Tensor& y, const Tensor& x, const Pool2dParams& p) {
  if (y.numel() == 0) return;
  const bool nhwc = pick_nhwc("avg_pool2d", {&y, &x});
  TensorDeviceGuard g(y);
  launch_avg_pool2d(y.dtype(), geom(x, y, nhwc, p), y.raw_data(), x.raw_data(), stream_of(y));
}

void avg_pool_backward(const Tensor& gx, const Tensor& gy, const Pool2dParams& p) {
  if (gx.numel() == 0) return;
  const bool nhwc = pick_nhwc("avg_pool2d backward", {&gx, &gy});
  TensorDeviceGuard g(gx);
  launch_avg_pool2d_backward(gx.dtype(), geom(gx, gy, nhwc, p), gx.raw_data(), gy.raw_data(), stream_of(gx));
}

void adaptive(const Tensor& y, const Tensor& x) {
  if (y.numel() == 0) return;
  const bool nhwc = pick_nhwc("adaptive_avg_pool2d", {&y, &x});
  TensorDeviceGuard g(y);
  launch_adaptive_avg_pool2d(y.dtype(), geom(x, y, nhwc), y.raw_data(), x.raw_data(), stream_of(y));
}

void adaptive_backward(const Tensor& gx, const Tensor& gy) {
  if (gx.numel() == 0) return;
  const bool nhwc = pick_nhwc("adaptive_avg_pool2d backward", {&gx, &gy});
  TensorDeviceGuard g(gx);
  launch_adaptive_avg_pool2d_backward(gx.dtype(), geom(gx, gy, nhwc), gx.raw_data(), gy.raw_data(), stream_of(gx));
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_pooling) {
  constexpr auto dev = DeviceType::kCUDA;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    dispatch::register_kernel<OpId::max_pool2d>(dev, dt, &max_pool);
    dispatch::register_kernel<OpId::max_pool2d_backward>(dev, dt, &max_pool_backward);
    dispatch::register_kernel<OpId::avg_pool2d>(dev, dt, &avg_pool);
    dispatch::register_kernel<OpId::avg_pool2d_backward>(dev, dt, &avg_pool_backward);
    dispatch::register_kernel<OpId::adaptive_avg_pool2d>(dev, dt, &adaptive);
    dispatch::register_kernel<OpId::adaptive_avg_pool2d_backward>(dev, dt, &adaptive_backward);
  }
}

}  // namespace mpx::cuda
