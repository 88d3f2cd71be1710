// Reductions: move reduced dims last, reduce rows with the kernel, backward by broadcasting back.
#include "ops/reduction.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/logical.h"
#include "ops/op_utils.h"
#include "ops/shape.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

struct Plan {
  IntList dims;      // sorted, wrapped
  IntList kept;      // output shape with keepdim
  IntList out;       // output shape as requested
  int64_t rows = 1, cols = 1;
};

Plan plan(const Tensor& x, const IntList& dims0, bool keepdim) {
  Plan p;
  const int64_t nd = x.dim();
  if (dims0.empty()) for (int64_t d = 0; d < nd; ++d) p.dims.push_back(d);
  for (auto d : dims0) p.dims.push_back(wrap_dim(d, nd));
  std::sort(p.dims.begin(), p.dims.end());
  MPX_CHECK(std::adjacent_find(p.dims.begin(), p.dims.end()) == p.dims.end(), "reduction: dim listed twice in ",
            shape_str(dims0));
  for (int64_t d = 0; d < nd; ++d) {
    const bool red = std::binary_search(p.dims.begin(), p.dims.end(), d);
    p.kept.push_back(red ? 1 : x.size(d));
    if (red) p.cols *= x.size(d);
    else { p.rows *= x.size(d); p.out.push_back(x.size(d)); }
  }
  if (keepdim) p.out = p.kept;
  return p;
}

// [rows, cols] contiguous view of x with the reduced dims last.
Tensor as_rows(const Tensor& x, const Plan& p) {
  NoGradGuard ng;
  IntList perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!std::binary_search(p.dims.begin(), p.dims.end(), d)) perm.push_back(d);
  for (auto d : p.dims) perm.push_back(d);
  Tensor t = x.dim() ? x.permute(perm).contiguous() : x.contiguous();
  return t.view({p.rows, p.cols});
}

// Broadcasts a reduced gradient back to x's shape.
Tensor expand_back(const Tensor& g, const IntList& kept, const IntList& shape) { return g.reshape(kept).expand(shape); }

// On the CPU, a sum that keeps one run of adjacent dims of a contiguous tensor and reduces all
// the others (a bias gradient over N, H, W) goes to the kernel in place as [outer, rows, inner],
// where as_rows would copy the whole tensor to bring the rows first.
// A channels-last tensor's sum over N, H and W (a channels-last model's bias gradient) is the
// same in place: its memory is [N x H x W, C], column sums.
std::optional<Tensor> outer_inner_view(const Tensor& x, const Plan& p) {
  if (!x.device().is_cpu() || p.rows <= 1 || p.cols == 0) return std::nullopt;
  NoGradGuard ng;
  if (x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(MemoryFormat::ChannelsLast) && p.dims == IntList{0, 2, 3})
    return x.permute({0, 2, 3, 1}).view({p.cols, p.rows, 1});
  if (!x.is_contiguous()) return std::nullopt;
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!std::binary_search(p.dims.begin(), p.dims.end(), d)) {
      if (first < 0) first = d;
      else if (d != last + 1) return std::nullopt;
      last = d;
    }
  int64_t outer = 1;
  for (int64_t d = 0; d < first; ++d) outer *= x.size(d);
  if (outer == 1) return std::nullopt;  // the rows are first already: as_rows copies nothing
  return x.view({outer, p.rows, p.cols / outer});
}

Tensor reduce(OpId op, const Tensor& x0, const Plan& p, DType out_dt, double param) {
  const Tensor x = x0.dtype() == out_dt ? x0 : x0.to(out_dt);
  std::optional<Tensor> oi = op == OpId::sum && param != 2.0 ? outer_inner_view(x, p) : std::nullopt;
  Tensor rows = oi ? *oi : as_rows(x, p);
  Tensor out = empty({p.rows}, TensorOptions().dtype(out_dt).device(x.device()));
  if (p.cols == 0) {
    // A sum (of squares) of nothing is 0; a mean (sum with param 1) or variance of nothing is NaN, as in PyTorch.
    out.fill_(op == OpId::var || param == 1.0 ? NAN : 0.0);
  } else {
    dispatch::kernel<kernels::ReduceFn>(op, x.device(), out_dt)(out, rows, param);
  }
  return out.view(p.out);
}

}  // namespace

