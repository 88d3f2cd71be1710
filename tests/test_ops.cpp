// Tests for the elementwise, reduction, linalg and shape ops: gradchecks, low-precision forwards, promotion, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "test_util.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/reduction.h"
#include "ops/shape.h"

using namespace mpx;
using testing::error_of;
using testing::max_abs_diff;
using testing::gradcheck;
using testing::gradgradcheck;
using testing::leaf;

namespace {

using Fn = testing::Fn;

// First derivatives of f, and second derivatives through f^2: the square keeps a graph
// for ops whose own second derivative is zero (relu, add, views) and still exercises f''.
void check_grads(const Fn& f, const tensor_list& in) {
  CHECK(gradcheck(f, in) == "");
  Fn sq = [f](const tensor_list& x) {
    Tensor y = f(x);
    return y * y;
  };
  CHECK(gradgradcheck(sq, in) == "");
}

// An f64 leaf with every element at least `gap` away from 0 (for kinks at 0).
Tensor leaf_away_from_zero(const IntList& shape, double gap = 0.2) {
  NoGradGuard ng;
  Tensor v = randn(shape, kFloat64);
  v = where(gt(v, 0.0), v + gap, v - gap);
  return v.detach().set_requires_grad(true);
}

// A positive f64 leaf in [lo, lo + 1).
Tensor leaf_positive(const IntList& shape, double lo = 0.5) {
  return (rand(shape, kFloat64) + lo).detach().set_requires_grad(true);
}


std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

}  // namespace

// ---------------------------------------------------------------- gradients ----

TEST_CASE("unary op gradients, first and second order", "[ops][gradcheck][unary]") {
  manual_seed(1);
  Tensor x = leaf({3, 4});
  Tensor xk = leaf_away_from_zero({3, 4});
  Tensor xp = leaf_positive({3, 4});
  struct U { const char* name; Fn f; Tensor in; };
  std::vector<U> cases = {
      {"neg", [](const tensor_list& i) { return neg(i[0]); }, x},
      {"abs", [](const tensor_list& i) { return abs(i[0]); }, xk},
      {"sqrt", [](const tensor_list& i) { return sqrt(i[0]); }, xp},
      {"rsqrt", [](const tensor_list& i) { return rsqrt(i[0]); }, xp},
      {"reciprocal", [](const tensor_list& i) { return reciprocal(i[0]); }, xp},
      {"exp", [](const tensor_list& i) { return exp(i[0]); }, x},
      {"log", [](const tensor_list& i) { return log(i[0]); }, xp},
      {"sin", [](const tensor_list& i) { return sin(i[0]); }, x},
      {"cos", [](const tensor_list& i) { return cos(i[0]); }, x},
      {"erf", [](const tensor_list& i) { return erf(i[0]); }, x},
      {"tanh", [](const tensor_list& i) { return tanh(i[0]); }, x},
      {"sigmoid", [](const tensor_list& i) { return sigmoid(i[0]); }, x},
      {"relu", [](const tensor_list& i) { return relu(i[0]); }, xk},
      {"leaky_relu", [](const tensor_list& i) { return leaky_relu(i[0], 0.1); }, xk},
      {"gelu", [](const tensor_list& i) { return gelu(i[0]); }, x},
      {"silu", [](const tensor_list& i) { return silu(i[0]); }, x},
      {"softplus", [](const tensor_list& i) { return softplus(i[0], 2.0, 20.0); }, x},
      {"softplus_threshold", [](const tensor_list& i) { return softplus(i[0] * 10.0, 1.0, 0.5); }, xk},
      {"pow_scalar", [](const tensor_list& i) { return pow(i[0], 2.5); }, xp},
      {"pow_int", [](const tensor_list& i) { return pow(i[0], 3.0); }, x},
      {"square", [](const tensor_list& i) { return square(i[0]); }, x},
      {"clamp", [](const tensor_list& i) { return clamp(i[0], -0.1, 0.1); }, xk},
      {"clamp_inside", [](const tensor_list& i) { return clamp(i[0], -10.0, 10.0); }, x},
      {"clamp_min", [](const tensor_list& i) { return clamp_min(i[0], 0.05); }, xk},
      {"clamp_max", [](const tensor_list& i) { return clamp_max(i[0], -0.05); }, xk},
      {"method_chain", [](const tensor_list& i) { return i[0].exp().log().relu().sigmoid().tanh().abs(); }, xk},
  };
  for (auto& c : cases) {
    INFO("op " << c.name);
    check_grads(c.f, {c.in});
  }
}

