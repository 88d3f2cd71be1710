// Data pipeline tests: loader order/seeding/sharding/errors, the built-in data sets on small
// files written here, and each transform on known inputs.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <unistd.h>

#include "data/data.h"
#include "tests/paths.h"
#include "tests/skip.h"
#include "tests/test_files.h"

#if __has_include(<stb/stb_image_write.h>)
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#define MPX_TEST_HAVE_STB_WRITE 1
#endif

using namespace mpx;
using namespace mpx::data;
namespace fs = std::filesystem;
namespace T = mpx::data::transforms;
using mpx::testing::TempDir;
using mpx::testing::write_bytes;

namespace {
/// data = {index, seed-derived value}, target = index; optional jitter and a failing index.
class ProbeDataset : public Dataset {
 public:
  explicit ProbeDataset(int64_t n, int64_t fail_at = -1, bool jitter = false) : n_(n), fail_at_(fail_at), jitter_(jitter) {}
  int64_t size() const override { return n_; }
  Example<> get(int64_t i) const override { return get_seeded(i, 0); }
  Example<> get_seeded(int64_t i, uint64_t seed) const override {
    if (jitter_) std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 300));
    if (i == fail_at_) throw Error("ProbeDataset: sample " + std::to_string(i) + " is broken");
    calls++;
    return {tensor(std::vector<float>{static_cast<float>(i), static_cast<float>(seed % 100003)}, {2}),
            tensor(std::vector<int64_t>{i}, {})};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, fail_at_;
  bool jitter_;
};

std::vector<std::vector<float>> run_epoch(DataLoader& loader) {
  std::vector<std::vector<float>> out;
  for (auto& b : loader) {
    const float* p = b.data.data_ptr<float>();
    out.emplace_back(p, p + b.data.numel());
  }
  return out;
}

std::vector<int64_t> targets_of(DataLoader& loader) {
  std::vector<int64_t> out;
  for (auto& b : loader) {
    REQUIRE(b.target.dim() == 1);
    for (int64_t i = 0; i < b.target.numel(); ++i) out.push_back(b.target.data_ptr<int64_t>()[i]);
  }
  return out;
}

/// A 24-bit uncompressed BMP of `rgb` (row-major, h rows of w RGB triples).
void write_bmp(const fs::path& p, int w, int h, const std::vector<uint8_t>& rgb) {
  const int row = (w * 3 + 3) / 4 * 4;
  const uint32_t img = static_cast<uint32_t>(row * h), file = 54 + img;
  std::vector<uint8_t> b(file, 0);
  auto u32 = [&](size_t at, uint32_t v) { for (int k = 0; k < 4; ++k) b[at + k] = static_cast<uint8_t>(v >> (8 * k)); };
  auto u16 = [&](size_t at, uint16_t v) { b[at] = static_cast<uint8_t>(v); b[at + 1] = static_cast<uint8_t>(v >> 8); };
  b[0] = 'B'; b[1] = 'M';
  u32(2, file); u32(10, 54); u32(14, 40); u32(18, static_cast<uint32_t>(w)); u32(22, static_cast<uint32_t>(h));
  u16(26, 1); u16(28, 24); u32(34, img); u32(38, 2835); u32(42, 2835);
  for (int y = 0; y < h; ++y)  // bottom-up rows, BGR
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) b[54 + static_cast<size_t>((h - 1 - y) * row + x * 3 + (2 - c))] = rgb[(y * w + x) * 3 + c];
  write_bytes(p, b);
}

Tensor u8_image(int64_t h, int64_t w, int64_t c) {
  Tensor t = empty({h, w, c}, kUInt8);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return t;
}
bool equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * x.element_size()) == 0;
}
}  // namespace

// ------------------------------------------------------------------ loader

TEST_CASE("DataLoader order does not depend on the worker count", "[data][loader]") {
  ProbeDataset ds(53, -1, /*jitter=*/true);
  std::vector<std::vector<std::vector<float>>> runs;
  for (int w : {0, 1, 3}) {
    DataLoader loader(ds, DataLoaderOptions(4).shuffle(true).workers(w).seed(7).prefetch(2));
    loader.set_epoch(2);
    runs.push_back(run_epoch(loader));
  }
  REQUIRE(runs[0].size() == 14);
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
}

