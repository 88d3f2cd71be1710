// torchvision-style image transforms, each deterministic given the per-sample seed the loader
// passes (so random augmentation reproduces run to run, whatever the worker count).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mpx::data {
class ImagePipeline;
}

namespace mpx::data::transforms {

/// The random stream of one sample's transforms: draw k of seed s is a pure function of (s, k).
class Rng {
 public:
  explicit Rng(uint64_t seed) : seed_(seed) {}
  /// Uniform in [0, 1).
  double uniform();
  /// Uniform in [a, b).
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  /// Integer uniform in [lo, hi) (torch.randint's bounds); hi must exceed lo.
  int64_t randint(int64_t lo, int64_t hi);

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

/// Whether a bilinear resize filters when it shrinks (torchvision's `antialias`; an enum, so
/// `Resize(h, w)` never reads a width as a flag).
enum class Antialias : bool { off = false, on = true };

class Transform;

/// What a built-in transform is, with its settings: Compose reads its steps' specs to run them
/// as one fused pass (ImagePipeline::from_transform) where it can. A custom Transform has kind custom.
struct TransformSpec {
  enum class Kind { custom, compose, to_tensor, pil_to_tensor, normalize, resize, center_crop, random_crop,
                    horizontal_flip, random_resized_crop };
  Kind kind = Kind::custom;
  int64_t size = 0;               ///< Resize(size): the shorter side (0 when height and width are given)
  int64_t height = 0, width = 0;  ///< the output size of Resize(h, w), the crops and RandomResizedCrop
  int64_t padding = 0;            ///< RandomCrop
  double p = 0;                   ///< RandomHorizontalFlip
  std::pair<double, double> scale{0, 0}, ratio{0, 0};  ///< RandomResizedCrop
  Antialias antialias = Antialias::on;                 ///< Resize, RandomResizedCrop
  std::vector<double> mean, std;                       ///< Normalize
  std::vector<Transform> steps;                        ///< Compose: its steps, nested Composes flattened
  /// Compose: the one pass that runs it on u8 images (null when it cannot), and why not.
  std::shared_ptr<const ImagePipeline> fused;
  std::string not_fused;
};

/// Image conventions: a u8 tensor is an image as decoded, [H, W, C] or [H, W] (torchvision's
/// PIL image); a floating tensor is [C, H, W] (torchvision's tensor image). Geometric
/// transforms accept both and keep the layout and dtype; ToTensor converts the first to the
/// second; Normalize needs the second.
class Transform {
 public:
  using Fn = std::function<Tensor(const Tensor&, Rng&)>;
  Transform() = default;
  /// A custom transform: `fn` draws its randomness from the Rng it is given.
  Transform(Fn fn, std::string name) : fn_(std::move(fn)), name_(std::move(name)) {}
  /// Applies the transform drawing randomness from `rng`.
  Tensor operator()(const Tensor& img, Rng& rng) const;
  /// Applies the transform with a fresh stream seeded by `seed`.
  Tensor operator()(const Tensor& img, uint64_t seed) const {
    Rng r(seed);
    return (*this)(img, r);
  }
  /// False for a default-constructed (absent) transform.
  bool defined() const { return static_cast<bool>(fn_); }
  const std::string& name() const { return name_; }
  /// What this transform is (kind custom for one built from a function).
  const TransformSpec& spec() const;
  /// How it runs on a u8 image: "fused: <the pass>" for a Compose that runs as one
  /// ImagePipeline pass, else "composed: <steps> step by step (<why>)"; a single step says its name.
  std::string how_it_runs() const;

