// GPU JPEG decoding (nvJPEG, ImageFolderOptions::gpu_decode): the host-side weight tables and the kernel's arithmetic against the CPU pipeline, the errors without nvJPEG or a GPU, and ([cuda]) the device decode against the CPU path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "data/data.h"
#include "data/resample_batch.h"
#include "ops/elementwise.h"
#include "test_jpeg_util.h"
#include "tests/test_util.h"

using namespace mpx;
using namespace mpx::data;
using mpx_test::TempDir;

namespace {
// A GPU and a build with nvJPEG; otherwise the case reports itself skipped, saying which is missing.
bool nvjpeg_ready() {
  if (!testing::cuda_ready()) return false;
  if (have_nvjpeg()) return true;
  testing::skip_test("this build has no nvJPEG (tools/install-deps.sh, -DMPX_NVJPEG=ON)");
  return false;
}


bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The output's height and width from the pipeline's per-sample shape.
std::pair<int64_t, int64_t> out_hw(const ImagePipeline& p) {
  const IntList s = p.output_shape();
  return p.channels_last() ? std::make_pair(s[0], s[1]) : std::make_pair(s[1], s[2]);
}

// Differences of two samples of a pipeline's output, in 0..255 levels: u8 as is, normalized
// outputs divided by the channel's multiplier (v * mul + add, so a level is mul).
struct Levels {
  double mean = 0, max = 0;
};
Levels level_diff(const ImagePipeline& p, const Tensor& a, const Tensor& b) {
  const Tensor x = a.cpu().to(kFloat32).contiguous(), y = b.cpu().to(kFloat32).contiguous();
  REQUIRE(x.sizes() == y.sizes());
  const ResampleOutput o = p.output(false);
  const auto [h, w] = out_hw(p);
  const float* px = x.data_ptr<float>();
  const float* py = y.data_ptr<float>();
  Levels d;
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = p.channels_last() ? i % 3 : (i / (h * w)) % 3;
    const double scale = p.dtype() == kUInt8 ? 1.0 : 1.0 / std::abs(static_cast<double>(o.mul[c]));
    const double e = std::abs(static_cast<double>(px[i]) - static_cast<double>(py[i])) * scale;
    d.mean += e;
    d.max = std::max(d.max, e);
  }
  d.mean /= static_cast<double>(n);
  return d;
}

// Photo-like JPEGs of assorted sizes: quality 85 has 4:2:0 chroma, 95 none (stb_image_write).
struct TestImage {
  std::string path;
  bool subsampled;
};
std::vector<TestImage> write_images(const std::filesystem::path& dir) {
  const int sizes[][3] = {{200, 150, 85}, {97, 311, 95}, {640, 480, 85}, {33, 29, 95}, {512, 384, 95}};
  std::vector<TestImage> v;
  for (int i = 0; i < 5; ++i) {
    const std::string p = mpx_test::write_photo_jpeg(dir / ("img" + std::to_string(i) + ".jpg"), sizes[i][0],
                                                     sizes[i][1], static_cast<uint32_t>(i + 1), sizes[i][2]);
    REQUIRE(!p.empty());
    v.push_back({p, sizes[i][2] <= 90});
  }
  return v;
}

std::vector<ImagePipeline> pipelines() {
  return {ImagePipeline::train(56).dtype(kUInt8), ImagePipeline::train(48, {0.5, 1.0}).dtype(kFloat32).channels_last(),
          ImagePipeline::eval(64, 56).dtype(kUInt8).channels_last(), ImagePipeline::eval(72, 64).dtype(kFloat32),
          ImagePipeline::train(40).dtype(kFloat16)};
}

}  // namespace