TEST_CASE("DataLoader order changes with epoch and seed and is a permutation", "[data][loader]") {
  ProbeDataset ds(40);
  DataLoader a(ds, DataLoaderOptions(8).shuffle(true).seed(1));
  const auto e0 = targets_of(a), e1 = targets_of(a);  // the epoch advances per iteration
  CHECK(a.epoch() == 2);
  CHECK(e0 != e1);
  CHECK(std::set<int64_t>(e0.begin(), e0.end()).size() == 40);
  a.set_epoch(0);
  CHECK(targets_of(a) == e0);
  DataLoader b(ds, DataLoaderOptions(8).shuffle(true).seed(2));
  CHECK(targets_of(b) != e0);
  DataLoader c(ds, DataLoaderOptions(8));
  auto seq = targets_of(c);
  for (int64_t i = 0; i < 40; ++i) CHECK(seq[static_cast<size_t>(i)] == i);
}

TEST_CASE("DataLoader partial last batch and drop_last", "[data][loader]") {
  ProbeDataset ds(10);
  DataLoader keep(ds, DataLoaderOptions(4).workers(2));
  std::vector<int64_t> sizes;
  for (auto& b : keep) {
    sizes.push_back(b.data.size(0));
    CHECK(b.data.sizes() == IntList{b.data.size(0), 2});
    CHECK(b.target.dtype() == kInt64);
  }
  CHECK(sizes == std::vector<int64_t>{4, 4, 2});
  CHECK(keep.size() == 3);
  DataLoader drop(ds, DataLoaderOptions(4).drop_last(true).pin_memory(true));
  CHECK(drop.size() == 2);
  CHECK(targets_of(drop) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

namespace {
// Fills batches itself (Dataset::get_batch) and records the pinned request each call received.
class BatchFiller : public ProbeDataset {
 public:
  using ProbeDataset::ProbeDataset;
  bool get_batch(const std::vector<int64_t>& idx, const std::vector<uint64_t>& seeds, Batch& out) const override {
    (void)seeds;
    asked_pinned += out.pinned ? 1 : 0;
    ++batches;
    out.data = empty({static_cast<int64_t>(idx.size()), 2}, TensorOptions(kFloat32).pinned_memory(out.pinned));
    out.target = tensor(idx, {static_cast<int64_t>(idx.size())});
    for (size_t k = 0; k < idx.size(); ++k) {
      out.data.data_ptr<float>()[2 * k] = static_cast<float>(idx[k]);
      out.data.data_ptr<float>()[2 * k + 1] = 0;
    }
    return true;
  }
  mutable std::atomic<int64_t> asked_pinned{0}, batches{0};
};
}  // namespace

TEST_CASE("pin_memory asks get_batch for pinned batches only where a GPU can use them", "[data][loader]") {
  // Without a GPU pin_memory is a no-op (as in PyTorch), so no dataset is asked to pin.
  BatchFiller ds(10);
  DataLoader plain(ds, DataLoaderOptions(4).workers(1));
  CHECK(targets_of(plain) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(ds.asked_pinned == 0);
  DataLoader pin(ds, DataLoaderOptions(4).pin_memory(true));
  for (auto& b : pin) CHECK(b.pinned == cuda_is_available());
  CHECK(ds.asked_pinned == (cuda_is_available() ? 3 : 0));
  CHECK(ds.batches == 6);
  // collate honours the request too, and says what it did.
  std::vector<Example<>> ex{ds.get(0), ds.get(1)};
  CHECK_FALSE(collate(ex).pinned);
}

TEST_CASE("pinned_memory is for CPU tensors and needs a CUDA device", "[data][loader]") {
  CHECK_THROWS_WITH(empty({2}, TensorOptions(Device::cuda()).pinned_memory()),
                    Catch::Contains("pinned_memory is for CPU tensors"));
  if (!cuda_is_available()) {
    CHECK_THROWS_WITH(empty({2}, TensorOptions().pinned_memory()), Catch::Contains("pinned memory"));
    CHECK_THROWS_WITH(collate({Example<>{ones({2}), ones({})}}, true), Catch::Contains("pinned memory"));
  }
}

TEST_CASE("Distributed shards are disjoint, equal and covering", "[data][loader][distributed]") {
  for (int64_t n : {12, 10}) {
    const int64_t world = 3;
    std::vector<int64_t> all;
    for (int64_t r = 0; r < world; ++r) {
      ProbeDataset ds(n);
      DataLoader l(ds, DataLoaderOptions(2).shuffle(true).seed(5).rank(r).world_size(world).workers(r));
      auto t = targets_of(l);
      CHECK(static_cast<int64_t>(t.size()) == (n + world - 1) / world);
      all.insert(all.end(), t.begin(), t.end());
    }
    std::set<int64_t> uniq(all.begin(), all.end());
    CHECK(static_cast<int64_t>(uniq.size()) == n);  // covering
    CHECK(static_cast<int64_t>(all.size()) == (n + world - 1) / world * world);
    if (n % world == 0) CHECK(all.size() == uniq.size());  // disjoint
  }
  DistributedSampler s(10, 1, 3, /*shuffle=*/false);
  CHECK(s.indices(0) == std::vector<int64_t>{1, 4, 7, 0});  // torch pads with the head
  DistributedSampler d(10, 2, 3, false, 0, /*drop_last=*/true);
  CHECK(d.indices(0) == std::vector<int64_t>{2, 5, 8});
  CHECK_THROWS_WITH(DistributedSampler(10, 3, 3), Catch::Contains("rank 3"));
}

TEST_CASE("DataLoader rethrows a worker's error on the iterating thread", "[data][loader]") {
  for (int w : {0, 2}) {
    ProbeDataset ds(30, /*fail_at=*/13);
    DataLoader l(ds, DataLoaderOptions(4).workers(w));
    int seen = 0;
    try {
      for (auto& b : l) {
        (void)b;
        ++seen;
      }
      FAIL("no exception");
    } catch (const Error& e) {
      CHECK(std::string(e.what()) == "ProbeDataset: sample 13 is broken");
    }
    CHECK(seen == 3);  // batches 0..2 arrive in order before the broken batch 3
    // The loader stays usable: a new epoch starts cleanly (and fails again at the same place).
    CHECK_THROWS_WITH(targets_of(l), Catch::Contains("sample 13"));
  }
}

TEST_CASE("DataLoader stops and joins its workers when left mid-epoch", "[data][loader]") {
  ProbeDataset ds(400, -1, true);
  {
    DataLoader l(ds, DataLoaderOptions(2).workers(3).prefetch(2));
    int k = 0;
    for (auto& b : l) {
      (void)b;
      if (++k == 3) break;
    }
    // Restarting mid-epoch abandons the old epoch first.
    auto it = l.begin();
    CHECK(it != l.end());
  }  // destruction joins
  CHECK(ds.calls.load() < 400);  // the bounded queue kept workers from loading everything
  auto l2 = std::make_unique<DataLoader>(std::make_shared<ProbeDataset>(50, -1, true), DataLoaderOptions(5).workers(2));
  (void)l2->begin();
  l2.reset();
}

// ------------------------------------------------------------------ data sets

TEST_CASE("FashionMNIST loads the Debian package's files", "[data][mnist]") {
  if (!fs::exists(fs::path(kFashionMnistDir) / "train-images-idx3-ubyte.gz")) {
    mpx::testing::skip_test(std::string(kFashionMnistDir) + " is missing (install dataset-fashion-mnist)");
    return;
  }
  FashionMNIST train(kFashionMnistDir, true), test(kFashionMnistDir, false);
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.classes().size() == 10);
  auto ex = train.get(0);
  CHECK(ex.data.sizes() == IntList{1, 28, 28});
  CHECK(ex.data.dtype() == kFloat32);
  CHECK(ex.target.dtype() == kInt64);
  CHECK(ex.data.max().item<float>() <= 1.0f);
  CHECK(ex.data.min().item<float>() >= 0.0f);
  CHECK(ex.target.item<int64_t>() == 9);  // the first training image is an ankle boot
  DataLoader l(test, DataLoaderOptions(256).workers(2));
  auto it = l.begin();
  CHECK(it->data.sizes() == IntList{256, 1, 28, 28});
  CHECK(it->target.sizes() == IntList{256});
  FashionMNIST aug(kFashionMnistDir, false, T::Compose({T::RandomCrop(28, 2), T::ToTensor(), T::Normalize({0.5}, {0.5})}));
  CHECK(aug.get(3).data.sizes() == IntList{1, 28, 28});
}

TEST_CASE("CIFAR10 reads binary batches and rejects truncated files", "[data][cifar]") {
  TempDir tmp;
  auto record = [](uint8_t label, uint8_t base) {
    std::vector<uint8_t> r(3073);
    r[0] = label;
    for (int i = 0; i < 3072; ++i) r[1 + i] = static_cast<uint8_t>(base + i);
    return r;
  };
  for (int k = 1; k <= 5; ++k) {
    std::vector<uint8_t> f;
    for (int r = 0; r < 2; ++r) {
      auto rec = record(static_cast<uint8_t>((k + r) % 10), static_cast<uint8_t>(10 * k + r));
      f.insert(f.end(), rec.begin(), rec.end());
    }
    write_bytes(tmp.path / ("data_batch_" + std::to_string(k) + ".bin"), f);
  }
  auto t = record(3, 0);
  write_bytes(tmp.path / "test_batch.bin", t);
  CIFAR10 train(tmp.path.string(), true), test(tmp.path.string(), false);
  CHECK(train.size() == 10);
  CHECK(test.size() == 1);
  auto ex = train.get(3);  // file 2, record 1: label 3, first byte 21
  CHECK(ex.target.item<int64_t>() == 3);
  CHECK(ex.data.sizes() == IntList{3, 32, 32});
  CHECK(ex.data.data_ptr<float>()[0] == Approx(21 / 255.0));
  CHECK(ex.data.data_ptr<float>()[1024] == Approx(((21 + 1024) % 256) / 255.0));  // green plane
  CIFAR10 hwc(tmp.path.string(), false, T::Compose({}));
  auto raw = hwc.get(0).data;  // the transform sees u8 [32,32,3]
  CHECK(raw.sizes() == IntList{32, 32, 3});
  CHECK(raw.data_ptr<uint8_t>()[1] == static_cast<uint8_t>(1024 % 256));
  t.resize(3073 + 100);
  write_bytes(tmp.path / "test_batch.bin", t);
  CHECK_THROWS_WITH(CIFAR10(tmp.path.string(), false),
                    Catch::Contains("test_batch.bin") && Catch::Contains("3073-byte records"));
  CHECK_THROWS_WITH(CIFAR10((tmp.path / "nowhere").string(), true), Catch::Contains("data_batch_1.bin"));
}

TEST_CASE("MNIST and CIFAR10 fill a batch straight from their images, as get_seeded and collate would",
          "[data][mnist][cifar]") {
  TempDir tmp;
  std::vector<uint8_t> px(7 * 6 * 5), labels;
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 37 % 256);
  for (uint8_t i = 0; i < 7; ++i) labels.push_back(static_cast<uint8_t>(9 - i));
  mpx::testing::write_idx(tmp.path / "train-images-idx3-ubyte", {7, 6, 5}, px);
  mpx::testing::write_idx(tmp.path / "train-labels-idx1-ubyte", {7}, labels);
  std::vector<uint8_t> records;
  for (int r = 0; r < 6; ++r) {
    records.push_back(static_cast<uint8_t>(r));
    for (int i = 0; i < 3072; ++i) records.push_back(static_cast<uint8_t>(i * 13 + r * 7));
  }
  write_bytes(tmp.path / "test_batch.bin", records);
  const std::vector<int64_t> idx{4, 0, 4, 2};
  const std::vector<uint64_t> seeds{11, 12, 13, 14};
  auto same = [&](const Dataset& ds, bool direct) {
    Batch b;
    REQUIRE(ds.get_batch(idx, seeds, b) == direct);
    if (!direct) return;
    std::vector<Example<>> ex;
    for (size_t k = 0; k < idx.size(); ++k) ex.push_back(ds.get_seeded(idx[k], seeds[k]));
    const Batch want = collate(ex);
    CHECK(b.data.dtype() == want.data.dtype());
    CHECK(equal(b.data, want.data));
    CHECK(equal(b.target, want.target));
  };
  const std::string root = tmp.path.string();
  same(MNIST(root), true);
  same(MNIST(root, true, T::Compose({T::RandomCrop(5, 2), T::RandomHorizontalFlip(), T::ToTensor(),
                                     T::Normalize({0.3}, {0.2})})),
       true);
  same(MNIST(root, true, T::Compose({T::RandomCrop(5, 2), T::ToTensor()}, /*fuse=*/false)), false);
  same(CIFAR10(root, false), true);
  same(CIFAR10(root, false, T::Compose({T::RandomCrop(32, 4), T::RandomHorizontalFlip(), T::ToTensor(),
                                        T::Normalize({0.5, 0.4, 0.3}, {0.2, 0.25, 0.3})})),
       true);
  same(CIFAR10(root, false, T::Compose({T::Resize(20), T::PILToTensor()})), true);
  // A bad index is the data set's error, as from get.
  Batch b;
  CHECK_THROWS_WITH(MNIST(root).get_batch({7}, {0}, b), Catch::Contains("MNIST") && Catch::Contains("7"));
}

TEST_CASE("ImageFolder sorts classes, decodes images and reports corrupt files", "[data][imagefolder]") {
  TempDir tmp;
  fs::create_directories(tmp.path / "zebra");
  fs::create_directories(tmp.path / "Apple");  // upper case sorts first, as in Python
  fs::create_directories(tmp.path / "mango" / "nested");
  std::vector<uint8_t> px(4 * 3 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7);
  write_bmp(tmp.path / "zebra" / "b.bmp", 4, 3, px);
  write_bmp(tmp.path / "zebra" / "a.BMP", 4, 3, px);
  write_bmp(tmp.path / "Apple" / "x.bmp", 4, 3, px);
  write_bmp(tmp.path / "mango" / "nested" / "m.bmp", 4, 3, px);
  write_bytes(tmp.path / "mango" / "notes.txt", {1, 2, 3});
#ifdef MPX_TEST_HAVE_STB_WRITE
  stbi_write_png((tmp.path / "mango" / "p.png").string().c_str(), 4, 3, 3, px.data(), 4 * 3);
#endif
  ImageFolder ds(tmp.path.string());
  CHECK(ds.classes() == std::vector<std::string>{"Apple", "mango", "zebra"});
#ifdef MPX_TEST_HAVE_STB_WRITE
  REQUIRE(ds.size() == 5);
#else
  REQUIRE(ds.size() == 4);
#endif
  // torchvision's walk order: a folder's own files before its sub-folders'.
  CHECK(fs::path(ds.samples()[1].first).filename() == (ds.size() == 5 ? "p.png" : "m.bmp"));
  CHECK(fs::path(ds.samples()[ds.size() - 2].first).filename() == "a.BMP");  // upper case first
  CHECK(ds.samples().back().second == 2);
  for (int64_t i = 0; i < ds.size(); ++i) {
    auto ex = ds.get(i);
    REQUIRE(ex.data.sizes() == IntList{3, 3, 4});
    CHECK(ex.data.data_ptr<float>()[0] == Approx(px[0] / 255.0));
    CHECK(ex.data.data_ptr<float>()[12 + 5] == Approx(px[5 * 3 + 1] / 255.0));  // green, pixel (1,1)
  }
  ImageFolder resized(tmp.path.string(), T::Compose({T::Resize(6, 8), T::ToTensor()}));
  DataLoader l(resized, DataLoaderOptions(2).workers(2));
  CHECK(l.begin()->data.sizes() == IntList{2, 3, 6, 8});

  write_bytes(tmp.path / "mango" / "broken.png", {0x89, 'P', 'N', 'G', 1, 2, 3, 4, 5});
  ImageFolder strict(tmp.path.string());
  int64_t broken = -1;
  for (int64_t i = 0; i < strict.size(); ++i)
    if (fs::path(strict.samples()[static_cast<size_t>(i)].first).filename() == "broken.png") broken = i;
  REQUIRE(broken >= 0);
  CHECK_THROWS_WITH(strict.get(broken), Catch::Contains("broken.png"));
  DataLoader sl(strict, DataLoaderOptions(1).workers(2));
  CHECK_THROWS_WITH(targets_of(sl), Catch::Contains("broken.png"));
  ImageFolder lenient(tmp.path.string(), ImageFolderOptions().skip_corrupt(true));
  CHECK(lenient.size() == strict.size() - 1);

  fs::create_directories(tmp.path / "empty");
  CHECK_THROWS_WITH(ImageFolder(tmp.path.string()), Catch::Contains("empty"));
}

TEST_CASE("Synthetic generates deterministic samples per index", "[data][synthetic]") {
  Synthetic s({3, 8, 8}, 5, 20, 42);
  CHECK(s.size() == 20);
  auto a = s.get(7), b = s.get(7), c = s.get(8);
  CHECK(equal(a.data, b.data));
  CHECK(!equal(a.data, c.data));
  CHECK(a.data.sizes() == IntList{3, 8, 8});
  CHECK(a.target.item<int64_t>() >= 0);
  CHECK(a.target.item<int64_t>() < 5);
  CHECK_THROWS_WITH(s.get(20), Catch::Contains("out of range"));
  DataLoader l(s, DataLoaderOptions(8).workers(1));
  CHECK(l.begin()->data.sizes() == IntList{8, 3, 8, 8});
}

// ------------------------------------------------------------------ transforms

TEST_CASE("ToTensor and Normalize on known values", "[data][transforms]") {
  Tensor img = tensor(std::vector<uint8_t>{0, 255, 51, 102, 204, 0, 255, 255, 0, 0, 0, 0}, {2, 2, 3});
  Tensor x = T::ToTensor()(img, uint64_t{0});
  REQUIRE(x.sizes() == IntList{3, 2, 2});
  const float* p = x.data_ptr<float>();
  CHECK(p[0] == Approx(0.0));        // c0 (0,0)
  CHECK(p[1] == Approx(102 / 255.0)); // c0 (0,1)
  CHECK(p[4] == Approx(1.0));        // c1 (0,0)
  CHECK(p[9] == Approx(0.0));        // c2 (0,1)
  Tensor n = T::Normalize({0.5, 0.5, 0.0}, {0.5, 0.25, 1.0})(x, uint64_t{0});
  CHECK(n.data_ptr<float>()[0] == Approx(-1.0));
  CHECK(n.data_ptr<float>()[4] == Approx(2.0));
  CHECK(n.data_ptr<float>()[8] == Approx(0.2));
  CHECK_THROWS_WITH(T::Normalize({0.5, 0.5}, {1, 1})(x, uint64_t{0}), Catch::Contains("3 channels"));
  CHECK_THROWS_WITH(T::Normalize({0.5}, {1})(img, uint64_t{0}), Catch::Contains("ToTensor"));
}

TEST_CASE("Resize and CenterCrop on known images", "[data][transforms]") {
  Tensor x = arange(16.0, TensorOptions(kFloat32)).reshape({1, 4, 4});
  Tensor r = T::Resize(2, 2, T::Antialias::off)(x, uint64_t{0});  // 2x down, half-pixel: means of 2x2 blocks
  REQUIRE(r.sizes() == IntList{1, 2, 2});
  CHECK(r.data_ptr<float>()[0] == Approx(2.5));
  CHECK(r.data_ptr<float>()[3] == Approx(12.5));
  // Antialiased (the default): torch.nn.functional.interpolate(x, (2, 2), mode="bilinear",
  // antialias=True) gives [[3.5714, 5.1429], [9.8571, 11.4286]] (PyTorch 1.13).
  Tensor aa = T::Resize(2, 2)(x, uint64_t{0});
  const float torch_aa[4] = {3.5714f, 5.1429f, 9.8571f, 11.4286f};
  for (int i = 0; i < 4; ++i) CHECK(aa.data_ptr<float>()[i] == Approx(torch_aa[i]).margin(1e-4));
  // Growing, both modes are plain bilinear.
  for (auto mode : {T::Antialias::on, T::Antialias::off}) {
    Tensor up = T::Resize(8, 8, mode)(x, uint64_t{0});
    CHECK(up.data_ptr<float>()[0] == Approx(0.0));     // clamped border
    CHECK(up.data_ptr<float>()[1] == Approx(0.25));    // src 0.25
    CHECK(up.data_ptr<float>()[2] == Approx(0.75));
  }
  CHECK(T::Resize(2)(zeros({3, 4, 8}), uint64_t{0}).sizes() == IntList{3, 2, 4});
  CHECK(T::Resize(3)(u8_image(10, 5, 3), uint64_t{0}).sizes() == IntList{6, 3, 3});
  Tensor y = arange(25.0, TensorOptions(kFloat32)).reshape({1, 5, 5});
  Tensor c = T::CenterCrop(3)(y, uint64_t{0});
  CHECK(c.data_ptr<float>()[0] == 6.0f);
  CHECK(c.data_ptr<float>()[8] == 18.0f);
  Tensor c2 = T::CenterCrop(2)(y, uint64_t{0});  // (5-2)/2 = 1.5 rounds to 2, as torchvision
  CHECK(c2.data_ptr<float>()[0] == 12.0f);
  Tensor pad = T::CenterCrop(7)(y, uint64_t{0});
  CHECK(pad.data_ptr<float>()[0] == 0.0f);
  CHECK(pad.data_ptr<float>()[8] == 0.0f);  // (1,1) is the image's (0,0)
  CHECK(pad.data_ptr<float>()[9] == 1.0f);
  Tensor u = T::CenterCrop(2, 3)(u8_image(4, 5, 3), uint64_t{0});
  CHECK(u.sizes() == IntList{2, 3, 3});
  CHECK(u.data_ptr<uint8_t>()[0] == u8_image(4, 5, 3).data_ptr<uint8_t>()[(1 * 5 + 1) * 3]);
}

TEST_CASE("Random transforms are windows of the input and reproduce per seed", "[data][transforms]") {
  Tensor img = u8_image(9, 11, 3);
  const uint8_t* src = img.data_ptr<uint8_t>();
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    Tensor a = T::RandomCrop(5, 2)(img, seed);
    REQUIRE(a.sizes() == IntList{5, 5, 3});
    CHECK(equal(a, T::RandomCrop(5, 2)(img, seed)));
    // Find the window offset: the crop equals the zero-padded image at some (top, left).
    bool found = false;
    for (int64_t t = -2; t <= 6 && !found; ++t)
      for (int64_t l = -2; l <= 8 && !found; ++l) {
        bool ok = true;
        for (int64_t y = 0; y < 5 && ok; ++y)
          for (int64_t x = 0; x < 5 && ok; ++x)
            for (int64_t c = 0; c < 3 && ok; ++c) {
              const int64_t sy = t + y, sx = l + x;
              const uint8_t want = (sy < 0 || sy >= 9 || sx < 0 || sx >= 11) ? 0 : src[(sy * 11 + sx) * 3 + c];
              ok = a.data_ptr<uint8_t>()[(y * 5 + x) * 3 + c] == want;
            }
        if (ok) {
          found = true;
          offsets.insert({t, l});
        }
      }
    CHECK(found);
  }
  CHECK(offsets.size() > 10);

  Tensor f = T::RandomHorizontalFlip(1.0)(img, uint64_t{3});
  CHECK(f.data_ptr<uint8_t>()[0] == src[10 * 3]);
  CHECK(equal(T::RandomHorizontalFlip(0.0)(img, uint64_t{3}), img));
  int flips = 0;
  for (uint64_t s = 0; s < 200; ++s) flips += !equal(T::RandomHorizontalFlip(0.5)(img, s), img);
  CHECK(flips > 70);
  CHECK(flips < 130);

  Tensor x = rand({3, 20, 30});
  auto rrc = T::RandomResizedCrop(8, 6);
  Tensor r1 = rrc(x, uint64_t{11}), r2 = rrc(x, uint64_t{11}), r3 = rrc(x, uint64_t{12});
  CHECK(r1.sizes() == IntList{3, 8, 6});
  CHECK(equal(r1, r2));
  CHECK(!equal(r1, r3));
  T::Rng rng(5);
  for (int k = 0; k < 50; ++k) {
    auto p = T::random_resized_crop_params(20, 30, {0.08, 1.0}, {0.75, 4.0 / 3.0}, rng);
    CHECK(p[0] >= 0);
    CHECK(p[1] >= 0);
    CHECK(p[0] + p[2] <= 20);
    CHECK(p[1] + p[3] <= 30);
  }
  // An impossible ratio exhausts the 10 attempts: torchvision's centred fallback.
  T::Rng r(1);
  CHECK(T::random_resized_crop_params(20, 20, {1.0, 1.0}, {10.0, 10.0}, r) == std::vector<int64_t>{9, 0, 2, 20});

  auto pipeline = T::Compose({T::RandomResizedCrop(16), T::RandomHorizontalFlip(), T::ToTensor(),
                              T::Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})});
  Tensor big = u8_image(40, 50, 3);
  Tensor o = pipeline(big, uint64_t{9});
  CHECK(o.sizes() == IntList{3, 16, 16});
  CHECK(o.dtype() == kFloat32);
  CHECK(equal(o, pipeline(big, uint64_t{9})));
}

