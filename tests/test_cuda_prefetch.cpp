// [cuda] tests of data::DevicePrefetcher (device batches equal the CPU prefetcher's bit for bit, also while the consumer's stream is busy) and of pinned loader batches.
#include <catch2/catch.hpp>

#include <set>

#include "data/data.h"
#include "ops/linalg.h"
#include "tests/test_util.h"

using namespace mpx;
using namespace mpx::data;

namespace {
// u8 images [3, 8, 8] derived from the index; target = index % 10.
class U8Images : public Dataset {
 public:
  explicit U8Images(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Example<> get(int64_t i) const override {
    std::vector<uint8_t> v(192);
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<uint8_t>((static_cast<size_t>(i) * 131 + k * 7) % 256);
    return {tensor(v, {3, 8, 8}), tensor(std::vector<int64_t>{i % 10}, {})};
  }

 private:
  int64_t n_;
};
}  // namespace

TEST_CASE("cuda prefetcher batches equal the CPU prefetcher's, in every dtype and layout", "[cuda][prefetch]") {
  if (!testing::cuda_ready()) return;
  U8Images ds(100);
  const std::vector<double> mean{0.485, 0.456, 0.406}, stdev{0.229, 0.224, 0.225};
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    for (MemoryFormat fmt : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      const auto opts = PrefetchOptions().mean(mean).std(stdev).dtype(dt).memory_format(fmt);
      DataLoader host_loader(ds, DataLoaderOptions(16).shuffle(true).seed(3));
      DataLoader pinned_loader(ds, DataLoaderOptions(16).shuffle(true).seed(3).workers(2).pin_memory(true));
      DevicePrefetcher cpu(host_loader, Device::cpu(), opts), gpu(pinned_loader, Device::cuda(0), opts);
      for (int epoch = 0; epoch < 2; ++epoch) {
        std::vector<Batch> ref;
        for (auto& b : cpu) ref.push_back(b);
        size_t k = 0;
        for (auto& b : gpu) {
          REQUIRE(k < ref.size());
          CHECK(b.data.device() == Device::cuda(0));
          CHECK(b.data.dtype() == dt);
          CHECK(b.data.is_contiguous(fmt));
          CHECK(b.indices == ref[k].indices);
          CHECK(testing::same_values(b.data.to(Device::cpu()), ref[k].data));
          CHECK(testing::same_values(b.target.to(Device::cpu()), ref[k].target));
          ++k;
        }
        CHECK(k == ref.size());
      }
    }
  }
}

TEST_CASE("cuda prefetcher copies never overwrite a batch the consumer's stream still reads", "[cuda][prefetch]") {
  if (!testing::cuda_ready()) return;
  U8Images ds(64);
  DataLoader loader(ds, DataLoaderOptions(8).pin_memory(true));
  DevicePrefetcher pf(loader, Device::cuda(0));
  const Tensor big = randn({2048, 2048}).to(Device::cuda(0));
  std::vector<Tensor> sums;
  for (auto& b : pf) {
    // Long work on the consumer's stream before the batch is read: the side stream's copy of the
    // next batch runs meanwhile and must not land in this batch's memory.
    Tensor busy = big;
    for (int i = 0; i < 8; ++i) busy = matmul(busy, big) * 1e-3;
    sums.push_back(b.data.sum() + busy.sum() * 0.0);
  }
  DataLoader ref_loader(ds, DataLoaderOptions(8));
  DevicePrefetcher ref(ref_loader, Device::cpu());
  size_t k = 0;
  for (auto& b : ref) {
    REQUIRE(k < sums.size());
    CHECK(sums[k].item<double>() == Approx(b.data.sum().item<double>()).epsilon(1e-5));
    ++k;
  }
  CHECK(k == sums.size());
}

TEST_CASE("cuda pinned batches are filled in place and their blocks reused", "[cuda][prefetch]") {
  if (!testing::cuda_ready()) return;
  // Freed pinned blocks go back to a cache by size: the next same-sized allocation reuses one.
  const void* first = nullptr;
  {
    Tensor a = empty({1000}, TensorOptions().pinned_memory());
    CHECK(cuda::is_pinned(a));
    first = a.raw_data();
  }
  CHECK(empty({1000}, TensorOptions().pinned_memory()).raw_data() == first);
  // The collate path (U8Images has no get_batch) pins while stacking; an epoch of 8 batches of
  // one size cycles through a few blocks instead of pinning new pages per batch.
  U8Images ds(64);
  DataLoader loader(ds, DataLoaderOptions(8).pin_memory(true));
  std::set<const void*> blocks;
  int64_t n = 0;
  for (auto& b : loader) {
    CHECK(b.pinned);
    CHECK(cuda::is_pinned(b.data));
    CHECK(cuda::is_pinned(b.target));
    blocks.insert(b.data.raw_data());
    ++n;
  }
  CHECK(n == 8);
  CHECK(blocks.size() <= 3);
}
