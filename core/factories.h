// Tensor factories: empty, zeros, ones, full, the random ones, arange and friends, from_blob, tensor(values)
// (LibTorch's literal forms included), and the *_like forms.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace mpx {

Tensor empty(const IntList& shape, const TensorOptions& opts = {});
Tensor empty_strided(const IntList& shape, const IntList& strides, const TensorOptions& opts = {});
/// A tensor over memory the caller owns, without a copy (LibTorch's from_blob): on opts' device (a CUDA
/// pointer for a CUDA tensor), in opts' dtype, row-major unless strides are given. `data` must outlive the
/// tensor and its views, or pass a `deleter`, called with `data` when the last of them goes.
Tensor from_blob(void* data, const IntList& shape, const TensorOptions& opts = {});
Tensor from_blob(void* data, const IntList& shape, const IntList& strides, const TensorOptions& opts = {});
Tensor from_blob(void* data, const IntList& shape, std::function<void(void*)> deleter, const TensorOptions& opts = {});
Tensor from_blob(void* data, const IntList& shape, const IntList& strides, std::function<void(void*)> deleter,
                 const TensorOptions& opts = {});
Tensor zeros(const IntList& shape, const TensorOptions& opts = {});
Tensor ones(const IntList& shape, const TensorOptions& opts = {});
Tensor full(const IntList& shape, double value, const TensorOptions& opts = {});
/// Uniform in [0, 1).
Tensor rand(const IntList& shape, const TensorOptions& opts = {});
/// Standard normal.
Tensor randn(const IntList& shape, const TensorOptions& opts = {});
/// Integers uniform in [low, high); i64 unless opts set a dtype.
Tensor randint(int64_t low, int64_t high, const IntList& shape, const TensorOptions& opts = {});
/// Integers uniform in [0, high).
inline Tensor randint(int64_t high, const IntList& shape, const TensorOptions& opts = {}) {
  return randint(0, high, shape, opts);
}
/// The factories above for a 1-d tensor of n elements, n a plain integer as LibTorch allows (`zeros(n, device)`);
/// a braced list still means a shape.
template <DimIndex I> Tensor randint(int64_t high, I n, const TensorOptions& opts = {}) {
  return randint(0, high, IntList{static_cast<int64_t>(n)}, opts);
}
template <DimIndex I> Tensor randint(int64_t low, int64_t high, I n, const TensorOptions& opts = {}) {
  return randint(low, high, IntList{static_cast<int64_t>(n)}, opts);
}
template <DimIndex I> Tensor from_blob(void* data, I n, const TensorOptions& opts = {}) {
  return from_blob(data, IntList{static_cast<int64_t>(n)}, opts);
}
template <DimIndex I> Tensor empty(I n, const TensorOptions& opts = {}) { return empty(IntList{static_cast<int64_t>(n)}, opts); }
template <DimIndex I> Tensor zeros(I n, const TensorOptions& opts = {}) { return zeros(IntList{static_cast<int64_t>(n)}, opts); }
template <DimIndex I> Tensor ones(I n, const TensorOptions& opts = {}) { return ones(IntList{static_cast<int64_t>(n)}, opts); }
template <DimIndex I> Tensor rand(I n, const TensorOptions& opts = {}) { return rand(IntList{static_cast<int64_t>(n)}, opts); }
template <DimIndex I> Tensor randn(I n, const TensorOptions& opts = {}) { return randn(IntList{static_cast<int64_t>(n)}, opts); }
template <DimIndex I> Tensor full(I n, double value, const TensorOptions& opts = {}) {
  return full(IntList{static_cast<int64_t>(n)}, value, opts);
}
/// start, start + step, ... below end. Unless opts set a dtype, i64 when start, end and step are all integers
/// (C++ integer types) and f32 when any is floating, as LibTorch infers it: `arange(0, 1, 0.1)` is ten f32 values.
Tensor arange_impl(double start, double end, double step, bool integral, const TensorOptions& opts);
template <typename E>
  requires std::is_arithmetic_v<E>
Tensor arange(E end, const TensorOptions& opts = {}) {
  return arange_impl(0.0, static_cast<double>(end), 1.0, std::is_integral_v<E>, opts);
}
template <typename S, typename E, typename P = int64_t>
  requires std::is_arithmetic_v<S> && std::is_arithmetic_v<E> && std::is_arithmetic_v<P>
Tensor arange(S start, E end, P step = 1, const TensorOptions& opts = {}) {
  return arange_impl(static_cast<double>(start), static_cast<double>(end), static_cast<double>(step),
                     std::is_integral_v<S> && std::is_integral_v<E> && std::is_integral_v<P>, opts);
}
template <typename S, typename E>
  requires std::is_arithmetic_v<S> && std::is_arithmetic_v<E>
