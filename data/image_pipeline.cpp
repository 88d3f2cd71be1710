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

// A plan that only crops (no resize) of a box at the image's origin: its output is pixels copied
// (or zeros), which copy_window_u8 gives without the identity weights' arithmetic, same values.
bool copies(const ImagePipeline::Plan& p) {
  return p.resize_h == p.height && p.resize_w == p.width && p.top == 0 && p.left == 0;
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
  p.geometry_ = Geometry::resize_crop;
  p.train_ = false;
  p.flip_ = false;
  p.resize_ = resize;
  p.crop_h_ = p.crop_w_ = crop;
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
  normalize_ = true;
  return *this;
}
ImagePipeline& ImagePipeline::reduced_decode(bool r) {
  reduced_ = r;
  return *this;
}

bool ImagePipeline::fixed_shape() const {
  return geometry_ != Geometry::resize_crop || crop_h_ > 0 || resize_h_ > 0;
}

IntList ImagePipeline::output_shape() const {
  MPX_CHECK(fixed_shape(), "ImagePipeline: ", describe(), " gives each image its own size; ask output_shape(height, width)");
  int64_t h = size_h_, w = size_w_;
  if (geometry_ == Geometry::resize_crop) {
    h = crop_h_ > 0 ? crop_h_ : resize_h_;
    w = crop_w_ > 0 ? crop_w_ : resize_w_;
  }
  return channels_last_ ? IntList{h, w, 3} : IntList{3, h, w};
}

IntList ImagePipeline::output_shape(int64_t height, int64_t width, int64_t channels) const {
  transforms::Rng rng(0);  // the size never depends on the draws
  const Plan p = plan(height, width, rng);
  return channels_last_ ? IntList{p.out_h, p.out_w, channels} : IntList{channels, p.out_h, p.out_w};
}

bool ImagePipeline::accepts(const Tensor& image) const {
  return image.dtype() == kUInt8 && image.dim() == 3 && accepts_channels(image.size(2));
}

bool ImagePipeline::accepts_channels(int64_t c) const { return c == 3 || (c == 1 && (!normalize_ || mean_.size() == 1)); }

ImagePipeline::Plan ImagePipeline::plan(int64_t height, int64_t width, uint64_t seed) const {
  transforms::Rng rng(seed);
  return plan(height, width, rng);
}

