// LibTorch's in-place methods (math, comparisons, shape ops, detach_), new_*/ *_like options and the helpers
// its tutorials call (TensorTransform, get_batch, AnyModule::forward<>, out= forms), through <mpx/torch.h>.
#include <catch2/catch.hpp>

#include <optional>
#include <vector>

#include <mpx/torch.h>

#include "tests/test_util.h"

TEST_CASE("libtorch methods: elementwise math in place, values and autograd", "[libtorch]") {
  auto x = torch::tensor({1.0, 4.0, 9.0});
  x.sqrt_();
  REQUIRE(torch::equal(x, torch::tensor({1.0, 2.0, 3.0})));
  x.exp_().log_();
  REQUIRE(torch::allclose(x, torch::tensor({1.0, 2.0, 3.0})));
  x.neg_().abs_().pow_(2.0);
  REQUIRE(torch::allclose(x, torch::tensor({1.0, 4.0, 9.0})));
  x.pow_(torch::tensor({0.5, 0.5, 0.0}));
  REQUIRE(torch::allclose(x, torch::tensor({1.0, 2.0, 1.0})));
  x.clamp_min_(1.5).clamp_max_(1.8).sub_(0.5);
  REQUIRE(torch::allclose(x, torch::tensor({1.0, 1.3, 1.0})));
  x /= 2.0;
  x /= torch::tensor({0.5, 1.0, 0.25});
  x -= 1.0;
  REQUIRE(torch::allclose(x, torch::tensor({0.0, -0.35, 1.0})));
  x.masked_fill_(x.lt(0), 7.0);
  REQUIRE(torch::allclose(x, torch::tensor({0.0, 7.0, 1.0})));

  // A floating result cannot go into an integer tensor; a leaf that requires grad is refused.
  auto i = torch::tensor({4, 9});
  REQUIRE_THROWS_WITH(i.sqrt_(), Catch::Contains("sqrt_: the result is f32"));
  auto leaf = torch::ones({2}, torch::requires_grad());
  REQUIRE_THROWS_WITH(leaf.exp_(), Catch::Contains("leaf tensor that requires grad"));

  // Recorded on a non-leaf: the gradient is that of the in-place chain.
  auto w = torch::tensor({0.5, 1.0}, torch::requires_grad());
  auto y = w * 2;
  y.exp_();
  y.sum().backward();
  REQUIRE(torch::allclose(w.grad(), 2 * torch::exp(torch::tensor({1.0, 2.0}))));
}

TEST_CASE("libtorch methods: comparisons in place keep the tensor's dtype", "[libtorch]") {
  auto guess = torch::tensor({1, 2, 3});
  auto target = torch::tensor({1, 0, 3});
  REQUIRE(torch::sum(guess.eq_(target)).item<int64_t>() == 2);  // LibTorch's MNIST accuracy line
  REQUIRE(guess.dtype() == torch::kInt64);
  REQUIRE(torch::equal(guess, torch::tensor({1, 0, 1})));
  auto f = torch::tensor({1.0, 2.0, 3.0});
  f.gt_(2.0);
  REQUIRE(f.dtype() == torch::kFloat32);
  REQUIRE(torch::equal(f, torch::tensor({0.0f, 0.0f, 1.0f})));
  auto g = torch::tensor({1.0, 2.0, 3.0});
  g.ne_(torch::tensor({1.0, 0.0, 3.0}));
  REQUIRE(torch::equal(g, torch::tensor({0.0f, 1.0f, 0.0f})));
}

TEST_CASE("libtorch methods: shape ops in place change the tensor every handle sees", "[libtorch]") {
  auto a = torch::arange(6, torch::kFloat32).reshape({2, 3}).contiguous();
  auto alias = a;
  a.unsqueeze_(0);
  REQUIRE(alias.sizes() == torch::IntArrayRef({1, 2, 3}));
  a.squeeze_();
  REQUIRE(a.sizes() == torch::IntArrayRef({2, 3}));
  a.squeeze_(0);  // not of size 1: unchanged
  REQUIRE(a.sizes() == torch::IntArrayRef({2, 3}));
  a.t_();
  REQUIRE(a.sizes() == torch::IntArrayRef({3, 2}));
  REQUIRE(a[2][1].item<float>() == 5.0f);
  a.transpose_(0, 1);
  REQUIRE(a[1][2].item<float>() == 5.0f);

  // While autograd records, the tensor's history becomes the view op's.
  auto w = torch::ones({3}, torch::requires_grad());
  auto y = w * 2;
  y.unsqueeze_(1);
  REQUIRE(y.sizes() == torch::IntArrayRef({3, 1}));
  REQUIRE(y.grad_fn()->name().find("Unsqueeze") != std::string::npos);
  (y * torch::tensor({{1.0}, {2.0}, {3.0}})).sum().backward();
  REQUIRE(torch::allclose(w.grad(), torch::tensor({2.0, 4.0, 6.0})));
  auto leaf = torch::ones({3}, torch::requires_grad());
  REQUIRE_THROWS_WITH(leaf.unsqueeze_(0), Catch::Contains("unsqueeze_: in-place modification of a leaf"));
}