TEST_CASE("binary op gradients with broadcasting", "[ops][gradcheck][binary]") {
  manual_seed(2);
  Tensor a = leaf({3, 1, 4});
  Tensor b = leaf({2, 4});
  Tensor ap = leaf_positive({3, 1, 4});
  Tensor bp = leaf_positive({2, 4});
  Tensor s = leaf({});  // 0-d broadcasts against everything
  struct B { const char* name; Fn f; tensor_list in; };
  std::vector<B> cases = {
      {"add", [](const tensor_list& i) { return add(i[0], i[1]); }, {a, b}},
      {"add_alpha", [](const tensor_list& i) { return add(i[0], i[1], -2.5); }, {a, b}},
      {"sub", [](const tensor_list& i) { return sub(i[0], i[1]); }, {a, b}},
      {"sub_alpha", [](const tensor_list& i) { return sub(i[0], i[1], 0.5); }, {b, a}},
      {"mul", [](const tensor_list& i) { return mul(i[0], i[1]); }, {a, b}},
      {"div", [](const tensor_list& i) { return div(i[0], i[1]); }, {a, bp}},
      {"pow", [](const tensor_list& i) { return pow(i[0], i[1]); }, {ap, b}},
      {"maximum", [](const tensor_list& i) { return maximum(i[0], i[1]); }, {a, b}},
      {"minimum", [](const tensor_list& i) { return minimum(i[0], i[1]); }, {a, b}},
      {"mul_0d", [](const tensor_list& i) { return i[0] * i[1]; }, {b, s}},
      {"scalar_ops", [](const tensor_list& i) { return (2.0 - i[0]) * 3.0 + i[0] / 4.0 - 1.0 + 2.0 / i[1]; }, {a, bp}},
      {"operators", [](const tensor_list& i) { return -(i[0] + i[1]) * (i[0] - i[1]) / (i[1] * i[1] + 1.0); }, {a, b}},
  };
  for (auto& c : cases) {
    INFO("op " << c.name);
    check_grads(c.f, c.in);
  }
}

TEST_CASE("where, clamp, addcmul and addcdiv gradients", "[ops][gradcheck][ternary]") {
  manual_seed(3);
  Tensor a = leaf({2, 3});
  Tensor b = leaf({3});
  Tensor c = leaf({2, 1});
  Tensor cp = leaf_positive({2, 1});
  Tensor cond = tensor<bool>({true, false, true}, {3});
  check_grads([&](const tensor_list& i) { return where(cond, i[0], i[1]); }, {a, b});
  check_grads([&](const tensor_list& i) { return where(gt(i[0], 0.0).detach(), i[0] * 2.0, i[1]); }, {a, c});
  check_grads([](const tensor_list& i) { return addcmul(i[0], i[1], i[2], 0.7); }, {a, b, c});
  check_grads([](const tensor_list& i) { return addcdiv(i[0], i[1], i[2], -1.3); }, {a, b, cp});
  check_grads([](const tensor_list& i) { return clamp(i[0] * 3.0, -0.5, 0.5); }, {leaf_away_from_zero({4, 5}, 0.3)});
}

TEST_CASE("reduction gradients", "[ops][gradcheck][reduction]") {
  manual_seed(4);
  Tensor x = leaf({3, 4, 5});
  using L = IntList;
  for (bool keep : {false, true}) {
    INFO("keepdim " << keep);
    for (const IntList& dims : {L{}, L{0}, L{1}, L{2}, L{-1}, L{0, 2}, L{1, 2}, L{0, 1, 2}}) {
      INFO("dims " << shape_str(dims));
      check_grads([&](const tensor_list& i) { return sum(i[0], dims, keep); }, {x});
      check_grads([&](const tensor_list& i) { return mean(i[0], dims, keep); }, {x});
      check_grads([&](const tensor_list& i) { return var(i[0], dims, true, keep); }, {x});
      check_grads([&](const tensor_list& i) { return var(i[0], dims, false, keep); }, {x});
      check_grads([&](const tensor_list& i) { return amax(i[0], dims, keep); }, {x});
      check_grads([&](const tensor_list& i) { return amin(i[0], dims, keep); }, {x});
    }
    for (int64_t d : {0, 1, 2, -1}) {
      INFO("dim " << d);
      check_grads([&](const tensor_list& i) { return max(i[0], d, keep).first; }, {x});
      check_grads([&](const tensor_list& i) { return min(i[0], d, keep).first; }, {x});
    }
  }
  check_grads([](const tensor_list& i) { return sum(i[0]); }, {x});
  check_grads([](const tensor_list& i) { return mean(i[0]); }, {x});
  check_grads([](const tensor_list& i) { return max(i[0]); }, {x});
  check_grads([](const tensor_list& i) { return min(i[0]); }, {x});
  check_grads([](const tensor_list& i) { return norm(i[0]); }, {x});
  check_grads([](const tensor_list& i) { return mpx::std(i[0], {1}, true, false); }, {x});
  check_grads([](const tensor_list& i) { return i[0].sum({0}, true).mean({2}); }, {x});
}

