// ImagePipeline::from_transform: recognizes the Composes one fused pass can run (torchvision's
// ImageNet and CIFAR recipes) and describe(), their names for what a data set runs.
#include <cstdio>

#include "core/error.h"
#include "data/image_pipeline.h"

namespace mpx::data {

namespace {
using Kind = transforms::TransformSpec::Kind;

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
std::string size2(int64_t h, int64_t w) {
  if (h == w) return std::to_string(h);
  std::string s = "(";  // appended piece by piece: GCC 12 warns (-Wrestrict) about "(" + std::string
  s += std::to_string(h);
  s += ", ";
  s += std::to_string(w);
  return s + ")";
}
std::string values(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + num(v[i]);
  return s + "]";
}

const char* kOrder =
    "one pass runs [RandomResizedCrop | Resize [CenterCrop] | CenterCrop | RandomCrop] [RandomHorizontalFlip] "
    "[ToTensor [Normalize] | PILToTensor] in that order, resizes antialiased";
}  // namespace

std::optional<ImagePipeline> ImagePipeline::from_transform(const transforms::Transform& t, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<ImagePipeline> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (!t.defined() && t.spec().kind != Kind::compose) return fail("there is no transform");  // a Compose asks while built
  std::vector<transforms::Transform> steps;
  if (t.spec().kind == Kind::compose) steps = t.spec().steps;
  else steps.push_back(t);

  // Each step is optional: start from the identity (no crop, no flip, the u8 image out).
  ImagePipeline p;
  p.geometry_ = Geometry::resize_crop;
  p.train_ = false;
  p.resize_ = 0;
  p.flip_ = false;
  p.to_tensor_ = p.normalize_ = false;
  p.dtype_ = kUInt8;
  p.channels_last_ = true;
  p.mean_ = {0.0};
  p.std_ = {1.0};
  size_t i = 0;
  auto at = [&](Kind k) { return i < steps.size() && steps[i].spec().kind == k; };
  auto antialiased = [&] { return steps[i].spec().antialias == transforms::Antialias::on; };
  if (at(Kind::random_resized_crop) && antialiased()) {
    const auto& s = steps[i++].spec();
    p.geometry_ = Geometry::random_resized_crop;
    p.train_ = true;
    p.size_h_ = s.height;
    p.size_w_ = s.width;
    p.scale_ = s.scale;
    p.ratio_ = s.ratio;
  } else if (at(Kind::resize) && antialiased()) {
    const auto& s = steps[i++].spec();
    p.resize_ = s.size;
    p.resize_h_ = s.size > 0 ? 0 : s.height;
    p.resize_w_ = s.size > 0 ? 0 : s.width;
    if (at(Kind::center_crop)) {
      p.crop_h_ = steps[i].spec().height;
      p.crop_w_ = steps[i++].spec().width;
    }
  } else if (at(Kind::center_crop)) {
    p.crop_h_ = steps[i].spec().height;
    p.crop_w_ = steps[i++].spec().width;
  } else if (at(Kind::random_crop)) {
    const auto& s = steps[i++].spec();
    p.geometry_ = Geometry::random_crop;
    p.train_ = true;
    p.size_h_ = s.height;
    p.size_w_ = s.width;
    p.padding_ = s.padding;
  }
  if (at(Kind::horizontal_flip)) {
    p.flip_ = true;
    p.flip_p_ = steps[i++].spec().p;
  }
  if (at(Kind::to_tensor)) {
    ++i;
    p.to_tensor_ = true;
    p.dtype_ = kFloat32;
    p.channels_last_ = false;
    if (at(Kind::normalize)) {
      const auto& s = steps[i].spec();
      if (s.mean.size() != 1 && s.mean.size() != 3)
        return fail(steps[i].name() + " has " + std::to_string(s.mean.size()) + " means; one pass takes 1 or 3");
      ++i;
      p.normalize_ = true;
      p.mean_ = s.mean;
      p.std_ = s.std;
    }
  } else if (at(Kind::pil_to_tensor)) {
    ++i;
    p.channels_last_ = false;
  }
  if (i < steps.size()) {
    const transforms::Transform& s = steps[i];
    const Kind k = s.spec().kind;
    std::string what = s.name() + " (step " + std::to_string(i + 1) + ")";
    if (k == Kind::custom) return fail(what + " is a custom transform; " + kOrder);
    if ((k == Kind::resize || k == Kind::random_resized_crop) && !antialiased())
      return fail(what + " resizes with antialias off; " + kOrder);
    return fail(what + " is out of that order; " + kOrder);
  }
  return p;
}

std::string ImagePipeline::describe() const {
  std::vector<std::string> steps;
  switch (geometry_) {
    case Geometry::random_resized_crop: {
      std::string s = "RandomResizedCrop(" + size2(size_h_, size_w_);
      if (scale_ != std::pair<double, double>{0.08, 1.0}) s += ", scale=(" + num(scale_.first) + ", " + num(scale_.second) + ")";
      if (ratio_ != std::pair<double, double>{3.0 / 4.0, 4.0 / 3.0})
        s += ", ratio=(" + num(ratio_.first) + ", " + num(ratio_.second) + ")";
      steps.push_back(s + ")");
      break;
    }
    case Geometry::resize_crop:
      if (resize_ > 0) steps.push_back("Resize(" + std::to_string(resize_) + ")");
      else if (resize_h_ > 0) steps.push_back("Resize((" + std::to_string(resize_h_) + ", " + std::to_string(resize_w_) + "))");
      if (crop_h_ > 0) steps.push_back("CenterCrop(" + size2(crop_h_, crop_w_) + ")");
      break;
    case Geometry::random_crop:
      steps.push_back("RandomCrop(" + size2(size_h_, size_w_) + (padding_ ? ", padding=" + std::to_string(padding_) : "") + ")");
      break;
  }
  if (flip_) steps.push_back("RandomHorizontalFlip(" + num(flip_p_) + ")");
  if (dtype_ == kUInt8) {
    if (!channels_last_) steps.emplace_back("PILToTensor");
  } else {
    if (to_tensor_) steps.emplace_back("ToTensor");
    if (normalize_) steps.push_back("Normalize(" + values(mean_) + ", " + values(std_) + ")");
  }
  std::string s;
  for (const auto& x : steps) s += (s.empty() ? "" : " + ") + x;
  if (s.empty()) s = "the image as it is";
  if (dtype_ != kFloat32 && dtype_ != kUInt8) s += std::string(", as ") + dtype_name(dtype_);
  if (channels_last_ && dtype_ != kUInt8) s += ", channels last";
  return s;
}

}  // namespace mpx::data