ImagePipeline::Plan ImagePipeline::plan(int64_t height, int64_t width, transforms::Rng& rng) const {
  MPX_CHECK(height > 0 && width > 0, "ImagePipeline: the image is empty (", height, "x", width, ")");
  Plan p;
  p.height = height, p.width = width;
  p.resize_h = p.out_h = height;
  p.resize_w = p.out_w = width;
  switch (geometry_) {
    case Geometry::random_resized_crop: {
      const auto box = transforms::random_resized_crop_params(height, width, scale_, ratio_, rng);
      p.top = box[0], p.left = box[1], p.height = box[2], p.width = box[3];
      p.resize_h = p.out_h = size_h_;
      p.resize_w = p.out_w = size_w_;
      break;
    }
    case Geometry::random_crop: {
      // RandomCrop's draws on the zero-padded image; the window is kept in the unpadded one's coordinates.
      const int64_t ph = height + 2 * padding_, pw = width + 2 * padding_;
      MPX_CHECK(ph >= size_h_ && pw >= size_w_, "RandomCrop: crop (", size_h_, ", ", size_w_,
                ") is larger than the padded image (", ph, ", ", pw, ")");
      p.keep_top = rng.randint(0, ph - size_h_ + 1) - padding_;
      p.keep_left = rng.randint(0, pw - size_w_ + 1) - padding_;
      p.out_h = size_h_;
      p.out_w = size_w_;
      break;
    }
    case Geometry::resize_crop: {
      if (resize_ > 0) {
        // torchvision's Resize(int): the shorter side becomes `resize`, the longer is truncated.
        if (height <= width) {
          p.resize_h = resize_;
          p.resize_w = static_cast<int64_t>(static_cast<double>(resize_) * static_cast<double>(width) / static_cast<double>(height));
        } else {
          p.resize_w = resize_;
          p.resize_h = static_cast<int64_t>(static_cast<double>(resize_) * static_cast<double>(height) / static_cast<double>(width));
        }
        p.resize_h = std::max<int64_t>(p.resize_h, 1);
        p.resize_w = std::max<int64_t>(p.resize_w, 1);
      } else if (resize_h_ > 0) {
        p.resize_h = resize_h_;
        p.resize_w = resize_w_;
      }
      p.out_h = p.resize_h;
      p.out_w = p.resize_w;
      if (crop_h_ > 0) {
        // CenterCrop: offsets round half to even (Python's round()); a crop larger than the image
        // is zero-padded by floor/ceil halves, as torchvision pads.
        auto offset = [](int64_t in, int64_t out) {
          if (out > in) return -((out - in) / 2);
          return static_cast<int64_t>(std::nearbyint(static_cast<double>(in - out) / 2.0));
        };
        p.keep_top = offset(p.resize_h, crop_h_);
        p.keep_left = offset(p.resize_w, crop_w_);
        p.out_h = crop_h_;
        p.out_w = crop_w_;
      }
      break;
    }
  }
  if (flip_) p.flip = rng.uniform() < flip_p_;  // RandomHorizontalFlip's draw, after the crop's
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

ResampleOutput ImagePipeline::output(bool flip, int64_t channels) const {
  ResampleOutput o;
  o.dtype = dtype_;
  o.channels_last = channels_last_;
  o.flip = flip;
  // ToTensor's /255 and Normalize's (x - mean) / std folded into one multiply-add.
  for (int64_t c = 0; c < std::min<int64_t>(channels, 4); ++c) {
    const auto k = static_cast<size_t>(mean_.size() == 1 ? 0 : std::min<int64_t>(c, 2));
    o.mul[c] = static_cast<float>(1.0 / (255.0 * std_[k]));
    o.add[c] = static_cast<float>(-mean_[k] / std_[k]);
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
  if (r.scale == 8 && copies(p)) {
    copy_window_u8(s.pixels.data(), static_cast<int64_t>(r.width) * 3, 3, r.y0, r.x0, p.height, p.width, p.keep_top,
                   p.keep_left, p.out_h, p.out_w, output(p.flip), out, s.rows);
    return;
  }
  resample_rgb(s.pixels.data(), static_cast<int64_t>(r.width) * 3, r.y0, r.x0, w.first, w.second, output(p.flip), out,
               s.rows);
}

Tensor ImagePipeline::load(const std::string& path, uint64_t seed) const {
  if (!fixed_shape()) return apply(read_image(path, 3), seed);  // the size is known once decoded
  Tensor t = empty(output_shape(), dtype_);
  load_into(path, seed, t.raw_data());
  return t;
}

void ImagePipeline::apply_into(const Tensor& image, const Plan& p, void* out) const {
  const Tensor c = image.cpu().contiguous();
  apply_plan(c.data_ptr<uint8_t>(), c.size(0), c.size(1), c.size(2), p, out);
}

void ImagePipeline::apply_into(const uint8_t* hwc, int64_t height, int64_t width, int64_t ch, uint64_t seed,
                               void* out) const {
  MPX_CHECK(accepts_channels(ch), "ImagePipeline: ", ch, "-channel images are not taken by ", describe());
  apply_plan(hwc, height, width, ch, plan(height, width, seed), out);
}

void ImagePipeline::apply_plan(const uint8_t* hwc, int64_t height, int64_t width, int64_t ch, const Plan& p,
                               void* out) const {
  if (copies(p)) {
    copy_window_u8(hwc, width * ch, static_cast<int>(ch), 0, 0, p.height, p.width, p.keep_top, p.keep_left, p.out_h,
                   p.out_w, output(p.flip, ch), out, scratch().rows);
    return;
  }
  const auto w = weights(p, 8, height, width);
  resample_u8(hwc, width * ch, static_cast<int>(ch), 0, 0, w.first, w.second, output(p.flip, ch), out, scratch().rows);
}

Tensor ImagePipeline::apply(const Tensor& image, uint64_t seed) const {
  transforms::Rng rng(seed);
  return apply(image, rng);
}

Tensor ImagePipeline::apply(const Tensor& image, transforms::Rng& rng) const {
  MPX_CHECK(accepts(image), "ImagePipeline: expected a u8 RGB image [H,W,3]",
            normalize_ && mean_.size() == 3 ? "" : " (or grey, [H,W,1])", ", got ", dtype_name(image.dtype()),
            shape_str(image.sizes()));
  const Plan p = plan(image.size(0), image.size(1), rng);
  const int64_t ch = image.size(2);
  Tensor t = empty(channels_last_ ? IntList{p.out_h, p.out_w, ch} : IntList{ch, p.out_h, p.out_w}, dtype_);
  apply_into(image, p, t.raw_data());
  return t;
}

transforms::Transform ImagePipeline::transform() const {
  return transforms::Transform([self = *this](const Tensor& image, transforms::Rng& rng) { return self.apply(image, rng); },
                               "ImagePipeline(" + describe() + ")");
}

}  // namespace mpx::data