TEST_CASE("Loader transforms reproduce across worker counts", "[data][transforms][loader]") {
  TempDir tmp;
  for (int k = 0; k < 2; ++k) {
    std::vector<uint8_t> f;
    for (int r = 0; r < 6; ++r) {
      std::vector<uint8_t> rec(3073);
      rec[0] = static_cast<uint8_t>(r);
      for (int i = 0; i < 3072; ++i) rec[1 + i] = static_cast<uint8_t>(i * (r + 1) + k);
      f.insert(f.end(), rec.begin(), rec.end());
    }
    write_bytes(tmp.path / "test_batch.bin", f);
  }
  CIFAR10 ds(tmp.path.string(), false, T::Compose({T::RandomCrop(32, 4), T::RandomHorizontalFlip(), T::ToTensor()}));
  auto grab = [&](int w, uint64_t seed) {
    DataLoader l(ds, DataLoaderOptions(4).shuffle(true).workers(w).seed(seed));
    return run_epoch(l);
  };
  const auto a = grab(0, 3);
  CHECK(a == grab(3, 3));
  CHECK(a != grab(0, 4));
}

// ------------------------------------------------------------------ device prefetcher

TEST_CASE("images: other formats are refused by content, huge declared sizes before decoding", "[data]") {
  TempDir tmp;
  auto write = [&](const std::string& name, const std::vector<unsigned char>& b) {
    const fs::path p = tmp.path / name;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p.string();
  };
  // GIF89a, logical screen 65535 x 65535, then nothing.
  const std::string gif = write("big.png", {'G', 'I', 'F', '8', '9', 'a', 0xff, 0xff, 0xff, 0xff, 0, 0, 0});
  CHECK_THROWS_WITH(read_image(gif), Catch::Contains(gif) && Catch::Contains("not a JPEG/PNG/BMP image"));
  CHECK_THAT(image_header_problem(gif), Catch::Contains("not a readable image"));
  // A PNG signature and an IHDR chunk declaring 15000 x 15000 RGB (225 M pixels), then nothing.
  const std::string png = write("huge.png", {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                                             0, 0, 0x3a, 0x98, 0, 0, 0x3a, 0x98, 8, 2, 0, 0, 0, 0, 0, 0, 0});
  CHECK_THROWS_WITH(read_image(png), Catch::Contains("15000x15000") && Catch::Contains(std::to_string(kMaxImagePixels)));
  CHECK_THAT(image_header_problem(png), Catch::Contains("decompression-bomb"));
}

