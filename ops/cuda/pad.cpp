// Registers the CUDA pad kernels (same signature as ops/cpu/pad.cpp); the launchers live in pad.cu.
#include <cstring>

#include "ops/cuda/cuda_common.h"
#include "ops/cuda/pad_launch.h"
#include "ops/dispatch.h"
#include "ops/pad.h"

namespace mpx::cuda {
namespace {

// The pass's geometry: `in` is the forward's input (the adjoint's output), `out` the forward's output.
PadGeom geom(const Tensor& in, const Tensor& out, const Tensor& md, const Tensor& mh, const Tensor& mw) {
  for (const Tensor* t : {&in, &out})
    MPX_CHECK(t->dim() == 4 && t->is_contiguous(), "pad: the CUDA kernel expects contiguous [outer, D, H, W] tensors, ",
              "got ", shape_str(t->sizes()), " with strides ", shape_str(t->strides()));
  PadGeom g;
  g.outer = in.size(0);
  g.di = in.size(1);
  g.hi = in.size(2);
  g.wi = in.size(3);
  g.d_out = out.size(1);
  g.h_out = out.size(2);
  g.w_out = out.size(3);
  g.md = md.data_ptr<int64_t>();
  g.mh = mh.data_ptr<int64_t>();
  g.mw = mw.data_ptr<int64_t>();
  return g;
}

void pad(const Tensor& out, const Tensor& x, const Tensor& md, const Tensor& mh, const Tensor& mw, double value) {
  // The fill value's bits in the output dtype, made by the CPU's conversion.
  uint64_t bits = 0;
  const Tensor v = full({}, value, TensorOptions(out.dtype()));
  std::memcpy(&bits, v.raw_data(), v.element_size());
  TensorDeviceGuard dg(out);
  launch_pad(static_cast<int>(out.element_size()), geom(x, out, md, mh, mw), out.raw_data(), x.raw_data(), bits,
             stream_of(out));
}

void pad_backward(const Tensor& gx, const Tensor& gy, const Tensor& md, const Tensor& mh, const Tensor& mw, double) {
  TensorDeviceGuard dg(gx);
  launch_pad_backward(gx.dtype(), geom(gx, gy, md, mh, mw), gx.raw_data(), gy.raw_data(), stream_of(gx));
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_pad) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8, kBool})
    dispatch::register_kernel<OpId::pad>(DeviceType::kCUDA, dt, &pad);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16})
    dispatch::register_kernel<OpId::pad_backward>(DeviceType::kCUDA, dt, &pad_backward);
}

}  // namespace mpx::cuda
