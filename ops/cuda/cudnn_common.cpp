// cuDNN handles, errors and descriptors (ops/cuda/cudnn_common.h), and the loaded cuDNN's version for cuda::cudnn_version().
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/cuda.h"
#include "core/cuda_backend.h"
#include "core/cuda_runtime.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cudnn_common.h"
#ifdef MPX_WITH_CUDNN_FRONTEND
#include <cudnn_frontend_version.h>
#endif

namespace mpx::cuda {

std::string cudnn_version_string() {
#ifdef MPX_WITH_CUDNN
  // cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 used major*1000 + minor*100 + patch.
  const size_t v = cudnnGetVersion();
  const size_t major = v >= 90000 ? v / 10000 : v / 1000;
  const size_t minor = v >= 90000 ? (v % 10000) / 100 : (v % 1000) / 100;
  std::string s = "cuDNN " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
#ifdef MPX_WITH_CUDNN_FRONTEND
  s += ", frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) +
       "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
#endif
  return s;
#else
  return "not built";
#endif
}

}  // namespace mpx::cuda

#ifdef MPX_WITH_CUDNN
namespace mpx::cuda::cudnn {

bool refused(cudnnStatus_t st) {
#if CUDNN_MAJOR >= 9
  // cuDNN 9 numbers statuses by family (2000s bad parameter, 3000s not supported) with details
  // in the low digits, so the detailed codes count too.
  const int family = static_cast<int>(st) / 1000;
  return family == 2 || family == 3;
#else
  return st == CUDNN_STATUS_BAD_PARAM || st == CUDNN_STATUS_NOT_SUPPORTED;
#endif
}

void count_fallback(const std::string& what, cudnnStatus_t st) {
  detail::note_cudnn_fallback(st == CUDNN_STATUS_SUCCESS ? what : what + " (" + cudnnGetErrorString(st) + ")");
}

namespace {
bool out_of_memory(cudnnStatus_t st) {
#if CUDNN_MAJOR >= 9
  return st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
         st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
#else
  return st == CUDNN_STATUS_ALLOC_FAILED;
#endif
}
}  // namespace

void throw_error(cudnnStatus_t st, const char* op, const char* call) {
  char detail[512] = {0};
#if CUDNN_MAJOR >= 9
  cudnnGetLastErrorString(detail, sizeof(detail));
#endif
  const char* hint = "";
  if (out_of_memory(st)) hint = "; out of memory: reduce the batch size";
  else if (refused(st))
    hint = "; cuDNN does not support this configuration (dtype, layout or geometry): try another dtype or "
           "memory format";
  MPX_ERROR(op, ": ", call, " failed: ", cudnnGetErrorString(st), detail[0] ? " (" : "", detail, detail[0] ? ")" : "",
            hint);
}

namespace {
constexpr int kMaxDevices = 64;
}

cudnnHandle_t handle(const Tensor& t) {
  const int dev = t.device().index;
  MPX_CHECK(dev >= 0 && dev < kMaxDevices, "cudnn: cuda:", dev, " is beyond the ", kMaxDevices,
            " devices mpx supports");
  // Leaked at thread exit on purpose: destroying handles during static destruction can run after
  // the CUDA context is gone.
  thread_local std::array<cudnnHandle_t, kMaxDevices> handles{};
  cudnnHandle_t& h = handles[dev];
  if (!h) MPX_CUDNN_CHECK(cudnnCreate(&h), "cudnn");
  MPX_CUDNN_CHECK(cudnnSetStream(h, stream_of(t)), "cudnn");
  return h;
}

cudnnDataType_t data_type(DType dt, const char* op) {
  switch (dt) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kFloat16: return CUDNN_DATA_HALF;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: MPX_ERROR(op, ": cuDNN has no ", dtype_name(dt), " kernels; use a floating dtype");
  }
}

Layout layout_of(const Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(MemoryFormat::ChannelsLast) ? Layout::kNHWC
                                                                                           : Layout::kNCHW;
}

MemoryFormat memory_format(Layout l) {
  return l == Layout::kNHWC ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

Tensor dense_in(const Tensor& t, Layout l) {
  const MemoryFormat f = memory_format(l);
  const bool aligned = t.numel() == 0 || reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0;
  if (aligned && t.is_contiguous(f)) return t;
  Tensor c = empty(t.sizes(), t.options().memory_format(f));
  c.copy_(t);
  return c;
}

Tensor workspace(const Tensor& t, size_t bytes) {
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>(bytes)}, TensorOptions(kUInt8).device(t.device()));
}

namespace {
int to_int(int64_t v, const char* op, const char* what) {
  MPX_CHECK(v >= 0 && v <= INT32_MAX, op, ": ", what, " ", v, " exceeds what cuDNN takes (32-bit sizes)");
  return static_cast<int>(v);
}
}  // namespace

TensorDescriptor::TensorDescriptor() { MPX_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_), "cudnn"); }
TensorDescriptor::~TensorDescriptor() { cudnnDestroyTensorDescriptor(d_); }

void TensorDescriptor::set(DType dt, Layout l, int64_t n, int64_t c, int64_t h, int64_t w, const char* op) {
  MPX_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d_, l == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                             data_type(dt, op), to_int(n, op, "batch"), to_int(c, op, "channels"),
                                             to_int(h, op, "height"), to_int(w, op, "width")),
                  op);
}

void TensorDescriptor::set(const Tensor& t, Layout l, const char* op) {
  MPX_CHECK(t.dim() == 4, op, ": cuDNN descriptors here are 4-d, got ", t.dim(), " dims");
  set(t.dtype(), l, t.size(0), t.size(1), t.size(2), t.size(3), op);
}

FilterDescriptor::FilterDescriptor() { MPX_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_), "cudnn"); }
FilterDescriptor::~FilterDescriptor() { cudnnDestroyFilterDescriptor(d_); }

void FilterDescriptor::set(const Tensor& w, Layout l, const char* op) {
  MPX_CHECK(w.dim() == 4, op, ": cuDNN filters here are 4-d, got ", w.dim(), " dims");
  MPX_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d_, data_type(w.dtype(), op),
                                             l == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                             to_int(w.size(0), op, "weight size"), to_int(w.size(1), op, "weight size"),
                                             to_int(w.size(2), op, "kernel height"),
                                             to_int(w.size(3), op, "kernel width")),
                  op);
}

ConvDescriptor::ConvDescriptor() { MPX_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_), "cudnn"); }
ConvDescriptor::~ConvDescriptor() { cudnnDestroyConvolutionDescriptor(d_); }

void ConvDescriptor::set(int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dil_h, int64_t dil_w,
                         int64_t groups, cudnnDataType_t compute, cudnnMathType_t math, const char* op) {
  MPX_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d_, to_int(pad_h, op, "padding"), to_int(pad_w, op, "padding"),
                                                  to_int(stride_h, op, "stride"), to_int(stride_w, op, "stride"),
                                                  to_int(dil_h, op, "dilation"), to_int(dil_w, op, "dilation"),
                                                  CUDNN_CROSS_CORRELATION, compute),
                  op);
  MPX_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d_, to_int(groups, op, "groups")), op);
  set_math(math, op);
}

void ConvDescriptor::set_math(cudnnMathType_t math, const char* op) {
  MPX_CUDNN_CHECK(cudnnSetConvolutionMathType(d_, math), op);
}

}  // namespace mpx::cuda::cudnn
#endif  // MPX_WITH_CUDNN
