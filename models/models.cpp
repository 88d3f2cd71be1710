// models::create: the name -> constructor registry over the model zoo.
#include "models/models.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <utility>

namespace mpx::models {

ResNetOptions ModelOptions::resnet() const {
  return ResNetOptions()
      .num_classes(num_classes_)
      .in_channels(in_channels_)
      .small_input(small_input_)
      .zero_init_residual(zero_init_residual_);
}
VGGOptions ModelOptions::vgg() const {
  return VGGOptions().num_classes(num_classes_).in_channels(in_channels_).small_input(small_input_).dropout(dropout_);
}
AlexNetOptions ModelOptions::alexnet() const {
  return AlexNetOptions().num_classes(num_classes_).in_channels(in_channels_).small_input(small_input_).dropout(dropout_);
}
DCGANOptions ModelOptions::dcgan() const {
  return DCGANOptions().nz(nz_).ngf(ngf_).ndf(ndf_).nc(in_channels_).image_size(image_size_);
}

namespace {
// Names are case-insensitive.
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

using Factory = std::function<nn::AnyModule(const ModelOptions&)>;

const std::vector<std::pair<std::string, Factory>>& registry() {
  static const std::vector<std::pair<std::string, Factory>> r = {
      {"resnet18", [](const ModelOptions& o) { return nn::AnyModule(resnet18(o.resnet())); }},
      {"resnet34", [](const ModelOptions& o) { return nn::AnyModule(resnet34(o.resnet())); }},
      {"resnet50", [](const ModelOptions& o) { return nn::AnyModule(resnet50(o.resnet())); }},
      {"resnet101", [](const ModelOptions& o) { return nn::AnyModule(resnet101(o.resnet())); }},
      {"resnet152", [](const ModelOptions& o) { return nn::AnyModule(resnet152(o.resnet())); }},
      {"resnet20", [](const ModelOptions& o) { return nn::AnyModule(resnet20(o.resnet())); }},
      {"vgg11", [](const ModelOptions& o) { return nn::AnyModule(vgg11(o.vgg())); }},
      {"vgg11_bn", [](const ModelOptions& o) { return nn::AnyModule(vgg11_bn(o.vgg())); }},
      {"vgg13", [](const ModelOptions& o) { return nn::AnyModule(vgg13(o.vgg())); }},
      {"vgg13_bn", [](const ModelOptions& o) { return nn::AnyModule(vgg13_bn(o.vgg())); }},
      {"vgg16", [](const ModelOptions& o) { return nn::AnyModule(vgg16(o.vgg())); }},
      {"vgg16_bn", [](const ModelOptions& o) { return nn::AnyModule(vgg16_bn(o.vgg())); }},
      {"vgg19", [](const ModelOptions& o) { return nn::AnyModule(vgg19(o.vgg())); }},
      {"vgg19_bn", [](const ModelOptions& o) { return nn::AnyModule(vgg19_bn(o.vgg())); }},
      {"alexnet", [](const ModelOptions& o) { return nn::AnyModule(alexnet(o.alexnet())); }},
      {"dcgan_generator", [](const ModelOptions& o) { return nn::AnyModule(DCGANGenerator(o.dcgan())); }},
      {"dcgan_discriminator", [](const ModelOptions& o) { return nn::AnyModule(DCGANDiscriminator(o.dcgan())); }},
      {"small_cnn", [](const ModelOptions& o) { return nn::AnyModule(SmallCnn(o.in_channels(), o.num_classes())); }},
  };
  static const std::vector<std::pair<std::string, Factory>> all = [] {
    auto v = r;
    for (const std::string& p : GPTConfig::presets())
      v.emplace_back(p, [p](const ModelOptions& o) { return nn::AnyModule(GPT(GPTConfig::preset(p, o.vocab_size()))); });
    v.emplace_back("lstm-lm", [](const ModelOptions& o) {
      LSTMLMConfig c;
      if (o.vocab_size() > 0) c.vocab_size = o.vocab_size();
      return nn::AnyModule(LSTMLM(c));
    });
    return v;
  }();
  return all;
}
}  // namespace

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, f] : registry()) n.push_back(name);
    return n;
  }();
  return names;
}

bool is_language_model(const std::string& name) {
  const std::string key = lower(name);
  const auto presets = GPTConfig::presets();
  return key == "lstm-lm" || std::find(presets.begin(), presets.end(), key) != presets.end();
}

nn::AnyModule create(const std::string& name, const ModelOptions& options) {
  const std::string key = lower(name);
  for (const auto& [n, factory] : registry()) {
    if (n == key) return factory(options);
  }
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  MPX_ERROR("models::create: unknown model '", name, "'; known models: ", known);
}

}  // namespace mpx::models
