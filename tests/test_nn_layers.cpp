// Tests of nn's layers: parameter counts and PyTorch's initialization, containers, forward shapes, modules against their functional forms, gradchecks, clipping, a tiny MLP, Conv1d.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/random.h"
#include "core/serialize.h"
#include "gradcheck.h"
#include "nn/nn.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "test_nn_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;
using Catch::Matchers::Contains;
using mpx::testing::ApiNet;
using mpx::testing::max_abs;
using mpx::testing::max_diff;

namespace {
double std_all(const Tensor& t) { return mpx::std(t.detach().flatten(), {0}).item<double>(); }
int64_t count(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}
}  // namespace

TEST_CASE("nn: parameter counts match torchvision", "[nn]") {
  CHECK(count(nn::Linear(10, 5)->parameters()) == 55);
  CHECK(count(nn::Linear(10, 5, false)->parameters()) == 50);
  CHECK(count(nn::Linear(512, 1000)->parameters()) == 513000);
  CHECK(count(nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false))->parameters()) == 9408);
  CHECK(count(nn::Conv2d(3, 16, 3)->parameters()) == 448);
  CHECK(count(nn::Conv2d(nn::Conv2dOptions(4, 8, 3).groups(2))->parameters()) == 8 * 2 * 9 + 8);
  CHECK(count(nn::Conv2d(nn::Conv2dOptions(4, 8, {3, 1}))->parameters()) == 8 * 4 * 3 + 8);
  CHECK(count(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(100, 512, 4).bias(false))->parameters()) == 819200);
  nn::BatchNorm2d bn(64);
  CHECK(count(bn->parameters()) == 128);
  CHECK(bn->buffers().size() == 3);
  CHECK(count(bn->buffers()) == 129);
  CHECK(nn::BatchNorm2d(nn::BatchNormOptions(8).affine(false))->parameters().empty());
  CHECK(nn::BatchNorm2d(nn::BatchNormOptions(8).track_running_stats(false))->buffers().empty());
  CHECK(count(nn::LayerNorm(nn::LayerNormOptions({4, 5}))->parameters()) == 40);
  CHECK(count(nn::GroupNorm(2, 8)->parameters()) == 16);
  CHECK(count(nn::Embedding(10, 3)->parameters()) == 30);
  CHECK(nn::ReLU()->parameters().empty());
}

TEST_CASE("nn: default initialization follows PyTorch", "[nn]") {
  manual_seed(7);
  nn::Linear lin(100, 50);
  const double bound = 1.0 / std::sqrt(100.0);  // kaiming_uniform_(a=sqrt(5)) gives 1/sqrt(fan_in)
  CHECK(max_abs(lin->weight) <= bound);
  CHECK(max_abs(lin->weight) > 0.95 * bound);
  CHECK(max_abs(lin->bias) <= bound);
  // Uniform on [-b, b]: std b/sqrt(3).
  CHECK(std_all(lin->weight) == Approx(bound / std::sqrt(3.0)).epsilon(0.05));

  nn::Conv2d conv(16, 32, 3);
  const double cb = 1.0 / std::sqrt(16.0 * 9.0);
  CHECK(max_abs(conv->weight) <= cb);
  CHECK(max_abs(conv->weight) > 0.95 * cb);
  CHECK(max_abs(conv->bias) <= cb);

  nn::ConvTranspose2d ct(nn::ConvTranspose2dOptions(16, 8, 4));
  const double tb = 1.0 / std::sqrt(8.0 * 16.0);  // fan_in of weight [in, out, k, k] is out * k * k
  CHECK(max_abs(ct->weight) <= tb);
  CHECK(max_abs(ct->weight) > 0.9 * tb);

  nn::BatchNorm2d bn(6);
  CHECK(max_diff(bn->weight, ones({6})) == 0.0);
  CHECK(max_diff(bn->bias, zeros({6})) == 0.0);
  CHECK(max_diff(bn->running_mean, zeros({6})) == 0.0);
  CHECK(max_diff(bn->running_var, ones({6})) == 0.0);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 0);

  // Seeded: the same seed gives the same model.
  manual_seed(11);
  nn::Linear a(8, 8);
  manual_seed(11);
  nn::Linear b(8, 8);
  CHECK(max_diff(a->weight, b->weight) == 0.0);
  CHECK(max_diff(a->bias, b->bias) == 0.0);
}

