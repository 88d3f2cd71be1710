// LibTorch's tensor, autograd and training spellings as its examples and notes write them, through <mpx/torch.h>:
// creation (tensor({..}), dtype(), requires_grad(), a plain integer length), sizes().vec(), accessors, the
// methods a LibTorch user reaches for, custom Functions taking AutogradContext*, a gradient penalty through
// autograd::grad, and the DCGAN example's networks and loop.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <sstream>
#include <vector>

#include <mpx/torch.h>

#include "tests/test_files.h"
#include "tests/test_util.h"

namespace {

using mpx::testing::error_of;
using mpx::testing::max_abs_diff;

TEST_CASE("tensor creation in LibTorch's spellings: values, dtypes and options", "[api]") {
  auto f = torch::tensor({1.0, 2.0, 3.0});
  CHECK(f.dtype() == torch::kFloat32);  // a floating literal takes the default dtype, as in LibTorch
  CHECK(f.sizes() == torch::IntList{3});
  CHECK(f[2].item<float>() == 3.0f);
  auto i = torch::tensor({1, 2, 3});
  CHECK(i.dtype() == torch::kInt64);
  CHECK(i.sum().item<int64_t>() == 6);
  CHECK(torch::tensor({true, false}).dtype() == torch::kBool);
  auto d = torch::tensor({1.5, 2.5}, torch::kFloat64);
  CHECK(d.dtype() == torch::kFloat64);
  auto m = torch::tensor({{1.0, 2.0}, {3.0, 4.0}});
  CHECK(m.sizes() == torch::IntList{2, 2});
  CHECK(m.index({1, 0}).item<float>() == 3.0f);
  CHECK_THAT(error_of([] { torch::tensor({{1.0, 2.0}, {3.0}}); }), Catch::Contains("same length"));

  // A 0-dim tensor from a number, a leaf when asked to require grad.
  auto s = torch::tensor(3.5, torch::requires_grad());
  CHECK(s.dim() == 0);
  CHECK(s.is_leaf());
  CHECK(s.requires_grad());
  (s * s).backward();
  CHECK(s.grad().item<double>() == 7.0);
  CHECK(torch::tensor(int64_t{1} << 60).item<int64_t>() == (int64_t{1} << 60));

  // Option factories and a plain integer length.
  auto z = torch::zeros({2}, torch::dtype(torch::kInt32).device(torch::kCPU, 0).layout(torch::kStrided));
  CHECK(z.dtype() == torch::kInt32);
  auto r = torch::randn(3, torch::requires_grad());
  CHECK(r.sizes() == torch::IntList{3});
  CHECK(r.requires_grad());
  CHECK(torch::ones(10, torch::dtype(torch::kFloat64)).sum().item<double>() == 10.0);
  CHECK(torch::empty(int64_t{4}, torch::kCPU).numel() == 4);
  CHECK(torch::full(3, 5.0).sum().item<double>() == 15.0);
  CHECK(torch::eye(3, torch::dtype(torch::kFloat64)).dtype() == torch::kFloat64);
  auto ri = torch::randint(/*high=*/4, {200});
  CHECK(ri.dtype() == torch::kInt64);
  CHECK(ri.min().item<int64_t>() >= 0);
  CHECK(ri.max().item<int64_t>() <= 3);
  CHECK(ri.max().item<int64_t>() == 3);  // 200 draws from 4 values: every value appears
  // A braced list is still a shape: {3} is one dim of 3, {} is 0-dim.
  CHECK(torch::zeros({3}).sizes() == torch::IntList{3});
  CHECK(torch::zeros({}).dim() == 0);
}

TEST_CASE("sizes() reads as an IntArrayRef: vec(), printing, comparison with a std::vector", "[api]") {
  auto x = torch::zeros({2, 3, 4});
  std::vector<int64_t> v = x.sizes().vec();
  CHECK(v == std::vector<int64_t>{2, 3, 4});
  CHECK(x.sizes() == v);
  torch::IntArrayRef s = x.sizes();
  std::ostringstream os;
  os << s << " " << x.strides();
  CHECK(os.str() == "[2, 3, 4] [12, 4, 1]");
  CHECK(torch::str("sample-", 3, ".pt") == "sample-3.pt");
}

TEST_CASE("accessor<T, N>() reads and writes a strided CPU tensor by index", "[api]") {
  auto x = torch::arange(12, torch::kFloat).reshape({3, 4});
  auto xt = x.t();  // strides (1, 4): the accessor follows them
  auto a = xt.accessor<float, 2>();
  CHECK(a.size(0) == 4);
  CHECK(a[1][2] == 9.0f);  // x[2][1]
  a[3][0] = -1.0f;         // writes x[0][3]
  CHECK(x.index({0, 3}).item<float>() == -1.0f);
  CHECK_THAT(error_of([&] { x.accessor<float, 3>(); }), Catch::Contains("2 dims"));
  CHECK_THAT(error_of([&] { x.accessor<double, 2>(); }), Catch::Contains("holds f32"));
}

TEST_CASE("the methods LibTorch code calls: norm, std, var, topk, sort, chunk, split, clamp_min/max", "[api]") {
  auto x = torch::tensor({{3.0, 4.0}, {6.0, 8.0}});
  CHECK(x.norm().item<double>() == Approx(std::sqrt(125.0)));
  CHECK(max_abs_diff(x.norm(2, 1), torch::tensor({5.0, 10.0})) < 1e-6);
  CHECK(max_abs_diff(x.norm(1, 0, /*keepdim=*/true), torch::tensor({{9.0, 12.0}})) < 1e-6);
  CHECK(x.norm(INFINITY).item<double>() == 8.0);
  // Mean 5.25: squared deviations 5.0625 + 1.5625 + 0.5625 + 7.5625 = 14.75.
  CHECK(x.var().item<double>() == Approx(14.75 / 3));
  CHECK(x.std(false).item<double>() == Approx(std::sqrt(14.75 / 4)));
  CHECK(max_abs_diff(x.std(1), torch::tensor({std::sqrt(0.5), std::sqrt(2.0)})) < 1e-6);

  auto v = torch::tensor({5.0, 1.0, 4.0, 2.0});
  auto [top, idx] = v.topk(2);
  CHECK(max_abs_diff(top, torch::tensor({5.0, 4.0})) == 0);
  CHECK(max_abs_diff(idx, torch::tensor({0, 2})) == 0);
  CHECK(max_abs_diff(std::get<0>(v.sort(-1, /*descending=*/true)), torch::tensor({5.0, 4.0, 2.0, 1.0})) == 0);
  CHECK(max_abs_diff(v.argsort(), torch::tensor({1, 3, 2, 0})) == 0);
  auto parts = v.chunk(2);
  REQUIRE(parts.size() == 2);
  CHECK(max_abs_diff(parts[1], torch::tensor({4.0, 2.0})) == 0);
  CHECK(v.split(3).back().numel() == 1);
  CHECK(max_abs_diff(v.clamp_min(2).clamp_max(4), torch::tensor({4.0, 2.0, 4.0, 2.0})) == 0);
}

TEST_CASE("assigning to a temporary writes through it, as in LibTorch, and to a named tensor rebinds it", "[api]") {
  auto x = torch::zeros({2, 3});
  x[0] = torch::tensor({1.0, 2.0, 3.0});  // a row view: copy_
  x.select(1, 2) = 7.0;                   // fill_
  CHECK(max_abs_diff(x, torch::tensor({{1.0, 2.0, 7.0}, {0.0, 0.0, 7.0}})) == 0);
  auto y = x;
  y = torch::ones({1});  // rebinds y; x keeps its values
  CHECK(x.numel() == 6);
  CHECK(x.sum().item<double>() == 17.0);

  // An update outside the graph through data(), as older LibTorch code writes it.
  auto w = torch::ones({2}, torch::requires_grad());
  (w * 3).sum().backward();
  w.data() = w.data() - 0.5 * w.grad();
  CHECK(max_abs_diff(w.detach(), torch::full({2}, -0.5)) == 0);
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
}

TEST_CASE("binary ops as methods: add/sub with alpha, mul, div, comparisons with a number, type_as", "[api]") {
  auto a = torch::tensor({1.0, 2.0, 3.0});
  auto b = torch::tensor({4.0, 5.0, 6.0});
  CHECK(max_abs_diff(a.add(b, 2), torch::tensor({9.0, 12.0, 15.0})) == 0);
  CHECK(max_abs_diff(a.sub(1).mul(2).div(b), torch::tensor({0.0, 0.4, 2.0 / 3})) < 1e-7);
  CHECK(max_abs_diff(a.maximum(b.sub(3)), torch::tensor({1.0, 2.0, 3.0})) == 0);
  CHECK(a.gt(1.5).sum().item<int64_t>() == 2);
  CHECK(a.eq(2).dtype() == torch::kBool);
  auto i = torch::tensor({1, 2});
  CHECK(i.type_as(a).dtype() == torch::kFloat32);
  CHECK(a.ndimension() == 1);
  CHECK(a.nbytes() == 12);
  CHECK(torch::ones({2, 3, 4}).bmm(torch::ones({2, 4, 5})).sizes() == torch::IntList{2, 3, 5});
}

// LibTorch's custom-function example: forward and backward take AutogradContext*, backward returns one gradient
// per forward argument (undefined for the non-tensor ones), and a defaulted tensor argument may be left out.
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

struct LinearFunction : torch::autograd::Function<LinearFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, torch::Tensor weight,
                               torch::Tensor bias = torch::Tensor()) {
    ctx->save_for_backward({input, weight, bias});
    auto output = input.mm(weight.t());
    if (bias.defined()) output += bias.unsqueeze(0).expand_as(output);
    return output;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    auto grad_output = grad_outputs[0];
    torch::Tensor grad_bias;
    if (saved[2].defined()) grad_bias = grad_output.sum(0);
    return {grad_output.mm(saved[1]), grad_output.t().mm(saved[0]), grad_bias};
  }
};

