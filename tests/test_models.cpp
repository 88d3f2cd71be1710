// Tests of the model zoo: torchvision parameter counts, output shapes, state-dict names, init, DCGAN and create().
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>

#include <mpx/mpx.h>

using namespace mpx;
using Catch::Matchers::Contains;
namespace F = mpx::nn::functional;

namespace {

template <typename H>
int64_t count_params(const H& holder) {
  int64_t n = 0;
  for (const auto& p : holder.ptr()->parameters()) n += p.numel();
  return n;
}

// Output shape of an eval-mode forward without a graph.
IntList out_shape(const nn::AnyModule& net, const IntList& input) {
  NoGradGuard g;
  net.ptr()->eval();
  return net(randn(input)).sizes();
}

double std_of(const Tensor& t) { return std::sqrt(mean(square(t - mean(t))).item<double>()); }

// The ImageNet-shape models are built once and shared by the test cases: filling 100M+
// parameters is most of this file's run time.
models::ResNet& imagenet_resnet(int depth) {
  static std::map<int, models::ResNet> cache;
  auto it = cache.find(depth);
  if (it != cache.end()) return it->second;
  manual_seed(static_cast<uint64_t>(depth));
  models::ResNet net = depth == 18    ? models::resnet18()
                       : depth == 34  ? models::resnet34()
                       : depth == 50  ? models::resnet50()
                       : depth == 101 ? models::resnet101()
                                      : models::resnet152();
  return cache.emplace(depth, net).first->second;
}
// VGG-16 at the ImageNet shape with PyTorch's default layer init (torchvision's
// init_weights=False): the torchvision init of the 102M-weight classifier would double the cost
// and is checked on the small variant instead.
models::VGG& imagenet_vgg16() {
  static models::VGG net = models::vgg16(models::VGGOptions().init_weights(false));
  return net;
}
models::AlexNet& imagenet_alexnet() {
  static models::AlexNet net = models::alexnet();
  return net;
}

}  // namespace

TEST_CASE("resnet: torchvision parameter counts, ImageNet-shape outputs and state_dict keys", "[models]") {
  CHECK(count_params(imagenet_resnet(18)) == 11689512);
  CHECK(count_params(imagenet_resnet(34)) == 21797672);
  CHECK(count_params(imagenet_resnet(50)) == 25557032);
  CHECK(count_params(imagenet_resnet(101)) == 44549160);
  CHECK(count_params(imagenet_resnet(152)) == 60192808);
  // Outputs on 64 px images (cheap; the adaptive pool makes any size >= 32 work).
  for (int depth : {18, 34, 50, 101, 152}) {
    INFO("resnet" << depth);
    CHECK(out_shape(imagenet_resnet(depth), {1, 3, 64, 64}) == IntList{1, 1000});
  }
  CHECK(out_shape(models::resnet18(models::ResNetOptions().num_classes(7).in_channels(1)), {2, 1, 64, 64}) ==
        IntList{2, 7});
  auto has = [](const nn::StateDict& sd, const std::string& k) { return sd.contains(k); };
  {
    auto sd = imagenet_resnet(18)->state_dict();
    for (const char* k : {"conv1.weight", "bn1.weight", "bn1.running_mean", "bn1.num_batches_tracked",
                          "layer1.0.conv1.weight", "layer1.1.bn2.bias", "layer2.0.downsample.0.weight",
                          "layer2.0.downsample.1.running_var", "layer4.1.bn2.running_var", "fc.weight", "fc.bias"}) {
      INFO(k);
      CHECK(has(sd, k));
    }
    CHECK_FALSE(has(sd, "layer1.0.downsample.0.weight"));  // no downsample where shapes match
    CHECK_FALSE(has(sd, "conv1.bias"));
    CHECK(sd.size() == 122);  // len(torchvision.models.resnet18().state_dict())
  }
  {
    auto sd = imagenet_resnet(50)->state_dict();
    for (const char* k : {"layer1.0.downsample.0.weight", "layer1.0.conv3.weight", "layer3.5.bn3.running_mean",
                          "layer4.2.conv2.weight"}) {
      INFO(k);
      CHECK(has(sd, k));
    }
    CHECK(sd["layer4.0.conv2.weight"].sizes() == IntList{512, 512, 3, 3});
    CHECK(sd["layer4.0.conv1.weight"].sizes() == IntList{512, 1024, 1, 1});  // v1.5: stride on the 3x3
    CHECK(sd.size() == 320);
  }
}

