// LibTorch idioms a newcomer writes first: they compile against <mpx/mpx.h> and mean what they mean in LibTorch.
#include <catch2/catch.hpp>

#include <cstdint>
#include <sstream>
#include <vector>

#include <mpx/mpx.h>

#include "test_util.h"

using namespace mpx;

TEST_CASE("a single integer dim works where LibTorch takes an IntArrayRef", "[api][shape]") {
  const Tensor x = arange(24).reshape({2, 3, 4}).to(kFloat32);
  CHECK(testing::same_values(x.sum(1), x.sum({1})));
  CHECK(testing::same_values(x.sum(-1, true), x.sum({-1}, true)));
  CHECK(x.sum(-1, true).sizes() == IntList{2, 3, 1});
  CHECK(testing::same_values(x.mean(0), x.mean({0})));
  CHECK(testing::same_values(x.var(2), x.var({2})));
  CHECK(testing::same_values(x.var(2, false, true), x.var({2}, false, true)));
  CHECK(testing::same_values(x.logsumexp(1), x.logsumexp({1})));
  CHECK(testing::same_values(x.flip(0), x.flip({0})));
  CHECK(x.view(-1).sizes() == IntList{24});
  CHECK(x.reshape(24).sizes() == IntList{24});
  CHECK(x.reshape(size_t{24}).sizes() == IntList{24});
  // The free functions too.
  CHECK(testing::same_values(sum(x, 2), sum(x, {2})));
  CHECK(testing::same_values(mean(x, 1, true), mean(x, {1}, true)));
  CHECK(testing::same_values(amax(x, 1), amax(x, {1})));
  CHECK(testing::same_values(amin(x, 0), amin(x, {0})));
  CHECK(testing::same_values(mpx::std(x, 1), mpx::std(x, {1})));
  CHECK(testing::same_values(var(x, 1), var(x, {1})));
  CHECK(testing::same_values(logsumexp(x, 0), logsumexp(x, {0})));
  // Braced lists keep their meaning: {} is every dim, not dim 0.
  CHECK(x.sum({}).dim() == 0);
  CHECK(x.sum({}).item<double>() == 276.0);
  CHECK(x.sum({0, 2}).sizes() == IntList{3});
  // A bad dim is still an error naming it.
  CHECK_THROWS_WITH(x.sum(3), Catch::Contains("dim"));
}

TEST_CASE("argmax and argmin without a dim index the flattened tensor", "[api][reduction]") {
  const Tensor x = tensor<float>({3, 9, -1, 9, 0, -4}, {2, 3});
  CHECK(x.argmax().dim() == 0);
  CHECK(x.argmax().dtype() == kInt64);
  CHECK(x.argmax().item<int64_t>() == 1);  // the first of the ties, as PyTorch
  CHECK(argmin(x).item<int64_t>() == 5);
}

TEST_CASE("factories infer the dtype the options leave unset", "[api][factory]") {
  // arange: i64 over integers, f32 as soon as one argument is floating.
  CHECK(arange(5).dtype() == kInt64);
  CHECK(arange(int64_t{2}, int64_t{7}).dtype() == kInt64);
  CHECK(arange(5.0).dtype() == kFloat32);
  const Tensor a = arange(0, 1, 0.1);
  REQUIRE(a.dtype() == kFloat32);
  REQUIRE(a.numel() == 10);
  CHECK(a[3].item<float>() == Approx(0.3f));
  CHECK(arange(0, 1, 0.25, kFloat64).dtype() == kFloat64);
  CHECK(arange(4, TensorOptions().requires_grad(false)).dtype() == kInt64);
  CHECK(arange(4.0, TensorOptions().requires_grad(true)).requires_grad());
  // tensor: the values' type unless a dtype is set.
  const TensorOptions cpu = TensorOptions().device(Device::cpu());
  CHECK(tensor(std::vector<int64_t>{1, 2}, {2}, cpu).dtype() == kInt64);
  CHECK(tensor(std::vector<double>{1, 2}, {2}, cpu).dtype() == kFloat64);
  CHECK(tensor(std::vector<int64_t>{1, 2}, {2}, TensorOptions(cpu).dtype(kFloat16)).dtype() == kFloat16);
  // Values beyond f32's 24-bit mantissa survive, and item<int64_t> reads them exactly.
  const int64_t big = (int64_t{1} << 60) + 1;
  const Tensor b = tensor(std::vector<int64_t>{big}, {}, cpu);
  CHECK(b.item<int64_t>() == big);
  CHECK(b.item_int64() == big);
  CHECK(tensor<bool>({true}).item<int>() == 1);
  CHECK(full({}, -2.75, kFloat32).item<int64_t>() == -2);  // truncated, as a C++ cast
  // randint and randperm: i64 unless told.
  CHECK(randint(0, 10, {3}, cpu).dtype() == kInt64);
  CHECK(randint(0, 10, {3}, kInt32).dtype() == kInt32);
  CHECK(randperm(4, cpu).dtype() == kInt64);
  CHECK(zeros({2}, cpu).dtype() == kFloat32);
  // to(options) changes only what the options set.
  CHECK(b.to(cpu).dtype() == kInt64);
  CHECK(b.to(TensorOptions(kFloat64)).dtype() == kFloat64);
}

