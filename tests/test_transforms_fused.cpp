// The fused ImageNet pipeline: torchvision's crop distribution (statistically), antialiased
// bilinear values against an f64 reference and hand-worked values, output types and layouts,
// reduced-size decoding against full-size, and the loader's ImageFolder path with its stats.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "data/data.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "test_jpeg_util.h"

using namespace mpx;
using namespace mpx::data;
using mpx_test::TempDir;
namespace T = mpx::data::transforms;

namespace {
// torchvision.transforms.RandomResizedCrop.get_params, transcribed, with another generator.
std::array<int64_t, 4> torchvision_crop(int64_t height, int64_t width, std::mt19937_64& g) {
  std::uniform_real_distribution<double> u(0, 1);
  const double area = static_cast<double>(height * width);
  for (int k = 0; k < 10; ++k) {
    const double target = area * (0.08 + (1 - 0.08) * u(g));
    const double aspect = std::exp(std::log(3.0 / 4) + (std::log(4.0 / 3) - std::log(3.0 / 4)) * u(g));
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * aspect)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const auto i = static_cast<int64_t>(u(g) * static_cast<double>(height - h + 1));
      const auto j = static_cast<int64_t>(u(g) * static_cast<double>(width - w + 1));
      return {i, j, h, w};
    }
  }
  const double r = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (r < 3.0 / 4) h = static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / (3.0 / 4)));
  else if (r > 4.0 / 3) w = static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * (4.0 / 3)));
  return {(height - h) / 2, (width - w) / 2, h, w};
}

// Two-sample Kolmogorov-Smirnov statistic.
double ks(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  size_t i = 0, j = 0;
  double d = 0;
  while (i < a.size() && j < b.size()) {
    const double v = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= v) ++i;
    while (j < b.size() && b[j] <= v) ++j;
    d = std::max(d, std::abs(static_cast<double>(i) / a.size() - static_cast<double>(j) / b.size()));
  }
  return d;
}

// torchvision's _upsample_bilinear2d_aa in f64, transcribed: output (oh, ow) of the (h, w) crop
// at (top, left) of u8 HWC `img` (width iw), channel c.
std::vector<double> reference_aa(const uint8_t* img, int64_t iw, int64_t top, int64_t left, int64_t h, int64_t w,
                                 int64_t oh, int64_t ow) {
  auto axis = [](int64_t in, int64_t out) {
    std::vector<std::vector<std::pair<int64_t, double>>> taps(static_cast<size_t>(out));
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    const double support = scale >= 1 ? scale : 1.0, inv = scale >= 1 ? 1 / scale : 1.0;
    for (int64_t i = 0; i < out; ++i) {
      const double center = scale * (static_cast<double>(i) + 0.5);
      const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
      const int64_t xsize = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in) - xmin;
      double total = 0;
      for (int64_t j = 0; j < xsize; ++j) {
        const double x = std::abs((static_cast<double>(j + xmin) - center + 0.5) * inv);
        const double v = x < 1 ? 1 - x : 0;
        taps[static_cast<size_t>(i)].emplace_back(xmin + j, v);
        total += v;
      }
      for (auto& t : taps[static_cast<size_t>(i)]) t.second /= total;
    }
    return taps;
  };
  const auto ty = axis(h, oh), tx = axis(w, ow);
  std::vector<double> out(static_cast<size_t>(oh * ow * 3));
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x)
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        for (auto [yy, wy] : ty[static_cast<size_t>(y)])
          for (auto [xx, wx] : tx[static_cast<size_t>(x)])
            s += wy * wx * img[((top + yy) * iw + left + xx) * 3 + c];
        out[static_cast<size_t>((y * ow + x) * 3 + c)] = s;
      }
  return out;
}

Tensor image_tensor(int w, int h, uint32_t seed) {
  const auto px = mpx_test::photo_like(w, h, seed);
  Tensor t = empty({h, w, 3}, kUInt8);
  std::copy(px.begin(), px.end(), t.data_ptr<uint8_t>());
  return t;
}

// A [C,H,W] f32 output back in 0..255 units [H,W,C].
std::vector<double> unnormalize(const Tensor& chw) {
  const double mean[3] = {0.485, 0.456, 0.406}, sd[3] = {0.229, 0.224, 0.225};
  const int64_t h = chw.size(1), w = chw.size(2);
  const float* p = chw.data_ptr<float>();
  std::vector<double> out(static_cast<size_t>(h * w * 3));
  for (int c = 0; c < 3; ++c)
    for (int64_t i = 0; i < h * w; ++i) out[static_cast<size_t>(i * 3 + c)] = (p[c * h * w + i] * sd[c] + mean[c]) * 255.0;
  return out;
}
}  // namespace

