// amp's loss scaling: the overflow skip and its diagnosis, scale bounds, accumulation, clipping on the masters, checkpoint/resume, several models and losses, static scales.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include <mpx/mpx.h>

#include "test_amp_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;
using mpx::testing::any_contains;
using mpx::testing::captured;
using mpx::testing::Net;
using mpx::testing::sink_to_captured;
using mpx::testing::snapshot;

TEST_CASE("amp skips an overflowed step with apex's message and diagnoses it", "[amp]") {
  amp::reset();
  sink_to_captured();
  manual_seed(4);
  Net net(false);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  amp::initialize(net, opt, amp::Options().opt_level("O2").verbosity(1).diagnose(true));
  Tensor x = randn({4, 8});
  // Clean step first so there is momentum state to keep bit-identical.
  amp::scale_loss(mean(net(x)), opt).backward();
  opt.step();
  opt.zero_grad();
  const Tensor w = snapshot(net->fc1->weight), m = snapshot(opt.master(net->fc1->weight));
  const Tensor mom = snapshot(opt.state(net->fc1->weight).buffers.at("momentum_buffer"));
  const int64_t steps = opt.state(net->fc1->weight).step;
  captured().clear();
  // 1e10 * 65536 overflows f16 in the output's gradient: every gradient is inf/NaN.
  amp::scale_loss(mean(net(x)) * 1e10, opt).backward();
  CHECK(amp::loss_scale() == 32768.0);
  opt.step();
  CHECK(any_contains("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"));
  CHECK(amp::skipped_steps(opt) == 1);
  CHECK(equal(net->fc1->weight, w));
  CHECK(equal(opt.master(net->fc1->weight), m));
  CHECK(equal(opt.state(net->fc1->weight).buffers.at("momentum_buffer"), mom));
  CHECK(opt.state(net->fc1->weight).step == steps);
  {
    // LR schedulers count their own steps: a skipped step still advances the schedule.
    optim::StepLR sched(opt, 1, 0.5);
    sched.step();
    CHECK(opt.param_groups()[0].lr() == Approx(0.05));
    opt.param_groups()[0].set_lr(0.1);
  }
  CHECK_THAT(amp::last_diagnosis(), Catch::Contains("parameter \"fc1.weight\"") && Catch::Contains("65536.0"));
  CHECK(any_contains("amp diagnose"));
  // The next step is taken again.
  opt.zero_grad();
  amp::scale_loss(mean(net(x)), opt).backward();
  opt.step();
  CHECK(opt.state(net->fc1->weight).step == steps + 1);
  CHECK(amp::state_dict().at("loss_scaler0.unskipped") == 1.0);
  // A non-finite loss is named as such.
  opt.zero_grad();
  amp::scale_loss(mean(net(x)) * std::numeric_limits<double>::infinity(), opt).backward();
  opt.step();
  CHECK_THAT(amp::last_diagnosis(), Catch::Contains("the loss itself is non-finite") && Catch::Contains("32768.0"));
  CHECK(amp::skipped_steps(opt) == 2);
  // Rate limit: at most 10 messages, then powers of two.
  captured().clear();
  for (int i = 0; i < 14; ++i) {
    opt.zero_grad();
    amp::scale_loss(mean(net(x)) * 1e30, opt).backward();
    opt.step();
  }
  int n = 0;
  for (const auto& l : captured()) n += l.find("Gradient overflow.") != std::string::npos;
  CHECK(n == 8 + 1);  // skips 3..10 and the 16th
  CHECK(any_contains("rate-limited"));
  amp::reset();
}

TEST_CASE("amp min_loss_scale clamps and max_loss_scale caps the dynamic scale", "[amp]") {
  amp::reset();
  sink_to_captured();
  manual_seed(5);
  Net net(false);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.0));
  amp::initialize(net, opt, amp::Options().opt_level("O2").min_loss_scale(16384).max_loss_scale(1024.0 * 1024).verbosity(0));
  Tensor x = randn({4, 8});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    amp::scale_loss(mean(net(x)) * 1e10, opt).backward();
    opt.step();
  }
  CHECK(amp::loss_scale() == 16384.0);
  amp::load_state_dict({{"loss_scaler0.loss_scale", 1024.0 * 1024}, {"loss_scaler0.unskipped", 1999}});
  opt.zero_grad();
  amp::scale_loss(mean(net(x)) * 1e-4, opt).backward();  // small enough not to overflow at 2^20
  CHECK(amp::loss_scale() == 1024.0 * 1024);
  CHECK(amp::state_dict().at("loss_scaler0.unskipped") == 0.0);
  CHECK_THROWS_WITH(amp::load_state_dict({}), Catch::Contains("num_losses(1)"));
  amp::reset();
}

