// amp front end tests: opt-level tables and overrides, initialize, casting at the model boundary,
// scale_loss (overflow skip, accumulation, clipping, multiple losses), checkpoint/resume, diagnosis.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include <mpx/mpx.h>

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {

struct NetImpl : nn::Module {
  explicit NetImpl(bool bn = true) {
    fc1 = register_module("fc1", nn::Linear(8, 16));
    if (bn) norm = register_module("norm", nn::BatchNorm1d(16));
    fc2 = register_module("fc2", nn::Linear(16, 4));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = fc1(x);
    if (!norm.is_empty()) h = norm(h);
    return fc2(F::relu(h));
  }
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::BatchNorm1d norm{nullptr};
};
MPX_MODULE(Net);

// A user batch type amp casts through its to(DType).
struct Batch {
  Tensor images;
  Tensor labels;
  Batch to(DType t) const { return {images.to(t), labels}; }
};

// Records the dtypes its arguments arrive in; returns a tuple of floating and integer tensors.
struct ProbeImpl : nn::Module {
  ProbeImpl() { w = register_parameter("w", ones({2})); }
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const std::vector<Tensor>& v, const std::map<std::string, Tensor>& m,
                                     const std::tuple<Tensor, int>& t, const Batch& b, const Tensor& ids, double k) {
    seen = {x.dtype(), v[0].dtype(), v[1].dtype(), m.at("a").dtype(), std::get<0>(t).dtype(), b.images.dtype(),
            b.labels.dtype(), ids.dtype()};
    scalar = k;
    return {x * w.to(x.dtype()), ids};
  }
  Tensor w;
  std::vector<DType> seen;
  double scalar = 0;
};
MPX_MODULE(Probe);

std::vector<std::string>& captured() {
  static std::vector<std::string> lines;
  return lines;
}
void sink_to_captured() {
  captured().clear();
  amp::set_message_sink([](const std::string& s) { captured().push_back(s); });
}
bool any_contains(const std::string& needle) {
  for (const auto& l : captured())
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

Tensor snapshot(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().clone();
}

}  // namespace

TEST_CASE("amp opt-level tables match apex", "[amp]") {
  for (DType low : {kFloat16, kBFloat16}) {
    auto o0 = amp::opt_level_defaults("O0", low);
    CHECK(o0.cast_model_type == kFloat32);
    CHECK_FALSE(o0.patch_functions);
    CHECK_FALSE(o0.keep_batchnorm_fp32.has_value());
    CHECK(o0.master_weights == false);
    CHECK_FALSE(o0.dynamic_loss_scale);
    CHECK(o0.loss_scale == 1.0);
    // apex scales f16 dynamically; bf16 has f32's range, so its O1/O2 default to a static 1.
    const bool dynamic = low == kFloat16;
    auto o1 = amp::opt_level_defaults("O1", low);
    CHECK_FALSE(o1.cast_model_type.has_value());
    CHECK(o1.patch_functions);
    CHECK_FALSE(o1.keep_batchnorm_fp32.has_value());
    CHECK_FALSE(o1.master_weights.has_value());
    CHECK(o1.dynamic_loss_scale == dynamic);
    CHECK(o1.loss_scale == (dynamic ? 0.0 : 1.0));
    auto o2 = amp::opt_level_defaults("O2", low);
    CHECK(o2.cast_model_type == low);
    CHECK_FALSE(o2.patch_functions);
    CHECK(o2.keep_batchnorm_fp32 == true);
    CHECK(o2.master_weights == true);
    CHECK(o2.dynamic_loss_scale == dynamic);
    CHECK(o2.loss_scale == (dynamic ? 0.0 : 1.0));
    auto o3 = amp::opt_level_defaults("O3", low);
    CHECK(o3.cast_model_type == low);
    CHECK_FALSE(o3.patch_functions);
    CHECK(o3.keep_batchnorm_fp32 == false);
    CHECK(o3.master_weights == false);
    CHECK_FALSE(o3.dynamic_loss_scale);
    CHECK(o3.loss_scale == 1.0);
  }
  // Valid overrides resolve.
  auto p = amp::Options().opt_level("O3").keep_batchnorm_fp32(true).loss_scale("dynamic").resolve();
  CHECK(p.keep_batchnorm_fp32 == true);
  CHECK(p.dynamic_loss_scale);
  p = amp::Options().opt_level("O2").loss_scale(128.0).master_weights(false).resolve();
  CHECK_FALSE(p.dynamic_loss_scale);
  CHECK(p.loss_scale == 128.0);
  CHECK(p.master_weights == false);
  CHECK(amp::Options().opt_level("O2").loss_scale("512").resolve().loss_scale == 512.0);
  CHECK(amp::Options().opt_level("O1").cast_model_type(kFloat32).resolve().cast_model_type == kFloat32);
  CHECK(amp::Options().opt_level("O1").patch_functions(false).resolve().patch_functions == false);
  CHECK(amp::Options().opt_level("O2").dtype(kBFloat16).resolve().cast_model_type == kBFloat16);
  // bf16's dynamic scaling on request.
  CHECK(amp::Options().opt_level("O1").dtype(kBFloat16).loss_scale("dynamic").resolve().dynamic_loss_scale);
  CHECK(amp::Options().opt_level("O2").dtype(kBFloat16).loss_scale(64.0).resolve().loss_scale == 64.0);
}

