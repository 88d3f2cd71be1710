// Tests for einsum (against a brute-force sum over every label assignment), roll, unbind and repeat_interleave.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "core/random.h"
#include "gradcheck.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "test_util.h"

using namespace mpx;

namespace {

// einsum by definition, for equations of letters only with an explicit output: every assignment of the labels,
// the product of the operands' entries added into the output's entry.
Tensor brute_einsum(const std::string& eq, const tensor_list& xs) {
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  for (size_t b = 0;;) {
    const size_t e = eq.find(',', b);
    terms.push_back(eq.substr(b, (e == std::string::npos || e > arrow ? arrow : e) - b));
    if (e == std::string::npos || e > arrow) break;
    b = e + 1;
  }
  const std::string out = eq.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], xs[i].size(static_cast<int64_t>(d)));
  std::vector<char> labels;
  for (const auto& [c, n] : size) labels.push_back(c);
  IntList oshape;
  for (char c : out) oshape.push_back(size[c]);
  Tensor r = zeros(oshape, TensorOptions(kFloat64));
  std::vector<Tensor> cx;
  for (const Tensor& x : xs) cx.push_back(x.to(kFloat64).contiguous());
  std::map<char, int64_t> at;
  std::function<void(size_t)> walk = [&](size_t k) {
    if (k == labels.size()) {
      double p = 1;
      for (size_t i = 0; i < cx.size(); ++i) {
        int64_t off = 0;
        for (size_t d = 0; d < terms[i].size(); ++d) {
          const int64_t n = cx[i].size(static_cast<int64_t>(d));
          off += (n == 1 ? 0 : at[terms[i][d]]) * cx[i].stride(static_cast<int64_t>(d));
        }
        p *= cx[i].data_ptr<double>()[off];
      }
      int64_t o = 0;
      for (size_t d = 0; d < out.size(); ++d) o += at[out[d]] * r.stride(static_cast<int64_t>(d));
      r.data_ptr<double>()[o] += p;
      return;
    }
    for (int64_t v = 0; v < size[labels[k]]; ++v) {
      at[labels[k]] = v;
      walk(k + 1);
    }
  };
  walk(0);
  return r;
}

Tensor rnd(const IntList& s, uint64_t seed) {
  manual_seed(seed);
  return randn(s, TensorOptions(kFloat64));
}

}  // namespace

TEST_CASE("einsum equals the sum over every label assignment", "[einsum]") {
  struct Case {
    std::string eq;
    std::vector<IntList> shapes;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}},
      {"bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}},
      {"bhqk,bhkd->bhqd", {{2, 3, 4, 6}, {2, 3, 6, 5}}},
      {"ij->ji", {{3, 4}}},
      {"ij->", {{3, 4}}},
      {"ii->i", {{4, 4}}},
      {"ii->", {{4, 4}}},
      {"iij->j", {{3, 3, 2}}},
      {"i,j->ij", {{3}, {4}}},
      {"i,i->", {{5}, {5}}},
      {"bij,bjk,bkl->bil", {{2, 3, 4}, {2, 4, 5}, {2, 5, 3}}},
      {"ij,ij->ij", {{3, 4}, {3, 4}}},
      {"ijk,k->ij", {{2, 3, 4}, {4}}},
      {"bi,bj->b", {{3, 4}, {3, 5}}},
      {"ij,kj->ki", {{3, 1}, {4, 5}}},  // j of size 1 in the first operand broadcasts
      {"abc,cd,de->ea", {{2, 3, 4}, {4, 2}, {2, 3}}},
      {"ik,kj->ijk", {{2, 3}, {3, 4}}},  // a contracted-looking label kept in the output
  };
  for (const Case& c : cases) {
    INFO(c.eq);
    tensor_list xs;
    uint64_t seed = 1;
    for (const IntList& s : c.shapes) xs.push_back(rnd(s, seed++));
    const Tensor got = einsum(c.eq, xs);
    const Tensor want = brute_einsum(c.eq, xs);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(testing::max_abs_diff(got, want) < 1e-12);
  }
}

