// Tests of the boolean-mask family (ops/logical.h): truth tables over dtypes, NaN/Inf predicates, nan_to_num and
// its gradient, any/all, nonzero, masked_select (values, broadcast, gradient), the operators, errors; CUDA against
// the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/elementwise.h"
#include "ops/logical.h"
#include "ops/reduction.h"
#include "tests/gradcheck.h"
#include "test_util.h"

using namespace mpx;
using Catch::Contains;

namespace {
std::vector<int64_t> ints(const Tensor& t) {
  const Tensor c = t.to(kInt64).contiguous().cpu();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}
const double kInf = std::numeric_limits<double>::infinity(), kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("logical_and/or/xor/not: truth tables in every dtype, NaN is true, broadcasting, the operators",
          "[logical]") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool}) {
    INFO(dtype_name(dt));
    const Tensor a = tensor(std::vector<double>{0, 0, 1, 1}, {4}).to(dt), b = tensor(std::vector<double>{0, 1, 0, 1}, {4}).to(dt);
    CHECK(logical_and(a, b).dtype() == kBool);
    CHECK(ints(logical_and(a, b)) == std::vector<int64_t>{0, 0, 0, 1});
    CHECK(ints(logical_or(a, b)) == std::vector<int64_t>{0, 1, 1, 1});
    CHECK(ints(logical_xor(a, b)) == std::vector<int64_t>{0, 1, 1, 0});
    CHECK(ints(logical_not(a)) == std::vector<int64_t>{1, 1, 0, 0});
  }
  const Tensor f = tensor(std::vector<double>{kNaN, -2.5, 0.0}, {3});
  CHECK(ints(logical_and(f, ones({3}))) == std::vector<int64_t>{1, 1, 0});
  // Mixed dtypes and a broadcast row.
  const Tensor m = tensor(std::vector<int64_t>{0, 3}, {2, 1});
  CHECK(logical_or(m, tensor(std::vector<double>{0.0, 0.5, 0.0}, {3})).sizes() == IntList{2, 3});
  CHECK(ints(logical_or(m, tensor(std::vector<double>{0.0, 0.5, 0.0}, {3}))) == std::vector<int64_t>{0, 1, 0, 1, 1, 1});
  const Tensor p = gt(tensor(std::vector<double>{1, -1, 2, -2}, {4}), 0.0), q = gt(tensor(std::vector<double>{1, 1, -1, -1}, {4}), 0.0);
  CHECK(ints(p & q) == std::vector<int64_t>{1, 0, 0, 0});
  CHECK(ints(p | q) == std::vector<int64_t>{1, 1, 1, 0});
  CHECK(ints(p ^ q) == std::vector<int64_t>{0, 1, 1, 0});
  CHECK(ints(~p) == std::vector<int64_t>{0, 1, 0, 1});
  CHECK(ints(p.logical_and(q)) == ints(p & q));
  CHECK_THROWS_WITH(p & ones({4}), Contains("masks combine as bool tensors"));
  CHECK_THROWS_WITH(~tensor(std::vector<int64_t>{1}, {1}), Contains("integer bitwise"));
  CHECK_THROWS_WITH(logical_and(p, ones({3})), Contains("broadcast"));
}

TEST_CASE("isnan, isinf, isfinite and nan_to_num in every floating dtype, integers have neither", "[logical]") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    const Tensor x = tensor(std::vector<double>{1.5, kNaN, kInf, -kInf, 0.0, -3.0}, {6}).to(dt);
    CHECK(ints(isnan(x)) == std::vector<int64_t>{0, 1, 0, 0, 0, 0});
    CHECK(ints(isinf(x)) == std::vector<int64_t>{0, 0, 1, 1, 0, 0});
    CHECK(ints(isfinite(x)) == std::vector<int64_t>{1, 0, 0, 0, 1, 1});
    const Tensor y = nan_to_num(x).to(kFloat64);
    const double top = dt == kFloat16 ? 65504.0 : dt == kBFloat16 ? 3.3895313892515355e38
                       : dt == kFloat32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
    CHECK(y.dtype() == kFloat64);
    CHECK(y[1].item<double>() == 0.0);
    CHECK(y[2].item<double>() == top);
    CHECK(y[3].item<double>() == -top);
    CHECK(y[0].item<double>() == 1.5);
    const Tensor z = nan_to_num(x, 7.0, 100.0, -100.0).to(kFloat64);
    CHECK(ints(z) == std::vector<int64_t>{1, 7, 100, -100, 0, -3});
  }
  const Tensor i = tensor(std::vector<int64_t>{1, -2}, {2});
  CHECK(ints(isnan(i)) == std::vector<int64_t>{0, 0});
  CHECK(ints(isinf(i)) == std::vector<int64_t>{0, 0});
  CHECK(ints(isfinite(i)) == std::vector<int64_t>{1, 1});
  CHECK(ints(nan_to_num(i)) == std::vector<int64_t>{1, -2});
  // The replaced elements get no gradient, the others all of it (PyTorch's grad * isfinite(x)).
  const Tensor x = tensor(std::vector<double>{2.0, kNaN, kInf, -1.0}, {4}).to(kFloat64).set_requires_grad(true);
  sum(nan_to_num(x) * 3.0).backward();
  CHECK(ints(x.grad()) == std::vector<int64_t>{3, 0, 0, 3});
  CHECK(testing::gradcheck([](const tensor_list& in) { return nan_to_num(in[0] * in[0], 0.0, 5.0, -5.0); },
                           {testing::leaf({3, 4})}) == "");
  CHECK_THROWS_WITH(isnan(Tensor()), Contains("isnan: the tensor is undefined"));
}