TEST_CASE("nn: init functions", "[nn]") {
  manual_seed(8);
  namespace init = nn::init;
  CHECK(init::calculate_gain(init::kLinear) == 1.0);
  CHECK(init::calculate_gain(init::kSigmoid) == 1.0);
  CHECK(init::calculate_gain(init::kTanh) == Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(init::kReLU) == Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::kLeakyReLU, 0.2) == Approx(std::sqrt(2.0 / 1.04)));
  CHECK(init::calculate_gain(init::kSELU) == 0.75);
  auto [fi, fo] = init::_calculate_fan_in_and_fan_out(empty({32, 16, 3, 3}));
  CHECK(fi == 144);
  CHECK(fo == 288);
  CHECK_THROWS_WITH(init::calculate_fan_in_and_fan_out(empty({5})), Contains("fewer than 2 dimensions"));

  Tensor w = empty({256, 128}).set_requires_grad(true);
  init::kaiming_normal_(w, 0.0, init::kFanIn, init::kReLU);
  CHECK(w.requires_grad());
  CHECK(std_all(w) == Approx(std::sqrt(2.0 / 128.0)).epsilon(0.03));
  CHECK(std::abs(mpx::mean(w).item<double>()) < 0.01);
  init::kaiming_normal_(w, 0.0, init::kFanOut, init::kReLU);
  CHECK(std_all(w) == Approx(std::sqrt(2.0 / 256.0)).epsilon(0.03));
  init::kaiming_uniform_(w, 0.0, init::kFanIn, init::kReLU);
  CHECK(max_abs(w) <= std::sqrt(6.0 / 128.0));
  CHECK(max_abs(w) > 0.95 * std::sqrt(6.0 / 128.0));
  init::xavier_uniform_(w);
  const double xb = std::sqrt(6.0 / (128.0 + 256.0));
  CHECK(max_abs(w) <= xb);
  CHECK(max_abs(w) > 0.95 * xb);
  init::xavier_normal_(w, 2.0);
  CHECK(std_all(w) == Approx(2.0 * std::sqrt(2.0 / 384.0)).epsilon(0.03));
  init::normal_(w, 3.0, 0.5);
  CHECK(mpx::mean(w).item<double>() == Approx(3.0).epsilon(0.01));
  init::uniform_(w, -2.0, -1.0);
  CHECK(mpx::max(w).item<double>() <= -1.0);
  CHECK(mpx::min(w).item<double>() >= -2.0);
  init::constant_(w, 0.25);
  CHECK(max_diff(w, full({256, 128}, 0.25)) == 0.0);
  init::zeros_(w);
  CHECK(max_abs(w) == 0.0);
  init::ones_(w);
  CHECK(mpx::min(w).item<double>() == 1.0);
  CHECK(w.is_leaf());
  CHECK_FALSE(w.grad().defined());
  // Low-precision tensors are filled in their own dtype.
  Tensor h = empty({64, 64}, kFloat16);
  init::xavier_uniform_(h);
  CHECK(h.dtype() == kFloat16);
  CHECK(max_abs(h) <= std::sqrt(6.0 / 128.0) * 1.001);
}

TEST_CASE("nn: Sequential and ModuleList", "[nn]") {
  manual_seed(9);
  nn::Sequential seq({nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2)});
  CHECK(seq->size() == 3);
  CHECK(seq[0]->name() == "Linear");
  CHECK(seq->named_parameters().keys() == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  Tensor x = randn({5, 4});
  auto& l0 = seq->at<nn::LinearImpl>(0);
  auto& l2 = seq->at<nn::Linear>(2);
  CHECK(max_diff(seq(x), F::linear(F::relu(F::linear(x, l0.weight, l0.bias)), l2.weight, l2.bias)) < 1e-6);
  CHECK_THROWS_WITH(seq->at<nn::Conv2dImpl>(0), Contains("not the requested type"));
  CHECK_THROWS_WITH(seq->ptr(3), Contains("out of range"));

  nn::Sequential named({{"fc1", nn::Linear(4, 8)}, {"act", nn::Tanh()}, {"fc2", nn::Linear(8, 2)}});
  CHECK(named->named_children().keys() == std::vector<std::string>{"fc1", "act", "fc2"});
  CHECK(named(x).sizes() == IntList{5, 2});

  nn::Sequential built;
  built->push_back(nn::Linear(4, 3));
  built->push_back("out", nn::Sigmoid());
  built->push_back(std::make_shared<nn::IdentityImpl>());
  CHECK(built->named_children().keys() == std::vector<std::string>{"0", "out", "2"});
  Tensor y = built(x);
  CHECK(y.sizes() == IntList{5, 3});
  CHECK(mpx::min(y).item<double>() > 0.0);
  int n = 0;
  for (const auto& m : *built) n += m.ptr() != nullptr;
  CHECK(n == 3);

  nn::ModuleList list(nn::Linear(2, 2), nn::BatchNorm1d(2));
  list->push_back(nn::Conv2d(1, 1, 1));
  CHECK(list->size() == 3);
  CHECK(list[1]->is_batchnorm());
  CHECK(list->at<nn::Conv2d>(2).weight.dim() == 4);
  CHECK(list->named_parameters().contains("1.weight"));
}