struct MulConstant : torch::autograd::Function<MulConstant> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor tensor, double constant) {
    ctx->saved_data["constant"] = constant;
    return tensor * constant;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    return {grad_outputs[0] * ctx->saved_data["constant"].toDouble(), torch::Tensor()};
  }
};

struct BadGradient : torch::autograd::Function<BadGradient> {
  static torch::Tensor forward(AutogradContext*, torch::Tensor t, double c) { return t * c; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0], torch::ones({1})}; }
};

TEST_CASE("custom Functions in LibTorch's form: AutogradContext*, a gradient per argument, a defaulted bias",
          "[api][autograd]") {
  torch::manual_seed(0);
  auto x = torch::randn({2, 3}).requires_grad_();
  auto w = torch::randn({4, 3}).requires_grad_();
  auto y = LinearFunction::apply(x, w);
  CHECK(y.grad_fn()->name() == "(anonymous namespace)::LinearFunction");
  y.sum().backward();
  CHECK(max_abs_diff(x.grad(), torch::ones({2, 4}).mm(w.detach())) < 1e-6);
  CHECK(max_abs_diff(w.grad(), torch::ones({4, 2}).mm(x.detach())) < 1e-6);

  auto b = torch::randn({4}).requires_grad_();
  LinearFunction::apply(x, w, b).sum().backward();
  CHECK(max_abs_diff(b.grad(), torch::full({4}, 2.0)) < 1e-6);

  auto v = torch::randn({2}).requires_grad_();
  MulConstant::apply(v, 5.5).sum().backward();
  CHECK(max_abs_diff(v.grad(), torch::full({2}, 5.5)) < 1e-6);

  auto u = torch::randn({1}).requires_grad_();
  CHECK_THAT(error_of([&] { BadGradient::apply(u, 2.0).sum().backward(); }),
             Catch::Contains("not a tensor argument of forward"));
}

