// Tensor::index and Tensor::index_put_: LibTorch's index lists as views (integers, slices, None, Ellipsis) and gathers
// (index tensors, boolean masks) with PyTorch's advanced-indexing shapes.
#include "core/indexing.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/logical.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx {
namespace {
using indexing::TensorIndex;
using Kind = TensorIndex::Kind;

// An index tensor (integers) on one dim of the view.
struct Advanced {
  int64_t dim;
  Tensor index;
};

// How many of self's dims an entry consumes (a mask as many as it has).
int64_t consumed(const TensorIndex& i) {
  switch (i.kind()) {
    case Kind::Integer: case Kind::Slice: return 1;
    case Kind::Tensor: {
      const Tensor& t = i.tensor();
      MPX_CHECK(t.defined(), "index: an index tensor is undefined");
      return t.dtype() == kBool || t.dtype() == kUInt8 ? t.dim() : 1;
    }
    default: return 0;
  }
}

// The basic entries applied as views; the index tensors (masks as their nonzero positions) recorded against the dims
// of the returned view they index.
Tensor apply_basic(const Tensor& self, const std::vector<TensorIndex>& indices, std::vector<Advanced>& adv) {
  MPX_CHECK(self.defined(), "index: the tensor is undefined");
  int64_t used = 0, ellipses = 0;
  for (const auto& i : indices) {
    used += consumed(i);
    ellipses += i.kind() == Kind::Ellipsis;
  }
  MPX_CHECK(ellipses <= 1, "index: at most one Ellipsis (\"...\") per index list, got ", ellipses);
  MPX_CHECK(used <= self.dim(), "index: too many indices for ", ops::describe(self), ": ", used, " dims indexed");
  Tensor v = self;
  int64_t d = 0;
  // true/false (and 0-dim masks) add an axis of size 1 or 0; next to index tensors that axis is one more of them
  // (index [0] or none), which broadcasts with the rest, as in PyTorch.
  std::vector<std::pair<int64_t, bool>> flags;
  const auto flag_axis = [&](bool keep) {
    v = v.unsqueeze(d);
    flags.emplace_back(d++, keep);
  };
  for (const auto& i : indices) {
    switch (i.kind()) {
      case Kind::None: v = v.unsqueeze(d++); break;
      case Kind::Boolean: flag_axis(i.boolean()); break;
      case Kind::Ellipsis: d += self.dim() - used; break;
      case Kind::Integer: v = v.select(d, i.integer()); break;
      case Kind::Slice: {
        const indexing::Slice& s = i.slice();
        MPX_CHECK(s.step.value_or(1) > 0, "index: a Slice's step must be positive, got ", *s.step);
        v = v.slice(d++, s.start.value_or(0), s.stop.value_or(std::numeric_limits<int64_t>::max()), s.step.value_or(1));
        break;
      }
      case Kind::Tensor: {
        // Indices on the CPU serve a tensor anywhere (PyTorch's rule); not the other way round.
        MPX_CHECK(i.tensor().device() == self.device() || i.tensor().device().is_cpu(), "index: index tensor ",
                  ops::describe(i.tensor()), " is on another device than ", ops::describe(self));
        const Tensor t = i.tensor().to(self.device());
        if (t.dim() == 0 && t.dtype() != kBool && t.dtype() != kUInt8) {  // a 0-dim integer: an integer index
          MPX_CHECK(t.dtype() == kInt64 || t.dtype() == kInt32, "index: an index tensor must hold integers (i64, i32) "
                    "or be a boolean mask, got ", ops::describe(t));
          v = v.select(d, t.item<int64_t>());
          break;
        }
        if (t.dtype() == kBool || t.dtype() == kUInt8) {
          const int64_t k = t.dim();
          for (int64_t j = 0; j < k; ++j)
            MPX_CHECK(t.size(j) == v.size(d + j), "index: mask ", ops::describe(t), " does not match the shape ",
                      shape_str(IntList(v.sizes().begin() + d, v.sizes().begin() + d + k)), " of the dims it indexes (",
                      d, " to ", d + k - 1, " of ", ops::describe(v), ")");
          if (k == 0) {
            flag_axis(t.to(kBool).item<bool>());
            break;
          }
          const Tensor nz = t.to(kBool).nonzero();  // [n, k]
          for (int64_t j = 0; j < k; ++j) adv.push_back({d + j, nz.select(1, j)});
          d += k;
        } else {
          MPX_CHECK(t.dtype() == kInt64 || t.dtype() == kInt32, "index: an index tensor must hold integers (i64, i32) "
                    "or be a boolean mask, got ", ops::describe(t));
          adv.push_back({d++, t.to(kInt64)});
        }
        break;
      }
    }
  }
  if (adv.empty()) {  // a view: a false axis is an empty slice
    for (const auto& [dim, keep] : flags)
      if (!keep) v = v.slice(dim, 0, 0);
    return v;
  }
  const TensorOptions i64 = TensorOptions(kInt64).device(self.device());
  for (const auto& [dim, keep] : flags) adv.push_back({dim, keep ? zeros({1}, i64) : empty({0}, i64)});
  std::stable_sort(adv.begin(), adv.end(), [](const Advanced& a, const Advanced& b) { return a.dim < b.dim; });
  return v;
}

// The advanced indices as one linear index into their dims, flattened (they are made adjacent first), and where the
// result's broadcast index dims go: PyTorch's rule puts them in place of adjacent index dims, else first.
struct Gather {
  Tensor flat;      // the view with the indexed dims merged into dim `at`
  Tensor linear;    // i64, the broadcast index shape
  int64_t at = 0;
  IntList before, after;  // the view's sizes around the merged dim
};

Gather gather_plan(Tensor v, std::vector<Advanced> adv) {
  bool adjacent = true;
  for (size_t j = 1; j < adv.size(); ++j) adjacent &= adv[j].dim == adv[j - 1].dim + 1;
  if (!adjacent) {  // the indexed dims first, in order, then the rest
    IntList perm;
    std::vector<bool> taken(static_cast<size_t>(v.dim()), false);
    for (auto& a : adv) {
      taken[static_cast<size_t>(a.dim)] = true;
      perm.push_back(a.dim);
    }
    for (int64_t j = 0; j < v.dim(); ++j)
      if (!taken[static_cast<size_t>(j)]) perm.push_back(j);
    v = v.permute(perm);
    for (size_t j = 0; j < adv.size(); ++j) adv[j].dim = static_cast<int64_t>(j);
  }
  Gather g;
  g.at = adv.front().dim;
  const int64_t k = static_cast<int64_t>(adv.size());
  IntList shape = adv.front().index.sizes();
  for (const auto& a : adv) shape = broadcast_shapes(shape, a.index.sizes(), "index");
  g.before = IntList(v.sizes().begin(), v.sizes().begin() + g.at);
  g.after = IntList(v.sizes().begin() + g.at + k, v.sizes().end());
  g.flat = k == 1 ? v : v.flatten(g.at, g.at + k - 1);
  NoGradGuard ng;  // the indices carry no gradient
  const TensorOptions i64 = TensorOptions(kInt64).device(v.device());
  Tensor linear = zeros(shape, i64);
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    const int64_t n = v.size(g.at + j);
    Tensor idx = adv[static_cast<size_t>(j)].index;
    idx = where(lt(idx, 0.0), idx + scalar_tensor(static_cast<double>(n), i64), idx);
    if (idx.numel() > 0) {
      const int64_t lo = idx.min().item<int64_t>(), hi = idx.max().item<int64_t>();
      MPX_CHECK(lo >= 0 && hi < n, "index: index ", lo < 0 ? lo - n : hi, " is out of bounds for dim ", g.at + j,
                " with size ", n);
    }
    linear = linear + idx * scalar_tensor(static_cast<double>(stride), i64);
    stride *= n;
  }
  g.linear = linear;
  return g;
}

}  // namespace

