// torchvision-style transforms on tensors in their own layout: u8 [H,W,C] images stay u8 (crops
// copy rows, flips reverse them, resizes run the fused pipeline's resampler with weights cached
// per size), float images stay planar f32; ToTensor and Normalize are one pass each. A Compose
// of torchvision's ImageNet or CIFAR steps runs on u8 images as one ImagePipeline pass.
#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/random.h"
#include "data/image_pipeline.h"
#include "data/resample.h"
#include "ops/elementwise.h"

namespace mpx::data::transforms {

using Kind = TransformSpec::Kind;

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

const TransformSpec& Transform::spec() const {
  static const TransformSpec custom;
  return spec_ ? *spec_ : custom;
}

std::string Transform::how_it_runs() const {
  const TransformSpec& s = spec();
  if (s.kind != Kind::compose) return name_;
  if (s.fused) return "fused: " + s.fused->describe() + " in one pass";
  return "composed: " + name_ + " step by step (" + s.not_fused + ")";
}

namespace {
/// An image as the kernels take it: u8 [H,W,C] or f32 [C,H,W], contiguous on the CPU.
struct Image {
  Tensor t;
  bool u8 = false;
  int64_t c = 1, h = 0, w = 0;
  bool had_channel = true;  // false: [H,W], one channel, and results drop it again
  DType dtype = kFloat32;   // the caller's dtype, restored at the end
};

Image image(const Tensor& t, const std::string& who) {
  MPX_CHECK(t.dim() == 2 || t.dim() == 3, who, ": expected an image u8 [H,W,C] / [H,W] or floating [C,H,W] / [H,W], got ",
            dtype_name(t.dtype()), shape_str(t.sizes()));
  Image im;
  im.dtype = t.dtype();
  im.had_channel = t.dim() == 3;
  if (t.dtype() == kUInt8) {
    im.u8 = true;
    im.t = t.cpu().contiguous();
    im.h = im.t.size(0);
    im.w = im.t.size(1);
    im.c = im.had_channel ? im.t.size(2) : 1;
    return im;
  }
  MPX_CHECK(t.is_floating_point(), who, ": images must be u8 or floating, got ", dtype_name(t.dtype()));
  im.t = t.cpu().to(kFloat32).contiguous();
  im.c = im.had_channel ? im.t.size(0) : 1;
  im.h = im.t.size(im.had_channel ? 1 : 0);
  im.w = im.t.size(im.had_channel ? 2 : 1);
  return im;
}

/// An uninitialized image of the same kind, h x w.
Tensor alloc(const Image& im, int64_t h, int64_t w) {
  if (im.u8) return empty(im.had_channel ? IntList{h, w, im.c} : IntList{h, w}, kUInt8);
  return empty(im.had_channel ? IntList{im.c, h, w} : IntList{h, w}, kFloat32);
}
/// The result in the caller's floating dtype (kernels run in f32).
Tensor finish(Tensor out, const Image& im) { return !im.u8 && im.dtype != kFloat32 ? out.to(im.dtype) : out; }

/// The (h, w) window at (top, left); pixels outside the image are zero.
Tensor crop(const Image& im, int64_t top, int64_t left, int64_t h, int64_t w) {
  Tensor o = alloc(im, h, w);
  const bool inside = top >= 0 && left >= 0 && top + h <= im.h && left + w <= im.w;
  const size_t es = im.u8 ? 1 : sizeof(float);
  const int64_t px = im.u8 ? im.c : 1;  // elements per pixel in a row
  auto* dst = static_cast<uint8_t*>(o.raw_data());
  const auto* src = static_cast<const uint8_t*>(im.t.raw_data());
  if (!inside) std::memset(dst, 0, static_cast<size_t>(o.numel()) * es);
  const int64_t x0 = std::clamp<int64_t>(-left, 0, w), x1 = std::clamp<int64_t>(im.w - left, x0, w);
  const int64_t planes = im.u8 ? 1 : im.c;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t y = 0; y < h; ++y) {
      const int64_t sy = top + y;
      if (sy < 0 || sy >= im.h || x1 <= x0) continue;
      std::memcpy(dst + static_cast<size_t>(((pl * h + y) * w + x0) * px) * es,
                  src + static_cast<size_t>(((pl * im.h + sy) * im.w + left + x0) * px) * es,
                  static_cast<size_t>((x1 - x0) * px) * es);
    }
  return o;
}

Tensor flip(const Image& im) {
  Tensor o = alloc(im, im.h, im.w);
  if (im.u8) {
    const uint8_t* s = im.t.data_ptr<uint8_t>();
    uint8_t* d = o.data_ptr<uint8_t>();
    const int64_t c = im.c;
    for (int64_t y = 0; y < im.h; ++y)
      for (int64_t x = 0; x < im.w; ++x)
        std::memcpy(d + (y * im.w + x) * c, s + (y * im.w + im.w - 1 - x) * c, static_cast<size_t>(c));
    return o;
  }
  const float* s = im.t.data_ptr<float>();
  float* d = o.data_ptr<float>();
  for (int64_t r = 0; r < im.c * im.h; ++r) std::reverse_copy(s + r * im.w, s + (r + 1) * im.w, d + r * im.w);
  return o;
}

/// The weights of an `in`-pixel axis resized to `out`, from a small per-thread cache: a data set's
/// images share a few sizes, and the weights cost more than the resample of a small image.
std::shared_ptr<const AxisWeights> weights(int64_t in, int64_t out, Antialias aa) {
  struct Entry {
    int64_t in, out;
    Antialias aa;
    std::shared_ptr<const AxisWeights> w;
  };
  thread_local std::vector<Entry> cache;  // most recently used last
  for (size_t i = cache.size(); i-- > 0;)
    if (cache[i].in == in && cache[i].out == out && cache[i].aa == aa) {
      Entry e = cache[i];
      cache.erase(cache.begin() + static_cast<std::ptrdiff_t>(i));
      cache.push_back(e);
      return e.w;
    }
  if (cache.size() >= 16) cache.erase(cache.begin());
  auto w = std::make_shared<const AxisWeights>(aa == Antialias::on ? aa_bilinear_weights(0, static_cast<double>(in), out, 0,
                                                                                         out, 0, in)
                                                                   : bilinear_weights(in, out));
  cache.push_back({in, out, aa, w});
  return w;
}

/// The box (top, left, bh, bw), inside the image, resized to (oh, ow).
Tensor resize(const Image& im, int64_t top, int64_t left, int64_t bh, int64_t bw, int64_t oh, int64_t ow, Antialias aa) {
  if (oh == bh && ow == bw) return top == 0 && left == 0 && bh == im.h && bw == im.w ? im.t : crop(im, top, left, bh, bw);
  const auto wy = weights(bh, oh, aa), wx = weights(bw, ow, aa);
  thread_local std::vector<float> scratch;
  Tensor o = alloc(im, oh, ow);
  if (im.u8) {
    MPX_CHECK(im.c >= 1 && im.c <= 4, "Resize: u8 images have 1 to 4 channels, got ", im.c);
    ResampleOutput out;
    out.dtype = kUInt8;
    out.channels_last = true;
    resample_u8(im.t.data_ptr<uint8_t>() + (top * im.w + left) * im.c, im.w * im.c, static_cast<int>(im.c), 0, 0, *wy,
                *wx, out, o.raw_data(), scratch);
    return o;
  }
  const bool whole = top == 0 && left == 0 && bh == im.h && bw == im.w;
  const Tensor box = whole ? im.t : crop(im, top, left, bh, bw);
  resample_planar(box.data_ptr<float>(), im.c, bh, bw, *wy, *wx, o.data_ptr<float>(), scratch);
  return o;
}

void check_size(const char* who, int64_t h, int64_t w) {
  MPX_CHECK(h > 0 && w > 0, who, ": size must be positive, got (", h, ", ", w, ")");
}

TransformSpec spec_of(Kind k) {
  TransformSpec s;
  s.kind = k;
  return s;
}
}  // namespace