TEST_CASE("a gradient penalty through autograd::grad with create_graph, as LibTorch's autograd example",
          "[api][autograd]") {
  torch::manual_seed(1);
  auto model = torch::nn::Linear(4, 3);
  auto input = torch::randn({3, 4}).requires_grad_(true);
  auto output = model(input);
  auto target = torch::randn({3, 3});
  auto loss = torch::nn::MSELoss()(output, target);
  // The fifth argument is create_graph (the fourth, retain_graph, is what LibTorch's example sets, so its penalty
  // carries no gradient there; the same call here gives the same).
  auto gradient = torch::autograd::grad({output}, {input}, /*grad_outputs=*/{torch::ones_like(output)},
                                        /*retain_graph=*/true, /*create_graph=*/true)[0];
  auto penalty = torch::pow((gradient.norm(2, /*dim=*/1) - 1), 2).mean();
  (loss + penalty).backward();

  // Each row of the gradient is s = the column sums of W, whatever the input, so the penalty reaches the weight
  // only: d/dW_j (|s| - 1)^2 = 2 (|s| - 1) s / |s| for every row j, beside the loss's own gradient.
  auto W = model->weight.detach();
  auto s = W.sum(0);
  const double ns = s.norm().item<double>();
  auto d_out = (output.detach() - target) * (2.0 / 9.0);
  CHECK(max_abs_diff(input.grad(), d_out.mm(W)) < 1e-5);
  auto want_w = d_out.t().mm(input.detach()) + (s * (2 * (ns - 1) / ns)).unsqueeze(0).expand({3, 4});
  CHECK(max_abs_diff(model->weight.grad(), want_w) < 1e-5);
}