TEST_CASE("LibTorch's spellings of options, contexts and CUDA queries", "[api]") {
  nn::BatchNorm2d bn(nn::BatchNorm2dOptions(4).momentum(0.2).eps(1e-3));
  CHECK(bn->options.eps() == 1e-3);
  nn::BatchNorm1d bn1(nn::BatchNorm1dOptions(3).affine(false));
  CHECK(!bn1->options.affine());
  CHECK(cuda::is_available() == cuda_is_available());
  CHECK(cuda::device_count() == cuda_device_count());
  // The LSTM language model and the Hugging Face GPT-2 I/O come with the umbrella header.
  models::LSTMLM lm(models::LSTMLMConfig{.vocab_size = 11, .n_embd = 8, .n_layer = 1});
  CHECK(lm->forward(zeros({2, 3}, kInt64)).sizes() == IntList{2, 3, 11});
  CHECK(models::hf_gpt2_state(*models::GPT(models::GPTConfig{.vocab_size = 16, .n_ctx = 4, .n_layer = 1,
                                                             .n_head = 1, .n_embd = 8}))
            .count("transformer.wte.weight") == 1);
  // models::create knows the names `mpx gpt --arch` takes.
  nn::AnyModule tiny = models::create("GPT-tiny", models::ModelOptions().vocab_size(13));
  CHECK(tiny.forward(zeros({1, 5}, kInt64)).sizes() == IntList{1, 5, 13});
  nn::AnyModule lstm = models::create("lstm-lm", models::ModelOptions().vocab_size(7));
  CHECK(lstm.forward(zeros({2, 4}, kInt64)).sizes() == IntList{2, 4, 7});
  CHECK_THROWS_WITH(models::create("gpt3"), Catch::Contains("gpt2-medium") && Catch::Contains("lstm-lm"));
}

namespace {
// y = a * b, whose backward computes only the gradients asked for.
struct Mul : autograd::Function<Mul> {
  static inline std::vector<bool> asked;
  static Tensor forward(autograd::AutogradContext& ctx, const Tensor& a, const Tensor& b) {
    ctx.save_for_backward({a, b});
    return a * b;
  }
  static autograd::variable_list backward(autograd::AutogradContext& ctx, autograd::variable_list g) {
    const auto s = ctx.get_saved_variables();
    asked = {ctx.needs_input_grad(0), ctx.needs_input_grad(1), ctx.needs_input_grad(2)};
    return {ctx.needs_input_grad(0) ? g[0] * s[1] : Tensor(), ctx.needs_input_grad(1) ? g[0] * s[0] : Tensor()};
  }
};
}  // namespace

TEST_CASE("a custom function's context says which inputs need a gradient", "[api][autograd]") {
  const Tensor a = tensor<float>({2, 3}).requires_grad_();
  const Tensor b = tensor<float>({5, 7});
  Mul::apply(a, b).sum().backward();
  CHECK(Mul::asked == std::vector<bool>{true, false, false});
  CHECK(testing::same_values(a.grad(), b));
  const Tensor c = tensor<float>({1, 1}).requires_grad_();
  Mul::apply(b, c).sum().backward();
  CHECK(Mul::asked == std::vector<bool>{false, true, false});
  CHECK(testing::same_values(c.grad(), b));
}

namespace {
struct Squares : data::Dataset {
  int64_t n;
  explicit Squares(int64_t n) : n(n) {}
  int64_t size() const override { return n; }
  data::Example<> get(int64_t i) const override {
    return {full({1}, static_cast<double>(i * i)), full({}, static_cast<double>(i), kInt64)};
  }
};
}  // namespace

