// Tests of cumprod and prod (ops/reduction.h): values against f64 loops, gradients with and without zeros in a lane
// (gradcheck and gradgradcheck), integer and empty inputs, autocast.
#include <catch2/catch.hpp>

#include <vector>

#include "amp/autocast.h"
#include "core/random.h"
#include "gradcheck.h"
#include "ops/reduction.h"
#include "test_util.h"

using namespace mpx;
using testing::gradcheck;
using testing::gradgradcheck;

namespace {
std::vector<double> vals(const Tensor& t) {
  const Tensor c = t.detach().to(kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
// A [3, 5] f64 leaf whose rows hold no zero, one zero, and two zeros.
Tensor with_zeros() {
  manual_seed(9);
  Tensor x = randn({3, 5}, TensorOptions(kFloat64));
  {
    NoGradGuard ng;
    x.select(0, 1).select(0, 2).fill_(0.0);
    x.select(0, 2).select(0, 1).fill_(0.0);
    x.select(0, 2).select(0, 3).fill_(0.0);
  }
  return x.detach().set_requires_grad(true);
}
}  // namespace

TEST_CASE("cumprod and prod: values along any dim, integers in i64, empty dims give 1", "[reduction][prod]") {
  const Tensor x = tensor<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(vals(cumprod(x, 1)) == std::vector<double>{1, 2, 6, 4, 20, 120});
  CHECK(vals(cumprod(x, 0)) == std::vector<double>{1, 2, 3, 4, 10, 18});
  CHECK(vals(x.cumprod(-1)) == vals(cumprod(x, 1)));
  CHECK(prod(x).item<double>() == 720.0);
  CHECK(prod(x).dim() == 0);
  CHECK(vals(prod(x, 1)) == std::vector<double>{6, 120});
  CHECK(prod(x, 0, true).sizes() == IntList{1, 3});
  CHECK(vals(x.prod(0)) == std::vector<double>{4, 10, 18});
  const Tensor i = tensor<int32_t>({2, -3, 4});
  CHECK(cumprod(i, 0).dtype() == kInt64);
  CHECK(vals(cumprod(i, 0)) == std::vector<double>{2, -6, -24});
  CHECK(prod(tensor<bool>({true, false})).dtype() == kInt64);
  CHECK(vals(prod(zeros({2, 0}), 1)) == std::vector<double>{1, 1});
  CHECK(prod(zeros({0})).item<double>() == 1.0);
  // f32 accumulates in f64 and rounds once per output.
  const Tensor f = full({40}, 1.1);
  CHECK(cumprod(f, 0).select(0, 39).item<double>() == Approx(std::pow(1.1f, 40)).epsilon(1e-6));
  {
    amp::AutocastGuard ac(kBFloat16);
    CHECK(cumprod(f.to(kBFloat16), 0).dtype() == kFloat32);
  }
  CHECK_THROWS_WITH(cumprod(x, 2), Catch::Contains("cumprod: dim"));
  CHECK_THROWS_WITH(prod(Tensor()), Catch::Contains("undefined"));
}

TEST_CASE("cumprod and prod gradients hold with zeros in a lane (gradcheck, gradgradcheck)", "[reduction][prod]") {
  for (int64_t dim : {0, 1}) {
    INFO("dim " << dim);
    CHECK(gradcheck([dim](const tensor_list& t) { return cumprod(t[0], dim); }, {with_zeros()}) == "");
    CHECK(gradcheck([dim](const tensor_list& t) { return prod(t[0], dim); }, {with_zeros()}) == "");
    CHECK(gradgradcheck([dim](const tensor_list& t) { return cumprod(t[0], dim); }, {with_zeros()}) == "");
  }
  CHECK(gradcheck([](const tensor_list& t) { return prod(t[0]); }, {testing::leaf({2, 3})}) == "");
  // One zero: its gradient is the product of the others; the others' is zero.
  Tensor z = tensor<double>({2, 0, 3}).set_requires_grad(true);
  prod(z).backward();
  CHECK(vals(z.grad()) == std::vector<double>{0, 6, 0});
}