struct Numbers : torch::data::datasets::Dataset<Numbers> {
  torch::data::Example<> get(size_t i) override {
    return {torch::tensor({static_cast<float>(i)}), torch::tensor(static_cast<int64_t>(i))};
  }
  std::optional<size_t> size() const override { return 10; }
};

TEST_CASE("a loader's batch binds to Example<>, and LibTorch's distributed samplers split the data",
          "[api][data]") {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      Numbers().map(torch::data::transforms::Stack<>()), 4);
  int64_t seen = 0;
  for (const torch::data::Example<>& batch : *loader) {
    CHECK(batch.data.size(0) == batch.target.size(0));
    seen += batch.data.size(0);
  }
  CHECK(seen == 10);

  // Two ranks: disjoint shares of ceil(10 / 2) covering everything; without duplicates, 10 / 4 each of four.
  std::set<int64_t> all;
  for (size_t rank = 0; rank < 2; ++rank) {
    torch::data::samplers::DistributedRandomSampler sampler(10, /*num_replicas=*/2, rank);
    auto idx = sampler.indices(0);
    CHECK(idx.size() == 5);
    all.insert(idx.begin(), idx.end());
  }
  CHECK(all.size() == 10);
  CHECK(torch::data::samplers::DistributedSequentialSampler(10, 4, 3, /*allow_duplicates=*/false).indices(0).size() == 2);
  CHECK(torch::data::samplers::DistributedSequentialSampler(10, 4, 3).indices(0).size() == 3);
}

// The C++ frontend tutorial's module forms: a parameter registered beside a submodule, holders built empty and
// assigned in the constructor, a ModuleList walked with as<>(), functional calls with their FuncOptions.
struct TutorialNet : torch::nn::Module {
  TutorialNet(int64_t n, int64_t m) : linear(register_module("linear", torch::nn::Linear(n, m))) {
    another_bias = register_parameter("b", torch::randn(m));
  }
  torch::Tensor forward(torch::Tensor input) { return linear(input) + another_bias; }
  torch::nn::Linear linear;
  torch::Tensor another_bias;
};

struct SmallConvNetImpl : torch::nn::Module {
  SmallConvNetImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    bn = register_module("bn", torch::nn::BatchNorm2d(8));
    fc = register_module("fc", torch::nn::Linear(8, 10));
    blocks = register_module("blocks", torch::nn::ModuleList(torch::nn::Linear(10, 10), torch::nn::Linear(10, 10)));
  }
  torch::Tensor forward(torch::Tensor x) {
    namespace F = torch::nn::functional;
    x = F::relu(bn(conv(x)), F::ReLUFuncOptions().inplace(true));
    x = F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{4, 4}).mode(torch::kBilinear)
                              .align_corners(false));
    x = fc(torch::flatten(F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)), 1));
    for (const auto& m : *blocks) x = m->as<torch::nn::Linear>()->forward(x);
    return x;
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(SmallConvNet);

