// SmallCnn layers and forward pass.
#include "models/small_cnn.h"

namespace mpx::models {
namespace F = nn::functional;

SmallCnnImpl::SmallCnnImpl(int64_t in_channels, int64_t num_classes) {
  c1 = register_module("c1", nn::Conv2d(nn::Conv2dOptions(in_channels, 16, 3).padding(1).bias(false)));
  b1 = register_module("b1", nn::BatchNorm2d(16));
  c2 = register_module("c2", nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1).bias(false)));
  b2 = register_module("b2", nn::BatchNorm2d(32));
  fc = register_module("fc", nn::Linear(32 * 7 * 7, num_classes));
}

Tensor SmallCnnImpl::forward(Tensor x) {
  x = F::max_pool2d(F::relu(b1(c1(x))), 2);
  x = F::max_pool2d(F::relu(b2(c2(x))), 2);
  return fc(x.flatten(1));
}

}  // namespace mpx::models
