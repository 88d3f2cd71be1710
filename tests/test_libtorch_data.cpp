// LibTorch's data API as its examples write it: MNIST(root).map(Normalize<>).map(Stack<>), make_data_loader,
// own datasets derived from Dataset<Self>, the errors where mpx's loader differs, and a training program in
// LibTorch's spellings through <mpx/torch.h>.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include <mpx/torch.h>

#include "tests/test_files.h"
#include "tests/test_util.h"

namespace {

using mpx::testing::TempDir;
using mpx::testing::write_idx;

// An MNIST-format folder of `n` 6x5 images per split: image i is all (i * 7 + j) % 256 over its pixels j,
// labelled (i % 10) in train and ((i + 3) % 10) in t10k.
void write_mnist(const TempDir& dir, uint32_t n) {
  for (const char* split : {"train", "t10k"}) {
    std::vector<uint8_t> px, labels;
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < 30; ++j) px.push_back(static_cast<uint8_t>((i * 7 + j) % 256));
      labels.push_back(static_cast<uint8_t>((split[0] == 't' && split[1] == '1' ? i + 3 : i) % 10));
    }
    write_idx(dir.path / (std::string(split) + "-images-idx3-ubyte"), {n, 6, 5}, px);
    write_idx(dir.path / (std::string(split) + "-labels-idx1-ubyte"), {n}, labels);
  }
}

// A learnable 28x28 MNIST-format folder: image i of class i % 10 is a bright 6x6 square placed by its class.
void write_squares(const TempDir& dir, uint32_t n) {
  for (const char* split : {"train", "t10k"}) {
    std::vector<uint8_t> px(static_cast<size_t>(n) * 784), labels;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t c = i % 10, top = 2 + (c / 5) * 12, left = 2 + (c % 5) * 5;
      for (uint32_t y = top; y < top + 6; ++y)
        for (uint32_t x = left; x < left + 6; ++x) px[i * 784 + y * 28 + x] = static_cast<uint8_t>(200 + (i * 13) % 56);
      labels.push_back(static_cast<uint8_t>(c));
    }
    write_idx(dir.path / (std::string(split) + "-images-idx3-ubyte"), {n, 28, 28}, px);
    write_idx(dir.path / (std::string(split) + "-labels-idx1-ubyte"), {n}, labels);
  }
}

// A small classifier written as LibTorch users write one (a Module subclass used by value, holders built in
// the initializer list, the free functions torch::max_pool2d(x, 2), torch::dropout, torch::log_softmax).
struct SquaresNet : torch::nn::Module {
  SquaresNet()
      : conv(torch::nn::Conv2dOptions(1, 8, /*kernel_size=*/3).padding(1)), drop(torch::nn::Dropout2dOptions(0.1)),
        hidden(8 * 7 * 7, 32), out(32, 10) {
    register_module("conv", conv);
    register_module("drop", drop);
    register_module("hidden", hidden);
    register_module("out", out);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(drop->forward(conv->forward(x))), 4);
    x = torch::relu(hidden->forward(x.view({x.size(0), -1})));
    x = torch::dropout(x, /*p=*/0.2, /*train=*/is_training());
    return torch::log_softmax(out->forward(x), /*dim=*/1);
  }
  torch::nn::Conv2d conv;
  torch::nn::Dropout2d drop;
  torch::nn::Linear hidden, out;
};

// One epoch; the mean of its batch losses.
template <typename Loader>
double fit_epoch(SquaresNet& net, torch::Device device, Loader& loader, torch::optim::Optimizer& opt) {
  net.train();
  double total = 0;
  int64_t steps = 0;
  for (auto& batch : loader) {
    opt.zero_grad();
    torch::Tensor loss = torch::nll_loss(net.forward(batch.data.to(device)), batch.target.to(device));
    AT_ASSERT(std::isfinite(loss.item<double>()));
    loss.backward();
    opt.step();
    total += loss.item<double>();
    ++steps;
  }
  return total / static_cast<double>(steps);
}

// Accuracy over the loader, with the summed loss checked finite.
template <typename Loader>
double accuracy(SquaresNet& net, torch::Device device, Loader& loader) {
  torch::NoGradGuard no_grad;
  net.eval();
  double summed = 0;
  int64_t right = 0, seen = 0;
  for (const auto& batch : loader) {
    const torch::Tensor logp = net.forward(batch.data.to(device)), y = batch.target.to(device);
    summed += torch::nll_loss(logp, y, /*weight=*/{}, torch::Reduction::Sum).item<double>();
    right += logp.argmax(1).eq(y).sum().item<int64_t>();
    seen += y.size(0);
  }
  CHECK(std::isfinite(summed));
  return static_cast<double>(right) / static_cast<double>(seen);
}

