// CUDA vs CPU: the index family (gathers, scatters, masked fill, triangles, embedding both ways, topk, sort, multinomial) and its device-side index checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/engine.h"
#include "core/random.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/reduction.h"
#include "test_util.h"

using namespace mpx;
using Catch::Contains;

namespace {

const std::vector<DType> kFloats = {kFloat32, kFloat16, kBFloat16, kFloat64};
const std::vector<DType> kNumeric = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8};
const std::vector<DType> kAll = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8, kBool};

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

// Seeded values in dtype dt on the CPU: normals for floating dtypes, small whole numbers otherwise.
Tensor sample(const IntList& shape, DType dt, uint64_t seed) {
  NoGradGuard ng;
  manual_seed(seed);
  if (dt == kBool) return gt(randn(shape), 0.0);
  if (!is_floating(dt)) return randint(0, 7, shape, TensorOptions(kInt64)).to(dt);
  return randn(shape).to(dt);
}
Tensor ix(const std::vector<int64_t>& v, const IntList& shape) { return tensor<int64_t>(v, shape); }

// Data movement is exact on every dtype.
void check_exact(const Tensor& got, const Tensor& ref, const char* what) {
  INFO(what << " " << dtype_name(ref.dtype()) << " " << shape_str(ref.sizes()));
  CHECK(got.device().is_cuda());
  REQUIRE(got.sizes() == ref.sizes());
  CHECK(got.dtype() == ref.dtype());
  CHECK(testing::max_abs_diff(got.cpu(), ref) == 0.0);
}

}  // namespace

TEST_CASE("cuda index_select, gather, scatter, masked_fill, tril/triu move exactly what the CPU moves", "[cuda][index]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kAll) {
    const Tensor x = sample({4, 5, 3}, dt, 1);
    const Tensor xt = x.transpose(0, 2);  // strided [3, 5, 4]
    const Tensor i1 = ix({3, 0, 3, 1}, {4});
    check_exact(index_select(gpu(x), 0, gpu(i1)), index_select(x, 0, i1), "index_select dim 0");
    check_exact(index_select(gpu(xt), -1, gpu(i1.to(kInt32))), index_select(xt, -1, i1), "index_select strided");
    const Tensor ig = ix({2, 0, 4, 4, 1, 0}, {1, 3, 2});
    check_exact(gather(gpu(x), 1, gpu(ig)), gather(x, 1, ig), "gather");
    check_exact(gather(gpu(xt), 1, gpu(ig)), gather(xt, 1, ig), "gather strided");
    const Tensor iu = ix({4, 0, 1, 3, 2, 0}, {1, 3, 2});  // unique along dim 1 within each (i, k)
    const Tensor src = sample({2, 3, 3}, dt, 2);
    check_exact(scatter(gpu(x), 1, gpu(iu), gpu(src)), scatter(x, 1, iu, src), "scatter");
    check_exact(scatter(gpu(x), 1, gpu(iu), 1.0), scatter(x, 1, iu, 1.0), "scatter value");
    const Tensor m = gt(sample({5, 1}, kFloat32, 3), 0.0);
    check_exact(masked_fill(gpu(x), gpu(m), 1.0), masked_fill(x, m, 1.0), "masked_fill");
    check_exact(masked_fill(gpu(xt), gpu(m.t()), 0.0), masked_fill(xt, m.t(), 0.0), "masked_fill strided");
    check_exact(where(gpu(m), gpu(x), 1.0), where(m, x, 1.0), "where with a scalar other");
    check_exact(where(gpu(m), 0.0, gpu(xt)), where(m, 0.0, xt), "where with a scalar input");
    check_exact(tril(gpu(x), -1), tril(x, -1), "tril");
    check_exact(triu(gpu(xt), 1), triu(xt, 1), "triu strided");
  }
}