TEST_CASE("gpu decode: the batched resample, run on the host, equals the CPU pipeline on the same pixels",
          "[data][gpu_decode]") {
  TempDir tmp;
  const auto images = write_images(tmp.path);
  // Decoded once into one buffer as the device holds them: each image at a 256-byte boundary,
  // here with rows padded past the image (pitch > width * 3) to catch a pitch mix-up.
  std::vector<Tensor> decoded;
  std::vector<int64_t> src, pitch;
  std::vector<uint8_t> pixels;
  for (const auto& im : images) {
    const Tensor t = read_image(im.path, 3);
    const int64_t h = t.size(0), w = t.size(1), pt = w * 3 + 7;
    src.push_back(static_cast<int64_t>(pixels.size()));
    pitch.push_back(pt);
    pixels.resize(pixels.size() + static_cast<size_t>((h * pt + 255) / 256 * 256), 0);
    for (int64_t y = 0; y < h; ++y)
      std::memcpy(pixels.data() + src.back() + y * pt, t.data_ptr<uint8_t>() + y * w * 3, static_cast<size_t>(w * 3));
    decoded.push_back(t);
  }
  const std::vector<uint64_t> seeds{11, 22, 33, 44, 55};
  for (const ImagePipeline& base : pipelines()) {
    if (base.dtype() == kFloat16) continue;  // the host reference stores u8 and f32 (f16 is f32 rounded once)
    const ImagePipeline& p = base;
    INFO("dtype " << dtype_name(p.dtype()) << (p.channels_last() ? " channels-last" : "") << (p.is_train() ? " train" : " eval"));
    const auto [h, w] = out_hw(p);
    // Samples in reverse order; sample 0 is left to a fallback and must stay untouched.
    const auto n = static_cast<int64_t>(decoded.size()) + 1;
    ResampleBatch rb(h, w);
    for (size_t i = 0; i < decoded.size(); ++i) {
      const int64_t ih = decoded[i].size(0), iw = decoded[i].size(1);
      const ImagePipeline::Plan plan = p.plan(ih, iw, seeds[i]);
      const auto wts = p.weights(plan, 8, ih, iw);
      rb.add(wts.first, wts.second, src[i], pitch[i], n - 1 - static_cast<int64_t>(i), plan.flip);
    }
    IntList shape = p.output_shape();
    shape.insert(shape.begin(), n);
    Tensor got = empty(shape, p.dtype());
    const size_t each = static_cast<size_t>(got.numel() / n) * element_size(p.dtype());
    std::memset(got.raw_data(), 0xAB, each * static_cast<size_t>(n));
    resample_batch_host(rb, pixels.data(), p.output(false), n, got.raw_data());
    const auto* bytes = static_cast<const uint8_t*>(got.raw_data());
    CHECK(std::all_of(bytes, bytes + each, [](uint8_t b) { return b == 0xAB; }));
    for (size_t i = 0; i < decoded.size(); ++i) {
      INFO("image " << i << " " << decoded[i].size(1) << "x" << decoded[i].size(0));
      const Tensor want = p.apply(decoded[i], seeds[i]);
      const Levels d = level_diff(p, got.select(0, n - 1 - static_cast<int64_t>(i)), want);
      // The same weights summed in the same order: only f32 rounding (contracted multiply-adds)
      // differs, so u8 values differ by at most a rounding flip at .5 and floats by far less.
      if (p.dtype() == kUInt8) {
        CHECK(d.max <= 1.0);
        CHECK(d.mean <= 0.01);
      } else {
        CHECK(d.max <= 1e-3);
      }
    }
  }
}

