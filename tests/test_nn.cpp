// Tests of nn's module mechanics: registration and state, holders and hooks, moves between dtypes, layouts and devices (layers: test_nn_layers.cpp).
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

// A ResNet-like nested model: dotted names such as "layer1.0.conv1.weight".
struct BlockImpl : nn::Module {
  BlockImpl(int64_t in, int64_t out) {
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
  }
  Tensor forward(const Tensor& x) { return F::relu(bn1(conv1(x))); }
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
};
MPX_MODULE(Block);

struct NetImpl : nn::Module {
  NetImpl() {
    stem = register_module("stem", nn::Conv2d(nn::Conv2dOptions(1, 2, 3).padding(1)));
    layer1 = register_module("layer1", nn::Sequential(Block(2, 4), Block(4, 4)));
    pool = register_module("pool", nn::AdaptiveAvgPool2d(1));
    fc = register_module("fc", nn::Linear(4, 3));
  }
  Tensor forward(const Tensor& x) { return fc(pool(layer1(stem(x))).flatten(1)); }
  nn::Conv2d stem{nullptr};
  nn::Sequential layer1{nullptr};
  nn::AdaptiveAvgPool2d pool{nullptr};
  nn::Linear fc{nullptr};
};
MPX_MODULE(Net);


std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const mpx::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// ---------------------------------------------------------------- Module structure

TEST_CASE("nn: registration gives dotted names in registration order", "[nn]") {
  manual_seed(0);
  Net net;
  std::vector<std::string> expected = {
      "stem.weight",          "stem.bias",          "layer1.0.conv1.weight", "layer1.0.bn1.weight",
      "layer1.0.bn1.bias",    "layer1.1.conv1.weight", "layer1.1.bn1.weight", "layer1.1.bn1.bias",
      "fc.weight",            "fc.bias"};
  auto named = net->named_parameters();
  CHECK(named.keys() == expected);
  CHECK(net->parameters().size() == expected.size());
  CHECK(named["fc.weight"].is_same(net->fc->weight));
  CHECK(named[0].key() == "stem.weight");
  for (auto& [name, t] : named) {
    CHECK(t.requires_grad());
    CHECK(t.is_leaf());
  }

  auto buffers = net->named_buffers();
  CHECK(buffers.keys() == std::vector<std::string>{"layer1.0.bn1.running_mean", "layer1.0.bn1.running_var",
                                                   "layer1.0.bn1.num_batches_tracked", "layer1.1.bn1.running_mean",
                                                   "layer1.1.bn1.running_var", "layer1.1.bn1.num_batches_tracked"});
  CHECK(buffers["layer1.0.bn1.num_batches_tracked"].dtype() == kInt64);
  CHECK_FALSE(buffers["layer1.0.bn1.running_mean"].requires_grad());

  CHECK(net->named_children().keys() == std::vector<std::string>{"stem", "layer1", "pool", "fc"});
  CHECK(net->children().size() == 4);
  CHECK(net->parameters(/*recurse=*/false).empty());
  CHECK(net->layer1->named_parameters(false).is_empty());

  auto mods = net->named_modules();
  CHECK(mods.keys() == std::vector<std::string>{"", "stem", "layer1", "layer1.0", "layer1.0.conv1", "layer1.0.bn1",
                                                "layer1.1", "layer1.1.conv1", "layer1.1.bn1", "pool", "fc"});
  CHECK(net->modules().size() == 11);
  CHECK(net->modules(false).size() == 10);
  CHECK(mods[""].get() == net.get());

  // Module types for amp: names, is_batchnorm, dynamic casts.
  int bns = 0;
  for (const auto& m : net->modules()) {
    if (m->is_batchnorm()) {
      ++bns;
      CHECK(m->name() == "BatchNorm2d");
      CHECK(m->as<nn::BatchNorm2d>() != nullptr);
      CHECK(m->as<nn::BatchNorm2dImpl>() != nullptr);
      CHECK(m->as<nn::Linear>() == nullptr);
    }
  }
  CHECK(bns == 2);
  CHECK(net->name() == "Net");
  CHECK(net->fc->name() == "Linear");
  CHECK(mods["layer1.0"]->name() == "Block");
  CHECK(mods["layer1"]->name() == "Sequential");
}

