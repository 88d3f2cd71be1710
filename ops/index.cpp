// Index ops (ops/index.h): validation, index range checks, kernel calls and differentiable backwards.
#include "ops/index.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/cuda.h"
#include "ops/elementwise.h"
#include "ops/index_internal.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx {
namespace index_detail {

std::string position_str(const IntList& shape, int64_t flat) {
  if (shape.size() <= 1) return std::to_string(flat);
  IntList pos(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    pos[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return shape_str(pos);
}

Tensor checked_index(const char* op, const Tensor& index, const Tensor& self, int64_t bound, const std::string& range) {
  MPX_CHECK(index.defined(), op, ": index is undefined");
  MPX_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, ": index must hold i64 or i32 indices, got ",
            ops::describe(index), "; convert with .to(mpx::kInt64)");
  MPX_CHECK(index.device() == self.device(), op, ": index ", ops::describe(index), " must be on the device of ",
            ops::describe(self), "; move it with .to(", self.device().str(), ")");
  NoGradGuard ng;
  Tensor idx = index.detach().to(kInt64).contiguous();
  const int64_t n = idx.numel();
  if (n == 0) return idx;
  auto fail = [&](int64_t pos, int64_t value) {
    MPX_ERROR(op, ": index value ", value, " at position ", position_str(index.sizes(), pos), " of index ",
              ops::describe(index), " is out of range", range, "; indices must be in [0, ", bound, ")");
  };
  if (idx.device().is_cpu()) {
    const int64_t* p = idx.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      if (p[i] < 0 || p[i] >= bound) fail(i, p[i]);
    return idx;
  }
  // On a GPU: counted on the device and read back at once (a synchronous check: an index op
  // never runs on a bad index). Inside a CUDA graph capture nothing may be read back; the
  // kernels then only guard memory (a bad index is skipped or reads as zero).
  if (cuda::is_capturing()) return idx;
  const Tensor flat = idx.reshape({-1});
  const Tensor bad = add(lt(flat, 0.0).to(kInt64), ge(flat, static_cast<double>(bound)).to(kInt64));
  if (sum(bad).item<int64_t>() == 0) return idx;
  const int64_t first = argmax(bad, 0).item<int64_t>();
  fail(first, flat.select(0, first).item<int64_t>());
  return idx;
}

double representable(const char* op, double v, DType dt, bool overflow_to_inf) {
  if (dt == kBool) {
    MPX_CHECK(v == 0.0 || v == 1.0, op, ": value ", v, " is not a bool (0 or 1) for a bool tensor");
    return v;
  }
  if (!is_floating(dt)) {
    double lo = -9223372036854775808.0, hi = 9223372036854775808.0;  // [lo, hi)
    if (dt == kInt32) lo = -2147483648.0, hi = 2147483648.0;
    if (dt == kUInt8) lo = 0.0, hi = 256.0;
    MPX_CHECK(std::isfinite(v) && v == std::trunc(v) && v >= lo && v < hi, op, ": value ", v,
              " cannot be stored exactly in ", dtype_name(dt), " (whole numbers in [", lo, ", ", hi, "))");
    return v;
  }
  if (!std::isfinite(v) || dt == kFloat64) return v;
  NoGradGuard ng;
  const double r = full({}, v, TensorOptions(dt)).item_double();
  MPX_CHECK(overflow_to_inf || std::isfinite(r), op, ": value ", v, " overflows ", dtype_name(dt),
            "; use a smaller value or infinity");
  return r;
}

}  // namespace index_detail

namespace {
using autograd::FunctionNode;
using index_detail::checked_index;

void check_defined(const char* op, const char* what, const Tensor& t) { MPX_CHECK(t.defined(), op, ": ", what, " is undefined"); }

void check_same(const char* op, const Tensor& self, const char* what, const Tensor& t) {
  MPX_CHECK(t.device() == self.device(), op, ": ", what, " ", ops::describe(t), " must be on the device of self ",
            ops::describe(self));
  MPX_CHECK(t.dtype() == self.dtype(), op, ": ", what, " ", ops::describe(t), " must have the dtype of self ",
            ops::describe(self), "; convert it with .to(mpx::", dtype_name(self.dtype()), ")");
}

void check_numeric(const char* op, const Tensor& t) {
  MPX_CHECK(t.dtype() != kBool, op, ": bool tensors are not supported, got ", ops::describe(t),
            "; convert to an integer or floating dtype first");
}

int64_t wrap(const char* op, int64_t dim, int64_t ndim) {
  return wrap_dim(dim, std::max<int64_t>(ndim, 1), (std::string(op) + ": dim").c_str());
}

std::string dim_range(int64_t dim, const Tensor& self) {
  return " for dim " + std::to_string(dim) + " of self " + ops::describe(self);
}

// A fresh contiguous copy of self's values, outside the graph (the out-of-place ops' output).
Tensor contiguous_copy(const Tensor& self) {
  NoGradGuard ng;
  return self.detach().clone(MemoryFormat::Contiguous);
}

// g padded with zeros to `shape` (each dim's leading block): the adjoint of cutting src to index's shape.
Tensor pad_to(Tensor g, const IntList& shape) {
  IntList cur = g.sizes();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (cur[d] == shape[d]) continue;
    cur[d] = shape[d];
    g = slice_backward(g, cur, static_cast<int64_t>(d), 0, 1);
  }
  return g;
}

// ---- kernels and their graph; idx is checked, contiguous i64 ----
Tensor index_add_impl(const Tensor& self, int64_t dim, const Tensor& idx, const Tensor& src, double alpha);

Tensor index_select_impl(const Tensor& x, int64_t dim, const Tensor& idx) {
  IntList shape = x.sizes();
  shape[dim] = idx.numel();
  Tensor out = empty(shape, x.options());
  if (out.numel() > 0) dispatch::kernel<OpId::index_select>(x.device(), x.dtype())(out, x.detach(), dim, idx);
  if (auto n = autograd::record("IndexSelectBackward", {x}, {out}, [dim](FunctionNode& self, const tensor_list& g) -> tensor_list {
        const Tensor idx = self.saved(0);
        return {index_add_impl(zeros(self.shapes[0], g[0].options()), dim, idx, g[0], 1.0)};
      })) {
    n->save(idx);
    n->shapes.push_back(x.sizes());
  }
  return out;
}

Tensor index_add_impl(const Tensor& self, int64_t dim, const Tensor& idx, const Tensor& src, double alpha) {
  Tensor out = contiguous_copy(self);
  if (src.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<OpId::index_add>(out.device(), out.dtype())(out, dim, idx, src.detach().contiguous(), alpha);
  }
  if (auto n = autograd::record("IndexAddBackward", {self, src}, {out}, [dim, alpha](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor gs;
        if (self.next_edges[1].valid()) {
          gs = index_select_impl(g[0], dim, self.saved(0));
          if (alpha != 1.0) gs = mul(gs, alpha);
        }
        return {g[0], gs};
      }))
    n->save(idx);
  return out;
}

Tensor scatter_impl(bool add, const Tensor& self, int64_t dim, const Tensor& idx, const Tensor& src);

Tensor gather_impl(const Tensor& x, int64_t dim, const Tensor& idx) {
  Tensor out = empty(idx.sizes(), x.options());
  if (out.numel() > 0) dispatch::kernel<OpId::gather>(x.device(), x.dtype())(out, x.detach(), dim, idx);
  if (auto n = autograd::record("GatherBackward", {x}, {out}, [dim](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {scatter_impl(true, zeros(self.shapes[0], g[0].options()), dim, self.saved(0), g[0])};
      })) {
    n->save(idx);
    n->shapes.push_back(x.sizes());
  }
  return out;
}

// src may be larger than idx: only its leading idx-shaped block is used.
Tensor scatter_impl(bool add, const Tensor& self, int64_t dim, const Tensor& idx, const Tensor& src) {
  Tensor out = contiguous_copy(self);
  if (idx.numel() > 0) {
    NoGradGuard ng;
    Tensor s = src.detach();
    for (int64_t d = 0; d < s.dim(); ++d)
      if (s.size(d) != idx.size(d)) s = s.narrow(d, 0, idx.size(d));
    s = s.contiguous();
    if (add) dispatch::kernel<OpId::scatter_add>(out.device(), out.dtype())(out, dim, idx, s);
    else dispatch::kernel<OpId::scatter>(out.device(), out.dtype())(out, dim, idx, s);
  }
  const IntList src_shape = src.sizes();
  if (auto n = autograd::record(add ? "ScatterAddBackward" : "ScatterBackward", {self, src}, {out},
                                [add, dim, src_shape](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  const Tensor idx = self.saved(0);
                                  Tensor gself, gsrc;
                                  if (self.next_edges[0].valid()) {
                                    // Overwritten positions take nothing from self.
                                    gself = add ? g[0] : scatter_impl(false, g[0], dim, idx, zeros({}, g[0].options()).expand(idx.sizes()));
                                  }
                                  if (self.next_edges[1].valid()) gsrc = pad_to(gather_impl(g[0], dim, idx), src_shape);
                                  return {gself, gsrc};
                                }))
    n->save(idx);
  return out;
}

// The index checks shared by gather, scatter and scatter_add (PyTorch's rules).
void check_scatter_shapes(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor* src) {
  MPX_CHECK(index.dim() == self.dim(), op, ": index ", ops::describe(index), " must have as many dims as self ",
            ops::describe(self));
  if (src)
    MPX_CHECK(src->dim() == self.dim(), op, ": src ", ops::describe(*src), " must have as many dims as self ",
              ops::describe(self));
  for (int64_t d = 0; d < self.dim(); ++d) {
    MPX_CHECK(d == dim || index.size(d) <= self.size(d), op, ": index ", ops::describe(index),
              " is larger than self ", ops::describe(self), " in dim ", d, " (only dim ", dim, " may differ)");
    if (src)
      MPX_CHECK(index.size(d) <= src->size(d), op, ": index ", ops::describe(index), " is larger than src ",
                ops::describe(*src), " in dim ", d);
  }
}

Tensor scatter_common(const char* op, bool add, const Tensor& self0, int64_t dim0, const Tensor& index, const Tensor& src0) {
  check_defined(op, "self", self0);
  check_defined(op, "src", src0);
  auto in = ops::autocast(add ? OpId::scatter_add : OpId::scatter, {self0, src0});
  const Tensor &self = in[0], &src = in[1];
  if (add) check_numeric(op, self);
  check_same(op, self, "src", src);
  const int64_t dim = wrap(op, dim0, self.dim());
  // 0-d tensors act as 1-d of one element (PyTorch allows them).
  if (self.dim() == 0)
    return scatter_common(op, add, self.reshape({1}), dim, index.reshape({-1}), src.reshape({-1})).reshape({});
  check_defined(op, "index", index);
  check_scatter_shapes(op, self, dim, index, &src);
  const Tensor idx = checked_index(op, index, self, self.size(dim), dim_range(dim, self));
  return scatter_impl(add, self, dim, idx, src);
}

}  // namespace

