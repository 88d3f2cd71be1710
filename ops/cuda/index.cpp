// Registers the CUDA kernels of the index family (same signatures as ops/cpu/index.cpp); launchers live in index.cu.
#include <cstring>

#include "ops/cuda/cuda_common.h"
#include "ops/cuda/index_launch.h"
#include "ops/dispatch.h"

namespace mpx::cuda {
namespace {

void check_dense(const char* op, const char* what, const Tensor& t) {
  MPX_CHECK(t.is_contiguous(), op, ": the CUDA kernel expects a contiguous ", what, ", got ", shape_str(t.sizes()),
            " with strides ", shape_str(t.strides()));
}

// in's strides with another tensor's sizes: the output-shaped walk of a gather or scatter.
TensorDesc walk(const Tensor& t, const IntList& sizes, const char* op) {
  TensorDesc d = desc(t, op);
  for (int k = 0; k < d.ndim; ++k) d.sizes[k] = sizes[static_cast<size_t>(k)];
  return d;
}

// Outer / inner element counts around dim.
void split(const IntList& sizes, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d < dim) outer *= sizes[d];
    else if (d > dim) inner *= sizes[d];
  }
}

int esize(const Tensor& t) { return static_cast<int>(t.element_size()); }

void index_select_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  if (out.numel() == 0) return;
  check_dense("index_select", "index", index);
  TensorDeviceGuard g(out);
  launch_index_select(esize(out), out.raw_data(), walk(in, out.sizes(), "index_select"), static_cast<int>(dim),
                      index.data_ptr<int64_t>(), in.size(dim), stream_of(out));
}

void index_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, double alpha) {
  if (src.numel() == 0) return;
  check_dense("index_add", "output", out);
  check_dense("index_add", "source", src);
  check_dense("index_add", "index", index);
  int64_t outer, inner;
  split(out.sizes(), dim, outer, inner);
  TensorDeviceGuard g(out);
  launch_index_add(out.dtype(), out.raw_data(), src.raw_data(), index.data_ptr<int64_t>(), outer, out.size(dim),
                   index.numel(), inner, alpha, stream_of(out));
}

void gather_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  if (out.numel() == 0) return;
  check_dense("gather", "index", index);
  TensorDeviceGuard g(out);
  launch_gather(esize(out), out.raw_data(), walk(in, index.sizes(), "gather"), static_cast<int>(dim),
                index.data_ptr<int64_t>(), in.size(dim), stream_of(out));
}

template <bool Add>
void scatter_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (index.numel() == 0) return;
  const char* op = Add ? "scatter_add" : "scatter";
  check_dense(op, "index", index);
  check_dense(op, "src", src);
  TensorDeviceGuard g(out);
  launch_scatter(out.dtype(), Add, walk(out, index.sizes(), op), static_cast<int>(dim), index.data_ptr<int64_t>(),
                 src.raw_data(), out.size(dim), stream_of(out));
}

void masked_fill_kernel(const Tensor& out, const Tensor& in, const Tensor& mask, double value) {
  if (out.numel() == 0) return;
  check_dense("masked_fill", "output", out);
  // The fill value's bits in the output dtype, made by the CPU's conversion.
  uint64_t bits = 0;
  const Tensor v = full({}, value, TensorOptions(out.dtype()));
  std::memcpy(&bits, v.raw_data(), v.element_size());
  TensorDeviceGuard g(out);
  launch_masked_fill(esize(out), out.raw_data(), desc(in, "masked_fill"), desc(mask, "masked_fill"), bits,
                     stream_of(out));
}

template <bool Lower>
void tri_kernel(const Tensor& out, const Tensor& in, int64_t diagonal) {
  if (out.numel() == 0) return;
  check_dense(Lower ? "tril" : "triu", "output", out);
  TensorDeviceGuard g(out);
  launch_tri(esize(out), Lower, out.raw_data(), desc(in, Lower ? "tril" : "triu"), diagonal, stream_of(out));
}

void embedding_kernel(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  if (out.numel() == 0) return;
  check_dense("embedding", "weight", weight);
  check_dense("embedding", "index", indices);
  TensorDeviceGuard g(out);
  launch_embedding(esize(out), out.raw_data(), weight.raw_data(), indices.data_ptr<int64_t>(), indices.numel(),
                   weight.size(0), weight.size(1), stream_of(out));
}

