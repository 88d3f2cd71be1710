// AlexNet as in torchvision (the "one weird trick" single-tower variant), with a small-input variant for 28-32 px images.
#pragma once
#include <cstdint>

#include "core/arg.h"
#include "nn/nn.h"

namespace mpx::models {

/// Options of AlexNet.
struct AlexNetOptions {
  AlexNetOptions() = default;
  MPX_ARG(int64_t, num_classes) = 1000;
  MPX_ARG(int64_t, in_channels) = 3;
  /// Variant for 28-32 px images: the 11x11 stride-4 stem becomes a 3x3 stride-1 padding-1
  /// conv, the 5x5 conv a 3x3 padding-1 one, the three 3x3/2 max-pools become 2x2/2 (32 px ->
  /// 4x4, 28 px -> 3x3), `avgpool` pools to 2x2 instead of 6x6 and the two hidden classifier
  /// layers are 1024 wide instead of 4096. Module indices and names stay torchvision's.
  MPX_ARG(bool, small_input) = false;
  MPX_ARG(double, dropout) = 0.5;
};

/// torchvision's AlexNet: `features` (Conv 11x11/4 64, ReLU, MaxPool 3/2, Conv 5x5 192, ReLU,
/// MaxPool, Conv 384, ReLU, Conv 256, ReLU, Conv 256, ReLU, MaxPool), `avgpool` (adaptive,
/// 6x6), `classifier` (Dropout, Linear 9216->4096, ReLU, Dropout, Linear 4096->4096, ReLU,
/// Linear ->num_classes). 61,100,840 parameters at the ImageNet shape. torchvision keeps
/// PyTorch's default layer init for AlexNet, and so does this.
class AlexNetImpl : public nn::Module {
 public:
  explicit AlexNetImpl(const AlexNetOptions& options = {});
  Tensor forward(const Tensor& x);
  std::string name() const override { return "AlexNet"; }

  AlexNetOptions options;
  nn::Sequential features{nullptr};
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Sequential classifier{nullptr};
};
MPX_MODULE(AlexNet);

/// AlexNet with the given options.
AlexNet alexnet(const AlexNetOptions& options = {});

}  // namespace mpx::models