TEST_CASE("vgg and alexnet: torchvision parameter counts, ImageNet-shape outputs and state_dict keys", "[models]") {
  CHECK(count_params(imagenet_vgg16()) == 138357544);
  CHECK(count_params(imagenet_alexnet()) == 61100840);
  // The other VGGs differ from vgg16 only in `features`, which the small-input variant builds
  // by the same code (it drops only the parameterless last max-pool): their ImageNet count is
  // the small model's with its Linear(512, 1000) swapped for vgg16's classifier.
  const int64_t classifier = count_params(imagenet_vgg16()->classifier);
  auto imagenet_count = [&](models::VGG small) {
    REQUIRE(small->classifier->size() == 1);
    return count_params(small) - count_params(small->classifier) + classifier;
  };
  const auto small = models::VGGOptions().small_input(true).init_weights(false);
  CHECK(imagenet_count(models::vgg11(small)) == 132863336);
  CHECK(imagenet_count(models::vgg11_bn(small)) == 132868840);
  CHECK(imagenet_count(models::vgg13(small)) == 133047848);
  CHECK(imagenet_count(models::vgg13_bn(small)) == 133053736);
  CHECK(imagenet_count(models::vgg16(small)) == 138357544);
  CHECK(imagenet_count(models::vgg16_bn(small)) == 138365992);
  CHECK(imagenet_count(models::vgg19(small)) == 143667240);
  CHECK(imagenet_count(models::vgg19_bn(small)) == 143678248);
  // The adaptive pool expands the tiny feature map of 64 px images to 7x7 / 6x6, as torchvision.
  CHECK(out_shape(imagenet_vgg16(), {1, 3, 64, 64}) == IntList{1, 1000});
  CHECK(out_shape(imagenet_alexnet(), {1, 3, 64, 64}) == IntList{1, 1000});
  CHECK(out_shape(imagenet_alexnet(), {1, 3, 224, 224}) == IntList{1, 1000});
  auto has = [](const nn::StateDict& sd, const std::string& k) { return sd.contains(k); };
  {
    auto sd = imagenet_vgg16()->state_dict();
    for (const char* k : {"features.0.weight", "features.28.weight", "features.28.bias", "classifier.0.weight",
                          "classifier.3.weight", "classifier.6.bias"}) {
      INFO(k);
      CHECK(has(sd, k));
    }
    CHECK(sd["classifier.0.weight"].sizes() == IntList{4096, 25088});
    CHECK(sd.size() == 32);
  }
  {
    auto sd = imagenet_alexnet()->state_dict();
    for (const char* k : {"features.0.weight", "features.3.weight", "features.6.weight", "features.8.weight",
                          "features.10.bias", "classifier.1.weight", "classifier.4.weight", "classifier.6.bias"}) {
      INFO(k);
      CHECK(has(sd, k));
    }
    CHECK(sd["features.0.weight"].sizes() == IntList{64, 3, 11, 11});
    CHECK(sd["classifier.1.weight"].sizes() == IntList{4096, 9216});
  }
}

