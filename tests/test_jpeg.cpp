// Image decoding tests: libjpeg-turbo against stb_image at full size, reduced-size (DCT-scaled)
// sizes and pixels, region decodes against full decodes, the errors for broken files, and truncated BMPs.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>

#include "data/data.h"
#include "ops/elementwise.h"
#include "test_jpeg_util.h"
#include "tests/paths.h"

#include <stb/stb_image.h>

using namespace mpx;
using namespace mpx::data;
using mpx_test::TempDir;

namespace {
// The fuzzers' image corpus in the source tree.
std::filesystem::path image_corpus() {
  return std::filesystem::path(mpx::testing::test_data_dir()) / ".." / "fuzz" / "corpus" / "image";
}

struct Diff {
  double mean = 0;
  int max = 0;
};
Diff diff(const uint8_t* a, const uint8_t* b, size_t n) {
  Diff d;
  for (size_t i = 0; i < n; ++i) {
    const int e = std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
    d.mean += e;
    d.max = std::max(d.max, e);
  }
  d.mean /= static_cast<double>(n);
  return d;
}
// The whole image at `scale`, through the region decoder.
JpegRegion decode_whole(const std::string& p, int scale, std::vector<uint8_t>& px) {
  return decode_jpeg_region(mpx_test::read_bytes(p), p, max_image_pixels(),
                            [&](int w, int h) {
                              return JpegPlan{scale, 0, 0, static_cast<int>(jpeg_scaled_size(w, scale)),
                                              static_cast<int>(jpeg_scaled_size(h, scale))};
                            },
                            px);
}
}  // namespace

// The two decoders differ only in their IDCT and chroma upsampling rounding. Measured on these
// images: mean |difference| 0.02 (4:4:4) and 0.11 (4:2:0) of a level, largest 2 and 3 levels.
// The bound: mean under 0.25, no pixel more than 4 levels apart.
TEST_CASE("jpeg: libjpeg-turbo's full-size decode matches stb_image's within IDCT differences", "[data][jpeg]") {
  if (!have_libjpeg_turbo()) MPX_JPEG_SKIP("built without libjpeg-turbo");
  TempDir tmp;
  for (int quality : {90, 95}) {
    for (auto [w, h] : {std::pair{97, 61}, std::pair{500, 375}}) {
      INFO(quality << " " << w << "x" << h);
      const std::string p = mpx_test::write_photo_jpeg(tmp.path / "a.jpg", w, h, 7, quality);
      REQUIRE(!p.empty());
      const Tensor t = read_image(p, 3);
      REQUIRE(t.sizes() == IntList{h, w, 3});
      int sw = 0, sh = 0, sc = 0;
      unsigned char* s = stbi_load(p.c_str(), &sw, &sh, &sc, 3);
      REQUIRE(s);
      const Diff d = diff(t.data_ptr<uint8_t>(), s, static_cast<size_t>(w) * h * 3);
      stbi_image_free(s);
      CHECK(d.mean < 0.25);
      CHECK(d.max <= 4);
      if (have_jpeg_region_decode()) {
        // The libjpeg API at scale 8/8 is the same decoder as TurboJPEG's: identical pixels.
        std::vector<uint8_t> px;
        const JpegRegion r = decode_whole(p, 8, px);
        REQUIRE((r.width == w && r.height == h && r.x0 == 0 && r.y0 == 0));
        CHECK(std::memcmp(px.data(), t.data_ptr<uint8_t>(), static_cast<size_t>(w) * h * 3) == 0);
      }
    }
  }
}

TEST_CASE("jpeg: DCT-scaled decodes have libjpeg's sizes and the full image's content", "[data][jpeg]") {
  if (!have_jpeg_region_decode()) MPX_JPEG_SKIP("built without libjpeg-turbo's libjpeg API");
  TempDir tmp;
  const std::string p = mpx_test::write_photo_jpeg(tmp.path / "a.jpg", 501, 377, 3);
  const Tensor full = read_image(p, 3);
  const uint8_t* f = full.data_ptr<uint8_t>();
  for (int m = 1; m <= 8; ++m) {
    INFO("scale " << m << "/8");
    std::vector<uint8_t> px;
    const JpegRegion r = decode_whole(p, m, px);
    CHECK(r.full_width == 501);
    CHECK(r.full_height == 377);
    CHECK(r.scaled_width == (501 * m + 7) / 8);
    CHECK(r.scaled_height == (377 * m + 7) / 8);
    CHECK(r.width == r.scaled_width);
    CHECK(r.height == r.scaled_height);
    REQUIRE(px.size() >= static_cast<size_t>(r.width) * r.height * 3);
    // Each scaled pixel is about the mean of the full-size pixels it covers (measured: 0.5 to
    // 2.3 levels apart on average, the DCT's filter not being a box).
    double err = 0;
    int64_t n = 0;
    for (int y = 0; y + 1 < r.height; y += 3)
      for (int x = 0; x + 1 < r.width; x += 3)
        for (int c = 0; c < 3; ++c) {
          const double x0 = x * 8.0 / m, y0 = y * 8.0 / m, span = 8.0 / m;
          double s = 0;
          int k = 0;
          for (int yy = static_cast<int>(y0); yy < std::min(377.0, y0 + span); ++yy)
            for (int xx = static_cast<int>(x0); xx < std::min(501.0, x0 + span); ++xx, ++k)
              s += f[(static_cast<size_t>(yy) * 501 + xx) * 3 + c];
          err += std::abs(s / k - px[(static_cast<size_t>(y) * r.width + x) * 3 + c]);
          ++n;
        }
    CHECK(err / static_cast<double>(n) < 4.0);
  }
}