TEST_CASE("fused: RandomResizedCrop boxes follow torchvision's distribution", "[data][transforms][fused]") {
  const int n = 20000;
  // Critical two-sample KS distance at alpha = 0.001: 1.95 * sqrt(2 / n).
  const double crit = 1.95 * std::sqrt(2.0 / n);
  for (auto [h, w] : {std::pair<int64_t, int64_t>{375, 500}, {1000, 120}, {224, 224}}) {
    INFO(h << "x" << w);
    std::mt19937_64 g(12345);
    const auto pipe = ImagePipeline::train(224);
    std::vector<double> area[2], logr[2], top[2], left[2];
    int flips = 0;
    for (int k = 0; k < n; ++k) {
      const auto p = pipe.plan(h, w, sample_seed(7, 0, k));
      const auto q = torchvision_crop(h, w, g);
      const int64_t a[2][4] = {{p.top, p.left, p.height, p.width}, {q[0], q[1], q[2], q[3]}};
      for (int s = 0; s < 2; ++s) {
        REQUIRE(a[s][0] >= 0);
        REQUIRE(a[s][1] >= 0);
        REQUIRE(a[s][0] + a[s][2] <= h);
        REQUIRE(a[s][1] + a[s][3] <= w);
        area[s].push_back(static_cast<double>(a[s][2] * a[s][3]) / static_cast<double>(h * w));
        logr[s].push_back(std::log(static_cast<double>(a[s][3]) / static_cast<double>(a[s][2])));
        top[s].push_back(static_cast<double>(a[s][0]) / static_cast<double>(h - a[s][2] + 1));
        left[s].push_back(static_cast<double>(a[s][1]) / static_cast<double>(w - a[s][3] + 1));
      }
      flips += p.flip;
      // The plan draws exactly what the composed transforms draw from the sample's seed.
      T::Rng rng(sample_seed(7, 0, k));
      CHECK(T::random_resized_crop_params(h, w, {0.08, 1.0}, {3.0 / 4, 4.0 / 3}, rng) ==
            std::vector<int64_t>{p.top, p.left, p.height, p.width});
    }
    CHECK(ks(area[0], area[1]) < crit);
    CHECK(ks(logr[0], logr[1]) < crit);
    CHECK(ks(top[0], top[1]) < crit);
    CHECK(ks(left[0], left[1]) < crit);
    CHECK(std::abs(flips / static_cast<double>(n) - 0.5) < 4 * 0.5 / std::sqrt(n));  // 4 sigma
  }
}

TEST_CASE("fused: antialiased bilinear weights give torchvision's values", "[data][transforms][fused]") {
  // Halving [0, 70, 140, 210]: the triangle widened to 2 pixels gives weights 3/7, 3/7, 1/7 at
  // the left edge (PIL and torchvision antialias=True agree): 50 and 160.
  const AxisWeights a = aa_bilinear_weights(0, 4, 2, 0, 2, 0, 4);
  const double v[4] = {0, 70, 140, 210};
  for (int i = 0; i < 2; ++i) {
    double s = 0;
    for (int k = 0; k < a.count[static_cast<size_t>(i)]; ++k)
      s += a.weights[static_cast<size_t>(i * a.taps + k)] * v[a.first[static_cast<size_t>(i)] + k];
    CHECK(s == Approx(i == 0 ? 50.0 : 160.0).margin(1e-4));
  }
  // Upsampling by 2 is plain bilinear with edge clamping: [0, 100] -> 0, 25, 75, 100.
  const AxisWeights u = aa_bilinear_weights(0, 2, 4, 0, 4, 0, 2);
  const double expect[4] = {0, 25, 75, 100};
  for (int i = 0; i < 4; ++i) {
    double s = 0;
    for (int k = 0; k < u.count[static_cast<size_t>(i)]; ++k)
      s += u.weights[static_cast<size_t>(i * u.taps + k)] * (u.first[static_cast<size_t>(i)] + k) * 100.0;
    CHECK(s == Approx(expect[i]).margin(1e-4));
  }
}

