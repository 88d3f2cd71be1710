// VGG-11/13/16/19 with and without batch norm (torchvision cfgs A/B/D/E), with a small-input variant for 28-32 px images.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arg.h"
#include "nn/nn.h"

namespace mpx::models {

/// Options of every VGG.
struct VGGOptions {
  VGGOptions() = default;
  MPX_ARG(int64_t, num_classes) = 1000;
  MPX_ARG(int64_t, in_channels) = 3;
  /// Variant for 28-32 px images: the last max-pool of `features` is dropped (28 px would
  /// shrink to 0 px), `avgpool` pools to 1x1 instead of expanding to 7x7, and `classifier`
  /// is a single Linear(512, num_classes) at "classifier.0" (dropout and the two 4096-wide
  /// layers, 120M of the 138M parameters, are meant for 224 px ImageNet). The indices of
  /// the remaining `features` layers are unchanged.
  MPX_ARG(bool, small_input) = false;
  /// Dropout probability of the two hidden classifier layers (ImageNet shape only).
  MPX_ARG(double, dropout) = 0.5;
  /// torchvision's init_weights: false keeps PyTorch's default layer init (cheaper when the
  /// weights are about to be loaded from a checkpoint).
  MPX_ARG(bool, init_weights) = true;
};

/// torchvision's VGG: `features` (Sequential of conv3x3 [+ BN] + ReLU and max-pools, indexed
/// as torchvision's, so "features.0.weight" ... map 1:1), `avgpool` (adaptive, 7x7),
/// `classifier` (Linear 25088->4096, ReLU, Dropout, Linear 4096->4096, ReLU, Dropout,
/// Linear 4096->num_classes). Init as torchvision: convs kaiming_normal_(fan_out, relu) with
/// zero bias, BN weight 1 bias 0, Linear N(0, 0.01) with zero bias.
class VGGImpl : public nn::Module {
 public:
  /// `cfg` lists conv widths, with 0 standing for a 2x2 max-pool ("M" in torchvision).
  VGGImpl(const std::vector<int64_t>& cfg, bool batch_norm, const VGGOptions& options = {});
  Tensor forward(const Tensor& x);
  std::string name() const override { return "VGG"; }

  VGGOptions options;
  nn::Sequential features{nullptr};
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Sequential classifier{nullptr};
};
MPX_MODULE(VGG);

/// cfg A: 132,863,336 parameters at the ImageNet shape (vgg11_bn: 132,868,840).
VGG vgg11(const VGGOptions& options = {});
VGG vgg11_bn(const VGGOptions& options = {});
/// cfg B: 133,047,848 parameters (vgg13_bn: 133,053,736).
VGG vgg13(const VGGOptions& options = {});
VGG vgg13_bn(const VGGOptions& options = {});
/// cfg D: 138,357,544 parameters (vgg16_bn: 138,365,992).
VGG vgg16(const VGGOptions& options = {});
VGG vgg16_bn(const VGGOptions& options = {});
/// cfg E: 143,667,240 parameters (vgg19_bn: 143,678,248).
VGG vgg19(const VGGOptions& options = {});
VGG vgg19_bn(const VGGOptions& options = {});

}  // namespace mpx::models
