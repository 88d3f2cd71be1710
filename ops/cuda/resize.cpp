// Registers the CUDA resampling kernels (same signature as ops/cpu/resize.cpp); the launchers live in resize.cu.
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/resize_launch.h"
#include "ops/dispatch.h"
#include "ops/resize.h"

namespace mpx::cuda {
namespace {

// The pass's geometry: `in` [outer, hi, wi] is the forward's input (the adjoint's output).
ResampleGeom geom(const Tensor& in, const Tensor& out, const Tensor& ih, const Tensor& wh, const Tensor& iw,
                  const Tensor& ww) {
  for (const Tensor* t : {&in, &out})
    MPX_CHECK(t->dim() == 3 && t->is_contiguous(), "resample: the CUDA kernel expects contiguous [outer, H, W] tensors, got ",
              shape_str(t->sizes()), " with strides ", shape_str(t->strides()));
  ResampleGeom g;
  g.outer = in.size(0);
  g.hi = in.size(1);
  g.wi = in.size(2);
  g.ho = out.size(1);
  g.wo = out.size(2);
  g.ih = ih.defined() ? ih.data_ptr<int64_t>() : nullptr;
  g.wh = wh.defined() ? wh.raw_data() : nullptr;
  g.iw = iw.defined() ? iw.data_ptr<int64_t>() : nullptr;
  g.ww = ww.defined() ? ww.raw_data() : nullptr;
  return g;
}

void resample(const Tensor& out, const Tensor& x, const Tensor& ih, const Tensor& wh, const Tensor& iw, const Tensor& ww) {
  TensorDeviceGuard dg(out);
  launch_resample(out.dtype(), geom(x, out, ih, wh, iw, ww), out.raw_data(), x.raw_data(), stream_of(out));
}

void resample_backward(const Tensor& gx, const Tensor& gy, const Tensor& ih, const Tensor& wh, const Tensor& iw,
                       const Tensor& ww) {
  TensorDeviceGuard dg(gx);
  launch_resample_backward(gx.dtype(), geom(gx, gy, ih, wh, iw, ww), gx.raw_data(), gy.raw_data(), stream_of(gx));
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_resize) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    dispatch::register_kernel<OpId::resample>(DeviceType::kCUDA, dt, &resample);
    dispatch::register_kernel<OpId::resample_backward>(DeviceType::kCUDA, dt, &resample_backward);
  }
}

}  // namespace mpx::cuda
