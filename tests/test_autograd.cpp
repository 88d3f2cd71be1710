// Tests of the autograd engine: accumulation, retain_graph, no-grad, detach, grad(), custom
// Functions, in-place detection and second derivatives.
#include <catch2/catch.hpp>

#include "autograd/function.h"
#include "gradcheck.h"
#include "ops/conv.h"
#include "ops/linalg.h"
#include "ops/shape.h"
#include "test_util.h"

using namespace mpx;

TEST_CASE("backward accumulates into leaves through shared subgraphs", "[autograd]") {
  Tensor x = tensor(std::vector<double>{1, 2, 3}).set_requires_grad(true);
  Tensor y = x * x;          // dy/dx = 2x
  Tensor z = sum(y + y * 3.0);  // 4 * x^2 -> 8x
  z.backward();
  CHECK(allclose(x.grad(), tensor(std::vector<double>{8, 16, 24})));
  // A second backward on a new graph accumulates.
  sum(x).backward();
  CHECK(allclose(x.grad(), tensor(std::vector<double>{9, 17, 25})));
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name() == "MulBackward");
}

TEST_CASE("retain_graph: a second backward needs it", "[autograd]") {
  Tensor x = tensor(std::vector<double>{2}).set_requires_grad(true);
  Tensor y = sum(exp(x) * x);
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().item<double>() == Approx(2 * (std::exp(2.0) * 3)));
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("second time") && Catch::Contains("retain_graph=true"));
}

TEST_CASE("NoGradGuard and detach cut the graph", "[autograd]") {
  Tensor x = ones({2}).set_requires_grad(true);
  {
    NoGradGuard g;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
  }
  CHECK((x * 2.0).requires_grad());
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.raw_data() == x.raw_data());
  CHECK_THROWS_WITH(sum(d).backward(), Catch::Contains("does not require grad"));
  CHECK_THROWS_WITH((x * 2.0).backward(), Catch::Contains("only for scalar outputs"));
}

TEST_CASE("autograd::grad returns gradients without touching .grad", "[autograd]") {
  Tensor x = tensor(std::vector<double>{1, 2}).set_requires_grad(true);
  Tensor w = tensor(std::vector<double>{3, 4}).set_requires_grad(true);
  Tensor y = sum(x * w);
  auto g = autograd::grad({y}, {x, w});
  CHECK(allclose(g[0], w.detach()));
  CHECK(allclose(g[1], x.detach()));
  CHECK_FALSE(x.grad().defined());
  Tensor unused = ones({1}).set_requires_grad(true);
  CHECK_THROWS_WITH(autograd::grad({sum(x * 2.0)}, {unused}), Catch::Contains("allow_unused"));
  auto g2 = autograd::grad({sum(x * 2.0)}, {unused}, {}, std::nullopt, false, true);
  CHECK_FALSE(g2[0].defined());
}

TEST_CASE("create_graph gives second derivatives (gradient penalty pattern)", "[autograd]") {
  Tensor x = tensor(std::vector<double>{0.5, -1.0, 2.0}).set_requires_grad(true);
  Tensor y = sum(pow(x, 3.0));  // dy/dx = 3x^2, d2 = 6x
  auto g = autograd::grad({y}, {x}, {}, std::nullopt, true);
  CHECK(g[0].requires_grad());
  Tensor penalty = sum(g[0] * g[0]);  // sum 9x^4 -> 36 x^3
  penalty.backward();
  CHECK(allclose(x.grad(), tensor(std::vector<double>{36 * 0.125, -36.0, 36 * 8.0})));
  // Through a non-leaf saved output (sigmoid saves its output).
  Tensor z = tensor(std::vector<double>{0.3}).set_requires_grad(true);
  auto gs = autograd::grad({sum(sigmoid(z))}, {z}, {}, std::nullopt, true);
  auto gg = autograd::grad({sum(gs[0])}, {z});
  const double s = 1 / (1 + std::exp(-0.3));
  CHECK(gg[0].item<double>() == Approx(s * (1 - s) * (1 - 2 * s)));
}