TEST_CASE("libtorch methods: detach_ cuts the tensor itself from the graph", "[libtorch]") {
  auto w = torch::ones({2}, torch::requires_grad());
  auto h = w * 3;
  REQUIRE(h.requires_grad());
  h.detach_();  // LibTorch's truncated backpropagation through time: h.detach_(), c.detach_()
  REQUIRE_FALSE(h.requires_grad());
  REQUIRE(h.grad_fn() == nullptr);
  REQUIRE(torch::equal(h, torch::full({2}, 3.0)));
  auto v = (w * 3).narrow(0, 0, 1);
  REQUIRE_THROWS_WITH(v.detach_(), Catch::Contains("use detach()"));
}

TEST_CASE("libtorch methods: new_* and *_like take their options from the tensor unless given", "[libtorch]") {
  auto d = torch::ones({2}, torch::kFloat64);
  REQUIRE(d.new_zeros({5, 3}).dtype() == torch::kFloat64);
  REQUIRE(d.new_zeros({5, 3}).sizes() == torch::IntArrayRef({5, 3}));
  REQUIRE(d.new_ones({2}, torch::kInt64).dtype() == torch::kInt64);
  REQUIRE(torch::equal(d.new_full({2}, 4.0), torch::full({2}, 4.0, torch::kFloat64)));
  REQUIRE(d.new_empty({0}).dtype() == torch::kFloat64);
  REQUIRE(torch::rand_like(d, torch::TensorOptions(torch::kFloat)).dtype() == torch::kFloat32);
  REQUIRE(torch::randn_like(d).dtype() == torch::kFloat64);
  REQUIRE(torch::zeros_like(d, torch::kInt64).dtype() == torch::kInt64);
  REQUIRE(torch::full_like(d, 2.0, torch::dtype(torch::kF32)).dtype() == torch::kFloat32);
  REQUIRE(torch::empty_like(d).device() == d.device());
}

TEST_CASE("libtorch methods: Scalar, data_ptr, IntArrayRef::slice, factories from one number", "[libtorch]") {
  torch::Scalar zero = 0, half = 0.5, yes = true;
  REQUIRE(zero.isIntegral());
  REQUIRE(half.toDouble() == 0.5);
  REQUIRE(yes.toBool());
  auto t = torch::arange(4, torch::kInt64);
  REQUIRE(t.data_ptr() == t.raw_data());
  REQUIRE(t.sizes().slice(0) == torch::IntArrayRef({4}));
  auto s = torch::zeros({2, 3, 4}).sizes();
  REQUIRE(s.slice(1) == torch::IntArrayRef({3, 4}));
  REQUIRE(s.slice(1, 1) == torch::IntArrayRef({3}));
  REQUIRE_THROWS_WITH(s.slice(2, 2), Catch::Contains("out of range"));
  auto r = torch::randint(10, 5);
  REQUIRE(r.sizes() == torch::IntArrayRef({5}));
  REQUIRE(r.dtype() == torch::kInt64);
  REQUIRE((r.min().item<int64_t>() >= 0 && r.max().item<int64_t>() < 10));
  int64_t blob[3] = {7, 8, 9};
  REQUIRE(torch::equal(torch::from_blob(blob, 3, torch::kLong), torch::tensor({7, 8, 9})));
  REQUIRE(torch::arange(0, 3, torch::kF64).dtype() == torch::kFloat64);
  auto m = torch::tensor({1.0, 5.0}).max(torch::tensor({3.0, 2.0}));
  REQUIRE(torch::equal(m, torch::tensor({3.0, 5.0})));
  REQUIRE(torch::equal(torch::min(torch::tensor({1.0, 5.0}), torch::tensor({3.0, 2.0})), torch::tensor({1.0, 2.0})));
  // One-hot rows: multinomial's draw is the hot index.
  auto probs = torch::tensor({{0.0, 1.0, 0.0}, {0.0, 0.0, 1.0}});
  REQUIRE(torch::equal(probs.multinomial(1).squeeze_(1), torch::tensor({1, 2})));
}