Tensor sum(const Tensor& x0, const IntList& dims, bool keepdim) {
  Tensor x = ops::autocast(OpId::sum, {x0})[0];
  const DType dt = is_floating(x.dtype()) ? x.dtype() : kInt64;
  Plan p = plan(x, dims, keepdim);
  Tensor out = reduce(OpId::sum, x, p, dt, 0.0);
  if (auto n = autograd::record("SumBackward", {x}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {expand_back(g[0], self.shapes[0], self.shapes[1]).to(static_cast<DType>(self.scalars[0]))};
      })) {
    n->shapes = {p.kept, x.sizes()};
    n->scalars = {static_cast<double>(static_cast<int>(x.dtype()))};
  }
  return out;
}
Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor mean(const Tensor& x0, const IntList& dims, bool keepdim) {
  Tensor x = ops::autocast(OpId::mean, {x0})[0];
  MPX_CHECK(is_floating(x.dtype()), "mean: input must be floating, got ", ops::describe(x),
            "; convert it with .to(mpx::kFloat32)");
  Plan p = plan(x, dims, keepdim);
  Tensor out = reduce(OpId::sum, x, p, x.dtype(), 1.0);
  if (auto n = autograd::record("MeanBackward", {x}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {expand_back(g[0] / self.scalars[0], self.shapes[0], self.shapes[1])};
      })) {
    n->shapes = {p.kept, x.sizes()};
    n->scalars = {static_cast<double>(std::max<int64_t>(p.cols, 1))};
  }
  return out;
}
Tensor mean(const Tensor& x) { return mean(x, {}, false); }

Tensor var(const Tensor& x0, const IntList& dims, bool unbiased, bool keepdim) {
  Tensor x = ops::autocast(OpId::var, {x0})[0];
  MPX_CHECK(is_floating(x.dtype()), "var: input must be floating, got ", ops::describe(x));
  Plan p = plan(x, dims, keepdim);
  const double corr = unbiased ? 1.0 : 0.0;
  Tensor out = reduce(OpId::var, x, p, x.dtype(), corr);
  if (auto n = autograd::record("VarBackward", {x}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor x = self.saved(0);
        const IntList& kept = self.shapes[0];
        IntList dims;
        for (int64_t d = 0; d < x.dim(); ++d)
          if (kept[d] == 1 && x.size(d) != 1) dims.push_back(d);
        Tensor m = mean(x, dims.empty() ? IntList{} : dims, true);
        const double denom = std::max(0.0, self.scalars[0] - self.scalars[1]);
        return {(x - m) * expand_back(g[0], kept, x.sizes()) * (2.0 / denom)};
      })) {
    n->save(x);
    n->shapes = {p.kept};
    n->scalars = {static_cast<double>(p.cols), corr};
  }
  return out;
}
Tensor std(const Tensor& x, const IntList& dims, bool unbiased, bool keepdim) { return sqrt(var(x, dims, unbiased, keepdim)); }
std::pair<Tensor, Tensor> var_mean(const Tensor& x0, const IntList& dims, bool unbiased, bool keepdim) {
  // One autocast decision for both, so the pair comes out in one dtype.
  const Tensor x = ops::autocast(OpId::var, {x0})[0];
  return {var(x, dims, unbiased, keepdim), mean(x, dims, keepdim)};
}
std::pair<Tensor, Tensor> std_mean(const Tensor& x, const IntList& dims, bool unbiased, bool keepdim) {
  auto [v, m] = var_mean(x, dims, unbiased, keepdim);
  return {sqrt(v), m};
}

