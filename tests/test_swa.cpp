// Tests for weight averaging (optim/swa_utils.h): AveragedModel's EMA and SWA means, amp models averaged in f32,
// buffers, state dicts; SWALR against PyTorch 2.15's learning rates; update_bn.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "amp/amp.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "test_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {

nn::Sequential small_net() {
  return nn::Sequential(nn::Linear(3, 4), nn::BatchNorm1d(4), nn::ReLU(), nn::Linear(4, 2));
}

// Sets every parameter of `net` to values drawn from `seed`.
void scramble(nn::Module& net, uint64_t seed) {
  manual_seed(seed);
  NoGradGuard ng;
  for (Tensor p : net.parameters()) p.copy_(randn(p.sizes()).to(p.dtype()));
}

}  // namespace

TEST_CASE("AveragedModel: an EMA and SWA's equal-weight mean of the weights, first update copies", "[swa]") {
  auto net = small_net();
  for (const bool ema : {true, false}) {
    INFO((ema ? "EMA" : "SWA"));
    auto avg = small_net();
    scramble(*net, 1);
    optim::AveragedModel am(avg.ptr(), *net,
                            ema ? optim::AveragedModelOptions().ema_decay(0.9) : optim::AveragedModelOptions());
    // The average starts as the model.
    CHECK(testing::max_abs_diff(avg->parameters()[0], net->parameters()[0]) == 0.0);
    std::vector<std::vector<Tensor>> snaps;
    for (uint64_t s = 2; s < 6; ++s) {
      scramble(*net, s);
      std::vector<Tensor> snap;
      for (const Tensor& p : net->parameters()) snap.push_back(p.detach().clone());
      snaps.push_back(snap);
      am.update_parameters(*net);
    }
    CHECK(am.n_averaged() == 4);
    const auto params = avg->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor want = snaps[0][i];  // the first update copies
      for (size_t k = 1; k < snaps.size(); ++k)
        want = ema ? want * 0.9 + snaps[k][i] * 0.1 : want + (snaps[k][i] - want) / double(k + 1);
      CHECK(testing::max_abs_diff(params[i], want) < 1e-6);
    }
    if (!ema) {  // SWA's mean is the plain mean of the snapshots
      Tensor mean0 = (snaps[0][0] + snaps[1][0] + snaps[2][0] + snaps[3][0]) / 4.0;
      CHECK(testing::max_abs_diff(params[0], mean0) < 1e-6);
    }
  }
}

TEST_CASE("AveragedModel: buffers copied or averaged, a custom avg_fn, state dicts in PyTorch's layout, errors",
          "[swa]") {
  auto net = small_net(), avg = small_net();
  auto* bn = net[1]->as<nn::BatchNorm1dImpl>();
  auto* abn = avg[1]->as<nn::BatchNorm1dImpl>();
  optim::AveragedModel copying(avg.ptr(), *net);
  {
    NoGradGuard ng;
    bn->running_mean.fill_(2.0);
  }
  copying.update_parameters(*net);
  CHECK(testing::max_abs_diff(abn->running_mean, full({4}, 2.0)) == 0.0);  // copied
  auto avg2 = small_net();
  optim::AveragedModel averaging(avg2.ptr(), *net, optim::AveragedModelOptions().ema_decay(0.5).use_buffers(true));
  averaging.update_parameters(*net);
  {
    NoGradGuard ng;
    bn->running_mean.fill_(4.0);
    bn->num_batches_tracked.fill_(10.0);
  }
  averaging.update_parameters(*net);
  auto* a2bn = avg2[1]->as<nn::BatchNorm1dImpl>();
  CHECK(testing::max_abs_diff(a2bn->running_mean, full({4}, 3.0)) < 1e-6);  // 2 * 0.5 + 4 * 0.5
  CHECK(a2bn->num_batches_tracked.dtype() == kInt64);
  CHECK(a2bn->num_batches_tracked.item<int64_t>() == 5);
  // PyTorch's state dict layout, and back.
  const nn::StateDict sd = averaging.state_dict();
  CHECK(sd.keys().front() == "n_averaged");
  CHECK(sd.find("module.1.running_mean") != nullptr);
  auto avg3 = small_net();
  optim::AveragedModel restored(avg3.ptr(), *net);
  restored.load_state_dict(sd);
  CHECK(restored.n_averaged() == 2);
  CHECK(testing::max_abs_diff(avg3->parameters()[0], avg2->parameters()[0]) == 0.0);
  // A custom rule: keep the maximum.
  auto avg4 = small_net();
  optim::AveragedModel maxer(avg4.ptr(), *net, optim::AveragedModelOptions().avg_fn(
      [](const Tensor& a, const Tensor& m, int64_t) { return maximum(a, m); }));
  const Tensor before = net->parameters()[0].detach().clone();
  maxer.update_parameters(*net);
  scramble(*net, 9);
  maxer.update_parameters(*net);
  CHECK(testing::max_abs_diff(avg4->parameters()[0], maximum(before, net->parameters()[0])) == 0.0);
  // The wrong architecture is named.
  auto other = nn::Sequential(nn::Linear(3, 5), nn::BatchNorm1d(5), nn::ReLU(), nn::Linear(5, 2));
  CHECK_THAT(testing::error_of([&] { optim::AveragedModel(other.ptr(), *net); }),
             Catch::Contains("entry 0 of the average is '0.weight'"));
  CHECK_THAT(testing::error_of([&] { optim::AveragedModel(net.ptr(), *net); }), Catch::Contains("second instance"));
  CHECK_THAT(testing::error_of([&] { restored.load_state_dict(nn::StateDict{{"weight", ones({1})}}); }),
             Catch::Contains("unexpected key 'weight'"));
}

