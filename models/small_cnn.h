// SmallCnn: a two-conv network for 28x28 grey images, the quick default model for smoke runs.
#pragma once
#include "nn/nn.h"

namespace mpx::models {

/// conv3x3(16)-BN-ReLU-pool, conv3x3(32)-BN-ReLU-pool, linear(10). ~20k parameters.
struct SmallCnnImpl : nn::Module {
  explicit SmallCnnImpl(int64_t in_channels = 1, int64_t num_classes = 10);
  Tensor forward(Tensor x);
  nn::Conv2d c1{nullptr}, c2{nullptr};
  nn::BatchNorm2d b1{nullptr}, b2{nullptr};
  nn::Linear fc{nullptr};
};
MPX_MODULE(SmallCnn);

}  // namespace mpx::models