// Tolerance: 2e-4 of a level (0..255 units) between the f32 output and the f64 reference
// (measured: at most 4.5e-5, f32 weights and accumulation).
TEST_CASE("fused: train and eval outputs equal an f64 reference of the same crop", "[data][transforms][fused]") {
  const Tensor img = image_tensor(500, 375, 3);
  const uint8_t* px = img.data_ptr<uint8_t>();
  SECTION("train: crop box, resize (shrinking and enlarging), flip, normalize") {
    const auto pipe = ImagePipeline::train(224).reduced_decode(false);
    int flipped = 0, enlarged = 0;
    for (uint64_t seed = 0; seed < 12; ++seed) {
      const auto p = pipe.plan(375, 500, seed);
      const Tensor out = pipe.apply(img, seed);
      REQUIRE(out.sizes() == IntList{3, 224, 224});
      const auto got = unnormalize(out);
      const auto ref = reference_aa(px, 500, p.top, p.left, p.height, p.width, 224, 224);
      double worst = 0;
      for (int64_t y = 0; y < 224; ++y)
        for (int64_t x = 0; x < 224; ++x)
          for (int c = 0; c < 3; ++c) {
            const int64_t xs = p.flip ? 223 - x : x;
            worst = std::max(worst, std::abs(got[static_cast<size_t>((y * 224 + x) * 3 + c)] -
                                             ref[static_cast<size_t>((y * 224 + xs) * 3 + c)]));
          }
      CHECK(worst < 2e-4);
      flipped += p.flip;
      enlarged += p.height < 224 || p.width < 224;
    }
    CHECK(flipped > 0);
    CHECK(flipped < 12);
    CHECK(enlarged > 0);
  }
  SECTION("eval: Resize(256) then CenterCrop(224)") {
    const auto pipe = ImagePipeline::eval(256, 224).reduced_decode(false);
    const auto p = pipe.plan(375, 500, 0);
    CHECK(p.resize_h == 256);
    CHECK(p.resize_w == 341);  // int(256 * 500 / 375)
    CHECK(p.keep_top == 16);
    CHECK(p.keep_left == 58);  // round(117 / 2) = 58, half to even
    const auto got = unnormalize(pipe.apply(img, 0));
    const auto ref = reference_aa(px, 500, 0, 0, 375, 500, 256, 341);
    double worst = 0;
    for (int64_t y = 0; y < 224; ++y)
      for (int64_t x = 0; x < 224; ++x)
        for (int c = 0; c < 3; ++c)
          worst = std::max(worst, std::abs(got[static_cast<size_t>((y * 224 + x) * 3 + c)] -
                                           ref[static_cast<size_t>(((y + 16) * 341 + x + 58) * 3 + c)]));
    CHECK(worst < 2e-4);
  }
}

TEST_CASE("fused: the composable transforms give the fused pipeline's values", "[data][transforms][fused]") {
  // Same seed, same draws, same antialiased weights. The transforms run one by one (fuse=false;
  // by default such a Compose is the fused pass itself) round to u8 after the resize (as PIL
  // images do), the fused f32 output does not: within half a level / std.
  const Tensor img = image_tensor(211, 157, 4);
  const std::vector<double> mean{0.485, 0.456, 0.406}, sd{0.229, 0.224, 0.225};
  const double tol = 0.5 / 255 / 0.224 + 1e-4;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    INFO("seed " << seed);
    auto train = T::Compose({T::RandomResizedCrop(48), T::RandomHorizontalFlip(), T::ToTensor(), T::Normalize(mean, sd)}, false);
    const Tensor fused = ImagePipeline::train(48).reduced_decode(false).apply(img, seed);
    CHECK(max(abs(train(img, seed) - fused)).item<double>() <= tol);
    auto eval = T::Compose({T::Resize(64), T::CenterCrop(48), T::ToTensor(), T::Normalize(mean, sd)}, false);
    CHECK(max(abs(eval(img, seed) - ImagePipeline::eval(64, 48).apply(img, seed))).item<double>() <= tol);
    // u8 out: both round the same resampled value once; float summation order may move a tie.
    auto train_u8 = T::Compose({T::RandomResizedCrop(48), T::RandomHorizontalFlip(), T::PILToTensor()}, false);
    const Tensor a = train_u8(img, seed).to(kInt32), b = ImagePipeline::train(48).dtype(kUInt8).reduced_decode(false).apply(img, seed).to(kInt32);
    CHECK(max(abs(a - b)).item<int64_t>() <= 1);
  }
}