TEST_CASE("cuda index_add and scatter_add accumulate duplicates as the CPU does", "[cuda][index]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kNumeric) {
    const Tensor self = sample({5, 6}, dt, 4);
    const Tensor src = sample({5, 4}, dt, 5);
    const Tensor dup = ix({2, 0, 2, 2}, {4});
    const double alpha = is_floating(dt) ? 0.5 : 2.0;
    const Tensor a = index_add(gpu(self), 1, gpu(dup), gpu(src), alpha), b = index_add(self, 1, dup, src, alpha);
    if (is_floating(dt)) testing::check_cuda_close(a, b, dt, "index_add");
    else check_exact(a, b, "index_add");
    const Tensor is = ix({1, 1, 4, 0, 1, 1, 1, 0}, {2, 4});
    const Tensor c = scatter_add(gpu(self), 0, gpu(is), gpu(src)), d = scatter_add(self, 0, is, src);
    if (is_floating(dt)) testing::check_cuda_close(c, d, dt, "scatter_add");
    else check_exact(c, d, "scatter_add");
  }
}

TEST_CASE("cuda embedding: forward exact, backward (atomic and deterministic) matches the CPU's f32 sums", "[cuda][index]") {
  if (!testing::cuda_ready()) return;
  manual_seed(6);
  // A long run of one index (atomics contend; the sorted path sums a long run) and a padding row.
  std::vector<int64_t> v(4000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 3 == 0 ? 7 : static_cast<int64_t>((i * 37) % 50);
  const Tensor idx = tensor<int64_t>(v, {40, 100});
  for (DType dt : kFloats) {
    const Tensor w = sample({50, 24}, dt, 7);
    const Tensor g = sample({40, 100, 24}, dt, 8);
    const Tensor wc = w.detach().set_requires_grad(true);
    const Tensor e = embedding(wc, idx, 5);
    check_exact(embedding(gpu(w), gpu(idx), 5), e.detach(), "embedding forward");
    const Tensor ref = autograd::grad({sum(e * g)}, {wc})[0];
    for (bool det : {false, true}) {
      const Tensor wg = gpu(w).detach().set_requires_grad(true);
      const Tensor got = autograd::grad({sum(embedding(wg, gpu(idx.to(kInt32)), 5, det) * gpu(g))}, {wg})[0];
      testing::check_cuda_close(got, ref, dt, det ? "embedding backward deterministic" : "embedding backward");
      CHECK(testing::max_abs_diff(got.select(0, 5).cpu(), zeros({24}, dt)) == 0.0);
    }
    // The deterministic sums repeat bit for bit.
    const Tensor wg = gpu(w).detach().set_requires_grad(true);
    const Tensor g1 = autograd::grad({sum(embedding(wg, gpu(idx), -1, true) * gpu(g))}, {wg})[0];
    const Tensor g2 = autograd::grad({sum(embedding(wg, gpu(idx), -1, true) * gpu(g))}, {wg})[0];
    CHECK(testing::max_abs_diff(g1.cpu(), g2.cpu()) == 0.0);
  }
  // masked_fill's gradient reaches self and the 0-d value on the device as on the CPU.
  {
    const Tensor x = sample({6, 5}, kFloat32, 15), m = gt(sample({5}, kFloat32, 16), 0.0), g = sample({6, 5}, kFloat32, 17);
    const Tensor xc = x.detach().set_requires_grad(true), vc = full({}, 2.0).set_requires_grad(true);
    const Tensor xg = gpu(x).detach().set_requires_grad(true), vg = gpu(full({}, 2.0)).set_requires_grad(true);
    const tensor_list rc = autograd::grad({sum(masked_fill(xc, m, vc) * g)}, {xc, vc});
    const tensor_list rg = autograd::grad({sum(masked_fill(xg, gpu(m), vg) * gpu(g))}, {xg, vg});
    check_exact(rg[0], rc[0], "masked_fill gradient of self");
    testing::check_cuda_close(rg[1], rc[1], kFloat32, "masked_fill gradient of value");
  }
  // embedding_renorm_ on the device.
  Tensor w = sample({10, 4}, kFloat32, 9) * 3.0, wd = gpu(w);
  embedding_renorm_(w, ix({1, 3, 3, 9}, {4}), 1.0);
  embedding_renorm_(wd, gpu(ix({1, 3, 3, 9}, {4})), 1.0);
  testing::check_cuda_close(wd, w, kFloat32, "embedding_renorm_");
}

TEST_CASE("cuda topk: values and indices as the CPU's, ties and NaN included, and its gradient", "[cuda][index]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kNumeric) {
    for (const IntList& shape : {IntList{6, 9}, IntList{3, 1000}, IntList{2, 300, 5}}) {
      const Tensor x = is_floating(dt) ? sample(shape, dt, 10) : randint(0, 4, shape, TensorOptions(kInt64)).to(dt);  // many ties
      for (bool largest : {true, false}) {
        auto [v, i] = topk(gpu(x), 4, 1, largest);
        auto [rv, ri] = topk(x, 4, 1, largest);
        check_exact(v, rv, "topk values");
        check_exact(i, ri, "topk indices");
      }
    }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor t = tensor<double>({1, nan, 3, 3, -2, nan, 1});
  check_exact(std::get<1>(topk(gpu(t), 7)), std::get<1>(topk(t, 7)), "topk NaN");
  check_exact(std::get<1>(topk(gpu(t), 3, 0, false)), std::get<1>(topk(t, 3, 0, false)), "topk NaN smallest");
  const Tensor x = sample({4, 8}, kFloat32, 11);
  const Tensor xc = x.detach().set_requires_grad(true), xg = gpu(x).detach().set_requires_grad(true);
  const Tensor gc = autograd::grad({sum(std::get<0>(topk(xc, 3)) * ones({4, 3}))}, {xc})[0];
  const Tensor gg = autograd::grad({sum(std::get<0>(topk(xg, 3)) * gpu(ones({4, 3})))}, {xg})[0];
  check_exact(gg, gc, "topk gradient");
}

TEST_CASE("cuda sort: the CPU's values and indices (stable, NaN, a vocabulary-sized lane) and its gradient",
          "[cuda][index]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kNumeric)
    for (const IntList& shape : {IntList{6, 9}, IntList{3, 1000}, IntList{2, 300, 5}, IntList{1, 50257}}) {
      const Tensor x = is_floating(dt) ? sample(shape, dt, 10) : randint(0, 4, shape, TensorOptions(kInt64)).to(dt);
      for (bool descending : {false, true}) {
        auto [v, i] = sort(gpu(x), 1, descending);
        auto [rv, ri] = sort(x, 1, descending);
        check_exact(v, rv, "sort values");
        check_exact(i, ri, "sort indices");
      }
    }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor t = tensor<double>({1, nan, 3, 3, -2, nan, 1});
  check_exact(std::get<1>(sort(gpu(t))), std::get<1>(sort(t)), "sort NaN");
  const Tensor x = sample({4, 8}, kFloat32, 11);
  const Tensor xc = x.detach().set_requires_grad(true), xg = gpu(x).detach().set_requires_grad(true);
  const Tensor up = sample({4, 8}, kFloat32, 12);
  const Tensor gc = autograd::grad({sum(std::get<0>(sort(xc, 1, true)) * up)}, {xc})[0];
  const Tensor gg = autograd::grad({sum(std::get<0>(sort(xg, 1, true)) * gpu(up))}, {xg})[0];
  check_exact(gg, gc, "sort gradient");
}

TEST_CASE("cuda multinomial draws exactly the CPU's samples from the same seed", "[cuda][index]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats) {
    const Tensor p = abs(sample({5, 40}, dt, 12));
    for (bool repl : {true, false}) {
      manual_seed(13);
      const Tensor a = multinomial(gpu(p), 6, repl);
      manual_seed(13);
      const Tensor b = multinomial(p, 6, repl);
      check_exact(a, b, repl ? "multinomial with replacement" : "multinomial without replacement");
    }
  }
}

TEST_CASE("cuda out-of-range indices are errors before any kernel runs", "[cuda][index][errors]") {
  if (!testing::cuda_ready()) return;
  const Tensor x = gpu(sample({3, 4}, kFloat32, 14));
  CHECK_THROWS_WITH(index_select(x, 1, gpu(ix({0, 4}, {2}))),
                    Contains("index_select: index value 4 at position 1") && Contains("[0, 4)"));
  CHECK_THROWS_WITH(gather(x, 0, gpu(ix({0, -1}, {1, 2}))), Contains("gather: index value -1 at position [0, 1]"));
  CHECK_THROWS_WITH(scatter_add(x, 1, gpu(ix({9}, {1, 1})), x), Contains("scatter_add: index value 9"));
  CHECK_THROWS_WITH(embedding(x, gpu(ix({2, 3}, {2}))), Contains("embedding: index value 3 at position 1"));
  CHECK_THROWS_WITH(index_select(x, 0, ix({0}, {1})), Contains("must be on the device of"));
}
