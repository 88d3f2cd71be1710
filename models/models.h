// The model zoo umbrella: every model header plus models::create(name, options), the by-name registry the CLI uses.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arg.h"
#include "models/alexnet.h"
#include "models/dcgan.h"
#include "models/gpt.h"
#include "models/gpt_hf.h"
#include "models/lstm_lm.h"
#include "models/resnet.h"
#include "models/small_cnn.h"
#include "models/vgg.h"
#include "nn/nn.h"

namespace mpx::models {

/// The union of every model's options, for create(); each model reads the fields it has.
struct ModelOptions {
  ModelOptions() = default;
  /// Classifier width (ResNet, VGG, AlexNet, small_cnn).
  MPX_ARG(int64_t, num_classes) = 1000;
  /// Input image channels (every model; for DCGAN it is `nc`).
  MPX_ARG(int64_t, in_channels) = 3;
  /// The 28-32 px variant (ResNet, VGG, AlexNet; see each model's options for what changes).
  /// DCGAN uses image_size instead.
  MPX_ARG(bool, small_input) = false;
  /// ResNet only: zero-init the last BN weight of each residual block.
  MPX_ARG(bool, zero_init_residual) = false;
  /// VGG and AlexNet classifier dropout.
  MPX_ARG(double, dropout) = 0.5;
  /// DCGAN only: latent size, generator/discriminator widths and image size (64, 32 or 28).
  MPX_ARG(int64_t, nz) = 100;
  MPX_ARG(int64_t, ngf) = 64;
  MPX_ARG(int64_t, ndf) = 64;
  MPX_ARG(int64_t, image_size) = 64;
  /// Language models only: the vocabulary (0: GPT-2's 50,257 for the GPT presets, 256 bytes for lstm-lm).
  MPX_ARG(int64_t, vocab_size) = 0;

  ResNetOptions resnet() const;
  VGGOptions vgg() const;
  AlexNetOptions alexnet() const;
  DCGANOptions dcgan() const;
};

/// Builds a model by name: "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet20",
/// "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
/// "alexnet", "dcgan_generator", "dcgan_discriminator", "small_cnn", the GPT presets of
/// GPTConfig::presets() ("gpt-tiny", "gpt-mini", "gpt2", ...) and "lstm-lm", the names
/// `mpx gpt --arch` takes (names are case-insensitive; the language models map i64 token ids
/// [B, T] to logits [B, T, vocab]). The result is callable (`net(x)`) and `net.ptr()` is the module for
/// parameters(), state_dict(), to() and amp::initialize. An unknown name throws, listing
/// the known ones.
nn::AnyModule create(const std::string& name, const ModelOptions& options = {});

/// The names create() accepts, in the order above.
const std::vector<std::string>& model_names();
/// The language models among them (the GPT presets and "lstm-lm").
bool is_language_model(const std::string& name);

}  // namespace mpx::models