TEST_CASE("fused: u8, f16, bf16 and channels-last outputs are the f32 output converted", "[data][transforms][fused]") {
  const Tensor img = image_tensor(333, 250, 9);
  for (uint64_t seed : {1, 2, 3}) {
    const auto base = ImagePipeline::train(96);
    const Tensor f = base.apply(img, seed);
    const Tensor h = ImagePipeline::train(96).dtype(kFloat16).apply(img, seed);
    const Tensor b = ImagePipeline::train(96).dtype(kBFloat16).apply(img, seed);
    const Tensor nhwc = ImagePipeline::train(96).channels_last().apply(img, seed);
    const Tensor u8 = ImagePipeline::train(96).dtype(kUInt8).apply(img, seed);
    REQUIRE(h.dtype() == kFloat16);
    REQUIRE(nhwc.sizes() == IntList{96, 96, 3});
    REQUIRE(u8.sizes() == IntList{3, 96, 96});
    CHECK(equal(h, f.to(kFloat16)));
    CHECK(equal(b, f.to(kBFloat16)));
    CHECK(equal(nhwc, f.permute({1, 2, 0}).contiguous()));
    // u8 is the unnormalized value rounded: within half a level of f32's value.
    const auto un = unnormalize(f);
    const uint8_t* q = u8.data_ptr<uint8_t>();
    double worst = 0;
    for (int c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 96 * 96; ++i)
        worst = std::max(worst, std::abs(q[c * 96 * 96 + i] - un[static_cast<size_t>(i * 3 + c)]));
    CHECK(worst <= 0.5 + 1e-3);
  }
  CHECK_THROWS_WITH(ImagePipeline::train().dtype(kInt64), Catch::Contains("u8, f32, f16 or bf16"));
  CHECK_THROWS_WITH(ImagePipeline::eval(200, 224), Catch::Contains("crop <= resize"));
  CHECK_THROWS_WITH(ImagePipeline::train().apply(empty({4, 4}, kUInt8), 0), Catch::Contains("u8 RGB image"));
}

TEST_CASE("fused: the DCT scale is the smallest covering the resize", "[data][transforms][fused]") {
  const auto eval = ImagePipeline::eval();
  CHECK(eval.decode_scale(eval.plan(768, 1024, 0)) == 4);   // 768 * 4/8 = 384 >= 256; 2/8 gives 192
  CHECK(eval.decode_scale(eval.plan(1200, 1600, 0)) == 2);  // 1200 * 2/8 = 300 >= 256
  CHECK(eval.decode_scale(eval.plan(375, 500, 0)) == 8);    // 375 * 4/8 = 187 < 256
  CHECK(eval.decode_scale(eval.plan(2400, 2400, 0)) == 1);
  CHECK(eval.decode_scale(eval.plan(256, 256, 0)) == 8);
  const auto train = ImagePipeline::train(224);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const auto p = train.plan(768, 1024, seed);
    const int m = train.decode_scale(p);
    CHECK(p.height * m >= 224 * 8);
    CHECK(p.width * m >= 224 * 8);
    if (m > 1) CHECK((p.height * (m / 2) < 224 * 8 || p.width * (m / 2) < 224 * 8));  // the next smaller is too small
  }
  CHECK(ImagePipeline::eval().reduced_decode(false).decode_scale(eval.plan(768, 1024, 0)) == 8);
}

// Reduced-size decoding replaces part of the antialiasing filter with the DCT's own. Measured
// here: the outputs differ from the full-size path (torchvision's filter exactly) by 0.43 to
// 0.74 levels on average, at most 18 levels at hard edges. Bound: mean under 1 level.
TEST_CASE("fused: reduced-size JPEG decoding stays close to the full-size path", "[data][transforms][fused]") {
  if (!have_jpeg_region_decode()) MPX_JPEG_SKIP("built without libjpeg-turbo's libjpeg API");
  TempDir tmp;
  const std::string p = mpx_test::write_photo_jpeg(tmp.path / "a.jpg", 1024, 768, 21);
  const Tensor decoded = read_image(p, 3);
  for (bool train : {true, false}) {
    const auto fast = train ? ImagePipeline::train(224) : ImagePipeline::eval();
    auto exact = fast;
    exact.reduced_decode(false);
    for (uint64_t seed = 0; seed < 6; ++seed) {
      INFO((train ? "train" : "eval") << " seed " << seed);
      const Tensor a = fast.load(p, seed), b = exact.load(p, seed);
      // The full-size JPEG path is apply() on the decoded image, bit for bit.
      CHECK(equal(b, exact.apply(decoded, seed)));
      const double mean = (a - b).abs().mean().item<double>() * 0.226 * 255;
      CHECK(mean < 1.0);
    }
  }
}