// f16/bf16 GEMMs on the CPU multiply f32 copies of the operands: each result is the f32 sum
// rounded once, so it lies within one rounding (half an ulp of the dtype, plus f32's own error)
// of the exact product of the rounded inputs, whatever layout each operand has.
TEST_CASE("f16/bf16 mm and addmm on the CPU round once, whatever the operands' layout", "[ops][linalg]") {
  manual_seed(12);
  for (DType dt : {kFloat16, kBFloat16}) {
    const double half_ulp = dt == kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const Tensor a = randn({6, 40}).to(dt), b = randn({40, 9}).to(dt), c = randn({6, 9}).to(dt);
    auto check = [&](const Tensor& got, const Tensor& exact) {
      REQUIRE(got.dtype() == dt);
      const Tensor g = got.to(kFloat64).contiguous(), e = exact.contiguous();
      int64_t bad = 0;
      for (int64_t i = 0; i < e.numel(); ++i) {
        const double x = g.data_ptr<double>()[i], y = e.data_ptr<double>()[i];
        bad += std::abs(x - y) > half_ulp * std::abs(y) * 1.01 + 1e-6;
      }
      CHECK(bad == 0);
    };
    const Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64), c64 = c.to(kFloat64);
    const Tensor exact = mm(a64, b64);
    const Tensor a_cols = a.t().contiguous().t(), b_cols = b.t().contiguous().t();  // column-major
    INFO(dtype_name(dt));
    check(mm(a, b), exact);
    check(mm(a_cols, b), exact);
    check(mm(a, b_cols), exact);
    check(mm(a_cols, b_cols), exact);
    // Neither row- nor column-major: every other column of a wider matrix.
    const Tensor wide = randn({6, 80}).to(dt), every_other = wide.slice(1, 0, 80, 2);
    check(mm(every_other, b), mm(every_other.to(kFloat64), b64));
    // A weight used transposed, as linear does.
    const Tensor w = randn({9, 40}).to(dt);
    check(mm(a, w.t()), mm(a64, w.to(kFloat64).t()));
    check(addmm(c, a_cols, b, 0.5, -2.0), c64 * 0.5 + mm(a64, b64) * -2.0);
    check(bmm(stack({a, a_cols}), stack({b_cols, b})), stack({exact, exact}));
  }
}

TEST_CASE("linear algebra gradients", "[ops][gradcheck][linalg]") {
  manual_seed(5);
  Tensor a2 = leaf({3, 4}), b2 = leaf({4, 2});
  check_grads([](const tensor_list& i) { return mm(i[0], i[1]); }, {a2, b2});
  check_grads([](const tensor_list& i) { return mm(i[0].t(), i[1]); }, {leaf({4, 3}), b2});  // strided operand
  check_grads([](const tensor_list& i) { return bmm(i[0], i[1]); }, {leaf({2, 3, 4}), leaf({2, 4, 5})});
  check_grads([](const tensor_list& i) { return addmm(i[0], i[1], i[2]); }, {leaf({3, 2}), a2, b2});
  check_grads([](const tensor_list& i) { return addmm(i[0], i[1], i[2], 0.5, -2.0); }, {leaf({2}), a2, b2});
  check_grads([](const tensor_list& i) { return linear(i[0], i[1], i[2]); }, {leaf({5, 4}), leaf({3, 4}), leaf({3})});
  check_grads([](const tensor_list& i) { return linear(i[0], i[1]); }, {leaf({2, 5, 4}), leaf({3, 4})});
  check_grads([](const tensor_list& i) { return dot(i[0], i[1]); }, {leaf({4}), leaf({4})});
  // Every matmul dimension case.
  struct M { IntList a, b, out; };
  std::vector<M> cases = {
      {{4}, {4}, {}},                   // dot
      {{3, 4}, {4, 2}, {3, 2}},         // mm
      {{4}, {4, 2}, {2}},               // vector @ matrix
      {{3, 4}, {4}, {3}},               // matrix @ vector
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},   // batch @ matrix (folded)
      {{2, 3, 4}, {4}, {2, 3}},         // batch @ vector
      {{4}, {2, 4, 5}, {2, 5}},         // vector @ batch
      {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}},  // bmm
      {{2, 1, 3, 4}, {3, 4, 2}, {2, 3, 3, 2}},  // broadcast batch dims
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},   // matrix @ batch
  };
  for (auto& c : cases) {
    INFO("matmul " << shape_str(c.a) << " @ " << shape_str(c.b));
    Tensor a = leaf(c.a), b = leaf(c.b);
    CHECK(matmul(a, b).sizes() == c.out);
    check_grads([](const tensor_list& i) { return matmul(i[0], i[1]); }, {a, b});
  }
}

