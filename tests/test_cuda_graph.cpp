// [cuda] tests of cuda::Graph: replay of captured ops and of a whole mixed-precision training step
// equals eager execution; capture errors are clear.
#include <catch2/catch.hpp>

#include <limits>

#include "amp/grad_scaler.h"
#include "core/random.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/test_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;

TEST_CASE("cuda Graph replays captured ops on refilled inputs", "[cuda][graph]") {
  if (!testing::cuda_ready()) return;
  const Device gpu = Device::cuda();
  Tensor x = randn({1000, 33}).to(gpu);
  Tensor y;
  cuda::Graph g;
  g.capture_begin();
  y = relu(x * 2.0 + 1.0).sum(IntList{1});  // allocated during capture: graph memory
  g.capture_end();
  CHECK(g.captured());
  for (int i = 0; i < 3; ++i) {
    const Tensor fresh = randn({1000, 33});
    x.copy_(fresh);
    g.replay();
    CHECK(testing::rel_err(y, relu(fresh * 2.0 + 1.0).sum(IntList{1})) < 1e-6);
  }
}

TEST_CASE("cuda Graph of a GradScaler training step equals eager steps", "[cuda][graph]") {
  if (!testing::cuda_ready()) return;
  const Device gpu = Device::cuda();
  auto make = [&] {
    manual_seed(7);
    nn::Sequential net(nn::Linear(64, 128), nn::ReLU(), nn::Linear(128, 10));
    net->to(gpu);
    net->to(kFloat16);
    return net;
  };
  manual_seed(1);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(randn({32, 64}).to(kFloat16));
    ys.push_back(randint(0, 10, {32}));
  }
  auto step = [](nn::Sequential& net, optim::SGD& opt, amp::GradScaler& scaler, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(net->forward(x).to(kFloat32), y);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };

  // Eager: 8 steps.
  auto eager = make();
  optim::SGD opt_e(eager->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  amp::GradScaler sc_e(amp::GradScalerOptions().init_scale(256).growth_interval(3));
  for (int i = 0; i < 8; ++i) step(eager, opt_e, sc_e, xs[i].to(gpu), ys[i].to(gpu));

  // Graph: 3 eager warm-up steps, one capture, 5 replays on refilled static inputs.
  auto net = make();
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  amp::GradScaler sc(amp::GradScalerOptions().init_scale(256).growth_interval(3));
  Tensor x = xs[0].to(gpu), y = ys[0].to(gpu);
  for (int i = 0; i < 3; ++i) {
    x.copy_(xs[i]);
    y.copy_(ys[i]);
    step(net, opt, sc, x, y);
  }
  cuda::Graph g;
  g.capture_begin();
  Tensor loss = step(net, opt, sc, x, y);
  g.capture_end();
  for (int i = 3; i < 8; ++i) {
    x.copy_(xs[i]);
    y.copy_(ys[i]);
    g.replay();
  }
  CHECK(std::isfinite(loss.item<double>()));
  const auto pe = eager->parameters(), pg = net->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(testing::rel_err(pg[i], pe[i]) < 1e-6);
  CHECK(sc.get_scale() == sc_e.get_scale());
}

TEST_CASE("cuda Graph replays of an Adam step advance its step number and skip on overflow", "[cuda][graph]") {
  if (!testing::cuda_ready()) return;
  // A capture freezes host-side kernel arguments: the step number must come from the device,
  // or Adam's bias correction stays at the captured step (and skips would drive it to zero).
  const Device gpu = Device::cuda();
  manual_seed(2);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 9; ++i) {
    Tensor xi = randn({16, 32});
    if (i == 5) xi.narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());  // overflows: skipped
    xs.push_back(xi);
    ys.push_back(randint(0, 4, {16}));
  }
  auto run = [&](bool graph) {
    manual_seed(4);
    nn::Linear net(32, 4);
    net->to(gpu);
    optim::Adam opt(net->parameters(), optim::AdamOptions(1e-2));
    amp::GradScaler sc(amp::GradScalerOptions().init_scale(64));
    Tensor x = xs[0].to(gpu), y = ys[0].to(gpu);
    auto step = [&] {
      opt.zero_grad();
      Tensor loss = F::cross_entropy(net->forward(x), y);
      sc.scale(loss).backward();
      sc.step(opt);
      sc.update();
    };
    cuda::Graph g;
    for (int i = 0; i < 9; ++i) {
      x.copy_(xs[i]);
      y.copy_(ys[i]);
      if (!graph || i < 2) {
        step();
      } else {
        if (!g.captured()) {
          g.capture_begin();
          step();
          g.capture_end();
        }
        g.replay();
      }
    }
    return std::make_pair(net->weight.cpu(), opt.step_count(net->weight));
  };
  const auto [we, ne] = run(false);
  const auto [wg, ng] = run(true);
  CHECK(ne == 8);
  CHECK(ng == ne);
  CHECK(testing::rel_err(wg, we) < 1e-6);
}

TEST_CASE("cuda Graph capture of a host read is a clear error", "[cuda][graph]") {
  if (!testing::cuda_ready()) return;
  Tensor x = randn({10}).to(Device::cuda());
  cuda::Graph g;
  g.capture_begin();
  const std::string err = testing::error_of([&] { (void)(x * 2.0).sum().item<double>(); });
  CHECK(!err.empty());
  const std::string end_err = testing::error_of([&] { g.capture_end(); });
  CHECK(end_err.find("capture") != std::string::npos);
  CHECK_FALSE(g.captured());
  cuda::synchronize();  // the device is usable afterwards
  CHECK(testing::rel_err((x * 2.0).cpu(), x.cpu() * 2.0) == 0.0);
}
