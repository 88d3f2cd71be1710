// Tensor: the strided, reference-counted n-d array handle every layer of mpx works with.
#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/storage.h"

namespace mpx {

/// Shapes, strides and dimension lists: a std::vector<int64_t> that also reads as LibTorch's IntArrayRef
/// (`x.sizes().vec()`, `std::cout << x.sizes()` printing [2, 3]).
struct IntList : std::vector<int64_t> {
  using std::vector<int64_t>::vector;
  IntList() = default;
  IntList(const std::vector<int64_t>& v) : std::vector<int64_t>(v) {}             // NOLINT
  IntList(std::vector<int64_t>&& v) : std::vector<int64_t>(std::move(v)) {}       // NOLINT
  std::vector<int64_t> vec() const { return *this; }
  /// LibTorch's IntArrayRef::slice: the elements from `n` on, or `m` of them from `n`.
  IntList slice(size_t n) const { return slice(n, n <= size() ? size() - n : 0); }
  IntList slice(size_t n, size_t m) const;
};

namespace indexing {
class TensorIndex;  // core/indexing.h
}

/// A single dim or size written as a plain integer where LibTorch takes an IntArrayRef
/// (`x.sum(1)`, `x.view(-1)`). Braced lists (`{1}`, `{}`) cannot deduce it, so they keep
/// meaning an IntList.
template <typename I>
concept DimIndex = std::integral<I> && !std::same_as<I, bool>;

/// How a 4-d tensor's elements are laid out. ChannelsLast is NHWC with logical NCHW sizes.
enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast, Preserve };
/// LibTorch's layout option; mpx tensors are all strided (dense), so it is the only value.
enum class TensorLayout : uint8_t { Strided };
inline constexpr TensorLayout kStrided = TensorLayout::Strided;

class Tensor;
using tensor_list = std::vector<Tensor>;
template <typename T, size_t N> class TensorAccessor;

namespace autograd {
struct Node;
struct AutogradMeta;
}  // namespace autograd

/// Element type -> DType, for templates over kernels and factories.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = kFloat32; };
template <> struct dtype_of<double> { static constexpr DType value = kFloat64; };
template <> struct dtype_of<Half> { static constexpr DType value = kFloat16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = kBFloat16; };
template <> struct dtype_of<int64_t> { static constexpr DType value = kInt64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = kInt32; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = kUInt8; };
template <> struct dtype_of<bool> { static constexpr DType value = kBool; };
template <typename T> inline constexpr DType dtype_v = dtype_of<T>::value;

/// Options for factories: dtype, device, requires_grad, memory format (chained setters).
/// A dtype left unset is the factory's default: f32 for most, the values' type for `tensor`,
/// i64 for `randint`/`randperm` and for `arange` over integers (LibTorch's inference).
struct TensorOptions {
  DType dtype_ = kFloat32;
  bool has_dtype_ = false;
  Device device_ = Device::cpu();
  bool has_device_ = false;
  bool requires_grad_ = false;
  MemoryFormat memory_format_ = MemoryFormat::Contiguous;
  bool pinned_memory_ = false;
  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t), has_dtype_(true) {}  // NOLINT: lets `zeros({2}, kFloat16)` read naturally
  TensorOptions(Device d) : device_(d), has_device_(true) {}            // NOLINT
  TensorOptions(DeviceType t) : device_(Device(t)), has_device_(true) {}  // NOLINT: `empty(n, kCPU)`
  TensorOptions& dtype(DType t) { dtype_ = t; has_dtype_ = true; return *this; }
  /// The dtype set, or `fallback` when none was.
  DType dtype_or(DType fallback) const { return has_dtype_ ? dtype_ : fallback; }
  TensorOptions& device(Device d) { device_ = d; has_device_ = true; return *this; }
  TensorOptions& device(DeviceType t, int index) { return device(Device(t, index)); }
  /// The device set, or `fallback` when none was.
  Device device_or(Device fallback) const { return has_device_ ? device_ : fallback; }
  TensorOptions& layout(TensorLayout) { return *this; }
  TensorOptions& requires_grad(bool r = true) { requires_grad_ = r; return *this; }
  TensorOptions& memory_format(MemoryFormat m) { memory_format_ = m; return *this; }
  /// Page-locked host memory (CPU tensors; needs a CUDA device), as LibTorch's
  /// `pinned_memory(true)`: host-to-device copies from it are asynchronous DMAs. Freed blocks are
  /// kept by size and reused, so a loader filling same-sized batches pins pages only once.
  TensorOptions& pinned_memory(bool p = true) { pinned_memory_ = p; return *this; }
};