Tensor index_select(const Tensor& self0, int64_t dim0, const Tensor& index) {
  const char* op = "index_select";
  check_defined(op, "self", self0);
  check_defined(op, "index", index);
  Tensor x = ops::autocast(OpId::index_select, {self0})[0];
  MPX_CHECK(index.dim() <= 1, op, ": index must be 1-d (or 0-d), got ", ops::describe(index));
  const int64_t dim = wrap(op, dim0, x.dim());
  const bool scalar = x.dim() == 0;
  if (scalar) x = x.reshape({1});
  const Tensor idx = checked_index(op, index, x, x.size(dim), dim_range(dim, x)).reshape({-1});
  Tensor out = index_select_impl(x, dim, idx);
  return scalar && idx.numel() == 1 ? out.reshape({}) : out;
}

Tensor index_add(const Tensor& self0, int64_t dim0, const Tensor& index, const Tensor& source0, double alpha) {
  const char* op = "index_add";
  check_defined(op, "self", self0);
  check_defined(op, "source", source0);
  check_defined(op, "index", index);
  auto in = ops::autocast(OpId::index_add, {self0, source0});
  Tensor self = in[0], src = in[1];
  check_numeric(op, self);
  check_same(op, self, "source", src);
  MPX_CHECK(index.dim() <= 1, op, ": index must be 1-d (or 0-d), got ", ops::describe(index));
  MPX_CHECK(is_floating(self.dtype()) || alpha == std::trunc(alpha), op, ": alpha ", alpha,
            " must be a whole number for the integer self ", ops::describe(self));
  const int64_t dim = wrap(op, dim0, self.dim());
  const IntList orig = self.sizes();
  if (self.dim() == 0) self = self.reshape({1});
  if (src.dim() == 0) src = src.reshape({1});
  MPX_CHECK(src.dim() == self.dim(), op, ": source ", ops::describe(src), " must have as many dims as self ",
            ops::describe(self));
  for (int64_t d = 0; d < self.dim(); ++d) {
    const int64_t want = d == dim ? index.numel() : self.size(d);
    MPX_CHECK(src.size(d) == want, op, ": source ", ops::describe(src), " must have size ", want, " in dim ", d,
              d == dim ? " (the number of indices)" : " (as self)", "; self is ", ops::describe(self));
  }
  const Tensor idx = checked_index(op, index, self, self.size(dim), dim_range(dim, self)).reshape({-1});
  return index_add_impl(self, dim, idx, src, alpha).reshape(orig);
}

