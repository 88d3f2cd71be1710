// Tests for padding modes and layers (ops/pad.h, nn/padding.h), instance norm (nn/instance_norm.h), the channel and
// alpha dropouts (nn/dropout.h) and adaptive max pooling: PyTorch 2.15's values and gradients
// (tests/golden/layers.safetensors), gradchecks, amp, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "amp/amp.h"
#include "amp/autocast.h"
#include "core/serialize.h"
#include "gradcheck.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "test_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {

const TensorDict& golden() {
  static const TensorDict g = load_tensors(mpx::testing::test_data_dir() + "/golden/layers.safetensors");
  return g;
}

struct PadCase {
  const char* name;
  IntList pad;
  const char* mode;
};
// gen_golden.py's gen_layers, as mpx spells them.
const PadCase kPadCases[] = {
    {"reflect_1d", {2, 3}, "reflect"},          {"reflect_1d_crop", {-1, 5}, "reflect"},
    {"reflect_2d", {1, 2, 4, 0}, "reflect"},    {"reflect_2d_unbatched", {3, 3, 2, 2}, "reflect"},
    {"reflect_3d", {1, 1, 2, 0, 0, 2}, "reflect"},
    {"replicate_1d", {5, 2}, "replicate"},      {"replicate_2d", {2, -1, 6, 1}, "replicate"},
    {"replicate_3d", {1, 2, 3, 0, 1, 4}, "replicate"},
    {"circular_1d", {4, 2}, "circular"},        {"circular_2d", {-1, 3, 3, 1}, "circular"},
    {"circular_3d", {2, 1, 0, 4, 3, 3}, "circular"},
    {"constant_2d", {1, 2, -1, 3}, "constant"},
};

std::string printed(const nn::Module& m) {
  std::ostringstream os;
  m.pretty_print(os);
  return os.str();
}

}  // namespace

TEST_CASE("pad's reflect, replicate, circular and constant modes match PyTorch's values and gradients",
          "[pad][golden]") {
  const TensorDict& g = golden();
  for (const PadCase& c : kPadCases) {
    const std::string k = std::string("pad_") + c.name;
    for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
      INFO(k << " in " << dtype_name(dt));
      Tensor x = g.at(k + ".x").to(dt).detach().clone().set_requires_grad(true);
      const Tensor y = pad(x, c.pad, c.mode, 1.5);
      REQUIRE(y.sizes() == g.at(k + ".y").sizes());
      CHECK(y.dtype() == dt);
      // Padding copies values: exact in every dtype; the gradient sums a few terms.
      CHECK(testing::same_values(y, g.at(k + ".y").to(dt)));
      sum(y * g.at(k + ".gy").to(dt)).backward();
      const double tol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : 0.05;
      CHECK(testing::max_abs_diff(x.grad(), g.at(k + ".gx")) < tol);
    }
  }
}