TEST_CASE("AveragedModel keeps an f32 average of a bf16 model trained at amp O2", "[swa][amp]") {
  amp::reset();
  manual_seed(3);
  auto net = nn::Sequential(nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 1));
  auto avg = nn::Sequential(nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 1));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05));
  amp::initialize(net, opt, amp::Options().opt_level("O2").dtype(kBFloat16).verbosity(0));
  optim::AveragedModel ema(avg.ptr(), *net, optim::AveragedModelOptions().ema_decay(0.99));
  // The same EMA kept in bf16, for contrast.
  auto avg16 = nn::Sequential(nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 1));
  avg16->to(kBFloat16);
  optim::AveragedModel ema16(avg16.ptr(), *net, optim::AveragedModelOptions().ema_decay(0.99));
  const Tensor x = randn({32, 8}), y = randn({32, 1});
  Tensor want = net->parameters()[0].detach().to(kFloat32);
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    amp::scale_loss(F::mse_loss(net(x), y), opt).backward();
    opt.step();
    ema.update_parameters(*net);
    ema16.update_parameters(*net);
    const Tensor cur = net->parameters()[0].detach().to(kFloat32);
    want = step == 0 ? cur : want + (cur - want) * 0.01;
  }
  CHECK(net->parameters()[0].dtype() == kBFloat16);
  CHECK(avg->parameters()[0].dtype() == kFloat32);
  CHECK(testing::max_abs_diff(avg->parameters()[0], want) < 1e-6);
  // Steps of 1 % of a weight's change fall below bf16's resolution: the bf16 average lags far behind.
  INFO("bf16 " << testing::max_abs_diff(avg16->parameters()[0], want) << " f32 " << testing::max_abs_diff(avg->parameters()[0], want));
  CHECK(testing::max_abs_diff(avg16->parameters()[0], want) > 1e-3);
  CHECK(testing::max_abs_diff(avg16->parameters()[0], want) > 100 * testing::max_abs_diff(avg->parameters()[0], want));
  amp::reset();
}

TEST_CASE("SWALR anneals to swa_lr as PyTorch 2.15's does", "[swa][sched]") {
  struct Case {
    const char* strategy;
    int64_t anneal;
    std::vector<std::vector<double>> lrs;  // PyTorch's, per step, per group
  };
  const std::vector<Case> cases = {
      {"cos", 5, {{0.1, 0.3}, {0.0952254248593737, 0.2723074641843674}, {0.08272542485937369, 0.19980746418436737},
                  {0.06727457514062632, 0.11019253581563263}, {0.05477457514062632, 0.037692535815632616},
                  {0.05, 0.01}, {0.05, 0.01}, {0.05, 0.01}}},
      {"linear", 3, {{0.1, 0.3}, {0.08333333333333334, 0.20333333333333334}, {0.06666666666666668, 0.10666666666666667},
                     {0.05, 0.01}, {0.05, 0.01}}},
      {"cos", 0, {{0.05, 0.01}, {0.05, 0.01}, {0.05, 0.01}}},
  };
  for (const Case& c : cases) {
    INFO(c.strategy << " over " << c.anneal);
    Tensor p = zeros({1}).set_requires_grad(true), q = zeros({1}).set_requires_grad(true);
    std::vector<optim::ParamGroup> groups;
    groups.emplace_back(std::vector<Tensor>{p});
    groups.emplace_back(std::vector<Tensor>{q}, std::make_unique<optim::SGDOptions>(0.3));
    optim::SGD opt(std::move(groups), optim::SGDOptions(0.1));
    optim::SWALR s(opt, {0.05, 0.01}, c.anneal, c.strategy);
    for (size_t k = 0; k < c.lrs.size(); ++k) {
      if (k > 0) s.step();
      for (size_t g = 0; g < 2; ++g) {
        CHECK(opt.param_groups()[g].lr() == Approx(c.lrs[k][g]).epsilon(1e-14));
        CHECK(s.closed_form_lr(static_cast<int64_t>(k))[g] == Approx(c.lrs[k][g]).epsilon(1e-12));
      }
    }
  }
  Tensor p = zeros({1}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  CHECK_THAT(testing::error_of([&] { optim::SWALR(opt, 0.05, 5, "step"); }), Catch::Contains("\"cos\" or \"linear\""));
  CHECK_THAT(testing::error_of([&] { optim::SWALR(opt, {0.1, 0.2}); }), Catch::Contains("one per group"));
}

TEST_CASE("update_bn recomputes batch norm statistics as the mean over the data", "[swa]") {
  auto net = small_net();
  auto* bn = net[1]->as<nn::BatchNorm1dImpl>();
  net->eval();
  manual_seed(4);
  std::vector<Tensor> batches;
  for (int i = 0; i < 3; ++i) batches.push_back(randn({8, 3}) * double(i + 1) + double(i));
  optim::update_bn(*net, [&] {
    for (const Tensor& b : batches) net->forward(b);
  });
  // The cumulative average of the per-batch means of the first layer's outputs.
  NoGradGuard ng;
  Tensor want = zeros({4});
  for (const Tensor& b : batches) want = want + mean(net[0]->as<nn::LinearImpl>()->forward(b), {0}) / 3.0;
  CHECK(testing::max_abs_diff(bn->running_mean, want) < 1e-5);
  CHECK(bn->options.momentum().has_value());
  CHECK(*bn->options.momentum() == 0.1);
  CHECK(!net->is_training());
}
