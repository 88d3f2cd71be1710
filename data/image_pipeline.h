// The ImageNet train and eval transforms fused with the image decode: the crop is planned from
// the header, the JPEG decoded at the smallest DCT scale that still covers the output and only
// over the crop, then resized (antialiased bilinear), flipped, normalized and cast in one pass.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "data/resample.h"
#include "data/transforms.h"

namespace mpx::data {

/// torchvision's ImageNet transforms as one pass:
///   train: RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(p) + ToTensor + Normalize
///   eval:  Resize(resize) + CenterCrop(crop) + ToTensor + Normalize
/// with antialiased bilinear resampling (torchvision >= 0.13, antialias=True), and any Compose
/// of those steps and CIFAR's RandomCrop(size, padding) (from_transform). The random draws are
/// those of the separate transforms composed (crop, then flip) from the same per-sample seed, so
/// the crop distribution is torchvision's. Copyable; safe to call from many threads.
class ImagePipeline {
 public:
  /// The training transform.
  static ImagePipeline train(int64_t size = 224, std::pair<double, double> scale = {0.08, 1.0},
                             std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0}, double flip_p = 0.5);
  /// The evaluation transform; `resize` is the shorter side before the centre crop (>= crop).
  static ImagePipeline eval(int64_t resize = 256, int64_t crop = 224);
  /// The pass that runs `t`: a Compose (or one transform) of, in this order and each optional,
  ///   RandomResizedCrop | Resize [+ CenterCrop] | CenterCrop | RandomCrop,
  ///   RandomHorizontalFlip, ToTensor [+ Normalize] | PILToTensor
  /// (resizes antialiased). Without ToTensor the output is the u8 [H,W,C] image. Empty when `t`
  /// is anything else; then `why`, if given, says which step stands in the way.
  static std::optional<ImagePipeline> from_transform(const transforms::Transform& t, std::string* why = nullptr);

  /// Output element type: f32 (default), f16, bf16 (normalized), or u8: pixel values 0..255 not
  /// normalized (PILToTensor's), for DevicePrefetcher to scale and normalize on the GPU.
  ImagePipeline& dtype(DType d);
  /// [H,W,C] output instead of [C,H,W].
  ImagePipeline& channels_last(bool c = true);
  /// Normalize's mean and std (of 0..1 values, 3 channels); ImageNet's by default.
  ImagePipeline& normalize(std::vector<double> mean, std::vector<double> std);
  /// Decode JPEGs at reduced DCT size when the crop will be shrunk (default). Off, every image is
  /// decoded at full size and resampled exactly as torchvision resamples the same crop box.
  ImagePipeline& reduced_decode(bool r = true);

  DType dtype() const { return dtype_; }
  bool channels_last() const { return channels_last_; }
  bool reduced_decode_enabled() const { return reduced_; }
  /// Whether the crop is random (RandomResizedCrop or RandomCrop).
  bool is_train() const { return train_; }
  /// Whether every output has one shape; not when it follows the image's (a Resize(int) without
  /// a crop, or no resize and no crop).
  bool fixed_shape() const;
  /// The shape of one output: {3, H, W} or {H, W, 3}; needs fixed_shape().
  IntList output_shape() const;
  /// The shape of the output for an image of that size and channel count.
  IntList output_shape(int64_t height, int64_t width, int64_t channels = 3) const;
  /// Whether apply() takes `image`: u8 [H,W,3], or [H,W,1] when Normalize has one mean or none.
  bool accepts(const Tensor& image) const;
  /// Whether apply() takes u8 images of `channels` channels.
  bool accepts_channels(int64_t channels) const;
  /// The steps it runs, torchvision's names: "RandomResizedCrop(224) + RandomHorizontalFlip(0.5) + ...".
  std::string describe() const;