Tensor arange(S start, E end, const TensorOptions& opts) {
  return arange(start, end, int64_t{1}, opts);
}
/// `steps` values from start to end inclusive, evenly spaced (PyTorch's linspace: the first half counted from
/// start, the second from end, so both ends are exact); f32 unless opts say otherwise.
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& opts = {});
/// base ** linspace(start, end, steps).
Tensor logspace(double start, double end, int64_t steps, double base = 10.0, const TensorOptions& opts = {});
/// The n x m identity (m = n when not given).
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, const TensorOptions& opts = {});
inline Tensor eye(int64_t n, const TensorOptions& opts) { return eye(n, std::nullopt, opts); }
/// A random permutation of 0 .. n - 1 (i64 unless opts say otherwise), drawn from the default generator.
Tensor randperm(int64_t n, const TensorOptions& opts = {});
/// A 0-dim tensor holding one value.
Tensor scalar_tensor(double value, const TensorOptions& opts = {});
/// Copies `values` into a new tensor of the given shape (1-d when shape is empty), in T's dtype unless opts set one.
template <typename T>
Tensor tensor(const std::vector<T>& values, const IntList& shape = {}, TensorOptions opts = {});
namespace detail {
// Values written in code take LibTorch's (and Python's) dtypes: floating f32, integers i64, bool bool.
template <typename T> using literal_t =
    std::conditional_t<std::is_same_v<T, bool>, bool,
                       std::conditional_t<std::is_integral_v<T>, int64_t, std::conditional_t<std::is_same_v<T, float>, float, double>>>;
template <typename T> TensorOptions literal_options(TensorOptions o) {
  if (!o.has_dtype_) o.dtype(std::is_same_v<T, bool> ? kBool : std::is_integral_v<T> ? kInt64 : kFloat32);
  return o;
}
}  // namespace detail
/// LibTorch's `tensor({1.5, 2.5})` (f32), `tensor({1, 2})` (i64), `tensor({true, false})`, `tensor({1.5}, kFloat64)`.
/// Only with the element type deduced: `tensor<double>({1.5})` names a dtype and takes the std::vector form above.
/// (The empty pack takes explicit template arguments, which the constraint then refuses.)
template <typename... ExplicitArgs, typename T>
  requires(sizeof...(ExplicitArgs) == 0 && std::is_arithmetic_v<T>)
Tensor tensor(std::initializer_list<T> values, TensorOptions opts = {}) {
  return tensor(std::vector<detail::literal_t<T>>(values.begin(), values.end()), IntList{}, detail::literal_options<T>(opts));
}
/// A 2-d tensor from rows of equal length: `tensor({{1., 2.}, {3., 4.}})`.
template <typename... ExplicitArgs, typename T>
  requires(sizeof...(ExplicitArgs) == 0 && std::is_arithmetic_v<T>)
Tensor tensor(std::initializer_list<std::initializer_list<T>> rows, TensorOptions opts = {}) {
  std::vector<detail::literal_t<T>> v;
  const int64_t cols = rows.size() ? static_cast<int64_t>(rows.begin()->size()) : 0;
  for (const auto& r : rows) {
    MPX_CHECK(static_cast<int64_t>(r.size()) == cols, "tensor: rows of ", cols, " and ", r.size(),
              " values; every row of a 2-d tensor needs the same length");
    v.insert(v.end(), r.begin(), r.end());
  }
  return tensor(v, IntList{static_cast<int64_t>(rows.size()), cols}, detail::literal_options<T>(opts));
}
/// A 0-dim tensor holding `value` (LibTorch's `tensor(3.5)`), dtype as for a list.
template <typename... ExplicitArgs, typename T>
  requires(sizeof...(ExplicitArgs) == 0 && std::is_arithmetic_v<T>)
Tensor tensor(T value, TensorOptions opts = {}) {
  const bool rg = opts.requires_grad_;
  Tensor t = tensor(std::vector<detail::literal_t<T>>{static_cast<detail::literal_t<T>>(value)}, IntList{1},
                    detail::literal_options<T>(opts.requires_grad(false)))
                 .reshape(IntList{})
                 .clone();
  if (rg) t.requires_grad_(true);
  return t;
}
/// Factories shaped like t, in its dtype and on its device unless `opts` sets them (`zeros_like(x, kInt64)`),
/// and in its layout when it is channels-last (PyTorch's preserve_format; other tensors give row-major results).
Tensor zeros_like(const Tensor& t, const TensorOptions& opts = {});
Tensor ones_like(const Tensor& t, const TensorOptions& opts = {});
Tensor empty_like(const Tensor& t, const TensorOptions& opts = {});
Tensor full_like(const Tensor& t, double value, const TensorOptions& opts = {});
Tensor rand_like(const Tensor& t, const TensorOptions& opts = {});
Tensor randn_like(const Tensor& t, const TensorOptions& opts = {});

}  // namespace mpx