TEST_CASE("small-input variants work at 28 and 32 px", "[models]") {
  manual_seed(0);
  const auto grey = models::ModelOptions().num_classes(10).in_channels(1).small_input(true);
  const auto rgb = models::ModelOptions().num_classes(10).in_channels(3).small_input(true);
  for (const char* name : {"resnet50", "vgg11", "vgg16_bn", "alexnet"}) {
    INFO(name);
    auto net = models::create(name, grey);
    CHECK(out_shape(net, {2, 1, 28, 28}) == IntList{2, 10});
    CHECK(out_shape(net, {2, 1, 32, 32}) == IntList{2, 10});
  }
  CHECK(out_shape(models::create("vgg11", rgb), {2, 3, 32, 32}) == IntList{2, 10});
  CHECK(out_shape(models::create("alexnet", rgb), {2, 3, 32, 32}) == IntList{2, 10});
  // resnet101/152 add only more Bottlenecks to resnet50's code path; they run at 64 px above.
  for (const char* name : {"resnet34", "vgg11_bn", "vgg13", "vgg13_bn", "vgg19", "vgg19_bn"}) {
    INFO(name);
    CHECK(out_shape(models::create(name, grey), {1, 1, 28, 28}) == IntList{1, 10});
  }
  // The small stem: conv3x3 stride 1 no bias, no max-pool; same names, smaller conv1.
  auto r = models::resnet18(models::ResNetOptions().in_channels(1).num_classes(10).small_input(true));
  CHECK(r->conv1->weight.sizes() == IntList{64, 1, 3, 3});
  CHECK(r->conv1->options.stride()[0] == 1);
  CHECK(r->conv1->options.padding()[0] == 1);
  CHECK_FALSE(r->conv1->bias.defined());
  CHECK(count_params(r) == 11172810);  // the CIFAR ResNet-18 of bench/bench_resnet18_cpu
  CHECK(out_shape(r, {2, 1, 28, 28}) == IntList{2, 10});
  CHECK(out_shape(r, {2, 1, 32, 32}) == IntList{2, 10});
  // ResNet-20 (He et al.'s CIFAR net with projection shortcuts): 3 stages of 3 blocks, 16-64 planes.
  auto r20 = models::resnet20(models::ResNetOptions().num_classes(10));
  CHECK(count_params(r20) == 272474);
  CHECK(r20->conv1->weight.sizes() == IntList{16, 3, 3, 3});
  CHECK(r20->layer3->size() == 3);
  CHECK_FALSE(r20->layer4);
  CHECK(r20->fc->weight.sizes() == IntList{10, 64});
  CHECK(out_shape(r20, {2, 3, 32, 32}) == IntList{2, 10});
  CHECK(out_shape(models::create("resnet20", grey), {2, 1, 28, 28}) == IntList{2, 10});
  CHECK_THROWS_WITH(models::ResNet(models::ResNetBlock::Basic, std::vector<int64_t>{2, 2}),
                    Catch::Contains("3 or 4 stages"));
  auto v = models::vgg16(models::VGGOptions().small_input(true).num_classes(10).in_channels(1));
  CHECK(v->classifier->size() == 1);
  CHECK(v->features->size() == 30);  // torchvision's 31 minus the last max-pool
  CHECK(out_shape(v, {1, 1, 28, 28}) == IntList{1, 10});

  // A small model trains: gradients reach the stem.
  r->train();
  Tensor loss = nn::functional::cross_entropy(r(randn({2, 1, 28, 28})), randint(0, 10, {2}));
  loss.backward();
  REQUIRE(r->conv1->weight.grad().defined());
  CHECK(sum(abs(r->conv1->weight.grad())).item<double>() > 0);
}

TEST_CASE("small VGG and DCGAN state_dict keys match torchvision's and pytorch/examples'", "[models]") {
  auto has = [](const nn::StateDict& sd, const std::string& k) { return sd.contains(k); };
  {
    auto sd = models::vgg16_bn(models::VGGOptions().small_input(true))->state_dict();
    for (const char* k : {"features.0.weight", "features.0.bias", "features.1.running_var", "features.40.weight",
                          "features.41.weight", "features.41.num_batches_tracked", "classifier.0.weight"}) {
      INFO(k);
      CHECK(has(sd, k));
    }
  }
  {
    auto sd = models::DCGANGenerator()->state_dict();
    CHECK(has(sd, "main.0.weight"));
    CHECK(has(sd, "main.1.running_mean"));
    CHECK(has(sd, "main.12.weight"));
    CHECK(sd["main.0.weight"].sizes() == IntList{100, 512, 4, 4});
  }
}