TEST_CASE("jpeg: a region decode holds the same pixels as the whole image at that scale", "[data][jpeg]") {
  if (!have_jpeg_region_decode()) MPX_JPEG_SKIP("built without libjpeg-turbo's libjpeg API");
  TempDir tmp;
  for (int quality : {90, 95}) {
    const std::string p = mpx_test::write_photo_jpeg(tmp.path / "a.jpg", 640, 480, 11, quality);
    const auto bytes = mpx_test::read_bytes(p);
    for (int m : {8, 5, 4, 2}) {
      std::vector<uint8_t> whole;
      const JpegRegion w = decode_whole(p, m, whole);
      for (const auto& box : {std::array{1, 1, 50, 40}, std::array{37, 53, 211, 170}, std::array{100, 0, 320, 240},
                              std::array{0, 101, 17, 239}}) {
        // Plain variables, not a structured binding: the lambda below captures them (clang 14).
        const int x0 = box[0], y0 = box[1], x1 = std::min(box[2], w.width), y1 = std::min(box[3], w.height);
        INFO("quality " << quality << " scale " << m << " region " << x0 << "," << y0 << " - " << x1 << "," << y1);
        std::vector<uint8_t> px;
        const JpegRegion r =
            decode_jpeg_region(bytes, p, max_image_pixels(), [&](int, int) { return JpegPlan{m, x0, y0, x1, y1}; }, px);
        REQUIRE(r.x0 <= x0);
        REQUIRE(r.x0 + r.width >= x1);
        REQUIRE(r.y0 == y0);
        REQUIRE(r.height == y1 - y0);
        // Away from the region's left and right edges (where libjpeg's chroma upsampling has no
        // neighbour) the pixels are the full decode's exactly; the pipeline decodes one pixel
        // more on each side for that reason.
        int worst = 0;
        for (int y = y0; y < y1; ++y)
          for (int x = std::max(x0, r.x0 + 1); x < std::min(x1, r.x0 + r.width - 1); ++x)
            for (int c = 0; c < 3; ++c)
              worst = std::max(worst, std::abs(static_cast<int>(px[(static_cast<size_t>(y - y0) * r.width + (x - r.x0)) * 3 + c]) -
                                               static_cast<int>(whole[(static_cast<size_t>(y) * w.width + x) * 3 + c])));
        CHECK(worst == 0);
      }
    }
  }
}

TEST_CASE("jpeg: truncated, corrupt and oversized files fail the region decode as read_image fails", "[data][jpeg]") {
  if (!have_jpeg_region_decode()) MPX_JPEG_SKIP("built without libjpeg-turbo's libjpeg API");
  TempDir tmp;
  const std::string good = mpx_test::write_photo_jpeg(tmp.path / "good.jpg", 320, 240, 5);
  const auto bytes = mpx_test::read_bytes(good);
  const auto pipe = ImagePipeline::train(64);
  auto same_error = [&](const std::string& p) {
    std::string a, b;
    try {
      read_image(p, 3);
    } catch (const Error& e) {
      a = e.what();
    }
    try {
      pipe.load(p, 1);
    } catch (const Error& e) {
      b = e.what();
    }
    CHECK_THAT(a, Catch::Contains(p) && Catch::Contains("cannot decode"));
    CHECK_THAT(b, Catch::Contains(p) && Catch::Contains("cannot decode"));
    return std::pair{a, b};
  };
  SECTION("truncated: the rest of the file is still parsed, so a crop near the top fails too") {
    auto cut = bytes;
    cut.resize(cut.size() * 3 / 4);
    const std::string p = (tmp.path / "cut.jpg").string();
    mpx_test::write_bytes(p, cut);
    const auto [a, b] = same_error(p);
    CHECK_THAT(b, Catch::Contains("Premature end of JPEG file"));
    if (have_libjpeg_turbo()) CHECK(a == b);
    for (uint64_t seed = 0; seed < 20; ++seed) CHECK_THROWS_WITH(pipe.load(p, seed), Catch::Contains("Premature end"));
  }
  SECTION("corrupt entropy-coded data") {
    auto bad = bytes;
    for (size_t i = bad.size() / 2; i < bad.size() / 2 + 64; ++i) bad[i] = 0xFF;
    const std::string p = (tmp.path / "bad.jpg").string();
    mpx_test::write_bytes(p, bad);
    const auto [a, b] = same_error(p);
    if (have_libjpeg_turbo()) CHECK(a == b);
  }
  SECTION("a header only") {
    auto head = bytes;
    head.resize(300);
    const std::string p = (tmp.path / "head.jpg").string();
    mpx_test::write_bytes(p, head);
    same_error(p);
  }
  SECTION("a size above max_image_pixels, refused before decoding") {
    const int64_t old = max_image_pixels();
    set_max_image_pixels(320 * 240 - 1);
    std::string msg;
    try {
      pipe.load(good, 0);
    } catch (const Error& e) {
      msg = e.what();
    }
    set_max_image_pixels(old);
    CHECK_THAT(msg, Catch::Contains("320x240") && Catch::Contains("decompression-bomb"));
  }
  SECTION("not an image at all") {
    const std::string p = (tmp.path / "x.jpg").string();
    mpx_test::write_bytes(p, {0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3});
    same_error(p);
    CHECK_THROWS_WITH(pipe.load((tmp.path / "missing.jpg").string(), 0), Catch::Contains("cannot open the file"));
  }
}

