// ResNet-18/34/50/101/152 as in torchvision (v1.5: the stride sits on the 3x3 conv), with a small-input stem for 28-32 px images, and the CIFAR ResNet-20.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arg.h"
#include "nn/nn.h"

namespace mpx::models {

/// Options shared by every ResNet depth.
struct ResNetOptions {
  ResNetOptions() = default;
  /// Width of the final Linear layer (`fc`).
  MPX_ARG(int64_t, num_classes) = 1000;
  /// Channels of the input images (3 for RGB, 1 for Fashion-MNIST).
  MPX_ARG(int64_t, in_channels) = 3;
  /// CIFAR-style stem for 28-32 px images: `conv1` is a 3x3 stride-1 padding-1 conv (no bias)
  /// followed by bn1 + ReLU and there is no max-pool, so layer1 sees the full resolution.
  /// The parameter names are unchanged (only conv1.weight's shape differs).
  MPX_ARG(bool, small_input) = false;
  /// Zero-initialises the last BN weight of every residual block (bn2 in BasicBlock, bn3 in
  /// Bottleneck) so each block starts as the identity (Goyal et al., torchvision's flag).
  MPX_ARG(bool, zero_init_residual) = false;
};

/// Two 3x3 convs with a skip connection (expansion 1). Names: conv1, bn1, conv2, bn2, downsample.
class BasicBlockImpl : public nn::Module {
 public:
  static constexpr int64_t expansion = 1;
  /// `downsample` (1x1 conv stride `stride` + BN) is made when stride != 1 or inplanes != planes.
  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride = 1);
  Tensor forward(const Tensor& x);
  std::string name() const override { return "BasicBlock"; }

  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential downsample{nullptr};
};
MPX_MODULE(BasicBlock);

/// 1x1 reduce, 3x3 (carrying the stride: v1.5), 1x1 expand x4, with a skip connection.
/// Names: conv1, bn1, conv2, bn2, conv3, bn3, downsample.
class BottleneckImpl : public nn::Module {
 public:
  static constexpr int64_t expansion = 4;
  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride = 1);
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Bottleneck"; }

  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::Sequential downsample{nullptr};
};
MPX_MODULE(Bottleneck);

/// Which residual block a ResNet stacks.
enum class ResNetBlock { Basic, Bottleneck };

/// torchvision's ResNet: conv1, bn1, (relu, maxpool), layer1..layer4 (Sequentials of blocks
/// named "0", "1", ...), global average pool, fc. State-dict keys match torchvision's
/// ("layer1.0.conv1.weight", "layer2.0.downsample.1.running_var", "fc.bias"), so checkpoints
/// map 1:1. Init as torchvision: convs kaiming_normal_(fan_out, relu), BN weight 1 bias 0,
/// fc PyTorch's default Linear init.
class ResNetImpl : public nn::Module {
 public:
  /// `layers` holds the number of blocks of each stage, e.g. {2, 2, 2, 2}; `widths` the
  /// planes of each stage (the stem has widths[0] channels). Three stages leave layer4 empty.
  ResNetImpl(ResNetBlock block, std::vector<int64_t> layers, const ResNetOptions& options = {},
             std::vector<int64_t> widths = {64, 128, 256, 512});
  Tensor forward(const Tensor& x);
  std::string name() const override { return "ResNet"; }

  ResNetOptions options;
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  nn::Linear fc{nullptr};

 private:
  nn::Sequential make_layer(ResNetBlock block, int64_t planes, int64_t blocks, int64_t stride);
  int64_t inplanes_ = 0;
};
MPX_MODULE(ResNet);

/// BasicBlock [2, 2, 2, 2]: 11,689,512 parameters at the ImageNet shape.
ResNet resnet18(const ResNetOptions& options = {});
/// BasicBlock [3, 4, 6, 3]: 21,797,672 parameters.
ResNet resnet34(const ResNetOptions& options = {});
/// Bottleneck [3, 4, 6, 3]: 25,557,032 parameters.
ResNet resnet50(const ResNetOptions& options = {});
/// Bottleneck [3, 4, 23, 3]: 44,549,160 parameters.
ResNet resnet101(const ResNetOptions& options = {});
/// Bottleneck [3, 8, 36, 3]: 60,192,808 parameters.
ResNet resnet152(const ResNetOptions& options = {});
/// He et al.'s CIFAR ResNet-20 (2016, section 4.2): a 3x3 stem of 16 channels, three stages of
/// three BasicBlocks with 16, 32 and 64 planes, projection shortcuts (1x1 conv + BN, their
/// option B) where the shape changes; always the small-input stem. 272,474 parameters for 10
/// classes and RGB input: the small ResNet that trains in minutes on a CPU.
ResNet resnet20(const ResNetOptions& options = {});

}  // namespace mpx::models
