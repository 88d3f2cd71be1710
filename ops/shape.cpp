// Views (sharing storage, recorded by autograd), cat/stack, unbind, flip/roll/repeat/repeat_interleave, sum_to and slice gradients.
#include "ops/shape.h"

#include <cstring>
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

Tensor make_view(const Tensor& x, IntList sizes, IntList strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.impl()->storage;
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = x.dtype();
  impl->view = TensorImpl::View::view;
  impl->view_rebases = impl->storage->rebases.load();
  return Tensor(std::move(impl));
}

// Records a view whose backward reshapes the gradient back to the input's shape.
Tensor reshape_view(const Tensor& x, const IntList& shape, const IntList& strides, const char* node) {
  Tensor out = make_view(x, shape, strides, x.storage_offset());
  if (auto n = autograd::record(node, {x}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {g[0].reshape(self.shapes[0])};
      }))
    n->shapes = {x.sizes()};
  return out;
}

// dim wrapped for an op that picks positions along it, which a 0-dim tensor has none of (PyTorch refuses these too).
int64_t positional_dim(const char* op, const Tensor& t, int64_t d) {
  MPX_CHECK(t.defined(), op, ": the tensor is undefined");
  MPX_CHECK(t.dim() > 0, op, ": cannot be applied to a 0-dim tensor (", ops::describe(t),
            "); give it a dimension first, e.g. t.reshape({1})");
  return wrap_dim(d, t.dim());
}

IntList infer_shape(const IntList& shape, int64_t numel, const char* op) {
  IntList r = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] == -1) {
      MPX_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      MPX_CHECK(r[i] >= 0, op, ": invalid size in ", shape_str(shape));
      known *= r[i];
    }
  }
  if (infer >= 0) {
    MPX_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for input of size ", numel);
    r[infer] = numel / known;
  }
  MPX_CHECK(numel_of(r) == numel, op, ": shape ", shape_str(shape), " is invalid for input of size ", numel);
  return r;
}

// Strides for viewing x as `shape` without a copy, if its layout allows (PyTorch's rule).
bool view_strides(const Tensor& x, const IntList& shape, IntList* out) {
  if (x.is_contiguous()) { *out = contiguous_strides(shape); return true; }
  const IntList& os = x.sizes();
  const IntList& ost = x.strides();
  IntList st(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = ost.empty() ? 1 : ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return false;
  *out = st;
  return true;
}
}  // namespace

