// Gradient hooks: Tensor::register_hook, register_post_accumulate_grad_hook, autograd::queue_callback.
#include <catch2/catch.hpp>

#include <mpx/mpx.h>

using namespace mpx;

TEST_CASE("register_hook on a leaf replaces or observes its gradient before accumulation", "[hooks]") {
  Tensor x = tensor<float>({1, 2, 3}).set_requires_grad();
  int seen = 0;
  double last = 0;
  x.register_hook([&](const Tensor& g) {
    ++seen;
    last = g.sum().item<double>();  // runs first: sees the gradient before the next hook scales it
  });
  x.register_hook([](const Tensor& g) { return g * 10.0; });
  (x * 2.0).sum().backward();
  REQUIRE(seen == 1);
  REQUIRE(last == 6.0);
  REQUIRE(allclose(x.grad(), full({3}, 20.0)));
  // A second backward: hooks see the new gradient only, accumulation adds the replaced one.
  (x * 1.0).sum().backward();
  REQUIRE(seen == 2);
  REQUIRE(last == 3.0);
  REQUIRE(allclose(x.grad(), full({3}, 30.0)));
}

TEST_CASE("register_hook on a non-leaf changes what flows further down", "[hooks]") {
  Tensor x = tensor<float>({1, 2}).set_requires_grad();
  Tensor y = x * 3.0;
  y.register_hook([](const Tensor& g) { return g + 1.0; });
  (y * y).sum().backward();  // dL/dy = 2y = (6, 12), +1 -> (7, 13), dL/dx = 3 * that
  REQUIRE(allclose(x.grad(), tensor<float>({21, 39})));
  // autograd::grad sees hooked gradients too.
  Tensor a = tensor<float>({2}).set_requires_grad();
  Tensor b = a * a;
  b.register_hook([](const Tensor& g) { return g * 0.5; });
  auto gs = autograd::grad({b.sum()}, {a});
  REQUIRE(allclose(gs[0], tensor<float>({2})));
}

TEST_CASE("a hook returning a wrong shape is a clear error", "[hooks]") {
  Tensor x = tensor<float>({1, 2}).set_requires_grad();
  x.register_hook([](const Tensor&) { return zeros({3}); });
  REQUIRE_THROWS_WITH(x.sum().backward(), Catch::Contains("same shape"));
}

TEST_CASE("post-accumulate-grad hooks run once per backward, after .grad is updated", "[hooks]") {
  Tensor w1 = tensor<float>({1, 2}).set_requires_grad();
  Tensor w2 = tensor<float>({3, 4}).set_requires_grad();
  std::vector<std::string> order;
  w1.register_post_accumulate_grad_hook([&](const Tensor& p) {
    order.push_back("w1");
    REQUIRE(p.is_same(w1));
    REQUIRE(allclose(p.grad(), tensor<float>({4, 5})));  // w2 + 1: both uses already summed
  });
  w2.register_post_accumulate_grad_hook([&](const Tensor& p) {
    order.push_back("w2");
    REQUIRE(allclose(p.grad(), tensor<float>({1, 2})));
  });
  Tensor h = w1 * w2;       // first use of w1
  Tensor out = h + w1;      // second use
  out.sum().backward();
  REQUIRE(order.size() == 2);
  REQUIRE(std::count(order.begin(), order.end(), "w1") == 1);
}

TEST_CASE("hooks are removed by id, registering where no gradient can come is an error", "[hooks]") {
  Tensor x = tensor<float>({1}).set_requires_grad();
  int calls = 0;
  uint64_t id = x.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  uint64_t id2 = x.register_hook([](const Tensor& g) { return g * 0.0; });
  REQUIRE(x.remove_hook(id2));
  (x * 1.0).sum().backward();
  REQUIRE(calls == 1);
  REQUIRE(x.grad().item<float>() == 1.0f);
  REQUIRE(x.remove_hook(id));
  REQUIRE_FALSE(x.remove_hook(id));
  (x * 1.0).sum().backward();
  REQUIRE(calls == 1);
  REQUIRE_THROWS_WITH(zeros({2}).register_hook([](const Tensor& g) { return g; }),
                      Catch::Contains("does not require grad"));
  Tensor y = x * 2.0;
  REQUIRE_THROWS_WITH(y.register_post_accumulate_grad_hook([](const Tensor&) {}), Catch::Contains("not a leaf"));
}

TEST_CASE("queue_callback runs when backward has processed everything", "[hooks]") {
  Tensor a = tensor<float>({1}).set_requires_grad();
  Tensor b = tensor<float>({2}).set_requires_grad();
  int hooks = 0, at_callback = -1;
  auto hook = [&](const Tensor&) {
    if (hooks++ == 0) autograd::queue_callback([&] { at_callback = hooks; });
  };
  a.register_post_accumulate_grad_hook(hook);
  b.register_post_accumulate_grad_hook(hook);
  (a * b).sum().backward();
  REQUIRE(hooks == 2);
  REQUIRE(at_callback == 2);  // after both hooks, though queued from the first
  REQUIRE_FALSE(autograd::in_backward());
  REQUIRE_THROWS_WITH(autograd::queue_callback([] {}), Catch::Contains("outside a backward"));
}