TEST_CASE("gpu decode: ResampleBatch packs its tables 16-byte aligned and refuses weights that do not fit",
          "[data][gpu_decode]") {
  const AxisWeights wy = aa_bilinear_weights(0, 40, 8, 0, 8, 0, 40);
  const AxisWeights wx = aa_bilinear_weights(2.5, 30, 6, 0, 6, 0, 40);
  ResampleBatch rb(8, 6);
  rb.add(wy, wx, 0, 120, 1, true);
  rb.add(wy, wx, 4096, 130, 0, false);
  const ResampleBatch::Packed pk = rb.pack();
  CHECK(pk.ints_at % 16 == 0);
  CHECK(pk.weights_at % 16 == 0);
  CHECK(pk.ints_at >= 2 * sizeof(ResampleJob));
  CHECK(pk.bytes.size() == pk.weights_at + rb.weights().size() * sizeof(float));
  ResampleJob j[2];
  std::memcpy(j, pk.bytes.data(), sizeof j);
  CHECK(j[0].sample == 1);
  CHECK(j[0].flip == 1);
  CHECK(j[1].src == 4096);
  CHECK(j[1].pitch == 130);
  CHECK(j[1].sample == 0);
  CHECK(j[1].taps_y == wy.taps);
  CHECK(j[1].taps_x == wx.taps);
  std::vector<int32_t> ints(rb.ints().size());
  std::memcpy(ints.data(), pk.bytes.data() + pk.ints_at, ints.size() * sizeof(int32_t));
  std::vector<float> wts(rb.weights().size());
  std::memcpy(wts.data(), pk.bytes.data() + pk.weights_at, wts.size() * sizeof(float));
  for (int64_t y = 0; y < 8; ++y) {
    CHECK(ints[static_cast<size_t>(j[1].rows + y)] == wy.first[static_cast<size_t>(y)]);
    CHECK(ints[static_cast<size_t>(j[1].rows + 8 + y)] == wy.count[static_cast<size_t>(y)]);
  }
  for (int64_t x = 0; x < 6; ++x) {
    CHECK(ints[static_cast<size_t>(j[1].cols + x)] == wx.first[static_cast<size_t>(x)]);
    CHECK(ints[static_cast<size_t>(j[1].cols + 6 + x)] == wx.count[static_cast<size_t>(x)]);
  }
  CHECK(std::equal(wx.weights.begin(), wx.weights.end(), wts.begin() + j[1].wcols));
  CHECK(std::equal(wy.weights.begin(), wy.weights.end(), wts.begin() + j[1].wrows));
  CHECK_THROWS_WITH(rb.add(wx, wy, 0, 120, 2, false), Catch::Contains("weights for 6x8 outputs in a batch of 8x6"));
  CHECK_THROWS_WITH(rb.add(wy, wx, 0, 60, 2, false), Catch::Contains("read past the image row"));
}

TEST_CASE("gpu decode: ImageFolder's gpu_decode names what is missing: a pipeline, a CUDA device, nvJPEG, a GPU",
          "[data][gpu_decode]") {
  TempDir tmp;
  REQUIRE(!mpx_test::write_photo_jpeg(tmp.path / "a" / "0.jpg", 40, 30, 1).empty());
  const std::string root = tmp.path.string();
  const auto pipe = ImagePipeline::train(32).dtype(kUInt8);
  CHECK_THROWS_WITH(ImageFolder(root, ImageFolderOptions().gpu_decode(Device::cuda())),
                    Catch::Contains("gpu_decode needs a pipeline"));
  CHECK_THROWS_WITH(ImageFolder(root, ImageFolderOptions().pipeline(pipe).gpu_decode(Device::cpu())),
                    Catch::Contains("cannot decode JPEGs on cpu: GPU decoding needs a CUDA device, got cpu"));
  CHECK_THROWS_WITH(GpuJpegDecoder(pipe, Device::cpu()), Catch::Contains("needs a CUDA device"));
  CHECK(!gpu_decode_problem(Device::cpu()).empty());
  if (have_nvjpeg() && cuda_is_available()) {
    CHECK(gpu_decode_problem(Device::cuda(0)).empty());
    return;  // the rest is about machines without one or the other
  }
  const std::string why = gpu_decode_problem(Device::cuda(0));
  INFO(why);
  CHECK(!why.empty());
#ifdef MPX_WITH_CUDA
  if (!have_nvjpeg()) CHECK((has(why, "no nvJPEG") && has(why, "tools/install-deps.sh") && has(why, "-DMPX_NVJPEG=ON")));
  else CHECK(has(why, "cuda:0 is not visible (0 CUDA device(s)"));
#else
  CHECK(has(why, "without the CUDA backend"));
#endif
  CHECK_THROWS_WITH(ImageFolder(root, ImageFolderOptions().pipeline(pipe).gpu_decode(Device::cuda())),
                    Catch::Contains("ImageFolder: cannot decode JPEGs on cuda:0: " + why));
  CHECK_THROWS_WITH(GpuJpegDecoder(pipe, Device::cuda()), Catch::Contains(why));
}