 protected:
  Transform(Fn fn, std::string name, TransformSpec spec)
      : fn_(std::move(fn)), name_(std::move(name)), spec_(std::make_shared<const TransformSpec>(std::move(spec))) {}
  Fn fn_;
  std::string name_;
  std::shared_ptr<const TransformSpec> spec_;
};

/// Applies transforms in order, sharing one random stream. When the steps are torchvision's
/// ImageNet or CIFAR recipe — [RandomResizedCrop | Resize [CenterCrop] | CenterCrop | RandomCrop]
/// [RandomHorizontalFlip] [ToTensor [Normalize] | PILToTensor], any of them absent, resizes
/// antialiased — a u8 image goes through them as one ImagePipeline pass: the same random draws
/// in the same order, no intermediate image, and no rounding to u8 after the resize (where PIL
/// rounds; within half a level of that). ImageFolder runs such a Compose from the JPEG, decoding
/// only the crop. Other steps, other orders and float images run step by step. `fuse` false
/// always runs the steps one by one (PIL's rounding after a resize, for comparisons).
struct Compose : Transform {
  explicit Compose(std::vector<Transform> ts, bool fuse = true);
};
/// u8 [H,W,C] or [H,W] -> f32 [C,H,W] in [0, 1]; floating input passes through unchanged.
struct ToTensor : Transform {
  ToTensor();
};
/// u8 [H,W,C] or [H,W] -> u8 [C,H,W], values unchanged (torchvision's PILToTensor): batches
/// stay u8 (a quarter of f32's bytes to copy) for DevicePrefetcher to scale and normalize.
struct PILToTensor : Transform {
  PILToTensor();
};
namespace detail {
struct NormalizeTransform : Transform {
  NormalizeTransform(std::vector<double> mean, std::vector<double> std);
};
}  // namespace detail
/// (x - mean[c]) / std[c] per channel of a floating [C,H,W] image; one value means all channels.
/// As LibTorch's, also a batch [..., C, H, W] and, with one value, a floating tensor of any shape.
/// A template as LibTorch's: `Normalize<>(0.1307, 0.3081)`; torchvision's `Normalize({...}, {...})`
/// deduces the same type.
template <typename Target = Tensor>
struct Normalize : detail::NormalizeTransform {
  Normalize(std::vector<double> mean, std::vector<double> std) : NormalizeTransform(std::move(mean), std::move(std)) {}
  Normalize(double mean, double std) : NormalizeTransform({mean}, {std}) {}
};
/// Bilinear resize with half-pixel centres. One size: the shorter side becomes `size` and the
/// longer keeps the aspect ratio (truncated, as torchvision). `antialias` (torchvision's default):
/// when shrinking, the triangle filter widens with the factor so every input pixel counts (PIL's
/// BILINEAR, the fused ImagePipeline's weights); Antialias::off samples the 2x2 nearest pixels.
struct Resize : Transform {
  explicit Resize(int64_t size, Antialias antialias = Antialias::on);
  Resize(int64_t height, int64_t width, Antialias antialias = Antialias::on);
};
/// The centred (h, w) window (torchvision's rounding); zero-padded when the image is smaller.
struct CenterCrop : Transform {
  explicit CenterCrop(int64_t size) : CenterCrop(size, size) {}
  CenterCrop(int64_t height, int64_t width);
};
/// Zero-pads `padding` pixels on every side, then takes a uniformly placed (h, w) window.
struct RandomCrop : Transform {
  explicit RandomCrop(int64_t size, int64_t padding = 0) : RandomCrop(size, size, padding) {}
  RandomCrop(int64_t height, int64_t width, int64_t padding);
};
/// Mirrors left-right with probability p.
struct RandomHorizontalFlip : Transform {
  explicit RandomHorizontalFlip(double p = 0.5);
};
/// torchvision's RandomResizedCrop: up to 10 tries for a window with area fraction in `scale`
/// and log-uniform aspect ratio in `ratio`, else a centre crop clamped to the ratio range;
/// the window is resized bilinearly to (h, w), antialiased as Resize.
struct RandomResizedCrop : Transform {
  explicit RandomResizedCrop(int64_t size, std::pair<double, double> scale = {0.08, 1.0},
                             std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0}, Antialias antialias = Antialias::on)
      : RandomResizedCrop(size, size, scale, ratio, antialias) {}
  RandomResizedCrop(int64_t height, int64_t width, std::pair<double, double> scale = {0.08, 1.0},
                    std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0}, Antialias antialias = Antialias::on);
};

/// The window RandomResizedCrop picks for an (height, width) image: {top, left, h, w}.
std::vector<int64_t> random_resized_crop_params(int64_t height, int64_t width, std::pair<double, double> scale,
                                                std::pair<double, double> ratio, Rng& rng);

}  // namespace mpx::data::transforms
