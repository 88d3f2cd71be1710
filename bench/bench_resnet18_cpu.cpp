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
  // torchvision's ResNet-18 (BasicBlock v1.5) with the CIFAR-style stem: conv3x3 stride 1, no max-pool.
  models::ResNet net = models::resnet18(models::ResNetOptions().in_channels(1).num_classes(10).small_input(true));
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
