// torchvision-style Composes run as the fused pipeline: ImageFolder, CIFAR-10 and MNIST given the
// ImageNet and CIFAR recipes produce the named pipeline's tensors; what it cannot express still
// runs step by step and says so; the step-by-step transforms agree with the fused pass.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include "data/data.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "test_jpeg_util.h"

using namespace mpx;
using namespace mpx::data;
using mpx_test::TempDir;
using mpx::testing::write_idx;
namespace T = mpx::data::transforms;

namespace {
const std::vector<double> kMean{0.485, 0.456, 0.406}, kStd{0.229, 0.224, 0.225};

// Two classes of small photograph-like JPEGs of different sizes and aspects.
void write_folder(const std::filesystem::path& root) {
  int k = 0;
  for (const char* cls : {"cat", "dog"})
    for (int i = 0; i < 4; ++i, ++k)
      REQUIRE(!mpx_test::write_photo_jpeg(root / cls / (std::to_string(i) + ".jpg"), 150 + 41 * i, 220 - 23 * i, k).empty());
}

// Every batch of one epoch, concatenated.
Tensor epoch(const Dataset& ds, int64_t workers) {
  DataLoader l(ds, DataLoaderOptions(3).workers(workers).shuffle().seed(11));
  std::vector<Tensor> parts;
  for (auto& b : l) parts.push_back(b.data);
  return cat(parts, 0);
}

bool starts(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

Tensor image(int w, int h, int c, uint32_t seed) {
  const auto px = mpx_test::photo_like(w, h, seed);
  Tensor t = empty({h, w, c}, kUInt8);
  uint8_t* d = t.data_ptr<uint8_t>();
  for (int64_t i = 0; i < static_cast<int64_t>(h) * w; ++i)
    for (int ch = 0; ch < c; ++ch) d[i * c + ch] = px[static_cast<size_t>(i * 3 + ch % 3)];
  return t;
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return max(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
}

}  // namespace

TEST_CASE("compose: torchvision's ImageNet recipes given to ImageFolder are the fused pipeline's tensors",
          "[data][transforms][compose]") {
  TempDir tmp;
  write_folder(tmp.path);
  const std::string root = tmp.path.string();
  struct Recipe {
    const char* what;
    T::Transform compose;
    ImagePipeline pipe;
  };
  const std::vector<Recipe> recipes = {
      {"train", T::Compose({T::RandomResizedCrop(64), T::RandomHorizontalFlip(), T::ToTensor(), T::Normalize(kMean, kStd)}),
       ImagePipeline::train(64)},
      {"eval", T::Compose({T::Resize(72), T::CenterCrop(64), T::ToTensor(), T::Normalize(kMean, kStd)}),
       ImagePipeline::eval(72, 64)},
      {"train, no flip", T::Compose({T::RandomResizedCrop(48, {0.3, 1.0}), T::ToTensor(), T::Normalize(kMean, kStd)}),
       ImagePipeline::train(48, {0.3, 1.0}, {3.0 / 4, 4.0 / 3}, 0.0)},
      {"train, no Normalize", T::Compose({T::RandomResizedCrop(48), T::RandomHorizontalFlip(0.3), T::ToTensor()}),
       ImagePipeline::train(48, {0.08, 1.0}, {3.0 / 4, 4.0 / 3}, 0.3).normalize({0, 0, 0}, {1, 1, 1})},
      {"train, u8 out", T::Compose({T::RandomResizedCrop(40), T::RandomHorizontalFlip(), T::PILToTensor()}),
       ImagePipeline::train(40).dtype(kUInt8)},
      {"eval, u8 out", T::Compose({T::Resize(50), T::CenterCrop(40), T::PILToTensor()}),
       ImagePipeline::eval(50, 40).dtype(kUInt8)},
  };
  for (const auto& r : recipes) {
    INFO(r.what);
    auto composed = std::make_shared<ImageFolder>(root, r.compose);
    ImageFolder named(root, ImageFolderOptions().pipeline(r.pipe));
    CHECK(starts(composed->transform_path(), "fused: Compose("));
    CHECK(starts(named.transform_path(), "fused: ImagePipeline"));
    const Tensor a = epoch(*composed, 1), b = epoch(named, 0);
    CHECK(a.dtype() == b.dtype());
    CHECK(equal(a, b));
    DataLoader l(composed, DataLoaderOptions(4));
    CHECK(starts(l.stats().transform_path, "fused:"));
    // Called on a decoded image, the Compose is the pipeline's pass on it, draw for draw.
    const Tensor img = read_image(composed->samples()[2].first);
    for (uint64_t seed : {3, 4}) CHECK(equal(r.compose(img, seed), r.pipe.apply(img, seed)));
  }
}

TEST_CASE("compose: an inexpressible Compose still runs, step by step, and is reported as composed",
          "[data][transforms][compose]") {
  TempDir tmp;
  write_folder(tmp.path);
  // A custom step (an inverted image) in the middle of the ImageNet recipe.
  const T::Transform invert(
      [](const Tensor& img, T::Rng&) {
        Tensor o = img.contiguous().clone();
        for (int64_t i = 0; i < o.numel(); ++i) o.data_ptr<uint8_t>()[i] = 255 - o.data_ptr<uint8_t>()[i];
        return o;
      },
      "Invert");
  const std::vector<T::Transform> steps{T::RandomResizedCrop(32), invert, T::RandomHorizontalFlip(), T::ToTensor(),
                                        T::Normalize(kMean, kStd)};
  const T::Compose tf(steps);
  ImageFolder ds(tmp.path.string(), tf);
  const std::string path = ds.transform_path();
  INFO(path);
  CHECK(starts(path, "composed: Compose(RandomResizedCrop, Invert, "));
  CHECK_THAT(path, Catch::Contains("Invert (step 2) is a custom transform"));
  DataLoader l(ds, DataLoaderOptions(8).workers(1));
  const Batch& b = *l.begin();
  REQUIRE(b.data.sizes() == IntList{8, 3, 32, 32});
  CHECK(starts(l.stats().transform_path, "composed:"));
  // The steps one by one, on the decoded image, with the loader's seed.
  const Tensor img = read_image(ds.samples()[5].first);
  T::Rng rng(sample_seed(l.seed(), 0, 5));
  Tensor x = img;
  for (const auto& s : steps) x = s(x, rng);
  CHECK(equal(b.data.select(0, 5), x));

  // Other reasons, each named.
  auto why = [](const T::Transform& t) { return t.how_it_runs(); };
  CHECK_THAT(why(T::Compose({T::ToTensor(), T::RandomHorizontalFlip()})),
             Catch::StartsWith("composed:") && Catch::Contains("RandomHorizontalFlip (step 2) is out of that order"));
  CHECK_THAT(why(T::Compose({T::Resize(32, T::Antialias::off), T::ToTensor()})),
             Catch::Contains("Resize (step 1) resizes with antialias off"));
  CHECK_THAT(why(T::Compose({T::ToTensor(), T::Normalize({0.5, 0.5}, {1, 1})})), Catch::Contains("has 2 means"));
  CHECK_THAT(why(T::Compose({T::RandomCrop(8)}, false)), Catch::Contains("fusing turned off"));
  CHECK_THAT(why(T::Compose({T::Compose({T::RandomCrop(8)}), T::ToTensor()})), Catch::StartsWith("fused: RandomCrop(8) + ToTensor"));
}

TEST_CASE("compose: CIFAR-10 and MNIST tensors run the CIFAR recipe fused, as the steps give it",
          "[data][transforms][compose]") {
  TempDir tmp;
  std::vector<uint8_t> rec;
  for (int r = 0; r < 6; ++r) {
    rec.push_back(static_cast<uint8_t>(r));
    for (int i = 0; i < 3072; ++i) rec.push_back(static_cast<uint8_t>((i * (r + 3) + i / 32 * 7) % 251));
  }
  mpx_test::write_bytes((tmp.path / "test_batch.bin").string(), rec);
  const std::vector<double> cm{0.4914, 0.4822, 0.4465}, cs{0.2470, 0.2435, 0.2616};
  auto recipe = [&](bool fuse) {
    return T::Compose({T::RandomCrop(32, 4), T::RandomHorizontalFlip(), T::ToTensor(), T::Normalize(cm, cs)}, fuse);
  };
  CIFAR10 fused(tmp.path.string(), false, recipe(true)), steps(tmp.path.string(), false, recipe(false));
  CHECK(starts(fused.transform_path(), "fused: RandomCrop(32, padding=4) + RandomHorizontalFlip(0.5) + ToTensor"));
  CHECK(starts(steps.transform_path(), "composed:"));
  // Crops, pads and flips copy pixels either way; only ToTensor + Normalize's rounding differs.
  CHECK(max_diff(epoch(fused, 0), epoch(steps, 0)) < 2e-6);
  CIFAR10 plain(tmp.path.string(), false, T::Compose({T::ToTensor(), T::Normalize({0.5}, {0.5})}));
  CHECK(starts(plain.transform_path(), "fused: ToTensor + Normalize([0.5], [0.5])"));
  CHECK(max_diff(plain.get(2).data, (CIFAR10(tmp.path.string(), false).get(2).data - 0.5) / 0.5) < 2e-6);

  // MNIST-format grey images: [28,28,1] through the same pass, one channel.
  std::vector<uint8_t> px(5 * 28 * 28);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 37 + i / 28 * 11) % 256);
  write_idx(tmp.path / "t10k-images-idx3-ubyte", {5, 28, 28}, px);
  write_idx(tmp.path / "t10k-labels-idx1-ubyte", {5}, {0, 1, 2, 3, 4});
  for (bool crop : {false, true}) {
    auto t = [&](bool fuse) {
      std::vector<T::Transform> s{T::ToTensor(), T::Normalize({0.2860}, {0.3530})};
      if (crop) s.insert(s.begin(), {T::RandomCrop(28, 2), T::RandomHorizontalFlip()});
      return T::Compose(s, fuse);
    };
    MNIST a(tmp.path.string(), false, t(true)), b(tmp.path.string(), false, t(false));
    CHECK(starts(a.transform_path(), "fused:"));
    const Tensor x = epoch(a, 0);
    CHECK(x.sizes() == IntList{5, 1, 28, 28});
    CHECK(max_diff(x, epoch(b, 0)) < 2e-6);
  }
}