// The image fuzz corpus (the fuzzers' findings included) through the pipeline's decode: each
// file gives an output or an mpx::Error naming it, whatever crop and DCT scale it draws.
TEST_CASE("jpeg: the fuzz corpus through ImagePipeline fails cleanly or decodes", "[data][jpeg]") {
  const std::filesystem::path dir = image_corpus();
  const auto train = ImagePipeline::train(32), eval = ImagePipeline::eval(40, 32).dtype(kUInt8);
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string p = e.path().string();
    INFO(p);
    ++n;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      for (const auto* pipe : {&train, &eval}) {
        try {
          const Tensor t = pipe->load(p, seed);
          CHECK(t.numel() == 3 * 32 * 32);
        } catch (const Error& err) {
          CHECK_THAT(std::string(err.what()), Catch::Contains(p));
        }
      }
    }
  }
  CHECK(n >= 8);
}

// Greyscale JPEGs (expanded to RGB by libjpeg), PNG and BMP (decoded whole by read_image) give
// the pipeline the same pixels as read_image does.
TEST_CASE("jpeg: grey JPEG, PNG and BMP through the pipeline equal the transform of read_image", "[data][jpeg]") {
  const std::filesystem::path dir = image_corpus();
  for (const char* name : {"gray4x4.jpg", "gray4x4.png", "rgb8x6.jpg", "rgb8x6.bmp"}) {
    const std::string p = (dir / name).string();
    INFO(p);
    for (const auto& pipe : {ImagePipeline::eval(8, 4).reduced_decode(false), ImagePipeline::train(5, {0.5, 1.0})}) {
      for (uint64_t seed = 0; seed < 4; ++seed) {
        const Tensor a = pipe.load(p, seed), b = pipe.apply(read_image(p, 3), seed);
        REQUIRE(a.sizes() == b.sizes());
        CHECK(equal(a, b));
      }
    }
  }
}

// An uncompressed BMP must hold the rows it declares: stb_image decodes missing ones as zeros, so
// fuzz_image's 87-byte BMP declaring 2048 x 1536 pixels (fuzz/corpus/image/regress-bmp-truncated.bmp)
// was decoded in full, seconds per read under the sanitizers.
TEST_CASE("images: a truncated uncompressed BMP is refused from its header, a whole one decodes", "[data]") {
  TempDir tmp;
  std::vector<unsigned char> px(41 * 30 * 3, 77);
  const std::string bmp = (tmp.path / "whole.bmp").string();
  REQUIRE(stbi_write_bmp(bmp.c_str(), 41, 30, 3, px.data()));
  CHECK(read_image(bmp).sizes() == IntList{30, 41, 3});
  CHECK(image_header_problem(bmp).empty());
  std::vector<unsigned char> bytes = mpx_test::read_bytes(bmp);
  bytes.resize(bytes.size() - 200);
  const std::string cut = (tmp.path / "cut.bmp").string();
  mpx_test::write_bytes(cut, bytes);
  CHECK_THROWS_WITH(read_image(cut), Catch::Contains(cut) && Catch::Contains("corrupt or truncated BMP: its header "
                                                                            "declares 41 x 30 pixels of 24 bits"));
  CHECK_THAT(image_header_problem(cut), Catch::Contains("corrupt or truncated BMP"));
  // stb_image reads a negative compression field as plain rows too.
  bytes[30] = bytes[31] = bytes[32] = bytes[33] = 0xff;
  mpx_test::write_bytes(cut, bytes);
  CHECK_THROWS_WITH(read_image(cut), Catch::Contains("corrupt or truncated BMP"));
  const std::string found = (image_corpus() / "regress-bmp-truncated.bmp").string();
  CHECK_THROWS_WITH(read_image(found), Catch::Contains("declares 2048 x 1536 pixels"));
}
