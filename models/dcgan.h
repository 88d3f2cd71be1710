// DCGAN generator and discriminator (Radford et al., the pytorch/examples layout) for 64 px images and 28/32 px variants.
#pragma once
#include <cstdint>

#include "core/arg.h"
#include "nn/nn.h"

namespace mpx::models {

/// Options of the DCGAN pair.
struct DCGANOptions {
  DCGANOptions() = default;
  /// Length of the latent vector z; the generator takes [N, nz] or [N, nz, 1, 1].
  MPX_ARG(int64_t, nz) = 100;
  /// Base width of the generator (its widest layer is ngf*8 at 64 px, ngf*4 at 28/32 px).
  MPX_ARG(int64_t, ngf) = 64;
  /// Base width of the discriminator.
  MPX_ARG(int64_t, ndf) = 64;
  /// Image channels (3 RGB, 1 Fashion-MNIST).
  MPX_ARG(int64_t, nc) = 3;
  /// 64 (the paper's layout), 32 (one stage fewer: 4 -> 8 -> 16 -> 32) or 28 (Fashion-MNIST:
  /// 7 -> 14 -> 28 and a final 3x3 stride-1 layer).
  MPX_ARG(int64_t, image_size) = 64;
};

/// z -> image in [-1, 1]: ConvTranspose2d stack (no biases) with BN + ReLU and a final Tanh,
/// in a Sequential `main` so state-dict keys match pytorch/examples' dcgan ("main.0.weight",
/// "main.1.running_mean", ...). 64 px: nz -> ngf*8 (4x4) -> ngf*4 (8) -> ngf*2 (16) -> ngf
/// (32) -> nc (64). Init as DCGAN: conv weights N(0, 0.02), BN weight N(1, 0.02), bias 0.
class DCGANGeneratorImpl : public nn::Module {
 public:
  explicit DCGANGeneratorImpl(const DCGANOptions& options = {});
  /// z: [N, nz] or [N, nz, 1, 1]; returns [N, nc, image_size, image_size].
  Tensor forward(const Tensor& z);
  std::string name() const override { return "DCGANGenerator"; }

  DCGANOptions options;
  nn::Sequential main{nullptr};
};
MPX_MODULE(DCGANGenerator);

/// image -> one real/fake logit per sample, shape [N]. Conv2d stack (no biases), LeakyReLU
/// 0.2, BN on all but the first layer. Unlike the paper there is no final Sigmoid: train it
/// with BCEWithLogits (F::binary_cross_entropy_with_logits), which is numerically safe in
/// f16 and is what apex's DCGAN example does. 64 px: nc -> ndf (32) -> ndf*2 (16) -> ndf*4
/// (8) -> ndf*8 (4) -> 1 (4x4 conv, valid). Same init as the generator.
class DCGANDiscriminatorImpl : public nn::Module {
 public:
  explicit DCGANDiscriminatorImpl(const DCGANOptions& options = {});
  /// x: [N, nc, image_size, image_size]; returns logits [N].
  Tensor forward(const Tensor& x);
  std::string name() const override { return "DCGANDiscriminator"; }

  DCGANOptions options;
  nn::Sequential main{nullptr};
};
MPX_MODULE(DCGANDiscriminator);

/// DCGAN's init, applied to every (transposed) conv and BN below `module`: conv weights
/// N(0, 0.02), BN weight N(1, 0.02) and bias 0. The constructors already call it.
void dcgan_init(nn::Module& module);

}  // namespace mpx::models
