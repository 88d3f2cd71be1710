// ResNet blocks, stages and torchvision's weight initialisation.
#include "models/resnet.h"

#include <utility>

#include "ops/elementwise.h"

namespace mpx::models {
namespace F = nn::functional;

namespace {
nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}
nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}
nn::Sequential make_downsample(int64_t in, int64_t out, int64_t stride) {
  return nn::Sequential(conv1x1(in, out, stride), nn::BatchNorm2d(out));
}
}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride));
  bn1 = register_module("bn1", nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes));
  bn2 = register_module("bn2", nn::BatchNorm2d(planes));
  if (stride != 1 || inplanes != planes * expansion) {
    downsample = register_module("downsample", make_downsample(inplanes, planes * expansion, stride));
  }
}

Tensor BasicBlockImpl::forward(const Tensor& x) {
  Tensor out = bn1->forward_relu(conv1(x));
  return bn2->forward_add_relu(conv2(out), downsample ? downsample(x) : x);
}

BottleneckImpl::BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv1x1(inplanes, planes));
  bn1 = register_module("bn1", nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, stride));
  bn2 = register_module("bn2", nn::BatchNorm2d(planes));
  conv3 = register_module("conv3", conv1x1(planes, planes * expansion));
  bn3 = register_module("bn3", nn::BatchNorm2d(planes * expansion));
  if (stride != 1 || inplanes != planes * expansion) {
    downsample = register_module("downsample", make_downsample(inplanes, planes * expansion, stride));
  }
}

Tensor BottleneckImpl::forward(const Tensor& x) {
  Tensor out = bn1->forward_relu(conv1(x));
  out = bn2->forward_relu(conv2(out));
  return bn3->forward_add_relu(conv3(out), downsample ? downsample(x) : x);
}

ResNetImpl::ResNetImpl(ResNetBlock block, std::vector<int64_t> layers, const ResNetOptions& options,
                       std::vector<int64_t> widths)
    : options(options) {
  MPX_CHECK((layers.size() == 3 || layers.size() == 4) && widths.size() == layers.size(),
            "ResNet: expected the block counts and widths of 3 or 4 stages, got ", layers.size(), " and ",
            widths.size());
  MPX_CHECK(options.num_classes() > 0 && options.in_channels() > 0,
            "ResNet: num_classes and in_channels must be positive, got num_classes=", options.num_classes(),
            " in_channels=", options.in_channels());
  inplanes_ = widths[0];
  if (options.small_input()) {
    conv1 = register_module("conv1", conv3x3(options.in_channels(), inplanes_));
  } else {
    conv1 = register_module(
        "conv1", nn::Conv2d(nn::Conv2dOptions(options.in_channels(), inplanes_, 7).stride(2).padding(3).bias(false)));
  }
  bn1 = register_module("bn1", nn::BatchNorm2d(inplanes_));
  layer1 = register_module("layer1", make_layer(block, widths[0], layers[0], 1));
  layer2 = register_module("layer2", make_layer(block, widths[1], layers[1], 2));
  layer3 = register_module("layer3", make_layer(block, widths[2], layers[2], 2));
  if (layers.size() == 4) layer4 = register_module("layer4", make_layer(block, widths[3], layers[3], 2));
  fc = register_module("fc", nn::Linear(inplanes_, options.num_classes()));

  for (const auto& m : modules(false)) {
    if (auto* conv = m->as<nn::Conv2dImpl>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, nn::init::kFanOut, nn::init::kReLU);
    } else if (auto* bn = m->as<nn::BatchNorm2dImpl>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
  if (options.zero_init_residual()) {
    for (const auto& m : modules(false)) {
      if (auto* b = m->as<BottleneckImpl>()) nn::init::zeros_(b->bn3->weight);
      else if (auto* b2 = m->as<BasicBlockImpl>()) nn::init::zeros_(b2->bn2->weight);
    }
  }
}

nn::Sequential ResNetImpl::make_layer(ResNetBlock block, int64_t planes, int64_t blocks, int64_t stride) {
  MPX_CHECK(blocks >= 1, "ResNet: every stage needs at least one block, got ", blocks);
  nn::Sequential seq;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    if (block == ResNetBlock::Basic) {
      seq->push_back(BasicBlock(inplanes_, planes, s));
      inplanes_ = planes * BasicBlockImpl::expansion;
    } else {
      seq->push_back(Bottleneck(inplanes_, planes, s));
      inplanes_ = planes * BottleneckImpl::expansion;
    }
  }
  return seq;
}

Tensor ResNetImpl::forward(const Tensor& input) {
  Tensor x = bn1->forward_relu(conv1(input));
  if (!options.small_input()) x = F::max_pool2d(x, nn::MaxPool2dOptions(3).stride(2).padding(1));
  x = layer3(layer2(layer1(x)));
  if (layer4) x = layer4(x);
  x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions({1, 1}));
  return fc(x.flatten(1));
}

ResNet resnet18(const ResNetOptions& options) { return ResNet(ResNetBlock::Basic, std::vector<int64_t>{2, 2, 2, 2}, options); }
ResNet resnet34(const ResNetOptions& options) { return ResNet(ResNetBlock::Basic, std::vector<int64_t>{3, 4, 6, 3}, options); }
ResNet resnet50(const ResNetOptions& options) {
  return ResNet(ResNetBlock::Bottleneck, std::vector<int64_t>{3, 4, 6, 3}, options);
}
ResNet resnet101(const ResNetOptions& options) {
  return ResNet(ResNetBlock::Bottleneck, std::vector<int64_t>{3, 4, 23, 3}, options);
}
ResNet resnet152(const ResNetOptions& options) {
  return ResNet(ResNetBlock::Bottleneck, std::vector<int64_t>{3, 8, 36, 3}, options);
}
ResNet resnet20(const ResNetOptions& options) {
  ResNetOptions o = options;
  o.small_input(true);
  return ResNet(ResNetBlock::Basic, std::vector<int64_t>{3, 3, 3}, o, std::vector<int64_t>{16, 32, 64});
}

}  // namespace mpx::models