TEST_CASE("compose: the fused pass and the steps one by one agree, resizes to half a level", "[data][transforms][compose]") {
  const Tensor rgb = image(97, 71, 3, 5), grey = image(97, 71, 1, 6);
  for (uint64_t seed = 0; seed < 6; ++seed) {
    INFO("seed " << seed);
    auto both = [&](std::vector<T::Transform> s, const Tensor& img) {
      return std::pair{T::Compose(s)(img, seed), T::Compose(s, false)(img, seed)};
    };
    // A resize rounds to u8 in the steps (as PIL), not in the fused pass: half a level after Normalize.
    auto [a, b] = both({T::RandomResizedCrop(40), T::RandomHorizontalFlip(), T::ToTensor(), T::Normalize(kMean, kStd)}, rgb);
    CHECK(max_diff(a, b) <= 0.5 / 255 / 0.224 + 1e-4);
    // The u8 image out: both round the same resampled values once.
    std::tie(a, b) = both({T::Resize(50), T::CenterCrop(60, 44)}, rgb);  // pads the height
    CHECK(a.sizes() == IntList{60, 44, 3});
    CHECK(equal(a, b));
    std::tie(a, b) = both({T::Resize(30), T::RandomHorizontalFlip(), T::PILToTensor()}, grey);
    CHECK(a.sizes() == IntList{1, 30, 40});
    CHECK(equal(a, b));
    std::tie(a, b) = both({T::CenterCrop(80, 120), T::ToTensor()}, rgb);
    CHECK(max_diff(a, b) == 0);
    // Float images and other dtypes are not the fused pass's: they run the steps.
    const Tensor f = T::ToTensor()(rgb, seed).to(kBFloat16);
    std::tie(a, b) = both({T::RandomResizedCrop(24), T::RandomHorizontalFlip()}, f);
    CHECK(a.dtype() == kBFloat16);
    CHECK(equal(a, b));
  }
  // The composable resize's cached weights serve images of every size in turn.
  for (int w : {40, 41, 40, 39}) CHECK(T::Resize(20)(image(w, 30, 3, 1), uint64_t{0}).sizes() == IntList{20, w * 20 / 30, 3});
}