TEST_CASE("libtorch methods: out= forms and constant_pad_nd", "[libtorch]") {
  auto a = torch::ones({2, 2}), b = torch::full({2, 2}, 2.0);
  auto out = torch::empty({2, 2});
  torch::add_out(out, a, b);
  REQUIRE(torch::equal(out, torch::full({2, 2}, 3.0)));
  torch::mul_out(out, a, b);
  REQUIRE(torch::equal(out, b));
  auto wrong = torch::empty({3});
  REQUIRE_THROWS_WITH(torch::add_out(wrong, a, b), Catch::Contains("add_out: out is [3] but the result is [2, 2]"));
  auto p = torch::constant_pad_nd(torch::ones({1, 2, 2}), {1, 1, 1, 1}, 5.0);
  REQUIRE(p.sizes() == torch::IntArrayRef({1, 4, 4}));
  REQUIRE(p[0][0][0].item<float>() == 5.0f);
  REQUIRE(p[0][1][1].item<float>() == 1.0f);
}

namespace {
// A user transform as LibTorch's tutorials write one: a TensorTransform subclass overriding operator().
struct AddOffset : torch::data::transforms::TensorTransform<torch::Tensor> {
  explicit AddOffset(double v) : v_(v) {}
  torch::Tensor operator()(torch::Tensor input) override { return input + v_; }
  double v_;
};
struct Ramp : torch::data::datasets::Dataset<Ramp> {
  torch::data::Example<> get(size_t i) override {
    return {torch::full({2}, static_cast<double>(i)), torch::tensor(static_cast<int64_t>(i % 2))};
  }
  std::optional<size_t> size() const override { return 6; }
};
}  // namespace

TEST_CASE("libtorch methods: TensorTransform subclasses, get_batch and AnyModule::forward<>", "[libtorch]") {
  auto chain = Ramp().map(AddOffset(10.0)).map(torch::data::transforms::Stack<>());
  auto one = chain.get_batch(3);
  REQUIRE(one.data.sizes() == torch::IntArrayRef({1, 2}));
  REQUIRE(one.data[0][0].item<float>() == 13.0f);
  auto two = chain.get_batch({0, 5});
  REQUIRE(torch::equal(two.target, torch::tensor({0, 1})));
  REQUIRE(two.data[1][1].item<float>() == 15.0f);
  REQUIRE_THROWS_WITH(chain.get_batch(6), Catch::Contains("get_batch: index 6 is out of range"));
  auto unstacked = Ramp().map(AddOffset(1.0)).get_batch({2, 4});
  REQUIRE(unstacked.size() == 2);
  REQUIRE(unstacked[1].data[0].item<float>() == 5.0f);

  // The loader runs the transform too.
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Ramp().map(AddOffset(100.0)).map(torch::data::transforms::Stack<>()), 3);
  double first = -1;
  for (auto& batch : *loader) {
    first = batch.data[0][0].item<double>();
    break;
  }
  REQUIRE(first == 100.0);

  torch::nn::Sequential seq(torch::nn::Linear(2, 2), torch::nn::ReLU());
  auto x = torch::ones({1, 2});
  for (auto m : *seq) x = m.forward<>(x);  // LibTorch's spelling of the return type
  REQUIRE(torch::equal(x, seq->forward(torch::ones({1, 2}))));
}

TEST_CASE("libtorch methods: to() with LibTorch's overloads and argument order", "[libtorch]") {
  auto x = torch::arange(6, torch::kFloat32).reshape({1, 1, 2, 3});
  REQUIRE(x.to(torch::kFloat32).is_same(x));                  // nothing to change: the same tensor
  REQUIRE(x.to(torch::kFloat32, /*non_blocking=*/true).is_same(x));
  auto c = x.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  REQUIRE_FALSE(c.is_same(x));
  REQUIRE(torch::equal(c, x));
  // image_io's call in LibTorch's tutorials: device, dtype, non_blocking, copy, memory format.
  auto u = x.mul(10).to(torch::kCPU, torch::kUInt8, false, false, torch::MemoryFormat::Contiguous);
  REQUIRE(u.dtype() == torch::kUInt8);
  REQUIRE(u[0][0][1][2].item<int64_t>() == 50);
  auto cl = x.to(torch::kCPU, torch::kFloat32, false, false, torch::MemoryFormat::ChannelsLast);
  REQUIRE(cl.is_contiguous(torch::MemoryFormat::ChannelsLast));
  REQUIRE(torch::equal(cl, x));
  auto d = torch::ones({2}, torch::kFloat64);
  REQUIRE(x.to(d).dtype() == torch::kFloat64);
  REQUIRE(x.to(torch::dtype(torch::kF16)).dtype() == torch::kFloat16);  // options without a device keep x's
  REQUIRE(x.to(torch::dtype(torch::kF16)).device() == x.device());
}
