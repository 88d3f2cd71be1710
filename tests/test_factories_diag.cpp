// Tests of linspace, logspace, eye, randperm, diagonal/diag, movedim, outer, trace and baddbmm: PyTorch's values and
// conventions, views that share storage, gradients, autocast and errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
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
using testing::gradcheck;
using testing::gradgradcheck;
using testing::leaf;

namespace {
std::vector<double> vals(const Tensor& t) {
  const Tensor c = t.detach().to(kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
}  // namespace

TEST_CASE("linspace and logspace: PyTorch's values, exact ends, dtypes, errors", "[factories]") {
  CHECK(vals(linspace(0, 1, 5)) == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  CHECK(linspace(0, 1, 5).dtype() == kFloat32);
  CHECK(linspace(3, 7, 0).numel() == 0);
  CHECK(vals(linspace(3, 7, 1)) == std::vector<double>{3});
  // Both ends exact however the step rounds: the second half counts back from the end.
  const auto v = vals(linspace(0.1, 0.7, 7, TensorOptions(kFloat64)));
  CHECK(v.front() == 0.1);
  CHECK(v.back() == 0.7);
  CHECK(v[5] == 0.7 - (0.7 - 0.1) / 6.0);
  CHECK(vals(linspace(0, 10, 6, TensorOptions(kInt64))) == std::vector<double>{0, 2, 4, 6, 8, 10});
  CHECK(vals(logspace(0, 2, 3)) == std::vector<double>{1, 10, 100});
  CHECK(vals(logspace(0, 3, 4, 2.0, TensorOptions(kFloat64))) == std::vector<double>{1, 2, 4, 8});
  CHECK_THROWS_WITH(linspace(0, 1, -1), Catch::Contains("steps must be non-negative"));
}

TEST_CASE("eye and randperm", "[factories]") {
  CHECK(vals(eye(3)) == std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(vals(eye(2, 3, TensorOptions(kInt64))) == std::vector<double>{1, 0, 0, 0, 1, 0});
  CHECK(eye(2, 3, TensorOptions(kInt64)).dtype() == kInt64);
  CHECK(eye(0).sizes() == IntList{0, 0});
  CHECK(eye(2, std::nullopt, TensorOptions().requires_grad(true)).requires_grad());
  CHECK_THROWS_WITH(eye(-1), Catch::Contains("non-negative"));
  manual_seed(7);
  const Tensor p = randperm(1000);
  CHECK(p.dtype() == kInt64);
  std::vector<double> s = vals(p);
  CHECK(s != vals(arange(1000)));
  std::sort(s.begin(), s.end());
  CHECK(s == vals(arange(1000)));
  manual_seed(7);
  CHECK(testing::same_values(randperm(1000), p));
  CHECK(randperm(0).numel() == 0);
  CHECK(randperm(5, TensorOptions(kInt32)).dtype() == kInt32);
}

TEST_CASE("diagonal is a view over any two dims, diag builds and reads diagonals, both differentiable", "[diag]") {
  const Tensor m = arange(12, TensorOptions(kFloat64)).view({3, 4});
  CHECK(vals(m.diagonal()) == std::vector<double>{0, 5, 10});
  CHECK(vals(m.diagonal(1)) == std::vector<double>{1, 6, 11});
  CHECK(vals(m.diagonal(-1)) == std::vector<double>{4, 9});
  CHECK(m.diagonal(5).numel() == 0);
  CHECK(m.diagonal(-3).numel() == 0);
  // A view: writing through it writes the matrix.
  Tensor w = zeros({3, 3});
  w.diagonal().fill_(2.0);
  CHECK(vals(w) == std::vector<double>{2, 0, 0, 0, 2, 0, 0, 0, 2});
  // Other dims stay in front, the diagonal comes last.
  const Tensor t = arange(24, TensorOptions(kFloat64)).view({2, 3, 4});
  const Tensor d = t.diagonal(0, 0, 2);
  CHECK(d.sizes() == IntList{3, 2});
  CHECK(vals(d) == std::vector<double>{0, 13, 4, 17, 8, 21});
  CHECK(vals(diag(tensor<double>({1, 2}), 1)) == std::vector<double>{0, 1, 0, 0, 0, 2, 0, 0, 0});
  CHECK(vals(diag(tensor<double>({1, 2}), -1)) == std::vector<double>{0, 0, 0, 1, 0, 0, 0, 2, 0});
  CHECK(vals(diag(m, 1)) == std::vector<double>{1, 6, 11});
  CHECK(diag(m).is_contiguous());
  CHECK(gradcheck([](const tensor_list& x) { return x[0].diagonal(-1, 0, 2); }, {leaf({3, 2, 4})}) == "");
  CHECK(gradgradcheck([](const tensor_list& x) { return (x[0] * x[0]).diagonal(1); }, {leaf({3, 4})}) == "");
  CHECK(gradcheck([](const tensor_list& x) { return diag(x[0], -2); }, {leaf({3})}) == "");
  CHECK(gradcheck([](const tensor_list& x) { return trace(x[0]); }, {leaf({3, 5})}) == "");
  CHECK(trace(m).item<double>() == 15.0);
  CHECK_THROWS_WITH(diag(zeros({2, 2, 2})), Catch::Contains("1-d or 2-d"));
  CHECK_THROWS_WITH(m.diagonal(0, 1, -1), Catch::Contains("must differ"));
  CHECK_THROWS_WITH(trace(zeros({3})), Catch::Contains("expected a matrix"));
}

TEST_CASE("movedim and swapaxes permute as PyTorch's", "[shape]") {
  const Tensor t = zeros({2, 3, 4, 5});
  CHECK(t.movedim(0, -1).sizes() == IntList{3, 4, 5, 2});
  CHECK(t.movedim(-1, 1).sizes() == IntList{2, 5, 3, 4});
  CHECK(t.movedim({0, 1}, {2, 3}).sizes() == IntList{4, 5, 2, 3});
  CHECK(t.movedim({3, 0}, {0, 3}).sizes() == IntList{5, 3, 4, 2});
  const Tensor x = arange(24, TensorOptions(kFloat64)).view({2, 3, 4});
  CHECK(testing::same_values(x.movedim(2, 0).contiguous(), x.permute({2, 0, 1}).contiguous()));
  CHECK(testing::same_values(x.swapaxes(0, 2).contiguous(), x.transpose(0, 2).contiguous()));
  CHECK_THROWS_WITH(t.movedim({0, 0}, {1, 2}), Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(t.movedim({0}, {1, 2}), Catch::Contains("1 source dims but 2 destinations"));
}

TEST_CASE("outer and baddbmm: values, gradients, beta 0 ignores self, autocast lowers baddbmm", "[linalg]") {
  const Tensor a = tensor<double>({1, 2, 3}), b = tensor<double>({4, 5});
  CHECK(vals(outer(a, b)) == std::vector<double>{4, 5, 8, 10, 12, 15});
  CHECK(gradcheck([](const tensor_list& x) { return outer(x[0], x[1]); }, {leaf({3}), leaf({4})}) == "");
  CHECK_THROWS_WITH(outer(zeros({2, 2}), zeros({2})), Catch::Contains("two 1-d tensors"));
  manual_seed(3);
  const Tensor s = randn({2, 1, 5}, TensorOptions(kFloat64)), x = randn({2, 3, 4}, TensorOptions(kFloat64)),
               y = randn({2, 4, 5}, TensorOptions(kFloat64));
  CHECK(testing::max_abs_diff(baddbmm(s, x, y, 0.5, 2.0), s * 0.5 + bmm(x, y) * 2.0) < 1e-12);
  CHECK(gradcheck([](const tensor_list& t) { return baddbmm(t[0], t[1], t[2], 0.5, -1.5); },
                  {leaf({3, 5}), leaf({2, 3, 4}), leaf({2, 4, 5})}) == "");
  const Tensor nan_self = full({2, 3, 5}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(kFloat64));
  CHECK(testing::same_values(baddbmm(nan_self, x, y, 0.0), bmm(x, y)));
  {
    amp::AutocastGuard ac(kBFloat16);
    CHECK(baddbmm(s.to(kFloat32), x.to(kFloat32), y.to(kFloat32)).dtype() == kBFloat16);
  }
  CHECK_THROWS_WITH(baddbmm(s, x, x), Catch::Contains("cannot batch-multiply"));
  CHECK_THROWS_WITH(baddbmm(zeros({2, 3, 6}, TensorOptions(kFloat64)), x, y), Catch::Contains("cannot be broadcast"));
  CHECK_THROWS_WITH(baddbmm(zeros({4, 2, 3, 5}, TensorOptions(kFloat64)), x, y), Catch::Contains("does not broadcast"));
}
