// DCGAN generator/discriminator stacks per image size and DCGAN's weight initialisation.
#include "models/dcgan.h"

namespace mpx::models {
namespace {
void check_options(const DCGANOptions& o, const char* who) {
  MPX_CHECK(o.image_size() == 64 || o.image_size() == 32 || o.image_size() == 28, who,
            ": image_size must be 64, 32 or 28, got ", o.image_size());
  MPX_CHECK(o.nz() > 0 && o.ngf() > 0 && o.ndf() > 0 && o.nc() > 0, who,
            ": nz, ngf, ndf and nc must be positive, got nz=", o.nz(), " ngf=", o.ngf(), " ndf=", o.ndf(),
            " nc=", o.nc());
}
nn::ConvTranspose2d up(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p) {
  return nn::ConvTranspose2d(nn::ConvTranspose2dOptions(in, out, k).stride(s).padding(p).bias(false));
}
nn::Conv2d down(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(s).padding(p).bias(false));
}
nn::LeakyReLU lrelu() { return nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)); }
}  // namespace

void dcgan_init(nn::Module& module) {
  module.apply([](nn::Module& m) {
    if (auto* c = m.as<nn::Conv2dImpl>()) {
      nn::init::normal_(c->weight, 0.0, 0.02);
    } else if (auto* ct = m.as<nn::ConvTranspose2dImpl>()) {
      nn::init::normal_(ct->weight, 0.0, 0.02);
    } else if (auto* bn = m.as<nn::BatchNorm2dImpl>()) {
      nn::init::normal_(bn->weight, 1.0, 0.02);
      nn::init::zeros_(bn->bias);
    }
  });
}

DCGANGeneratorImpl::DCGANGeneratorImpl(const DCGANOptions& options) : options(options) {
  check_options(options, "DCGANGenerator");
  const int64_t nz = options.nz(), g = options.ngf(), nc = options.nc();
  nn::Sequential s;
  switch (options.image_size()) {
    case 64:
      s = nn::Sequential(up(nz, g * 8, 4, 1, 0), nn::BatchNorm2d(g * 8), nn::ReLU(),   // 4x4
                         up(g * 8, g * 4, 4, 2, 1), nn::BatchNorm2d(g * 4), nn::ReLU(),  // 8x8
                         up(g * 4, g * 2, 4, 2, 1), nn::BatchNorm2d(g * 2), nn::ReLU(),  // 16x16
                         up(g * 2, g, 4, 2, 1), nn::BatchNorm2d(g), nn::ReLU(),          // 32x32
                         up(g, nc, 4, 2, 1), nn::Tanh());                                // 64x64
      break;
    case 32:
      s = nn::Sequential(up(nz, g * 4, 4, 1, 0), nn::BatchNorm2d(g * 4), nn::ReLU(),   // 4x4
                         up(g * 4, g * 2, 4, 2, 1), nn::BatchNorm2d(g * 2), nn::ReLU(),  // 8x8
                         up(g * 2, g, 4, 2, 1), nn::BatchNorm2d(g), nn::ReLU(),          // 16x16
                         up(g, nc, 4, 2, 1), nn::Tanh());                                // 32x32
      break;
    default:  // 28
      s = nn::Sequential(up(nz, g * 4, 7, 1, 0), nn::BatchNorm2d(g * 4), nn::ReLU(),   // 7x7
                         up(g * 4, g * 2, 4, 2, 1), nn::BatchNorm2d(g * 2), nn::ReLU(),  // 14x14
                         up(g * 2, g, 4, 2, 1), nn::BatchNorm2d(g), nn::ReLU(),          // 28x28
                         up(g, nc, 3, 1, 1), nn::Tanh());                                // 28x28
      break;
  }
  main = register_module("main", s);
  dcgan_init(*this);
}

Tensor DCGANGeneratorImpl::forward(const Tensor& z) {
  MPX_CHECK((z.dim() == 2 || (z.dim() == 4 && z.size(2) == 1 && z.size(3) == 1)) && z.size(1) == options.nz(),
            "DCGANGenerator: expected z of shape [N, ", options.nz(), "] or [N, ", options.nz(), ", 1, 1], got ",
            shape_str(z.sizes()));
  return main(z.dim() == 2 ? z.reshape({z.size(0), z.size(1), 1, 1}) : z);
}

DCGANDiscriminatorImpl::DCGANDiscriminatorImpl(const DCGANOptions& options) : options(options) {
  check_options(options, "DCGANDiscriminator");
  const int64_t d = options.ndf(), nc = options.nc();
  nn::Sequential s;
  switch (options.image_size()) {
    case 64:
      s = nn::Sequential(down(nc, d, 4, 2, 1), lrelu(),                                  // 32x32
                         down(d, d * 2, 4, 2, 1), nn::BatchNorm2d(d * 2), lrelu(),      // 16x16
                         down(d * 2, d * 4, 4, 2, 1), nn::BatchNorm2d(d * 4), lrelu(),  // 8x8
                         down(d * 4, d * 8, 4, 2, 1), nn::BatchNorm2d(d * 8), lrelu(),  // 4x4
                         down(d * 8, 1, 4, 1, 0));                                      // 1x1
      break;
    case 32:
      s = nn::Sequential(down(nc, d, 4, 2, 1), lrelu(),                                  // 16x16
                         down(d, d * 2, 4, 2, 1), nn::BatchNorm2d(d * 2), lrelu(),      // 8x8
                         down(d * 2, d * 4, 4, 2, 1), nn::BatchNorm2d(d * 4), lrelu(),  // 4x4
                         down(d * 4, 1, 4, 1, 0));                                      // 1x1
      break;
    default:  // 28
      s = nn::Sequential(down(nc, d, 4, 2, 1), lrelu(),                                  // 14x14
                         down(d, d * 2, 4, 2, 1), nn::BatchNorm2d(d * 2), lrelu(),      // 7x7
                         down(d * 2, d * 4, 3, 2, 1), nn::BatchNorm2d(d * 4), lrelu(),  // 4x4
                         down(d * 4, 1, 4, 1, 0));                                      // 1x1
      break;
  }
  main = register_module("main", s);
  dcgan_init(*this);
}

Tensor DCGANDiscriminatorImpl::forward(const Tensor& x) {
  const int64_t s = options.image_size();
  MPX_CHECK(x.dim() == 4 && x.size(1) == options.nc() && x.size(2) == s && x.size(3) == s,
            "DCGANDiscriminator: expected images [N, ", options.nc(), ", ", s, ", ", s, "], got ", shape_str(x.sizes()),
            "; build it with DCGANOptions().image_size(...).nc(...) matching the data");
  return main(x).reshape({-1});
}

}  // namespace mpx::models
