// Transforms over a small planar f32 image type; u8 HWC and floating CHW tensors are
// unpacked into it and packed back in their own layout and dtype.
#include "data/transforms.h"

#include <algorithm>
#include <cmath>

#include "core/random.h"
#include "data/resample.h"

namespace mpx::data::transforms {

double Rng::uniform() { return random::uniform(seed_, counter_++, 0x7a1); }
int64_t Rng::randint(int64_t lo, int64_t hi) {
  MPX_CHECK(hi > lo, "transforms: randint needs hi > lo, got [", lo, ", ", hi, ")");
  const auto span = static_cast<uint64_t>(hi - lo);
  const uint64_t r = random::hash(seed_, counter_++, 0x7a2);
  return lo + static_cast<int64_t>((static_cast<unsigned __int128>(r) * span) >> 64);
}

Tensor Transform::operator()(const Tensor& img, Rng& rng) const {
  MPX_CHECK(defined(), "transforms: applying an empty Transform");
  MPX_CHECK(img.defined(), name_, ": the image is undefined");
  return fn_(img, rng);
}

namespace {
/// Planar f32 pixels plus how to pack them back.
struct Img {
  int64_t c = 0, h = 0, w = 0;
  std::vector<float> px;  // [c][h][w]
  bool u8 = false;        // came as u8 [H,W(,C)]
  bool had_channel = true;
  DType dtype = kFloat32;
  float& at(int64_t ch, int64_t y, int64_t x) { return px[static_cast<size_t>((ch * h + y) * w + x)]; }
  float at(int64_t ch, int64_t y, int64_t x) const { return px[static_cast<size_t>((ch * h + y) * w + x)]; }
};

Img unpack(const Tensor& t, const std::string& who) {
  Img im;
  im.dtype = t.dtype();
  MPX_CHECK(t.dim() == 2 || t.dim() == 3, who, ": expected an image u8 [H,W,C] / [H,W] or floating [C,H,W] / [H,W], got ",
            dtype_name(t.dtype()), shape_str(t.sizes()));
  im.had_channel = t.dim() == 3;
  if (t.dtype() == kUInt8) {
    im.u8 = true;
    Tensor c = t.cpu().contiguous();
    im.h = c.size(0);
    im.w = c.size(1);
    im.c = im.had_channel ? c.size(2) : 1;
    im.px.resize(static_cast<size_t>(im.c * im.h * im.w));
    const uint8_t* p = c.data_ptr<uint8_t>();
    for (int64_t y = 0; y < im.h; ++y)
      for (int64_t x = 0; x < im.w; ++x)
        for (int64_t ch = 0; ch < im.c; ++ch) im.at(ch, y, x) = p[(y * im.w + x) * im.c + ch];
    return im;
  }
  MPX_CHECK(t.is_floating_point(), who, ": images must be u8 or floating, got ", dtype_name(t.dtype()));
  Tensor c = t.cpu().to(kFloat32).contiguous();
  im.c = im.had_channel ? c.size(0) : 1;
  im.h = c.size(im.had_channel ? 1 : 0);
  im.w = c.size(im.had_channel ? 2 : 1);
  const float* p = c.data_ptr<float>();
  im.px.assign(p, p + c.numel());
  return im;
}

Tensor pack(const Img& im) {
  if (im.u8) {
    Tensor t = empty(im.had_channel ? IntList{im.h, im.w, im.c} : IntList{im.h, im.w}, kUInt8);
    uint8_t* p = t.data_ptr<uint8_t>();
    for (int64_t y = 0; y < im.h; ++y)
      for (int64_t x = 0; x < im.w; ++x)
        for (int64_t ch = 0; ch < im.c; ++ch)
          p[(y * im.w + x) * im.c + ch] = static_cast<uint8_t>(std::clamp(std::nearbyint(im.at(ch, y, x)), 0.f, 255.f));
    return t;
  }
  Tensor t = empty(im.had_channel ? IntList{im.c, im.h, im.w} : IntList{im.h, im.w}, kFloat32);
  std::copy(im.px.begin(), im.px.end(), t.data_ptr<float>());
  return im.dtype == kFloat32 ? t : t.to(im.dtype);
}

Img like(const Img& src, int64_t h, int64_t w) {
  Img o;
  o.c = src.c;
  o.h = h;
  o.w = w;
  o.u8 = src.u8;
  o.had_channel = src.had_channel;
  o.dtype = src.dtype;
  o.px.assign(static_cast<size_t>(o.c * h * w), 0.f);
  return o;
}

/// The (h, w) window at (top, left); pixels outside the image are zero.
Img crop(const Img& im, int64_t top, int64_t left, int64_t h, int64_t w) {
  Img o = like(im, h, w);
  for (int64_t ch = 0; ch < im.c; ++ch)
    for (int64_t y = 0; y < h; ++y) {
      const int64_t sy = top + y;
      if (sy < 0 || sy >= im.h) continue;
      for (int64_t x = 0; x < w; ++x) {
        const int64_t sx = left + x;
        if (sx >= 0 && sx < im.w) o.at(ch, y, x) = im.at(ch, sy, sx);
      }
    }
  return o;
}

/// Bilinear with half-pixel centres, as torch.nn.functional.interpolate(align_corners=False).
Img resize(const Img& im, int64_t oh, int64_t ow) {
  if (oh == im.h && ow == im.w) return im;
  Img o = like(im, oh, ow);
  struct Tap { int64_t i0, i1; float l1; };
  auto taps = [](int64_t in, int64_t out) {
    std::vector<Tap> t(static_cast<size_t>(out));
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    for (int64_t d = 0; d < out; ++d) {
      double s = scale * (static_cast<double>(d) + 0.5) - 0.5;
      if (s < 0) s = 0;
      auto i0 = static_cast<int64_t>(s);
      if (i0 > in - 1) i0 = in - 1;
      t[static_cast<size_t>(d)] = {i0, i0 + (i0 < in - 1 ? 1 : 0), static_cast<float>(s - static_cast<double>(i0))};
    }
    return t;
  };
  const auto ty = taps(im.h, oh), tx = taps(im.w, ow);
  for (int64_t ch = 0; ch < im.c; ++ch)
    for (int64_t y = 0; y < oh; ++y) {
      const Tap& a = ty[static_cast<size_t>(y)];
      for (int64_t x = 0; x < ow; ++x) {
        const Tap& b = tx[static_cast<size_t>(x)];
        const float top = im.at(ch, a.i0, b.i0) * (1 - b.l1) + im.at(ch, a.i0, b.i1) * b.l1;
        const float bot = im.at(ch, a.i1, b.i0) * (1 - b.l1) + im.at(ch, a.i1, b.i1) * b.l1;
        o.at(ch, y, x) = top * (1 - a.l1) + bot * a.l1;
      }
    }
  return o;
}

// Antialiased bilinear (torchvision's default, antialias=True): the weights are the fused
// pipeline's (data/resample.h), applied rows first, then columns.
Img resize_aa(const Img& im, int64_t oh, int64_t ow) {
  if (oh == im.h && ow == im.w) return im;
  const AxisWeights wy = aa_bilinear_weights(0, static_cast<double>(im.h), oh, 0, oh, 0, im.h);
  const AxisWeights wx = aa_bilinear_weights(0, static_cast<double>(im.w), ow, 0, ow, 0, im.w);
  std::vector<float> rows(static_cast<size_t>(im.h * ow));
  Img o = like(im, oh, ow);
  for (int64_t ch = 0; ch < im.c; ++ch) {
    for (int64_t y = wy.lo; y < wy.hi; ++y)
      for (int64_t x = 0; x < ow; ++x) {
        const float* w = &wx.weights[static_cast<size_t>(x * wx.taps)];
        const int64_t f = wx.first[static_cast<size_t>(x)];
        float acc = 0;
        for (int64_t k = 0; k < wx.count[static_cast<size_t>(x)]; ++k) acc += w[k] * im.at(ch, y, f + k);
        rows[static_cast<size_t>(y * ow + x)] = acc;
      }
    for (int64_t y = 0; y < oh; ++y) {
      const float* w = &wy.weights[static_cast<size_t>(y * wy.taps)];
      const int64_t f = wy.first[static_cast<size_t>(y)];
      for (int64_t x = 0; x < ow; ++x) {
        float acc = 0;
        for (int64_t k = 0; k < wy.count[static_cast<size_t>(y)]; ++k) acc += w[k] * rows[static_cast<size_t>((f + k) * ow + x)];
        o.at(ch, y, x) = acc;
      }
    }
  }
  return o;
}

Img resize_any(const Img& im, int64_t oh, int64_t ow, Antialias antialias) {
  return antialias == Antialias::on ? resize_aa(im, oh, ow) : resize(im, oh, ow);
}

void check_size(const char* who, int64_t h, int64_t w) {
  MPX_CHECK(h > 0 && w > 0, who, ": size must be positive, got (", h, ", ", w, ")");
}
}  // namespace

Compose::Compose(std::vector<Transform> ts)
    : Transform(
          [ts](const Tensor& img, Rng& rng) {
            Tensor x = img;
            for (const auto& t : ts) x = t(x, rng);
            return x;
          },
          "Compose") {
  for (size_t i = 0; i < ts.size(); ++i) MPX_CHECK(ts[i].defined(), "Compose: transform ", i, " is empty");
}

PILToTensor::PILToTensor()
    : Transform(
          [](const Tensor& img, Rng&) {
            MPX_CHECK(img.dtype() == kUInt8 && (img.dim() == 2 || img.dim() == 3),
                      "PILToTensor: expected a u8 image [H,W,C] or [H,W], got ", dtype_name(img.dtype()),
                      shape_str(img.sizes()));
            return img.dim() == 2 ? img.unsqueeze(0).contiguous() : img.permute({2, 0, 1}).contiguous();
          },
          "PILToTensor") {}

ToTensor::ToTensor()
    : Transform(
          [](const Tensor& img, Rng&) {
            if (img.is_floating_point()) return img;
            MPX_CHECK(img.dtype() == kUInt8 && (img.dim() == 2 || img.dim() == 3),
                      "ToTensor: expected a u8 image [H,W,C] or [H,W], got ", dtype_name(img.dtype()),
                      shape_str(img.sizes()));
            Img im = unpack(img, "ToTensor");
            for (auto& v : im.px) v *= 1.0f / 255.0f;
            im.u8 = false;
            im.had_channel = true;
            im.dtype = kFloat32;
            return pack(im);
          },
          "ToTensor") {}

Normalize::Normalize(std::vector<double> mean, std::vector<double> std)
    : Transform(
          [mean, std](const Tensor& img, Rng&) {
            MPX_CHECK(img.is_floating_point() && img.dim() == 3, "Normalize: expected a floating [C,H,W] image, got ",
                      dtype_name(img.dtype()), shape_str(img.sizes()), "; apply ToTensor first");
            Img im = unpack(img, "Normalize");
            MPX_CHECK(mean.size() == 1 || static_cast<int64_t>(mean.size()) == im.c, "Normalize: ", mean.size(),
                      " means for an image with ", im.c, " channels");
            const size_t plane = static_cast<size_t>(im.h * im.w);
            for (int64_t ch = 0; ch < im.c; ++ch) {
              const auto k = static_cast<size_t>(mean.size() == 1 ? 0 : ch);
              const auto m = static_cast<float>(mean[k]), inv = static_cast<float>(1.0 / std[k]);
              for (size_t i = 0; i < plane; ++i) {
                float& v = im.px[static_cast<size_t>(ch) * plane + i];
                v = (v - m) * inv;
              }
            }
            return pack(im);
          },
          "Normalize") {
  MPX_CHECK(!mean.empty() && mean.size() == std.size(), "Normalize: mean and std need the same non-zero length, got ",
            mean.size(), " and ", std.size());
  for (double s : std) MPX_CHECK(s != 0, "Normalize: std must be non-zero");
}

Resize::Resize(int64_t size, Antialias antialias)
    : Transform(
          [size, antialias](const Tensor& img, Rng&) {
            Img im = unpack(img, "Resize");
            int64_t oh, ow;
            if (im.h <= im.w) {
              oh = size;
              ow = static_cast<int64_t>(static_cast<double>(size) * static_cast<double>(im.w) / static_cast<double>(im.h));
            } else {
              ow = size;
              oh = static_cast<int64_t>(static_cast<double>(size) * static_cast<double>(im.h) / static_cast<double>(im.w));
            }
            return pack(resize_any(im, std::max<int64_t>(oh, 1), std::max<int64_t>(ow, 1), antialias));
          },
          "Resize") {
  check_size("Resize", size, size);
}
Resize::Resize(int64_t height, int64_t width, Antialias antialias)
    : Transform([height, width, antialias](
                    const Tensor& img, Rng&) { return pack(resize_any(unpack(img, "Resize"), height, width, antialias)); },
                "Resize") {
  check_size("Resize", height, width);
}

CenterCrop::CenterCrop(int64_t height, int64_t width)
    : Transform(
          [height, width](const Tensor& img, Rng&) {
            Img im = unpack(img, "CenterCrop");
            // torchvision pads a too-small side by floor/ceil halves, else rounds half to even.
            auto offset = [](int64_t in, int64_t out) {
              if (out > in) return -((out - in) / 2);
              return static_cast<int64_t>(std::nearbyint(static_cast<double>(in - out) / 2.0));
            };
            return pack(crop(im, offset(im.h, height), offset(im.w, width), height, width));
          },
          "CenterCrop") {
  check_size("CenterCrop", height, width);
}

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : Transform(
          [height, width, padding](const Tensor& img, Rng& rng) {
            Img im = unpack(img, "RandomCrop");
            const int64_t ph = im.h + 2 * padding, pw = im.w + 2 * padding;
            MPX_CHECK(ph >= height && pw >= width, "RandomCrop: crop (", height, ", ", width,
                      ") is larger than the padded image (", ph, ", ", pw, ")");
            const int64_t top = rng.randint(0, ph - height + 1), left = rng.randint(0, pw - width + 1);
            return pack(crop(im, top - padding, left - padding, height, width));
          },
          "RandomCrop") {
  check_size("RandomCrop", height, width);
  MPX_CHECK(padding >= 0, "RandomCrop: padding must be >= 0, got ", padding);
}

RandomHorizontalFlip::RandomHorizontalFlip(double p)
    : Transform(
          [p](const Tensor& img, Rng& rng) {
            if (!(rng.uniform() < p)) return img;
            Img im = unpack(img, "RandomHorizontalFlip");
            for (int64_t ch = 0; ch < im.c; ++ch)
              for (int64_t y = 0; y < im.h; ++y)
                std::reverse(&im.at(ch, y, 0), &im.at(ch, y, 0) + im.w);
            return pack(im);
          },
          "RandomHorizontalFlip") {
  MPX_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
}

std::vector<int64_t> random_resized_crop_params(int64_t height, int64_t width, std::pair<double, double> scale,
                                                std::pair<double, double> ratio, Rng& rng) {
  const double area = static_cast<double>(height * width);
  const double lr0 = std::log(ratio.first), lr1 = std::log(ratio.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(scale.first, scale.second);
    const double aspect = std::exp(rng.uniform(lr0, lr1));
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * aspect)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t i = rng.randint(0, height - h + 1), j = rng.randint(0, width - w + 1);
      return {i, j, h, w};
    }
  }
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < std::min(ratio.first, ratio.second)) {
    h = static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / std::min(ratio.first, ratio.second)));
  } else if (in_ratio > std::max(ratio.first, ratio.second)) {
    w = static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * std::max(ratio.first, ratio.second)));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

RandomResizedCrop::RandomResizedCrop(int64_t height, int64_t width, std::pair<double, double> scale,
                                     std::pair<double, double> ratio, Antialias antialias)
    : Transform(
          [height, width, scale, ratio, antialias](const Tensor& img, Rng& rng) {
            Img im = unpack(img, "RandomResizedCrop");
            const auto p = random_resized_crop_params(im.h, im.w, scale, ratio, rng);
            return pack(resize_any(crop(im, p[0], p[1], p[2], p[3]), height, width, antialias));
          },
          "RandomResizedCrop") {
  check_size("RandomResizedCrop", height, width);
  MPX_CHECK(scale.first > 0 && scale.first <= scale.second, "RandomResizedCrop: scale must be 0 < lo <= hi, got (",
            scale.first, ", ", scale.second, ")");
  MPX_CHECK(ratio.first > 0 && ratio.first <= ratio.second, "RandomResizedCrop: ratio must be 0 < lo <= hi, got (",
            ratio.first, ", ", ratio.second, ")");
}

}  // namespace mpx::data::transforms