TEST_CASE("pad passes gradcheck, and its backward differentiates to pad again", "[pad][gradcheck]") {
  for (const char* mode : {"reflect", "replicate", "circular", "constant"}) {
    INFO(mode);
    const Tensor x = testing::leaf({2, 3, 4, 5});
    const auto f = [mode](const tensor_list& in) { return pad(in[0], {2, -1, 3, 1}, mode, 0.5); };
    CHECK(testing::gradcheck(f, {x}) == "");
    // The gradient is linear in gy: d/dgy of sum(gx * v) is pad(v) (with zeros outside).
    const Tensor y = f({x});
    Tensor gy = randn(y.sizes(), TensorOptions(kFloat64)).set_requires_grad(true);
    const Tensor gx = autograd::grad({y}, {x}, {gy}, true, true)[0];
    const Tensor v = randn(x.sizes(), TensorOptions(kFloat64));
    const Tensor ggy = autograd::grad({sum(gx * v)}, {gy})[0];
    CHECK(testing::max_abs_diff(ggy, pad(v, {2, -1, 3, 1}, mode)) < 1e-12);
  }
  // Channels-last input pads in place and stays channels-last, with the same values and gradients.
  for (const char* mode : {"reflect", "constant"}) {
    Tensor a = randn({2, 5, 6, 7}).set_requires_grad(true);
    Tensor b = a.detach().contiguous(MemoryFormat::ChannelsLast).set_requires_grad(true);
    const Tensor ya = pad(a, {2, 1, -1, 3}, mode, 0.5), yb = pad(b, {2, 1, -1, 3}, mode, 0.5);
    CHECK(yb.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(testing::same_values(ya, yb));
    const Tensor gy = randn(ya.sizes());
    sum(ya * gy).backward();
    sum(yb * gy).backward();
    CHECK(testing::same_values(a.grad(), b.grad()));
  }
  // Integers and bool pad too (no gradient).
  CHECK(testing::same_values(pad(tensor<int64_t>({1, 2, 3}, {1, 3}), {2, 1}, "reflect"),
                             tensor<int64_t>({3, 2, 1, 2, 3, 2}, {1, 6})));
  CHECK(testing::same_values(pad(ones({2}, TensorOptions(kBool)), {1, 0}, "constant"),
                             tensor<bool>({false, true, true}, {3})));
  // More than three dims of constant padding, and an empty dim grown by constants.
  CHECK(pad(ones({2, 3, 4, 5}), {1, 1, 1, 1, 1, 1, 1, 1}, "constant", 2.0).sizes() == IntList{4, 5, 6, 7});
  CHECK(testing::same_values(pad(zeros({2, 0}), {1, 1}, "constant", 3.0), full({2, 2}, 3.0)));
}

TEST_CASE("padding layers: PyTorch's names, options, reprs and results", "[pad][nn]") {
  const TensorDict& g = golden();
  nn::ReflectionPad2d r2(nn::ReflectionPad2dOptions({1, 2, 4, 0}));
  CHECK(testing::same_values(r2(g.at("pad_reflect_2d.x")), g.at("pad_reflect_2d.y")));
  CHECK(printed(*r2) == "ReflectionPad2d((1, 2, 4, 0))");
  nn::ReflectionPad1d r1(2);
  CHECK(r1->options.padding() == IntList{2, 2});
  CHECK(r1(zeros({2, 3, 5})).sizes() == IntList{2, 3, 9});
  nn::ReplicationPad3d p3(nn::ReplicationPad3dOptions({1, 2, 3, 0, 1, 4}));
  CHECK(testing::same_values(p3(g.at("pad_replicate_3d.x")), g.at("pad_replicate_3d.y")));
  nn::CircularPad1d c1(nn::CircularPad1dOptions({4, 2}));
  CHECK(testing::same_values(c1(g.at("pad_circular_1d.x")), g.at("pad_circular_1d.y")));
  nn::ConstantPad2d k2(nn::ConstantPad2dOptions({1, 2, -1, 3}, 1.5));
  CHECK(testing::same_values(k2(g.at("pad_constant_2d.x")), g.at("pad_constant_2d.y")));
  CHECK(printed(*k2) == "ConstantPad2d(padding=(1, 2, -1, 3), value=1.5)");
  nn::ZeroPad2d z2(1);
  const Tensor z = z2(ones({1, 1, 2, 2}));
  CHECK(z.sizes() == IntList{1, 1, 4, 4});
  CHECK(sum(z).item<double>() == 4.0);
  CHECK(z2->name() == "ZeroPad2d");
  // F::pad takes the mode as LibTorch's enum.
  CHECK(testing::same_values(F::pad(g.at("pad_circular_2d.x"), F::PadFuncOptions({-1, 3, 3, 1}).mode(F::kCircular)),
                             g.at("pad_circular_2d.y")));
  // A CycleGAN-style block trains through reflection padding under autocast.
  manual_seed(1);
  nn::Sequential net(nn::ReflectionPad2d(1), nn::Conv2d(nn::Conv2dOptions(3, 3, 3)), nn::InstanceNorm2d(3));
  const Tensor x = randn({2, 3, 8, 8});
  Tensor y;
  {
    amp::AutocastGuard ac(kBFloat16);
    y = net->forward(x);
  }
  CHECK(y.sizes() == x.sizes());
  sum(y * y).backward();
  for (const Tensor& p : net->parameters()) CHECK(p.grad().defined());
}

TEST_CASE("Conv1d and Conv2d padding_mode pads before an unpadded convolution, as PyTorch's", "[pad][nn]") {
  manual_seed(6);
  nn::Conv2d conv(nn::Conv2dOptions(3, 4, 3).padding({1, 2}).padding_mode(nn::kReflect));
  CHECK(printed(*conv) == "Conv2d(3, 4, kernel_size=[3, 3], stride=[1, 1], padding=[1, 2], padding_mode=reflect)");
  Tensor x = randn({2, 3, 6, 7}).set_requires_grad(true);
  const Tensor y = conv(x);
  CHECK(y.sizes() == IntList{2, 4, 6, 9});
  const Tensor want = F::conv2d(pad(x, {2, 2, 1, 1}, "reflect"), conv->weight, F::Conv2dFuncOptions().bias(conv->bias));
  CHECK(testing::max_abs_diff(y, want) < 1e-6);
  nn::Conv1d c1(nn::Conv1dOptions(3, 2, 3).padding(2).padding_mode(nn::kCircular));
  const Tensor x1 = randn({2, 3, 8});
  CHECK(testing::max_abs_diff(c1(x1), F::conv1d(pad(x1, {2, 2}, "circular"), c1->weight,
                                                F::Conv1dFuncOptions().bias(c1->bias))) < 1e-6);
  CHECK_THAT(printed(*c1), Catch::EndsWith("padding_mode=circular)"));
  // The default stays zero padding inside the convolution.
  nn::Conv2d z(nn::Conv2dOptions(3, 4, 3).padding(1));
  CHECK_THAT(printed(*z), !Catch::Contains("padding_mode"));
}

TEST_CASE("pad refuses what PyTorch refuses, with the reason", "[pad][errors]") {
  const Tensor x = zeros({2, 3, 4});
  using testing::error_of;
  CHECK_THAT(error_of([&] { pad(x, {4, 0}, "reflect"); }), Catch::Contains("must be smaller than dim 2's size 4"));
  CHECK_THAT(error_of([&] { pad(x, {0, 5}, "circular"); }), Catch::Contains("more than once"));
  CHECK_THAT(error_of([&] { pad(x, {1, 1}, "wrap"); }), Catch::Contains("unknown mode 'wrap'"));
  CHECK_THAT(error_of([&] { pad(x, {1, 1, 1}); }), Catch::Contains("even number"));
  CHECK_THAT(error_of([&] { pad(zeros({2, 3, 4, 5}), {1, 1}, "reflect"); }),
             Catch::Contains("needs 2-d or 3-d input"));
  CHECK_THAT(error_of([&] { pad(zeros({2, 0, 4}), {1, 1, 1, 1}, "replicate"); }), Catch::Contains("dim 1 of"));
  CHECK_THAT(error_of([&] { pad(x, {-2, -2}, "reflect"); }), Catch::Contains("crops all"));
  CHECK_THAT(error_of([&] { nn::ReflectionPad2dOptions({1, 2, 3}); }), Catch::Contains("takes 1 or 4 padding values"));
}

TEST_CASE("instance_norm matches PyTorch: values, gradients, running statistics, eval", "[instance_norm][golden]") {
  const TensorDict& g = golden();
  for (const char* name : {"in_1d", "in_2d", "in_3d"}) {
    const std::string k = name;
    for (DType dt : {kFloat64, kFloat32}) {
      INFO(k << " in " << dtype_name(dt));
      const double tol = dt == kFloat64 ? 1e-10 : 2e-5;
      Tensor x = g.at(k + ".x").to(dt).detach().clone().set_requires_grad(true);
      Tensor w = g.at(k + ".weight").to(dt).detach().clone().set_requires_grad(true);
      Tensor b = g.at(k + ".bias").to(dt).detach().clone().set_requires_grad(true);
      Tensor rm = g.at(k + ".running_mean").to(dt).clone(), rv = g.at(k + ".running_var").to(dt).clone();
      const Tensor y = F::instance_norm(
          x, F::InstanceNormFuncOptions().running_mean(rm).running_var(rv).weight(w).bias(b).momentum(0.3));
      CHECK(testing::max_abs_diff(y, g.at(k + ".y")) < tol);
      CHECK(testing::max_abs_diff(rm, g.at(k + ".running_mean_after")) < tol);
      CHECK(testing::max_abs_diff(rv, g.at(k + ".running_var_after")) < tol);
      sum(y * g.at(k + ".gy").to(dt)).backward();
      CHECK(testing::max_abs_diff(x.grad(), g.at(k + ".gx")) < tol * 10);
      CHECK(testing::max_abs_diff(w.grad(), g.at(k + ".gweight")) < tol * 10);
      CHECK(testing::max_abs_diff(b.grad(), g.at(k + ".gbias")) < tol * 10);
      const Tensor ye = F::instance_norm(g.at(k + ".x").to(dt), F::InstanceNormFuncOptions()
                                                                   .running_mean(g.at(k + ".running_mean").to(dt))
                                                                   .running_var(g.at(k + ".running_var").to(dt))
                                                                   .weight(w.detach())
                                                                   .bias(b.detach())
                                                                   .use_input_stats(false));
      CHECK(testing::max_abs_diff(ye, g.at(k + ".y_eval")) < tol);
      CHECK(testing::max_abs_diff(F::instance_norm(g.at(k + ".x").to(dt)), g.at(k + ".y_plain")) < tol);
    }
  }
  const auto f = [](const tensor_list& in) {
    return F::instance_norm(in[0], F::InstanceNormFuncOptions().weight(in[1]).bias(in[2]));
  };
  CHECK(testing::gradcheck(f, {testing::leaf({2, 3, 5}), testing::leaf({3}, 1.0, 1.0), testing::leaf({3})}) == "");
}

TEST_CASE("InstanceNorm layers: state dict names, train and eval, unbatched input, amp O2, errors",
          "[instance_norm][nn]") {
  const TensorDict& g = golden();
  nn::InstanceNorm2d in(nn::InstanceNormOptions(4).affine(true).track_running_stats(true).momentum(0.3));
  const auto sd = in->state_dict();
  CHECK(sd.keys() == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(printed(*in) == "InstanceNorm2d(4, eps=1e-05, momentum=0.3, affine=true, track_running_stats=true)");
  {
    NoGradGuard ng;
    in->weight.copy_(g.at("in_2d.weight").to(kFloat32));
    in->bias.copy_(g.at("in_2d.bias").to(kFloat32));
    in->running_mean.copy_(g.at("in_2d.running_mean").to(kFloat32));
    in->running_var.copy_(g.at("in_2d.running_var").to(kFloat32));
  }
  const Tensor x = g.at("in_2d.x").to(kFloat32);
  CHECK(testing::max_abs_diff(in(x), g.at("in_2d.y")) < 2e-5);
  CHECK(testing::max_abs_diff(in->running_mean, g.at("in_2d.running_mean_after")) < 2e-5);
  in->eval();
  // Unbatched [C, H, W] is the batch of one.
  const Tensor one = in(x.select(0, 1));
  CHECK(one.sizes() == IntList{4, 5, 6});
  CHECK(testing::max_abs_diff(one, in(x).select(0, 1)) < 1e-6);
  // The default layer has no state and always uses the input's statistics.
  nn::InstanceNorm1d plain(3);
  CHECK(plain->state_dict().size() == 0);
  plain->eval();
  CHECK(testing::max_abs_diff(plain(g.at("in_1d.x").to(kFloat32)), g.at("in_1d.y_plain")) < 2e-5);
  CHECK_THAT(testing::error_of([&] { plain(zeros({2, 4, 5})); }), Catch::Contains("expected 3 channels"));
  CHECK_THAT(testing::error_of([&] { plain(zeros({2, 3, 4, 5})); }), Catch::Contains("expected 3-d input"));
  CHECK_THAT(testing::error_of([&] { nn::InstanceNorm3d(0); }), Catch::Contains("num_features must be positive"));

  // amp O2 casts the layer like any other (apex keeps only batch norms in f32) and it still trains.
  for (DType dt : {kBFloat16, kFloat16}) {
    INFO(dtype_name(dt));
    manual_seed(2);
    nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).padding(1)),
                       nn::InstanceNorm2d(nn::InstanceNormOptions(4).affine(true).track_running_stats(true)),
                       nn::ReLU());
    amp::reset();
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
    amp::initialize(net, opt, amp::Options().opt_level("O2").dtype(dt).verbosity(0));
    const Tensor xin = randn({2, 3, 6, 6});
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      const Tensor y = net(xin);  // O2 returns f32 outputs, as apex
      amp::scale_loss(mean(y * y), opt).backward();
      opt.step();
    }
    auto* norm = net[1]->as<nn::InstanceNorm2dImpl>();
    REQUIRE(norm != nullptr);
    CHECK(norm->weight.dtype() == dt);
    CHECK(std::isfinite(sum(norm->running_mean.to(kFloat32)).item<double>()));
    CHECK(std::isfinite(sum(norm->weight.to(kFloat32)).item<double>()));
  }
  amp::reset();
}