Compose::Compose(std::vector<Transform> ts, bool fuse) {
  TransformSpec spec = spec_of(Kind::compose);
  std::string names;
  for (size_t i = 0; i < ts.size(); ++i) {
    MPX_CHECK(ts[i].defined(), "Compose: transform ", i, " is empty");
    names += (i ? ", " : "") + ts[i].name();
    // Nested Composes are flattened: one list of steps for the fused pass to read.
    if (ts[i].spec().kind == Kind::compose) spec.steps.insert(spec.steps.end(), ts[i].spec().steps.begin(), ts[i].spec().steps.end());
    else spec.steps.push_back(ts[i]);
  }
  name_ = "Compose(" + names + ")";
  spec_ = std::make_shared<const TransformSpec>(spec);  // what from_transform reads
  if (fuse) {
    if (auto p = ImagePipeline::from_transform(*this, &spec.not_fused)) spec.fused = std::make_shared<const ImagePipeline>(*p);
  } else {
    spec.not_fused = "fusing turned off";
  }
  spec_ = std::make_shared<const TransformSpec>(std::move(spec));
  fn_ = [steps = spec_->steps, fused = spec_->fused](const Tensor& img, Rng& rng) {
    if (fused && fused->accepts(img)) return fused->apply(img, rng);
    Tensor x = img;
    for (const auto& t : steps) x = t(x, rng);
    return x;
  };
}