TEST_CASE("the C++ frontend tutorial's spellings: modules, init by apply, StepLR, grad modes, lists on disk",
          "[api][train]") {
  torch::manual_seed(0);
  TutorialNet net(4, 5);
  std::vector<std::string> names;
  for (const auto& pair : net.named_parameters()) names.push_back(pair.key());
  CHECK(names == std::vector<std::string>{"b", "linear.weight", "linear.bias"});
  CHECK(net.forward(torch::ones({2, 4})).sizes() == torch::IntList{2, 5});

  SmallConvNet model;
  model->apply([](torch::nn::Module& m) {
    if (auto* conv = m.as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      torch::nn::init::constant_(conv->bias, 0.5);
    } else if (auto* lin = m.as<torch::nn::Linear>()) {
      torch::nn::init::xavier_uniform_(lin->weight);
      torch::nn::init::zeros_(lin->bias);
    }
  });
  auto p = model->named_parameters();
  CHECK(p["conv.bias"].min().item<float>() == 0.5f);
  CHECK(p["blocks.1.bias"].abs().max().item<float>() == 0.0f);
  // kaiming_normal_ with fan_out: std = sqrt(2 / (8 * 3 * 3)) = 0.167 over 216 draws.
  CHECK(p["conv.weight"].std().item<double>() == Approx(std::sqrt(2.0 / 72)).epsilon(0.2));

  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3).weight_decay(1e-4));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/2, /*gamma=*/0.5);
  auto x = torch::randn({4, 3, 8, 8}).to(torch::kCPU, /*non_blocking=*/true);
  auto y = torch::randint(0, 10, {4}, torch::kLong);
  std::vector<double> lrs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    scheduler.step();
    lrs.push_back(static_cast<torch::optim::AdamOptions&>(optimizer.param_groups()[0].options()).lr());
  }
  CHECK(lrs == std::vector<double>{1e-3, 5e-4, 5e-4});

  {
    torch::NoGradGuard no_grad;
    CHECK_FALSE(torch::autograd::GradMode::is_enabled());
    model->eval();
    auto [values, indices] = torch::max(model->forward(x), 1);
    CHECK(indices.dtype() == torch::kInt64);
  }
  {
    c10::InferenceMode guard;
    CHECK_FALSE(model->forward(x).requires_grad());
  }
  CHECK(torch::autograd::GradMode::is_enabled());

  mpx::testing::TempDir dir;
  at::Tensor a = at::ones({2});
  std::vector<torch::Tensor> list = {a, a * 2, torch::arange(3)};
  torch::save(list, dir / "list.pt");
  std::vector<torch::Tensor> back;
  torch::load(back, dir / "list.pt");
  REQUIRE(back.size() == 3);
  CHECK(max_abs_diff(back[1], a * 2) == 0);
  CHECK(back[2].dtype() == torch::kInt64);
  torch::save(torch::TensorDict{{"weights", a}}, dir / "named.pt");
  CHECK_THAT(error_of([&] { torch::load(back, dir / "named.pt"); }), Catch::Contains("named \"weights\""));
}

TEST_CASE("nn::Functional binds LibTorch's free functions with their arguments: max_pool2d, reshape", "[api]") {
  torch::ExpandingArray<2> stride({2, 2});
  torch::ExpandingArray<2> shape({-1, 8 * 2 * 2});
  torch::nn::Sequential net(torch::nn::Functional(torch::max_pool2d, 3, stride, 0, 1, false),
                            torch::nn::Functional(torch::reshape, shape));
  auto x = torch::arange(2 * 8 * 5 * 5, torch::kFloat).reshape({2, 8, 5, 5});
  auto y = net->forward(x);
  CHECK(y.sizes() == torch::IntList{2, 32});
  CHECK(max_abs_diff(y, torch::max_pool2d(x, {3, 3}, {2, 2}).reshape({2, 32})) == 0);
  CHECK(max_abs_diff(torch::avg_pool2d(x, 2), torch::avg_pool2d(x, {2, 2}, {2, 2})) == 0);
}

// A residual block and a small language model as LibTorch users write them: an optional downsample Sequential
// left empty, LSTM's (output, (h, c)) tuple, MultiheadAttention on [T, B, E], a TransformerEncoder, masks.
struct ResBlock : torch::nn::Module {
  ResBlock(int64_t inplanes, int64_t planes, int64_t stride = 1,
           torch::nn::Sequential downsample_ = torch::nn::Sequential())
      : conv1(torch::nn::Conv2dOptions(inplanes, planes, 3).stride(stride).padding(1).bias(false)), bn1(planes),
        conv2(torch::nn::Conv2dOptions(planes, planes, 3).stride(1).padding(1).bias(false)), bn2(planes),
        downsample(downsample_) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (!downsample->is_empty()) register_module("downsample", downsample);
  }
  torch::Tensor forward(torch::Tensor x) {
    at::Tensor residual(x.clone());
    x = torch::relu(bn1->forward(conv1->forward(x)));
    x = bn2->forward(conv2->forward(x));
    if (!downsample->is_empty()) residual = downsample->forward(residual);
    x += residual;
    return torch::relu(x);
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential downsample;
};