TEST_CASE("nn: layer forward shapes", "[nn]") {
  manual_seed(10);
  Tensor img = randn({2, 3, 8, 8});
  CHECK(nn::Conv2d(nn::Conv2dOptions(3, 8, 3).stride(2).padding(1))(img).sizes() == IntList{2, 8, 4, 4});
  CHECK(nn::Conv2d(nn::Conv2dOptions(3, 6, {3, 1}).dilation(2).groups(3))(img).sizes() == IntList{2, 6, 4, 8});
  CHECK(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(3, 4, 4).stride(2).padding(1))(img).sizes() ==
        IntList{2, 4, 16, 16});
  CHECK(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(3, 4, 3).stride(2).padding(1).output_padding(1))(img).sizes() ==
        IntList{2, 4, 16, 16});
  CHECK(nn::BatchNorm2d(3)(img).sizes() == img.sizes());
  CHECK(nn::BatchNorm1d(5)(randn({4, 5})).sizes() == IntList{4, 5});
  CHECK(nn::BatchNorm1d(5)(randn({4, 5, 3})).sizes() == IntList{4, 5, 3});
  CHECK_THROWS_WITH(nn::BatchNorm2d(3)(randn({2, 3})), Contains("expected 4D input"));
  CHECK_THROWS_WITH(nn::BatchNorm2d(4)(img), Contains("expected 4 channels"));
  CHECK(nn::MaxPool2d(2)(img).sizes() == IntList{2, 3, 4, 4});
  CHECK(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1))(img).sizes() == IntList{2, 3, 4, 4});
  CHECK(nn::AvgPool2d(2)(img).sizes() == IntList{2, 3, 4, 4});
  CHECK(nn::AdaptiveAvgPool2d(1)(img).sizes() == IntList{2, 3, 1, 1});
  CHECK(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({3, 2}))(img).sizes() == IntList{2, 3, 3, 2});
  CHECK(nn::Flatten()(img).sizes() == IntList{2, 192});
  CHECK(nn::Flatten(nn::FlattenOptions().start_dim(2))(img).sizes() == IntList{2, 3, 64});
  CHECK(nn::Identity()(img).is_same(img));
  CHECK(nn::Dropout(0.3)(img).sizes() == img.sizes());
  CHECK(nn::LayerNorm(nn::LayerNormOptions({8}))(img).sizes() == img.sizes());
  CHECK(nn::GroupNorm(3, 3)(img).sizes() == img.sizes());
  for (auto y : {nn::ReLU()(img), nn::ReLU6()(img), nn::LeakyReLU()(img), nn::Tanh()(img), nn::Sigmoid()(img),
                 nn::GELU()(img), nn::SiLU()(img), nn::Softmax(1)(img), nn::LogSoftmax(1)(img)})
    CHECK(y.sizes() == img.sizes());
  CHECK(nn::Embedding(10, 4)(tensor<int64_t>({1, 2, 3, 9, 0, 1}, {2, 3})).sizes() == IntList{2, 3, 4});
  CHECK(nn::Linear(8, 5)(img).sizes() == IntList{2, 3, 8, 5});

  Tensor logits = randn({6, 4});
  Tensor target = tensor<int64_t>({0, 1, 2, 3, 0, 1});
  CHECK(nn::CrossEntropyLoss()(logits, target).dim() == 0);
  CHECK(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().reduction(nn::kNone))(logits, target).sizes() ==
        IntList{6});
  CHECK(nn::NLLLoss()(F::log_softmax(logits, 1), target).dim() == 0);
  Tensor p = rand({6, 4});
  CHECK(nn::BCEWithLogitsLoss()(logits, p).dim() == 0);
  CHECK(nn::BCELoss()(F::sigmoid(logits), p).dim() == 0);
  CHECK(nn::MSELoss()(logits, p).dim() == 0);
  CHECK(nn::L1Loss(nn::kSum)(logits, p).dim() == 0);
  CHECK(nn::SmoothL1Loss(nn::SmoothL1LossOptions().beta(0.5))(logits, p).dim() == 0);

  ApiNet api;
  CHECK(api(randn({2, 1, 8, 8})).sizes() == IntList{2, 10});
}