TEST_CASE("a DataLoader built from a temporary dataset owns it", "[api][data]") {
  data::DataLoader loader(Squares(5), data::DataLoaderOptions(2).shuffle(false));
  std::vector<float> seen;
  for (auto& batch : loader)
    for (int64_t i = 0; i < batch.data.size(0); ++i) seen.push_back(batch.data[i][0].item<float>());
  CHECK(seen == std::vector<float>{0, 1, 4, 9, 16});
}

TEST_CASE("from_blob wraps the caller's memory without a copy, kCPU/kCUDA, index methods, printing a dtype",
          "[api][factory]") {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  Tensor t = from_blob(buf.data(), {2, 3});
  CHECK(t.dtype() == kFloat32);
  CHECK(t.data_ptr<float>() == buf.data());
  buf[4] = 50;  // writes through both ways
  CHECK(t.index({1, 1}).item<float>() == 50);
  t.mul_(2);
  CHECK(buf[0] == 2);
  // Strides (a column of a row-major [2, 3] buffer) and the dtype from the options.
  std::vector<int64_t> ids = {7, 8, 9, 10, 11, 12};
  const Tensor col = from_blob(ids.data(), {2}, {3}, TensorOptions(kInt64));
  CHECK(testing::same_values(col, tensor<int64_t>({7, 10})));
  // A deleter runs when the last view goes.
  int freed = 0;
  {
    Tensor owned = from_blob(buf.data(), {6}, [&](void* p) { freed += p == buf.data(); });
    const Tensor view = owned.narrow(0, 1, 2);
    owned = Tensor();
    CHECK(freed == 0);
  }
  CHECK(freed == 1);
  CHECK_THROWS_WITH(from_blob(nullptr, {2}), Catch::Contains("null"));
  CHECK_THROWS_WITH(from_blob(buf.data(), {2}, {1, 1}), Catch::Contains("strides for the 1 dims"));
  CHECK(from_blob(nullptr, {0}).numel() == 0);

  CHECK(Device(kCPU) == Device::cpu());
  CHECK(t.to(kCPU).device() == Device::cpu());
  CHECK(Device(kCUDA, 1) == Device::cuda(1));
  const Tensor idx = tensor<int64_t>({2, 0});
  CHECK(testing::same_values(t.index_select(1, idx), index_select(t, 1, idx)));
  CHECK(testing::same_values(t.gather(1, tensor<int64_t>({0, 2, 1, 1}, {2, 2})), tensor<float>({2, 6, 100, 100}, {2, 2})));
  const Tensor mask = t > 6.0;
  CHECK(testing::same_values(t.masked_fill(mask, 0.0), masked_fill(t, mask, 0.0)));
  CHECK(testing::same_values(t.masked_fill(mask, scalar_tensor(-1.0)), masked_fill(t, mask, scalar_tensor(-1.0))));
  std::ostringstream os;
  os << t.dtype() << " " << kBFloat16;
  CHECK(os.str() == std::string(dtype_name(kFloat32)) + " " + dtype_name(kBFloat16));
}

TEST_CASE("item() without a type gives a Scalar, and Functional puts a function in a Sequential", "[api][nn]") {
  const Tensor f = full({}, 2.5), i = tensor<int64_t>({9007199254740993});
  CHECK(f.item().toFloat() == 2.5f);
  CHECK(f.item() * 2.0 == 5.0);
  CHECK(f.item().isFloatingPoint());
  CHECK(i.item().isIntegral());
  CHECK(i.item().toLong() == int64_t{9007199254740993});  // exact beyond 2^53
  CHECK(full({}, 1.0, TensorOptions(kBool)).item().toBool());
  CHECK_THROWS_WITH(zeros({2}).item(), Catch::Contains("one element"));

  nn::Sequential net(nn::Linear(3, 4), nn::Functional([](const Tensor& x) { return x.relu(); }),
                     nn::Functional(mpx::leaky_relu, 0.2), nn::Linear(4, 2));
  CHECK(net->parameters().size() == 4);
  const Tensor x = randn({5, 3});
  const Tensor h = leaky_relu((*net)[0]->as<nn::LinearImpl>()->forward(x).relu(), 0.2);
  CHECK(testing::same_values(net->forward(x), (*net)[3]->as<nn::LinearImpl>()->forward(h)));
}
