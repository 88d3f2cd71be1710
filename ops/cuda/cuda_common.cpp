// Host-side helpers of the CUDA kernel files: tensor descriptors and the device guard of a launch.
#include "ops/cuda/cuda_common.h"

#include "core/error.h"

namespace mpx::cuda {

TensorDesc desc(const Tensor& t, const char* op) { return desc(t, t.sizes(), op); }

TensorDesc desc(const Tensor& t, const IntList& shape, const char* op) {
  MPX_CHECK(static_cast<int>(shape.size()) <= kMaxDims, op, ": CUDA kernels take at most ", kMaxDims,
            " dimensions, got ", shape_str(shape), "; reshape the tensor first");
  MPX_CHECK(shape.size() >= t.sizes().size(), op, ": cannot broadcast ", shape_str(t.sizes()), " to ", shape_str(shape));
  TensorDesc d;
  d.data = t.numel() ? t.raw_data() : nullptr;
  d.dtype = t.dtype();
  d.ndim = static_cast<int>(shape.size());
  const size_t lead = shape.size() - t.sizes().size();
  for (size_t i = 0; i < shape.size(); ++i) {
    d.sizes[i] = shape[i];
    if (i < lead) {
      d.strides[i] = 0;
    } else {
      const int64_t own = t.sizes()[i - lead];
      MPX_CHECK(own == shape[i] || own == 1, op, ": cannot broadcast ", shape_str(t.sizes()), " to ", shape_str(shape));
      d.strides[i] = own == shape[i] ? t.strides()[i - lead] : 0;
    }
  }
  return d;
}

TensorDeviceGuard::TensorDeviceGuard(const Tensor& t) {
  if (!t.device().is_cuda()) return;
  int cur = 0;
  MPX_CUDA_CHECK(cudaGetDevice(&cur), "cuda device");
  if (cur != t.device().index) {
    MPX_CUDA_CHECK(cudaSetDevice(t.device().index), "cuda device");
    prev_ = cur;
  }
}
TensorDeviceGuard::~TensorDeviceGuard() {
  if (prev_ >= 0) cudaSetDevice(prev_);
}

}  // namespace mpx::cuda