TEST_CASE("nn: registration errors are clear", "[nn]") {
  nn::Module m;
  m.register_parameter("w", zeros({2}));
  CHECK_THROWS_WITH(m.register_parameter("w", zeros({2})), Contains("already exists"));
  CHECK_THROWS_WITH(m.register_parameter("a.b", zeros({2})), Contains("must not contain a dot"));
  CHECK_THROWS_WITH(m.register_buffer("w", zeros({2})), Contains("already registered as a parameter"));
  CHECK_THROWS_WITH(m.register_parameter("", zeros({2})), Contains("must not be empty"));
  CHECK_THROWS_WITH(m.register_module("lin", nn::Linear(nullptr)), Contains("empty"));
  CHECK_THROWS_WITH(m.register_parameter("i", zeros({2}, TensorOptions(kInt64))), Contains("only floating"));
  // An integer parameter without grad is fine; so is an absent (undefined) one, which enumeration skips.
  m.register_parameter("i", zeros({2}, TensorOptions(kInt64)), false);
  m.register_parameter("none", Tensor());
  CHECK(m.named_parameters().keys() == std::vector<std::string>{"w", "i"});
  // Shared pointers register as well as holders.
  auto lin = m.register_module("lin", std::make_shared<nn::LinearImpl>(2, 3));
  CHECK(lin->weight.sizes() == IntList{3, 2});
  CHECK(m.named_parameters().contains("lin.weight"));
  // A parameter registered twice (weight tying) is listed once.
  m.register_parameter("tied", lin->weight);
  CHECK(m.parameters().size() == 4);  // w, i, tied (= lin.weight), lin.bias
  CHECK(m.state_dict().size() == 5);  // state_dict keeps both names of the tied tensor
}

TEST_CASE("nn: a non-persistent buffer moves with the module but stays out of state_dict", "[nn]") {
  // A causal mask, as a GPT block registers it with persistent=False in PyTorch.
  nn::Module m;
  auto lin = m.register_module("lin", nn::Linear(4, 4));
  m.register_buffer("mask", ones({4, 4}), /*persistent=*/false);
  m.register_buffer("count", zeros({}));
  CHECK_FALSE(m.is_persistent_buffer("mask"));
  CHECK(m.is_persistent_buffer("count"));
  CHECK(m.named_buffers().keys() == std::vector<std::string>{"mask", "count"});
  CHECK(m.state_dict().keys() == std::vector<std::string>{"count", "lin.weight", "lin.bias"});
  m.to(kFloat64);
  CHECK(m.named_buffers()["mask"].dtype() == kFloat64);
  // PyTorch's weights (no mask) load strictly; a mask in the file is an unexpected key, as in PyTorch.
  nn::Module other;
  other.register_module("lin", nn::Linear(4, 4));
  other.register_buffer("count", full({}, 3.0));
  other.to(kFloat64);
  CHECK(m.load_state_dict(other.state_dict()).unexpected_keys.empty());
  CHECK(m.named_buffers()["count"].item<double>() == 3.0);
  nn::StateDict with_mask = other.state_dict();
  with_mask.insert("mask", zeros({4, 4}, TensorOptions(kFloat64)));
  CHECK_THROWS_WITH(m.load_state_dict(with_mask), Contains("unexpected key(s) (1): \"mask\""));
  // Registered again as persistent, it is saved.
  m.unregister_module("mask");
  m.register_buffer("mask", ones({4, 4}));
  CHECK(m.state_dict().contains("mask"));
  CHECK_THROWS_WITH(m.is_persistent_buffer("nothing"), Contains("has no buffer 'nothing'"));
}

TEST_CASE("nn: train and eval propagate recursively", "[nn]") {
  Net net;
  CHECK(net->is_training());
  net->eval();
  for (const auto& m : net->modules()) CHECK_FALSE(m->is_training());
  net->train();
  for (const auto& m : net->modules()) CHECK(m->is_training());
  net->layer1->train(false);
  CHECK(net->is_training());
  CHECK_FALSE(net->layer1[0]->is_training());
}

