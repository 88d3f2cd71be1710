// The mpx command line: `info` (build and devices) and `train` (a quick Fashion-MNIST run).
#include <mpx/mpx.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "data/idx.h"
#include "models/small_cnn.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {

int usage(FILE* to) {
  std::fprintf(to,
               "usage: mpx <command> [flags]\n"
               "  info                         build options, CPU threads, CUDA devices\n"
               "  train [--epochs N] [-b N] [--lr X] [--momentum X] [--limit N] [--seed N] [DATA_DIR]\n"
               "                               train the small CNN on Fashion-MNIST (default data: %s)\n",
               data::kFashionMnistDir);
  return to == stderr ? 2 : 0;
}

int info() {
  std::printf("mpx 0.1.0\n");
#ifdef MPX_WITH_CUDA
  std::printf("CUDA backend: built\n");
#else
  std::printf("CUDA backend: not built\n");
#endif
  std::printf("CUDA devices: %d\n", cuda_device_count());
  std::printf("CPU threads (OpenMP): %d\n", omp_get_max_threads());
  std::printf("CPU f32 convolutions: %s\n", cpu_conv_backend().c_str());
  std::printf("ops in the registry: %d\n", kNumOps);
  return 0;
}

Tensor normalize(const Tensor& u8) { return (u8.to(kFloat32) / 255.0 - 0.2860) / 0.3530; }

double evaluate(models::SmallCnn& net, const data::MnistSplit& test) {
  net->eval();
  NoGradGuard ng;
  int64_t correct = 0;
  for (int64_t s = 0; s < test.images.size(0); s += 1000) {
    const int64_t n = std::min<int64_t>(1000, test.images.size(0) - s);
    Tensor pred = argmax(net(normalize(test.images.narrow(0, s, n)).unsqueeze(1)), 1);
    correct += sum(eq(pred, test.labels.narrow(0, s, n)).to(kInt64)).item<int64_t>();
  }
  net->train();
  return static_cast<double>(correct) / static_cast<double>(test.images.size(0));
}

int train(int argc, char** argv) {
  int epochs = 1;
  int64_t batch = 64, limit = 0;
  double lr = 0.05, momentum = 0.9;
  uint64_t seed = 0;
  std::string root = data::kFashionMnistDir;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      MPX_CHECK(i + 1 < argc, "flag ", a, " needs a value");
      return argv[++i];
    };
    auto number = [&]() {
      const std::string v = value();
      try {
        size_t used = 0;
        const double d = std::stod(v, &used);
        if (used == v.size()) return d;
      } catch (const std::exception&) {
      }
      MPX_ERROR("flag ", a, " expects a number, got '", v, "'");
    };
    if (a == "--epochs") epochs = static_cast<int>(number());
    else if (a == "-b" || a == "--batch-size") batch = static_cast<int64_t>(number());
    else if (a == "--lr") lr = number();
    else if (a == "--momentum") momentum = number();
    else if (a == "--limit") limit = static_cast<int64_t>(number());
    else if (a == "--seed") seed = static_cast<uint64_t>(number());
    else if (a == "-h" || a == "--help") return usage(stdout);
    else if (!a.empty() && a[0] == '-') MPX_ERROR("unknown flag ", a, " (see mpx --help)");
    else root = a;
  }
  MPX_CHECK(epochs > 0 && batch > 0 && lr > 0, "--epochs, --batch-size and --lr must be positive");
  manual_seed(seed);
  auto tr = data::read_mnist(root, true);
  auto te = data::read_mnist(root, false);
  const int64_t n = limit > 0 ? std::min(limit, tr.images.size(0)) : tr.images.size(0);
  models::SmallCnn net;
  optim::SGD opt(net->parameters(), optim::SGDOptions(lr).momentum(momentum).weight_decay(1e-4));
  std::printf("training SmallCnn on %s: %lld images, batch %lld, %d epoch(s)\n", root.c_str(),
              static_cast<long long>(n), static_cast<long long>(batch), epochs);
  for (int e = 0; e < epochs; ++e) {
    auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t steps = 0;
    for (int64_t s = 0; s + batch <= n; s += batch, ++steps) {
      opt.zero_grad();
      Tensor loss = F::cross_entropy(net(normalize(tr.images.narrow(0, s, batch)).unsqueeze(1)), tr.labels.narrow(0, s, batch));
      loss.backward();
      opt.step();
      loss_sum += loss.item<double>();
      if (steps % 100 == 0)
        std::printf("  epoch %d step %lld loss %.4f\n", e + 1, static_cast<long long>(steps), loss.item<double>());
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("epoch %d: mean loss %.4f, %.0f images/s, test top-1 %.2f%%\n", e + 1, loss_sum / std::max<int64_t>(steps, 1),
                static_cast<double>(steps * batch) / secs, 100.0 * evaluate(net, te));
  }
  save(net, "smallcnn.safetensors");
  std::printf("saved smallcnn.safetensors\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string cmd = argv[1];
  try {
    if (cmd == "info") return info();
    if (cmd == "train") return train(argc - 2, argv + 2);
    if (cmd == "-h" || cmd == "--help" || cmd == "help") return usage(stdout);
    std::fprintf(stderr, "mpx: unknown command '%s'\n", cmd.c_str());
    return usage(stderr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpx: %s\n", e.what());
    return 1;
  }
}