struct TinyLM : torch::nn::Module {
  TinyLM() {
    emb = register_module("emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(50, 16).padding_idx(0)));
    lstm = register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(16, 24).num_layers(2).batch_first(true)));
    attn = register_module("attn", torch::nn::MultiheadAttention(torch::nn::MultiheadAttentionOptions(24, 4)));
    enc = register_module("enc", torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
                                     torch::nn::TransformerEncoderLayerOptions(24, 4).dim_feedforward(48).dropout(0.0), 1)));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({24})));
    head = register_module("head", torch::nn::Linear(24, 50));
  }
  torch::Tensor forward(torch::Tensor tokens) {
    namespace F = torch::nn::functional;
    auto out = lstm->forward(emb(tokens));
    auto x = std::get<0>(out);
    CHECK(std::get<0>(std::get<1>(out)).sizes() == torch::IntList{2, tokens.size(0), 24});
    auto xt = x.transpose(0, 1);
    const int64_t T = xt.size(0);
    auto mask = torch::triu(torch::ones({T, T}), 1).to(torch::kBool);
    auto a = std::get<0>(attn->forward(xt, xt, xt, /*key_padding_mask=*/{}, /*need_weights=*/false, mask));
    x = enc->forward(a, torch::zeros({T, T}).masked_fill(mask, -INFINITY)).transpose(0, 1);
    auto scores = torch::matmul(x, x.transpose(-2, -1)) / std::sqrt(static_cast<double>(x.size(-1)));
    x = torch::matmul(torch::softmax(scores.masked_fill(mask, -1e9), -1), x);
    x = F::dropout(x, F::DropoutFuncOptions().p(0.1).training(is_training()));
    return head(F::gelu(norm(x)));
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::LSTM lstm{nullptr};
  torch::nn::MultiheadAttention attn{nullptr};
  torch::nn::TransformerEncoder enc{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear head{nullptr};
};

TEST_CASE("a residual block and a sequence model in LibTorch's spellings train", "[api][train]") {
  torch::manual_seed(0);
  torch::nn::Sequential down(torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 8, 1).stride(2).bias(false)),
                             torch::nn::BatchNorm2d(8));
  auto block = std::make_shared<ResBlock>(4, 8, 2, down);
  std::vector<std::string> children;
  for (auto& c : block->named_children()) children.push_back(c.key());
  CHECK(children == std::vector<std::string>{"conv1", "bn1", "conv2", "bn2", "downsample"});
  CHECK(ResBlock(4, 4).named_children().size() == 4);  // the empty downsample is not registered
  auto head = torch::nn::Sequential(torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions({1, 1})),
                                    torch::nn::Flatten(), torch::nn::Linear(8, 10));
  CHECK(head->forward(block->forward(torch::randn({2, 4, 8, 8}))).sizes() == torch::IntList{2, 10});

  TinyLM lm;
  torch::optim::AdamW adamw(lm.parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.01));
  auto tokens = torch::randint(1, 50, {2, 10});
  std::vector<float> losses;
  for (int step = 0; step < 20; ++step) {
    adamw.zero_grad();
    auto l = torch::nn::functional::cross_entropy(lm.forward(tokens).view({-1, 50}), tokens.view({-1}));
    l.backward();
    adamw.step();
    losses.push_back(l.item<float>());
  }
  CHECK(losses.back() < losses.front() - 0.5f);
}