Tensor Tensor::view(const IntList& shape0) const {
  IntList shape = infer_shape(shape0, numel(), "view");
  IntList st;
  MPX_CHECK(view_strides(*this, shape, &st), "view: shape ", shape_str(shape), " is incompatible with the strides of ",
            ops::describe(*this), " (a transposed or sliced tensor); use reshape(), which copies when needed");
  return reshape_view(*this, shape, st, "ViewBackward");
}
Tensor Tensor::reshape(const IntList& shape0) const {
  IntList shape = infer_shape(shape0, numel(), "reshape");
  IntList st;
  if (view_strides(*this, shape, &st)) return reshape_view(*this, shape, st, "ViewBackward");
  return contiguous().view(shape);
}
Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten start");
  end = wrap_dim(end, dim(), "flatten end");
  MPX_CHECK(start <= end, "flatten: start dim ", start, " is after end dim ", end);
  IntList s(sizes().begin(), sizes().begin() + start);
  int64_t m = 1;
  for (int64_t d = start; d <= end; ++d) m *= size(d);
  s.push_back(m);
  s.insert(s.end(), sizes().begin() + end + 1, sizes().end());
  return reshape(s);
}
Tensor Tensor::unflatten(int64_t d, const IntList& sz) const {
  d = positional_dim("unflatten", *this, d);
  IntList s(sizes().begin(), sizes().begin() + d);
  s.insert(s.end(), sz.begin(), sz.end());
  s.insert(s.end(), sizes().begin() + d + 1, sizes().end());
  return reshape(s);
}
Tensor Tensor::squeeze() const {
  IntList s, st;
  for (int64_t d = 0; d < dim(); ++d)
    if (size(d) != 1) { s.push_back(size(d)); st.push_back(stride(d)); }
  return reshape_view(*this, s, st, "SqueezeBackward");
}
Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim());
  if (size(d) != 1) return *this;
  IntList s = sizes(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return reshape_view(*this, s, st, "SqueezeBackward");
}
Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1);
  IntList s = sizes(), st = strides();
  const int64_t stv = d < dim() ? stride(d) * size(d) : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stv);
  return reshape_view(*this, s, st, "UnsqueezeBackward");
}
Tensor Tensor::permute(const IntList& dims) const {
  MPX_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: got ", dims.size(), " dims for ", ops::describe(*this));
  IntList s(dim()), st(dim()), inv(dim(), -1);
  for (int64_t i = 0; i < dim(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim());
    MPX_CHECK(inv[d] < 0, "permute: dim ", d, " repeated in ", shape_str(dims));
    inv[d] = i;
    s[i] = size(d);
    st[i] = stride(d);
  }
  Tensor out = make_view(*this, s, st, storage_offset());
  if (auto n = autograd::record("PermuteBackward", {*this}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {g[0].permute(self.shapes[0])};
      }))
    n->shapes = {inv};
  return out;
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() < 2 && d0 == 0 && d1 == 1 && dim() <= 1) return *this;
  d0 = wrap_dim(d0, dim());
  d1 = wrap_dim(d1, dim());
  if (dim() == 0) return *this;  // dims 0 and -1 name the scalar itself, as in PyTorch
  IntList p(dim());
  for (int64_t i = 0; i < dim(); ++i) p[i] = i;
  std::swap(p[d0], p[d1]);
  return permute(p);
}
Tensor Tensor::expand(const IntList& shape) const {
  MPX_CHECK(shape.size() >= sizes().size(), "expand: target ", shape_str(shape), " has fewer dims than ", ops::describe(*this));
  const size_t lead = shape.size() - sizes().size();
  IntList s(shape.size()), st(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) { MPX_CHECK(shape[i] >= 0, "expand: bad size in ", shape_str(shape)); s[i] = shape[i]; st[i] = 0; continue; }
    const int64_t cur = sizes()[i - lead];
    const int64_t want = shape[i] == -1 ? cur : shape[i];
    MPX_CHECK(cur == want || cur == 1, "expand: cannot expand ", shape_str(sizes()), " to ", shape_str(shape),
              " (dimension ", i, " has size ", cur, ", only size-1 dims expand)");
    s[i] = want;
    st[i] = cur == want ? strides()[i - lead] : 0;
  }
  if (s == sizes()) return *this;
  Tensor out = make_view(*this, s, st, storage_offset());
  if (auto n = autograd::record("ExpandBackward", {*this}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {sum_to(g[0], self.shapes[0])};
      }))
    n->shapes = {sizes()};
  return out;
}
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = positional_dim("slice", *this, d);
  MPX_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  IntList s = sizes(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_view(*this, s, st, storage_offset() + start * stride(d));
  if (auto node = autograd::record("SliceBackward", {*this}, {out}, [d, start, step](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {slice_backward(g[0], self.shapes[0], d, start, step)};
      }))
    node->shapes = {sizes()};
  return out;
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = positional_dim("narrow", *this, d);
  if (start < 0) start += size(d);
  MPX_CHECK(start >= 0 && length >= 0 && start + length <= size(d), "narrow: range [", start, ", ", start + length,
            ") is out of bounds for dim ", d, " of ", ops::describe(*this));
  return slice(d, start, start + length);
}
Tensor Tensor::select(int64_t d, int64_t index) const {
  d = positional_dim("select", *this, d);
  const int64_t n = size(d);
  MPX_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of ", ops::describe(*this));
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::movedim(const IntList& source, const IntList& destination) const {
  MPX_CHECK(source.size() == destination.size(), "movedim: ", source.size(), " source dims but ", destination.size(),
            " destinations");
  const int64_t n = dim();
  IntList perm(static_cast<size_t>(n), -1);
  std::vector<bool> moved(static_cast<size_t>(n), false);
  for (size_t i = 0; i < source.size(); ++i) {
    const int64_t s = wrap_dim(source[i], n, "movedim source"), d = wrap_dim(destination[i], n, "movedim destination");
    if (n == 0) continue;  // a 0-dim tensor: dims 0 and -1 name the scalar itself, as in PyTorch
    MPX_CHECK(!moved[static_cast<size_t>(s)] && perm[static_cast<size_t>(d)] < 0, "movedim: dim ", source[i], " or ",
              destination[i], " appears twice");
    perm[static_cast<size_t>(d)] = s;
    moved[static_cast<size_t>(s)] = true;
  }
  if (n == 0) return *this;
  size_t next = 0;
  for (int64_t& p : perm) {
    if (p >= 0) continue;
    while (moved[next]) ++next;
    p = static_cast<int64_t>(next++);
  }
  return permute(perm);
}

Tensor Tensor::diagonal(int64_t offset, int64_t d1, int64_t d2) const {
  MPX_CHECK(defined() && dim() >= 2, "diagonal: needs a tensor of at least 2 dims, got ",
            ops::describe(*this));
  d1 = wrap_dim(d1, dim(), "diagonal dim1");
  d2 = wrap_dim(d2, dim(), "diagonal dim2");
  MPX_CHECK(d1 != d2, "diagonal: dim1 and dim2 must differ, got ", d1, " twice");
  IntList s, st;
  for (int64_t k = 0; k < dim(); ++k)
    if (k != d1 && k != d2) {
      s.push_back(size(k));
      st.push_back(stride(k));
    }
  const int64_t len = std::max<int64_t>(0, offset >= 0 ? std::min(size(d1), size(d2) - offset)
                                                       : std::min(size(d1) + offset, size(d2)));
  const int64_t start = len == 0 ? 0 : offset >= 0 ? offset * stride(d2) : -offset * stride(d1);
  s.push_back(len);
  st.push_back(stride(d1) + stride(d2));
  Tensor out = make_view(*this, s, st, storage_offset() + start);
  if (auto n = autograd::record("DiagonalBackward", {*this}, {out}, [offset, d1, d2](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {diagonal_backward(g[0], self.shapes[0], offset, d1, d2)};
      }))
    n->shapes = {sizes()};
  return out;
}

Tensor diagonal_backward(const Tensor& g, const IntList& shape, int64_t offset, int64_t d1, int64_t d2) {
  Tensor out = zeros(shape, g.options());
  {
    NoGradGuard ng;
    out.diagonal(offset, d1, d2).copy_(g);
  }
  autograd::record("DiagonalBackwardBackward", {g}, {out}, [offset, d1, d2](FunctionNode&, const tensor_list& gg) -> tensor_list {
    return {gg[0].diagonal(offset, d1, d2)};
  });
  return out;
}

Tensor diag(const Tensor& t, int64_t offset) {
  MPX_CHECK(t.defined() && (t.dim() == 1 || t.dim() == 2), "diag: expected a 1-d or 2-d tensor, got ",
            ops::describe(t));
  if (t.dim() == 2) return t.diagonal(offset).clone();
  const int64_t n = t.size(0) + (offset < 0 ? -offset : offset);
  return diagonal_backward(t, {n, n}, offset, 0, 1);
}

Tensor slice_backward(const Tensor& g, const IntList& shape, int64_t d, int64_t start, int64_t step) {
  Tensor out = zeros(shape, g.options());
  {
    NoGradGuard ng;
    Tensor region = out.slice(d, start, start + (g.size(d) - 1) * step + 1, step);
    region.copy_(g);
  }
  if (auto n = autograd::record("SliceBackwardBackward", {g}, {out}, [d, start, step](FunctionNode& self, const tensor_list& gg) -> tensor_list {
        return {gg[0].slice(d, start, start + (self.shapes[0][d] - 1) * step + 1, step)};
      }))
    n->shapes = {g.sizes()};
  return out;
}

Tensor sum_to(const Tensor& t, const IntList& shape) {
  if (t.sizes() == shape) return t;
  const int64_t lead = t.dim() - static_cast<int64_t>(shape.size());
  MPX_CHECK(lead >= 0, "sum_to: cannot sum ", shape_str(t.sizes()), " to the larger shape ", shape_str(shape));
  IntList dims;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && t.size(d) != 1)) dims.push_back(d);
  Tensor r = dims.empty() ? t : sum(t, dims, true);
  return r.reshape(shape);
}