TEST_CASE("view, shape and cast op gradients", "[ops][gradcheck][shape]") {
  manual_seed(6);
  Tensor x = leaf({2, 3, 4});
  struct V { const char* name; Fn f; };
  std::vector<V> cases = {
      {"view", [](const tensor_list& i) { return i[0].view({6, 4}) * 1.0; }},
      {"view_infer", [](const tensor_list& i) { return i[0].view({-1}); }},
      {"reshape_copy", [](const tensor_list& i) { return i[0].transpose(0, 2).reshape({4, 6}); }},
      {"permute", [](const tensor_list& i) { return i[0].permute({2, 0, 1}); }},
      {"transpose", [](const tensor_list& i) { return i[0].transpose(1, 2); }},
      {"narrow", [](const tensor_list& i) { return i[0].narrow(2, 1, 2); }},
      {"slice_step", [](const tensor_list& i) { return i[0].slice(2, 0, 4, 2); }},
      {"slice_neg", [](const tensor_list& i) { return i[0].slice(1, -2, 3); }},
      {"select", [](const tensor_list& i) { return i[0].select(1, -1); }},
      {"index", [](const tensor_list& i) { return i[0][1]; }},
      {"expand", [](const tensor_list& i) { return i[0].narrow(1, 0, 1).expand({5, 2, 3, 4}); }},
      {"expand_as", [](const tensor_list& i) { return i[0].select(0, 0).expand_as(i[0]); }},
      {"squeeze", [](const tensor_list& i) { return i[0].narrow(1, 0, 1).squeeze(); }},
      {"squeeze_dim", [](const tensor_list& i) { return i[0].narrow(1, 0, 1).squeeze(1); }},
      {"unsqueeze", [](const tensor_list& i) { return i[0].unsqueeze(1).unsqueeze(-1); }},
      {"flatten", [](const tensor_list& i) { return i[0].flatten(1); }},
      {"unflatten", [](const tensor_list& i) { return i[0].unflatten(2, {2, 2}); }},
      {"contiguous", [](const tensor_list& i) { return i[0].transpose(0, 1).contiguous(); }},
      {"clone", [](const tensor_list& i) { return i[0].clone(); }},
      {"cast_copy", [](const tensor_list& i) { return i[0].to(kFloat64, /*non_blocking=*/false, /*copy=*/true); }},
      {"chained_views", [](const tensor_list& i) { return i[0].permute({1, 0, 2}).reshape({3, 8}).t().narrow(0, 2, 4); }},
      {"split", [](const tensor_list& i) { return split(i[0], 3, 2)[1]; }},
      {"chunk", [](const tensor_list& i) { return chunk(i[0], 2, 1)[0]; }},
      // Every piece used, one uneven: split's single backward node concatenates their gradients.
      {"split_all", [](const tensor_list& i) {
         const tensor_list p = split(i[0], 3, 2);  // [2, 3, 3] and [2, 3, 1]
         return cat({p[0] * p[1], p[1] * 3.0}, 2);
       }},
      {"sum_to", [](const tensor_list& i) { return sum_to(i[0], {3, 1}); }},
  };
  for (auto& c : cases) {
    INFO("op " << c.name);
    check_grads(c.f, {x});
  }
  Tensor y = leaf({2, 5, 4}), z = leaf({2, 3, 4});
  check_grads([](const tensor_list& i) { return cat({i[0], i[1]}, 1); }, {x, y});
  check_grads([](const tensor_list& i) { return cat({i[0], i[1], i[0]}, -2); }, {x, y});
  check_grads([](const tensor_list& i) { return stack({i[0], i[1]}, 0); }, {x, z});
  check_grads([](const tensor_list& i) { return stack({i[0], i[1]}, -1); }, {x, z});
}

TEST_CASE("casts carry gradients back in the source dtype", "[ops][cast]") {
  Tensor x = tensor<double>({1.5, -2.0, 3.25}).set_requires_grad(true);
  Tensor y = x.to(kFloat32);
  CHECK(y.dtype() == kFloat32);
  sum(y * 2.0f).backward();
  CHECK(x.grad().dtype() == kFloat64);
  CHECK(values(x.grad()) == std::vector<double>{2, 2, 2});
  // f16 leaf through an f32 computation: gradient arrives as f16.
  Tensor h = tensor<float>({0.5f, 1.0f}).to(kFloat16).set_requires_grad(true);
  sum(h.to(kFloat32) * tensor<float>({3.0f, -1.0f})).backward();
  CHECK(h.grad().dtype() == kFloat16);
  CHECK(values(h.grad()) == std::vector<double>{3, -1});
  // Integer casts cut the graph.
  CHECK(!x.to(kInt64).requires_grad());
}

// ---------------------------------------------------------------- forward values ----

