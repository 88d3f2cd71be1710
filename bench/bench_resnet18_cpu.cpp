// CPU training-step throughput of a CIFAR-style ResNet-18 (the peer of bench/peer_resnet18_cpu.py).
#include <mpx/mpx.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {
// torchvision's BasicBlock (v1.5 layout: stride on the 3x3 conv).
struct BlockImpl : nn::Module {
  BlockImpl(int64_t in, int64_t out, int64_t stride) {
    c1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    b1 = register_module("bn1", nn::BatchNorm2d(out));
    c2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    b2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      down = register_module("downsample", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                                          nn::BatchNorm2d(out)));
    }
  }
  Tensor forward(Tensor x) {
    Tensor y = relu(b1(c1(x)));
    y = b2(c2(y));
    return relu(y + (down ? down->forward(x) : x));
  }
  nn::Conv2d c1{nullptr}, c2{nullptr};
  nn::BatchNorm2d b1{nullptr}, b2{nullptr};
  nn::Sequential down{nullptr};
};
MPX_MODULE(Block);

struct ResNet18Impl : nn::Module {
  ResNet18Impl(int64_t in_ch, int64_t classes) {
    stem = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in_ch, 64, 3).padding(1).bias(false)));
    bn = register_module("bn1", nn::BatchNorm2d(64));
    const int64_t widths[] = {64, 128, 256, 512};
    int64_t in = 64;
    for (int s = 0; s < 4; ++s) {
      nn::Sequential layer;
      layer->push_back(Block(in, widths[s], s == 0 ? 1 : 2));
      layer->push_back(Block(widths[s], widths[s], 1));
      layers.push_back(register_module("layer" + std::to_string(s + 1), layer));
      in = widths[s];
    }
    fc = register_module("fc", nn::Linear(512, classes));
  }
  Tensor forward(Tensor x) {
    x = relu(bn(stem(x)));
    for (auto& l : layers) x = l->forward(x);
    return fc(F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions({1, 1})).flatten(1));
  }
  nn::Conv2d stem{nullptr};
  nn::BatchNorm2d bn{nullptr};
  std::vector<nn::Sequential> layers;
  nn::Linear fc{nullptr};
};
MPX_MODULE(ResNet18);
}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 128;
  int warmup = 3, steps = 10;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", flag); std::exit(2); }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--batch")) batch = std::stoll(next("--batch"));
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::stoi(next("--warmup"));
    else if (!std::strcmp(argv[i], "--steps")) steps = std::stoi(next("--steps"));
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else { std::fprintf(stderr, "usage: %s [--batch N] [--warmup N] [--steps N] [--json]\n", argv[0]); return 2; }
  }
  manual_seed(0);
  ResNet18 net(1, 10);
  int64_t nparams = 0;
  for (auto& p : net->parameters()) nparams += p.numel();
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9).weight_decay(5e-4));
  Tensor x = randn({batch, 1, 28, 28});
  Tensor y = randint(0, 10, {batch});
  std::vector<double> times;
  for (int s = 0; s < warmup + steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor loss = F::cross_entropy(net(x), y);
    loss.backward();
    opt.step();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  const double ips = static_cast<double>(batch) / med;
  const double ips_min = static_cast<double>(batch) / times.back(), ips_max = static_cast<double>(batch) / times.front();
  const char* th = std::getenv("OMP_NUM_THREADS");
  if (json) {
    std::printf("{\"framework\": \"mpx\", \"params\": %lld, \"batch\": %lld, \"threads\": \"%s\", \"images_per_s\": %.2f, "
                "\"images_per_s_min\": %.2f, \"images_per_s_max\": %.2f, \"step_s\": %.4f}\n",
                static_cast<long long>(nparams), static_cast<long long>(batch), th ? th : "default", ips, ips_min, ips_max, med);
  } else {
    std::printf("mpx resnet18 (cifar-style, 1x28x28) params %lld batch %lld threads %s: %.1f images/s (median of %d; "
                "min %.1f max %.1f), step %.3f s\n",
                static_cast<long long>(nparams), static_cast<long long>(batch), th ? th : "default", ips, steps, ips_min,
                ips_max, med);
  }
  return 0;
}