std::vector<int64_t> targets_of(mpx::data::DataLoader& loader) {
  std::vector<int64_t> out;
  for (auto& batch : loader)
    for (int64_t k = 0; k < batch.target.size(0); ++k) out.push_back(batch.target[k].item<int64_t>());
  return out;
}

// LibTorch's own-class dataset: get(size_t) and size() as its examples override them. `calls` is plain
// state, safe only because every loading thread gets its own copy.
struct Squares : mpx::data::datasets::Dataset<Squares> {
  size_t n;
  int64_t calls = 0;
  explicit Squares(size_t n) : n(n) {}
  mpx::data::Example<> get(size_t index) override {
    ++calls;
    const auto i = static_cast<double>(index);
    return {mpx::full({2}, i * i), mpx::full({}, i, mpx::kInt64)};
  }
  std::optional<size_t> size() const override { return n; }
};

// One that cannot be copied: the loader calls it from one thread at a time.
struct Unique : mpx::data::datasets::Dataset<Unique> {
  std::unique_ptr<int64_t> base = std::make_unique<int64_t>(100);
  mpx::data::Example<> get(size_t index) override {
    return {mpx::full({1}, static_cast<double>(*base + static_cast<int64_t>(index))),
            mpx::full({}, static_cast<double>(index), mpx::kInt64)};
  }
  std::optional<size_t> size() const override { return 9; }
};

// A stream whose length is not known: mpx's loader refuses it.
struct Endless : mpx::data::datasets::Dataset<Endless> {
  mpx::data::Example<> get(size_t) override { return {mpx::zeros({1}), mpx::zeros({}, mpx::kInt64)}; }
  std::optional<size_t> size() const override { return std::nullopt; }
};

}  // namespace

TEST_CASE("LibTorch's MNIST example: MNIST(root).map(Normalize<>).map(Stack<>) through make_data_loader",
          "[api][data]") {
  TempDir dir;
  write_mnist(dir, 40);
  const std::string kDataRoot = dir.path.string();  // these lines are LibTorch's examples' own, via <mpx/torch.h>

  auto train_dataset = torch::data::datasets::MNIST(kDataRoot)
                           .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                           .map(torch::data::transforms::Stack<>());
  const size_t train_dataset_size = train_dataset.size().value();
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(train_dataset), torch::data::DataLoaderOptions().batch_size(16).workers(2));
  CHECK(train_dataset_size == 40);

  std::vector<int64_t> seen;
  for (auto& batch : *train_loader) {
    auto data = batch.data, targets = batch.target;
    REQUIRE(data.dim() == 4);
    CHECK(data.size(1) == 1);
    CHECK(data.size(2) == 6);
    CHECK(data.size(3) == 5);
    CHECK(data.dtype() == mpx::kFloat32);
    CHECK(targets.dtype() == mpx::kInt64);
    for (int64_t k = 0; k < data.size(0); ++k) {
      const int64_t i = static_cast<int64_t>(seen.size());
      seen.push_back(targets[k].item<int64_t>());
      // Pixel (2, 3) is j = 13: ((i*7 + 13) % 256 / 255 - mean) / std.
      const double want = (static_cast<double>((i * 7 + 13) % 256) / 255.0 - 0.1307) / 0.3081;
      CHECK(data[k][0][2][3].item<double>() == Approx(want).margin(2e-6));
    }
  }
  REQUIRE(seen.size() == 40);
  for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == static_cast<int64_t>(i % 10));  // SequentialSampler
  // The chain reached MNIST's own fused pass (ToTensor and Normalize as one multiply-add from the u8 image) ...
  CHECK(train_loader->dataset().transform_path().rfind("fused:", 0) == 0);
  // ... and equals Normalize<> run on each stacked batch (which LibTorch allows too) within rounding.
  auto after = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      torch::data::datasets::MNIST(kDataRoot)
          .map(torch::data::transforms::Stack<>())
          .map(torch::data::transforms::Normalize<>(0.1307, 0.3081)),
      16);
  CHECK(after->dataset().transform_path().empty());
  auto a = train_loader->begin();
  for (auto& batch : *after) {
    REQUIRE(a != train_loader->end());
    CHECK(batch.data.sizes() == a->data.sizes());
    CHECK(mpx::max(mpx::abs(batch.data - a->data)).item<double>() < 2e-6);
    CHECK(mpx::testing::same_values(batch.target, a->target));
    ++a;
  }

  // The test split by LibTorch's Mode; a mapped dataset without Stack<> gives single examples.
  auto test_dataset = mpx::data::datasets::MNIST(kDataRoot, mpx::data::datasets::MNIST::Mode::kTest);
  CHECK_FALSE(test_dataset.is_train());
  CHECK(mpx::data::datasets::MNIST(kDataRoot).is_train());
  auto normalized = test_dataset.map(mpx::data::transforms::Normalize<>(0.5, 0.5));
  const mpx::data::Example<> e = normalized.get(4);
  CHECK(e.target.item<int64_t>() == 7);
  CHECK(e.data[0][0][0].item<double>() == Approx((28.0 / 255.0 - 0.5) / 0.5).epsilon(1e-6));
  // torchvision's spelling of the same transform deduces the same type.
  const auto tv = mpx::data::transforms::Normalize({0.5}, {0.5});
  STATIC_REQUIRE(std::is_same_v<std::remove_const_t<decltype(tv)>, mpx::data::transforms::Normalize<>>);
  CHECK(mpx::testing::same_values(mpx::data::datasets::map(test_dataset, tv).get(4).data, e.data));
}