TEST_CASE("unary forward values by hand in f32, f16 and bf16", "[ops][forward][unary]") {
  Tensor x32 = tensor<float>({-2.0f, -0.5f, 0.0f, 1.5f, 4.0f});
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    INFO("dtype " << dtype_name(dt));
    Tensor x = x32.to(dt);
    auto is = [&](const Tensor& t, std::vector<double> want) {
      CHECK(t.dtype() == dt);
      CHECK(values(t) == want);
    };
    is(neg(x), {2, 0.5, 0, -1.5, -4});
    is(abs(x), {2, 0.5, 0, 1.5, 4});
    is(sign(x), {-1, -1, 0, 1, 1});
    is(relu(x), {0, 0, 0, 1.5, 4});
    is(leaky_relu(x, 0.5), {-1, -0.25, 0, 1.5, 4});
    is(clamp(x, -1.0, 1.0), {-1, -0.5, 0, 1, 1});
    is(clamp_min(x, 0.0), {0, 0, 0, 1.5, 4});
    is(square(x), {4, 0.25, 0, 2.25, 16});
    is(pow(x, 3.0), {-8, -0.125, 0, 3.375, 64});
    is(x * 2.0, {-4, -1, 0, 3, 8});
    is(x + 1.0, {-1, 0.5, 1, 2.5, 5});
    is(x - x, {0, 0, 0, 0, 0});
    is(x / 2.0, {-1, -0.25, 0, 0.75, 2});
    is(maximum(x, zeros({}, dt)), {0, 0, 0, 1.5, 4});
    is(minimum(x, zeros({}, dt)), {-2, -0.5, 0, 0, 0});
    Tensor p = tensor<float>({0.25f, 1.0f, 4.0f, 16.0f}).to(dt);
    CHECK(values(sqrt(p)) == std::vector<double>{0.5, 1, 2, 4});
    CHECK(values(rsqrt(p)) == std::vector<double>{2, 1, 0.5, 0.25});
    CHECK(values(reciprocal(p)) == std::vector<double>{4, 1, 0.25, 0.0625});
    CHECK(values(log(tensor<float>({1.0f}).to(dt))) == std::vector<double>{0});
    CHECK(values(exp(zeros({2}, dt))) == std::vector<double>{1, 1});
    CHECK(values(sigmoid(zeros({1}, dt))) == std::vector<double>{0.5});
    CHECK(values(tanh(zeros({1}, dt))) == std::vector<double>{0});
    CHECK(values(gelu(zeros({1}, dt))) == std::vector<double>{0});
    CHECK(values(addcmul(x, x, x, 0.5)) == std::vector<double>{0, -0.375, 0, 2.625, 12});
    CHECK(values(addcdiv(p, p, p, 2.0)) == std::vector<double>{2.25, 3, 6, 18});
    CHECK(values(where(gt(x, 0.0), x, -x)) == std::vector<double>{2, 0.5, 0, 1.5, 4});
  }
}

TEST_CASE("f16 and bf16 results equal the f32 result rounded", "[ops][forward][lowp]") {
  manual_seed(7);
  Tensor x = randn({8, 16}) * 2.0;
  Tensor y = randn({16}) * 2.0;
  Tensor p = rand({8, 16}) * 3.0 + 0.1;
  using F1 = std::function<Tensor(const Tensor&)>;
  std::vector<std::pair<const char*, F1>> unary = {
      {"neg", [](const Tensor& t) { return neg(t); }},
      {"abs", [](const Tensor& t) { return abs(t); }},
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"sin", [](const Tensor& t) { return sin(t); }},
      {"cos", [](const Tensor& t) { return cos(t); }},
      {"erf", [](const Tensor& t) { return erf(t); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"leaky_relu", [](const Tensor& t) { return leaky_relu(t, 0.2); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"softplus", [](const Tensor& t) { return softplus(t); }},
      {"square", [](const Tensor& t) { return square(t); }},
      {"clamp", [](const Tensor& t) { return clamp(t, -1.0, 0.7); }},
  };
  std::vector<std::pair<const char*, F1>> positive = {
      {"sqrt", [](const Tensor& t) { return sqrt(t); }},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }},
      {"reciprocal", [](const Tensor& t) { return reciprocal(t); }},
      {"log", [](const Tensor& t) { return log(t); }},
      {"pow", [](const Tensor& t) { return pow(t, 1.7); }},
  };
  using F2 = std::function<Tensor(const Tensor&, const Tensor&)>;
  std::vector<std::pair<const char*, F2>> binary = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"addcmul", [](const Tensor& a, const Tensor& b) { return addcmul(a, a, b, 0.3); }},
      {"addcdiv", [](const Tensor& a, const Tensor& b) { return addcdiv(a, a, b, 0.3); }},
  };
  for (DType dt : {kFloat16, kBFloat16}) {
    INFO("dtype " << dtype_name(dt));
    // Inputs already representable in dt, so the only difference is the final rounding.
    Tensor xl = x.to(dt), yl = y.to(dt), pl = p.to(dt);
    Tensor xf = xl.to(kFloat32), yf = yl.to(kFloat32), pf = pl.to(kFloat32);
    for (auto& [name, f] : unary) {
      INFO("op " << name);
      Tensor got = f(xl);
      CHECK(got.dtype() == dt);
      CHECK(equal(got, f(xf).to(dt)));
    }
    for (auto& [name, f] : positive) {
      INFO("op " << name);
      CHECK(equal(f(pl), f(pf).to(dt)));
    }
    for (auto& [name, f] : binary) {
      INFO("op " << name);
      Tensor got = f(xl, yl);
      CHECK(got.dtype() == dt);
      CHECK(equal(got, f(xf, yf).to(dt)));
    }
    CHECK(equal(pow(pl, yl), pow(pf, yf).to(dt)));
    // Reductions accumulate wide and round once.
    CHECK(equal(sum(xl, {1}), sum(xf, {1}).to(dt)));
    CHECK(equal(mean(xl, {0}, true), mean(xf, {0}, true).to(dt)));
    CHECK(equal(sum(xl), sum(xf).to(dt)));
    CHECK(equal(amax(xl, {1}), amax(xf, {1}).to(dt)));
    CHECK(equal(max(xl, 0).first, max(xf, 0).first.to(dt)));
    CHECK(equal(max(xl, 0).second, max(xf, 0).second));
    CHECK(max_abs_diff(var(xl, {1}), var(xf, {1}).to(dt)) == 0.0);
    // GEMM accumulates in f32: within one rounding of the f32 product.
    Tensor m = mm(xl, yl.view({16, 1}));
    Tensor mf = mm(xf, yf.view({16, 1}));
    CHECK(m.dtype() == dt);
    CHECK(max_abs_diff(m, mf) <= max(abs(mf)).item<double>() * (dt == kFloat16 ? 1e-3 : 8e-3));
    // Casts round to nearest even.
    CHECK(equal(x.to(dt).to(kFloat32).to(dt), x.to(dt)));
  }
}

