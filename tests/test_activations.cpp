// Tests of the activations added beside the basic ones (ELU, CELU, SELU, Mish, Hardsigmoid, LogSigmoid, Softsign,
// Hardtanh, GLU, Softplus): values against PyTorch 2.15's, f64 gradchecks, the modules and functional forms, errors.
// Their kernels are formula ops, so the backend sweep and the formula-derivative test cover every dtype and device.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "tests/gradcheck.h"
#include "test_util.h"

using namespace mpx;
using Catch::Contains;
namespace F = mpx::nn::functional;

namespace {
std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
void check_values(const Tensor& got, const std::vector<double>& want, double tol) {
  const std::vector<double> v = values(got);
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i) {
    INFO("element " << i);
    CHECK(v[i] == Approx(want[i]).margin(tol));
  }
}
}  // namespace

TEST_CASE("activations equal PyTorch's values in f64 and f32, and gradcheck in f64", "[activation]") {
  const Tensor x64 = tensor(std::vector<double>{-3.5, -1.2, -0.3, 0.0, 0.4, 2.5, 25.0}, {7}).to(kFloat64);
  struct Case {
    std::string name;
    std::function<Tensor(const Tensor&)> f;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"elu", [](const Tensor& v) { return F::elu(v, nn::ELUOptions().alpha(1.3)); },
       {-1.260743401550986, -0.9084475245141374, -0.33693631311376676, 0.0, 0.4, 2.5, 25.0}},
      {"celu", [](const Tensor& v) { return F::celu(v, nn::CELUOptions().alpha(0.7)); },
       {-0.6952834371006401, -0.5739353814964333, -0.2439926597282611, 0.0, 0.4, 2.5, 25.0}},
      {"selu", [](const Tensor& v) { return F::selu(v); },
       {-1.705009340957283, -1.2285699954174891, -0.45566731537912203, 0.0, 0.4202803949421922, 2.626752468388701,
        26.26752468388701}},
      {"mish", [](const Tensor& v) { return F::mish(v); },
       {-0.10409575448637122, -0.3088357963148626, -0.15113317713833455, 0.0, 0.2890305340723631, 2.471392304557881,
        25.0}},
      {"hardsigmoid", [](const Tensor& v) { return F::hardsigmoid(v); },
       {0.0, 0.3, 0.45, 0.5, 0.5666666666666667, 0.9166666666666666, 1.0}},
      {"logsigmoid", [](const Tensor& v) { return F::logsigmoid(v); },
       {-3.5297504182726205, -1.4632824673380311, -0.8543552444685272, -0.6931471805599453, -0.5130152523999526,
        -0.07888973429254963, -1.3887943864867583e-11}},
      {"softsign", [](const Tensor& v) { return F::softsign(v); },
       {-0.7777777777777778, -0.5454545454545454, -0.23076923076923075, 0.0, 0.28571428571428575, 0.7142857142857143,
        0.9615384615384616}},
      {"hardtanh", [](const Tensor& v) { return F::hardtanh(v, nn::HardtanhOptions().min_val(-0.5).max_val(2.0)); },
       {-0.5, -0.5, -0.3, 0.0, 0.4, 2.0, 2.0}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    check_values(c.f(x64), c.want, 1e-12);
    check_values(c.f(x64.to(kFloat32)), c.want, 2e-6 * 30);
    // Away from the kinks (0 for ELU's family, +-3 for hardsigmoid, the clamp's ends for hardtanh).
    CHECK(testing::gradcheck([&](const tensor_list& in) { return c.f(in[0]); },
                             {tensor(std::vector<double>{-2.1, -0.7, 0.35, 1.4}, {4}).to(kFloat64).set_requires_grad(true)}) ==
          "");
  }
  const Tensor y = (arange(8.0, TensorOptions(kFloat64)).reshape({2, 4}) / 3.0) - 1.0;
  check_values(F::glu(y), {-0.4174297935376853, -0.33333333333333337, 0.24368619287666823, 0.5275943151159701}, 1e-12);
  CHECK(testing::gradcheck([](const tensor_list& in) { return F::glu(in[0], 0); }, {testing::leaf({4, 3})}) == "");
  CHECK_THROWS_WITH(F::glu(randn({2, 3})), Contains("needs an even size"));
  CHECK_THROWS_WITH(F::celu(x64, nn::CELUOptions().alpha(0.0)), Contains("alpha must not be 0"));
  CHECK_THROWS_WITH(F::hardtanh(x64, nn::HardtanhOptions().min_val(2).max_val(1)), Contains("greater than max_val"));
}

TEST_CASE("activation modules: LibTorch's names and options, in a Sequential, under bf16 autocast", "[activation]") {
  manual_seed(14);
  nn::Sequential net({nn::Linear(6, 8), nn::ELU(nn::ELUOptions().alpha(0.5)), nn::Linear(8, 8), nn::Mish(),
                      nn::Linear(8, 8), nn::SELU(), nn::Hardswish(), nn::Softplus(nn::SoftplusOptions().beta(2)),
                      nn::Linear(8, 8), nn::GLU(), nn::Hardtanh(), nn::Softsign(), nn::LogSigmoid(), nn::Hardsigmoid(),
                      nn::CELU()});
  CHECK(net[1]->name() == "ELU");
  CHECK(net[9]->name() == "GLU");
  const Tensor x = randn({5, 6});
  const Tensor out = net(x);
  CHECK(out.sizes() == IntList{5, 4});
  {
    amp::AutocastGuard ac(kBFloat16);
    const Tensor low = net(x);
    CHECK(testing::max_abs_diff(low.to(kFloat32), out) < 0.05);
  }
  sum(out).backward();
  for (const auto& p : net->parameters()) CHECK(p.grad().defined());
}