TEST_CASE("fused: ImageFolder with a pipeline batches, reproduces and reports loader stats", "[data][transforms][fused]") {
  TempDir tmp;
  int k = 0;
  for (const char* cls : {"cat", "dog"})
    for (int i = 0; i < 5; ++i, ++k)
      REQUIRE(!mpx_test::write_photo_jpeg(tmp.path / cls / (std::to_string(i) + ".jpg"), 200 + 37 * i, 150 + 11 * i, k)
                   .empty());
  const auto pipe = ImagePipeline::train(64).dtype(kBFloat16);
  ImageFolder ds(tmp.path.string(), ImageFolderOptions().pipeline(pipe));
  REQUIRE(ds.size() == 10);
  CHECK(equal(ds.get(3).data, pipe.load(ds.samples()[3].first, sample_seed(0, 0, 3))));
  std::vector<Tensor> runs;
  for (int64_t workers : {0, 2}) {
    DataLoader l(ds, DataLoaderOptions(4).workers(workers).shuffle().seed(5));
    CHECK(l.stats().epoch == -1);
    std::vector<Tensor> parts;
    for (auto& b : l) {
      CHECK(b.data.dtype() == kBFloat16);
      CHECK(b.data.size(1) == 3);
      // Written straight into the batch (Dataset::get_batch): the same as each sample alone.
      for (int64_t k = 0; k < b.data.size(0); ++k) {
        const int64_t i = b.indices[static_cast<size_t>(k)];
        const Example<> e = ds.get_seeded(i, sample_seed(5, 0, i));
        CHECK(equal(b.data.select(0, k), e.data));
        CHECK(b.target.data_ptr<int64_t>()[k] == e.target.item<int64_t>());
      }
      parts.push_back(b.data.to(kFloat32));
    }
    runs.push_back(cat(parts, 0));
    const LoaderStats s = l.stats();
    CHECK(s.epoch == 0);
    CHECK(s.batches == 3);
    CHECK(s.samples == 10);
    CHECK(s.load_s > 0);
    CHECK(s.wait_s >= 0);
    CHECK(s.wait_s <= s.elapsed_s);
    CHECK(s.images_per_s() > 0);
    CHECK(s.images_per_load_s() > 0);
    if (workers == 0) CHECK(s.wait_s >= s.load_s);  // loading happens while the consumer waits
  }
  CHECK(equal(runs[0], runs[1]));
  CHECK_THROWS_WITH(ImageFolder(tmp.path.string(), T::ToTensor(), ImageFolderOptions().pipeline(pipe)),
                    Catch::Contains("either a transform or a pipeline"));
  // A broken file: the error names it; skip_corrupt replaces it with the next image.
  mpx_test::write_bytes((tmp.path / "dog" / "9.jpg").string(), {0xFF, 0xD8, 0xFF, 0xDB, 0, 1});
  ImageFolder strict(tmp.path.string(), ImageFolderOptions().pipeline(pipe));
  CHECK_THROWS_WITH(strict.get(strict.size() - 1), Catch::Contains("9.jpg") && Catch::Contains("cannot decode"));
  ImageFolder lenient(tmp.path.string(), ImageFolderOptions().pipeline(pipe).skip_corrupt());
  CHECK(lenient.size() == 10);
}