TEST_CASE("nn: pretty printing", "[nn]") {
  Net net;
  std::ostringstream os;
  os << *net;
  const std::string s = os.str();
  CHECK_THAT(s, Contains("Net(\n"));
  CHECK_THAT(s, Contains("(fc): Linear(in_features=4, out_features=3, bias=true)"));
  CHECK_THAT(s, Contains("(layer1): Sequential(\n"));
  CHECK_THAT(s, Contains("(0): Block(\n"));
  CHECK_THAT(s, Contains("(conv1): Conv2d(2, 4, kernel_size=[3, 3], stride=[1, 1], padding=[1, 1], bias=false)"));
  CHECK_THAT(s, Contains("BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)"));
}

// ---------------------------------------------------------------- to()

TEST_CASE("nn: to(dtype) keeps the same leaf parameters", "[nn]") {
  manual_seed(1);
  Net net;
  Tensor w = net->fc->weight;
  const TensorImpl* impl = w.impl();
  // Give the parameters gradients first: they are converted along.
  net(randn({2, 1, 5, 5})).sum().backward();
  REQUIRE(w.grad().defined());
  std::vector<Tensor> before = net->parameters();

  net->to(kFloat64);
  CHECK(w.dtype() == kFloat64);
  CHECK(w.impl() == impl);
  CHECK(w.grad().dtype() == kFloat64);
  auto after = net->parameters();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].is_same(before[i]));
    CHECK(after[i].dtype() == kFloat64);
    CHECK(after[i].requires_grad());
    CHECK(after[i].is_leaf());
  }
  CHECK(net->named_buffers()["layer1.0.bn1.running_var"].dtype() == kFloat64);
  CHECK(net->named_buffers()["layer1.0.bn1.num_batches_tracked"].dtype() == kInt64);

  // Training still reaches the same handles after the cast.
  net->zero_grad();
  CHECK_FALSE(w.grad().defined());
  net(randn({2, 1, 5, 5}, kFloat64)).sum().backward();
  CHECK(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat64);

  net->to(kFloat16);
  CHECK(w.dtype() == kFloat16);
  CHECK(net->fc->bias.dtype() == kFloat16);
  net->to(Device::cpu(), kFloat32);
  CHECK(w.dtype() == kFloat32);
  CHECK_THROWS_WITH(net->to(kInt64), Contains("must be floating"));
}