/// LibTorch's option factories, each starting a TensorOptions: `zeros({2}, dtype(kInt32).device(kCUDA))`,
/// `randn(3, requires_grad())`.
inline TensorOptions dtype(DType t) { return TensorOptions().dtype(t); }
inline TensorOptions device(Device d) { return TensorOptions().device(d); }
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }
inline TensorOptions memory_format(MemoryFormat m) { return TensorOptions().memory_format(m); }
inline TensorOptions layout(TensorLayout l) { return TensorOptions().layout(l); }

/// The shared state behind a Tensor handle. Views share `storage`.
struct TensorImpl {
  std::shared_ptr<StorageImpl> storage;
  IntList sizes;
  IntList strides;
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;
  std::shared_ptr<autograd::AutogradMeta> autograd;  // null until autograd needs it
  /// Made from another tensor's memory by a view op or by detach(): autograd refuses to record
  /// an in-place op on either, since the tensor they alias would keep a stale history.
  enum class View : uint8_t { none, view, detached } view = View::none;
  /// For View::view, the storage's `rebases` when the view was made: a recorded in-place write
  /// into the memory since then makes the view's own history stale, so autograd refuses to use it.
  uint64_t view_rebases = 0;
};

/// A number read from a tensor by item() without a type (LibTorch's Scalar): exact as i64 for integer
/// and bool tensors, a double otherwise; converts as to<T>(), toDouble() and the like, or implicitly
/// to double.
class Scalar {
 public:
  /// From any number, as LibTorch's (`torch::Scalar pad = 0`): integers (and bool) stay exact.
  template <typename T>
    requires std::is_floating_point_v<T>
  Scalar(T v) : d_(static_cast<double>(v)), i_(0), integral_(false) {}  // NOLINT
  template <typename T>
    requires std::is_integral_v<T>
  Scalar(T v) : d_(static_cast<double>(v)), i_(static_cast<int64_t>(v)), integral_(true) {}  // NOLINT
  template <typename T> T to() const { return integral_ ? static_cast<T>(i_) : static_cast<T>(d_); }
  double toDouble() const { return to<double>(); }
  float toFloat() const { return to<float>(); }
  int64_t toLong() const { return to<int64_t>(); }
  int toInt() const { return to<int>(); }
  bool toBool() const { return integral_ ? i_ != 0 : d_ != 0.0; }
  bool isIntegral() const { return integral_; }
  bool isFloatingPoint() const { return !integral_; }
  operator double() const { return toDouble(); }  // NOLINT: `x.item() * 2.0`, as LibTorch's Scalar converts

 private:
  double d_;
  int64_t i_;
  bool integral_;
};