TEST_CASE("amp in bf16 starts O1/O2 at a static loss scale of 1, dynamic on request", "[amp]") {
  for (const char* level : {"O1", "O2"}) {
    INFO(level);
    amp::reset();
    Net net;
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
    amp::initialize(net, opt, amp::Options().opt_level(level).dtype(kBFloat16).verbosity(0));
    CHECK(amp::loss_scale() == 1.0);
    amp::reset();
    Net dyn;
    optim::SGD opt2(dyn->parameters(), optim::SGDOptions(0.1));
    amp::initialize(dyn, opt2, amp::Options().opt_level(level).dtype(kBFloat16).loss_scale("dynamic").verbosity(0));
    CHECK(amp::loss_scale() == 65536.0);
    amp::reset();
    Net f16;
    optim::SGD opt3(f16->parameters(), optim::SGDOptions(0.1));
    amp::initialize(f16, opt3, amp::Options().opt_level(level).verbosity(0));
    CHECK(amp::loss_scale() == 65536.0);  // f16 keeps apex's dynamic scaling
  }
  amp::reset();
}

TEST_CASE("amp rejects every invalid override with apex's reasons", "[amp]") {
  using Catch::Contains;
  CHECK_THROWS_WITH(amp::Options().opt_level("O1").cast_model_type(kFloat16).resolve(),
                    Contains("should remain FP32") && Contains("O2"));
  CHECK_THROWS_WITH(amp::Options().opt_level("O1").keep_batchnorm_fp32(true).resolve(),
                    Contains("keep_batchnorm_fp32 should not be set"));
  CHECK_THROWS_WITH(amp::Options().opt_level("O1").keep_batchnorm_fp32(false).resolve(),
                    Contains("keep_batchnorm_fp32"));
  CHECK_THROWS_WITH(amp::Options().opt_level("O1").master_weights(true).resolve(), Contains("master_weights with O1"));
  CHECK_THROWS_WITH(amp::Options().opt_level("O1").master_weights(false).resolve(), Contains("master_weights with O1"));
  for (const char* l : {"O0", "O2", "O3"})
    CHECK_THROWS_WITH(amp::Options().opt_level(l).patch_functions(true).resolve(), Contains("O1"));
  CHECK_THROWS_WITH(amp::Options().opt_level("O2").loss_scale("huge").resolve(),
                    Contains("\"dynamic\" or a number"));
  CHECK_THROWS_WITH(amp::Options().opt_level("O2").loss_scale(-1.0).resolve(), Contains("positive"));
  CHECK_THROWS_WITH(amp::Options().opt_level("02").resolve(), Contains("letter O, not the number zero"));
  CHECK_THROWS_WITH(amp::Options().opt_level("O4").resolve(), Contains("'O0', 'O1', 'O2', 'O3'"));
  CHECK_THROWS_WITH(amp::Options().opt_level("O2").dtype(kFloat32).resolve(), Contains("kFloat16 or kBFloat16"));
  CHECK_THROWS_WITH(amp::Options().opt_level("O2").cast_model_type(kBFloat16).resolve(), Contains("set dtype("));
  CHECK_THROWS_WITH(amp::Options().opt_level("O2").cast_model_type(kInt64).resolve(), Contains("cast_model_type"));
  CHECK_THROWS_WITH(amp::Options().num_losses(0).resolve(), Contains("num_losses"));
  CHECK_THROWS_WITH(amp::Options().min_loss_scale(10).max_loss_scale(1).resolve(), Contains("max_loss_scale"));
}