TEST_CASE("make_data_loader shuffles by default, as LibTorch's RandomSampler, and takes a batch size or a sampler",
          "[api][data]") {
  mpx::manual_seed(3);
  auto loader = mpx::data::make_data_loader(Squares(23).map(mpx::data::transforms::Stack<>()), 5);
  const std::vector<int64_t> a = targets_of(*loader), b = targets_of(*loader);
  REQUIRE(a.size() == 23);
  CHECK(std::set<int64_t>(a.begin(), a.end()).size() == 23);  // every example once
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  CHECK(a != sorted);  // shuffled
  CHECK(a != b);       // a new order every epoch
  CHECK(loader->size() == 5);

  // A sampler object picks the order: this process's shard of two.
  auto shard = mpx::data::make_data_loader(Squares(10).map(mpx::data::transforms::Stack<>()),
                                           mpx::data::samplers::DistributedSampler(10, 1, 2, /*shuffle=*/false),
                                           mpx::data::DataLoaderOptions(2));
  CHECK(targets_of(*shard) == std::vector<int64_t>{1, 3, 5, 7, 9});

  // mpx's own datasets go in without a Stack<>: mpx's loader always stacks.
  auto native = mpx::data::make_data_loader<mpx::data::samplers::SequentialSampler>(
      mpx::data::Synthetic({2}, 4, 6, 1), mpx::data::DataLoaderOptions(4));
  CHECK(native->size() == 2);
}

TEST_CASE("an own Dataset<Self>: each loading thread works on its own copy, and batches do not depend on workers",
          "[api][data]") {
  namespace T = mpx::data::transforms;
  auto chain = [] {
    // Before Stack<>: on each example; after it: on the stacked batch.
    return Squares(37)
        .map(T::Lambda<mpx::data::Example<>>([](mpx::data::Example<> e) {
          e.target = e.target + 100;
          return e;
        }))
        .map(T::TensorLambda<>([](mpx::Tensor x) { return x + 1; }))
        .map(T::Stack<>())
        .map(T::TensorLambda<>([](mpx::Tensor x) { return x * 2; }));
  };
  auto run = [&](int64_t workers) {
    auto loader = mpx::data::make_data_loader<mpx::data::samplers::SequentialSampler>(
        chain(), mpx::data::DataLoaderOptions(4).workers(workers));
    std::vector<float> data;
    std::vector<int64_t> targets;
    for (auto& batch : *loader) {
      CHECK(batch.data.size(1) == 2);
      for (int64_t k = 0; k < batch.data.size(0); ++k) {
        data.push_back(batch.data[k][1].item<float>());
        targets.push_back(batch.target[k].item<int64_t>());
      }
    }
    return std::pair{data, targets};
  };
  const auto [d0, t0] = run(0);
  REQUIRE(d0.size() == 37);
  for (size_t i = 0; i < d0.size(); ++i) {
    CHECK(d0[i] == static_cast<float>(2 * (i * i + 1)));
    CHECK(t0[i] == static_cast<int64_t>(i + 100));
  }
  for (int64_t w : {1, 3}) {
    INFO("workers " << w);
    const auto [d, t] = run(w);
    CHECK(d == d0);
    CHECK(t == t0);
  }
  // The loader's copies are its own: the dataset given to it is not touched.
  Squares mine(5);
  auto loader = mpx::data::make_data_loader(mine.map(T::Stack<>()), 2);
  for (auto& batch : *loader) (void)batch;
  CHECK(mine.calls == 0);

  // A dataset that cannot be copied still loads, one call at a time.
  auto unique = mpx::data::make_data_loader<mpx::data::samplers::SequentialSampler>(
      Unique().map(T::Stack<>()), mpx::data::DataLoaderOptions(4).workers(3));
  std::vector<float> u;
  for (auto& batch : *unique)
    for (int64_t k = 0; k < batch.data.size(0); ++k) u.push_back(batch.data[k][0].item<float>());
  CHECK(u == std::vector<float>{100, 101, 102, 103, 104, 105, 106, 107, 108});
}