  /// What the transform does to one image, in full-size pixel coordinates: the box
  /// (top, left, height, width) is resized to (resize_h, resize_w), of which rows
  /// [keep_top, keep_top + out_h) and columns [keep_left, keep_left + out_w) are kept (zeros
  /// where they leave the resized image: a padded crop), then mirrored when `flip`.
  struct Plan {
    int64_t top = 0, left = 0, height = 0, width = 0;
    int64_t resize_h = 0, resize_w = 0;
    int64_t keep_top = 0, keep_left = 0, out_h = 0, out_w = 0;
    bool flip = false;
  };
  /// The plan for an image of `height` x `width` pixels and a sample seed.
  Plan plan(int64_t height, int64_t width, uint64_t seed) const;
  /// Same, drawing from `rng` (crop box first, then the flip, as the composed transforms do).
  Plan plan(int64_t height, int64_t width, transforms::Rng& rng) const;
  /// The DCT scale (eighths: 1, 2, 4 or 8) a JPEG of that size is decoded at for `p`: the
  /// smallest whose scaled box still has at least the resize's resolution on both axes.
  int decode_scale(const Plan& p) const;

  /// The resampling weights (rows, columns) of `p` for the image decoded at `scale`/8, whose
  /// size is then scaled_h x scaled_w; at scale 8 the full-size path's, which GPU decoding
  /// (data/gpu_decode.h) uses too, so both resample with one set of weights.
  std::pair<AxisWeights, AxisWeights> weights(const Plan& p, int scale, int64_t scaled_h, int64_t scaled_w) const;
  /// How resampled values are stored: dtype, layout, the mirror, and ToTensor + Normalize
  /// folded into one multiply-add per channel.
  ResampleOutput output(bool flip, int64_t channels = 3) const;

  /// Reads and transforms the image file at `path` (JPEG through the reduced-size region decode
  /// when the build has it, PNG/BMP through read_image). Errors name the file, as read_image's.
  Tensor load(const std::string& path, uint64_t seed) const;
  /// Same, writing output_shape() elements of dtype() at `out`.
  void load_into(const std::string& path, uint64_t seed, void* out) const;
  /// Transforms an already decoded u8 [H,W,3] image (or [H,W,1], see accepts(); the full-size path).
  Tensor apply(const Tensor& image, uint64_t seed) const;
  /// Same, drawing from `rng` (what a fused Compose does).
  Tensor apply(const Tensor& image, transforms::Rng& rng) const;
  /// apply() on raw pixels, with no tensor in between (a data set's get_batch): the u8 image of
  /// `height` x `width` x `channels` at `hwc` (rows contiguous; a `channels` accepts_channels takes)
  /// into output_shape(height, width, channels) elements of dtype() at `out`.
  void apply_into(const uint8_t* hwc, int64_t height, int64_t width, int64_t channels, uint64_t seed, void* out) const;
  /// This pipeline as a Transform over u8 [H,W,3] images (for ImageFolder's transform argument).
  transforms::Transform transform() const;

 private:
  ImagePipeline() = default;
  void apply_into(const Tensor& image, const Plan& p, void* out) const;
  void apply_plan(const uint8_t* hwc, int64_t height, int64_t width, int64_t channels, const Plan& p, void* out) const;

  // The crop: RandomResizedCrop to size_h_ x size_w_; a Resize (shorter side resize_, or
  // resize_h_ x resize_w_, or none) then a CenterCrop (crop_h_ x crop_w_, or none); or a
  // RandomCrop of size_h_ x size_w_ after zero padding by padding_.
  enum class Geometry : uint8_t { random_resized_crop, resize_crop, random_crop };
  Geometry geometry_ = Geometry::random_resized_crop;
  bool train_ = true;
  int64_t size_h_ = 224, size_w_ = 224, resize_ = 256, resize_h_ = 0, resize_w_ = 0, crop_h_ = 0, crop_w_ = 0;
  int64_t padding_ = 0;
  std::pair<double, double> scale_{0.08, 1.0}, ratio_{3.0 / 4.0, 4.0 / 3.0};
  bool flip_ = true;  // a RandomHorizontalFlip step (it draws even when flip_p_ is 0)
  double flip_p_ = 0.5;
  DType dtype_ = kFloat32;
  bool channels_last_ = false;
  bool reduced_ = true;
  bool to_tensor_ = true, normalize_ = true;  // as steps: their names in describe()
  std::vector<double> mean_{0.485, 0.456, 0.406}, std_{0.229, 0.224, 0.225};  // 1 or 3 values
};

}  // namespace mpx::data
