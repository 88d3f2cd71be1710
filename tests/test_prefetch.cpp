// DevicePrefetcher on the CPU: the loader's batches scaled and normalized like the transforms, dtype and layout conversion, errors handed over in order, bad options.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "data/data.h"
#include "test_util.h"

using namespace mpx;
using namespace mpx::data;
using mpx::testing::same_values;

namespace {
/// u8 images [2, 3, 4] with values derived from the index, target = index; one broken index.
class U8Images : public Dataset {
 public:
  explicit U8Images(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Example<> get(int64_t i) const override {
    if (i == fail_at_) throw Error("U8Images: sample " + std::to_string(i) + " is broken");
    std::vector<uint8_t> v(24);
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<uint8_t>((static_cast<size_t>(i) * 31 + k * 17) % 256);
    return {tensor(v, {2, 3, 4}), tensor(std::vector<int64_t>{i}, {})};
  }

 private:
  int64_t n_, fail_at_;
};
}  // namespace

TEST_CASE("DevicePrefetcher hands out the loader's batches, scaled and normalized like the transforms",
          "[data][prefetch]") {
  U8Images ds(23);
  const std::vector<double> mean{0.25, 0.5}, stdev{0.5, 0.2};
  for (int w : {0, 2}) {
    DataLoader loader(ds, DataLoaderOptions(5).workers(w));
    DevicePrefetcher pf(loader, Device::cpu(), PrefetchOptions().mean(mean).std(stdev));
    CHECK(pf.size() == 5);
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<Batch> ref;
      loader.set_epoch(epoch);
      for (auto& b : loader) ref.push_back(b);
      loader.set_epoch(epoch);
      size_t k = 0;
      for (auto& b : pf) {
        REQUIRE(k < ref.size());
        CHECK(b.indices == ref[k].indices);
        CHECK(same_values(b.target, ref[k].target));
        REQUIRE(b.data.dtype() == kFloat32);
        REQUIRE(b.data.sizes() == ref[k].data.sizes());
        const uint8_t* u = ref[k].data.data_ptr<uint8_t>();
        const float* f = b.data.data_ptr<float>();
        for (int64_t i = 0; i < b.data.numel(); ++i) {
          const size_t c = static_cast<size_t>((i / 12) % 2);
          // ToTensor then Normalize, operation by operation: one rounding each (volatile, so that
          // GCC does not fuse the scaling and the subtraction into an FMA where the CPU has one).
          volatile float scaled = static_cast<float>(u[i]) * (1.0f / 255.0f);
          const float want = (scaled - static_cast<float>(mean[c])) * static_cast<float>(1.0 / stdev[c]);
          REQUIRE(f[i] == want);
        }
        ++k;
      }
      CHECK(k == ref.size());
    }
  }
}

TEST_CASE("DevicePrefetcher converts dtype and layout, and keeps float data as is without mean/std",
          "[data][prefetch]") {
  U8Images ds(8);
  DataLoader loader(ds, DataLoaderOptions(4));
  DevicePrefetcher plain(loader, Device::cpu());
  std::vector<Tensor> f32;
  for (auto& b : plain) f32.push_back(b.data);
  REQUIRE(f32.size() == 2);
  CHECK(f32[0].data_ptr<float>()[1] == static_cast<float>((17 % 256)) * (1.0f / 255.0f));
  DevicePrefetcher half(loader, Device::cpu(), PrefetchOptions().dtype(kFloat16).memory_format(MemoryFormat::ChannelsLast));
  size_t k = 0;
  for (auto& b : half) {
    CHECK(b.data.dtype() == kFloat16);
    CHECK(b.data.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(same_values(b.data.contiguous(), f32[k].to(kFloat16)));
    ++k;
  }
  CHECK(k == 2);
}

TEST_CASE("DevicePrefetcher delivers the batches before a broken one, then its error", "[data][prefetch]") {
  for (int w : {0, 2}) {
    U8Images ds(30, /*fail_at=*/13);
    DataLoader loader(ds, DataLoaderOptions(4).workers(w));
    DevicePrefetcher pf(loader, Device::cpu());
    int seen = 0;
    try {
      for (auto& b : pf) {
        CHECK(b.indices.front() == 4 * seen);
        ++seen;
      }
      FAIL("no exception");
    } catch (const Error& e) {
      CHECK(std::string(e.what()) == "U8Images: sample 13 is broken");
    }
    CHECK(seen == 3);
    // A new epoch starts cleanly and fails at the same place.
    seen = 0;
    CHECK_THROWS_WITH([&] { for (auto& b : pf) { (void)b; ++seen; } }(), Catch::Contains("sample 13"));
    CHECK(seen == 3);
  }
}

TEST_CASE("DevicePrefetcher rejects bad options with what to change", "[data][prefetch]") {
  U8Images ds(4);
  DataLoader loader(ds, DataLoaderOptions(2));
  CHECK_THROWS_WITH(DevicePrefetcher(loader, Device::cpu(), PrefetchOptions().dtype(kInt64)),
                    Catch::Contains("dtype must be floating"));
  CHECK_THROWS_WITH(DevicePrefetcher(loader, Device::cpu(), PrefetchOptions().mean({0.5}).std({})),
                    Catch::Contains("same length"));
  CHECK_THROWS_WITH(DevicePrefetcher(loader, Device::cpu(), PrefetchOptions().mean({0.5}).std({0.0})),
                    Catch::Contains("non-zero"));
  DevicePrefetcher three(loader, Device::cpu(), PrefetchOptions().mean({0.1, 0.2, 0.3}).std({1, 1, 1}));
  CHECK_THROWS_WITH(three.begin(), Catch::Contains("3 means for data with 2 channels"));
  if (cuda_device_count() == 0) {
    CHECK_THROWS_WITH(DevicePrefetcher(loader, Device::cuda(0)), Catch::Contains("does not exist"));
  }
}

// Before: any format stb_image knows was decoded by content whatever the file's name (a 74-byte GIF
// declaring a huge canvas cost half a gigabyte before "Corrupt GIF"), and a PNG header could make the
// decoder allocate whatever it declared. Now only JPEG/PNG/BMP decode, and the header's size is
// checked against kMaxImagePixels before decoding.