TEST_CASE("any and all: whole tensors, along a dim with keepdim, empty tensors, NaN", "[logical]") {
  const Tensor x = tensor(std::vector<double>{0, 0, 0, 1, 2, 0, kNaN, 3, 4}, {3, 3});
  CHECK(any(x).item<bool>());
  CHECK_FALSE(all(x).item<bool>());
  CHECK(any(x).dim() == 0);
  CHECK(ints(any(x, 1)) == std::vector<int64_t>{0, 1, 1});
  CHECK(ints(all(x, 1)) == std::vector<int64_t>{0, 0, 1});  // NaN counts as true
  CHECK(ints(all(x, 0)) == std::vector<int64_t>{0, 0, 0});
  CHECK(any(x, 0, true).sizes() == IntList{1, 3});
  CHECK(ints(x.any(-1)) == ints(any(x, 1)));
  CHECK_FALSE(any(zeros({0, 4})).item<bool>());
  CHECK(all(zeros({0, 4})).item<bool>());
  CHECK(ints(all(zeros({0, 4}), 0)) == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(all(gt(ones({5}), 0.0)).item<bool>());
  CHECK_THROWS_WITH(any(x, 2), Contains("dim"));
}

TEST_CASE("nonzero and masked_select: row-major order, shapes, broadcast masks, gradients", "[logical]") {
  const Tensor x = tensor(std::vector<double>{0, 5, 0, 0, -1, 2, 0, 0, 0, 7, 0, 0}, {2, 2, 3});
  const Tensor nz = nonzero(x);
  CHECK(nz.dtype() == kInt64);
  CHECK(nz.sizes() == IntList{4, 3});
  CHECK(ints(nz) == std::vector<int64_t>{0, 0, 1, 0, 1, 1, 0, 1, 2, 1, 1, 0});
  CHECK(nonzero(zeros({3, 2})).sizes() == IntList{0, 2});
  CHECK(nonzero(ones({2, 2})).sizes() == IntList{4, 2});
  CHECK(nonzero(zeros({0})).sizes() == IntList{0, 1});
  CHECK(nonzero(full({}, 3.0)).sizes() == IntList{1, 0});
  CHECK(ints(nonzero(tensor(std::vector<int64_t>{0, 4, 0, 9, 9}, {5}))) == std::vector<int64_t>{1, 3, 4});
  // A long row: the running count crosses block boundaries of the scan kernels.
  const Tensor big = gt(randn({5000}), 0.7);
  const std::vector<int64_t> flags = ints(big), got = ints(nonzero(big));
  std::vector<int64_t> want;
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) want.push_back(static_cast<int64_t>(i));
  CHECK(got == want);

  const Tensor v = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor mask = gt(v, 3.5);
  CHECK(ints(masked_select(v, mask)) == std::vector<int64_t>{4, 5, 6});
  // A mask row broadcast over x's rows.
  const Tensor row = gt(tensor(std::vector<double>{1, 0, 1}, {3}), 0.0);
  CHECK(ints(masked_select(v, row)) == std::vector<int64_t>{1, 3, 4, 6});
  CHECK(masked_select(v, zeros({2, 3}).to(kBool)).sizes() == IntList{0});
  CHECK(testing::gradcheck([&](const tensor_list& in) { return masked_select(in[0] * in[0], row); },
                           {testing::leaf({2, 3})}) == "");
  CHECK_THROWS_WITH(masked_select(v, ones({2, 3})), Contains("the mask must be a bool tensor"));
  CHECK_THROWS_WITH(masked_select(v, ones({4}).to(kBool)), Contains("broadcast"));
}

TEST_CASE("cuda masks match the CPU: logical ops, predicates, any/all, nonzero, masked_select", "[cuda][logical]") {
  if (!testing::cuda_ready()) return;
  const Device g = Device::cuda();
  const Tensor x = tensor(std::vector<double>{0, 5, kNaN, 0, -1, kInf, 0, 0, 3, 7, 0, -kInf}, {3, 4});
  const Tensor y = gt(randn({3, 4}), 0.0);
  CHECK(ints(logical_xor(x.to(g), y.to(g))) == ints(logical_xor(x, y)));
  CHECK(ints(isnan(x.to(g).to(kFloat16))) == ints(isnan(x)));
  CHECK(ints(isfinite(x.to(g))) == ints(isfinite(x)));
  CHECK(ints(any(x.to(g), 1)) == ints(any(x, 1)));
  CHECK(ints(nonzero(x.to(g))) == ints(nonzero(x)));
  const Tensor big = gt(randn({70000}), 0.3);
  CHECK(ints(nonzero(big.to(g))) == ints(nonzero(big)));
  CHECK(testing::max_abs_diff(nan_to_num(x.to(g)).cpu(), nan_to_num(x)) == 0.0);
  CHECK(ints(masked_select(nan_to_num(x).to(g), y.to(g))) == ints(masked_select(nan_to_num(x), y)));
}
