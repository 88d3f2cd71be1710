// Bad input at the edges of the tensor API: sizes past int64, 0-dim and undefined tensors, degenerate kernels and
// random-fill ranges each give an error naming the problem, never a crash, a wrapped size or silently wrong values.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <mpx/mpx.h>

using namespace mpx;

TEST_CASE("Shapes whose element or byte count passes int64 are refused, not wrapped", "[core][checks]") {
  const int64_t big = int64_t{1} << 40;
  CHECK_THROWS_WITH(zeros({big, big}), Catch::Contains("more elements than an int64"));
  CHECK_THROWS_WITH(empty({int64_t{1} << 62, 4}), Catch::Contains("int64"));
  CHECK_THROWS_WITH(empty({int64_t{1} << 60, 4}), Catch::Contains("2^63 bytes"));
  CHECK_THROWS_WITH(randn({int64_t{1} << 33, int64_t{1} << 31}), Catch::Contains("int64"));
  CHECK_THROWS_WITH(ones({1}).expand({big, big}).sum(), Catch::Contains("int64"));
  CHECK_THROWS_WITH(ones({1, 1}).expand({int64_t{1} << 32, int64_t{1} << 32}).reshape({-1}), Catch::Contains("int64"));
  CHECK_THROWS(ones({4}).repeat_interleave(int64_t{1} << 62));
  CHECK_THROWS(ones({2, 2}).repeat({int64_t{1} << 62, 4}));
  CHECK_THROWS_WITH(eye(int64_t{1} << 32), Catch::Contains("int64"));
  // A zero anywhere makes an empty tensor, however large the other sizes.
  CHECK(empty({big, big, 0}).numel() == 0);
  CHECK(empty({0, big, big}).numel() == 0);
}

TEST_CASE("empty_strided refuses negative strides and spans past int64", "[core][checks]") {
  CHECK_THROWS_WITH(empty_strided({3}, {-1}), Catch::Contains("non-negative"));
  CHECK_THROWS_WITH(empty_strided({2}, {int64_t{1} << 62}), Catch::Contains("2^63 bytes"));
  CHECK_THROWS_WITH(empty_strided({2, 3}, {1}), Catch::Contains("strides"));
  const Tensor t = empty_strided({2, 3}, {1, 2});
  CHECK(t.sizes() == IntList{2, 3});
  CHECK(t.stride(1) == 2);
}

TEST_CASE("Positional ops on a 0-dim tensor are errors, transpose and movedim keep it", "[core][checks]") {
  const Tensor s = scalar_tensor(1.5);
  CHECK_THROWS_WITH(s.select(0, 0), Catch::Contains("0-dim"));
  CHECK_THROWS_WITH(s[0], Catch::Contains("0-dim"));
  CHECK_THROWS_WITH(s.narrow(0, 0, 1), Catch::Contains("0-dim"));
  CHECK_THROWS_WITH(s.slice(0, 0, 1), Catch::Contains("0-dim"));
  CHECK_THROWS_WITH(s.unflatten(0, {1}), Catch::Contains("0-dim"));
  CHECK_THROWS_WITH(split(s, 1), Catch::Contains("0-dim"));
  CHECK_THROWS_WITH(chunk(s, 1), Catch::Contains("0-dim"));
  CHECK_THROWS_WITH(cat({s, s}), Catch::Contains("stack()"));
  CHECK(s.transpose(0, 0).item<double>() == 1.5);
  CHECK(s.transpose(-1, 0).dim() == 0);
  CHECK(s.movedim({0}, {0}).item<double>() == 1.5);
  CHECK(stack({s, s}).sizes() == IntList{2});
}

TEST_CASE("Methods of an undefined Tensor name the call", "[core][checks]") {
  const Tensor u;
  const Tensor x = ones({2});
  CHECK_THROWS_WITH(u.dim(), Catch::Contains("dim() called on an undefined Tensor"));
  CHECK_THROWS_WITH(u.numel(), Catch::Contains("undefined Tensor"));
  CHECK_THROWS_WITH(u.sizes(), Catch::Contains("undefined Tensor"));
  CHECK_THROWS_WITH(u.dtype(), Catch::Contains("undefined Tensor"));
  CHECK_THROWS(u.sum());
  CHECK_THROWS(u.to(kFloat64));
  CHECK_THROWS(u.clone());
  CHECK_THROWS(u.is_contiguous());
  CHECK_THROWS(u + 1.0);
  CHECK_THROWS(relu(u));
  CHECK_THROWS(matmul(u, x));
  CHECK_THROWS(cat({u, x}));
  CHECK_THROWS(Tensor(u).set_requires_grad(true));
  CHECK_THROWS(Tensor(x).copy_(u));
  CHECK_FALSE(u.defined());
}