TEST_CASE("nn: modules equal their functional forms", "[nn]") {
  manual_seed(12);
  Tensor img = randn({2, 4, 6, 6});
  {
    nn::Conv2d m(nn::Conv2dOptions(4, 6, 3).stride(2).padding(1).groups(2));
    CHECK(max_diff(m(img), F::conv2d(img, m->weight, F::Conv2dFuncOptions().bias(m->bias).stride(2).padding(1).groups(2))) == 0.0);
  }
  {
    nn::ConvTranspose2d m(nn::ConvTranspose2dOptions(4, 2, 3).stride(2).padding(1).output_padding(1));
    CHECK(max_diff(m(img), F::conv_transpose2d(img, m->weight, F::ConvTranspose2dFuncOptions().bias(m->bias).stride(2).padding(1).output_padding(1))) == 0.0);
  }
  {
    nn::BatchNorm2d m(4);
    Tensor rm = zeros({4}), rv = ones({4});
    Tensor y = m(img);
    Tensor ref = F::batch_norm(img, rm, rv, F::BatchNormFuncOptions().weight(m->weight).bias(m->bias).training(true));
    CHECK(max_diff(y, ref) == 0.0);
    CHECK(max_diff(m->running_mean, rm) == 0.0);
    CHECK(max_diff(m->running_var, rv) == 0.0);
    CHECK(m->num_batches_tracked.item<int64_t>() == 1);
    // Batch statistics: mean ~0 and the running mean moved by momentum * batch mean.
    CHECK(max_abs(mpx::mean(y, {0, 2, 3})) < 1e-5);
    CHECK(max_diff(m->running_mean, mpx::mean(img, {0, 2, 3}) * 0.1) < 1e-6);
    m->eval();
    CHECK(max_diff(m(img), F::batch_norm(img, rm, rv, F::BatchNormFuncOptions().weight(m->weight).bias(m->bias))) == 0.0);
    CHECK(m->num_batches_tracked.item<int64_t>() == 1);  // eval does not count
  }
  {
    // momentum = None: cumulative average, so after one batch the running mean is the batch mean.
    nn::BatchNorm2d m(nn::BatchNormOptions(4).momentum(std::nullopt));
    m(img);
    CHECK(max_diff(m->running_mean, mpx::mean(img, {0, 2, 3})) < 1e-6);
  }
  {
    nn::LayerNorm m(nn::LayerNormOptions({6, 6}));
    CHECK(max_diff(m(img), F::layer_norm(img, F::LayerNormFuncOptions({6, 6}).weight(m->weight).bias(m->bias))) == 0.0);
    nn::GroupNorm g(2, 4);
    CHECK(max_diff(g(img), F::group_norm(img, F::GroupNormFuncOptions(2).weight(g->weight).bias(g->bias))) == 0.0);
  }
  CHECK(max_diff(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1))(img),
                 F::max_pool2d(img, F::MaxPool2dFuncOptions(3).stride(2).padding(1))) == 0.0);
  CHECK(max_diff(nn::MaxPool2d(2)(img), F::max_pool2d(img, 2)) == 0.0);
  CHECK(max_diff(nn::AvgPool2d(2)(img), F::avg_pool2d(img, 2)) == 0.0);
  CHECK(max_diff(nn::AdaptiveAvgPool2d(2)(img), F::adaptive_avg_pool2d(img, F::AdaptiveAvgPool2dFuncOptions(2))) == 0.0);
  CHECK(max_diff(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2))(img),
                 F::leaky_relu(img, F::LeakyReLUFuncOptions().negative_slope(0.2))) == 0.0);
  CHECK(max_diff(nn::ReLU()(img), F::relu(img)) == 0.0);
  CHECK(max_diff(nn::GELU()(img), F::gelu(img)) == 0.0);
  CHECK(max_diff(nn::GELU(nn::GELUOptions().approximate("tanh"))(img), F::gelu(img)) < 1e-3);
  CHECK(max_diff(nn::Softmax(1)(img), F::softmax(img, F::SoftmaxFuncOptions(1))) == 0.0);
  CHECK(max_diff(nn::Flatten()(img), F::flatten(img, 1)) == 0.0);

  // Dropout: identity in eval; in training it equals F::dropout under the same seed.
  nn::Dropout d(0.5);
  manual_seed(3);
  Tensor a = d(img);
  manual_seed(3);
  Tensor b = F::dropout(img, F::DropoutFuncOptions().p(0.5).training(true));
  CHECK(max_diff(a, b) == 0.0);
  CHECK(max_diff(a, img) > 0.0);
  d->eval();
  CHECK(max_diff(d(img), img) == 0.0);
  CHECK(max_diff(F::dropout(img, F::DropoutFuncOptions().training(false)), img) == 0.0);

  Tensor logits = randn({6, 4});
  Tensor target = tensor<int64_t>({0, 1, 2, 3, -100, 1});
  auto ce_opts = nn::CrossEntropyLossOptions().label_smoothing(0.1).ignore_index(-100).reduction(nn::kSum);
  CHECK(max_diff(nn::CrossEntropyLoss(ce_opts)(logits, target), F::cross_entropy(logits, target, ce_opts)) == 0.0);
  CHECK(max_diff(nn::CrossEntropyLoss()(logits, target), F::cross_entropy(logits, target)) == 0.0);
  CHECK(max_diff(nn::NLLLoss()(F::log_softmax(logits, 1), target), F::nll_loss(F::log_softmax(logits, 1), target)) == 0.0);
  // Without smoothing, cross entropy = nll of log_softmax.
  CHECK(max_diff(F::cross_entropy(logits, target), F::nll_loss(F::log_softmax(logits, 1), target)) < 1e-6);
  Tensor p = rand({6, 4});
  CHECK(max_diff(nn::BCEWithLogitsLoss()(logits, p), F::binary_cross_entropy_with_logits(logits, p)) == 0.0);
  CHECK(max_diff(F::binary_cross_entropy_with_logits(logits, p), F::binary_cross_entropy(F::sigmoid(logits), p)) < 1e-5);
  CHECK(max_diff(nn::MSELoss()(logits, p), F::mse_loss(logits, p)) == 0.0);
  CHECK(max_diff(F::mse_loss(logits, p), mpx::mean((logits - p) * (logits - p))) < 1e-6);
  CHECK(max_diff(nn::L1Loss()(logits, p), F::l1_loss(logits, p)) == 0.0);
  CHECK(max_diff(nn::SmoothL1Loss()(logits, p), F::smooth_l1_loss(logits, p)) == 0.0);
  CHECK(max_diff(F::l1_loss(logits, p, F::L1LossFuncOptions("sum")), mpx::sum(mpx::abs(logits - p))) < 1e-5);

  // Linear module = x W^T + b.
  nn::Linear lin(4, 3);
  CHECK(max_diff(lin(logits), logits.matmul(lin->weight.t()) + lin->bias) < 1e-6);
}