void embedding_backward_kernel(const Tensor& grad_weight, const Tensor& grad, const Tensor& indices,
                               int64_t padding_idx, bool deterministic) {
  if (grad_weight.numel() == 0) return;
  check_dense("embedding backward", "gradient", grad);
  check_dense("embedding backward", "index", indices);
  const int64_t N = indices.numel(), V = grad_weight.size(0), D = grad_weight.size(1);
  TensorDeviceGuard g(grad_weight);
  const size_t bytes = embedding_backward_workspace(grad_weight.dtype(), N, V, D, deterministic);
  // Stream-ordered scratch, freed on the same stream after the launches that use it.
  Tensor ws = bytes ? empty({static_cast<int64_t>(bytes)}, TensorOptions(kUInt8).device(grad_weight.device())) : Tensor();
  launch_embedding_backward(grad_weight.dtype(), grad_weight.raw_data(), grad.raw_data(), indices.data_ptr<int64_t>(),
                            N, V, D, padding_idx, deterministic, ws.defined() ? ws.raw_data() : nullptr, bytes,
                            stream_of(grad_weight));
}

void topk_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, int64_t dim, bool largest,
                 bool) {
  if (values.numel() == 0) return;
  const Tensor x = in.contiguous();
  int64_t outer, inner;
  split(x.sizes(), dim, outer, inner);
  TensorDeviceGuard g(values);
  launch_topk(values.dtype(), values.raw_data(), indices.data_ptr<int64_t>(), x.raw_data(), outer, x.size(dim), inner,
              k, largest, stream_of(values));
}

// sort is topk's kernel signature with k = n.
void sort_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, int64_t dim, bool largest,
                 bool) {
  if (values.numel() == 0) return;
  const Tensor x = in.contiguous();
  int64_t outer, inner;
  split(x.sizes(), dim, outer, inner);
  const int64_t n = x.size(dim);
  MPX_CHECK(k == n, "sort kernel: expects k == n, got ", k, " of ", n);
  int64_t P = 1;
  while (P < n) P *= 2;
  TensorDeviceGuard g(values);
  const TensorOptions o = TensorOptions(is_floating(x.dtype()) ? kFloat64 : kInt64).device(x.device());
  const Tensor keys = empty({outer * inner * P}, o);
  const Tensor idx = empty({outer * inner * P}, TensorOptions(kInt64).device(x.device()));
  launch_sort(values.dtype(), values.raw_data(), indices.data_ptr<int64_t>(), x.raw_data(), outer, n, inner, largest,
              keys.raw_data(), idx.data_ptr<int64_t>(), P, stream_of(values));
}

void multinomial_kernel(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed,
                        uint64_t offset) {
  if (out.numel() == 0) return;
  check_dense("multinomial", "probs", probs);
  const int64_t R = probs.size(0), C = probs.size(1);
  TensorDeviceGuard g(out);
  Tensor ws = replacement ? Tensor() : empty({R * C}, TensorOptions(kFloat64).device(out.device()));
  launch_multinomial(probs.dtype(), out.data_ptr<int64_t>(), probs.raw_data(), R, C, num_samples, replacement, seed,
                     offset, ws.defined() ? ws.data_ptr<double>() : nullptr, stream_of(out));
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_index) {
  using D = DeviceType;
  using dispatch::register_kernel;
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8, kBool}) {
    register_kernel<OpId::index_select>(D::kCUDA, dt, &index_select_kernel);
    register_kernel<OpId::gather>(D::kCUDA, dt, &gather_kernel);
    register_kernel<OpId::scatter>(D::kCUDA, dt, &scatter_kernel<false>);
    register_kernel<OpId::masked_fill>(D::kCUDA, dt, &masked_fill_kernel);
    register_kernel<OpId::tril>(D::kCUDA, dt, &tri_kernel<true>);
    register_kernel<OpId::triu>(D::kCUDA, dt, &tri_kernel<false>);
  }
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8}) {
    register_kernel<OpId::index_add>(D::kCUDA, dt, &index_add_kernel);
    register_kernel<OpId::scatter_add>(D::kCUDA, dt, &scatter_kernel<true>);
    register_kernel<OpId::topk>(D::kCUDA, dt, &topk_kernel);
    register_kernel<OpId::sort>(D::kCUDA, dt, &sort_kernel);
  }
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    register_kernel<OpId::embedding>(D::kCUDA, dt, &embedding_kernel);
    register_kernel<OpId::embedding_backward>(D::kCUDA, dt, &embedding_backward_kernel);
    register_kernel<OpId::multinomial>(D::kCUDA, dt, &multinomial_kernel);
  }
}

}  // namespace mpx::cuda