TEST_CASE("casts round to nearest even and saturate to inf", "[ops][cast]") {
  // f16: ulp at 1 is 2^-10; ties go to the even mantissa.
  Tensor t = tensor<float>({1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65520.0f, -70000.0f, 0x1p-25f, 0x1p-24f});
  std::vector<double> h = values(t.to(kFloat16));
  CHECK(h[0] == 1.0);
  CHECK(h[1] == 1.0 + 0x1p-9);
  CHECK(h[2] == 65504.0);
  CHECK(std::isinf(h[3]));
  CHECK((std::isinf(h[4]) && h[4] < 0));
  CHECK(h[5] == 0.0);
  CHECK(h[6] == 0x1p-24);
  // bf16: 8 bits of mantissa.
  std::vector<double> b = values(tensor<float>({1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3e38f}).to(kBFloat16));
  CHECK(b[0] == 1.0);
  CHECK(b[1] == 1.0 + 0x1p-6);
  CHECK(b[2] == Approx(3e38).epsilon(1e-2));
  // Float -> integer truncates toward zero; bool is "non-zero".
  CHECK(values(tensor<float>({-1.7f, 2.9f}).to(kInt64)) == std::vector<double>{-1, 2});
  CHECK(values(tensor<float>({0.0f, -0.5f}).to(kBool)) == std::vector<double>{0, 1});
}