// nvJPEG's decode differs from libjpeg-turbo's in its IDCT, colour conversion rounding and, for
// subsampled chroma, its upsampling (libjpeg-turbo's "fancy" triangle filter; nvJPEG does not
// document its own). torchvision's test of nvJPEG against libjpeg asserts only a mean absolute
// difference below 2 levels. The bounds here: without subsampling, IDCT and conversion rounding,
// a few levels at most (max 4, mean 0.5); with 4:2:0, mean 1 and max 24 levels, since these
// images put full-range colour steps (a saturated block, a disc's rim) inside one chroma sample.
// A wrong crop, flip or layout costs tens of levels on average. The figures are printed, for
// bench/RESULTS.md, when the case runs on a GPU.
TEST_CASE("gpu decode: nvJPEG batches equal the CPU pipeline without reduced decoding, and a PNG takes the CPU path",
          "[cuda][data][gpu_decode]") {
  if (!nvjpeg_ready()) return;
  TempDir tmp;
  const auto images = write_images(tmp.path / "a");
  // A grey JPEG and a PNG in a second class.
  const auto grey = mpx_test::photo_like(180, 140, 9);
  std::vector<unsigned char> g(180 * 140);
  for (size_t i = 0; i < g.size(); ++i) g[i] = grey[i * 3 + 1];
  std::filesystem::create_directories(tmp.path / "b");
  REQUIRE(stbi_write_jpg((tmp.path / "b" / "grey.jpg").c_str(), 180, 140, 1, g.data(), 90));
  const auto png = mpx_test::photo_like(90, 70, 10);
  REQUIRE(stbi_write_png((tmp.path / "b" / "z.png").c_str(), 90, 70, 3, png.data(), 90 * 3));
  const std::string root = tmp.path.string();

  for (const ImagePipeline& p : pipelines()) {
    INFO("dtype " << dtype_name(p.dtype()) << (p.channels_last() ? " channels-last" : "") << (p.is_train() ? " train" : " eval"));
    ImageFolder gpu(root, ImageFolderOptions().pipeline(p).gpu_decode(Device::cuda(0)));
    ImageFolder cpu(root, ImageFolderOptions().pipeline(ImagePipeline(p).reduced_decode(false)));
    REQUIRE(gpu.size() == 7);
    const std::vector<int64_t> idx{6, 2, 0, 5, 3, 1, 4};
    const std::vector<uint64_t> seeds{101, 202, 303, 404, 505, 606, 707};
    Batch bg, bc;
    REQUIRE(gpu.get_batch(idx, seeds, bg));
    REQUIRE(cpu.get_batch(idx, seeds, bc));
    CHECK(bg.data.is_cuda());
    CHECK(bg.data.dtype() == p.dtype());
    CHECK(bg.data.sizes() == bc.data.sizes());
    CHECK(equal(bg.target, bc.target));
    for (size_t k = 0; k < idx.size(); ++k) {
      const std::string& path = gpu.samples()[static_cast<size_t>(idx[k])].first;
      INFO(path);
      const Levels d = level_diff(p, bg.data.select(0, static_cast<int64_t>(k)), bc.data.select(0, static_cast<int64_t>(k)));
      std::printf("gpu decode vs CPU, %s %s%s, %s: max %.2f mean %.3f levels\n", p.is_train() ? "train" : "eval",
                  dtype_name(p.dtype()), p.channels_last() ? " NHWC" : "", path.c_str(), d.max, d.mean);
      const bool is_png = has(path, ".png");
      const bool subsampled = std::any_of(images.begin(), images.end(),
                                          [&](const TestImage& t) { return t.path == path && t.subsampled; });
      if (is_png) {
        CHECK(d.max == 0);  // both through the CPU pipeline
      } else if (subsampled) {
        CHECK(d.max <= 24);
        CHECK(d.mean <= 1.0);
      } else {
        CHECK(d.max <= 4);
        CHECK(d.mean <= 0.5);
      }
    }
  }
  // The decoder alone: the PNG is the one sample nvJPEG does not take.
  const ImagePipeline p = ImagePipeline::train(32).dtype(kUInt8);
  GpuJpegDecoder dec(p, Device::cuda(0));
  std::vector<std::vector<uint8_t>> files{mpx_test::read_bytes(images[0].path),
                                          mpx_test::read_bytes((tmp.path / "b" / "z.png").string()),
                                          mpx_test::read_bytes(images[1].path), {}};
  int called = 0;
  const Tensor t = dec.decode(files, {1, 2, 3, 4}, [&](size_t k, void* out) {
    ++called;
    const std::string path = k == 1 ? (tmp.path / "b" / "z.png").string() : images[0].path;
    ImagePipeline(p).reduced_decode(false).load_into(path, 2, out);
  });
  CHECK(t.is_cuda());
  CHECK(t.size(0) == 4);
  CHECK(called == 2);  // the PNG and the empty (unreadable) entry
  CHECK(dec.fallbacks() == 2);
}

