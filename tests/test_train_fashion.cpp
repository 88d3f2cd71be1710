// End-to-end smoke test: a small CNN trained on Fashion-MNIST reaches 85 % test accuracy.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/allocator.h"
#include "data/idx.h"
#include <mpx/mpx.h>

#include "models/small_cnn.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {
Tensor normalize(const Tensor& u8) { return (u8.to(kFloat32) / 255.0 - 0.2860) / 0.3530; }
}  // namespace

TEST_CASE("small CNN reaches 85% on Fashion-MNIST", "[train][slow]") {
  if (!std::filesystem::exists(data::kFashionMnistDir)) {
    WARN("Fashion-MNIST not installed (Debian package dataset-fashion-mnist); skipping");
    return;
  }
  manual_seed(0);
  auto train = data::read_mnist(data::kFashionMnistDir, true);
  auto test = data::read_mnist(data::kFashionMnistDir, false);
  const int64_t n_train = train.images.size(0), batch = 64;
  Tensor xs = normalize(train.images.narrow(0, 0, n_train)).unsqueeze(1).contiguous();
  Tensor ys = train.labels.narrow(0, 0, n_train);

  models::SmallCnn net;
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
  // Two epochs, the second at a fifth of the rate, keep a margin over the bar (one epoch
  // lands near 85.5 %).
  optim::StepLR sched(opt, 1, 0.2);
  for (int epoch = 0; epoch < 2; ++epoch, sched.step()) {
    for (int64_t s = 0; s + batch <= n_train; s += batch) {
      opt.zero_grad();
      Tensor loss = F::cross_entropy(net(xs.narrow(0, s, batch)), ys.narrow(0, s, batch));
      loss.backward();
      opt.step();
    }
  }
  net->eval();
  NoGradGuard ng;
  int64_t correct = 0;
  Tensor tx = normalize(test.images).unsqueeze(1).contiguous();
  for (int64_t s = 0; s < tx.size(0); s += 1000) {
    const int64_t n = std::min<int64_t>(1000, tx.size(0) - s);
    Tensor pred = argmax(net(tx.narrow(0, s, n)), 1);
    correct += sum(eq(pred, test.labels.narrow(0, s, n)).to(kInt64)).item<int64_t>();
  }
  const double acc = static_cast<double>(correct) / static_cast<double>(tx.size(0));
  INFO("test accuracy " << acc);
  CHECK(acc >= 0.85);
}

TEST_CASE("IDX reader rejects corrupt files with the file name", "[data]") {
  const std::string dir = std::filesystem::temp_directory_path() / "mpx_idx_test";
  std::filesystem::create_directories(dir);
  const std::string bad = dir + "/bad-idx";
  {
    FILE* f = std::fopen(bad.c_str(), "wb");
    const unsigned char head[] = {0, 0, 8, 1, 0, 0, 0, 10, 1, 2, 3};  // declares 10 bytes, holds 3
    std::fwrite(head, 1, sizeof head, f);
    std::fclose(f);
  }
  CHECK_THROWS_WITH(data::read_idx(bad), Catch::Contains(bad) && Catch::Contains("truncated"));
  {
    FILE* f = std::fopen(bad.c_str(), "wb");
    const unsigned char head[] = {1, 2, 3, 4, 5};
    std::fwrite(head, 1, sizeof head, f);
    std::fclose(f);
  }
  CHECK_THROWS_WITH(data::read_idx(bad), Catch::Contains("not an unsigned-byte IDX file"));
  {
    // Before: a 12-byte file declaring 0x0fffffff x 63 bytes made the reader allocate 16.9 GB
    // before finding the data missing. Now nothing is allocated for data the file cannot hold.
    FILE* f = std::fopen(bad.c_str(), "wb");
    const unsigned char head[] = {0, 0, 8, 2, 0x0f, 0xff, 0xff, 0xff, 0, 0, 0, 63};
    std::fwrite(head, 1, sizeof head, f);
    std::fclose(f);
  }
  cpu::reset_peak_memory_stats();
  const int64_t before = cpu::memory_stats().allocated;
  CHECK_THROWS_WITH(data::read_idx(bad), Catch::Contains(bad) && Catch::Contains("truncated") &&
                                             Catch::Contains("[268435455, 63]") && Catch::Contains("holds 0"));
  CHECK(cpu::memory_stats().peak_allocated - before < (1 << 20));
  {
    // The same header gzip'd: a few dozen bytes cannot expand to 16.9 GB.
    // (a gzip member holding one stored deflate block of the 12 header bytes, CRC-32 and size)
    const std::string gz = bad + ".gz";
    FILE* f = std::fopen(gz.c_str(), "wb");
    const unsigned char member[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 12, 0, 0xf3, 0xff,
                                    0, 0, 8, 2, 0x0f, 0xff, 0xff, 0xff, 0, 0, 0, 63, 0xfc, 0xb7, 0x24, 0x95, 12, 0, 0, 0};
    std::fwrite(member, 1, sizeof member, f);
    std::fclose(f);
    cpu::reset_peak_memory_stats();
    CHECK_THROWS_WITH(data::read_idx(gz), Catch::Contains("more than a gzip file of") && Catch::Contains("1032x"));
    CHECK(cpu::memory_stats().peak_allocated - before < (1 << 20));
  }
  {
    FILE* f = std::fopen(bad.c_str(), "wb");
    const unsigned char head[] = {0, 0, 8, 1, 0, 0, 0, 2, 7, 8, 9};  // declares 2 bytes, holds 3
    std::fwrite(head, 1, sizeof head, f);
    std::fclose(f);
  }
  CHECK_THROWS_WITH(data::read_idx(bad), Catch::Contains("past the declared size"));
  CHECK_THROWS_WITH(data::read_idx(dir + "/missing"), Catch::Contains("does not exist"));
  CHECK_THROWS_WITH(data::read_mnist(dir, true), Catch::Contains("not found"));
  std::filesystem::remove_all(dir);
}