/// An n-d array handle with value semantics of a shared_ptr: copies alias the same data.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  /// Assigning to a named tensor rebinds the handle; assigning to a temporary writes through it, as in LibTorch:
  /// `x[0] = y`, `x.select(1, 2) = 0.5` and `p.grad().data() = g` copy into the elements the temporary views.
  Tensor& operator=(const Tensor&) & = default;
  Tensor& operator=(Tensor&&) & noexcept = default;
  Tensor& operator=(const Tensor& src) && { return copy_(src); }
  Tensor& operator=(double value) && { return fill_(value); }

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata ----
  const IntList& sizes() const { return self("sizes").sizes; }
  const IntList& strides() const { return self("strides").strides; }
  /// Size of one dimension; negative dims count from the end.
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(self("dim").sizes.size()); }
  int64_t ndimension() const { return dim(); }
  bool is_same_size(const Tensor& o) const { return sizes() == o.sizes(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  int64_t numel() const;
  DType dtype() const { return self("dtype").dtype; }
  DType scalar_type() const { return self("scalar_type").dtype; }
  Device device() const { return self("device").storage->device; }
  TensorOptions options() const { return TensorOptions().dtype(dtype()).device(device()); }
  int64_t storage_offset() const { return self("storage_offset").offset; }
  size_t element_size() const { return mpx::element_size(dtype()); }
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_cuda() const { return device().is_cuda(); }
  /// True when the layout is dense in the given format (row-major, or NHWC for ChannelsLast).
  bool is_contiguous(MemoryFormat fmt = MemoryFormat::Contiguous) const;
  /// The format this tensor is dense in (ChannelsLast only for 4-d NHWC-dense tensors).
  MemoryFormat suggest_memory_format() const;
  /// Raw pointer to the first element (storage base + offset).
  void* raw_data() const;
  /// LibTorch's untyped data_ptr(): raw_data().
  void* data_ptr() const { return raw_data(); }
  /// Typed pointer; throws if T does not match dtype().
  template <typename T> T* data_ptr() const {
    MPX_CHECK(defined(), "data_ptr(): tensor is undefined");
    MPX_CHECK(dtype_v<std::remove_cv_t<T>> == dtype(), "data_ptr<", dtype_name(dtype_v<std::remove_cv_t<T>>),
              ">(): tensor holds ", dtype_name(dtype()));
    return static_cast<T*>(raw_data());
  }
  /// The single element of a one-element tensor, converted to T (copies from the device);
  /// integers read from an integer tensor are exact beyond 2^53.
  template <typename T> T item() const {
    if constexpr (DimIndex<T>) return static_cast<T>(item_int64());
    else return static_cast<T>(item_double());
  }
  /// The single element as a Scalar (LibTorch's untyped item()): `x.item().toFloat()`, `to<T>()`.
  Scalar item() const;
  double item_double() const;
  /// The single element as i64: exact for integer and bool tensors, truncated toward zero for floating ones.
  int64_t item_int64() const;

  // ---- conversions ----
  /// LibTorch's to() overloads and argument order: `copy` forces a new tensor even when nothing changes;
  /// `memory_format` defaults to preserving the layout; `non_blocking` makes host/device copies asynchronous
  /// where the memory allows it (pinned host memory).
  Tensor to(DType t, bool non_blocking = false, bool copy = false,
            std::optional<MemoryFormat> memory_format = std::nullopt) const;
  Tensor to(Device d, DType t, bool non_blocking = false, bool copy = false,
            std::optional<MemoryFormat> memory_format = std::nullopt) const;
  Tensor to(Device d, bool non_blocking = false, bool copy = false) const { return to(d, dtype(), non_blocking, copy); }
  Tensor to(DeviceType t, bool non_blocking = false, bool copy = false) const { return to(Device(t), non_blocking, copy); }
  /// The dtype and device the options set (the others kept).
  Tensor to(const TensorOptions& o, bool non_blocking = false, bool copy = false) const;
  /// In other's dtype and on its device.
  Tensor to(const Tensor& other, bool non_blocking = false, bool copy = false) const {
    return to(other.device(), other.dtype(), non_blocking, copy);
  }
  Tensor to(MemoryFormat fmt) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor contiguous(MemoryFormat fmt = MemoryFormat::Contiguous) const;
  Tensor clone(MemoryFormat fmt = MemoryFormat::Preserve) const;
  /// New tensors in this one's dtype and on its device unless `opts` sets them (LibTorch's new_zeros, ...).
  Tensor new_zeros(const IntList& shape, const TensorOptions& opts = {}) const;
  Tensor new_ones(const IntList& shape, const TensorOptions& opts = {}) const;
  Tensor new_empty(const IntList& shape, const TensorOptions& opts = {}) const;
  Tensor new_full(const IntList& shape, double value, const TensorOptions& opts = {}) const;
  Tensor half() const { return to(kFloat16); }
  Tensor bfloat16() const { return to(kBFloat16); }
  Tensor to_float() const { return to(kFloat32); }
  Tensor to_double() const { return to(kFloat64); }
  /// In o's dtype and on its device (LibTorch's type_as).
  Tensor type_as(const Tensor& o) const { return to(o.device(), o.dtype()); }
  Tensor toType(DType t) const { return to(t); }

  // ---- autograd ----
  bool requires_grad() const;
  /// Marks a leaf as needing gradients (LibTorch: requires_grad_).
  Tensor& set_requires_grad(bool r = true);
  Tensor& requires_grad_(bool r = true) { return set_requires_grad(r); }
  /// Accumulated gradient of a leaf (undefined until a backward reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  /// Mutable access to the stored gradient (for optimizers and zero_grad).
  Tensor& mutable_grad() const;
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;
  /// A tensor sharing this one's data that is cut from the graph.
  Tensor detach() const;
  /// Cuts this tensor itself from the graph (LibTorch's detach_): no history, requires_grad() false.
  /// Refused on a view with history (use detach()).
  Tensor& detach_();
  /// LibTorch's `x.data()`: detach(), the same elements with no history, for writes autograd must not see.
  Tensor data() const { return detach(); }
  bool is_leaf() const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  /// Keeps the gradient of a non-leaf after backward (it is in grad() afterwards).
  void retain_grad() const;
  /// Runs `hook(grad)` each time backward computes this tensor's gradient, before the gradient
  /// is accumulated into a leaf's grad() or passed further down the graph; a hook that returns a
  /// defined tensor (same shape) replaces the gradient, one returning void or an undefined tensor
  /// only observes it (PyTorch's Tensor.register_hook). Hooks run in registration order.
  /// Returns an id for remove_hook. The tensor must require grad.
  template <typename Fn> uint64_t register_hook(Fn hook) const {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&, const Tensor&>>)
      return register_grad_hook([hook = std::move(hook)](const Tensor& g) mutable { hook(g); return Tensor(); });
    else
      return register_grad_hook(std::function<Tensor(const Tensor&)>(std::move(hook)));
  }
  uint64_t register_grad_hook(std::function<Tensor(const Tensor&)> hook) const;
  /// Runs `hook(param)` on a leaf that requires grad right after backward has accumulated a
  /// gradient into its grad() (PyTorch's register_post_accumulate_grad_hook); what data-parallel
  /// training uses to start reducing a gradient while the rest of backward goes on.
  /// Returns an id for remove_hook.
  uint64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  /// Removes a hook registered on this tensor by its id; false when there is none.
  bool remove_hook(uint64_t id) const;
  /// Bumped by every in-place write; autograd compares it with the value seen at save time.
  uint64_t version() const { return self("version").storage->version.load(); }
  void bump_version() const { self("bump_version").storage->version.fetch_add(1); }

  // ---- views (share storage) ----
  Tensor view(const IntList& shape) const;
  Tensor reshape(const IntList& shape) const;
  template <DimIndex I> Tensor view(I size) const { return view(IntList{static_cast<int64_t>(size)}); }
  template <DimIndex I> Tensor reshape(I size) const { return reshape(IntList{static_cast<int64_t>(size)}); }
  Tensor permute(const IntList& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor swapaxes(int64_t d0, int64_t d1) const { return transpose(d0, d1); }
  /// Dims `source` moved to the positions `destination`, the others keeping their order (PyTorch's movedim).
  Tensor movedim(const IntList& source, const IntList& destination) const;
  Tensor movedim(int64_t source, int64_t destination) const { return movedim(IntList{source}, IntList{destination}); }
  /// The diagonal of dims d1 and d2 as a view, moved to the last dim; offset > 0 above the main diagonal.
  Tensor diagonal(int64_t offset = 0, int64_t d1 = 0, int64_t d2 = 1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor unflatten(int64_t dim, const IntList& sizes) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  /// The shape ops in place (LibTorch's unsqueeze_, ...): this tensor's own sizes and strides change,
  /// as seen by every handle to it; while autograd records, its history becomes the view op's.
  Tensor& squeeze_();
  Tensor& squeeze_(int64_t dim);
  Tensor& unsqueeze_(int64_t dim);
  Tensor& transpose_(int64_t d0, int64_t d1);
  Tensor& t_() { return transpose_(0, 1); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  /// Python-style slice [start, end) with step along dim (negative bounds count from the end).
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  /// LibTorch's x.index({Slice(), 0, "...", None, idx, mask}) for Python's x[:, 0, ..., None, idx, mask]
  /// (core/indexing.h): integers, slices, None and Ellipsis give a view; integer index tensors and boolean masks
  /// gather (advanced indexing, with PyTorch's result shapes). Differentiable.
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  /// x[indices] = value in place, value broadcast to the indexed shape (PyTorch's index_put_); with index tensors,
  /// an element indexed twice gets one of its values.
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& value);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, double value);
  Tensor expand(const IntList& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor view_as(const Tensor& other) const { return view(other.sizes()); }
  Tensor reshape_as(const Tensor& other) const { return reshape(other.sizes()); }

  // ---- in-place ----
  // PyTorch's autograd rule: on a tensor that needs no grad they just write; while autograd
  // records (grad mode on and the tensor or an argument requires grad) the op joins the graph
  // and the tensor's history is rebased onto it. Refused on a leaf that requires grad (update
  // parameters under NoGradGuard) and on views; a tensor saved for backward and modified
  // afterwards is an error at backward naming the node that saved it.
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other, double alpha = 1.0) { return add_(other, -alpha); }
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value) { return mul_(1.0 / value); }
  Tensor& sub_(double value) { return add_(-value); }
  Tensor& clamp_(double lo, double hi);
  Tensor& clamp_min_(double lo);
  Tensor& clamp_max_(double hi);
  Tensor& pow_(double exponent);
  Tensor& pow_(const Tensor& exponent);
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& masked_fill_(const Tensor& mask, const Tensor& value);
  Tensor& relu_();
  /// Elementwise math in place (LibTorch's x.exp_(), ...).
#define MPX_TENSOR_INPLACE_UNARY(X)                                                                                  \
  X(abs) X(neg) X(exp) X(log) X(sqrt) X(rsqrt) X(sigmoid) X(tanh) X(sign) X(reciprocal) X(sin) X(cos) X(floor)    \
  X(ceil) X(round) X(trunc) X(log1p) X(expm1) X(square) X(erf)
#define MPX_DECLARE_INPLACE_UNARY(op) Tensor& op##_();
  MPX_TENSOR_INPLACE_UNARY(MPX_DECLARE_INPLACE_UNARY)
#undef MPX_DECLARE_INPLACE_UNARY
  /// Comparisons in place: 1 where true, 0 where false, in this tensor's dtype (LibTorch's x.eq_(y)).
#define MPX_TENSOR_INPLACE_COMPARE(X) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)
#define MPX_DECLARE_INPLACE_COMPARE(op) Tensor& op##_(const Tensor& other); Tensor& op##_(double other);
  MPX_TENSOR_INPLACE_COMPARE(MPX_DECLARE_INPLACE_COMPARE)
#undef MPX_DECLARE_INPLACE_COMPARE
  Tensor& normal_(double mean = 0.0, double std = 1.0);
  Tensor& uniform_(double from = 0.0, double to = 1.0);

  // ---- math (differentiable; see ops/ for the full list) ----
  Tensor sum() const;
  Tensor sum(const IntList& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const IntList& dims, bool keepdim = false) const;
  template <DimIndex I> Tensor sum(I dim, bool keepdim = false) const { return sum(IntList{static_cast<int64_t>(dim)}, keepdim); }
  template <DimIndex I> Tensor mean(I dim, bool keepdim = false) const { return mean(IntList{static_cast<int64_t>(dim)}, keepdim); }
  Tensor max() const;
  /// Max along dim: (values, indices).
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  /// Elementwise max/min with another tensor (LibTorch's x.max(y): maximum, minimum).
  Tensor max(const Tensor& other) const { return maximum(other); }
  Tensor min(const Tensor& other) const { return minimum(other); }
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  /// The index of the largest (smallest) element in the flattened tensor, 0-dim i64 (LibTorch's argmax()).
  Tensor argmax() const { return reshape(IntList{-1}).argmax(0); }
  Tensor argmin() const { return reshape(IntList{-1}).argmin(0); }
  Tensor var(const IntList& dims, bool unbiased = true, bool keepdim = false) const;
  template <DimIndex I> Tensor var(I dim, bool unbiased = true, bool keepdim = false) const {
    return var(IntList{static_cast<int64_t>(dim)}, unbiased, keepdim);
  }
  /// Over all elements. (A template for `unbiased`, so a braced `x.var({1})` still means dims.)
  Tensor var() const { return var(true); }
  template <std::same_as<bool> B> Tensor var(B unbiased) const { return var_all(unbiased); }
  Tensor std(const IntList& dims, bool unbiased = true, bool keepdim = false) const;
  template <DimIndex I> Tensor std(I dim, bool unbiased = true, bool keepdim = false) const {
    return std(IntList{static_cast<int64_t>(dim)}, unbiased, keepdim);
  }
  Tensor std() const { return std(true); }
  template <std::same_as<bool> B> Tensor std(B unbiased) const { return std_all(unbiased); }
  /// The p-norm of all elements (LibTorch's x.norm()), or over dims (torch.linalg.vector_norm's rule).
  Tensor norm(double p = 2) const;
  Tensor norm(double p, const IntList& dims, bool keepdim = false) const;
  template <DimIndex I> Tensor norm(double p, I dim, bool keepdim = false) const {
    return norm(p, IntList{static_cast<int64_t>(dim)}, keepdim);
  }
  /// (values, indices) of the k largest (smallest) along dim, and of a sort (ops/index.h).
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  Tensor cumsum(int64_t dim) const;
  Tensor cumprod(int64_t dim) const;
  Tensor prod() const;
  Tensor prod(int64_t dim, bool keepdim = false) const;
  Tensor logsumexp(const IntList& dims, bool keepdim = false) const;
  template <DimIndex I> Tensor logsumexp(I dim, bool keepdim = false) const {
    return logsumexp(IntList{static_cast<int64_t>(dim)}, keepdim);
  }
  /// Indexing (ops/index.h).
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value) const;
  /// `n` draws per row of this tensor's non-negative weights (ops/index.h multinomial).
  Tensor multinomial(int64_t n, bool replacement = false) const;
  /// Masks (ops/logical.h).
  Tensor any() const;
  Tensor any(int64_t dim, bool keepdim = false) const;
  Tensor all() const;
  Tensor all(int64_t dim, bool keepdim = false) const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor logical_not() const;
  Tensor logical_and(const Tensor& other) const;
  Tensor logical_or(const Tensor& other) const;
  Tensor nonzero() const;
  Tensor masked_select(const Tensor& mask) const;
  Tensor flip(const IntList& dims) const;
  template <DimIndex I> Tensor flip(I dim) const { return flip(IntList{static_cast<int64_t>(dim)}); }
  Tensor repeat(const IntList& repeats) const;
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  /// Elementwise math as methods (the free functions of ops/elementwise.h).
#define MPX_TENSOR_UNARY_METHODS(X)                                                                                   \
  X(sign) X(rsqrt) X(reciprocal) X(sin) X(cos) X(erf) X(floor) X(ceil) X(round) X(trunc) X(frac) X(log1p) X(expm1) \
  X(log2) X(log10) X(exp2) X(tan) X(atan) X(asin) X(acos) X(sinh) X(cosh) X(asinh) X(acosh) X(atanh) X(erfc)      \
  X(erfinv) X(silu) X(gelu)