PILToTensor::PILToTensor()
    : Transform(
          [](const Tensor& img, Rng&) {
            MPX_CHECK(img.dtype() == kUInt8 && (img.dim() == 2 || img.dim() == 3),
                      "PILToTensor: expected a u8 image [H,W,C] or [H,W], got ", dtype_name(img.dtype()),
                      shape_str(img.sizes()));
            return img.dim() == 2 ? img.unsqueeze(0).contiguous() : img.permute({2, 0, 1}).contiguous();
          },
          "PILToTensor", spec_of(Kind::pil_to_tensor)) {}

ToTensor::ToTensor()
    : Transform(
          [](const Tensor& img, Rng&) {
            if (img.is_floating_point()) return img;
            MPX_CHECK(img.dtype() == kUInt8 && (img.dim() == 2 || img.dim() == 3),
                      "ToTensor: expected a u8 image [H,W,C] or [H,W], got ", dtype_name(img.dtype()),
                      shape_str(img.sizes()));
            const Image im = image(img, "ToTensor");
            Tensor o = empty({im.c, im.h, im.w}, kFloat32);
            const uint8_t* s = im.t.data_ptr<uint8_t>();
            float* d = o.data_ptr<float>();
            const int64_t n = im.h * im.w, c = im.c;
            constexpr float k = 1.0f / 255.0f;
            for (int64_t ch = 0; ch < c; ++ch)
              for (int64_t i = 0; i < n; ++i) d[ch * n + i] = static_cast<float>(s[i * c + ch]) * k;
            return o;
          },
          "ToTensor", spec_of(Kind::to_tensor)) {}

namespace {
TransformSpec normalize_spec(std::vector<double> mean, std::vector<double> std) {
  TransformSpec s = spec_of(Kind::normalize);
  s.mean = std::move(mean);
  s.std = std::move(std);
  return s;
}
}  // namespace

namespace {
/// Normalize on other than one [C,H,W] image, as LibTorch's Normalize<> (a batch after Stack<>, a
/// flat vector): (x - mean) / std with mean and std as [C, 1, 1], so C is dim -3 (one value: any shape).
Tensor normalize_any(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& std) {
  const auto c = static_cast<int64_t>(mean.size());
  MPX_CHECK(c == 1 || (x.dim() >= 3 && x.size(-3) == c), "Normalize: ", c, " means for a tensor of shape ",
            shape_str(x.sizes()), "; the channels are dim -3 ([..., C, H, W])");
  const IntList shape = c == 1 ? IntList{} : IntList{c, 1, 1};
  const Tensor m = tensor(mean, shape).to(x.dtype()), s = tensor(std, shape).to(x.dtype());
  return (x - m) / s;
}
}  // namespace

detail::NormalizeTransform::NormalizeTransform(std::vector<double> mean, std::vector<double> std)
    : Transform(
          [mean, std](const Tensor& img, Rng&) {
            MPX_CHECK(img.is_floating_point() && img.dim() >= 1,
                      "Normalize: expected a floating [C,H,W] image (or [..., C, H, W]), got ", dtype_name(img.dtype()),
                      shape_str(img.sizes()), "; apply ToTensor first");
            if (img.dim() != 3) return normalize_any(img, mean, std);
            const Image im = image(img, "Normalize");
            MPX_CHECK(mean.size() == 1 || static_cast<int64_t>(mean.size()) == im.c, "Normalize: ", mean.size(),
                      " means for an image with ", im.c, " channels");
            Tensor o = empty({im.c, im.h, im.w}, kFloat32);
            const float* s = im.t.data_ptr<float>();
            float* d = o.data_ptr<float>();
            const int64_t plane = im.h * im.w;
            for (int64_t ch = 0; ch < im.c; ++ch) {
              const auto k = static_cast<size_t>(mean.size() == 1 ? 0 : ch);
              const auto m = static_cast<float>(mean[k]), inv = static_cast<float>(1.0 / std[k]);
              for (int64_t i = 0; i < plane; ++i) d[ch * plane + i] = (s[ch * plane + i] - m) * inv;
            }
            return finish(o, im);
          },
          "Normalize", normalize_spec(mean, std)) {
  MPX_CHECK(!mean.empty() && mean.size() == std.size(), "Normalize: mean and std need the same non-zero length, got ",
            mean.size(), " and ", std.size());
  for (double s : std) MPX_CHECK(s != 0, "Normalize: std must be non-zero");
}