TEST_CASE("Thread counts far past any core count are refused before OpenMP sees them", "[core][checks]") {
  const int before = get_num_threads();
  CHECK_THROWS_WITH(set_num_threads(100000), Catch::Contains("core count"));
  CHECK_THROWS(set_num_threads(0));
  CHECK(get_num_threads() == before);
}

TEST_CASE("Convolutions refuse an empty kernel", "[conv][checks]") {
  CHECK_THROWS_WITH(conv2d(ones({1, 1, 4, 4}), ones({1, 1, 0, 0})), Catch::Contains("kernel size"));
  CHECK_THROWS_WITH(conv1d(ones({1, 1, 4}), ones({1, 1, 0})), Catch::Contains("kernel size"));
  CHECK_THROWS_WITH(conv_transpose2d(ones({1, 1, 3, 3}), ones({1, 1, 0, 0})), Catch::Contains("kernel size"));
  CHECK_THROWS_WITH(nn::Conv2d(nn::Conv2dOptions(1, 1, 0)), Catch::Contains("kernel_size"));
  CHECK_THROWS_WITH(nn::Conv2d(nn::Conv2dOptions(1, 1, -1)), Catch::Contains("kernel_size"));
  CHECK_THROWS_WITH(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(1, 1, {3, 0})), Catch::Contains("kernel_size"));
}

TEST_CASE("one_hot checks its classes and infers their count from -1", "[index][checks]") {
  const Tensor idx = tensor(std::vector<int64_t>{0, 2, 1});
  CHECK(one_hot(idx).sizes() == IntList{3, 3});
  CHECK(one_hot(idx, -1).sizes() == IntList{3, 3});
  CHECK(one_hot(idx, 5).sizes() == IntList{3, 5});
  CHECK(one_hot(idx)[1][2].item<int64_t>() == 1);
  CHECK_THROWS_WITH(one_hot(tensor(std::vector<int64_t>{0, 5}), 3), Catch::Contains("not below num_classes"));
  CHECK_THROWS_WITH(one_hot(tensor(std::vector<int64_t>{0, -1}), 3), Catch::Contains("non-negative"));
  CHECK_THROWS_WITH(one_hot(idx, -2), Catch::Contains("num_classes"));
  CHECK_THROWS_WITH(one_hot(empty({0}, kInt64)), Catch::Contains("empty"));
  CHECK(one_hot(empty({0}, kInt64), 4).sizes() == IntList{0, 4});
}

TEST_CASE("Random fills check their dtype and range", "[random][checks]") {
  CHECK_THROWS_WITH(rand({4}, kInt64), Catch::Contains("randint"));
  Tensor i = zeros({4}, kInt64);
  CHECK_THROWS_WITH(i.uniform_(0, 10), Catch::Contains("randint"));
  Tensor f = zeros({4});
  CHECK_THROWS_WITH(f.uniform_(1, 0), Catch::Contains("from <= to"));
  CHECK_THROWS(f.uniform_(std::nan(""), 1));
  CHECK_THROWS_WITH(f.normal_(0, -1), Catch::Contains("std >= 0"));
  CHECK_THROWS(f.normal_(0, std::nan("")));
  f.uniform_(2, 3);
  CHECK(f.min().item<float>() >= 2.0f);
  CHECK(f.max().item<float>() < 3.0f);
  CHECK(randint(0, 5, {3}).dtype() == kInt64);
  // nn::init on a zero-element tensor is a no-op (xavier's bound there is infinite).
  CHECK(nn::init::xavier_uniform_(empty({0, 0})).numel() == 0);
  CHECK(nn::init::xavier_normal_(empty({0, 0})).numel() == 0);
}

