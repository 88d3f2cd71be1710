// amp front end tests: opt-level tables and overrides, initialize, casting at the model boundary (loss scaling: test_amp_scaling.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
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

namespace {

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
  Tensor ids = arange(3);
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
