// Boolean masks composed from comparisons, sums, a running sum and a scatter, so that they run on every device
// the comparisons do (logical_and/or/xor are formula kernels, defined with the comparisons in ops/elementwise.cpp).
#include "ops/logical.h"

#include <limits>
#include <vector>

#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx {
namespace {
void check_defined(const Tensor& t, const char* op) {
  MPX_CHECK(t.defined(), op, ": the tensor is undefined");
}

// The largest finite value of a floating dtype.
double finite_max(DType dt) {
  switch (dt) {
    case kFloat16: return 65504.0;
    case kBFloat16: return 3.3895313892515355e38;
    case kFloat32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}

// The flat (row-major) positions of the nonzero elements of x, i64 [count].
Tensor flat_nonzero(const Tensor& x) {
  const int64_t n = x.numel();
  const TensorOptions i64 = TensorOptions(kInt64).device(x.device());
  if (n == 0) return empty({0}, i64);
  NoGradGuard ng;
  const Tensor flag = ne(x.reshape({-1}), 0.0);
  const Tensor ones_at = flag.to(kInt64);
  const int64_t count = sum(ones_at).item<int64_t>();
  if (count == n) return arange(static_cast<double>(n), i64);
  // Each nonzero element's slot in the result is the running count before it; the others go to a spare slot.
  const Tensor slot = where(flag, cumsum(ones_at, 0) - 1, static_cast<double>(count));
  return scatter(zeros({count + 1}, i64), 0, slot, arange(static_cast<double>(n), i64)).narrow(0, 0, count);
}

// any (some element nonzero) or all (no element zero): a count compared with 0, over x or along dim.
Tensor any_or_all(const Tensor& x, bool any_of, std::optional<int64_t> dim, bool keepdim) {
  check_defined(x, any_of ? "any" : "all");
  const Tensor hits = (any_of ? ne(x, 0.0) : eq(x, 0.0)).to(kInt64);
  const Tensor count = dim ? sum(hits, {*dim}, keepdim) : sum(hits);
  return any_of ? gt(count, 0.0) : eq(count, 0.0);
}

Tensor require_bool(const Tensor& t, const char* op) {
  MPX_CHECK(t.defined() && t.dtype() == kBool, "operator", op, ": masks combine as bool tensors, got ",
            ops::describe(t), "; for other dtypes call logical_and/logical_or/logical_xor/logical_not (integer bitwise ",
            "ops are not offered)");
  return t;
}
}  // namespace

Tensor logical_not(const Tensor& x) {
  check_defined(x, "logical_not");
  return eq(x, 0.0);
}

Tensor isnan(const Tensor& x) {
  check_defined(x, "isnan");
  return is_floating(x.dtype()) ? ne(x, x) : zeros(x.sizes(), TensorOptions(kBool).device(x.device()));
}
Tensor isinf(const Tensor& x) {
  check_defined(x, "isinf");
  NoGradGuard ng;
  if (!is_floating(x.dtype())) return zeros(x.sizes(), TensorOptions(kBool).device(x.device()));
  return eq(abs(x), std::numeric_limits<double>::infinity());
}
Tensor isfinite(const Tensor& x) {
  check_defined(x, "isfinite");
  NoGradGuard ng;
  if (!is_floating(x.dtype())) return ones(x.sizes(), TensorOptions(kBool).device(x.device()));
  return lt(abs(x), std::numeric_limits<double>::infinity());  // NaN compares false
}

Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf) {
  check_defined(x, "nan_to_num");
  if (!is_floating(x.dtype())) return x.clone();
  const double inf = std::numeric_limits<double>::infinity(), top = finite_max(x.dtype());
  Tensor r = masked_fill(x, isnan(x), nan);
  r = masked_fill(r, eq(x, inf), posinf.value_or(top));
  return masked_fill(r, eq(x, -inf), neginf.value_or(-top));
}

Tensor any(const Tensor& x) { return any_or_all(x, true, std::nullopt, false); }
Tensor any(const Tensor& x, int64_t dim, bool keepdim) { return any_or_all(x, true, dim, keepdim); }
Tensor all(const Tensor& x) { return any_or_all(x, false, std::nullopt, false); }
Tensor all(const Tensor& x, int64_t dim, bool keepdim) { return any_or_all(x, false, dim, keepdim); }

Tensor nonzero(const Tensor& x) {
  check_defined(x, "nonzero");
  const Tensor at = flat_nonzero(x);
  const int64_t count = at.size(0), D = x.dim();
  const TensorOptions i64 = TensorOptions(kInt64).device(x.device());
  if (D == 0 || count == 0) return empty({count, D}, i64);
  // Each dim's coordinate of every element, read at the nonzero positions (no integer division needed).
  tensor_list cols;
  for (int64_t d = 0; d < D; ++d) {
    IntList view(static_cast<size_t>(D), 1);
    view[static_cast<size_t>(d)] = x.size(d);
    const Tensor coord = arange(static_cast<double>(x.size(d)), i64).reshape(view).expand(x.sizes()).reshape({-1});
    cols.push_back(index_select(coord, 0, at));
  }
  return stack(cols, 1);
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  check_defined(x, "masked_select");
  MPX_CHECK(mask.defined() && mask.dtype() == kBool, "masked_select: the mask must be a bool tensor, got ",
            ops::describe(mask), "; compare to make one (x > 0) or call .to(kBool)");
  const IntList shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  ops::common_device("masked_select", {x, mask});
  return index_select(x.expand(shape).reshape({-1}), 0, flat_nonzero(mask.expand(shape)));
}

Tensor operator&(const Tensor& a, const Tensor& b) { return logical_and(require_bool(a, "&"), require_bool(b, "&")); }
Tensor operator|(const Tensor& a, const Tensor& b) { return logical_or(require_bool(a, "|"), require_bool(b, "|")); }
Tensor operator^(const Tensor& a, const Tensor& b) { return logical_xor(require_bool(a, "^"), require_bool(b, "^")); }
Tensor operator~(const Tensor& x) { return logical_not(require_bool(x, "~")); }

Tensor Tensor::any() const { return mpx::any(*this); }
Tensor Tensor::any(int64_t dim, bool keepdim) const { return mpx::any(*this, dim, keepdim); }
Tensor Tensor::all() const { return mpx::all(*this); }
Tensor Tensor::all(int64_t dim, bool keepdim) const { return mpx::all(*this, dim, keepdim); }
Tensor Tensor::isnan() const { return mpx::isnan(*this); }
Tensor Tensor::isinf() const { return mpx::isinf(*this); }
Tensor Tensor::isfinite() const { return mpx::isfinite(*this); }
Tensor Tensor::logical_not() const { return mpx::logical_not(*this); }
Tensor Tensor::logical_and(const Tensor& other) const { return mpx::logical_and(*this, other); }
Tensor Tensor::logical_or(const Tensor& other) const { return mpx::logical_or(*this, other); }
Tensor Tensor::nonzero() const { return mpx::nonzero(*this); }
Tensor Tensor::masked_select(const Tensor& mask) const { return mpx::masked_select(*this, mask); }

}  // namespace mpx