Tensor cat(const tensor_list& ts0, int64_t dim) {
  MPX_CHECK(!ts0.empty(), "cat: expected a non-empty list of tensors");
  tensor_list ts = ops::autocast(OpId::cat, ts0);
  const DType dt = ops::result_type(ts);
  const Device dev = ops::common_device("cat", ts);
  const Tensor& ref = ts[0];
  for (size_t i = 0; i < ts.size(); ++i)
    MPX_CHECK(ts[i].dim() > 0, "cat: tensor ", i, " is 0-dim (", ops::describe(ts[i]),
              ") and cannot be concatenated; stack() the scalars instead, or reshape them to [1]");
  dim = wrap_dim(dim, ref.dim());
  IntList shape = ref.sizes();
  shape[dim] = 0;
  IntList lens;
  for (const auto& t : ts) {
    MPX_CHECK(t.dim() == ref.dim(), "cat: tensors must have the same number of dims, got ", shape_str(ref.sizes()),
              " and ", shape_str(t.sizes()));
    for (int64_t d = 0; d < t.dim(); ++d)
      MPX_CHECK(d == dim || t.size(d) == ref.size(d), "cat: sizes must match except in dim ", dim, ", got ",
                shape_str(ref.sizes()), " and ", shape_str(t.sizes()));
    shape[dim] += t.size(dim);
    lens.push_back(t.size(dim));
  }
  Tensor out = empty(shape, TensorOptions().dtype(dt).device(dev));
  {
    NoGradGuard ng;
    int64_t off = 0;
    for (const auto& t : ts) {
      if (t.size(dim)) out.narrow(dim, off, t.size(dim)).copy_(t);
      off += t.size(dim);
    }
  }
  if (auto n = autograd::record("CatBackward", ts, {out}, [dim, lens](FunctionNode& self, const tensor_list& g) -> tensor_list {
        tensor_list r;
        int64_t off = 0;
        for (size_t i = 0; i < lens.size(); ++i) {
          r.push_back(g[0].narrow(dim, off, lens[i]).to(static_cast<DType>(self.shapes[0][i])));
          off += lens[i];
        }
        return r;
      })) {
    IntList dts;
    for (const auto& t : ts) dts.push_back(static_cast<int64_t>(t.dtype()));
    n->shapes = {dts};
  }
  return out;
}
Tensor stack(const tensor_list& ts0, int64_t dim) {
  MPX_CHECK(!ts0.empty(), "stack: expected a non-empty list of tensors");
  const tensor_list ts = ops::autocast(OpId::stack, ts0);
  dim = wrap_dim(dim, ts[0].dim() + 1);
  tensor_list u;
  for (const auto& t : ts) {
    MPX_CHECK(t.sizes() == ts[0].sizes(), "stack: all tensors must have one shape, got ", shape_str(ts[0].sizes()),
              " and ", shape_str(t.sizes()));
    u.push_back(t.unsqueeze(dim));
  }
  return cat(u, dim);
}
// The pieces' gradients as one tensor of `sizes`, without a copy, when they already lie side by
// side along dim in one dense buffer, as the pieces lay in their input (the fused attention
// backward writes q, k and v's gradients so); undefined otherwise. Not under create_graph: the
// result would need a history.
namespace {
Tensor side_by_side(const tensor_list& g, int64_t dim, const IntList& sizes) {
  if (GradMode::is_enabled() || g.empty() || !g[0].defined()) return {};
  const Tensor& g0 = g[0];
  int64_t offset = g0.storage_offset(), along = 0;
  for (const auto& p : g) {
    if (!p.defined() || p.impl()->storage != g0.impl()->storage || p.dtype() != g0.dtype() ||
        p.strides() != g0.strides() || p.dim() != g0.dim() || p.storage_offset() != offset)
      return {};
    for (int64_t d = 0; d < p.dim(); ++d)
      if (d != dim && p.size(d) != sizes[static_cast<size_t>(d)]) return {};
    offset += p.size(dim) * p.stride(dim);
    along += p.size(dim);
  }
  if (along != sizes[static_cast<size_t>(dim)]) return {};
  Tensor whole = make_view(g0, sizes, g0.strides(), g0.storage_offset());
  return whole.is_contiguous() ? whole : Tensor();
}
}  // namespace