TEST_CASE("nn: functional extras (pad, embedding, relu6)", "[nn]") {
  Tensor x = tensor<float>({1, 2, 3, 4}, {1, 2, 2}).set_requires_grad(true);
  Tensor p = F::pad(x, F::PadFuncOptions({1, 0, 0, 1}));
  CHECK(p.sizes() == IntList{1, 3, 3});
  CHECK(max_diff(p.detach(), tensor<float>({0, 1, 2, 0, 3, 4, 0, 0, 0}, {1, 3, 3})) == 0.0);
  Tensor v = F::pad(x, F::PadFuncOptions({1, 1}).value(-1.0));
  CHECK(max_diff(v.detach(), tensor<float>({-1, 1, 2, -1, -1, 3, 4, -1}, {1, 2, 4})) == 0.0);
  Tensor c = F::pad(x, F::PadFuncOptions({-1, 0}));
  CHECK(max_diff(c.detach(), tensor<float>({2, 4}, {1, 2, 1})) == 0.0);
  (p.sum() + v.sum()).backward();
  CHECK(max_diff(x.grad(), full({1, 2, 2}, 2.0)) == 0.0);

  Tensor w = tensor<float>({0, 0, 1, 1, 2, 2}, {3, 2}).set_requires_grad(true);
  Tensor idx = tensor<int64_t>({2, 0, 2});
  Tensor e = F::embedding(idx, w);
  CHECK(max_diff(e.detach(), tensor<float>({2, 2, 0, 0, 2, 2}, {3, 2})) == 0.0);
  e.sum().backward();
  CHECK(max_diff(w.grad(), tensor<float>({1, 1, 0, 0, 2, 2}, {3, 2})) == 0.0);
  CHECK_THROWS_WITH(F::embedding(tensor<int64_t>({3}), w), Contains("indices must be in [0, 3)"));
  nn::Embedding emb(nn::EmbeddingOptions(5, 3).padding_idx(1));
  CHECK(max_abs(emb->weight.select(0, 1)) == 0.0);

  CHECK(max_diff(F::relu6(tensor<float>({-1, 3, 9})), tensor<float>({0, 3, 6})) == 0.0);
}

TEST_CASE("nn: gradchecks of functional compositions and modules in f64", "[nn][gradcheck]") {
  manual_seed(14);
  using testing::gradcheck;
  using testing::leaf;
  // F::pad (constant, with crop) and the tanh GELU are compositions of mpx ops.
  CHECK(gradcheck([](const tensor_list& in) { return F::pad(in[0], F::PadFuncOptions({2, -1, 1, 1}).value(0.5)); },
                  {leaf({2, 3, 4})}) == "");
  CHECK(gradcheck([](const tensor_list& in) { return F::gelu(in[0], F::GELUFuncOptions().approximate("tanh")); },
                  {leaf({3, 5})}) == "");
  CHECK(gradcheck([](const tensor_list& in) { return F::relu6(in[0] * 4.0); }, {leaf({7})}) == "");
  Tensor idx = tensor<int64_t>({0, 3, 3, 1, 2, 0}, {2, 3});
  CHECK(gradcheck([&](const tensor_list& in) { return F::embedding(idx, in[0]); }, {leaf({4, 3})}) == "");
  // A module stack in f64: gradients reach every parameter through holders and Sequential.
  nn::Sequential mlp({nn::Linear(3, 4), nn::Tanh(), nn::Linear(4, 2)});
  mlp->to(kFloat64);
  tensor_list params = mlp->parameters();
  tensor_list inputs = {leaf({5, 3})};
  inputs.insert(inputs.end(), params.begin(), params.end());
  CHECK(gradcheck([&](const tensor_list&) { return mlp(inputs[0]); }, inputs) == "");
}