Tensor gather(const Tensor& self0, int64_t dim0, const Tensor& index) {
  const char* op = "gather";
  check_defined(op, "self", self0);
  check_defined(op, "index", index);
  Tensor self = ops::autocast(OpId::gather, {self0})[0];
  const int64_t dim = wrap(op, dim0, self.dim());
  if (self.dim() == 0) {
    MPX_CHECK(index.numel() == 1 && index.dim() <= 1, op, ": a 0-d self takes a one-element index, got ",
              ops::describe(index));
    return gather(self.reshape({1}), dim, index.reshape({1})).reshape(index.sizes());
  }
  check_scatter_shapes(op, self, dim, index, nullptr);
  const Tensor idx = checked_index(op, index, self, self.size(dim), dim_range(dim, self));
  return gather_impl(self, dim, idx);
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_common("scatter", false, self, dim, index, src);
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, double value) {
  check_defined("scatter", "self", self);
  check_defined("scatter", "index", index);
  const double v = index_detail::representable("scatter", value, self.dtype());
  Tensor src;
  {
    NoGradGuard ng;
    // Only index's shape is read, so a broadcast 0-d tensor is enough.
    src = full({}, v, self.options()).expand(index.sizes());
  }
  return scatter_common("scatter", false, self, dim, index, src);
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_common("scatter_add", true, self, dim, index, src);
}