// Reference values computed with torchvision 0.14.1 / torch 1.13 (Debian python3-torchvision):
//   img[y][x][c] = (37x + 91y + 53c + 7xy) % 256, a 10x12 RGB image in f64; the crop rows 1..7,
//   columns 2..10; torch.nn.functional.interpolate(crop, size, mode="bilinear", antialias=True,
//   align_corners=False) (what RandomResizedCrop / resized_crop run on tensors). Shrinking to
//   4x5 (all values) and enlarging to 11x13 (the first row). Tolerance 1e-3 (f32 weights).
TEST_CASE("fused: resampling matches torchvision's antialiased bilinear on recorded values", "[data][transforms][fused]") {
  const int64_t H = 10, W = 12;
  std::vector<uint8_t> img(static_cast<size_t>(H * W * 3));
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int64_t c = 0; c < 3; ++c)
        img[static_cast<size_t>((y * W + x) * 3 + c)] = static_cast<uint8_t>((x * 37 + y * 91 + c * 53 + x * y * 7) % 256);
  const std::vector<double> down = {
      129.75510, 124.41497, 105.14286, 100.62500, 122.38690, 138.81548, 130.66106, 125.57703,
      149.89356, 133.85119, 155.61310, 137.75595, 131.82313, 126.48299, 115.04762, 139.02286,
      146.67429, 142.62286, 152.56000, 139.00000, 128.64000, 141.92706, 129.87294, 122.63765,
      132.80000, 119.24000, 117.20000, 125.12571, 132.77714, 129.45714, 129.66286, 137.31429,
      107.66286, 137.61000, 124.05000, 113.69000, 151.12706, 139.07294, 131.83765, 99.59000,
      142.99000, 115.35000, 143.37714, 138.59429, 90.65714, 100.09524, 142.64626, 135.56463,
      127.43452, 107.29167, 123.72024, 155.42297, 118.78711, 143.10364, 125.32738, 115.85119,
      110.18452, 152.66667, 91.59864, 130.66667};
  const std::vector<double> up_first_row = {
      179.00000, 232.00000, 29.00000, 202.69231, 117.84615, 52.69231, 174.07692, 30.15385,
      83.15385, 27.30769, 60.61538, 113.61538, 38.07692, 91.07692, 144.07692, 68.53846,
      121.53846, 174.53846, 99.00000, 152.00000, 205.00000, 129.46154, 182.46154, 235.46154,
      159.92308, 212.92308, 167.46154, 190.38462, 223.69231, 40.38462, 220.84615, 76.92308,
      70.84615, 133.15385, 48.30769, 101.30769, 19.00000, 72.00000, 125.00000};
  ResampleOutput o;
  o.channels_last = true;  // [H,W,C], as the values are listed; mul 1, add 0: plain 0..255 values
  std::vector<float> scratch;
  for (auto [oh, ow] : {std::pair<int64_t, int64_t>{4, 5}, {11, 13}}) {
    const AxisWeights wy = aa_bilinear_weights(1, 7, oh, 0, oh, 1, 8), wx = aa_bilinear_weights(2, 9, ow, 0, ow, 2, 11);
    std::vector<float> out(static_cast<size_t>(oh * ow * 3));
    resample_rgb(img.data(), W * 3, 0, 0, wy, wx, o, out.data(), scratch);
    const auto& ref = oh == 4 ? down : up_first_row;
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO(oh << "x" << ow << " value " << i);
      CHECK(out[i] == Approx(ref[i]).margin(1e-3));
    }
  }
}

// Degenerate sizes: single-pixel rows and columns, extreme aspect ratios, images smaller than
// the output (enlarged), each at every decode path; outputs are finite and in range.
TEST_CASE("fused: tiny and extreme-aspect images load through every path", "[data][transforms][fused]") {
  TempDir tmp;
  for (auto [w, h] : {std::pair{1, 1}, {1, 300}, {300, 1}, {17, 3}, {2000, 9}, {64, 64}}) {
    const std::string p = mpx_test::write_photo_jpeg(tmp.path / "t.jpg", w, h, 4);
    REQUIRE(!p.empty());
    for (const auto& pipe : {ImagePipeline::train(32), ImagePipeline::eval(40, 32),
                             ImagePipeline::train(32).reduced_decode(false), ImagePipeline::eval(40, 32).dtype(kUInt8)}) {
      for (uint64_t seed = 0; seed < 5; ++seed) {
        INFO(w << "x" << h << " seed " << seed);
        const Tensor t = pipe.load(p, seed).to(kFloat32);
        REQUIRE(t.sizes() == IntList{3, 32, 32});
        const double lo = t.min().item<double>(), hi = t.max().item<double>();
        CHECK(std::isfinite(lo));
        CHECK(std::isfinite(hi));
        CHECK(lo >= (pipe.dtype() == kUInt8 ? 0.0 : -2.2));
        CHECK(hi <= (pipe.dtype() == kUInt8 ? 255.0 : 2.7));
      }
    }
  }
}
