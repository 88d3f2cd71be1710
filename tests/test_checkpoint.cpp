// Activation checkpointing: the same loss, gradients and random stream as without it, under dropout and autocast,
// a GPT with gradient_checkpointing, lower peak memory, and the cases it refuses.
#include <catch2/catch.hpp>

#include <mpx/mpx.h>

#include "test_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;
using testing::max_abs_diff;

namespace {
// Two linear layers with GELU and dropout: parameters inside the region, random numbers drawn in it.
struct Mlp : nn::Module {
  nn::Linear a{nullptr}, b{nullptr};
  Mlp(int64_t d, int64_t hidden) {
    a = register_module("a", nn::Linear(d, hidden));
    b = register_module("b", nn::Linear(hidden, d));
  }
  Tensor forward(const Tensor& x) { return x + b(F::dropout(gelu(a(x)), F::DropoutFuncOptions().p(0.3).training(true))); }
};

// The loss of two Mlp blocks (the middle one checkpointed or not) and its parameters' and input's gradients.
struct Run {
  Tensor loss, gx;
  std::vector<Tensor> grads;
  uint64_t rng_after = 0;
};
Run run(bool ckpt, DType dt, bool autocast) {
  manual_seed(7);
  auto m1 = std::make_shared<Mlp>(8, 16), m2 = std::make_shared<Mlp>(8, 16);
  m1->to(dt);
  m2->to(dt);
  const Tensor x = randn({4, 5, 8}, TensorOptions(dt)).set_requires_grad(true);
  Run r;
  {
    amp::AutocastGuard ac(kBFloat16, autocast);
    Tensor h = m1->forward(x);
    h = ckpt ? nn::utils::checkpoint([m2](const Tensor& t) { return m2->forward(t); }, h) : m2->forward(h);
    r.loss = sum(h.to(dt) * h.to(dt));
  }
  r.loss.backward();
  r.gx = x.grad();
  for (const Tensor& p : m1->parameters()) r.grads.push_back(p.grad());
  for (const Tensor& p : m2->parameters()) r.grads.push_back(p.grad());
  r.rng_after = random::default_generator().offset();
  return r;
}
}  // namespace

TEST_CASE("checkpoint gives the plain backward's gradients, the same dropout masks and random stream", "[checkpoint]") {
  for (bool autocast : {false, true}) {
    INFO("bf16 autocast " << autocast);
    const DType dt = autocast ? kFloat32 : kFloat64;
    const Run plain = run(false, dt, autocast), ck = run(true, dt, autocast);
    const double tol = autocast ? 1e-2 : 1e-12;
    CHECK(max_abs_diff(ck.loss, plain.loss) <= tol * std::abs(plain.loss.item<double>()));
    CHECK(max_abs_diff(ck.gx, plain.gx) < tol * (1.0 + max(abs(plain.gx)).item<double>()));
    REQUIRE(ck.grads.size() == plain.grads.size());
    for (size_t i = 0; i < ck.grads.size(); ++i) {
      INFO("parameter " << i);
      REQUIRE(ck.grads[i].defined());
      CHECK(max_abs_diff(ck.grads[i], plain.grads[i]) < tol * (1.0 + max(abs(plain.grads[i])).item<double>()));
    }
    // The recomputation draws the forward's numbers again and then puts the generator back.
    CHECK(ck.rng_after == plain.rng_after);
  }
}

TEST_CASE("checkpoint of several tensors, outputs that are inputs, and what it refuses", "[checkpoint]") {
  manual_seed(1);
  const Tensor a = randn({3, 4}, TensorOptions(kFloat64)).set_requires_grad(true);
  const Tensor b = randn({3, 4}, TensorOptions(kFloat64)).set_requires_grad(true);
  const Tensor idx = tensor<int64_t>({2, 0});
  auto f = [idx](const tensor_list& t) { return tensor_list{t[0] * t[1], index_select(t[0], 0, idx), t[1]}; };
  tensor_list out = nn::utils::checkpoint(f, {a, b});
  CHECK(!out[2].is_same(b));  // a returned input gets a fresh handle
  (sum(out[0]) + sum(out[1] * out[1]) + 3.0 * sum(out[2])).backward();
  const Tensor ga = a.grad(), gb = b.grad();
  a.mutable_grad() = Tensor();
  b.mutable_grad() = Tensor();
  tensor_list ref = f({a, b});
  (sum(ref[0]) + sum(ref[1] * ref[1]) + 3.0 * sum(ref[2])).backward();
  CHECK(max_abs_diff(ga, a.grad()) < 1e-14);
  CHECK(max_abs_diff(gb, b.grad()) < 1e-14);

  auto square = [](const Tensor& t) { return t * t; };
  CHECK_THROWS_WITH(nn::utils::checkpoint(square, randn({2})), Catch::Contains("no input requires grad"));
  {
    NoGradGuard ng;  // nothing to save: the function simply runs
    CHECK(max_abs_diff(nn::utils::checkpoint(square, a), a * a) == 0.0);
  }
  const Tensor y = sum(nn::utils::checkpoint(square, a));
  CHECK_THROWS_WITH(autograd::grad({y}, {a}), Catch::Contains("autograd::grad through a checkpointed region"));
  const Tensor z = sum(nn::utils::checkpoint(square, a));
  CHECK_THROWS_WITH(z.backward({}, false, true), Catch::Contains("second derivative"));
}

TEST_CASE("GPT with gradient_checkpointing: the same gradients, less peak memory", "[checkpoint][models]") {
  models::GPTConfig c;
  c.vocab_size = 64;
  c.n_ctx = 64;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 64;
  c.dropout = 0.1;
  manual_seed(3);
  models::GPT gpt(c);
  gpt->train();
  const Tensor idx = randint(0, 64, {4, 64}, TensorOptions(kInt64));
  const Tensor target = randint(0, 64, {4, 64}, TensorOptions(kInt64));
  auto step = [&](bool ckpt) {
    gpt->gradient_checkpointing = ckpt;
    gpt->zero_grad();
    manual_seed(11);
    cpu::reset_peak_memory_stats();
    const int64_t before = cpu::memory_stats().allocated;
    const Tensor loss = F::cross_entropy(gpt(idx).reshape({-1, 64}), target.reshape({-1}));
    loss.backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : gpt->parameters()) grads.push_back(p.grad().clone());
    return std::make_tuple(loss.item<double>(), grads, cpu::memory_stats().peak_allocated - before);
  };
  auto [l0, g0, peak0] = step(false);
  auto [l1, g1, peak1] = step(true);
  CHECK(std::abs(l1 - l0) < 1e-6);
  for (size_t i = 0; i < g0.size(); ++i) {
    INFO("parameter " << i);
    CHECK(testing::rel_err(g1[i], g0[i]) < 1e-5);
  }
  INFO("peak bytes above the start: plain " << peak0 << ", checkpointed " << peak1);
  CHECK(peak1 < peak0 * 3 / 4);
}