#define MPX_DECLARE_UNARY_METHOD(op) Tensor op() const;
  MPX_TENSOR_UNARY_METHODS(MPX_DECLARE_UNARY_METHOD)
#undef MPX_DECLARE_UNARY_METHOD
  Tensor square() const;
  Tensor atan2(const Tensor& other) const;
  Tensor fmod(const Tensor& other) const;
  Tensor fmod(double other) const;
  Tensor remainder(const Tensor& other) const;
  Tensor remainder(double other) const;
  Tensor floor_divide(const Tensor& other) const;
  Tensor floor_divide(double other) const;
  Tensor lerp(const Tensor& end, double weight) const;
  Tensor lerp(const Tensor& end, const Tensor& weight) const;
  /// self += weight (end - self): the EMA update `ema.lerp_(w, 1 - decay)`.
  Tensor& lerp_(const Tensor& end, double weight);
  /// Shape ops as methods (ops/shape.h).
  Tensor roll(const IntList& shifts, const IntList& dims = {}) const;
  /// Pieces of `size` along dim (the last smaller), and `chunks` near-equal pieces (ops/shape.h).
  std::vector<Tensor> split(int64_t size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor pow(double exponent) const;
  /// The binary ops as methods (ops/elementwise.h), LibTorch's `x.add(y, alpha)`, `x.mul(2)`, ...
  Tensor add(const Tensor& o, double alpha = 1.0) const;
  Tensor add(double o) const;
  Tensor sub(const Tensor& o, double alpha = 1.0) const;
  Tensor sub(double o) const;
  Tensor mul(const Tensor& o) const;
  Tensor mul(double o) const;
  Tensor div(const Tensor& o) const;
  Tensor div(double o) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor maximum(const Tensor& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor bmm(const Tensor& o) const;
  Tensor clamp(double lo, double hi) const;
  Tensor clamp_min(double lo) const;
  Tensor clamp_max(double hi) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor eq(const Tensor& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor le(const Tensor& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor ge(const Tensor& o) const;
  Tensor eq(double v) const;
  Tensor ne(double v) const;
  Tensor lt(double v) const;
  Tensor le(double v) const;
  Tensor gt(double v) const;
  Tensor ge(double v) const;
  /// True when every element is finite (no inf/NaN).
  bool all_finite() const;
  /// Readable dump (shape, dtype, device and up to a few values).
  std::string str() const;
  /// Element access by index, `acc[i][j]` (core/accessor.h): a CPU tensor of N dims holding T. It reads this
  /// tensor's sizes and strides in place, so a temporary has none (as LibTorch's).
  template <typename T, size_t N> TensorAccessor<T, N> accessor() const&;
  template <typename T, size_t N> TensorAccessor<T, N> accessor() && = delete;

 private:
  // The impl behind a metadata call; an undefined tensor (default-constructed, or a gradient never computed) is a
  // clear error naming the call rather than a null dereference.
  TensorImpl& self(const char* call) const {
    if (impl_ == nullptr) [[unlikely]] undefined_error(call);
    return *impl_;
  }
  [[noreturn]] static void undefined_error(const char* call);
  Tensor var_all(bool unbiased) const;
  Tensor std_all(bool unbiased) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string shape_str(const IntList& s);
/// Prints as shape_str: [2, 3].
std::ostream& operator<<(std::ostream& os, const IntList& s);

/// Contiguous strides for a shape in the given format.
IntList contiguous_strides(const IntList& shape, MemoryFormat fmt = MemoryFormat::Contiguous);
int64_t numel_of(const IntList& shape);
/// Wraps a possibly negative dim into [0, ndim); throws naming `what` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what = "dim");
/// The broadcast of two shapes (numpy rules); throws naming both shapes.
IntList broadcast_shapes(const IntList& a, const IntList& b, const char* op = "broadcast");

}  // namespace mpx

#include "core/accessor.h"
#include "core/factories.h"
