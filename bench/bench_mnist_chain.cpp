// LibTorch's MNIST input pipeline written once, timed against mpx and against LibTorch itself: the
// bench target builds it on mpx (<mpx/torch.h>); bench/run_mnist_chain.sh also builds it with -DMPX_PEER_LIBTORCH on
// the LibTorch that ships in PyTorch's wheel. `--path native` (mpx only) is mpx's own spelling of
// the same pipeline, a transform given to the dataset, for the natural-code-against-named-path check.
#ifdef MPX_PEER_LIBTORCH
#include <torch/torch.h>
#else
#include <mpx/torch.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string root, path = "chain";
  int64_t workers = 0, batch = 64, epochs = 5;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "bench_mnist_chain: %s\nusage: bench_mnist_chain --root DIR [--workers N] [--batch N] [--epochs N] "
               "[--path chain|native]\n  DIR holds MNIST-format train-images-idx3-ubyte and train-labels-idx1-ubyte "
               "(uncompressed, as LibTorch reads them)\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + k).c_str());
    const char* v = argv[++i];
    if (k == "--root") a.root = v;
    else if (k == "--path") a.path = v;
    else if (k == "--workers") a.workers = std::atoll(v);
    else if (k == "--batch") a.batch = std::atoll(v);
    else if (k == "--epochs") a.epochs = std::atoll(v);
    else usage(("unknown flag " + k).c_str());
  }
  if (a.root.empty()) usage("--root is required");
  if (a.path != "chain" && a.path != "native") usage("--path is chain or native");
#ifdef MPX_PEER_LIBTORCH
  if (a.path != "chain") usage("LibTorch runs --path chain only");
#endif
  if (a.workers < 0 || a.batch < 1 || a.epochs < 1) usage("--workers >= 0, --batch >= 1, --epochs >= 1");
  return a;
}

// One epoch per element: images per second, and a checksum of what the batches held.
template <typename Loader>
void run(Loader& loader, const Args& a, const char* framework) {
  std::vector<double> rates;
  double checksum = 0;
  for (int64_t e = 0; e < a.epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t n = 0;
    double sum = 0;
    for (auto& batch : loader) {
      sum += batch.data.sum().template item<double>() + batch.target.sum().template item<double>();
      n += batch.data.size(0);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(n) / s);
    checksum = sum;
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  std::printf("{\"framework\": \"%s\", \"path\": \"%s\", \"workers\": %lld, \"batch\": %lld, \"epochs\": %lld, "
              "\"images_per_s\": %.0f, \"min\": %.0f, \"max\": %.0f, \"checksum\": %.9g}\n",
              framework, a.path.c_str(), static_cast<long long>(a.workers), static_cast<long long>(a.batch),
              static_cast<long long>(a.epochs), sorted[sorted.size() / 2], sorted.front(), sorted.back(), checksum);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  torch::set_num_threads(1);  // the loading threads are the parallelism measured here
#ifdef MPX_PEER_LIBTORCH
  const char* framework = "libtorch";
#else
  const char* framework = "mpx";
  if (a.path == "native") {
    namespace T = mpx::data::transforms;
    mpx::data::DataLoader loader(
        mpx::data::MNIST(a.root, true, T::Compose({T::ToTensor(), T::Normalize({0.1307}, {0.3081})})),
        mpx::data::DataLoaderOptions(a.batch).workers(a.workers));
    run(loader, a, framework);
    return 0;
  }
#endif
  // LibTorch's examples/cpp/mnist, as written there.
  auto train_dataset = torch::data::datasets::MNIST(a.root)
                           .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                           .map(torch::data::transforms::Stack<>());
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(train_dataset), torch::data::DataLoaderOptions().batch_size(a.batch).workers(a.workers));
  run(*train_loader, a, framework);
  return 0;
}