TEST_CASE("amp gradient accumulation with delay_unscale equals one large batch", "[amp]") {
  for (const char* level : {"O1", "O2"}) {
    amp::reset();
    manual_seed(6);
    Net a(false);
    Net b(false);
    b->load_state_dict(a->state_dict());
    optim::SGD oa(a->parameters(), optim::SGDOptions(0.1));
    optim::SGD ob(b->parameters(), optim::SGDOptions(0.1));
    amp::initialize({a, b}, {oa, ob}, amp::Options().opt_level(level).verbosity(0));
    Tensor x = randn({8, 8}), t = randn({8, 4});
    for (int k = 0; k < 2; ++k) {
      Tensor xs = x.narrow(0, 4 * k, 4), ts = t.narrow(0, 4 * k, 4);
      amp::scale_loss(sum((a(xs) - ts) * (a(xs) - ts)) / 64.0, oa, amp::ScaleLossOptions().delay_unscale(k == 0)).backward();
    }
    amp::scale_loss(sum((b(x) - t) * (b(x) - t)) / 64.0, ob).backward();
    auto ma = amp::master_params(oa), mb = amp::master_params(ob);
    REQUIRE(ma.size() == mb.size());
    for (size_t i = 0; i < ma.size(); ++i) {
      INFO(level << " param " << i);
      CHECK(ma[i].dtype() == kFloat32);
      CHECK(allclose(ma[i].grad(), mb[i].grad(), 2e-2, 2e-2));
    }
    oa.step();
    ob.step();
    CHECK(allclose(a->fc1->weight.to(kFloat32), b->fc1->weight.to(kFloat32), 1e-2, 1e-2));
  }
  amp::reset();
}

TEST_CASE("amp clipping master params after unscaling equals f32 clipping", "[amp]") {
  amp::reset();
  manual_seed(7);
  Net ref(false);
  Net net(false);
  net->load_state_dict(ref->state_dict());
  optim::SGD oref(ref->parameters(), optim::SGDOptions(0.1));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
  amp::initialize(net, opt, amp::Options().opt_level("O2").verbosity(0));
  Tensor x = randn({16, 8});
  mean(ref(x)).backward();
  amp::scale_loss(mean(net(x)), opt).backward();
  const double n_ref = nn::utils::clip_grad_norm_(ref->parameters(), 0.05);
  const double n_amp = nn::utils::clip_grad_norm_(amp::master_params(opt), 0.05);
  CHECK(n_amp == Approx(n_ref).epsilon(5e-3));
  CHECK(n_amp > 0.05);
  auto mp = amp::master_params(opt);
  auto rp = ref->parameters();
  for (size_t i = 0; i < mp.size(); ++i) CHECK(allclose(mp[i].grad(), rp[i].grad(), 1e-2, 1e-3));
  oref.step();
  opt.step();
  CHECK(allclose(opt.master(net->fc1->weight), ref->fc1->weight, 1e-3, 1e-3));
  amp::reset();
}

namespace {
// Runs `steps` O1/O2 iterations from the current state; step 1 overflows so the scale matters.
void train_steps(Net& net, optim::Optimizer& opt, const std::vector<Tensor>& xs, const std::vector<Tensor>& ts, int from,
                 int to) {
  for (int i = from; i < to; ++i) {
    opt.zero_grad();
    Tensor d = net(xs[i]) - ts[i];
    Tensor loss = mean(d * d) * (i == 1 ? 1e36 : 1.0);
    amp::scale_loss(loss, opt).backward();
    opt.step();
  }
}
}  // namespace

