// ImagePipeline: plans each image's crop from its size, decodes only what the crop needs and
// resamples it into the output, with per-thread buffers reused from image to image.
#include "data/image_pipeline.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "data/datasets.h"
#include "data/jpeg.h"

namespace mpx::data {

namespace {
// Reused by every image a thread loads: the file, the decoded region, the resampler's rows.
struct Scratch {
  std::vector<uint8_t> bytes, pixels;
  std::vector<float> rows;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The clamp range of a box mapped into an image `size` pixels long: the pixels it mostly covers.
std::pair<int64_t, int64_t> covered(double start, double length, int64_t size) {
  const int64_t lo = std::clamp<int64_t>(static_cast<int64_t>(std::floor(start + 0.5)), 0, size - 1);
  const int64_t hi = std::clamp<int64_t>(static_cast<int64_t>(std::floor(start + length + 0.5)), lo + 1, size);
  return {lo, hi};
}
}  // namespace

ImagePipeline ImagePipeline::train(int64_t size, std::pair<double, double> scale, std::pair<double, double> ratio,
                                   double flip_p) {
  MPX_CHECK(size > 0, "ImagePipeline::train: size must be positive, got ", size);
  MPX_CHECK(scale.first > 0 && scale.first <= scale.second, "ImagePipeline::train: scale must be 0 < lo <= hi, got (",
            scale.first, ", ", scale.second, ")");
  MPX_CHECK(ratio.first > 0 && ratio.first <= ratio.second, "ImagePipeline::train: ratio must be 0 < lo <= hi, got (",
            ratio.first, ", ", ratio.second, ")");
  MPX_CHECK(flip_p >= 0 && flip_p <= 1, "ImagePipeline::train: the flip probability must be in [0, 1], got ", flip_p);
  ImagePipeline p;
  p.train_ = true;
  p.size_h_ = p.size_w_ = size;
  p.scale_ = scale;
  p.ratio_ = ratio;
  p.flip_p_ = flip_p;
  return p;
}

ImagePipeline ImagePipeline::eval(int64_t resize, int64_t crop) {
  MPX_CHECK(crop > 0 && resize >= crop, "ImagePipeline::eval: need 0 < crop <= resize, got resize ", resize,
            " and crop ", crop);
  ImagePipeline p;
  p.train_ = false;
  p.resize_ = resize;
  p.size_h_ = p.size_w_ = crop;
  return p;
}

ImagePipeline& ImagePipeline::dtype(DType d) {
  MPX_CHECK(d == kUInt8 || d == kFloat32 || d == kFloat16 || d == kBFloat16,
            "ImagePipeline: the output dtype must be u8, f32, f16 or bf16, got ", dtype_name(d));
  dtype_ = d;
  return *this;
}
ImagePipeline& ImagePipeline::channels_last(bool c) {
  channels_last_ = c;
  return *this;
}
ImagePipeline& ImagePipeline::normalize(std::vector<double> mean, std::vector<double> std) {
  MPX_CHECK(mean.size() == 3 && std.size() == 3, "ImagePipeline::normalize: needs 3 means and 3 stds (RGB), got ",
            mean.size(), " and ", std.size());
  for (double s : std) MPX_CHECK(s != 0 && std::isfinite(s), "ImagePipeline::normalize: std must be finite and non-zero");
  mean_ = std::move(mean);
  std_ = std::move(std);
  return *this;
}
ImagePipeline& ImagePipeline::reduced_decode(bool r) {
  reduced_ = r;
  return *this;
}

IntList ImagePipeline::output_shape() const {
  return channels_last_ ? IntList{size_h_, size_w_, 3} : IntList{3, size_h_, size_w_};
}

ImagePipeline::Plan ImagePipeline::plan(int64_t height, int64_t width, uint64_t seed) const {
  transforms::Rng rng(seed);
  return plan(height, width, rng);
}

ImagePipeline::Plan ImagePipeline::plan(int64_t height, int64_t width, transforms::Rng& rng) const {
  MPX_CHECK(height > 0 && width > 0, "ImagePipeline: the image is empty (", height, "x", width, ")");
  Plan p;
  if (train_) {
    const auto box = transforms::random_resized_crop_params(height, width, scale_, ratio_, rng);
    p.top = box[0], p.left = box[1], p.height = box[2], p.width = box[3];
    p.resize_h = p.out_h = size_h_;
    p.resize_w = p.out_w = size_w_;
    p.flip = rng.uniform() < flip_p_;  // RandomHorizontalFlip's draw, after the crop's
    return p;
  }
  p.height = height, p.width = width;
  // torchvision's Resize(int): the shorter side becomes `resize`, the longer is truncated.
  if (height <= width) {
    p.resize_h = resize_;
    p.resize_w = static_cast<int64_t>(static_cast<double>(resize_) * static_cast<double>(width) / static_cast<double>(height));
  } else {
    p.resize_w = resize_;
    p.resize_h = static_cast<int64_t>(static_cast<double>(resize_) * static_cast<double>(height) / static_cast<double>(width));
  }
  p.resize_h = std::max(p.resize_h, size_h_);
  p.resize_w = std::max(p.resize_w, size_w_);
  // CenterCrop's offsets round half to even, as Python's round().
  p.keep_top = static_cast<int64_t>(std::nearbyint(static_cast<double>(p.resize_h - size_h_) / 2.0));
  p.keep_left = static_cast<int64_t>(std::nearbyint(static_cast<double>(p.resize_w - size_w_) / 2.0));
  p.out_h = size_h_;
  p.out_w = size_w_;
  return p;
}

int ImagePipeline::decode_scale(const Plan& p) const {
  if (!reduced_) return 8;
  // Only 1/8, 2/8 and 4/8 of libjpeg-turbo's scaling factors have SIMD IDCTs; the others (and
  // the 10x10..14x14 IDCTs they pick for subsampled chroma) are plain C and slower than a
  // full-size decode, measured.
  for (int m : {1, 2, 4})
    if (static_cast<double>(p.height) * m / 8.0 >= static_cast<double>(p.resize_h) &&
        static_cast<double>(p.width) * m / 8.0 >= static_cast<double>(p.resize_w))
      return m;
  return 8;
}

std::pair<AxisWeights, AxisWeights> ImagePipeline::weights(const Plan& p, int scale, int64_t scaled_h,
                                                           int64_t scaled_w) const {
  const double s = scale / 8.0;
  const double y0 = static_cast<double>(p.top) * s, h = static_cast<double>(p.height) * s;
  const double x0 = static_cast<double>(p.left) * s, w = static_cast<double>(p.width) * s;
  const auto [ylo, yhi] = covered(y0, h, scaled_h);
  const auto [xlo, xhi] = covered(x0, w, scaled_w);
  return {aa_bilinear_weights(y0, h, p.resize_h, p.keep_top, p.out_h, ylo, yhi),
          aa_bilinear_weights(x0, w, p.resize_w, p.keep_left, p.out_w, xlo, xhi)};
}

ResampleOutput ImagePipeline::output(bool flip) const {
  ResampleOutput o;
  o.dtype = dtype_;
  o.channels_last = channels_last_;
  o.flip = flip;
  // ToTensor's /255 and Normalize's (x - mean) / std folded into one multiply-add.
  for (int c = 0; c < 3; ++c) {
    o.mul[c] = static_cast<float>(1.0 / (255.0 * std_[static_cast<size_t>(c)]));
    o.add[c] = static_cast<float>(-mean_[static_cast<size_t>(c)] / std_[static_cast<size_t>(c)]);
  }
  return o;
}

void ImagePipeline::load_into(const std::string& path, uint64_t seed, void* out) const {
  Scratch& s = scratch();
  const std::string why = read_file_bytes(path, s.bytes);
  MPX_CHECK(why.empty(), "read_image: ", path, ": ", why);
  const bool jpeg = s.bytes.size() >= 2 && s.bytes[0] == 0xFF && s.bytes[1] == 0xD8;
  if (!jpeg || !have_jpeg_region_decode()) {
    const Tensor img = read_image(path, 3);
    apply_into(img, plan(img.size(0), img.size(1), seed), out);
    return;
  }
  Plan p;
  std::pair<AxisWeights, AxisWeights> w;
  const JpegRegion r = decode_jpeg_region(
      s.bytes, path, max_image_pixels(),
      [&](int width, int height) {
        p = plan(height, width, seed);
        const int m = decode_scale(p);
        w = weights(p, m, jpeg_scaled_size(height, m), jpeg_scaled_size(width, m));
        // One pixel more on each side: chroma upsampling at the region's edge then uses the
        // same neighbours as in a full decode.
        return JpegPlan{m, static_cast<int>(w.second.lo) - 1, static_cast<int>(w.first.lo) - 1,
                        static_cast<int>(w.second.hi) + 1, static_cast<int>(w.first.hi) + 1};
      },
      s.pixels);
  MPX_CHECK(r.x0 <= w.second.lo && r.x0 + r.width >= w.second.hi && r.y0 <= w.first.lo && r.y0 + r.height >= w.first.hi,
            "ImagePipeline: ", path, ": the decoded region misses pixels the crop needs");
  resample_rgb(s.pixels.data(), static_cast<int64_t>(r.width) * 3, r.y0, r.x0, w.first, w.second, output(p.flip), out,
               s.rows);
}

Tensor ImagePipeline::load(const std::string& path, uint64_t seed) const {
  Tensor t = empty(output_shape(), dtype_);
  load_into(path, seed, t.raw_data());
  return t;
}

void ImagePipeline::apply_into(const Tensor& image, const Plan& p, void* out) const {
  MPX_CHECK(image.dtype() == kUInt8 && image.dim() == 3 && image.size(2) == 3,
            "ImagePipeline: expected a u8 RGB image [H,W,3], got ", dtype_name(image.dtype()), shape_str(image.sizes()));
  const Tensor c = image.cpu().contiguous();
  const auto w = weights(p, 8, c.size(0), c.size(1));
  resample_rgb(c.data_ptr<uint8_t>(), c.size(1) * 3, 0, 0, w.first, w.second, output(p.flip), out, scratch().rows);
}

Tensor ImagePipeline::apply(const Tensor& image, uint64_t seed) const {
  MPX_CHECK(image.dim() == 3, "ImagePipeline: expected a u8 RGB image [H,W,3], got ", dtype_name(image.dtype()),
            shape_str(image.sizes()));
  Tensor t = empty(output_shape(), dtype_);
  apply_into(image, plan(image.size(0), image.size(1), seed), t.raw_data());
  return t;
}

transforms::Transform ImagePipeline::transform() const {
  return transforms::Transform(
      [self = *this](const Tensor& image, transforms::Rng& rng) {
        MPX_CHECK(image.dim() == 3, "ImagePipeline: expected a u8 RGB image [H,W,3], got ", dtype_name(image.dtype()),
                  shape_str(image.sizes()));
        Tensor t = empty(self.output_shape(), self.dtype_);
        self.apply_into(image, self.plan(image.size(0), image.size(1), rng), t.raw_data());
        return t;
      },
      train_ ? "ImagePipeline(train)" : "ImagePipeline(eval)");
}

}  // namespace mpx::data