namespace {

Tensor tri(bool lower, const Tensor& self0, int64_t diagonal) {
  const char* op = lower ? "tril" : "triu";
  check_defined(op, "self", self0);
  Tensor x = ops::autocast(lower ? OpId::tril : OpId::triu, {self0})[0];
  MPX_CHECK(x.dim() >= 2, op, ": input must have at least 2 dims, got ", ops::describe(x));
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() > 0) {
    auto k = lower ? dispatch::kernel<OpId::tril>(x.device(), x.dtype()) : dispatch::kernel<OpId::triu>(x.device(), x.dtype());
    k(out, x.detach(), diagonal);
  }
  autograd::record(lower ? "TrilBackward" : "TriuBackward", {x}, {out},
                   [lower, diagonal](FunctionNode&, const tensor_list& g) -> tensor_list { return {tri(lower, g[0], diagonal)}; });
  return out;
}

}  // namespace

Tensor tril(const Tensor& self, int64_t diagonal) { return tri(true, self, diagonal); }
Tensor triu(const Tensor& self, int64_t diagonal) { return tri(false, self, diagonal); }

namespace {

// out = mask ? value : self over the broadcast of both; value_t (0-d, may be undefined) is the
// tensor value's graph input, whose gradient is the sum of g over the filled positions.
Tensor masked_fill_impl(const Tensor& self, const Tensor& mask, double value, const Tensor& value_t) {
  const char* op = "masked_fill";
  const IntList shape = broadcast_shapes(self.sizes(), mask.sizes(), op);
  Tensor out = empty(shape, self.options());
  if (out.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<OpId::masked_fill>(out.device(), out.dtype())(out, self.detach().expand(shape), mask.expand(shape),
                                                                   value);
  }
  const IntList self_shape = self.sizes();
  if (auto n = autograd::record("MaskedFillBackward", {self, value_t}, {out},
                                [self_shape](FunctionNode& node, const tensor_list& g) -> tensor_list {
                                  const Tensor mask = node.saved(0);
                                  Tensor gs, gv;
                                  if (node.next_edges[0].valid())
                                    gs = ops::reduce_grad(masked_fill_impl(g[0], mask, 0.0, Tensor()), self_shape, g[0].dtype());
                                  if (node.next_edges[1].valid()) {
                                    Tensor keep;
                                    {
                                      NoGradGuard ng;
                                      keep = eq(mask, 0.0);
                                    }
                                    gv = sum(masked_fill_impl(g[0], keep, 0.0, Tensor())).reshape({});
                                  }
                                  return {gs, gv};
                                }))
    n->save(mask);
  return out;
}

void check_mask(const char* op, const Tensor& self, const Tensor& mask, const char* what) {
  MPX_CHECK(mask.defined(), op, ": ", what, " is undefined");
  MPX_CHECK(mask.dtype() == kBool, op, ": ", what, " must be bool, got ", ops::describe(mask),
            "; make one with a comparison (e.g. mpx::gt(x, 0.0)) or .to(mpx::kBool)");
  MPX_CHECK(mask.device() == self.device(), op, ": ", what, " ", ops::describe(mask), " must be on the device of ",
            ops::describe(self));
}

// The dtype `t op scalar` computes in: t's, unless the scalar would lose its fraction in an
// integer (or bool) tensor, or a bool tensor meets a number other than 0/1 (PyTorch's rules).
DType scalar_result_type(const Tensor& t, double v) {
  if (is_floating(t.dtype())) return t.dtype();
  if (v != std::trunc(v) || !std::isfinite(v)) return kFloat32;
  if (t.dtype() == kBool && v != 0.0 && v != 1.0) return kInt64;
  return t.dtype();
}

}  // namespace