// The inputs fuzz_image found problems with (stb_image 2.27's JPEG Huffman-table overflows, a PNG
// chunk making it allocate 2 GB, a JPEG declaring a huge image): each is a clean mpx::Error or a
// bounded decode, never a crash (the fuzz targets run them under ASan and UBSan).
TEST_CASE("images: the fuzzers' findings decode cleanly or fail with a clear error", "[data]") {
  const fs::path dir = fs::path(mpx::testing::test_data_dir()) / ".." / "fuzz" / "corpus" / "image";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("regress-", 0) != 0) continue;
    INFO(e.path().string());
    ++n;
    for (int channels : {0, 1, 2, 3, 4}) {
      try {
        const Tensor t = read_image(e.path().string(), channels);
        CHECK(t.dim() == 3);
        CHECK(t.size(0) * t.size(1) <= max_image_pixels());
      } catch (const mpx::Error& err) {
        CHECK_THAT(std::string(err.what()), Catch::Contains(e.path().string()));
      }
    }
    (void)image_header_problem(e.path().string());
  }
  CHECK(n >= 4);
}

TEST_CASE("images: JPEG decodes to the requested channels (libjpeg-turbo, else stb_image)", "[data]") {
  TempDir tmp;
  std::vector<unsigned char> px(16 * 8 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<unsigned char>(i % 3 == 0 ? 200 : i % 3 == 1 ? 100 : 30);
  const std::string p = (tmp.path / "flat.jpg").string();
  REQUIRE(stbi_write_jpg(p.c_str(), 16, 8, 3, px.data(), 95));
  for (int channels : {0, 1, 2, 3, 4}) {
    INFO(channels);
    const Tensor t = read_image(p, channels);
    CHECK(t.sizes() == IntList{8, 16, channels ? channels : 3});
  }
  // A flat colour survives JPEG within a few levels (the IDCTs of the two decoders differ slightly).
  const Tensor rgb = read_image(p, 3).to(kFloat32);
  CHECK(std::abs(rgb.select(2, 0).mean().item<double>() - 200) < 4);
  CHECK(std::abs(rgb.select(2, 2).mean().item<double>() - 30) < 4);
  const Tensor ga = read_image(p, 2);
  CHECK(ga.select(2, 1).to(kFloat32).mean().item<double>() == 255.0);
  // Truncated: a clear error naming the file.
  std::vector<unsigned char> bytes;
  {
    std::ifstream in(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes.resize(bytes.size() / 2);
  const std::string cut = (tmp.path / "cut.jpg").string();
  std::ofstream(cut, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  CHECK_THROWS_WITH(read_image(cut), Catch::Contains(cut));
}
