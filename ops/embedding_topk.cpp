// The index family's sequence-model ops (ops/index.h): embedding and its backward, embedding_renorm_, topk, sort, multinomial.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda.h"
#include "core/random.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/index_internal.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace {
using autograd::FunctionNode;
using index_detail::checked_index;

Tensor embedding_backward_impl(const Tensor& g, const Tensor& idx, int64_t V, int64_t padding_idx, bool deterministic);

// weight [V, D] rows at idx [N] (checked): [N, D].
Tensor embedding_impl(const Tensor& weight, const Tensor& idx, int64_t padding_idx, bool deterministic) {
  const int64_t V = weight.size(0), D = weight.size(1);
  Tensor out = empty({idx.numel(), D}, weight.options());
  if (out.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<OpId::embedding>(weight.device(), weight.dtype())(out, weight.detach().contiguous(), idx);
  }
  if (auto n = autograd::record("EmbeddingBackward", {weight}, {out},
                                [V, padding_idx, deterministic](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  return {embedding_backward_impl(g[0], self.saved(0), V, padding_idx, deterministic)};
                                }))
    n->save(idx);
  return out;
}

// The adjoint of embedding_impl: g [N, D] summed into [V, D] per index, padding rows left zero.
Tensor embedding_backward_impl(const Tensor& g, const Tensor& idx, int64_t V, int64_t padding_idx, bool deterministic) {
  Tensor gw = empty({V, g.size(1)}, g.options());
  if (gw.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<OpId::embedding_backward>(g.device(), g.dtype())(gw, g.detach().contiguous(), idx, padding_idx,
                                                                      deterministic);
  }
  if (auto n = autograd::record("EmbeddingBackwardBackward", {g}, {gw},
                                [padding_idx, deterministic](FunctionNode& self, const tensor_list& gg) -> tensor_list {
                                  const Tensor idx = self.saved(0);
                                  Tensor rows = embedding_impl(gg[0], idx, padding_idx, deterministic);
                                  if (padding_idx < 0) return {rows};
                                  Tensor pad;
                                  {
                                    NoGradGuard ng;
                                    pad = eq(idx, static_cast<double>(padding_idx)).unsqueeze(1);
                                  }
                                  return {masked_fill(rows, pad, 0.0)};
                                }))
    n->save(idx);
  return gw;
}

void check_weight(const char* op, const Tensor& weight) {
  MPX_CHECK(weight.defined(), op, ": weight is undefined");
  MPX_CHECK(weight.dim() == 2, op, ": weight must be [num_embeddings, embedding_dim], got ", ops::describe(weight));
  MPX_CHECK(is_floating(weight.dtype()), op, ": weight must be floating, got ", ops::describe(weight));
}

std::string weight_range(const Tensor& weight) { return " for num_embeddings of weight " + ops::describe(weight); }

}  // namespace

Tensor embedding(const Tensor& weight0, const Tensor& indices, int64_t padding_idx, bool deterministic) {
  const char* op = "embedding";
  check_weight(op, weight0);
  // Policy none: under autocast the output keeps the weight's dtype (the residual stream stays f32).
  const Tensor weight = ops::autocast(OpId::embedding, {weight0})[0];
  const int64_t V = weight.size(0);
  MPX_CHECK(padding_idx == -1 || (padding_idx >= 0 && padding_idx < V), op, ": padding_idx ", padding_idx,
            " must be -1 (none) or in [0, ", V, ") for weight ", ops::describe(weight));
  const Tensor idx = checked_index(op, indices, weight, V, weight_range(weight)).reshape({-1});
  IntList shape = indices.sizes();
  shape.push_back(weight.size(1));
  return embedding_impl(weight, idx, padding_idx, deterministic).reshape(shape);
}