TEST_CASE("nn: to(MemoryFormat) re-lays out 4-d tensors in place", "[nn]") {
  Net net;
  // [4, 2, 3, 3]: with more than one input channel the two layouts differ.
  Tensor cw = net->named_parameters()["layer1.0.conv1.weight"], lw = net->fc->weight;
  const TensorImpl* impl = cw.impl();
  Tensor before = cw.detach().clone(MemoryFormat::Contiguous);
  net->to(MemoryFormat::ChannelsLast);
  CHECK(cw.impl() == impl);
  CHECK(cw.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(cw.is_contiguous());
  CHECK(cw.requires_grad());
  CHECK(lw.is_contiguous());
  CHECK(max_diff(cw, before) == 0.0);
  // Forward and backward still work and reach the same parameters.
  net(randn({2, 1, 5, 5})).sum().backward();
  CHECK(cw.grad().defined());
  net->to(MemoryFormat::Contiguous);
  CHECK(cw.is_contiguous());
  CHECK(cw.grad().is_contiguous());
  net->to(Device::cpu());  // a no-op move
  CHECK(cw.impl() == impl);
}

// ---------------------------------------------------------------- state_dict

TEST_CASE("nn: state_dict round trip", "[nn]") {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  auto sd = a->state_dict();
  CHECK(sd.size() == 16);  // 10 parameters + 6 buffers
  CHECK(sd.contains("layer1.1.bn1.running_mean"));
  for (auto& [k, t] : sd) CHECK_FALSE(t.requires_grad());
  CHECK(max_diff(a->fc->weight, b->fc->weight) > 0.0);

  // Make a buffer non-trivial so buffers are shown to travel.
  a(randn({4, 1, 5, 5}));
  auto result = b->load_state_dict(a->state_dict());
  CHECK(result.missing_keys.empty());
  CHECK(result.unexpected_keys.empty());
  auto sa = a->state_dict(), sb = b->state_dict();
  for (auto& [k, t] : sa) CHECK(max_diff(t, sb[k]) == 0.0);
  CHECK(sb["layer1.0.bn1.num_batches_tracked"].item<int64_t>() == 1);

  // Values were copied, not aliased; b's parameters are still its own leaves.
  Tensor bw = b->fc->weight;
  {
    NoGradGuard ng;
    a->fc->weight.add_(1.0);
  }
  CHECK(max_diff(a->fc->weight, bw) == Approx(1.0));
  CHECK(b->named_parameters()["fc.weight"].is_same(bw));
  CHECK(bw.requires_grad());

  // dtype conversion: an f64 checkpoint into an f32 model, and the std::map overload.
  std::map<std::string, Tensor> m;
  for (auto& [k, t] : a->state_dict()) m[k] = t.is_floating_point() ? t.to(kFloat64) : t;
  b->load_state_dict(m);
  CHECK(b->fc->weight.dtype() == kFloat32);
  CHECK(max_diff(b->fc->weight, a->fc->weight) < 1e-7);
}

TEST_CASE("nn: load_state_dict reports missing, unexpected and mismatched keys", "[nn]") {
  Net net;
  auto good = net->state_dict();

  SECTION("missing") {
    nn::StateDict sd = good;
    sd.erase("fc.bias");
    sd.erase("layer1.0.bn1.running_var");
    const std::string msg = error_of([&] { net->load_state_dict(sd); });
    CHECK_THAT(msg, Contains("missing key(s) (2)"));
    CHECK_THAT(msg, Contains("\"layer1.0.bn1.running_var\", \"fc.bias\""));
    CHECK_THAT(msg, Contains("strict=false"));
    auto r = net->load_state_dict(sd, /*strict=*/false);
    CHECK(r.missing_keys == std::vector<std::string>{"layer1.0.bn1.running_var", "fc.bias"});
    CHECK(r.unexpected_keys.empty());
  }
  SECTION("unexpected") {
    nn::StateDict sd = good;
    sd.insert("extra.weight", zeros({1}));
    const std::string msg = error_of([&] { net->load_state_dict(sd); });
    CHECK_THAT(msg, Contains("unexpected key(s) (1): \"extra.weight\""));
    CHECK_THAT(msg, !Contains("missing"));
    auto r = net->load_state_dict(sd, false);
    CHECK(r.unexpected_keys == std::vector<std::string>{"extra.weight"});
  }
  SECTION("shape mismatch, even when not strict") {
    nn::StateDict sd = good;
    sd["fc.weight"] = zeros({3, 5});
    sd["stem.bias"] = zeros({2});  // loadable, but nothing may be loaded when another key fails
    for (bool strict : {true, false}) {
      const std::string msg = error_of([&] { net->load_state_dict(sd, strict); });
      CHECK_THAT(msg, Contains("fc.weight"));
      CHECK_THAT(msg, Contains("[3, 5]"));
      CHECK_THAT(msg, Contains("[3, 4]"));
    }
    // Nothing was loaded when an error was reported.
    CHECK(max_abs(net->stem->bias) > 0.0);
  }
  SECTION("all errors at once") {
    nn::StateDict sd = good;
    sd.erase("stem.bias");
    sd.insert("bogus", zeros({1}));
    sd["fc.bias"] = zeros({7});
    const std::string msg = error_of([&] { net->load_state_dict(sd); });
    CHECK_THAT(msg, Contains("\"stem.bias\""));
    CHECK_THAT(msg, Contains("\"bogus\""));
    CHECK_THAT(msg, Contains("size mismatch for fc.bias"));
  }
}

TEST_CASE("nn: save and load a module as safetensors", "[nn]") {
  manual_seed(3);
  Net a;
  manual_seed(4);
  Net b;
  const std::string path = (std::filesystem::temp_directory_path() / "mpx_test_nn_roundtrip.safetensors").string();
  mpx::save(a, path);
  mpx::load(b, path);
  std::remove(path.c_str());
  for (auto& [k, t] : a->state_dict()) CHECK(max_diff(t, b->state_dict()[k]) == 0.0);
}

// ---------------------------------------------------------------- holders and hooks

TEST_CASE("nn: holders", "[nn]") {
  manual_seed(5);
  nn::Linear empty{nullptr};
  CHECK(empty.is_empty());
  CHECK_FALSE(empty);
  CHECK_THROWS_WITH(empty->forward(zeros({1, 2})), Contains("empty holder"));
  nn::Linear lin(2, 3);
  CHECK(lin);
  Tensor x = randn({4, 2});
  CHECK(max_diff(lin(x), lin->forward(x)) == 0.0);
  CHECK(lin.get() == lin.ptr().get());
  nn::Linear alias = lin;  // holders share the impl
  CHECK(alias.get() == lin.get());
  empty = lin;
  CHECK(empty.get() == lin.get());
  nn::Linear from_ptr(std::make_shared<nn::LinearImpl>(nn::LinearOptions(2, 3).bias(false)));
  CHECK_FALSE(from_ptr->bias.defined());
  Net net;  // default-constructs NetImpl
  CHECK(net->parameters().size() == 10);
}

TEST_CASE("nn: forward hooks run on net(x), not on forward(x)", "[nn]") {
  manual_seed(6);
  nn::Linear lin(2, 2);
  Tensor x = randn({3, 2});
  Tensor plain = lin->forward(x);
  int pre_calls = 0, post_calls = 0;
  const int64_t pre = lin->register_forward_pre_hook([&](nn::Module& m, const Tensor& in) {
    ++pre_calls;
    CHECK(m.name() == "Linear");
    return in * 2.0;  // replaces the input
  });
  const int64_t post = lin->register_forward_hook([&](nn::Module&, const Tensor& in, Tensor& out) {
    ++post_calls;
    CHECK(max_diff(in, x * 2.0) == 0.0);  // sees the input after pre-hooks
    out = out + 1.0;
  });
  Tensor hooked = lin(x);
  CHECK(pre_calls == 1);
  CHECK(post_calls == 1);
  CHECK(max_diff(hooked, lin->forward(x * 2.0) + 1.0) < 1e-6);
  CHECK(max_diff(lin->forward(x), plain) == 0.0);
  CHECK(pre_calls == 1);

  // Hooks of modules inside a Sequential run too (amp's O2 casts rely on this).
  nn::Sequential seq(lin, nn::ReLU());
  seq(x);
  CHECK(pre_calls == 2);
  CHECK(lin->remove_hook(pre));
  CHECK(lin->remove_hook(post));
  CHECK_FALSE(lin->remove_hook(post));
  CHECK(max_diff(lin(x), plain) == 0.0);

  // A cast hook in the style of amp O2: run the module in f64, return f32.
  lin->to(kFloat64);
  lin->register_forward_pre_hook([](nn::Module&, Tensor& in) { in = in.to(kFloat64); });
  lin->register_forward_hook([](nn::Module&, const Tensor&, Tensor& out) { out = out.to(kFloat32); });
  Tensor y = lin(x);
  CHECK(y.dtype() == kFloat32);
  CHECK(max_diff(y, plain) < 1e-6);

  // Losses are called with two arguments; hooks see the first.
  nn::MSELoss mse;
  int loss_hooks = 0;
  mse->register_forward_pre_hook([&](nn::Module&, const Tensor&) { ++loss_hooks; });
  Tensor l = mse(plain, zeros_like(plain));
  CHECK(loss_hooks == 1);
  CHECK(l.dim() == 0);
}

// ---------------------------------------------------------------- layers

TEST_CASE("nn: to(cuda) keeps leaves and state_dict crosses devices", "[nn][cuda]") {
  if (!cuda_is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  manual_seed(15);
  Net net;
  Net cpu_copy;
  cpu_copy->load_state_dict(net->state_dict());
  Tensor w = net->fc->weight;
  net->to(Device::cuda());
  CHECK(w.is_cuda());
  CHECK(net->parameters().back().is_cuda());
  CHECK(net->fc->weight.is_same(w));
  CHECK(w.requires_grad());
  CHECK(net->named_buffers()["layer1.0.bn1.num_batches_tracked"].is_cuda());
  net->eval();
  cpu_copy->eval();
  Tensor x = randn({2, 1, 5, 5});
  Tensor y = net(x.cuda());
  CHECK(y.is_cuda());
  CHECK(max_diff(y.cpu(), cpu_copy(x)) < 1e-4);
  y.sum().backward();
  CHECK(w.grad().is_cuda());
  // A CUDA checkpoint loads into a CPU model and back.
  Net other;
  other->load_state_dict(net->state_dict());
  CHECK_FALSE(other->fc->weight.is_cuda());
  CHECK(max_diff(other->fc->weight, w.cpu()) == 0.0);
}