TEST_CASE("in-place modification of a saved tensor is detected", "[autograd]") {
  Tensor x = ones({3}, kFloat64).set_requires_grad(true);
  Tensor a = x * 2.0;
  Tensor e = exp(a);  // saves its output
  {
    NoGradGuard ng;  // in-place writes are only allowed outside recording
    e.detach().add_(1.0);
  }
  CHECK_THROWS_WITH(sum(e).backward(), Catch::Contains("modified by an in-place operation") && Catch::Contains("ExpBackward"));
  CHECK_THROWS_WITH(x.add_(1.0), Catch::Contains("requires grad"));
}

TEST_CASE("retain_grad keeps a non-leaf's gradient", "[autograd]") {
  Tensor x = ones({2}, kFloat64).set_requires_grad(true);
  Tensor h = x * 3.0;
  h.retain_grad();
  sum(h * h).backward();
  CHECK(allclose(h.grad(), full({2}, 6.0, kFloat64)));
}

namespace {
struct ScaledSquare : autograd::Function<ScaledSquare> {
  static Tensor forward(autograd::Context& ctx, const Tensor& x, double k) {
    ctx.save_for_backward({x});
    ctx.saved_data["k"] = k;
    return x * x * k;
  }
  static tensor_list backward(autograd::Context& ctx, const tensor_list& g) {
    Tensor x = ctx.get_saved_variables()[0];
    return {g[0] * x * (2.0 * ctx.saved_data["k"].toDouble())};
  }
};
struct TwoIn : autograd::Function<TwoIn> {
  static Tensor forward(autograd::Context& ctx, const Tensor& a, const Tensor& b) {
    ctx.save_for_backward({a, b});
    return a * b;
  }
  static tensor_list backward(autograd::Context& ctx, const tensor_list& g) {
    auto s = ctx.get_saved_variables();
    return {g[0] * s[1], g[0] * s[0]};
  }
};
}  // namespace

namespace {
int g_counted_backwards = 0;
// x * 3 whose backward counts its calls.
struct Counted : autograd::Function<Counted> {
  static Tensor forward(autograd::Context&, const Tensor& x) { return x * 3.0; }
  static tensor_list backward(autograd::Context&, const tensor_list& g) {
    ++g_counted_backwards;
    return {g[0] * 3.0};
  }
};
}  // namespace

TEST_CASE("autograd::grad at an interior tensor stops there: the graph below it does not run", "[autograd]") {
  const Tensor x = randn({4}).set_requires_grad(true), w = randn({4}).set_requires_grad(true);
  const Tensor y = Counted::apply(x);  // below the tensor asked for
  const Tensor h = y * w;              // the interior tensor
  const Tensor z = sum(h * h) + sum(Counted::apply(w));
  g_counted_backwards = 0;
  const tensor_list g = autograd::grad({z}, {h}, {}, true);
  CHECK(g_counted_backwards == 0);
  CHECK(testing::max_abs_diff(g[0], h * 2.0) < 1e-6);
  CHECK_FALSE(x.grad().defined());
  // Asking for x too runs the path to it (and only it: w's own Counted branch leads to no input asked for).
  const tensor_list g2 = autograd::grad({z}, {h, x}, {}, true);
  CHECK(g_counted_backwards == 1);
  CHECK(testing::max_abs_diff(g2[1], h * 2.0 * w * 3.0) < 1e-5);
  // And under create_graph the captured gradient is differentiable again.
  const tensor_list g3 = autograd::grad({z}, {h}, {}, true, true);
  const tensor_list gg = autograd::grad({sum(g3[0])}, {x});
  CHECK(testing::max_abs_diff(gg[0], w * 6.0) < 1e-5);
}

TEST_CASE("custom Function API", "[autograd][function]") {
  Tensor x = tensor(std::vector<double>{1, 2, 3}).set_requires_grad(true);
  Tensor y = ScaledSquare::apply(x, 0.5);
  CHECK(y.requires_grad());
  sum(y).backward();
  CHECK(allclose(x.grad(), x.detach()));
  CHECK(testing::gradcheck([](const tensor_list& in) { return TwoIn::apply(in[0], in[1]); },
                           {testing::leaf({3}), testing::leaf({3})}) == "");
  Tensor nograd = tensor(std::vector<double>{1.0});
  CHECK_FALSE(ScaledSquare::apply(nograd, 2.0).requires_grad());
}