Tensor masked_fill(const Tensor& self0, const Tensor& mask, double value) {
  check_defined("masked_fill", "self", self0);
  Tensor self = ops::autocast(OpId::masked_fill, {self0})[0];
  check_mask("masked_fill", self, mask, "mask");
  return masked_fill_impl(self, mask, index_detail::representable("masked_fill", value, self.dtype()), Tensor());
}

Tensor masked_fill(const Tensor& self0, const Tensor& mask, const Tensor& value) {
  check_defined("masked_fill", "self", self0);
  check_defined("masked_fill", "value", value);
  Tensor self = ops::autocast(OpId::masked_fill, {self0})[0];
  check_mask("masked_fill", self, mask, "mask");
  MPX_CHECK(value.dim() == 0, "masked_fill: value must be a 0-d tensor, got ", ops::describe(value),
            "; use mpx::where(mask, value, self) for a tensor of values");
  const double v = index_detail::representable("masked_fill", value.item_double(), self.dtype());
  return masked_fill_impl(self, mask, v, value);
}

Tensor where(const Tensor& cond, const Tensor& a0, double b) {
  check_defined("where", "input", a0);
  const Tensor a = a0.to(scalar_result_type(a0, b));
  check_mask("where", a, cond, "condition");
  Tensor keep;
  {
    NoGradGuard ng;
    keep = eq(cond, 0.0);  // b goes where cond is false
  }
  return masked_fill_impl(a, keep, index_detail::representable("where", b, a.dtype(), true), Tensor());
}

Tensor where(const Tensor& cond, double a, const Tensor& b0) {
  check_defined("where", "other", b0);
  const Tensor b = b0.to(scalar_result_type(b0, a));
  check_mask("where", b, cond, "condition");
  return masked_fill_impl(b, cond, index_detail::representable("where", a, b.dtype(), true), Tensor());
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return mpx::index_select(*this, dim, index); }
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return mpx::topk(*this, k, dim, largest, sorted);
}
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const { return mpx::sort(*this, dim, descending); }
Tensor Tensor::argsort(int64_t dim, bool descending) const { return mpx::argsort(*this, dim, descending); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return mpx::gather(*this, dim, index); }
Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return mpx::masked_fill(*this, mask, value); }
Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value) const { return mpx::masked_fill(*this, mask, value); }

}  // namespace mpx