TEST_CASE("amp checkpoint at step k and resume equals the uninterrupted run bit for bit", "[amp]") {
  for (const char* level : {"O1", "O2"}) {
    for (DType low : {kFloat16, kBFloat16}) {
      INFO(level << " " << dtype_name(low));
      manual_seed(8);
      std::vector<Tensor> xs, ts;
      for (int i = 0; i < 8; ++i) {
        xs.push_back(randn({6, 8}));
        ts.push_back(randn({6, 4}));
      }
      const auto opts = amp::Options().opt_level(level).dtype(low).verbosity(0);
      amp::reset();
      manual_seed(9);
      Net full;
      optim::Adam ofull(full->parameters(), optim::AdamOptions(1e-2));
      amp::initialize(full, ofull, opts);
      train_steps(full, ofull, xs, ts, 0, 4);
      // Checkpoint (deep copies, as a file would hold).
      nn::StateDict msd;
      for (const auto& [k, v] : full->state_dict()) msd.insert(k, snapshot(v));
      optim::OptimizerState osd = ofull.state_dict();
      for (auto& [k, v] : osd.tensors) v = snapshot(v);
      const auto asd = amp::state_dict();
      // f16 scales dynamically from 2^16 (one overflow by now); bf16 keeps its static 1.
      CHECK(asd.at("loss_scaler0.loss_scale") == (low == kFloat16 ? 32768.0 : 1.0));
      train_steps(full, ofull, xs, ts, 4, 8);
      const auto amp_full = amp::state_dict();

      amp::reset();
      manual_seed(123);  // a different init: everything must come from the checkpoint
      Net res;
      optim::Adam ores(res->parameters(), optim::AdamOptions(1e-2));
      amp::initialize(res, ores, opts);
      res->load_state_dict(msd);
      ores.load_state_dict(osd);
      amp::load_state_dict(asd);
      train_steps(res, ores, xs, ts, 4, 8);
      auto pf = full->named_parameters();
      auto pr = res->named_parameters();
      for (const auto& [k, v] : pf) {
        INFO(k);
        CHECK(equal(v, pr[k]));
        CHECK(equal(ofull.master(v), ores.master(pr[k])));
      }
      CHECK(amp::state_dict() == amp_full);
    }
  }
  amp::reset();
}

TEST_CASE("amp two models, two optimizers, three losses with per-loss scalers (DCGAN)", "[amp]") {
  amp::reset();
  sink_to_captured();
  manual_seed(10);
  auto G = nn::Linear(4, 8);
  auto D = nn::Linear(8, 1);
  optim::Adam optG(G->parameters(), optim::AdamOptions(1e-3));
  optim::Adam optD(D->parameters(), optim::AdamOptions(1e-3));
  amp::initialize({D, G}, {optD, optG}, amp::Options().opt_level("O1").num_losses(3).verbosity(1));
  Tensor real = randn({5, 8}), z = randn({5, 4});
  // Start the scalers lower, as a resumed run would: 2^16 overflows f16 in these tiny nets' first steps.
  amp::load_state_dict({{"loss_scaler0.loss_scale", 1024}, {"loss_scaler0.unskipped", 0},
                        {"loss_scaler1.loss_scale", 1024}, {"loss_scaler1.unskipped", 0},
                        {"loss_scaler2.loss_scale", 1024}, {"loss_scaler2.unskipped", 0}});
  // Reference D gradients in f32, each loss separately.
  auto d_grad = [&](const Tensor& loss) {
    D->zero_grad();
    loss.backward();
    return snapshot(D->weight.grad());
  };
  Tensor ref_real = d_grad(mean(D->forward(real)));
  Tensor ref_fake = d_grad(mean(D->forward(G->forward(z).detach())) * -1.0);
  optD.zero_grad();
  optG.zero_grad();
  // errD_real (loss 0) and errD_fake (loss 1) both into optD; the second overflows.
  amp::scale_loss(mean(D(real)), optD, amp::ScaleLossOptions().loss_id(0)).backward();
  CHECK(allclose(D->weight.grad(), ref_real, 2e-2, 2e-3));
  amp::scale_loss(mean(D(G(z).detach())) * -1.0, optD, amp::ScaleLossOptions().loss_id(1)).backward();
  // Loss 0's gradients were kept (unscaled once) and loss 1's added, unscaled by its own scaler.
  CHECK(allclose(D->weight.grad(), ref_real + ref_fake, 2e-2, 2e-3));
  captured().clear();
  amp::scale_loss(mean(D(G(z).detach())) * 1e36, optD, amp::ScaleLossOptions().loss_id(1)).backward();
  const Tensor dw = snapshot(D->weight);
  optD.step();
  CHECK(equal(D->weight, dw));
  CHECK(any_contains("loss scaler 1 reducing loss scale to 512.0"));
  // errG (loss 2) into optG.
  const Tensor gw = snapshot(G->weight);
  amp::scale_loss(mean(D(G(z))) * -1.0, optG, amp::ScaleLossOptions().loss_id(2)).backward();
  optG.step();
  CHECK_FALSE(equal(G->weight, gw));
  CHECK(amp::loss_scale(0) == 1024.0);
  CHECK(amp::loss_scale(1) == 512.0);
  CHECK(amp::loss_scale(2) == 1024.0);
  CHECK(amp::skipped_steps(optD) == 1);
  CHECK(amp::skipped_steps(optG) == 0);
  auto sd = amp::state_dict();
  CHECK(sd.size() == 6);
  CHECK(sd.at("loss_scaler1.unskipped") == 0.0);
  CHECK(sd.at("loss_scaler2.unskipped") == 1.0);
  CHECK_THROWS_WITH(amp::scale_loss(mean(D(real)), optD, amp::ScaleLossOptions().loss_id(3)),
                    Catch::Contains("num_losses(4)"));
  amp::reset();
}