TEST_CASE("amp initialize: twice is an error, f16 models are rejected, verbosity prints the table", "[amp]") {
  amp::reset();
  sink_to_captured();
  manual_seed(1);
  Net net;
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
  amp::initialize(net, opt, amp::Options().opt_level("O2").loss_scale(128.0));
  CHECK(any_contains("Selected optimization level O2"));
  CHECK(any_contains("  loss_scale = 128.0\n"));
  CHECK(any_contains("loss_scale             : 128.0"));
  CHECK(any_contains("Defaults for this optimization level are:"));
  CHECK(any_contains("After processing overrides"));
  CHECK(any_contains("master_weights         : True"));
  Net net2;
  CHECK_THROWS_WITH(amp::initialize(net2, opt, amp::Options().opt_level("O2").verbosity(0)),
                    Catch::Contains("only be passed through amp::initialize once"));
  amp::reset();
  Net net3;
  net3->to(kFloat16);
  optim::SGD opt3(net3->parameters(), optim::SGDOptions(0.1));
  CHECK_THROWS_WITH(amp::initialize(net3, opt3, amp::Options().verbosity(0)),
                    Catch::Contains("fc1.weight") && Catch::Contains("pass the model in f32"));
  amp::reset();
  CHECK_THROWS_WITH(amp::scale_loss(ones({}), opt), Catch::Contains("initialize was not called"));
}

TEST_CASE("amp O2/O3 cast the model, keep batch norm f32 bit-exact and seed masters from f32", "[amp]") {
  for (DType low : {kFloat16, kBFloat16}) {
    amp::reset();
    manual_seed(2);
    Net net;
    {
      NoGradGuard ng;
      net->norm->named_parameters()["weight"].uniform_(0.5, 1.5);
    }
    const Tensor w1 = snapshot(net->fc1->weight), bnw = snapshot(net->norm->named_parameters()["weight"]);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
    amp::initialize(net, opt, amp::Options().opt_level("O2").dtype(low).verbosity(0));
    CHECK(net->fc1->weight.dtype() == low);
    CHECK(net->fc2->bias.dtype() == low);
    CHECK(net->norm->named_parameters()["weight"].dtype() == kFloat32);
    CHECK(net->norm->named_buffers()["running_mean"].dtype() == kFloat32);
    CHECK(equal(net->norm->named_parameters()["weight"], bnw));
    CHECK(equal(opt.master(net->fc1->weight), w1));  // not the rounded copy
    CHECK_FALSE(equal(net->fc1->weight.to(kFloat32), w1));

    amp::reset();
    Net n3;
    optim::SGD o3(n3->parameters(), optim::SGDOptions(0.1));
    amp::initialize(n3, o3, amp::Options().opt_level("O3").dtype(low).verbosity(0));
    CHECK(n3->norm->named_parameters()["weight"].dtype() == low);
    CHECK(n3->norm->named_buffers()["running_var"].dtype() == low);
    Tensor y = n3(randn({4, 8}));
    CHECK(y.dtype() == kFloat32);  // outputs back to f32 by default

    amp::reset();
    Net n1;
    optim::SGD o1(n1->parameters(), optim::SGDOptions(0.1));
    amp::initialize(n1, o1, amp::Options().opt_level("O1").dtype(low).verbosity(0));
    CHECK(n1->fc1->weight.dtype() == kFloat32);
    CHECK(n1(randn({4, 8})).dtype() == low);  // autocast inside forward, no output cast (apex)
    CHECK(n1->forward(randn({4, 8})).dtype() == kFloat32);  // direct forward is untouched
    // The O1 forward goes through the weight cast cache, cleared when the forward ends...
    amp::clear_cast_cache();
    amp::reset_cast_cache_stats();
    n1(randn({4, 8}));
    CHECK(amp::cast_cache_stats().misses > 0);
    CHECK(amp::cast_cache_stats().entries == 0);
    {
      // ...unless the caller's own guard is live: then its exit clears them.
      amp::AutocastGuard outer(low);
      n1(randn({4, 8}));
      CHECK(amp::cast_cache_stats().entries > 0);
    }
    CHECK(amp::cast_cache_stats().entries == 0);
  }
  amp::reset();
}