TEST_CASE("arange and linspace refuse ranges no tensor can hold", "[core][checks]") {
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(arange(0.0, std::nan(""), 1.0), Catch::Contains("finite"));
  CHECK_THROWS_WITH(arange(0.0, inf, 1.0), Catch::Contains("finite"));
  CHECK_THROWS_WITH(arange(0.0, 1e19, 1.0), Catch::Contains("too many"));
  CHECK_THROWS_WITH(linspace(0, 1, int64_t{1} << 62), Catch::Contains("bytes"));
  CHECK(arange(0.0, 5.0, 2.0).sizes() == IntList{3});
  CHECK_THROWS_WITH(arange(5.0, 0.0), Catch::Contains("runs against the step"));
  CHECK_THROWS_WITH(arange(-1), Catch::Contains("runs against the step"));
  CHECK(arange(5.0, 0.0, -1.0).sizes() == IntList{5});
  CHECK(arange(0).numel() == 0);
  CHECK(arange(3.0, 3.0, -1.0).numel() == 0);
  CHECK(linspace(0, 1, 5)[4].item<float>() == 1.0f);
}

TEST_CASE("Fused attention propagates NaN as the math path does, and refuses a NaN scale", "[attention][checks]") {
  Tensor q = randn({1, 2, 5, 8}), k = randn({1, 2, 5, 8}), v = randn({1, 2, 5, 8});
  q[0][1][2][3].fill_(std::nan(""));
  const Tensor fused = scaled_dot_product_attention(q, k, v);
  const Tensor math = scaled_dot_product_attention_math(q, k, v);
  CHECK(isnan(fused[0][1][2]).all().item<bool>());
  CHECK(isnan(math[0][1][2]).all().item<bool>());
  CHECK_FALSE(isnan(fused[0][0]).any().item<bool>());
  CHECK_THROWS_WITH(scaled_dot_product_attention(k, k, v, {}, 0.0, false, std::nan("")), Catch::Contains("scale"));
}

TEST_CASE("Losses, gradients and scalers refuse what would otherwise pass silently", "[checks]") {
  CHECK_THROWS_WITH(cross_entropy(zeros({2, 0}), tensor(std::vector<int64_t>{0, 0})), Catch::Contains("no classes"));
  Tensor x = zeros({2}, TensorOptions().requires_grad(true));
  CHECK_THROWS_WITH(x.set_grad(ones({3})), Catch::Contains("shape"));
  x.set_grad(ones({2}));
  CHECK(x.grad().sum().item<float>() == 2.0f);
  x.set_grad(Tensor());
  CHECK_FALSE(x.grad().defined());
  // A step with no gradient at all has lost its backward (torch.amp: "No inf checks were recorded").
  nn::Linear lin(2, 2);
  optim::SGD opt(lin->parameters(), optim::SGDOptions(0.1));
  amp::GradScaler scaler;
  CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("no parameter of this optimizer has a gradient"));
  // A learning rate set after construction is checked at the step: NaN would make every weight NaN.
  lin(ones({1, 2})).sum().backward();
  opt.param_groups()[0].set_lr(std::nan(""));
  const Tensor before = lin->weight.detach().clone();
  CHECK_THROWS_WITH(opt.step(), Catch::Contains("learning rate"));
  CHECK(equal(lin->weight.detach(), before));
  opt.param_groups()[0].set_lr(0.1);
  opt.step();
  CHECK_FALSE(equal(lin->weight.detach(), before));
  CHECK_THROWS_WITH(interpolate(ones({1, 1, 2, 2}), {}, std::vector<double>{1e30, 1e30}),
                    Catch::Contains("more than any tensor holds"));
}

TEST_CASE("LSTM and LSTMCell refuse half of their state", "[rnn][checks]") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4));
  const Tensor x = randn({5, 2, 3}), s = zeros({1, 2, 4});
  CHECK_THROWS_WITH(lstm->forward(x, std::tuple<Tensor, Tensor>(s, Tensor())), Catch::Contains("h0 but no c0"));
  CHECK_THROWS_WITH(lstm->forward(x, std::tuple<Tensor, Tensor>(Tensor(), s)), Catch::Contains("c0 but no h0"));
  CHECK(std::get<0>(lstm->forward(x, std::tuple<Tensor, Tensor>(s, s))).sizes() == IntList{5, 2, 4});
  nn::LSTMCell cell(3, 4);
  CHECK_THROWS_WITH(cell->forward(randn({2, 3}), std::tuple<Tensor, Tensor>(zeros({2, 4}), Tensor())),
                    Catch::Contains("LSTMCell"));
}