std::pair<Tensor, Tensor> arg_reduce(OpId op, const Tensor& x, int64_t dim0, bool keepdim) {
  MPX_CHECK(x.numel() > 0, op_name(op), ": cannot reduce an empty tensor ", ops::describe(x));
  const int64_t dim = wrap_dim(dim0, x.dim());
  Plan p = plan(x, x.dim() ? IntList{dim} : IntList{}, keepdim);
  Tensor rows = as_rows(x, p);
  Tensor values = empty({p.rows}, x.options());
  Tensor idx = empty({p.rows}, TensorOptions().dtype(kInt64).device(x.device()));
  dispatch::kernel<kernels::ArgReduceFn>(op, x.device(), x.dtype())(values, idx, rows);
  values = values.view(p.out);
  idx = idx.view(p.out);
  if (auto n = autograd::record(op == OpId::max_dim ? "MaxBackward" : "MinBackward", {x}, {values, idx},
                                [dim](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  Tensor ix = self.saved(0);
                                  const IntList& kept = self.shapes[0];
                                  const IntList& shape = self.shapes[1];
                                  IntList ar(shape.size(), 1);
                                  if (!shape.empty()) ar[dim] = shape[dim];
                                  Tensor pos = arange(static_cast<double>(shape.empty() ? 1 : shape[dim]),
                                                      TensorOptions(kInt64).device(ix.device())).view(ar);
                                  Tensor mask = eq(pos, ix.reshape(kept));
                                  return {where(mask, g[0].reshape(kept), zeros({}, g[0].options()))};
                                })) {
    n->save(idx);
    n->shapes = {p.kept, x.sizes()};
  }
  return {values, idx};
}
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) { return arg_reduce(OpId::max_dim, x, dim, keepdim); }
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) { return arg_reduce(OpId::min_dim, x, dim, keepdim); }
// argmax / argmin: their rows' autocast stage, then max_dim / min_dim's kernel (which gives the indices too).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard ng;
  return arg_reduce(OpId::max_dim, ops::autocast(OpId::argmax, {x})[0], dim, keepdim).second;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard ng;
  return arg_reduce(OpId::min_dim, ops::autocast(OpId::argmin, {x})[0], dim, keepdim).second;
}

namespace {
// amax/amin over several dims: reduce rows, gradient shared evenly among tied maxima.
Tensor extreme(OpId op, const Tensor& x, const IntList& dims, bool keepdim) {
  MPX_CHECK(x.numel() > 0, op_name(op), ": cannot reduce an empty tensor ", ops::describe(x));
  Plan p = plan(x, dims, keepdim);
  Tensor rows = as_rows(x, p);
  Tensor values = empty({p.rows}, x.options());
  Tensor idx = empty({p.rows}, TensorOptions().dtype(kInt64).device(x.device()));
  dispatch::kernel<kernels::ArgReduceFn>(op == OpId::amax ? OpId::max_dim : OpId::min_dim, x.device(), x.dtype())(values, idx, rows);
  values = values.view(p.out);
  if (auto n = autograd::record(op == OpId::amax ? "AmaxBackward" : "AminBackward", {x}, {values},
                                [](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  Tensor x = self.saved(0), v = self.saved(1);
                                  const IntList& kept = self.shapes[0];
                                  Tensor mask = eq(x, v.reshape(kept)).to(g[0].dtype());
                                  IntList dims;
                                  for (int64_t d = 0; d < x.dim(); ++d)
                                    if (kept[d] == 1 && x.size(d) != 1) dims.push_back(d);
                                  Tensor count = dims.empty() ? mask : sum(mask, dims, true);
                                  return {mask * (g[0].reshape(kept) / count)};
                                })) {
    n->save(x);
    n->save(values, true);
    n->shapes = {p.kept};
  }
  return values;
}
}  // namespace
Tensor amax(const Tensor& x, const IntList& dims, bool keepdim) { return extreme(OpId::amax, x, dims, keepdim); }
Tensor amin(const Tensor& x, const IntList& dims, bool keepdim) { return extreme(OpId::amin, x, dims, keepdim); }
Tensor max(const Tensor& x) { return amax(x, {}, false); }
Tensor min(const Tensor& x) { return amin(x, {}, false); }