TEST_CASE("reduction and linalg forward values", "[ops][forward]") {
  Tensor x = tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(values(sum(x, {0})) == std::vector<double>{5, 7, 9});
  CHECK(values(sum(x, {1}, true)) == std::vector<double>{6, 15});
  CHECK(sum(x, {1}, true).sizes() == IntList{2, 1});
  CHECK(values(mean(x, {1})) == std::vector<double>{2, 5});
  CHECK(values(var(x, {1})) == std::vector<double>{1, 1});
  CHECK(values(var(x, {1}, false)) == std::vector<double>{2.0f / 3.0f, 2.0f / 3.0f});
  CHECK(sum(x).item<double>() == 21);
  CHECK(x.max().item<double>() == 6);
  CHECK(x.min().item<double>() == 1);
  auto [mv, mi] = max(x, 1);
  CHECK(values(mv) == std::vector<double>{3, 6});
  CHECK(values(mi) == std::vector<double>{2, 2});
  CHECK(mi.dtype() == kInt64);
  CHECK(values(argmin(x, 0)) == std::vector<double>{0, 0, 0});
  CHECK(values(amax(x, {0})) == std::vector<double>{4, 5, 6});
  CHECK(norm(tensor<float>({3, 4})).item<double>() == 5.0);
  CHECK(sum(tensor<int64_t>({1, 2, 3})).dtype() == kInt64);
  CHECK(values(mm(x, x.t())) == std::vector<double>{14, 32, 32, 77});
  CHECK(values(matmul(tensor<float>({1, 1}), x)) == std::vector<double>{5, 7, 9});
  CHECK(values(addmm(tensor<float>({1, -1}), x, x.t().narrow(1, 0, 2), 2.0, 1.0)) ==
        std::vector<double>{16, 30, 34, 75});
  CHECK(values(linear(x, tensor<float>({1, 0, 0, 0, 0, 1}, {2, 3}), tensor<float>({10, 20}))) ==
        std::vector<double>{11, 23, 14, 26});
  CHECK(values(cat({x, x.narrow(1, 0, 1)}, 1)) == std::vector<double>{1, 2, 3, 1, 4, 5, 6, 4});
  CHECK(stack({x, x}, 1).sizes() == IntList{2, 2, 3});
  CHECK(values(x.t().contiguous()) == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(values(x.slice(1, 0, 3, 2)) == std::vector<double>{1, 3, 4, 6});
}

// ---------------------------------------------------------------- promotion, comparisons, errors ----

TEST_CASE("type promotion follows PyTorch", "[ops][promotion]") {
  Tensor f16 = ones({2}, kFloat16), bf16 = ones({2}, kBFloat16), f32 = ones({2}), f64 = ones({2}, kFloat64);
  Tensor i64 = ones({2}, kInt64), i32 = ones({2}, kInt32), u8 = ones({2}, kUInt8), b = ones({2}, kBool);
  CHECK((f16 + f32).dtype() == kFloat32);
  CHECK((f32 + f16).dtype() == kFloat32);
  CHECK((f16 + bf16).dtype() == kFloat32);
  CHECK((bf16 * f16).dtype() == kFloat32);
  CHECK((f32 + f64).dtype() == kFloat64);
  CHECK((i64 + f32).dtype() == kFloat32);
  CHECK((i64 + f16).dtype() == kFloat16);
  CHECK((i32 * bf16).dtype() == kBFloat16);
  CHECK((i32 + i64).dtype() == kInt64);
  CHECK((u8 + i32).dtype() == kInt32);
  CHECK((b + u8).dtype() == kUInt8);
  CHECK((f16 + f16).dtype() == kFloat16);
  // Python scalars take the tensor's dtype unless a fraction would be lost.
  CHECK((f16 * 3.0).dtype() == kFloat16);
  CHECK((i64 + 2.0).dtype() == kInt64);
  CHECK((i64 + 2.5).dtype() == kFloat32);
  CHECK(values(i64 + 2.5) == std::vector<double>{3.5, 3.5});
  // Integer division is true division.
  CHECK(div(tensor<int64_t>({3}), tensor<int64_t>({2})).dtype() == kFloat32);
  CHECK(values(div(tensor<int64_t>({3}), tensor<int64_t>({2}))) == std::vector<double>{1.5});
  CHECK(where(gt(f16, 0.0), f16, f32).dtype() == kFloat32);
  CHECK(cat({f16, f32}).dtype() == kFloat32);
  CHECK(addcmul(f16, f16, f32).dtype() == kFloat32);
}

TEST_CASE("comparisons return bool", "[ops][compare]") {
  Tensor a = tensor<float>({1, 2, 3});
  Tensor b = tensor<float>({3, 2, 1});
  CHECK(eq(a, b).dtype() == kBool);
  CHECK(values(eq(a, b)) == std::vector<double>{0, 1, 0});
  CHECK(values(ne(a, b)) == std::vector<double>{1, 0, 1});
  CHECK(values(lt(a, b)) == std::vector<double>{1, 0, 0});
  CHECK(values(le(a, b)) == std::vector<double>{1, 1, 0});
  CHECK(values(gt(a, b)) == std::vector<double>{0, 0, 1});
  CHECK(values(ge(a, b)) == std::vector<double>{0, 1, 1});
  CHECK(values(a > 1.5) == std::vector<double>{0, 1, 1});
  CHECK((a == 2.0).dtype() == kBool);
  CHECK(values(a.lt(b)) == std::vector<double>{1, 0, 0});
  // Mixed dtypes compare after promotion; broadcasting applies.
  CHECK(values(eq(tensor<int64_t>({1, 2, 3}), a)) == std::vector<double>{1, 1, 1});
  CHECK(values(gt(a.to(kFloat16), tensor<float>({2}))) == std::vector<double>{0, 0, 1});
  CHECK(gt(a.view({3, 1}), b).sizes() == IntList{3, 3});
  // NaN compares unequal to itself.
  Tensor n = tensor<float>({NAN});
  CHECK(values(ne(n, n)) == std::vector<double>{1});
  CHECK(!allclose(n, n));
  CHECK(allclose(a, a + 1e-7));
  CHECK(!equal(a, b));
  CHECK(!eq(a, b).requires_grad());
}

TEST_CASE("broadcasting and shape errors name the shapes", "[ops][errors]") {
  Tensor a = ones({2, 3}), b = ones({4});
  std::string e = error_of([&] { add(a, b); });
  CHECK_THAT(e, Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
  CHECK_THAT(error_of([&] { mul(ones({2, 3}), ones({3, 2})); }), Catch::Contains("[3, 2]"));
  CHECK_THAT(error_of([&] { where(tensor<float>({1, 0}), a, a); }), Catch::Contains("bool"));
  CHECK_THAT(error_of([&] { mm(a, a); }), Catch::Contains("mm") && Catch::Contains("[2, 3]"));
  CHECK_THAT(error_of([&] { bmm(ones({2, 3, 4}), ones({3, 4, 5})); }), Catch::Contains("bmm"));
  CHECK_THAT(error_of([&] { matmul(ones({2, 3}), ones({4, 2})); }), Catch::Contains("[4, 2]"));
  CHECK_THAT(error_of([&] { mm(a, ones({3, 2}, kFloat64)); }), Catch::Contains("dtype"));
  CHECK_THAT(error_of([&] { linear(a, ones({5, 4})); }), Catch::Contains("linear"));
  CHECK_THAT(error_of([&] { a.view({4, 2}); }), Catch::Contains("[4, 2]"));
  CHECK_THAT(error_of([&] { a.t().view({6}); }), Catch::Contains("reshape"));
  CHECK_THAT(error_of([&] { a.expand({4, 3, 2}); }), Catch::Contains("expand"));
  CHECK_THAT(error_of([&] { cat({a, ones({2, 4})}, 0); }), Catch::Contains("cat"));
  CHECK_THAT(error_of([&] { stack({a, ones({3, 2})}); }), Catch::Contains("stack"));
  CHECK_THAT(error_of([&] { a.narrow(1, 2, 2); }), Catch::Contains("narrow"));
  CHECK_THAT(error_of([&] { a.select(0, 5); }), Catch::Contains("5"));
  CHECK_THAT(error_of([&] { sum(a, {2}); }), Catch::Contains("dim"));
  CHECK_THAT(error_of([&] { clamp(a, 2.0, 1.0); }), Catch::Contains("clamp"));
  CHECK_THAT(error_of([&] { mean(tensor<int64_t>({1, 2})); }), Catch::Contains("kFloat32"));
  CHECK_THAT(error_of([&] { max(zeros({0}), 0); }), Catch::Contains("empty"));
  CHECK_THAT(error_of([&] { a.permute({0, 0}); }), Catch::Contains("permute"));
  // In-place ops on tensors that need grad are refused while grad mode is on.
  Tensor w = ones({2}).set_requires_grad(true);
  CHECK_THAT(error_of([&] { w.add_(ones({2})); }), Catch::Contains("in-place"));
}

TEST_CASE("edge cases: ties, wide accumulation, large inputs", "[ops][edge]") {
  // amax/max share the gradient among ties; max(dim) sends it to the returned index.
  Tensor x = tensor<double>({1, 3, 3}).set_requires_grad(true);
  max(x).backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 0.5, 0.5});
  Tensor y = tensor<double>({1, 3, 3}).set_requires_grad(true);
  max(y, 0).first.backward();
  CHECK(values(y.grad()) == std::vector<double>{0, 1, 0});
  // maximum splits ties evenly.
  Tensor a = tensor<double>({2, 5}).set_requires_grad(true);
  Tensor b = tensor<double>({2, 1}).set_requires_grad(true);
  sum(maximum(a, b)).backward();
  CHECK(values(a.grad()) == std::vector<double>{0.5, 1});
  CHECK(values(b.grad()) == std::vector<double>{0.5, 0});
  // f16 sums accumulate wide: 4096 ones is exact although f16 alone stalls at 2048.
  CHECK(sum(ones({4096}, kFloat16)).item<double>() == 4096.0);
  CHECK(mean(ones({5000}, kBFloat16)).item<double>() == 1.0);
  // Saturating activations stay finite for huge inputs.
  Tensor big = tensor<float>({-1000.0f, 1000.0f});
  CHECK(values(sigmoid(big)) == std::vector<double>{0, 1});
  CHECK(values(tanh(big)) == std::vector<double>{-1, 1});
  CHECK(values(softplus(big)) == std::vector<double>{0, 1000});
  CHECK(values(relu(big.to(kFloat16))) == std::vector<double>{0, 1000});
}

