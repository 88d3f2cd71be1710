// Registers the CUDA fused-attention kernels (same signatures as ops/cpu/attention.cpp): cuDNN's fused attention
// (sdpa_cudnn.cpp) where it takes the call, else the launchers of attention.cu (flash, then row kernels).
#include <algorithm>

#include "core/cuda.h"
#include "ops/attention_kernels.h"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/sdpa_cudnn.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace mpx::cuda {
namespace {
using kernels::SdpaParams;

void copy_strides(int64_t* dst, const Tensor& t) {
  for (int d = 0; d < 4; ++d) dst[d] = t.defined() ? t.stride(d) : 0;
}

SdpaGeom geom(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const SdpaParams& p,
              const char* op) {
  SdpaGeom g;
  g.B = q.size(0), g.H = q.size(1), g.L = q.size(2), g.E = q.size(3);
  g.Hk = k.size(1), g.S = k.size(2), g.Ev = v.size(3);
  MPX_CHECK(g.E <= kSdpaMaxHeadDim && g.Ev <= kSdpaMaxHeadDim, op, ": the CUDA kernel takes head dims up to ",
            kSdpaMaxHeadDim, ", got query ", ops::describe(q), " and value ", ops::describe(v),
            "; use scaled_dot_product_attention_math for larger heads");
  for (const Tensor* t : {&q, &k, &v})
    MPX_CHECK(t->size(3) <= 1 || t->stride(3) == 1, op, ": the CUDA kernel needs a unit last stride, got ",
              ops::describe(*t), " with strides ", shape_str(t->strides()));
  copy_strides(g.sq, q);
  copy_strides(g.sk, k);
  copy_strides(g.sv, v);
  copy_strides(g.sm, mask);
  g.scale = p.scale;
  g.dropout_p = p.dropout_p;
  g.causal = p.causal;
  g.flash = flash_sdp_enabled();
  g.recorded = p.recorded;
  g.seed = p.seed;
  g.offset = p.offset;
  return g;
}

const void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

void sdpa_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& mask, const SdpaParams& p) {
  const SdpaGeom g = geom(q, k, v, mask, p, "sdpa_fused");
  if (lse.numel() == 0) return;
  TensorDeviceGuard guard(out);
  if (sdpa_cudnn_forward(out, lse, q, k, v, mask, g)) return;
  launch_sdpa_forward(q.dtype(), g, out.raw_data(), lse.raw_data(), q.raw_data(), k.raw_data(), v.raw_data(),
                      ptr(mask), stream_of(out));
}

void sdpa_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                   const SdpaParams& p) {
  const SdpaGeom g = geom(q, k, v, mask, p, "sdpa_fused_backward");
  MPX_CHECK(dout.is_contiguous() && out.is_contiguous() && dq.is_contiguous() && dk.is_contiguous() &&
                dv.is_contiguous(),
            "sdpa_fused_backward: dout, out, dq, dk and dv must be contiguous");
  TensorDeviceGuard guard(dq);
  if (sdpa_cudnn_backward(dq, dk, dv, dout, q, k, v, out, lse, mask, g)) return;
  // dO . O per query row, written by the dq pass and read by the dk/dv pass (O(T) scratch).
  const Tensor rowdot = empty({std::max<int64_t>(lse.numel(), 1)}, lse.options());
  launch_sdpa_backward(q.dtype(), g, dq.raw_data(), dk.raw_data(), dv.raw_data(), rowdot.raw_data(), dout.raw_data(),
                       q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(), lse.raw_data(), ptr(mask),
                       stream_of(dq));
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_attention) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    dispatch::register_kernel<OpId::sdpa_fused>(DeviceType::kCUDA, dt, &sdpa_forward);
    dispatch::register_kernel<OpId::sdpa_fused_backward>(DeviceType::kCUDA, dt, &sdpa_backward);
  }
}

}  // namespace mpx::cuda