TEST_CASE("channel dropout zeroes whole channels, scales the rest, and is the identity in eval", "[dropout]") {
  manual_seed(7);
  const Tensor x = ones({8, 16, 5, 5});
  const Tensor y = F::dropout2d(x, F::DropoutFuncOptions().p(0.25));
  // Every channel is all zeros or all 1 / 0.75.
  const Tensor per_channel = amax(y, {2, 3}), low = amin(y, {2, 3});
  CHECK(testing::max_abs_diff(per_channel, low) == 0.0);
  const double kept = sum(gt(per_channel, 0.0).to(kFloat32)).item<double>() / 128.0;
  CHECK(kept > 0.6);
  CHECK(kept < 0.9);
  CHECK(std::abs(amax(y, {}).item<double>() - 1.0 / 0.75) < 1e-6);
  // Gradients flow through the kept channels only, with the same scale.
  Tensor xl = randn({4, 6, 3}).set_requires_grad(true);
  const Tensor yl = F::dropout1d(xl, F::DropoutFuncOptions().p(0.5));
  sum(yl).backward();
  const Tensor mask = amax(abs(xl.grad()), {2});
  CHECK(testing::max_abs_diff(xl.grad() * xl.detach(), yl.detach()) < 1e-6);
  CHECK(sum(mask).item<double>() > 0.0);
  nn::Dropout3d d3(0.5);
  d3->eval();
  const Tensor v = randn({2, 3, 2, 2, 2});
  CHECK(testing::same_values(d3(v), v));
  d3->train();
  CHECK(d3(randn({3, 2, 2, 2})).sizes() == IntList{3, 2, 2, 2});  // unbatched
  CHECK(printed(*d3) == "Dropout3d(p=0.5, inplace=false)");
  CHECK_THAT(testing::error_of([&] { F::dropout2d(zeros({2, 3})); }), Catch::Contains("expected 4-d input"));
  CHECK_THAT(testing::error_of([&] { nn::Dropout2d(1.5); }), Catch::Contains("probability must be in [0, 1]"));
  CHECK(sum(abs(F::dropout2d(x, F::DropoutFuncOptions().p(1.0)))).item<double>() == 0.0);
}