TEST_CASE("amp O1 keeps a ResNet's activations low precision: batch norm runs in the arriving dtype", "[amp]") {
  // apex and torch.autocast leave batch_norm off their f32 lists: f16 in, f16 out, with f32
  // parameters and statistics. Running it in f32 doubled what a ResNet saves for backward.
  manual_seed(0);
  Tensor x = randn({8, 4, 5, 5}), w = rand({4}), b = randn({4});
  auto run = [&](bool autocast) {
    Tensor rm = zeros({4}), rv = ones({4});
    std::optional<amp::AutocastGuard> g;
    if (autocast) g.emplace(kFloat16);
    Tensor y = F::batch_norm(autocast ? x.to(kFloat16) : x, rm, rv, F::BatchNormFuncOptions().weight(w).bias(b).training(true));
    return std::make_tuple(y, rm, rv);
  };
  auto [y32, rm32, rv32] = run(false);
  auto [y16, rm16, rv16] = run(true);
  CHECK(y16.dtype() == kFloat16);
  CHECK(rm16.dtype() == kFloat32);
  CHECK(allclose(y16.to(kFloat32), y32, 1e-2, 1e-2));
  CHECK(allclose(rm16, rm32, 1e-3, 1e-3));
  CHECK(allclose(rv16, rv32, 1e-3, 1e-3));

  // What it buys: the peak tensor memory of a ResNet-20 training step at O1 is about half of O0's.
  auto step_peak = [](const std::string& level) {
    amp::reset();
    manual_seed(0);
    auto net = models::resnet20(models::ResNetOptions().in_channels(1).num_classes(10));
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    amp::initialize(net, opt, amp::Options().opt_level(level).verbosity(0));
    Tensor images = randn({32, 1, 28, 28});
    Tensor labels = randint(0, 10, {32});
    int64_t peak = 0;
    for (int i = 0; i < 2; ++i) {  // the second step: momentum buffers and casts already exist
      const int64_t base = cpu::memory_stats().allocated;
      cpu::reset_peak_memory_stats();
      opt.zero_grad();
      amp::scale_loss(F::cross_entropy(net(images), labels), opt).backward();
      opt.step();
      peak = cpu::memory_stats().peak_allocated - base;
    }
    amp::reset();
    return peak;
  };
  const int64_t o0 = step_peak("O0"), o1 = step_peak("O1");
  INFO("peak bytes of a step: O0 " << o0 << ", O1 " << o1);
  CHECK(o1 < o0 * 0.65);
}

TEST_CASE("amp casts holder-call inputs and outputs: containers, user types, ints untouched", "[amp]") {
  amp::reset();
  Probe probe;
  optim::SGD opt(probe->parameters(), optim::SGDOptions(0.1));
  amp::initialize(probe, opt, amp::Options().opt_level("O2").verbosity(0));
  Tensor ids = arange(3.0);
  auto [y, ids_out] = probe(ones({2}), std::vector<Tensor>{ones({1}), ones({1}, TensorOptions(kFloat64))},
                            std::map<std::string, Tensor>{{"a", ones({1})}}, std::tuple<Tensor, int>{ones({1}), 3},
                            Batch{ones({1}), ids}, ids, 2.5);
  CHECK(probe->seen == std::vector<DType>{kFloat16, kFloat16, kFloat16, kFloat16, kFloat16, kFloat16, kInt64, kInt64});
  CHECK(probe->scalar == 2.5);
  CHECK(y.dtype() == kFloat32);
  CHECK(ids_out.dtype() == kInt64);
  amp::reset();
  Probe p2;
  optim::SGD opt2(p2->parameters(), optim::SGDOptions(0.1));
  amp::initialize(p2, opt2, amp::Options().opt_level("O2").dtype(kBFloat16).cast_model_outputs(kBFloat16).verbosity(0));
  auto [y2, i2] = p2(ones({2}), std::vector<Tensor>{ones({1}), ones({1})}, std::map<std::string, Tensor>{{"a", ones({1})}},
                     std::tuple<Tensor, int>{ones({1}), 3}, Batch{ones({1}), ids}, ids, 1.0);
  CHECK(p2->seen[0] == kBFloat16);
  CHECK(y2.dtype() == kBFloat16);
  CHECK(i2.dtype() == kInt64);
  amp::reset();
}

TEST_CASE("amp enabled(false) is a no-op", "[amp]") {
  amp::reset();
  manual_seed(3);
  Net net;
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
  amp::initialize(net, opt, amp::Options().opt_level("O2").enabled(false));
  CHECK(net->fc1->weight.dtype() == kFloat32);
  Tensor x = randn({4, 8});
  Tensor loss = sum(net(x));
  amp::scale_loss(loss, opt).backward();
  Tensor g = snapshot(net->fc1->weight.grad());
  opt.zero_grad();
  sum(net(x)).backward();
  CHECK(equal(g, net->fc1->weight.grad()));
  amp::reset();
}

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
