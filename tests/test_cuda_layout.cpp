// [cuda] tests that channels-last (NHWC) activations keep their layout through elementwise ops,
// activations and their gradients on the GPU, without hidden conversions.
#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/random.h"
#include "models/models.h"
#include "nn/nn.h"
#include "ops/dispatch.h"
#include "ops/norm.h"
#include "ops/pooling.h"
#include "optim/optim.h"
#include "tests/test_util.h"

using namespace mpx;

TEST_CASE("cuda elementwise results keep the channels-last layout of their input", "[cuda][layout]") {
  if (!testing::cuda_ready()) return;
  manual_seed(2);
  const Tensor cpu_x = randn({2, 8, 5, 7});
  Tensor x = cpu_x.to(Device::cuda()).contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
  REQUIRE(x.is_contiguous(MemoryFormat::ChannelsLast));
  const Tensor bias = randn({1, 8, 1, 1}).to(Device::cuda());
  Tensor y = relu(x * 2.0 + bias) + sigmoid(x);  // unary, binary with a broadcast, residual add
  CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(where(gt(x, 0.0), x, neg(x)).is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(gt(x, 0.0).is_contiguous(MemoryFormat::ChannelsLast));
  y.sum().backward();
  CHECK(x.grad().is_contiguous(MemoryFormat::ChannelsLast));
  // Values are those of the row-major CPU computation.
  Tensor xc = cpu_x.detach().set_requires_grad(true);
  Tensor yc = relu(xc * 2.0 + bias.cpu()) + sigmoid(xc);
  yc.sum().backward();
  CHECK(testing::rel_err(y, yc) < 1e-6);
  CHECK(testing::rel_err(x.grad(), xc.grad()) < 1e-6);
}

TEST_CASE("a channels-last conv net trains on the GPU without layout round trips", "[cuda][layout]") {
  if (!testing::cuda_ready()) return;
  if (!dispatch::has_kernel(OpId::conv2d, DeviceType::kCUDA, kFloat16)) {
    WARN("skipped: this build has no cuDNN convolution");
    return;
  }
  // Convolutions, activations, pooling, a residual add and the head: the parts of a ResNet
  // that keep NHWC end to end (batch norm still round-trips; see the ResNet-18 case below).
  manual_seed(3);
  nn::Conv2d c1(nn::Conv2dOptions(3, 16, 3).padding(1)), c2(nn::Conv2dOptions(16, 16, 3).padding(1));
  nn::Linear fc(16, 10);
  for (nn::Module* m : {static_cast<nn::Module*>(c1.ptr().get()), static_cast<nn::Module*>(c2.ptr().get()),
                        static_cast<nn::Module*>(fc.ptr().get())}) {
    m->to(Device::cuda());
    m->to(MemoryFormat::ChannelsLast);
  }
  std::vector<Tensor> params;
  for (const auto& ps : {c1->parameters(), c2->parameters(), fc->parameters()})
    for (const auto& p : ps) params.push_back(p);
  optim::SGD opt(params, optim::SGDOptions(0.1).momentum(0.9));
  amp::GradScaler scaler;
  const Tensor x = randn({4, 3, 32, 32}).to(Device::cuda()).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = randint(0, 10, {4}).to(Device::cuda());
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard ac(kFloat16);
      Tensor h = nn::functional::max_pool2d(relu(c1(x)), 2);
      h = relu(c2(h) + h);
      h = mpx::adaptive_avg_pool2d(h, {1, 1}).flatten(1);
      loss = nn::functional::cross_entropy(fc(h), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  step();  // first step: optimizer state and caches
  const int64_t before = cuda::layout_conversions();
  step();
  CHECK(cuda::layout_conversions() - before == 0);
}

TEST_CASE("batch_norm_add_relu and batch_norm_relu on channels-last f16 run on cuDNN's fused NHWC kernels",
          "[cuda][layout]") {
  if (!testing::cuda_ready()) return;
  if (!dispatch::has_kernel(OpId::batch_norm_add_relu, DeviceType::kCUDA, kFloat16)) {
    WARN("skipped: this build has no cuDNN batch norm");
    return;
  }
  manual_seed(5);
  auto cl = [](const Tensor& t) {
    return t.to(Device::cuda()).contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
  };
  for (bool add : {true, false}) {
    INFO((add ? "batch_norm_add_relu" : "batch_norm_relu"));
    Tensor x = cl(randn({16, 64, 14, 14}).to(kFloat16)), z = cl(randn({16, 64, 14, 14}).to(kFloat16));
    Tensor w = ones({64}, TensorOptions().device(Device::cuda())).set_requires_grad(true);
    Tensor b = zeros({64}, TensorOptions().device(Device::cuda())).set_requires_grad(true);
    // The incoming gradient in the output's layout, as a channels-last model's next layer gives it.
    const Tensor gy = ones({16, 64, 14, 14}, TensorOptions().dtype(kFloat16).device(Device::cuda()).memory_format(
                                                 MemoryFormat::ChannelsLast));
    const int64_t before = cuda::layout_conversions(), fallbacks = cuda::cudnn_fallbacks();
    Tensor y = add ? batch_norm_add_relu(x, z, {}, {}, w, b, true) : batch_norm_relu(x, {}, {}, w, b, true);
    y.backward(gy);
    cuda::synchronize();
    INFO("a layout conversion here means cuDNN refused its fused kernels and the NCHW fallback ran");
    CHECK(cuda::layout_conversions() - before == 0);
    INFO("last cuDNN fallback: " << cuda::cudnn_last_fallback());
    CHECK(cuda::cudnn_fallbacks() - fallbacks == 0);
    CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(x.grad().is_contiguous(MemoryFormat::ChannelsLast));
    if (add) CHECK(z.grad().is_contiguous(MemoryFormat::ChannelsLast));
  }
}

TEST_CASE("a channels-last ResNet-18 step on the GPU converts no layouts", "[cuda][layout]") {
  if (!testing::cuda_ready()) return;
  if (!dispatch::has_kernel(OpId::conv2d, DeviceType::kCUDA, kFloat16) ||
      !dispatch::has_kernel(OpId::batch_norm, DeviceType::kCUDA, kFloat16)) {
    WARN("skipped: this build has no cuDNN convolution / batch norm");
    return;
  }
  manual_seed(3);
  auto net = models::create("resnet18", models::ModelOptions().num_classes(10));
  net.ptr()->to(Device::cuda());
  net.ptr()->to(MemoryFormat::ChannelsLast);
  int64_t batch_norms = 0;
  for (const auto& it : net.ptr()->named_buffers())
    if (it.key().size() > 13 && it.key().substr(it.key().size() - 13) == ".running_mean") ++batch_norms;
  optim::SGD opt(net.ptr()->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  amp::GradScaler scaler;
  const Tensor x = randn({4, 3, 64, 64}).to(Device::cuda()).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = randint(0, 10, {4}).to(Device::cuda());
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard ac(kFloat16);
      loss = nn::functional::cross_entropy(net(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  const int64_t fallbacks = cuda::cudnn_fallbacks();
  step();
  const int64_t before = cuda::layout_conversions();
  step();
  const int64_t n = cuda::layout_conversions() - before;
  // Batch norms run on cuDNN's persistent NHWC kernels (the last of each block fused with the
  // add and ReLU); were they refused, each would go through NCHW copies (up to five apiece), or
  // (a refused fusion alone) run unfused, which only the fallback count shows.
  INFO(n << " layout conversions in a step with " << batch_norms << " batch norms");
  CHECK(n == 0);
  INFO("last cuDNN fallback: " << cuda::cudnn_last_fallback());
  CHECK(cuda::cudnn_fallbacks() - fallbacks == 0);
}