// ---------------------------------------------------------------- zero_grad and clipping

TEST_CASE("nn: zero_grad", "[nn]") {
  nn::Linear lin(3, 2);
  lin(randn({4, 3})).sum().backward();
  REQUIRE(lin->weight.grad().defined());
  lin->zero_grad(/*set_to_none=*/false);
  REQUIRE(lin->weight.grad().defined());
  CHECK(max_abs(lin->weight.grad()) == 0.0);
  lin->zero_grad();
  CHECK_FALSE(lin->weight.grad().defined());
  CHECK_FALSE(lin->bias.grad().defined());
}

TEST_CASE("nn: ModuleDict, ParameterList and ParameterDict register, name, save and train their contents", "[nn]") {
  manual_seed(10);
  nn::ModuleDict heads(std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>{
      {"cls", nn::Linear(4, 3).ptr()}, {"reg", nn::Linear(4, 1).ptr()}});
  heads->insert("act", nn::Tanh());
  CHECK(heads->keys() == std::vector<std::string>{"cls", "reg", "act"});
  CHECK(heads->contains("reg"));
  CHECK(heads->size() == 3);
  CHECK(heads->at<nn::LinearImpl>("cls").weight.sizes() == IntList{3, 4});
  CHECK(heads->named_parameters().keys() == std::vector<std::string>{"cls.weight", "cls.bias", "reg.weight", "reg.bias"});
  heads->insert("reg", nn::Linear(4, 2));  // an existing key is replaced, in place
  CHECK(heads->keys() == std::vector<std::string>{"cls", "reg", "act"});
  CHECK(heads->at<nn::LinearImpl>("reg").weight.size(0) == 2);
  CHECK_THROWS_WITH((*heads)["nope"], Contains("no module named 'nope'"));
  CHECK_THROWS_WITH(heads->at<nn::Conv2dImpl>("cls"), Contains("not the requested type"));

  nn::ParameterList ps(std::vector<Tensor>{randn({2, 2}), randn({3})});
  ps->append(zeros({1}));
  CHECK(ps->size() == 3);
  CHECK(ps->named_parameters().keys() == std::vector<std::string>{"0", "1", "2"});
  CHECK((*ps)[1].requires_grad());
  CHECK_THROWS_WITH((*ps)[3], Contains("out of range"));
  nn::ParameterDict pd(std::vector<std::pair<std::string, Tensor>>{{"scale", ones({4})}});
  pd->insert("shift", zeros({4}));
  CHECK(pd->keys() == std::vector<std::string>{"scale", "shift"});
  CHECK(pd->state_dict().keys() == std::vector<std::string>{"scale", "shift"});
  CHECK_THROWS_WITH((*pd)["x"], Contains("no parameter named 'x'"));
  // Trained like any module's parameters.
  sum((*pd)["scale"] * 3.0 + (*ps)[0].sum()).backward();
  CHECK(max_diff((*pd)["scale"].grad(), full({4}, 3.0)) == 0.0);
  CHECK((*ps)[0].grad().defined());
}

TEST_CASE("nn::utils: parameters_to_vector, vector_to_parameters and get_total_norm", "[nn]") {
  const Tensor a = tensor<float>({1, 2, 3, 4}).reshape({2, 2}).set_requires_grad(true);
  const Tensor b = tensor<float>({5, 6}).set_requires_grad(true);
  const Tensor v = nn::utils::parameters_to_vector({a, b});
  CHECK(v.sizes() == IntList{6});
  CHECK(max_diff(v, tensor<float>({1, 2, 3, 4, 5, 6})) == 0.0);
  sum(v * v).backward();  // differentiable, as PyTorch's
  CHECK(max_diff(b.grad(), tensor<float>({10, 12})) == 0.0);
  nn::utils::vector_to_parameters(tensor<float>({6, 5, 4, 3, 2, 1}), {a, b});
  CHECK(max_diff(a, tensor<float>({6, 5, 4, 3}).reshape({2, 2})) == 0.0);
  CHECK(max_diff(b, tensor<float>({2, 1})) == 0.0);
  CHECK(a.requires_grad());
  CHECK_THROWS_WITH(nn::utils::vector_to_parameters(zeros({5}), {a, b}), Contains("5 elements but the parameters hold 6"));
  CHECK(nn::utils::get_total_norm({tensor<float>({3, 4}), tensor<float>({0, 12})}).item<double>() == Approx(13.0));
  CHECK(nn::utils::get_total_norm({tensor<float>({3, -4}), tensor<float>({1})}, INFINITY).item<double>() == 4.0);
  CHECK(nn::utils::get_total_norm({}).item<double>() == 0.0);
  CHECK_THROWS_WITH(nn::utils::get_total_norm({tensor<float>({INFINITY})}, 2.0, true), Contains("non-finite"));
}

