// AlexNet layers (ImageNet and small-input variants) and forward pass.
#include "models/alexnet.h"

namespace mpx::models {

AlexNetImpl::AlexNetImpl(const AlexNetOptions& options) : options(options) {
  MPX_CHECK(options.num_classes() > 0 && options.in_channels() > 0,
            "AlexNet: num_classes and in_channels must be positive, got num_classes=", options.num_classes(),
            " in_channels=", options.in_channels());
  const bool small = options.small_input();
  const int64_t in = options.in_channels();
  auto pool = [&] {
    return small ? nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)) : nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2));
  };
  nn::Conv2d stem = small ? nn::Conv2d(nn::Conv2dOptions(in, 64, 3).stride(1).padding(1))
                          : nn::Conv2d(nn::Conv2dOptions(in, 64, 11).stride(4).padding(2));
  nn::Conv2d second = small ? nn::Conv2d(nn::Conv2dOptions(64, 192, 3).padding(1))
                            : nn::Conv2d(nn::Conv2dOptions(64, 192, 5).padding(2));
  features = register_module(
      "features", nn::Sequential(stem, nn::ReLU(), pool(), second, nn::ReLU(), pool(),
                                 nn::Conv2d(nn::Conv2dOptions(192, 384, 3).padding(1)), nn::ReLU(),
                                 nn::Conv2d(nn::Conv2dOptions(384, 256, 3).padding(1)), nn::ReLU(),
                                 nn::Conv2d(nn::Conv2dOptions(256, 256, 3).padding(1)), nn::ReLU(), pool()));
  const int64_t side = small ? 2 : 6;
  const int64_t hidden = small ? 1024 : 4096;
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({side, side})));
  classifier = register_module(
      "classifier", nn::Sequential(nn::Dropout(options.dropout()), nn::Linear(256 * side * side, hidden), nn::ReLU(),
                                   nn::Dropout(options.dropout()), nn::Linear(hidden, hidden), nn::ReLU(),
                                   nn::Linear(hidden, options.num_classes())));
}

Tensor AlexNetImpl::forward(const Tensor& x) {
  Tensor y = avgpool(features(x));
  return classifier(y.flatten(1));
}

AlexNet alexnet(const AlexNetOptions& options) { return AlexNet(options); }

}  // namespace mpx::models