namespace {
TransformSpec sized(Kind k, int64_t size, int64_t h, int64_t w, Antialias aa = Antialias::on) {
  TransformSpec s = spec_of(k);
  s.size = size;
  s.height = h;
  s.width = w;
  s.antialias = aa;
  return s;
}
}  // namespace

Resize::Resize(int64_t size, Antialias antialias)
    : Transform(
          [size, antialias](const Tensor& img, Rng&) {
            const Image im = image(img, "Resize");
            // torchvision's Resize(int): the shorter side becomes `size`, the longer is truncated.
            int64_t oh, ow;
            if (im.h <= im.w) {
              oh = size;
              ow = static_cast<int64_t>(static_cast<double>(size) * static_cast<double>(im.w) / static_cast<double>(im.h));
            } else {
              ow = size;
              oh = static_cast<int64_t>(static_cast<double>(size) * static_cast<double>(im.h) / static_cast<double>(im.w));
            }
            return finish(resize(im, 0, 0, im.h, im.w, std::max<int64_t>(oh, 1), std::max<int64_t>(ow, 1), antialias), im);
          },
          "Resize", sized(Kind::resize, size, 0, 0, antialias)) {
  check_size("Resize", size, size);
}
Resize::Resize(int64_t height, int64_t width, Antialias antialias)
    : Transform(
          [height, width, antialias](const Tensor& img, Rng&) {
            const Image im = image(img, "Resize");
            return finish(resize(im, 0, 0, im.h, im.w, height, width, antialias), im);
          },
          "Resize", sized(Kind::resize, 0, height, width, antialias)) {
  check_size("Resize", height, width);
}

CenterCrop::CenterCrop(int64_t height, int64_t width)
    : Transform(
          [height, width](const Tensor& img, Rng&) {
            const Image im = image(img, "CenterCrop");
            // torchvision pads a too-small side by floor/ceil halves, else rounds half to even.
            auto offset = [](int64_t in, int64_t out) {
              if (out > in) return -((out - in) / 2);
              return static_cast<int64_t>(std::nearbyint(static_cast<double>(in - out) / 2.0));
            };
            return finish(crop(im, offset(im.h, height), offset(im.w, width), height, width), im);
          },
          "CenterCrop", sized(Kind::center_crop, 0, height, width)) {
  check_size("CenterCrop", height, width);
}

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : Transform(
          [height, width, padding](const Tensor& img, Rng& rng) {
            const Image im = image(img, "RandomCrop");
            const int64_t ph = im.h + 2 * padding, pw = im.w + 2 * padding;
            MPX_CHECK(ph >= height && pw >= width, "RandomCrop: crop (", height, ", ", width,
                      ") is larger than the padded image (", ph, ", ", pw, ")");
            const int64_t top = rng.randint(0, ph - height + 1), left = rng.randint(0, pw - width + 1);
            return finish(crop(im, top - padding, left - padding, height, width), im);
          },
          "RandomCrop", [&] {
            TransformSpec s = sized(Kind::random_crop, 0, height, width);
            s.padding = padding;
            return s;
          }()) {
  check_size("RandomCrop", height, width);
  MPX_CHECK(padding >= 0, "RandomCrop: padding must be >= 0, got ", padding);
}

RandomHorizontalFlip::RandomHorizontalFlip(double p)
    : Transform(
          [p](const Tensor& img, Rng& rng) {
            if (!(rng.uniform() < p)) return img;
            const Image im = image(img, "RandomHorizontalFlip");
            return finish(flip(im), im);
          },
          "RandomHorizontalFlip", [&] {
            TransformSpec s = spec_of(Kind::horizontal_flip);
            s.p = p;
            return s;
          }()) {
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
            const Image im = image(img, "RandomResizedCrop");
            const auto p = random_resized_crop_params(im.h, im.w, scale, ratio, rng);
            return finish(resize(im, p[0], p[1], p[2], p[3], height, width, antialias), im);
          },
          "RandomResizedCrop", [&] {
            TransformSpec s = sized(Kind::random_resized_crop, 0, height, width, antialias);
            s.scale = scale;
            s.ratio = ratio;
            return s;
          }()) {
  check_size("RandomResizedCrop", height, width);
  MPX_CHECK(scale.first > 0 && scale.first <= scale.second, "RandomResizedCrop: scale must be 0 < lo <= hi, got (",
            scale.first, ", ", scale.second, ")");
  MPX_CHECK(ratio.first > 0 && ratio.first <= ratio.second, "RandomResizedCrop: ratio must be 0 < lo <= hi, got (",
            ratio.first, ", ", ratio.second, ")");
}

}  // namespace mpx::data::transforms