TEST_CASE("alpha dropout keeps zero mean and unit variance of SELU activations", "[dropout]") {
  manual_seed(8);
  const Tensor x = randn({200000});
  const Tensor y = F::alpha_dropout(x, F::DropoutFuncOptions().p(0.2));
  CHECK(std::abs(mean(y).item<double>()) < 0.02);
  CHECK(std::abs(var(y, {}).item<double>() - 1.0) < 0.03);
  // Dropped elements all take one value: a * alpha' + b.
  const double p = 0.2, ap = -1.7580993408473766, a = 1.0 / std::sqrt((1 - p) * (1 + p * ap * ap));
  const double dropped = a * ap - a * ap * p;
  const double frac = sum(lt(abs(y - dropped), 1e-6).to(kFloat32)).item<double>() / 200000.0;
  CHECK(std::abs(frac - 0.2) < 0.01);
  // The feature form drops whole channels.
  const Tensor f = F::feature_alpha_dropout(ones({16, 32, 4}), F::DropoutFuncOptions().p(0.5));
  CHECK(testing::max_abs_diff(amax(f, {2}), amin(f, {2})) < 1e-6);
  nn::AlphaDropout ad(0.5);
  ad->eval();
  CHECK(testing::same_values(ad(x), x));
  CHECK(testing::gradcheck([](const tensor_list& in) {
          manual_seed(3);
          return F::alpha_dropout(in[0], F::DropoutFuncOptions().p(0.3));
        },
        {testing::leaf({5, 6})}) == "");
}