tensor_list split(const Tensor& t, int64_t size, int64_t dim) {
  MPX_CHECK(size > 0, "split: size must be positive");
  dim = positional_dim("split", t, dim);
  tensor_list r;
  {
    // One backward node for all the pieces (PyTorch's split_backward): their gradients are
    // concatenated into one buffer, where a narrow per piece would zero-fill a whole input-sized
    // gradient for each and add them up (3 fills, 3 copies and 2 adds for a q/k/v split).
    NoGradGuard ng;
    for (int64_t s = 0; s < t.size(dim); s += size) r.push_back(t.narrow(dim, s, std::min(size, t.size(dim) - s)));
  }
  autograd::record("SplitBackward", {t}, r, [dim, sizes = t.sizes()](FunctionNode&, const tensor_list& g) -> tensor_list {
    if (Tensor whole = side_by_side(g, dim, sizes); whole.defined()) return {whole};
    return {cat(g, dim)};
  });
  return r;
}
tensor_list chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  MPX_CHECK(chunks > 0, "chunk: chunks must be positive");
  const int64_t n = t.size(positional_dim("chunk", t, dim));
  return split(t, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}
Tensor one_hot(const Tensor& idx, int64_t num_classes) {
  MPX_CHECK(idx.defined() && idx.dtype() == kInt64, "one_hot: indices must be i64, got ", ops::describe(idx));
  MPX_CHECK(num_classes >= 0 || num_classes == -1, "one_hot: num_classes must be positive, or -1 to take the largest "
            "index + 1, got ", num_classes);
  if (idx.numel() > 0) {
    const int64_t lo = idx.min().item<int64_t>(), hi = idx.max().item<int64_t>();
    MPX_CHECK(lo >= 0, "one_hot: class values must be non-negative, got ", lo);
    if (num_classes == -1) num_classes = hi + 1;
    MPX_CHECK(hi < num_classes, "one_hot: class value ", hi, " is not below num_classes (", num_classes,
              "); raise num_classes or pass -1 to take it from the indices");
  } else {
    MPX_CHECK(num_classes != -1, "one_hot: cannot infer the number of classes from an empty tensor; pass num_classes");
  }
  IntList shape = idx.sizes();
  shape.push_back(1);
  IntList ar(shape.size(), 1);
  ar.back() = num_classes;
  Tensor pos = arange(static_cast<double>(num_classes), TensorOptions(kInt64).device(idx.device())).view(ar);
  return eq(idx.reshape(shape), pos).to(kInt64);
}

