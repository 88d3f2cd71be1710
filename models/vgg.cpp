// VGG feature stacks from torchvision's configurations, classifier and weight initialisation.
#include "models/vgg.h"

namespace mpx::models {

namespace {
constexpr int64_t M = 0;  // a max-pool in a cfg
const std::vector<int64_t> kCfgA = {64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
const std::vector<int64_t> kCfgB = {64, 64, M, 128, 128, M, 256, 256, M, 512, 512, M, 512, 512, M};
const std::vector<int64_t> kCfgD = {64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M};
const std::vector<int64_t> kCfgE = {64,  64,  M,   128, 128, M,   256, 256, 256, 256, M,
                                    512, 512, 512, 512, M,   512, 512, 512, 512, M};
}  // namespace

VGGImpl::VGGImpl(const std::vector<int64_t>& cfg, bool batch_norm, const VGGOptions& options) : options(options) {
  MPX_CHECK(options.num_classes() > 0 && options.in_channels() > 0,
            "VGG: num_classes and in_channels must be positive, got num_classes=", options.num_classes(),
            " in_channels=", options.in_channels());
  MPX_CHECK(!cfg.empty() && cfg.back() == M, "VGG: a cfg must end with a max-pool (0)");
  nn::Sequential f;
  int64_t in = options.in_channels();
  for (size_t i = 0; i < cfg.size(); ++i) {
    if (cfg[i] == M) {
      if (options.small_input() && i + 1 == cfg.size()) break;
      f->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)));
      continue;
    }
    f->push_back(nn::Conv2d(nn::Conv2dOptions(in, cfg[i], 3).padding(1)));
    if (batch_norm) f->push_back(nn::BatchNorm2d(cfg[i]));
    f->push_back(nn::ReLU());
    in = cfg[i];
  }
  features = register_module("features", f);
  if (options.small_input()) {
    avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1})));
    classifier = register_module("classifier", nn::Sequential(nn::Linear(in, options.num_classes())));
  } else {
    avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({7, 7})));
    classifier = register_module(
        "classifier",
        nn::Sequential(nn::Linear(in * 7 * 7, 4096), nn::ReLU(), nn::Dropout(options.dropout()), nn::Linear(4096, 4096),
                       nn::ReLU(), nn::Dropout(options.dropout()), nn::Linear(4096, options.num_classes())));
  }

  if (!options.init_weights()) return;
  for (const auto& m : modules(false)) {
    if (auto* conv = m->as<nn::Conv2dImpl>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, nn::init::kFanOut, nn::init::kReLU);
      if (conv->bias.defined()) nn::init::zeros_(conv->bias);
    } else if (auto* bn = m->as<nn::BatchNorm2dImpl>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    } else if (auto* lin = m->as<nn::LinearImpl>()) {
      nn::init::normal_(lin->weight, 0.0, 0.01);
      nn::init::zeros_(lin->bias);
    }
  }
}

Tensor VGGImpl::forward(const Tensor& x) {
  Tensor y = avgpool(features(x));
  return classifier(y.flatten(1));
}

VGG vgg11(const VGGOptions& options) { return VGG(kCfgA, false, options); }
VGG vgg11_bn(const VGGOptions& options) { return VGG(kCfgA, true, options); }
VGG vgg13(const VGGOptions& options) { return VGG(kCfgB, false, options); }
VGG vgg13_bn(const VGGOptions& options) { return VGG(kCfgB, true, options); }
VGG vgg16(const VGGOptions& options) { return VGG(kCfgD, false, options); }
VGG vgg16_bn(const VGGOptions& options) { return VGG(kCfgD, true, options); }
VGG vgg19(const VGGOptions& options) { return VGG(kCfgE, false, options); }
VGG vgg19_bn(const VGGOptions& options) { return VGG(kCfgE, true, options); }

}  // namespace mpx::models