namespace {
// The 2-norm over dims of floating x from the fused sum of squares (accumulated in f32 at least),
// in x's dtype; the gradient is g * x / norm, 0 where the norm is 0 (PyTorch's subgradient).
Tensor l2_norm(const Tensor& x, const IntList& dims, bool keepdim) {
  Plan p = plan(x, dims, keepdim);
  const DType acc = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor out;
  {
    NoGradGuard ng;
    out = sqrt(reduce(OpId::sum, x, p, acc, 2.0)).to(x.dtype());
  }
  if (auto n = autograd::record("NormBackward", {x}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        const Tensor x = self.saved(0), nrm = self.saved(1);
        const IntList& kept = self.shapes[0];
        const Tensor scale = where(nrm == 0.0, zeros_like(nrm), g[0] / nrm);
        return {x * expand_back(scale, kept, x.sizes())};
      })) {
    n->save(x);
    n->save(out, true);
    n->shapes = {p.kept};
  }
  return out;
}
}  // namespace

Tensor norm(const Tensor& x0) {
  Tensor x = ops::autocast(OpId::norm, {x0})[0];
  if (!is_floating(x.dtype())) return sqrt(sum(x * x));
  return l2_norm(x, {}, false);
}

Tensor Tensor::sum() const { return mpx::sum(*this); }
Tensor Tensor::sum(const IntList& dims, bool keepdim) const { return mpx::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return mpx::mean(*this); }
Tensor Tensor::mean(const IntList& dims, bool keepdim) const { return mpx::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return mpx::max(*this); }
Tensor Tensor::min() const { return mpx::min(*this); }
std::pair<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return mpx::max(*this, dim, keepdim); }
std::pair<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return mpx::min(*this, dim, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return mpx::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return mpx::argmin(*this, dim, keepdim); }
Tensor Tensor::var(const IntList& dims, bool unbiased, bool keepdim) const { return mpx::var(*this, dims, unbiased, keepdim); }
Tensor Tensor::var_all(bool unbiased) const { return mpx::var(*this, {}, unbiased); }
Tensor Tensor::std(const IntList& dims, bool unbiased, bool keepdim) const { return mpx::std(*this, dims, unbiased, keepdim); }
Tensor Tensor::std_all(bool unbiased) const { return mpx::std(*this, {}, unbiased); }
Tensor Tensor::norm(double p) const { return p == 2.0 ? mpx::norm(*this) : vector_norm(*this, p, {}); }
Tensor Tensor::norm(double p, const IntList& dims, bool keepdim) const { return vector_norm(*this, p, dims, keepdim); }
Tensor Tensor::cumsum(int64_t dim) const { return mpx::cumsum(*this, dim); }
Tensor Tensor::cumprod(int64_t dim) const { return mpx::cumprod(*this, dim); }
Tensor Tensor::prod() const { return mpx::prod(*this); }
Tensor Tensor::prod(int64_t dim, bool keepdim) const { return mpx::prod(*this, dim, keepdim); }
Tensor Tensor::logsumexp(const IntList& dims, bool keepdim) const { return mpx::logsumexp(*this, dims, keepdim); }

namespace {
// The ScanFn kernel of `op` (cumsum or cumprod) over x along dim, forward or reversed (no autograd).
Tensor scan_kernel(OpId op, const Tensor& x, int64_t dim, bool reverse) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) outer *= x.size(d);
    if (d > dim) inner *= x.size(d);
  }
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  const Tensor in = x.contiguous();
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<kernels::ScanFn>(op, x.device(), x.dtype())(out.view({outer, n, inner}), in.view({outer, n, inner}),
                                                                 reverse);
  }
  return out;
}