TEST_CASE("resnet init follows torchvision, zero_init_residual zeroes the last BN of each block", "[models]") {
  manual_seed(1);
  auto r18 = models::resnet18(models::ResNetOptions().num_classes(10));
  // kaiming_normal_(fan_out, relu): std = sqrt(2 / (64 * 7 * 7)).
  CHECK(std_of(r18->conv1->weight) == Approx(std::sqrt(2.0 / (64 * 49))).epsilon(0.05));
  auto sd = r18->state_dict();
  CHECK(min(sd["layer1.0.bn2.weight"]).item<double>() == 1.0);
  CHECK(max(abs(sd["layer1.0.bn2.bias"])).item<double>() == 0.0);

  auto z18 = models::resnet18(models::ResNetOptions().zero_init_residual(true).small_input(true).num_classes(10));
  auto zsd = z18->state_dict();
  for (const char* k : {"layer1.0.bn2.weight", "layer2.1.bn2.weight", "layer4.1.bn2.weight"}) {
    INFO(k);
    CHECK(max(abs(zsd[k])).item<double>() == 0.0);
  }
  CHECK(min(zsd["layer1.0.bn1.weight"]).item<double>() == 1.0);
  CHECK(min(zsd["layer2.0.downsample.1.weight"]).item<double>() == 1.0);
  {
    // Every block is the identity before the final ReLU: y = relu(x) after the stem for stage 1.
    NoGradGuard g;
    z18->eval();
    Tensor x = randn({1, 64, 8, 8});
    Tensor y = z18->layer1->forward(relu(x));
    CHECK(allclose(y, relu(x)));
  }
  auto z50 = models::resnet50(models::ResNetOptions().zero_init_residual(true).num_classes(10));
  auto z50sd = z50->state_dict();
  CHECK(max(abs(z50sd["layer3.4.bn3.weight"])).item<double>() == 0.0);
  CHECK(min(z50sd["layer3.4.bn2.weight"]).item<double>() == 1.0);

  auto v = models::vgg11(models::VGGOptions().small_input(true).num_classes(10));
  auto vsd = v->state_dict();
  CHECK(std_of(vsd["classifier.0.weight"]) == Approx(0.01).epsilon(0.1));
  CHECK(max(abs(vsd["features.0.bias"])).item<double>() == 0.0);
}

TEST_CASE("DCGAN generator and discriminator shapes, range and init", "[models][dcgan]") {
  manual_seed(2);
  NoGradGuard g;
  for (int64_t size : {64, 32, 28}) {
    INFO("image_size " << size);
    const int64_t nc = size == 64 ? 3 : 1;
    auto opts = models::DCGANOptions().nc(nc).image_size(size);
    models::DCGANGenerator gen(opts);
    models::DCGANDiscriminator dis(opts);
    Tensor img = gen(randn({3, 100}));
    CHECK(img.sizes() == IntList{3, nc, size, size});
    CHECK(max(img).item<double>() <= 1.0);
    CHECK(min(img).item<double>() >= -1.0);
    CHECK(gen(randn({3, 100, 1, 1})).sizes() == IntList{3, nc, size, size});
    Tensor logits = dis(img);
    CHECK(logits.sizes() == IntList{3});
    dis->eval();
    CHECK(dis(img).sizes() == IntList{3});
  }
  models::DCGANGenerator gen;
  models::DCGANDiscriminator dis;
  CHECK(count_params(gen) == 3576704);  // pytorch/examples dcgan netG (nz 100, ngf 64, nc 3)
  CHECK(count_params(dis) == 2765568);  // netD without the Sigmoid (it has no parameters)
  auto sd = gen->state_dict();
  CHECK(std_of(sd["main.3.weight"]) == Approx(0.02).epsilon(0.05));
  CHECK(mean(sd["main.1.weight"]).item<double>() == Approx(1.0).epsilon(0.01));
  CHECK(max(abs(sd["main.1.bias"])).item<double>() == 0.0);
  CHECK_THROWS_WITH(dis(randn({2, 3, 32, 32})), Contains("DCGANDiscriminator") && Contains("[2, 3, 32, 32]"));
  CHECK_THROWS_WITH(gen(randn({2, 50})), Contains("DCGANGenerator"));
  CHECK_THROWS_WITH(models::DCGANGenerator(models::DCGANOptions().image_size(48)), Contains("64, 32 or 28"));
}