TEST_CASE("gpu decode: a loader with workers and pinned memory feeds the prefetcher device batches it normalizes",
          "[cuda][data][gpu_decode]") {
  if (!nvjpeg_ready()) return;
  TempDir tmp;
  for (int i = 0; i < 10; ++i)
    REQUIRE(!mpx_test::write_photo_jpeg(tmp.path / (i % 2 ? "x" : "y") / (std::to_string(i) + ".jpg"), 160 + 9 * i,
                                        120 + 5 * i, static_cast<uint32_t>(i), 95)
                 .empty());
  const auto p = ImagePipeline::train(48).dtype(kUInt8);
  ImageFolder gpu(tmp.path.string(), ImageFolderOptions().pipeline(p).gpu_decode(Device::cuda(0)));
  ImageFolder cpu(tmp.path.string(), ImageFolderOptions().pipeline(ImagePipeline(p).reduced_decode(false)));
  const auto opts = DataLoaderOptions(4).workers(2).shuffle().seed(3).pin_memory();
  DataLoader lg(gpu, opts), lc(cpu, opts);
  const auto po = PrefetchOptions().mean({0.485, 0.456, 0.406}).std({0.229, 0.224, 0.225});
  DevicePrefetcher pg(lg, Device::cuda(0), po), pc(lc, Device::cuda(0), po);
  std::vector<Tensor> a, b, ta, tb;
  for (auto& batch : pg) a.push_back(batch.data.cpu()), ta.push_back(batch.target.cpu());
  for (auto& batch : pc) b.push_back(batch.data.cpu()), tb.push_back(batch.target.cpu());
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].dtype() == kFloat32);
    CHECK(equal(ta[i], tb[i]));
    // Normalized values: one level is 1 / (255 std), at least 1 / (255 * 0.229).
    const Tensor d = (a[i] - b[i]).abs();
    const double mx = d.max().item<double>(), mean = d.mean().item<double>();
    CHECK(mx <= 4.0 / (255 * 0.224));
    CHECK(mean <= 0.5 / (255 * 0.224));
  }
}