Tensor Tensor::index(const std::vector<indexing::TensorIndex>& indices) const {
  std::vector<Advanced> adv;
  const Tensor v = apply_basic(*this, indices, adv);
  if (adv.empty()) return v;
  const Gather g = gather_plan(v, std::move(adv));
  IntList shape = g.before;
  shape.insert(shape.end(), g.linear.sizes().begin(), g.linear.sizes().end());
  shape.insert(shape.end(), g.after.begin(), g.after.end());
  return mpx::index_select(g.flat, g.at, g.linear.reshape({-1})).reshape(shape);
}

namespace {
bool has_index_tensor(const std::vector<indexing::TensorIndex>& indices) {
  return std::any_of(indices.begin(), indices.end(), [](const TensorIndex& i) { return i.kind() == Kind::Tensor; });
}

// Where x[indices] lies in x, as positions into x.reshape(-1): the same index list applied to those positions.
Tensor positions(const Tensor& x, const std::vector<indexing::TensorIndex>& indices) {
  NoGradGuard ng;
  return arange(static_cast<double>(x.numel()), TensorOptions(kInt64).device(x.device()))
      .view(x.sizes())
      .index(indices);
}
}  // namespace

Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& value) {
  MPX_CHECK(value.defined(), "index_put_: the value is undefined");
  // Leading size-1 dims of the value are dropped first, as PyTorch does (x[0] = row of shape [1, n]).
  Tensor v = value;
  while (v.dim() > 0 && v.size(0) == 1) v = v.squeeze(0);
  if (!has_index_tensor(indices)) {  // a view: written in place
    Tensor view = index(indices);
    view.copy_(v.dim() == 0 || v.sizes() == view.sizes() ? v : v.expand(view.sizes()));
    return *this;
  }
  const Tensor pos = positions(*this, indices);
  MPX_CHECK(broadcast_shapes(pos.sizes(), v.sizes(), "index_put_") == pos.sizes(), "index_put_: value ",
            ops::describe(value), " does not broadcast to the indexed shape ", shape_str(pos.sizes()));
  const Tensor src = v.to(device(), dtype()).expand(pos.sizes()).reshape({-1});
  return copy_(scatter(reshape({-1}), 0, pos.reshape({-1}), src).view(sizes()));
}

Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, double value) {
  if (!has_index_tensor(indices)) {
    index(indices).fill_(value);
    return *this;
  }
  return index_put_(indices, scalar_tensor(value, options()));
}

}  // namespace mpx