TEST_CASE("models::create builds by name and lists the known names on an unknown one", "[models]") {
  manual_seed(3);
  auto net = models::create("ResNet18", models::ModelOptions().num_classes(10).in_channels(1).small_input(true));
  CHECK(net.ptr()->name() == "ResNet");
  CHECK(out_shape(net, {2, 1, 28, 28}) == IntList{2, 10});
  CHECK(out_shape(models::create("small_cnn", models::ModelOptions().num_classes(10).in_channels(1)),
                  {2, 1, 28, 28}) == IntList{2, 10});
  auto g = models::create("dcgan_generator", models::ModelOptions().in_channels(1).image_size(28));
  CHECK(out_shape(g, {2, 100}) == IntList{2, 1, 28, 28});
  CHECK(models::model_names().size() == 18 + models::GPTConfig::presets().size() + 1);
  CHECK(models::is_language_model("GPT2"));
  CHECK(!models::is_language_model("resnet50"));
  CHECK_THROWS_WITH(models::create("resnet19"),
                    Contains("unknown model 'resnet19'") && Contains("resnet50") && Contains("vgg16_bn") &&
                        Contains("alexnet") && Contains("dcgan_discriminator"));
}

TEST_CASE("resnet blocks run the fused batch_norm_relu and batch_norm_add_relu, hooks on a BN still see its output", "[models]") {
  // The same block twice from one seed: forward/backward through the fused op vs the same
  // submodules composed by hand (batch norm, add, ReLU as separate ops).
  for (bool bottleneck : {false, true}) {
    INFO((bottleneck ? "Bottleneck" : "BasicBlock"));
    auto build = [&]() -> std::shared_ptr<nn::Module> {
      manual_seed(3);
      if (bottleneck) return models::Bottleneck(8, 4, 2).ptr();
      return models::BasicBlock(8, 8, 1).ptr();
    };
    auto fused = build(), plain = build();
    manual_seed(4);
    const Tensor x0 = randn({4, 8, 6, 6});
    Tensor x = x0.clone().set_requires_grad(true), xr = x0.clone().set_requires_grad(true);
    Tensor y, yr;
    if (bottleneck) {
      auto& m = static_cast<models::BottleneckImpl&>(*fused);
      auto& r = static_cast<models::BottleneckImpl&>(*plain);
      y = m.forward(x);
      Tensor h = F::relu(r.bn2(r.conv2(F::relu(r.bn1(r.conv1(xr))))));
      yr = F::relu(r.bn3(r.conv3(h)) + r.downsample(xr));
    } else {
      auto& m = static_cast<models::BasicBlockImpl&>(*fused);
      auto& r = static_cast<models::BasicBlockImpl&>(*plain);
      y = m.forward(x);
      yr = F::relu(r.bn2(r.conv2(F::relu(r.bn1(r.conv1(xr))))) + xr);
    }
    CHECK(allclose(y, yr, 1e-5, 1e-5));
    y.sum().backward();
    yr.sum().backward();
    CHECK(allclose(x.grad(), xr.grad(), 1e-4, 1e-5));
    const auto pf = fused->named_parameters(), pp = plain->named_parameters();
    for (const auto& [name, p] : pf) {
      INFO(name);
      CHECK(allclose(p.grad(), pp[name].grad(), 1e-4, 1e-5));
    }
    const auto bf = fused->named_buffers(), bp = plain->named_buffers();
    for (const auto& [name, t] : bf) {
      INFO(name);
      CHECK(allclose(t.to(kFloat64), bp[name].to(kFloat64), 1e-6, 1e-6));
    }
  }
  // A forward hook on bn2 sees batch norm's own output, before the add and the ReLU; one on
  // bn1, before the ReLU.
  manual_seed(3);
  models::BasicBlock block(4, 4, 1);
  Tensor seen, seen1;
  block->bn2->register_forward_hook([&](nn::Module&, const Tensor&, Tensor& out) { seen = out.detach(); });
  block->bn1->register_forward_hook([&](nn::Module&, const Tensor&, Tensor& out) { seen1 = out.detach(); });
  Tensor x = randn({2, 4, 5, 5});
  Tensor y = block(x);
  REQUIRE(seen.defined());
  REQUIRE(seen1.defined());
  CHECK(seen.min().item<double>() < 0.0);  // no ReLU applied yet
  CHECK(seen1.min().item<double>() < 0.0);
  CHECK(allclose(y, F::relu(seen + x), 1e-6, 1e-6));
  CHECK(allclose(y, F::relu(block->bn2(block->conv2(F::relu(seen1))) + x), 1e-5, 1e-5));
}