Tensor flip(const Tensor& t, const IntList& dims) {
  MPX_CHECK(t.defined(), "flip: input is undefined");
  Tensor r = t;
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(t.dim(), 1)), false);
  for (int64_t d0 : dims) {
    const int64_t d = wrap_dim(d0, std::max<int64_t>(t.dim(), 1), "flip: dim");
    MPX_CHECK(!seen[static_cast<size_t>(d)], "flip: dim ", d0, " listed twice in ", shape_str(dims));
    seen[static_cast<size_t>(d)] = true;
    if (t.dim() == 0 || t.size(d) <= 1) continue;
    const int64_t n = t.size(d);
    const Tensor back = arange(static_cast<double>(n - 1), -1.0, -1.0, TensorOptions(kInt64).device(t.device()));
    r = index_select(r, d, back);
  }
  return r.is_same(t) ? t.clone() : r;
}

Tensor repeat(const Tensor& t, const IntList& repeats) {
  MPX_CHECK(t.defined(), "repeat: input is undefined");
  MPX_CHECK(static_cast<int64_t>(repeats.size()) >= t.dim(), "repeat: ", repeats.size(), " repeats for ",
            ops::describe(t), "; give at least one per dim (", t.dim(), ")");
  for (int64_t r : repeats) MPX_CHECK(r >= 0, "repeat: repeats must be non-negative, got ", shape_str(repeats));
  // Leading ones for the added dims, then each dim d as [r_d, size_d] broadcast and merged: x[i] of tile k at
  // position k * size_d + i, PyTorch's order.
  const int64_t lead = static_cast<int64_t>(repeats.size()) - t.dim();
  IntList padded(static_cast<size_t>(lead), 1), split, target, out;
  for (int64_t s : t.sizes()) padded.push_back(s);
  for (size_t d = 0; d < repeats.size(); ++d) {
    split.insert(split.end(), {1, padded[d]});
    target.insert(target.end(), {repeats[d], padded[d]});
    out.push_back(repeats[d] * padded[d]);
  }
  return t.reshape(split).expand(target).reshape(out);
}