TEST_CASE("gradients flow through casts into the parameter's dtype", "[autograd]") {
  Tensor w = ones({4}, kFloat32).set_requires_grad(true);
  Tensor y = sum(w.to(kFloat16) * 3.0);
  y.backward();
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(allclose(w.grad(), full({4}, 3.0)));
}

TEST_CASE("leaves fed the same gradient buffer do not alias", "[autograd]") {
  Tensor a = zeros({3}, kFloat64).set_requires_grad(true);
  Tensor b = zeros({3}, kFloat64).set_requires_grad(true);
  sum(a + b).backward();  // AddBackward hands one buffer to both
  {
    NoGradGuard ng;
    a.mutable_grad().add_(5.0);
  }
  CHECK(allclose(b.grad(), ones({3}, kFloat64)));
}

// Sums into a node's input are taken in place on a buffer nothing else sees; a buffer the caller,
// a retained gradient, a hook or another edge still holds is never written.
TEST_CASE("gradient sums in place touch no buffer anyone else holds", "[autograd]") {
  const Tensor x = tensor(std::vector<double>{1, 2, 3}).set_requires_grad(true);
  const Tensor h = x * 2.0;
  h.retain_grad();
  Tensor seen;
  const Tensor u = h * 1.0;
  u.register_hook([&](const Tensor& g) { seen = g; });
  // h feeds four uses: three sums into its slot, one of them from u's hook-held gradient.
  const Tensor y = h + h + exp(h) + u;
  const Tensor gy = tensor(std::vector<double>{1, 10, 100});
  y.backward(gy);
  const Tensor e = exp(h.detach());
  // dy/dh = 1 + 1 + exp(h) + 1, times gy; dx = 2 dh.
  CHECK(allclose(h.grad(), gy * (e + 3.0)));
  CHECK(allclose(x.grad(), gy * (e + 3.0) * 2.0));
  CHECK(allclose(gy, tensor(std::vector<double>{1, 10, 100})));  // the caller's gradient as given
  CHECK(allclose(seen, gy));                                       // what the hook saw, unchanged
  // The same sums under create_graph (out of place, differentiable) give the same values.
  const Tensor x2 = tensor(std::vector<double>{1, 2, 3}).set_requires_grad(true);
  const Tensor h2 = x2 * 2.0;
  const tensor_list g2 = autograd::grad({h2 + h2 + exp(h2) + h2 * 1.0}, {x2}, {gy}, true, true);
  CHECK(allclose(g2[0], x.grad(), 0.0, 0.0));
}

// A leaf takes over a gradient nothing else holds when it is dense, in either layout: the
// channels-last filter gradient of a channels-last convolution is not copied on its way to
// .grad. A gradient that is a broadcast view still becomes a dense buffer of its own.
TEST_CASE("a leaf keeps a dense channels-last gradient without copying it", "[autograd][profiler]") {
  manual_seed(6);
  const Tensor x = randn({2, 3, 6, 6}).contiguous(MemoryFormat::ChannelsLast);
  Tensor w = randn({4, 3, 3, 3}).contiguous(MemoryFormat::ChannelsLast).set_requires_grad(true);
  const Tensor y = conv2d(x, w, {}, {1, 1}, {1, 1});
  const Tensor gy = ones_like(y);
  CHECK(testing::kernel_calls("copy", [&] { y.backward(gy); }) == 0);
  CHECK(w.grad().is_contiguous(MemoryFormat::ChannelsLast));
  Tensor w_rm = w.detach().contiguous().set_requires_grad(true);
  conv2d(x.contiguous(), w_rm, {}, {1, 1}, {1, 1}).backward(gy.contiguous());
  CHECK(allclose(w.grad(), w_rm.grad(), 1e-5, 1e-5));

  Tensor a = zeros({2, 3}).set_requires_grad(true);
  sum(a).backward();  // SumBackward hands over a broadcast of one value
  CHECK(a.grad().is_contiguous());
  {
    NoGradGuard ng;
    a.mutable_grad().add_(1.0);
  }
  CHECK(allclose(a.grad(), full({2, 3}, 2.0)));
}
