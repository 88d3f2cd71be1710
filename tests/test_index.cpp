// Tests of the index family (ops/index.h) on the CPU: values against f64 loops, gradchecks, autocast, topk ties/NaN, multinomial statistics, errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "amp/autocast.h"
#include "core/random.h"
#include "nn/functional.h"
#include "nn/modules.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "tests/gradcheck.h"
#include "test_util.h"

using namespace mpx;
using Catch::Contains;
using testing::gradcheck;
using testing::leaf;

namespace {

// ---- f64 reference helpers: flat values and row-major coordinates ----
std::vector<double> vals(const Tensor& t) {
  NoGradGuard ng;
  const Tensor c = t.to(kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
IntList coords(int64_t lin, const IntList& shape) {
  IntList c(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = lin % shape[d];
    lin /= shape[d];
  }
  return c;
}
int64_t linear(const IntList& c, const IntList& shape) {
  int64_t l = 0;
  for (size_t d = 0; d < shape.size(); ++d) l = l * shape[d] + c[d];
  return l;
}
Tensor from(const std::vector<double>& v, const IntList& shape) { return tensor<double>(v, shape); }
// Exact equality of values (in f64) and shapes.
bool same(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  const auto x = vals(a), y = vals(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}
Tensor randn_f(const IntList& shape, uint64_t seed) {
  manual_seed(seed);
  return randn(shape);
}
Tensor idx64(const std::vector<int64_t>& v, const IntList& shape = {}) { return tensor<int64_t>(v, shape); }
Tensor bools(const std::vector<int32_t>& v, const IntList& shape = {}) { return tensor<int32_t>(v, shape).to(kBool); }

// index_select by loops.
Tensor ref_index_select(const Tensor& x, int64_t dim, const std::vector<int64_t>& idx) {
  IntList shape = x.sizes();
  shape[dim] = static_cast<int64_t>(idx.size());
  const auto xv = vals(x);
  std::vector<double> out(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < out.size(); ++i) {
    IntList c = coords(static_cast<int64_t>(i), shape);
    c[dim] = idx[c[dim]];
    out[i] = xv[linear(c, x.sizes())];
  }
  return from(out, shape);
}
// gather / scatter(_add) by loops, over index's shape.
Tensor ref_gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const auto xv = vals(x), iv = vals(index);
  std::vector<double> out(iv.size());
  for (size_t i = 0; i < out.size(); ++i) {
    IntList c = coords(static_cast<int64_t>(i), index.sizes());
    c[dim] = static_cast<int64_t>(iv[i]);
    out[i] = xv[linear(c, x.sizes())];
  }
  return from(out, index.sizes());
}
Tensor ref_scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool add) {
  auto out = vals(self);
  const auto iv = vals(index), sv = vals(src);
  for (size_t i = 0; i < iv.size(); ++i) {
    IntList c = coords(static_cast<int64_t>(i), index.sizes());
    const double s = sv[linear(c, src.sizes())];
    c[dim] = static_cast<int64_t>(iv[i]);
    double& o = out[linear(c, self.sizes())];
    o = add ? o + s : s;
  }
  return from(out, self.sizes());
}

}  // namespace

TEST_CASE("index_select matches f64 loops: every dim, negative dims, i32 and duplicate indices, strided input", "[index]") {
  const Tensor x = randn_f({3, 4, 5}, 1);
  const std::vector<int64_t> iv = {2, 0, 2, 1};
  for (int64_t dim : {0, 1, 2, -1, -2}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    std::vector<int64_t> use(iv);
    for (auto& v : use) v = std::min<int64_t>(v, x.size(d) - 1);
    CHECK(same(index_select(x, dim, idx64(use)), ref_index_select(x, d, use)));
    CHECK(same(index_select(x, dim, idx64(use).to(kInt32)), ref_index_select(x, d, use)));
  }
  const Tensor xt = x.transpose(0, 2);  // [5, 4, 3], not contiguous
  CHECK(same(index_select(xt, 1, idx64({3, 3, 0})), ref_index_select(xt, 1, {3, 3, 0})));
  CHECK(same(index_select(xt, 0, idx64({4}).reshape({})).squeeze(0), xt.select(0, 4)));  // a 0-d index
  // Every dtype moves exactly.
  for (DType dt : {kInt64, kInt32, kUInt8, kBool, kFloat16, kBFloat16}) {
    const Tensor xd = abs(x * 3.0).to(dt);
    CHECK(same(index_select(xd, 1, idx64({1, 0})), ref_index_select(xd, 1, {1, 0})));
  }
  CHECK(index_select(x, 0, idx64({}, {0})).sizes() == IntList{0, 4, 5});
}

TEST_CASE("index_add accumulates duplicate indices with alpha, out of place", "[index]") {
  const Tensor self = randn_f({4, 3}, 2), src = randn_f({3, 3}, 3);
  const Tensor out = index_add(self, 0, idx64({0, 2, 0}), src, 2.0);
  auto ref = vals(self);
  const auto sv = vals(src);
  const int64_t rows[] = {0, 2, 0};
  for (int j = 0; j < 3; ++j)
    for (int c = 0; c < 3; ++c) ref[rows[j] * 3 + c] += 2.0 * sv[j * 3 + c];
  CHECK(testing::close(out, from(ref, {4, 3}), 1e-6));
  CHECK(same(self, randn_f({4, 3}, 2)));  // self untouched
  // Along the last dim, with i32 indices, a strided self, and integers.
  const Tensor s2 = randn_f({3, 5}, 4).t();  // [5, 3]
  const Tensor src2 = randn_f({5, 2}, 5);
  const Tensor o2 = index_add(s2, -1, idx64({1, 1}).to(kInt32), src2);
  auto r2 = vals(s2);
  const auto v2 = vals(src2);
  for (int i = 0; i < 5; ++i) r2[i * 3 + 1] += v2[i * 2] + v2[i * 2 + 1];
  CHECK(testing::close(o2, from(r2, {5, 3}), 1e-6));
  const Tensor oi = index_add(zeros({3}, kInt32), 0, idx64({2, 2, 0}), tensor<int32_t>({1, 2, 3}), 3.0);
  CHECK(same(oi, tensor<int32_t>({9, 0, 9})));
}

TEST_CASE("gather, scatter and scatter_add match f64 loops", "[index]") {
  const Tensor x = randn_f({3, 4}, 6);
  const Tensor i1 = idx64({3, 0, 1, 1, 2, 2}, {3, 2});  // dim 1, smaller than self in dim 1
  CHECK(same(gather(x, 1, i1), ref_gather(x, 1, i1)));
  CHECK(same(gather(x, -1, i1.to(kInt32)), ref_gather(x, 1, i1)));
  const Tensor i0 = idx64({2, 0, 1, 0, 1, 1}, {2, 3});  // dim 0, index narrower in dim 1
  CHECK(same(gather(x, 0, i0), ref_gather(x, 0, i0)));
  const Tensor xt = randn_f({4, 3}, 7).t();  // strided
  CHECK(same(gather(xt, 1, i1), ref_gather(xt, 1, i1)));

  const Tensor self = randn_f({3, 5}, 8), src = randn_f({4, 6}, 9);  // src larger than index
  const Tensor u = idx64({4, 0, 2, 1, 3, 0}, {3, 2});  // unique per row along dim 1
  CHECK(same(scatter(self, 1, u, src), ref_scatter(self, 1, u, src, false)));
  const Tensor dup = idx64({0, 2, 2, 0, 0, 0, 1, 2}, {2, 4});  // duplicates along dim 0
  CHECK(testing::close(scatter_add(self, 0, dup, src), ref_scatter(self, 0, dup, src, true), 1e-6));
  CHECK(testing::close(scatter_add(self, -2, dup.to(kInt32), src), ref_scatter(self, 0, dup, src, true), 1e-6));
  const Tensor filled = scatter(self, 1, u, 7.5);
  CHECK(same(filled, ref_scatter(self, 1, u, full({3, 2}, 7.5), false)));
  CHECK(same(scatter_add(zeros({4}, kInt64), 0, idx64({1, 1, 3}), tensor<int64_t>({5, 6, 7})), tensor<int64_t>({0, 11, 0, 7})));
  CHECK(same(scatter(zeros({2, 2}, kBool), 0, idx64({1, 0}, {1, 2}), ones({1, 2}, kBool)), bools({false, true, true, false}, {2, 2})));
}

TEST_CASE("masked_fill broadcasts its mask and where's scalar forms agree with the tensor where", "[index]") {
  const Tensor x = randn_f({3, 4}, 10);
  const Tensor m = bools({true, false, false, true});  // broadcast over rows
  const Tensor y = masked_fill(x, m, -1.5);
  auto ref = vals(x);
  for (int r = 0; r < 3; ++r) ref[r * 4] = ref[r * 4 + 3] = -1.5;
  CHECK(same(y, from(ref, {3, 4})));
  CHECK(same(masked_fill(x, m, full({}, -1.5, kFloat64)), y));  // a 0-d value of another dtype
  CHECK(same(masked_fill(x.t(), bools({true, false, true}), 0.0),
             where(bools({true, false, true}), zeros({}), x.t())));
  // The mask may broadcast self too (output shape is the broadcast).
  CHECK(masked_fill(randn_f({4}, 11), bools({true, false}, {2, 1}), 0.0).sizes() == IntList{2, 4});
  CHECK(same(masked_fill(tensor<int64_t>({1, 2, 3}), bools({false, true, false}), 9.0), tensor<int64_t>({1, 9, 3})));

  const Tensor c = gt(randn_f({3, 4}, 12), 0.0);
  CHECK(same(where(c, x, 2.0), where(c, x, full({}, 2.0))));
  CHECK(same(where(c, 2.0, x), where(c, full({}, 2.0), x)));
  CHECK(same(where(c.select(0, 0), 2.0, x), where(c.select(0, 0), full({}, 2.0), x)));  // broadcast cond
  // An integer tensor with a fractional scalar computes in f32 (PyTorch's promotion).
  const Tensor wi = where(bools({true, false}), tensor<int64_t>({3, 4}), 0.5);
  CHECK(wi.dtype() == kFloat32);
  CHECK(same(wi, tensor<float>({3.0f, 0.5f})));
  // where rounds a too large scalar to infinity in f16 (PyTorch's result); masked_fill refuses it.
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(same(where(bools({1, 0}), tensor<float>({1, 2}).to(kFloat16), -1e9), tensor<double>({1, -inf})));
  CHECK(same(where(bools({1, 0}), 1e9, tensor<float>({1, 2}).to(kFloat16)), tensor<double>({inf, 2})));
  CHECK(same(masked_fill(zeros({2}, kBFloat16), bools({1, 0}), -inf), tensor<double>({-inf, 0})));
}

TEST_CASE("tril and triu keep the triangle of the last two dims for any diagonal", "[index]") {
  const Tensor x = randn_f({2, 3, 4}, 13);
  const auto xv = vals(x);
  for (int64_t diag : {-2, -1, 0, 1, 3}) {
    std::vector<double> lo(xv.size()), up(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const IntList c = coords(static_cast<int64_t>(i), {2, 3, 4});
      lo[i] = c[2] - c[1] <= diag ? xv[i] : 0.0;
      up[i] = c[2] - c[1] >= diag ? xv[i] : 0.0;
    }
    CHECK(same(tril(x, diag), from(lo, {2, 3, 4})));
    CHECK(same(triu(x, diag), from(up, {2, 3, 4})));
  }
  const Tensor xt = x.transpose(1, 2);  // strided [2, 4, 3]
  CHECK(same(tril(xt), tril(xt.contiguous())));
  CHECK(same(triu(ones({3, 3}, kBool), 1), bools({false, true, true, false, false, true, false, false, false}, {3, 3})));
}

TEST_CASE("embedding gathers rows for any index shape, its backward sums duplicates and skips padding_idx", "[index]") {
  const Tensor w = randn_f({5, 3}, 14).set_requires_grad(true);
  const Tensor idx = idx64({4, 0, 4, 2, 1, 4}, {2, 3});
  const Tensor e = embedding(w, idx.to(kInt32), 1);
  CHECK(e.sizes() == IntList{2, 3, 3});
  CHECK(same(e.detach(), ref_index_select(w.detach(), 0, {4, 0, 4, 2, 1, 4}).reshape({2, 3, 3})));
  const Tensor g = randn_f({2, 3, 3}, 15);
  e.backward(g);
  auto ref = std::vector<double>(15, 0.0);
  const auto gv = vals(g);
  const int64_t rows[] = {4, 0, 4, 2, 1, 4};
  for (int n = 0; n < 6; ++n)
    if (rows[n] != 1)
      for (int d = 0; d < 3; ++d) ref[rows[n] * 3 + d] += gv[n * 3 + d];
  CHECK(testing::close(w.grad(), from(ref, {5, 3}), 1e-6));
  // deterministic changes nothing on the CPU; f16 sums in f32 and rounds once.
  const Tensor wd = w.detach().clone().set_requires_grad(true);
  embedding(wd, idx, 1, true).backward(g);
  CHECK(same(wd.grad(), w.grad()));
  const Tensor wh = w.detach().to(kFloat16).set_requires_grad(true);
  const Tensor many = idx64(std::vector<int64_t>(3000, 2), {3000});
  embedding(wh, many).backward(full({3000, 3}, 0.1, kFloat16));
  // 3000 * f16(0.1) accumulated in f32 (an f16 running sum would stall near 256).
  CHECK(std::abs(wh.grad().select(0, 2).select(0, 0).item<double>() - 3000 * 0.0999755859375) < 0.2);
}

TEST_CASE("embedding_renorm_ and F::embedding's max_norm scale the looked-up rows as PyTorch", "[index][nn]") {
  Tensor w = tensor<float>({3, 4, 0.3f, 0.4f, 6, 8, 1, 0}, {4, 2});
  embedding_renorm_(w, idx64({0, 2, 0}), 1.0);
  const double s0 = 1.0 / (5.0 + 1e-7), s2 = 1.0 / (10.0 + 1e-7);
  CHECK(testing::close(w, tensor<float>({float(3 * s0), float(4 * s0), 0.3f, 0.4f, float(6 * s2), float(8 * s2), 1, 0}, {4, 2}), 1e-6));
  // L1 and inf norms; rows under max_norm and rows not referenced keep their values.
  Tensor w1 = tensor<double>({3, -1, 0.5, 0.25}, {2, 2});
  embedding_renorm_(w1, idx64({0, 1}), 2.0, 1.0);
  CHECK(testing::close(w1, tensor<double>({3 * 2 / (4 + 1e-7), -2 / (4 + 1e-7), 0.5, 0.25}, {2, 2}), 1e-12));
  Tensor wi = tensor<double>({3, -4}, {1, 2});
  embedding_renorm_(wi, idx64({0}), 2.0, std::numeric_limits<double>::infinity());
  CHECK(testing::close(wi, tensor<double>({3 * 2 / (4 + 1e-7), -4 * 2 / (4 + 1e-7)}, {1, 2}), 1e-12));

  nn::Embedding emb(nn::EmbeddingOptions(4, 2).max_norm(1.0));
  {
    NoGradGuard ng;
    emb->weight.copy_(tensor<float>({3, 4, 0.3f, 0.4f, 6, 8, 1, 0}, {4, 2}));
  }
  const Tensor out = emb(idx64({2, 1}));
  CHECK(testing::close(out, tensor<float>({float(6 * s2), float(8 * s2), 0.3f, 0.4f}, {2, 2}), 1e-6));
  CHECK(testing::close(emb->weight.select(0, 0), tensor<float>({3, 4}), 0));  // not looked up: unchanged
  out.sum().backward();
  CHECK(testing::close(emb->weight.grad(), tensor<float>({0, 0, 1, 1, 1, 1, 0, 0}, {4, 2}), 0));
  // padding_idx counts from the end in F::embedding and the module.
  nn::Embedding padded(nn::EmbeddingOptions(4, 2).padding_idx(-1));
  padded(idx64({3, 3, 0})).sum().backward();
  CHECK(testing::close(padded->weight.grad(), tensor<float>({1, 1, 0, 0, 0, 0, 0, 0}, {4, 2}), 0));
}

TEST_CASE("nn::Embedding::from_pretrained takes the table's values, dtype and padding row, frozen by default",
          "[index][nn]") {
  const Tensor table = randn_f({5, 3}, 31).to(kFloat64);
  nn::Embedding frozen = nn::Embedding::from_pretrained(table);
  CHECK(frozen->weight.dtype() == kFloat64);
  CHECK(!frozen->weight.requires_grad());
  CHECK(same(frozen(idx64({4, 0})), index_select(table, 0, idx64({4, 0}))));
  nn::Embedding trained =
      nn::Embedding::from_pretrained(table, nn::EmbeddingFromPretrainedOptions().freeze(false).padding_idx(1));
  CHECK(trained->weight.requires_grad());
  CHECK(same(trained->weight.select(0, 1), table.select(0, 1)));  // the given padding row, not zeros
  sum(trained(idx64({1, 2, 1}))).backward();
  CHECK(same(trained->weight.grad().select(0, 1), zeros({3}, kFloat64)));  // padding_idx gets no gradient
  CHECK_THROWS_WITH(nn::Embedding::from_pretrained(randn_f({4}, 1)), Contains("2-d table"));
}

TEST_CASE("f64 gradchecks of every differentiable index op", "[index][gradcheck]") {
  manual_seed(21);
  const Tensor i1 = idx64({2, 0, 2});
  CHECK(gradcheck([&](const tensor_list& in) { return index_select(in[0], 1, i1); }, {leaf({2, 3, 2})}) == "");
  CHECK(gradcheck([&](const tensor_list& in) { return index_add(in[0], 0, i1, in[1], 0.5); }, {leaf({3, 2}), leaf({3, 2})}) == "");
  const Tensor ig = idx64({1, 0, 2, 2, 0, 1}, {2, 3});
  CHECK(gradcheck([&](const tensor_list& in) { return gather(in[0], 0, ig); }, {leaf({3, 4})}) == "");
  const Tensor iu = idx64({2, 0, 1, 3}, {2, 2});  // unique along dim 1 per row
  CHECK(gradcheck([&](const tensor_list& in) { return scatter(in[0], 1, iu, in[1]); }, {leaf({2, 4}), leaf({3, 3})}) == "");
  CHECK(gradcheck([&](const tensor_list& in) { return scatter(in[0], 1, iu, 2.0); }, {leaf({2, 4})}) == "");
  CHECK(gradcheck([&](const tensor_list& in) { return scatter_add(in[0], 0, ig, in[1]); }, {leaf({3, 3}), leaf({2, 4})}) == "");
  const Tensor m = bools({true, false, true});
  CHECK(gradcheck([&](const tensor_list& in) { return masked_fill(in[0], m, 0.5); }, {leaf({2, 3})}) == "");
  CHECK(gradcheck([&](const tensor_list& in) { return masked_fill(in[0], m, in[1]); }, {leaf({2, 3}), leaf({})}) == "");
  const Tensor c = bools({true, false, false, true, true, false}, {2, 3});
  CHECK(gradcheck([&](const tensor_list& in) { return where(c, in[0], 1.5); }, {leaf({3})}) == "");
  CHECK(gradcheck([&](const tensor_list& in) { return where(c, -1.5, in[0]); }, {leaf({2, 3})}) == "");
  CHECK(gradcheck([&](const tensor_list& in) { return tril(in[0], -1) + triu(in[0], 1); }, {leaf({2, 3, 4})}) == "");
  const Tensor ie = idx64({3, 0, 3, 1, 2, 0}, {3, 2});
  // padding_idx withholds a true derivative by design (tested above), so the gradcheck goes without it.
  CHECK(gradcheck([&](const tensor_list& in) { return embedding(in[0], ie); }, {leaf({4, 3})}) == "");
  CHECK(gradcheck([&](const tensor_list& in) { return std::get<0>(topk(in[0], 2, 0, false)); }, {leaf({5, 3})}) == "");
  // Second order: the backward ops are differentiable too.
  CHECK(testing::gradgradcheck([&](const tensor_list& in) { return embedding(in[0], ie, 2) * embedding(in[0], ie, 2); },
                               {leaf({4, 3})}) == "");
  CHECK(testing::gradgradcheck([&](const tensor_list& in) { return gather(in[0], 0, ig) * gather(in[0], 0, ig); },
                               {leaf({3, 4})}) == "");
}

TEST_CASE("under autocast an f32 embedding stays f32, and index ops keep their input's dtype", "[index][autocast]") {
  const Tensor w = randn_f({6, 4}, 22).set_requires_grad(true);
  for (DType lp : {kFloat16, kBFloat16}) {
    amp::AutocastGuard guard(lp);
    const Tensor e = embedding(w, idx64({1, 5}));
    CHECK(e.dtype() == kFloat32);
    CHECK(nn::functional::embedding(idx64({1, 5}), w).dtype() == kFloat32);
    CHECK(index_select(w, 0, idx64({1})).dtype() == kFloat32);
    CHECK(gather(w, 1, idx64({0, 1}, {1, 2})).dtype() == kFloat32);
    CHECK(std::get<0>(topk(w, 2)).dtype() == kFloat32);
    CHECK(masked_fill(w, gt(w, 0.0), 0.0).dtype() == kFloat32);
    CHECK(tril(w).dtype() == kFloat32);
  }
}

TEST_CASE("topk: sorted values and indices, ties by lower index, NaN above every number", "[index]") {
  const Tensor x = randn_f({4, 7}, 23);
  const auto xv = vals(x);
  for (bool largest : {true, false}) {
    auto [v, i] = topk(x, 3, 1, largest);
    const auto vv = vals(v), iv = vals(i);
    for (int r = 0; r < 4; ++r) {
      std::vector<std::pair<double, int>> row;
      for (int c = 0; c < 7; ++c) row.push_back({xv[r * 7 + c], c});
      std::sort(row.begin(), row.end(), [&](auto a, auto b) { return largest ? a.first > b.first : a.first < b.first; });
      for (int j = 0; j < 3; ++j) {
        CHECK(vv[r * 3 + j] == row[j].first);
        CHECK(iv[r * 3 + j] == row[j].second);
      }
    }
  }
  // Along dim 0 of a strided tensor: the columns' top 2.
  auto [v0, i0] = topk(x.t(), 2, 0);
  auto [v1, i1] = topk(x, 2, 1);
  CHECK(same(v0, v1.t()));
  CHECK(same(i0, i1.t()));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor t = tensor<double>({1, nan, 3, 3, -2, nan, 1});
  auto [tv, ti] = topk(t, 7);
  CHECK(same(ti, idx64({1, 5, 2, 3, 0, 6, 4})));
  auto [sv, si] = topk(t, 4, 0, false);
  CHECK(same(si, idx64({4, 0, 6, 2})));
  CHECK(same(std::get<1>(topk(tensor<int64_t>({5, 5, 1, 5}), 3)), idx64({0, 1, 3})));
  CHECK(std::get<0>(topk(x, 0)).sizes() == IntList{4, 0});
  CHECK(std::get<0>(topk(tensor<float>({2.5f}).reshape({}), 1)).item<double>() == 2.5);
}

TEST_CASE("sort and argsort: stable in both directions, NaN last ascending, any dim, integers, gradients", "[index]") {
  // Many ties: stable means equal values keep their positions' order whichever direction.
  for (DType dt : {kFloat32, kBFloat16, kInt64}) {
    INFO(dtype_name(dt));
    const Tensor x = (randn_f({3, 40}, 5) * 2.0).to(kInt64).to(dt);  // small integers: many ties
    const auto xv = vals(x);
    for (bool descending : {false, true}) {
      auto [v, i] = sort(x, 1, descending);
      const auto vv = vals(v), iv = vals(i);
      for (int r = 0; r < 3; ++r) {
        std::vector<std::pair<double, int>> row;
        for (int c = 0; c < 40; ++c) row.push_back({xv[r * 40 + c], c});
        std::stable_sort(row.begin(), row.end(),
                         [&](auto a, auto b) { return descending ? a.first > b.first : a.first < b.first; });
        for (int j = 0; j < 40; ++j) {
          CHECK(vv[r * 40 + j] == row[j].first);
          CHECK(iv[r * 40 + j] == row[j].second);
        }
      }
      CHECK(same(argsort(x, -1, descending), i));
    }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor t = tensor<double>({1, nan, 3, 3, -2, nan, 1});
  CHECK(same(std::get<1>(sort(t)), idx64({4, 0, 6, 2, 3, 1, 5})));
  CHECK(same(std::get<1>(sort(t, 0, true)), idx64({1, 5, 2, 3, 0, 6, 4})));
  // Along dim 0 of a strided tensor, and a 0-d input.
  const Tensor y = randn_f({5, 4}, 6);
  auto [c0, ci0] = sort(y.t(), 0);
  auto [c1, ci1] = sort(y, 1);
  CHECK(same(c0, c1.t()));
  CHECK(same(ci0, ci1.t()));
  CHECK(std::get<0>(sort(tensor<float>({2.5f}).reshape({}))).item<double>() == 2.5);
  CHECK(std::get<0>(sort(zeros({2, 0}))).sizes() == IntList{2, 0});
  CHECK(gradcheck([](const tensor_list& in) { return std::get<0>(sort(in[0], 0, true)); }, {leaf({5, 3})}) == "");
  CHECK_THROWS_WITH(sort(ones({3}, kBool)), Catch::Contains("sort: bool"));
  CHECK_THROWS_WITH(sort(ones({3}), 2), Catch::Contains("sort: dim"));
}

TEST_CASE("flip and repeat follow PyTorch's order, with gradients", "[index]") {
  const Tensor x = arange(6.0, TensorOptions(kFloat64)).reshape({2, 3});
  CHECK(testing::same_values(flip(x, {1}), tensor(std::vector<double>{2, 1, 0, 5, 4, 3}, {2, 3})));
  CHECK(testing::same_values(flip(x, {0, -1}), tensor(std::vector<double>{5, 4, 3, 2, 1, 0}, {2, 3})));
  CHECK(testing::same_values(x.flip({1}), flip(x, {1})));  // the Tensor methods, as LibTorch's
  CHECK(testing::same_values(x.repeat({1, 2}), repeat(x, {1, 2})));
  CHECK(testing::same_values(flip(x.t(), {0}), flip(x, {1}).t()));
  const Tensor same = flip(x, {});
  CHECK(testing::same_values(same, x));
  CHECK(!same.is_same(x));  // a copy, as PyTorch's
  // repeat: tiles in order, extra leading dims.
  CHECK(testing::same_values(repeat(tensor(std::vector<double>{1, 2}, {2}), {2}), tensor(std::vector<double>{1, 2, 1, 2}, {4})));
  const Tensor r = repeat(x, {2, 1, 2});
  CHECK(r.sizes() == IntList{2, 2, 6});
  CHECK(testing::same_values(r.select(1, 0).select(0, 1), tensor(std::vector<double>{0, 1, 2, 0, 1, 2}, {6})));
  CHECK(repeat(x, {0, 1}).sizes() == IntList{0, 3});
  CHECK(gradcheck([](const tensor_list& t) { return flip(t[0], {0, 2}) * 1.5; }, {testing::leaf({2, 3, 2})}) == "");
  CHECK(gradcheck([](const tensor_list& t) { return repeat(t[0], {3, 1, 2}); }, {testing::leaf({2, 3})}) == "");
  CHECK_THROWS_WITH(repeat(x, {2}), Catch::Contains("at least one per dim"));
  CHECK_THROWS_WITH(flip(x, {1, 1}), Catch::Contains("listed twice"));
  CHECK_THROWS_WITH(flip(x, {2}), Catch::Contains("flip: dim"));
}

TEST_CASE("multinomial: frequencies, no repeats without replacement, zero-probability categories never drawn, seeds", "[index]") {
  const Tensor p = tensor<float>({0.1f, 0.0f, 0.3f, 0.6f, 0.0f});
  manual_seed(31);
  const int64_t n = 20000;
  const Tensor s = multinomial(p, n, true);
  CHECK(s.sizes() == IntList{n});
  CHECK(s.dtype() == kInt64);
  const auto sv = vals(s);
  std::vector<double> count(5, 0.0);
  for (double v : sv) count[static_cast<size_t>(v)] += 1;
  const double probs[] = {0.1, 0.0, 0.3, 0.6, 0.0};
  for (int c = 0; c < 5; ++c) {
    const double se = std::sqrt(n * probs[c] * (1 - probs[c]));
    INFO("category " << c << ": " << count[c] << " draws, expected " << n * probs[c]);
    CHECK(std::abs(count[c] - n * probs[c]) <= 5 * se);
  }
  // Unnormalized 2-d rows without replacement: distinct draws, never a zero-probability category.
  manual_seed(32);
  const Tensor rows = tensor<double>({1, 0, 2, 3, 0.5, 0, 0, 7, 1, 1}, {2, 5});
  for (int rep = 0; rep < 200; ++rep) {
    const auto d = vals(multinomial(rows, 3, false));
    for (int r = 0; r < 2; ++r) {
      std::set<double> seen(d.begin() + r * 3, d.begin() + r * 3 + 3);
      CHECK(seen.size() == 3);
      for (double c : seen) CHECK(vals(rows)[r * 5 + static_cast<int>(c)] > 0.0);
    }
  }
  // The first draw without replacement follows the probabilities too.
  manual_seed(33);
  const auto first = vals(multinomial(tensor<float>({1, 3}).expand({4000, 2}).contiguous(), 1, false));
  const double ones_ = std::count(first.begin(), first.end(), 1.0);
  CHECK(std::abs(ones_ - 3000) <= 5 * std::sqrt(4000 * 0.75 * 0.25));
  manual_seed(34);
  const Tensor a = multinomial(rows, 2, true);
  manual_seed(34);
  CHECK(same(multinomial(rows, 2, true), a));
  CHECK(multinomial(rows.to(kFloat16), 3, false).sizes() == IntList{2, 3});
}

TEST_CASE("index errors name the op, the bad value, its position and the valid range", "[index][errors]") {
  const Tensor x = randn_f({3, 4}, 40);
  CHECK_THROWS_WITH(index_select(x, 1, idx64({0, 4})),
                    Contains("index_select: index value 4 at position 1") && Contains("indices must be in [0, 4)"));
  CHECK_THROWS_WITH(index_select(x, 0, idx64({-1})), Contains("index value -1 at position 0") && Contains("[0, 3)"));
  CHECK_THROWS_WITH(index_select(x, 0, tensor<float>({0})), Contains("index_select: index must hold i64 or i32"));
  CHECK_THROWS_WITH(index_select(x, 2, idx64({0})), Contains("index_select"));
  CHECK_THROWS_WITH(index_select(x, 0, idx64({0, 1}, {1, 2})), Contains("index must be 1-d"));
  CHECK_THROWS_WITH(index_add(x, 0, idx64({3}), randn_f({1, 4}, 1)), Contains("index_add: index value 3 at position 0"));
  CHECK_THROWS_WITH(index_add(x, 0, idx64({0}), randn_f({2, 4}, 1)), Contains("index_add: source") && Contains("must have size 1 in dim 0"));
  CHECK_THROWS_WITH(index_add(x, 0, idx64({0}), randn_f({1, 4}, 1).to(kFloat64)), Contains("must have the dtype of self"));
  CHECK_THROWS_WITH(index_add(ones({2}, kBool), 0, idx64({0}), ones({1}, kBool)), Contains("index_add: bool tensors are not supported"));
  CHECK_THROWS_WITH(index_add(zeros({2}, kInt64), 0, idx64({0}), ones({1}, kInt64), 0.5), Contains("alpha 0.5 must be a whole number"));
  CHECK_THROWS_WITH(gather(x, 1, idx64({0, 9, 1, 2}, {2, 2})),
                    Contains("gather: index value 9 at position [0, 1]") && Contains("for dim 1 of self f32[3, 4]") && Contains("[0, 4)"));
  CHECK_THROWS_WITH(gather(x, 1, idx64({0, 1})), Contains("gather: index i64[2] on cpu must have as many dims as self"));
  CHECK_THROWS_WITH(gather(x, 1, idx64({0, 0, 0, 0, 0, 0, 0, 0}, {4, 2})), Contains("is larger than self f32[3, 4] on cpu in dim 0"));
  CHECK_THROWS_WITH(scatter(x, 0, idx64({3, 0}, {1, 2}), randn_f({1, 2}, 1)), Contains("scatter: index value 3 at position [0, 0]"));
  CHECK_THROWS_WITH(scatter(x, 0, idx64({0, 0}, {1, 2}), randn_f({1, 1}, 1)), Contains("is larger than src f32[1, 1] on cpu in dim 1"));
  CHECK_THROWS_WITH(scatter_add(x, 1, idx64({0, -3}, {1, 2}), randn_f({1, 2}, 1)), Contains("scatter_add: index value -3 at position [0, 1]"));
  CHECK_THROWS_WITH(scatter(zeros({2}, kInt64), 0, idx64({0}), 0.5), Contains("scatter: value 0.5 cannot be stored exactly in i64"));
  CHECK_THROWS_WITH(masked_fill(x, ones({4}, kUInt8), 0.0), Contains("masked_fill: mask must be bool"));
  CHECK_THROWS_WITH(masked_fill(x, ones({5}, kBool), 0.0), Contains("masked_fill"));
  CHECK_THROWS_WITH(masked_fill(x, ones({4}, kBool), ones({1})), Contains("masked_fill: value must be a 0-d tensor"));
  CHECK_THROWS_WITH(masked_fill(zeros({2}, kUInt8), ones({2}, kBool), 300.0), Contains("value 300 cannot be stored exactly in u8"));
  CHECK_THROWS_WITH(masked_fill(zeros({2}, kFloat16), ones({2}, kBool), 1e6), Contains("value 1e+06 overflows f16"));
  CHECK_THROWS_WITH(where(ones({2}), x, 0.0), Contains("where: condition must be bool"));
  CHECK_THROWS_WITH(tril(ones({3})), Contains("tril: input must have at least 2 dims"));
  const Tensor w = randn_f({3, 2}, 41);
  CHECK_THROWS_WITH(embedding(w, idx64({0, 2, 3}, {1, 3})),
                    Contains("embedding: index value 3 at position [0, 2]") && Contains("indices must be in [0, 3)"));
  CHECK_THROWS_WITH(embedding(w, idx64({0}), 3), Contains("embedding: padding_idx 3 must be -1 (none) or in [0, 3)"));
  CHECK_THROWS_WITH(embedding(w.reshape({6}), idx64({0})), Contains("embedding: weight must be [num_embeddings, embedding_dim]"));
  CHECK_THROWS_WITH(embedding(w.to(kInt64), idx64({0})), Contains("embedding: weight must be floating"));
  CHECK_THROWS_WITH(nn::functional::embedding(idx64({3}), w), Contains("indices must be in [0, 3)"));
  CHECK_THROWS_WITH(embedding_renorm_(w, idx64({5}), 1.0), Contains("embedding_renorm_: index value 5"));
  CHECK_THROWS_WITH(embedding_renorm_(w, idx64({0}), 1.0, 0.0), Contains("norm_type must be positive"));
  CHECK_THROWS_WITH(embedding_renorm_(w.t(), idx64({0}), 1.0), Contains("must be contiguous"));
  CHECK_THROWS_WITH(topk(x, 5, 1), Contains("topk: k (5) must be in [0, 4]"));
  CHECK_THROWS_WITH(topk(ones({2}, kBool), 1), Contains("topk: bool tensors are not supported"));
  CHECK_THROWS_WITH(multinomial(tensor<float>({0.5f, -0.1f}), 1), Contains("multinomial: probs must be finite and non-negative, got -0.1"));
  CHECK_THROWS_WITH(multinomial(zeros({2, 3}), 1), Contains("multinomial: row 0") && Contains("sums to zero"));
  CHECK_THROWS_WITH(multinomial(tensor<float>({0.5f, 0.0f, 0.5f}), 3, false), Contains("has only 2 positive entries"));
  CHECK_THROWS_WITH(multinomial(ones({2}), 3, false), Contains("cannot draw 3 samples without replacement from 2 categories"));
  CHECK_THROWS_WITH(multinomial(ones({2, 2, 2}), 1), Contains("multinomial: probs must be 1-d or 2-d"));
  CHECK_THROWS_WITH(multinomial(ones({2}), 0), Contains("num_samples must be positive"));
  CHECK_THROWS_WITH(multinomial(ones({2}, kInt64), 1), Contains("probs must be floating"));
}

TEST_CASE("empty inputs, strided indices and inputs large enough for the threaded paths", "[index]") {
  const Tensor x = randn_f({3, 4}, 50);
  CHECK(gather(x, 1, idx64({}, {3, 0})).sizes() == IntList{3, 0});
  CHECK(same(scatter_add(x, 1, idx64({}, {3, 0}), randn_f({3, 0}, 1)), x));
  CHECK(embedding(x, idx64({}, {2, 0})).sizes() == IntList{2, 0, 4});
  CHECK(index_select(zeros({0, 4}), 1, idx64({1, 1})).sizes() == IntList{0, 2});
  CHECK(std::get<0>(topk(zeros({0, 5}), 2, 1)).sizes() == IntList{0, 2});
  CHECK(tril(zeros({2, 0, 3})).sizes() == IntList{2, 0, 3});
  // A transposed (non-contiguous) index tensor.
  const Tensor it = idx64({0, 1, 2, 3, 3, 2}, {2, 3}).t();  // [3, 2]
  CHECK(same(gather(x, 1, it), ref_gather(x, 1, it.contiguous())));

  // Sizes past the kernels' chunking (inner dims over 4096 elements, many rows), duplicates included.
  const Tensor big = randn_f({3, 5, 5000}, 51), src = randn_f({3, 4, 5000}, 52);
  const Tensor dup = idx64({4, 1, 4, 0});
  const Tensor out = index_add(big, 1, dup, src);
  auto ref = vals(big);
  const auto sv = vals(src);
  const int64_t rows[] = {4, 1, 4, 0};
  for (int o = 0; o < 3; ++o)
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 5000; ++i) ref[(o * 5 + rows[j]) * 5000 + i] += sv[(o * 4 + j) * 5000 + i];
  CHECK(testing::close(out, from(ref, {3, 5, 5000}), 1e-6));
  manual_seed(53);
  const Tensor bi = randint(0, 5, {3, 4, 5000});
  CHECK(testing::close(scatter_add(big, 1, bi, src), ref_scatter(big, 1, bi, src, true), 1e-6));
  CHECK(same(gather(big, 1, bi), ref_gather(big, 1, bi)));
  CHECK(same(index_select(big.transpose(0, 2), 0, idx64({4999, 0, 17})), ref_index_select(big.transpose(0, 2), 0, {4999, 0, 17})));
  CHECK(same(tril(big, 3), tril(big.contiguous(), 3)));
  const Tensor w = randn_f({50, 700}, 54);
  const Tensor ei = randint(0, 50, {300});
  const Tensor wl = w.detach().set_requires_grad(true);
  embedding(wl, ei).backward(ones({300, 700}));
  std::vector<double> counts(50, 0.0);
  for (double v : vals(ei)) counts[static_cast<size_t>(v)] += 1;
  CHECK(same(wl.grad().select(1, 699), from(counts, {50}).to(kFloat32)));
}

TEST_CASE("nn::functional spells the index, attention and sampling ops as the free functions", "[index]") {
  namespace F = mpx::nn::functional;
  manual_seed(31);
  const Tensor x = randn({3, 4}), idx = tensor(std::vector<int64_t>{2, 0, 1}, {3, 1});
  CHECK(testing::same_values(F::gather(x, 1, idx), gather(x, 1, idx)));
  CHECK(testing::same_values(F::index_select(x, 0, tensor(std::vector<int64_t>{1}, {1})), x.narrow(0, 1, 1)));
  CHECK(testing::same_values(F::tril(x), tril(x)));
  CHECK(testing::same_values(F::masked_fill(x, F::triu(ones({3, 4}), 1).to(kBool), -1.0), masked_fill(x, triu(ones({3, 4}), 1).to(kBool), -1.0)));
  CHECK(testing::same_values(std::get<1>(F::topk(x, 2)), std::get<1>(topk(x, 2))));
  CHECK(F::one_hot(tensor(std::vector<int64_t>{1, 0}, {2}), 3).sizes() == IntList{2, 3});
  const Tensor q = randn({1, 2, 5, 4});
  CHECK(testing::same_values(F::scaled_dot_product_attention(q, q, q, {}, 0.0, true), scaled_dot_product_attention(q, q, q, {}, 0.0, true)));
}