TEST_CASE("einsum: implicit output, ellipsis, spaces, integers, f32 and gradients", "[einsum]") {
  const Tensor a = rnd({3, 4}, 2), b = rnd({4, 5}, 3);
  // Implicit: the labels used once, alphabetically ("ij,jk" -> "ik"; "ba" -> "ab", a transpose).
  CHECK(testing::max_abs_diff(einsum("ij,jk", {a, b}), matmul(a, b)) < 1e-12);
  CHECK(testing::max_abs_diff(einsum("ba", {a}), a.t()) == 0.0);
  CHECK(testing::max_abs_diff(einsum(" i j , j k -> i k ", {a, b}), matmul(a, b)) < 1e-12);
  // Ellipsis: batch dims broadcast (right-aligned), in the output where written.
  const Tensor x = rnd({2, 3, 4, 5}, 4), y = rnd({3, 5, 6}, 5);
  CHECK(testing::max_abs_diff(einsum("...ij,...jk->...ik", {x, y}), matmul(x, y)) < 1e-12);
  CHECK(testing::max_abs_diff(einsum("...ij,...jk", {x, y}), matmul(x, y)) < 1e-12);
  CHECK(testing::max_abs_diff(einsum("b...->...b", {x}), x.permute({1, 2, 3, 0})) == 0.0);
  CHECK(testing::max_abs_diff(einsum("...i->...", {x}), sum(x, {3})) < 1e-12);
  // Integers contract without a GEMM.
  const Tensor ia = tensor<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3}), ib = tensor<int64_t>({1, 0, 2, 1, 0, 3}, {3, 2});
  const Tensor ic = einsum("ij,jk->ik", {ia, ib});
  CHECK(ic.dtype() == kInt64);
  CHECK(testing::max_abs_diff(ic.to(kFloat64), matmul(ia.to(kFloat64), ib.to(kFloat64))) == 0.0);
  // f32, and under autocast the contraction is bmm's: lowered.
  CHECK(testing::max_abs_diff(einsum("ij,jk->ik", {a.to(kFloat32), b.to(kFloat32)}).to(kFloat64), matmul(a, b)) < 1e-5);
  {
    amp::AutocastGuard ac(kBFloat16);
    CHECK(einsum("ij,jk->ik", {a.to(kFloat32), b.to(kFloat32)}).dtype() == kBFloat16);
  }
  // Gradients through contraction, diagonal, broadcast and a sum-only label.
  for (const std::string eq : {"bij,bjk->bik", "ii,ij->j", "ij,kj->ik", "ijk,jl->li"}) {
    INFO(eq);
    const std::vector<IntList> shapes = eq == "bij,bjk->bik" ? std::vector<IntList>{{2, 3, 4}, {2, 4, 2}}
                                        : eq == "ii,ij->j"   ? std::vector<IntList>{{3, 3}, {3, 2}}
                                        : eq == "ij,kj->ik"  ? std::vector<IntList>{{3, 1}, {2, 4}}
                                                             : std::vector<IntList>{{2, 3, 2}, {3, 2}};
    CHECK(testing::gradcheck([eq](const tensor_list& t) { return einsum(eq, t); },
                             {testing::leaf(shapes[0]), testing::leaf(shapes[1])}) == "");
  }
}

TEST_CASE("einsum names what is wrong with an equation", "[einsum]") {
  const Tensor a = rnd({3, 4}, 6), b = rnd({5, 6}, 7);
  CHECK_THROWS_WITH(einsum("ij,jk->ik", {a}), Catch::Contains("2 input terms for 1 operands"));
  CHECK_THROWS_WITH(einsum("ijk->i", {a}), Catch::Contains("has 2 dims but its term names 3"));
  CHECK_THROWS_WITH(einsum("ij,jk->ik", {a, b}), Catch::Contains("label 'j' has size 4") && Catch::Contains("5"));
  CHECK_THROWS_WITH(einsum("ij->ix", {a}), Catch::Contains("output label 'x' is not in any input"));
  CHECK_THROWS_WITH(einsum("ij->ii", {a}), Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(einsum("i1->i", {a}), Catch::Contains("unexpected character '1'"));
  CHECK_THROWS_WITH(einsum("..i..->i", {a}), Catch::Contains("'...'"));
  CHECK_THROWS_WITH(einsum("ij", {}), Catch::Contains("no operands"));
  CHECK_THROWS_WITH(einsum("ii->i", {a}), Catch::Contains("label 'i' has size 3") && Catch::Contains("4"));
}

TEST_CASE("roll, unbind and repeat_interleave as PyTorch's", "[shape]") {
  const Tensor x = arange(12.0, TensorOptions(kFloat64)).reshape({3, 4});
  // torch.roll(x, 1, 1) and (x, -1, 0), both dims at once, flattened.
  CHECK(testing::max_abs_diff(roll(x, {1}, {1}), tensor<double>({3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10}, {3, 4})) == 0.0);
  CHECK(testing::max_abs_diff(roll(x, {-1}, {0}), tensor<double>({4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 3}, {3, 4})) == 0.0);
  CHECK(testing::max_abs_diff(roll(x, {5, 2}, {1, 0}), roll(roll(x, {1}, {1}), {2}, {0})) == 0.0);
  CHECK(testing::max_abs_diff(roll(x, {2}), tensor<double>({10, 11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 4})) == 0.0);
  CHECK(testing::max_abs_diff(roll(x, {4}, {1}), x) == 0.0);
  CHECK_THROWS_WITH(roll(x, {1, 2}, {0}), Catch::Contains("2 shifts for 1 dims"));
  CHECK_THROWS_WITH(roll(x, {1}, {2}), Catch::Contains("roll: dim"));
  CHECK(testing::gradcheck([](const tensor_list& t) { return roll(t[0], {1, -2}, {0, 1}); }, {testing::leaf({3, 4})}) == "");

  const tensor_list rows = unbind(x, 1);
  REQUIRE(rows.size() == 4);
  CHECK(testing::max_abs_diff(rows[2], tensor<double>({2, 6, 10})) == 0.0);
  CHECK(rows[0].sizes() == IntList{3});
  CHECK_THROWS_WITH(unbind(full({}, 1.0)), Catch::Contains("at least one dim"));

  // torch.repeat_interleave(x, 2, dim=0) and without dim (flattened).
  const Tensor r = repeat_interleave(x, 2, 0);
  CHECK(r.sizes() == IntList{6, 4});
  CHECK(testing::max_abs_diff(r.narrow(0, 2, 2), x.narrow(0, 1, 1).expand({2, 4})) == 0.0);
  CHECK(testing::max_abs_diff(repeat_interleave(tensor<double>({1, 2, 3}), 2),
                              tensor<double>({1, 1, 2, 2, 3, 3})) == 0.0);
  CHECK(repeat_interleave(x, 3, -1).sizes() == IntList{3, 12});
  CHECK(repeat_interleave(x, 0, 1).sizes() == IntList{3, 0});
  CHECK_THROWS_WITH(repeat_interleave(x, -1, 0), Catch::Contains("non-negative"));
  CHECK(testing::gradcheck([](const tensor_list& t) { return repeat_interleave(t[0], 3, 1); }, {testing::leaf({2, 3})}) == "");
}