TEST_CASE("nn: clip_grad_norm_ and clip_grad_value_", "[nn]") {
  Tensor a = zeros({2}).set_requires_grad(true);
  Tensor b = zeros({3}).set_requires_grad(true);
  Tensor none = zeros({2}).set_requires_grad(true);  // no gradient: skipped
  auto reset = [&] {
    a.set_grad(tensor<float>({3, 4}));
    b.set_grad(tensor<float>({0, 0, -12}));
  };
  reset();
  double total = nn::utils::clip_grad_norm_({a, b, none}, 6.5);
  CHECK(total == Approx(13.0));
  const double coef = 6.5 / (13.0 + 1e-6);
  CHECK(max_diff(a.grad(), tensor<float>({3, 4}) * coef) < 1e-6);
  CHECK(max_diff(b.grad(), tensor<float>({0, 0, -12}) * coef) < 1e-6);
  CHECK(nn::utils::clip_grad_norm_({a, b}, 100.0) == Approx(6.5).epsilon(1e-5));

  reset();  // a large max_norm leaves the gradients alone
  CHECK(nn::utils::clip_grad_norm_(std::vector<Tensor>{a, b}, 20.0) == Approx(13.0));
  CHECK(max_diff(a.grad(), tensor<float>({3, 4})) == 0.0);

  reset();
  CHECK(nn::utils::clip_grad_norm_({a, b}, 100.0, 1.0) == Approx(19.0));
  CHECK(nn::utils::clip_grad_norm_({a, b}, 6.0, INFINITY) == Approx(12.0));
  CHECK(max_diff(b.grad(), tensor<float>({0, 0, -6})) < 1e-5);
  reset();
  CHECK(nn::utils::clip_grad_norm_({a, b}, 100.0, 3.0) == Approx(std::cbrt(27.0 + 64.0 + 1728.0)));
  CHECK(nn::utils::clip_grad_norm_(none, 1.0) == 0.0);

  // Non-finite: scaled anyway (NaN gradients) unless error_if_nonfinite.
  a.set_grad(tensor<float>({INFINITY, 1}));
  b.set_grad(tensor<float>({0, 0, 1}));
  CHECK(std::isinf(nn::utils::clip_grad_norm_({a, b}, 1.0)));
  CHECK_FALSE((b.grad().all_finite() && a.grad().all_finite()));
  a.set_grad(tensor<float>({INFINITY, 1}));
  CHECK_THROWS_WITH(nn::utils::clip_grad_norm_({a, b}, 1.0, 2.0, true), Contains("non-finite"));

  // Through a module's parameters, half-precision gradients included.
  nn::Linear lin(4, 4);
  lin->to(kFloat16);
  lin(randn({8, 4}, kFloat16)).sum().backward();
  const double n = nn::utils::clip_grad_norm_(lin->parameters(), 0.5);
  CHECK(n > 0.5);
  double after = 0;
  for (auto& p : lin->parameters()) after += std::pow(mpx::norm(p.grad().to(kFloat32)).item<double>(), 2);
  CHECK(std::sqrt(after) == Approx(0.5).epsilon(0.01));

  reset();
  nn::utils::clip_grad_value_({a, b, none}, 3.5);
  CHECK(max_diff(a.grad(), tensor<float>({3, 3.5})) == 0.0);
  CHECK(max_diff(b.grad(), tensor<float>({0, 0, -3.5})) == 0.0);
  CHECK_FALSE(none.grad().defined());
}

// ---------------------------------------------------------------- training end to end

TEST_CASE("nn: a tiny MLP learns XOR of signs with hand-written SGD", "[nn]") {
  manual_seed(13);
  // Points away from the axes; label 1 when x0 and x1 have the same sign.
  Tensor raw = rand({128, 2}) * 2.0 - 1.0;
  Tensor x = raw + mpx::sign(raw) * 0.2;
  Tensor y = mpx::gt(x.select(1, 0) * x.select(1, 1), 0.0).to(kInt64);

  nn::Sequential mlp({nn::Linear(2, 16), nn::Tanh(), nn::Linear(16, 16), nn::Tanh(), nn::Linear(16, 2)});
  const double lr = 0.5;
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    mlp->zero_grad();
    Tensor loss = F::cross_entropy(mlp(x), y);
    loss.backward();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    NoGradGuard ng;
    for (auto& p : mlp->parameters()) p.sub_(p.grad(), lr);
  }
  INFO("first loss " << first << ", last loss " << last);
  CHECK(first > 0.5);
  CHECK(last < 0.1);
  NoGradGuard ng;
  Tensor acc = mpx::mean(mpx::eq(mlp(x).argmax(1), y).to(kFloat32));
  CHECK(acc.item<double>() > 0.97);
}

