// TensorAccessor: element access to a CPU tensor by index, `acc[i][j]`, as LibTorch's tensor.accessor<T, N>().
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace mpx {

/// A view of N dims of a tensor's elements: `acc[i]` drops the first dim, down to a T& at the last. Holds
/// pointers into the tensor's sizes and strides, so it lives no longer than the tensor it came from.
template <typename T, size_t N>
class TensorAccessor {
 public:
  TensorAccessor(T* data, const int64_t* sizes, const int64_t* strides) : data_(data), sizes_(sizes), strides_(strides) {}
  /// The element (N = 1) or sub-accessor at index i of the first dim; i is not range-checked (as LibTorch's).
  decltype(auto) operator[](int64_t i) const {
    if constexpr (N == 1) return static_cast<T&>(data_[i * strides_[0]]);
    else return TensorAccessor<T, N - 1>(data_ + i * strides_[0], sizes_ + 1, strides_ + 1);
  }
  int64_t size(int64_t d) const { return sizes_[d]; }
  int64_t stride(int64_t d) const { return strides_[d]; }
  T* data() const { return data_; }

 private:
  T* data_;
  const int64_t* sizes_;
  const int64_t* strides_;
};

template <typename T, size_t N>
TensorAccessor<T, N> Tensor::accessor() const& {
  static_assert(N > 0, "accessor<T, N>: N >= 1; read a 0-dim tensor with item<T>()");
  MPX_CHECK(defined() && dim() == static_cast<int64_t>(N), "accessor<", dtype_name(dtype_v<std::remove_cv_t<T>>), ", ", N,
            ">(): the tensor has ", defined() ? dim() : 0, " dims; ask for as many as it has");
  MPX_CHECK(device().is_cpu(), "accessor(): the tensor is on ", device().str(),
            "; move it with .cpu() first (an accessor reads host memory)");
  return TensorAccessor<T, N>(data_ptr<T>(), sizes().data(), strides().data());
}

}  // namespace mpx