TEST_CASE("adaptive_max_pool2d matches PyTorch: equal and unequal bins, upsampling, ties, gradients", "[pool][golden]") {
  const TensorDict& g = golden();
  const std::map<std::string, IntList> sizes = {
      {"amp_even", {4, 3}}, {"amp_odd", {3, 4}}, {"amp_up", {5, 7}}, {"amp_global", {1, 1}}};
  for (const auto& [k, size] : sizes) {
    for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
      INFO(k << " in " << dtype_name(dt));
      Tensor x = g.at(k + ".x").to(dt).detach().clone().set_requires_grad(true);
      const Tensor y = F::adaptive_max_pool2d(x, nn::AdaptiveMaxPool2dOptions({size[0], size[1]}));
      REQUIRE(y.sizes() == g.at(k + ".y").sizes());
      CHECK(y.dtype() == dt);
      CHECK(testing::same_values(y, g.at(k + ".y").to(dt)));
      sum(y * g.at(k + ".gy").to(dt)).backward();
      CHECK(testing::max_abs_diff(x.grad(), g.at(k + ".gx")) < (dt == kBFloat16 ? 0.05 : 1e-6));
    }
  }
  // Finite differences agree for equal and unequal bins (random values: no ties).
  for (const IntList& size : {IntList{3, 4}, IntList{2, 2}}) {
    INFO("gradcheck to " << shape_str(size));
    const auto f = [&](const tensor_list& in) { return mpx::adaptive_max_pool2d(in[0], {size[0], size[1]}); };
    CHECK(testing::gradcheck(f, {testing::leaf({2, 2, 6, 8})}) == "");
  }
  // The layers, 1-d and unbatched input.
  nn::AdaptiveMaxPool2d pool(nn::AdaptiveMaxPool2dOptions({3, 4}));
  CHECK(testing::same_values(pool(g.at("amp_odd.x")), g.at("amp_odd.y")));
  CHECK(testing::same_values(pool(g.at("amp_odd.x").select(0, 1)), g.at("amp_odd.y").select(0, 1)));
  nn::AdaptiveMaxPool1d pool1(4);
  const Tensor x1 = g.at("amp_odd.x").select(2, 0);  // [2, 3, 10]
  CHECK(testing::same_values(pool1(x1), mpx::adaptive_max_pool2d(x1.unsqueeze(2), {1, 4}).squeeze(2)));
  CHECK(pool1(x1).sizes() == IntList{2, 3, 4});
  // NaN wins its bin, as PyTorch's.
  Tensor xn = zeros({1, 1, 3, 5});
  {
    NoGradGuard ng;
    xn.select(3, 2).fill_(std::nan(""));
  }
  const Tensor yn = mpx::adaptive_max_pool2d(xn, {2, 3});
  CHECK(std::isnan(yn.to(kFloat64).view({-1})[1].item<double>()));
  CHECK_THAT(testing::error_of([&] { mpx::adaptive_max_pool2d(zeros({1, 1, 4, 4}), {0, 2}); }),
             Catch::Contains("output_size must be positive"));
  CHECK_THAT(testing::error_of([&] { mpx::adaptive_max_pool2d(zeros({4, 4}), {2, 2}); }), Catch::Contains("4-d input"));
}
