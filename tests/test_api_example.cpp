// The API.md example, verbatim except for a shorter loop: it must keep compiling and training.
#include <catch2/catch.hpp>

#include <filesystem>

#include <mpx/mpx.h>

#include "tests/skip.h"

namespace F = mpx::nn::functional;

namespace {
struct NetImpl : mpx::nn::Module {
  NetImpl() {
    conv = register_module("conv", mpx::nn::Conv2d(mpx::nn::Conv2dOptions(1, 32, 3).padding(1)));
    bn   = register_module("bn",   mpx::nn::BatchNorm2d(32));
    fc   = register_module("fc",   mpx::nn::Linear(32 * 14 * 14, 10));
  }
  mpx::Tensor forward(mpx::Tensor x) {
    x = F::max_pool2d(F::relu(bn(conv(x))), 2);
    return fc(x.flatten(1));
  }
  mpx::nn::Conv2d conv{nullptr}; mpx::nn::BatchNorm2d bn{nullptr}; mpx::nn::Linear fc{nullptr};
};
MPX_MODULE(Net);
}  // namespace

TEST_CASE("the API.md example compiles and trains at O2", "[api][train]") {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) {
    mpx::testing::skip_test("Fashion-MNIST not installed (Debian package dataset-fashion-mnist)");
    return;
  }
  mpx::amp::reset();
  mpx::manual_seed(0);
  auto device = mpx::cuda_is_available() ? mpx::Device::cuda() : mpx::Device::cpu();
  Net net; net->to(device);
  mpx::optim::SGD opt(net->parameters(), mpx::optim::SGDOptions(0.05).momentum(0.9));

  mpx::amp::initialize(net, opt, mpx::amp::Options().opt_level("O2"));   // line 1

  auto train = mpx::data::FashionMNIST("/usr/share/datasets/fashion-mnist", /*train=*/true);
  auto loader = mpx::data::DataLoader(train, mpx::data::DataLoaderOptions(128).shuffle(true).workers(2));
  int steps = 0;
  double first = 0, last = 0;
  for (auto& batch : loader) {
    opt.zero_grad();
    auto loss = F::cross_entropy(net(batch.data.to(device)), batch.target.to(device));
    mpx::amp::scale_loss(loss, opt).backward();                         // line 2
    opt.step();                                                         // skipped on overflow
    (steps == 0 ? first : last) = loss.item<double>();
    if (++steps == 60) break;
  }
  CHECK(last < first);
  const std::string path = (std::filesystem::temp_directory_path() / "mpx_api_example.safetensors").string();
  mpx::save(net, path);
  CHECK(std::filesystem::exists(path));
  std::filesystem::remove(path);
  mpx::amp::reset();
}