tensor_list unbind(const Tensor& t, int64_t dim0) {
  MPX_CHECK(t.defined() && t.dim() > 0, "unbind: needs a tensor with at least one dim, got ",
            ops::describe(t));
  const int64_t dim = wrap_dim(dim0, t.dim(), "unbind: dim");
  tensor_list r;
  for (int64_t i = 0; i < t.size(dim); ++i) r.push_back(t.select(dim, i));
  return r;
}

Tensor roll(const Tensor& t, const IntList& shifts, const IntList& dims) {
  MPX_CHECK(t.defined(), "roll: input is undefined");
  if (dims.empty()) {
    MPX_CHECK(shifts.size() == 1, "roll: without dims give one shift (for the flattened tensor), got ", shape_str(shifts));
    return roll(t.reshape({t.numel()}), shifts, {0}).reshape(t.sizes());
  }
  MPX_CHECK(shifts.size() == dims.size(), "roll: ", shifts.size(), " shifts for ", dims.size(), " dims (",
            shape_str(shifts), " and ", shape_str(dims), "); give one shift per dim");
  Tensor r = t;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = wrap_dim(dims[k], std::max<int64_t>(t.dim(), 1), "roll: dim");
    if (t.dim() == 0) continue;
    const int64_t n = t.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[k] % n) + n) % n;
    if (s == 0) continue;
    r = cat({r.narrow(d, n - s, s), r.narrow(d, 0, n - s)}, d);
  }
  return r.is_same(t) ? t.clone() : r;
}

Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim0) {
  MPX_CHECK(t.defined(), "repeat_interleave: input is undefined");
  MPX_CHECK(repeats >= 0, "repeat_interleave: repeats must be non-negative, got ", repeats);
  if (!dim0) return repeat_interleave(t.reshape({t.numel()}), repeats, 0);
  const int64_t d = wrap_dim(*dim0, std::max<int64_t>(t.dim(), 1), "repeat_interleave: dim");
  if (t.dim() == 0) return repeat_interleave(t.reshape({1}), repeats, 0);
  // [.., n, ..] -> [.., n, 1, ..] broadcast to [.., n, repeats, ..] and merged: element i's copies are adjacent.
  IntList target = t.sizes(), out = t.sizes();
  target.insert(target.begin() + d + 1, repeats);
  out[static_cast<size_t>(d)] *= repeats;
  return t.unsqueeze(d + 1).expand(target).reshape(out);
}

Tensor Tensor::flip(const IntList& dims) const { return mpx::flip(*this, dims); }
Tensor Tensor::repeat(const IntList& repeats) const { return mpx::repeat(*this, repeats); }
Tensor Tensor::roll(const IntList& shifts, const IntList& dims) const { return mpx::roll(*this, shifts, dims); }
tensor_list Tensor::unbind(int64_t dim) const { return mpx::unbind(*this, dim); }
tensor_list Tensor::split(int64_t size, int64_t dim) const { return mpx::split(*this, size, dim); }
tensor_list Tensor::chunk(int64_t chunks, int64_t dim) const { return mpx::chunk(*this, chunks, dim); }
Tensor Tensor::repeat_interleave(int64_t repeats, std::optional<int64_t> dim) const {
  return mpx::repeat_interleave(*this, repeats, dim);
}

}  // namespace mpx