// The running sum of x (already in its output dtype) along dim, forward or reversed, as one node whose backward is
// the other direction's sum of the gradient.
Tensor scan(const Tensor& x, int64_t dim, bool reverse) {
  Tensor out = scan_kernel(OpId::cumsum, x, dim, reverse);
  autograd::record(reverse ? "CumsumReverseBackward" : "CumsumBackward", {x}, {out},
                   [dim, reverse](FunctionNode&, const tensor_list& g) -> tensor_list { return {scan(g[0], dim, !reverse)}; });
  return out;
}

// x and its integer and bool inputs in i64, after autocast, and dim wrapped.
Tensor scan_input(OpId op, const Tensor& x0, int64_t& dim) {
  MPX_CHECK(x0.defined(), op_name(op), ": input is undefined");
  Tensor x = ops::autocast(op, {x0})[0];
  dim = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op == OpId::cumsum ? "cumsum: dim" : "cumprod: dim");
  return is_floating(x.dtype()) ? x : x.to(kInt64);
}

// The same gradient as cumprod_backward below, differentiable also where x has zeros (for create_graph), in O(n^2)
// per lane: grad_k = (the product of x before k) * sum over j >= k of g_j * (the product of x over (k, j]).
Tensor cumprod_backward_dense(const Tensor& g, const Tensor& x, int64_t dim) {
  const Tensor xl = x.movedim(dim, -1).unsqueeze(-2), gl = g.movedim(dim, -1).unsqueeze(-2);  // [..., 1, n]
  const int64_t n = xl.size(-1);
  const Tensor i = arange(n, TensorOptions(kInt64).device(x.device()));
  const Tensor col = i.unsqueeze(0), row = i.unsqueeze(1);  // [1, n] over j (or i), [n, 1] over k
  const Tensor one = ones({}, x.options()), zero = zeros({}, x.options());
  const Tensor span = cumprod(where(gt(col, row), xl, one), -1);        // [..., k, j]: the product over (k, j]
  const Tensor tail = sum(where(ge(col, row), gl * span, zero), {-1});  // [..., k]
  const Tensor head = prod(where(lt(col, row), xl, one), -1);           // [..., k]: the product before k
  return (head * tail).movedim(-1, dim);
}

// d/dx of sum(g * cumprod(x)) along dim, in differentiable ops. Before a lane's first zero, the running sums of g y
// from the end divided by x; at the first zero, the same sums of g times the running product with that zero taken
// as 1; after it, zero (every product there holds the first zero and the element itself). That is exact but, after
// a zero, not differentiable in x: a backward that records (create_graph) with zeros in x takes the dense form.
Tensor cumprod_backward(const Tensor& g, const Tensor& x, const Tensor& y, int64_t dim) {
  if (GradMode::is_enabled() && x.dim() > 0) {
    bool has_zero;
    {
      NoGradGuard ng;
      has_zero = any(eq(x, 0.0)).item<bool>();
    }
    if (has_zero) return cumprod_backward_dense(g, x, dim);
  }
  const Tensor zero = eq(x, 0.0);
  const Tensor zeros_so_far = cumsum(zero, dim);
  const Tensor before = eq(zeros_so_far, 0.0), first = logical_and(zero, eq(zeros_so_far, 1.0));
  const Tensor one = ones({}, x.options());
  const Tensor plain = scan(g * y, dim, true) / where(before, x, one);
  const Tensor at_first = scan(g * cumprod(where(first, one, x), dim), dim, true);
  return where(before, plain, where(first, at_first, zeros({}, x.options())));
}
}  // namespace

Tensor cumsum(const Tensor& x0, int64_t dim) {
  const Tensor x = scan_input(OpId::cumsum, x0, dim);
  return scan(x, dim, false);
}