TEST_CASE("nn::init: trunc_normal_, orthogonal_ and eye_", "[nn]") {
  manual_seed(9);
  namespace init = nn::init;
  // The standard normal truncated to [-2, 2]: variance 1 - 4 phi(2) / (Phi(2) - Phi(-2)) = 0.7737.
  Tensor w = empty({200, 250});
  init::trunc_normal_(w);
  CHECK(max_abs(w) <= 2.0);
  CHECK(std_all(w) == Approx(std::sqrt(0.77374)).epsilon(0.01));
  CHECK(std::abs(mpx::mean(w).item<double>()) < 0.01);
  // A narrow window far in the tail costs nothing and stays inside it.
  init::trunc_normal_(w, 0.0, 1.0, 3.0, 3.1);
  CHECK(mpx::min(w).item<double>() >= 3.0);
  CHECK(mpx::max(w).item<double>() <= 3.1);
  // a and b are absolute bounds (PyTorch's), not multiples of std; bf16 rounding may step past them by half an ulp.
  Tensor g = empty({64, 64}, TensorOptions(kBFloat16));
  init::trunc_normal_(g, 0.0, 0.02, -0.03, 0.03);
  CHECK(max_abs(g.to(kFloat32)) <= 0.03 * (1 + 1.0 / 256));
  CHECK(std_all(g.to(kFloat32)) < 0.02);
  CHECK_THROWS_WITH(init::trunc_normal_(w, 0.0, 1.0, 1.0, -1.0), Contains("is empty"));

  // Orthonormal rows (wide), columns (tall), and a conv weight seen as [out, in * k * k]; gain scales.
  for (const IntList& shape : {IntList{8, 20}, IntList{20, 8}, IntList{6, 6}, IntList{4, 2, 3, 3}}) {
    INFO(shape_str(shape));
    Tensor q = empty(shape, TensorOptions(kFloat64));
    init::orthogonal_(q, 1.5);
    const Tensor m = q.reshape({shape[0], -1});
    const bool wide = m.size(0) <= m.size(1);
    const Tensor gram = wide ? m.matmul(m.t()) : m.t().matmul(m);
    const int64_t k = gram.size(0);
    Tensor eye = zeros({k, k}, TensorOptions(kFloat64));
    init::eye_(eye);
    CHECK(max_diff(gram, eye * 2.25) < 1e-10);
  }
  Tensor r = empty({3, 5});
  init::eye_(r);
  CHECK(mpx::sum(r).item<double>() == 3.0);
  CHECK(r[2][2].item<double>() == 1.0);
  CHECK_THROWS_WITH(init::orthogonal_(empty({4})), Contains("2 or more dimensions"));
  CHECK_THROWS_WITH(init::eye_(empty({2, 2, 2})), Contains("only 2-d"));
}

TEST_CASE("nn::Conv1d: LibTorch's options, parameter shapes, PyTorch's init bounds, forward as F::conv1d", "[nn]") {
  mpx::manual_seed(3);
  nn::Conv1d conv(nn::Conv1dOptions(4, 6, 3).stride(2).padding(1).groups(2));
  const auto params = conv->named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(conv->weight.sizes() == mpx::IntList{6, 2, 3});
  CHECK(conv->bias.sizes() == mpx::IntList{6});
  // kaiming_uniform(a = sqrt(5)) and the bias bound are both 1 / sqrt(fan_in), fan_in = 2 * 3.
  const double bound = 1.0 / std::sqrt(6.0);
  CHECK(mpx::amax(mpx::abs(conv->weight), {0, 1, 2}).item<double>() <= bound + 1e-7);
  CHECK(mpx::amax(mpx::abs(conv->bias), {0}).item<double>() <= bound + 1e-7);
  const mpx::Tensor x = mpx::randn({3, 4, 9});
  const mpx::Tensor y = conv(x);
  CHECK(y.sizes() == mpx::IntList{3, 6, 5});
  const mpx::Tensor ref =
      F::conv1d(x, conv->weight, F::Conv1dFuncOptions().bias(conv->bias).stride(2).padding(1).groups(2));
  CHECK(mpx::amax(mpx::abs(y - ref), {0, 1, 2}).item<double>() == 0.0);
  std::ostringstream os;
  os << *conv;
  CHECK(os.str() == "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), groups=2)");
  CHECK_THROWS_WITH(nn::Conv1d(nn::Conv1dOptions(4, 6, 3).groups(4)), Catch::Contains("divisible by groups"));
}