// Before: a static scale never checked for overflow (apex's behaviour), so --loss-scale 1e30 at O1
// wrote NaN into every weight, and O3 f16 accepted a scale f16 cannot hold.
TEST_CASE("amp with a static loss scale skips an overflowing step too: no non-finite gradient reaches the weights",
          "[amp]") {
  const Tensor x = [] { manual_seed(5); return randn({4, 8}); }();
  SECTION("O1, static 1e30: skipped, counted, diagnosed, scale kept") {
    amp::reset();
    sink_to_captured();
    manual_seed(4);
    Net net(false);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    amp::initialize(net, opt, amp::Options().opt_level("O1").loss_scale(1e30).verbosity(1).diagnose(true));
    const Tensor w = snapshot(net->fc1->weight);
    for (int i = 0; i < 3; ++i) {
      opt.zero_grad();
      amp::scale_loss(mean(net(x)), opt).backward();
      opt.step();
    }
    CHECK(amp::skipped_steps(opt) == 3);
    CHECK(amp::loss_scale() == 1e30);
    CHECK(equal(net->fc1->weight, w));
    for (const auto& p : net->parameters()) CHECK(p.all_finite());
    CHECK(any_contains("Skipping step, loss scaler 0 keeps its static loss scale"));
    CHECK_THAT(amp::last_diagnosis(), Catch::Contains("static loss scale") && Catch::Contains("static scale kept"));
  }
  SECTION("O3 at scale 1.0: an inf gradient is caught by one check pass") {
    for (DType low : {kFloat16, kBFloat16}) {
      INFO(dtype_name(low));
      amp::reset();
      sink_to_captured();
      manual_seed(4);
      Net net(false);
      optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
      amp::initialize(net, opt, amp::Options().opt_level("O3").dtype(low).verbosity(1));
      const Tensor w = snapshot(net->fc2->weight);
      opt.zero_grad();
      amp::scale_loss(mean(net(x)) * std::numeric_limits<double>::infinity(), opt).backward();
      opt.step();
      CHECK(amp::skipped_steps(opt) == 1);
      CHECK(equal(net->fc2->weight, w));
      CHECK(any_contains("keeps its static loss scale 1.0"));
      opt.zero_grad();
      amp::scale_loss(mean(net(x)), opt).backward();
      opt.step();
      CHECK(amp::skipped_steps(opt) == 1);
      CHECK_FALSE(equal(net->fc2->weight, w));
    }
  }
  SECTION("O0 is the f32 baseline: as in apex, nothing is checked (mpx train stops a diverged O0 run)") {
    amp::reset();
    Net net(false);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
    amp::initialize(net, opt, amp::Options().opt_level("O0").verbosity(0));
    amp::scale_loss(mean(net(x)) * std::numeric_limits<double>::infinity(), opt).backward();
    opt.step();
    CHECK(amp::skipped_steps(opt) == 0);
    CHECK_FALSE(net->fc2->weight.all_finite());
  }
  SECTION("a static scale the model's dtype cannot hold is a clear error") {
    amp::reset();
    Net net(false);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
    CHECK_THROWS_WITH(amp::initialize(net, opt, amp::Options().opt_level("O3").loss_scale(1e30).verbosity(0)),
                      Catch::Contains("larger than f16 can represent") && Catch::Contains("65504"));
    CHECK_THROWS_WITH(amp::Options().opt_level("O2").loss_scale("70000").resolve(), Catch::Contains("f16"));
    CHECK_NOTHROW(amp::Options().opt_level("O2").dtype(kBFloat16).loss_scale(1e30).resolve());
    CHECK_NOTHROW(amp::Options().opt_level("O1").loss_scale(1e30).resolve());
  }
  amp::reset();
}