TEST_CASE("elementwise results keep the channels-last layout of their first input, with row-major values",
          "[ops][layout]") {
  // As on the GPU and in PyTorch: NHWC activations stay NHWC through activations, broadcast
  // adds and residual adds, computed in memory order; every value equals the row-major result.
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    INFO(dtype_name(dt));
    manual_seed(2);
    const Tensor x0 = randn({2, 8, 5, 7}).to(dt), r0 = randn({2, 8, 5, 7}).to(dt);
    const Tensor bias = randn({1, 8, 1, 1}).to(dt);
    Tensor x = x0.contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
    Tensor xr = x0.detach().set_requires_grad(true);
    const Tensor r = r0.contiguous(MemoryFormat::ChannelsLast);
    auto net = [&](const Tensor& a, const Tensor& res) { return relu(a * 2.0 + bias) + sigmoid(a) + res; };
    Tensor y = net(x, r), yr = net(xr, r0);
    CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(equal(y, yr));
    y.backward(ones_like(y));
    yr.backward(ones_like(yr));
    CHECK(x.grad().is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(equal(x.grad(), xr.grad()));
    // Comparisons, where and ternary ops follow the first full-shape input too.
    const Tensor m = gt(x, 0.0);
    CHECK(m.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(equal(m, gt(xr, 0.0)));
    const Tensor w = where(m, x, neg(x));
    CHECK(w.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(equal(w, where(gt(xr, 0.0), xr, neg(xr))));
    const Tensor c = addcmul(x, r, x, 0.5);
    CHECK(c.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(equal(c, addcmul(xr, r0, xr, 0.5)));
    // A row-major first input keeps the result row-major, whatever the second is.
    const Tensor mixed = x0 + r;
    CHECK(mixed.is_contiguous());
    CHECK(equal(mixed, x0 + r0));
    // In place into a channels-last tensor.
    Tensor t = r.clone();
    REQUIRE(t.is_contiguous(MemoryFormat::ChannelsLast));
    t.mul_(x0).add_(1.0);
    CHECK(t.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(equal(t, r0 * x0 + 1.0));
  }
}