// The DCGAN example's networks (ConvTranspose2d generator with batch norm, a Sequential discriminator) at the
// example's sizes, trained for a few steps on 28x28 images as its loop does, with its checkpoints.
struct DCGANGeneratorImpl : torch::nn::Module {
  explicit DCGANGeneratorImpl(int noise)
      : conv1(torch::nn::ConvTranspose2dOptions(noise, 32, 4).bias(false)), batch_norm1(32),
        conv2(torch::nn::ConvTranspose2dOptions(32, 16, 3).stride(2).padding(1).bias(false)), batch_norm2(16),
        conv3(torch::nn::ConvTranspose2dOptions(16, 8, 4).stride(2).padding(1).bias(false)), batch_norm3(8),
        conv4(torch::nn::ConvTranspose2dOptions(8, 1, 4).stride(2).padding(1).bias(false)) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv3", conv3);
    register_module("conv4", conv4);
    register_module("batch_norm1", batch_norm1);
    register_module("batch_norm2", batch_norm2);
    register_module("batch_norm3", batch_norm3);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(batch_norm1(conv1(x)));
    x = torch::relu(batch_norm2(conv2(x)));
    x = torch::relu(batch_norm3(conv3(x)));
    return torch::tanh(conv4(x));
  }
  torch::nn::ConvTranspose2d conv1, conv2, conv3, conv4;
  torch::nn::BatchNorm2d batch_norm1, batch_norm2, batch_norm3;
};
TORCH_MODULE(DCGANGenerator);

TEST_CASE("the DCGAN example's models and loop in LibTorch's spellings: shapes, training steps, checkpoints",
          "[api][train]") {
  using namespace torch;
  mpx::testing::TempDir dir;
  manual_seed(1);
  const int64_t noise_size = 16, batch = 8;
  DCGANGenerator generator(noise_size);
  nn::Sequential discriminator(
      nn::Conv2d(nn::Conv2dOptions(1, 8, 4).stride(2).padding(1).bias(false)),
      nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
      nn::Conv2d(nn::Conv2dOptions(8, 16, 4).stride(2).padding(1).bias(false)), nn::BatchNorm2d(16),
      nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
      nn::Conv2d(nn::Conv2dOptions(16, 1, 7).stride(1).padding(0).bias(false)), nn::Sigmoid());
  optim::Adam g_opt(generator->parameters(), optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5)));
  optim::Adam d_opt(discriminator->parameters(), optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5)));
  Device device(kCPU);

  // "Real" images: a bright vertical bar, in [-1, 1] as Normalize<>(0.5, 0.5) leaves MNIST.
  auto real_images = torch::full({batch, 1, 28, 28}, -1.0);
  real_images.index_put_({indexing::Slice(), 0, indexing::Slice(), indexing::Slice(10, 18)}, 1.0);
  CHECK(generator->forward(torch::randn({batch, noise_size, 1, 1})).sizes() == IntList{batch, 1, 28, 28});

  for (int step = 0; step < 3; ++step) {
    discriminator->zero_grad();
    Tensor real_labels = torch::empty(batch, device).uniform_(0.8, 1.0);
    Tensor real_output = discriminator->forward(real_images).reshape(real_labels.sizes());
    Tensor d_loss_real = torch::binary_cross_entropy(real_output, real_labels);
    d_loss_real.backward();
    Tensor fake_images = generator->forward(torch::randn({batch, noise_size, 1, 1}, device));
    Tensor fake_labels = torch::zeros(batch, device);
    Tensor fake_output = discriminator->forward(fake_images.detach()).reshape(fake_labels.sizes());
    Tensor d_loss_fake = torch::binary_cross_entropy(fake_output, fake_labels);
    d_loss_fake.backward();
    d_opt.step();

    generator->zero_grad();
    fake_labels.fill_(1);
    fake_output = discriminator->forward(fake_images).reshape(fake_labels.sizes());
    Tensor g_loss = torch::binary_cross_entropy(fake_output, fake_labels);
    g_loss.backward();
    g_opt.step();
    CHECK(std::isfinite((d_loss_real + d_loss_fake).item<float>()));
    CHECK(std::isfinite(g_loss.item<float>()));
  }

  // The example's checkpoints: models and optimizers saved and loaded into fresh ones.
  torch::save(generator, dir / "generator-checkpoint.pt");
  torch::save(g_opt, dir / "generator-optimizer-checkpoint.pt");
  DCGANGenerator restored(noise_size);
  optim::Adam restored_opt(restored->parameters(), optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5)));
  torch::load(restored, dir / "generator-checkpoint.pt");
  torch::load(restored_opt, dir / "generator-optimizer-checkpoint.pt");
  generator->eval();
  restored->eval();
  auto z = torch::randn({2, noise_size, 1, 1});
  CHECK(max_abs_diff(generator->forward(z), restored->forward(z)) == 0);
}

}  // namespace