TEST_CASE("make_data_loader's errors name what to change", "[api][data]") {
  using Catch::Contains;
  namespace T = mpx::data::transforms;
  CHECK_THROWS_WITH(mpx::data::make_data_loader(Endless().map(T::Stack<>()), 4), Contains("size() is unknown"));
  auto both = [] {
    auto o = mpx::data::DataLoaderOptions(2).collate_fn(mpx::data::pad_collate());
    return mpx::data::make_data_loader(
        Squares(4).map(T::Stack<>()).map(T::TensorLambda<>([](mpx::Tensor x) { return x; })), o);
  };
  CHECK_THROWS_WITH(both(), Contains("collate_fn") && Contains("after Stack<>"));
  // Bad indices reach the dataset's own checks through the chain.
  auto loader = mpx::data::make_data_loader(Squares(3).map(T::Stack<>()), 2);
  CHECK_THROWS_WITH(loader->dataset().get(3), Contains("out of range"));
  TempDir empty;
  CHECK_THROWS_WITH(mpx::data::datasets::MNIST(empty.path.string()), Contains("not found"));
}

TEST_CASE("Normalize<> takes what LibTorch's does: a batch [..., C, H, W], any shape with one mean", "[api][data]") {
  namespace T = mpx::data::transforms;
  const mpx::Tensor batch = mpx::arange(24).to(mpx::kFloat32).reshape({2, 3, 2, 2});
  const mpx::Tensor y = T::Normalize<>({1, 2, 3}, {2, 4, 8})(batch, uint64_t{0});
  REQUIRE(y.sizes() == batch.sizes());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c) {
      const double m = static_cast<double>(c + 1), sd = static_cast<double>(2 << c);
      CHECK(y[n][c][1][0].item<double>() == Approx((batch[n][c][1][0].item<double>() - m) / sd));
    }
  const mpx::Tensor flat = mpx::arange(5).to(mpx::kFloat64);
  const mpx::Tensor z = T::Normalize<>(1.0, 0.5)(flat, uint64_t{0});
  CHECK(z.dtype() == mpx::kFloat64);
  CHECK(mpx::testing::same_values(z, (flat - 1.0) / 0.5));
  CHECK_THROWS_WITH(T::Normalize<>({1, 2}, {1, 1})(batch, uint64_t{0}),
                    Catch::Contains("2 means") && Catch::Contains("[2, 3, 2, 2]"));
  CHECK_THROWS_WITH(T::Normalize<>(0.5, 0.5)(mpx::zeros({3}, mpx::kInt64), uint64_t{0}), Catch::Contains("floating"));
}

TEST_CASE("a program written in LibTorch's spellings compiles through <mpx/torch.h> and learns", "[api][data][train]") {
  TempDir dir;
  write_squares(dir, 1024);
  const std::string root = dir.path.string();
  torch::manual_seed(1);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  SquaresNet net;
  net.to(device);
  auto train_set = torch::data::datasets::MNIST(root)
                       .map(torch::data::transforms::Normalize<>(0.5, 0.25))
                       .map(torch::data::transforms::Stack<>());
  const size_t n = train_set.size().value();
  auto train_loader = torch::data::make_data_loader(std::move(train_set), 64);
  auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      torch::data::datasets::MNIST(root, torch::data::datasets::MNIST::Mode::kTest)
          .map(torch::data::transforms::Normalize<>(0.5, 0.25))
          .map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(500));
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.02).momentum(0.5));
  std::vector<double> losses;
  for (int epoch = 0; epoch < 6; ++epoch) losses.push_back(fit_epoch(net, device, *train_loader, opt));
  INFO("epoch losses " << losses.front() << " ... " << losses.back());
  CHECK(losses.back() < 0.5 * losses.front());
  CHECK(accuracy(net, device, *test_loader) > 0.5);
  // TORCH_CHECK names the condition and the message.
  CHECK_THROWS_WITH([&] { TORCH_CHECK(n == 3, "got ", n); }(),
                    Catch::Contains("n == 3") && Catch::Contains("got 1024"));
}
