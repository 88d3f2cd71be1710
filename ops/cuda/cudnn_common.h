// cuDNN plumbing shared by the CUDA conv and batch-norm kernels: handles bound to the current stream,
// the status check, and tensor/filter/convolution descriptors built from mpx tensors.
#pragma once
#ifdef MPX_WITH_CUDNN
#include <cudnn.h>

#include <cstddef>
#include <string>

#include "ops/cuda/cuda_common.h"

namespace mpx::cuda::cudnn {

/// Throws mpx::Error naming the op, the failing call and cuDNN's message (plus what to do for
/// out-of-memory and unsupported configurations).
[[noreturn]] void throw_error(cudnnStatus_t st, const char* op, const char* call);

/// Whether a status says cuDNN will not run this configuration (its BAD_PARAM and NOT_SUPPORTED
/// families: shape, dtype, layout, mode), as opposed to a failure while running it (execution,
/// internal, out of memory), which callers should throw rather than work around.
bool refused(cudnnStatus_t st);
/// Counts one fallback for cuda::cudnn_fallbacks() and records its description (with cuDNN's
/// status, unless it is SUCCESS: a fallback for a reason of mpx's own, e.g. no free memory).
void count_fallback(const std::string& what, cudnnStatus_t st);

/// This thread's cuDNN handle for a tensor's device, bound to that device's current stream.
/// Call under a TensorDeviceGuard of the same device. Handles are per thread because a cuDNN
/// handle must not be used by two threads at once; they live until the process ends.
cudnnHandle_t handle(const Tensor& t);

/// cuDNN's element type for an mpx floating dtype (throws for others, naming `op`).
cudnnDataType_t data_type(DType dt, const char* op);

/// How a 4-d activation is laid out in memory: NCHW (contiguous) or NHWC (channels-last).
enum class Layout { kNCHW, kNHWC };
/// NHWC when t is channels-last and not also plain contiguous (size-1 dims make both true).
Layout layout_of(const Tensor& t);
MemoryFormat memory_format(Layout l);
/// t itself when it is dense in layout l with a 16-byte aligned start (what cuDNN's fast
/// kernels assume), else a dense aligned copy in that layout.
Tensor dense_in(const Tensor& t, Layout l);
/// A scratch buffer of `bytes` on t's device from the stream-ordered pool (undefined for 0).
Tensor workspace(const Tensor& t, size_t bytes);

/// An owned cudnnTensorDescriptor_t.
class TensorDescriptor {
 public:
  TensorDescriptor();
  ~TensorDescriptor();
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  /// A packed 4-d [n, c, h, w] tensor of dtype dt in layout l.
  void set(DType dt, Layout l, int64_t n, int64_t c, int64_t h, int64_t w, const char* op);
  /// The 4-d tensor t (dense in layout l).
  void set(const Tensor& t, Layout l, const char* op);
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

/// An owned cudnnFilterDescriptor_t.
class FilterDescriptor {
 public:
  FilterDescriptor();
  ~FilterDescriptor();
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  /// The conv weight w [K, C/groups, kh, kw] (dense in layout l).
  void set(const Tensor& w, Layout l, const char* op);
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

/// An owned cudnnConvolutionDescriptor_t.
class ConvDescriptor {
 public:
  ConvDescriptor();
  ~ConvDescriptor();
  ConvDescriptor(const ConvDescriptor&) = delete;
  ConvDescriptor& operator=(const ConvDescriptor&) = delete;
  /// Cross-correlation (what conv2d computes) with the given geometry, accumulating in
  /// `compute` (f32 for f16/bf16/f32 data, f64 for f64).
  void set(int64_t pad_h, int64_t pad_w, int64_t stride_h, int64_t stride_w, int64_t dil_h, int64_t dil_w,
           int64_t groups, cudnnDataType_t compute, cudnnMathType_t math, const char* op);
  void set_math(cudnnMathType_t math, const char* op);
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

/// alpha/beta blend factors: double for f64 data, float otherwise.
struct Scale {
  float f;
  double d;
  explicit Scale(double v) : f(static_cast<float>(v)), d(v) {}
  const void* of(DType dt) const { return dt == kFloat64 ? static_cast<const void*>(&d) : static_cast<const void*>(&f); }
};

}  // namespace mpx::cuda::cudnn

/// Checks a cuDNN call; `op` names the mpx op ("conv2d", "batch_norm", ...).
#define MPX_CUDNN_CHECK(call, op)                                                        \
  do {                                                                                   \
    const cudnnStatus_t mpx_cudnn_st_ = (call);                                          \
    if (mpx_cudnn_st_ != CUDNN_STATUS_SUCCESS) ::mpx::cuda::cudnn::throw_error(mpx_cudnn_st_, op, #call); \
  } while (0)

#endif  // MPX_WITH_CUDNN