Tensor cumprod(const Tensor& x0, int64_t dim) {
  const Tensor x = scan_input(OpId::cumprod, x0, dim);
  Tensor y = scan_kernel(OpId::cumprod, x, dim, false);
  if (auto n = autograd::record("CumprodBackward", {x}, {y}, [dim](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {cumprod_backward(g[0], self.saved(0), self.saved(1), dim)};
      })) {
    n->save(x);
    n->save(y, true);
  }
  return y;
}

Tensor prod(const Tensor& x) {
  MPX_CHECK(x.defined(), "prod: input is undefined");
  return prod(x.reshape({-1}), 0);
}

Tensor prod(const Tensor& x, int64_t dim, bool keepdim) {
  MPX_CHECK(x.defined(), "prod: input is undefined");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "prod: dim");
  if (x.dim() == 0) return cumprod(x, 0);
  Tensor r;
  if (x.size(d) == 0) {
    IntList shape = x.sizes();
    shape.erase(shape.begin() + d);
    r = ones(shape, x.options().dtype(is_floating(x.dtype()) ? x.dtype() : kInt64));
  } else {
    r = cumprod(x, d).select(d, -1);
  }
  return keepdim ? r.unsqueeze(d) : r;
}

Tensor logsumexp(const Tensor& x0, const IntList& dims, bool keepdim) {
  MPX_CHECK(x0.defined(), "logsumexp: input is undefined");
  Tensor x = ops::autocast(OpId::logsumexp, {x0})[0];
  if (!is_floating(x.dtype())) x = x.to(kFloat32);
  // The shift: each slice's max, 0 where that is infinite (then exp gives 0 or inf and the log -inf or inf).
  Tensor m;
  {
    NoGradGuard ng;
    m = amax(x, dims, true);
    m = masked_fill(m, eq(abs(m), std::numeric_limits<double>::infinity()), 0.0);
  }
  const Tensor r = log(sum(exp(x - m), dims, true)) + m;
  return keepdim ? r : r.reshape(plan(x, dims, false).out);
}

Tensor vector_norm(const Tensor& x0, double ord, const IntList& dims, bool keepdim) {
  MPX_CHECK(x0.defined() && is_floating(x0.dtype()), "vector_norm: input must be floating, got ",
            ops::describe(x0));
  MPX_CHECK(ord >= 1.0, "vector_norm: ord must be at least 1 (or inf), got ", ord);
  const Tensor x = ops::autocast(OpId::vector_norm, {x0})[0];
  if (ord == 2.0) return l2_norm(x, dims, keepdim);
  if (std::isinf(ord)) return amax(abs(x), dims, keepdim);
  if (ord == 1.0) return sum(abs(x), dims, keepdim);
  return pow(sum(pow(abs(x), ord), dims, keepdim), 1.0 / ord);
}

Tensor cosine_similarity(const Tensor& a0, const Tensor& b0, int64_t dim0, double eps) {
  for (const Tensor* t : {&a0, &b0})
    MPX_CHECK(t->defined() && is_floating(t->dtype()), "cosine_similarity: inputs must be floating, got ",
              ops::describe(*t));
  const tensor_list in = ops::autocast(OpId::cosine_similarity, {a0, b0});
  const int64_t nd = std::max<int64_t>(std::max(in[0].dim(), in[1].dim()), 1);
  const int64_t dim = wrap_dim(dim0, nd, "cosine_similarity: dim");
  // Broadcast first, so a norm runs along the dim of the common shape.
  const IntList shape = broadcast_shapes(in[0].sizes(), in[1].sizes(), "cosine_similarity");
  const Tensor a = in[0].expand(shape), b = in[1].expand(shape);
  return sum((a / clamp_min(vector_norm(a, 2.0, {dim}, true), eps)) * (b / clamp_min(vector_norm(b, 2.0, {dim}, true), eps)),
             {dim});
}

}  // namespace mpx