void embedding_renorm_(const Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  const char* op = "embedding_renorm_";
  check_weight(op, weight);
  MPX_CHECK(max_norm >= 0.0, op, ": max_norm must be non-negative, got ", max_norm);
  MPX_CHECK(norm_type > 0.0, op, ": norm_type must be positive (inf for the largest magnitude), got ", norm_type);
  MPX_CHECK(weight.is_contiguous(), op, ": weight ", ops::describe(weight), " must be contiguous (it is changed in place)");
  const Tensor idx = checked_index(op, indices, weight, weight.size(0), weight_range(weight));
  if (idx.numel() == 0 || weight.size(1) == 0) return;
  NoGradGuard ng;
  // Each referenced row once, in increasing order (PyTorch sorts and deduplicates too).
  const Tensor host = idx.cpu().reshape({-1});
  std::vector<int64_t> rows(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const Tensor uidx = tensor<int64_t>(rows, {static_cast<int64_t>(rows.size())}).to(weight.device());
  const Tensor w = weight.detach();
  const DType cdt = w.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor r = embedding_impl(w, uidx, -1, false).to(cdt);
  const Tensor a = abs(r);
  const Tensor norm = std::isinf(norm_type) ? amax(a, {1}, true) : pow(sum(pow(a, norm_type), {1}, true), 1.0 / norm_type);
  const Tensor scale = where(gt(norm, max_norm), div(full({}, max_norm, TensorOptions(cdt).device(w.device())), add(norm, 1e-7)), 1.0);
  const Tensor scaled = mul(r, scale).to(w.dtype());
  // Written straight into the weight's memory by the scatter kernel: no copy of the whole table.
  const Tensor index2d = uidx.unsqueeze(1).expand(scaled.sizes()).contiguous();
  dispatch::kernel<OpId::scatter>(w.device(), w.dtype())(w, 0, index2d, scaled.contiguous());
  weight.bump_version();
}

namespace {
// topk and sort: the first k of x along dim in the order `largest` asks (ties by index), by op's kernel.
std::tuple<Tensor, Tensor> ordered(OpId id, const char* op, const Tensor& self0, int64_t k, int64_t dim0, bool largest) {
  MPX_CHECK(self0.defined(), op, ": input is undefined");
  Tensor x = ops::autocast(id, {self0})[0];
  MPX_CHECK(x.dtype() != kBool, op, ": bool tensors are not supported, got ", ops::describe(x));
  const int64_t dim = wrap_dim(dim0, std::max<int64_t>(x.dim(), 1), (std::string(op) + ": dim").c_str());
  const bool scalar = x.dim() == 0;
  if (scalar) x = x.reshape({1});
  if (k < 0) k = x.size(dim);  // sort
  MPX_CHECK(k <= x.size(dim), op, ": k (", k, ") must be in [0, ", x.size(dim), "], the size of dim ", dim, " of ",
            ops::describe(x));
  IntList shape = x.sizes();
  shape[dim] = k;
  Tensor values = empty(shape, x.options());
  Tensor indices = empty(shape, TensorOptions(kInt64).device(x.device()));
  if (values.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<kernels::TopkFn>(id, x.device(), x.dtype())(values, indices, x.detach(), k, dim, largest, true);
  }
  if (auto n = autograd::record(id == OpId::sort ? "SortBackward" : "TopkBackward", {x}, {values},
                                [dim](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  return {scatter(zeros(self.shapes[0], g[0].options()), dim, self.saved(0), g[0])};
                                })) {
    n->save(indices);
    n->shapes.push_back(x.sizes());
  }
  if (scalar) {
    const IntList s = k == 1 ? IntList{} : IntList{0};
    return {values.reshape(s), indices.reshape(s)};
  }
  return {values, indices};
}
}  // namespace

std::tuple<Tensor, Tensor> topk(const Tensor& self, int64_t k, int64_t dim, bool largest, bool) {
  MPX_CHECK(k >= 0, "topk: k (", k, ") must be non-negative");
  return ordered(OpId::topk, "topk", self, k, dim, largest);
}

std::tuple<Tensor, Tensor> sort(const Tensor& self, int64_t dim, bool descending, bool) {
  return ordered(OpId::sort, "sort", self, -1, dim, descending);
}

Tensor argsort(const Tensor& self, int64_t dim, bool descending, bool stable) {
  return std::get<1>(mpx::sort(self, dim, descending, stable));
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  const char* op = "multinomial";
  MPX_CHECK(probs.defined(), op, ": probs is undefined");
  MPX_CHECK(probs.dim() == 1 || probs.dim() == 2, op, ": probs must be 1-d or 2-d, got ", ops::describe(probs));
  MPX_CHECK(is_floating(probs.dtype()), op, ": probs must be floating, got ", ops::describe(probs));
  MPX_CHECK(num_samples > 0, op, ": num_samples must be positive, got ", num_samples);
  const Tensor p = probs.detach().reshape({probs.dim() == 1 ? 1 : probs.size(0), probs.size(-1)}).contiguous();
  const int64_t R = p.size(0), C = p.size(1);
  MPX_CHECK(C > 0, op, ": probs ", ops::describe(probs), " has no categories");
  MPX_CHECK(replacement || num_samples <= C, op, ": cannot draw ", num_samples, " samples without replacement from ",
            C, " categories");
  // The distributions are checked on the host (a copy from a GPU: correctness first; not while a
  // CUDA graph is captured, where nothing may be read back: a row without mass then draws 0).
  if (!cuda::is_capturing()) {
    NoGradGuard ng;
    const Tensor h = p.cpu().to(kFloat64).contiguous();
    const double* d = h.data_ptr<double>();
    for (int64_t r = 0; r < R; ++r) {
      double total = 0.0;
      int64_t positive = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double v = d[r * C + c];
        MPX_CHECK(std::isfinite(v) && v >= 0.0, op, ": probs must be finite and non-negative, got ", v, " at position ",
                  index_detail::position_str(probs.sizes(), r * C + c), " of ", ops::describe(probs));
        total += v;
        positive += v > 0.0;
      }
      MPX_CHECK(total > 0.0, op, ": row ", r, " of probs ", ops::describe(probs), " sums to zero; every row needs a positive entry");
      MPX_CHECK(replacement || positive >= num_samples, op, ": row ", r, " of probs ", ops::describe(probs), " has only ",
                positive, " positive entries, fewer than the ", num_samples,
                " samples drawn without replacement (zero-probability categories are never drawn)");
    }
  }
  Tensor out = empty({R, num_samples}, TensorOptions(kInt64).device(probs.device()));
  auto [seed, offset] = random::default_generator().reserve(static_cast<uint64_t>(R * num_samples));
  dispatch::kernel<OpId::multinomial>(probs.device(), probs.dtype())(out, p, num_samples, replacement, seed, offset);
  return probs.dim() == 1 ? out.reshape({num_samples}) : out;
}
Tensor Tensor::multinomial(int64_t n, bool replacement) const { return mpx::multinomial(*this, n, replacement); }

}  // namespace mpx
