// Stochastic rounding: Philox's known answers, the rounding's exact up-probability and unbiasedness, the special values, and the optimizers without masters that use it (refusals, small updates kept, resume bit for bit, skipped steps, CPU == CUDA).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include <mpx/mpx.h>

#include "core/half.h"
#include "core/philox.h"
#include "ops/stochastic_round.h"
#include "tests/test_util.h"

using namespace mpx;
using Catch::Contains;

namespace {

float bf16_value(uint16_t b) { return detail::bf16_bits_to_f32(b); }
float f16_value(uint16_t h) { return detail::f16_bits_to_f32(h); }
float f32_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Byte-for-byte equality of two tensors' values (on the CPU).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor x = a.detach().cpu().contiguous(), y = b.detach().cpu().contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * x.element_size()) == 0;
}

// Leaf parameters of a few shapes in `dt`, the same for the same seed.
std::vector<Tensor> make_params(DType dt, uint64_t seed, Device d = Device()) {
  manual_seed(seed);
  std::vector<Tensor> ps;
  for (int64_t n : {int64_t{7}, int64_t{1000}, int64_t{4099}}) ps.push_back(randn({n}).to(dt).to(d).set_requires_grad(true));
  return ps;
}
// Gradients of step `step`: the same on every run and device.
void set_grads(const std::vector<Tensor>& ps, int step) {
  manual_seed(1000 + static_cast<uint64_t>(step));
  for (const auto& p : ps) p.set_grad(randn(p.sizes()).mul_(0.01).to(p.device()));
}

}  // namespace

TEST_CASE("philox4x32_10 gives Random123's known answers", "[sround]") {
  struct Kat {
    uint32_t c[4], k[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& t : kats) {
    const random::Philox4 r = random::philox4x32_10(t.c[0], t.c[1], t.c[2], t.c[3], t.k[0], t.k[1]);
    for (int i = 0; i < 4; ++i) CHECK(r.v[i] == t.out[i]);
  }
}

TEST_CASE("stochastic rounding rounds up with exactly the distance ratio, over every value of the dropped bits",
          "[sround]") {
  // bf16: 16 dropped bits, so the top 16 bits of the word decide; all 65536 of them are tried.
  for (uint32_t u : {0x3f800001u, 0x3f80ffffu, 0x3f808000u, 0xbf8123abu, 0x00012345u, 0x7f7f4000u, 0x3fc0c000u}) {
    const float x = f32_of_bits(u);
    INFO("bf16, x bits " << u);
    const uint16_t lo = static_cast<uint16_t>(u >> 16);
    int64_t ups = 0, neither = 0;
    for (uint32_t top = 0; top < 65536; ++top) {
      const uint16_t b = sround::bf16_bits(x, top << 16 | 0xabcdu);
      ups += b == lo + 1;
      neither += b != lo && b != lo + 1;
    }
    CHECK(neither == 0);
    CHECK(ups == static_cast<int64_t>(u & 0xffffu));  // P(up) = (|x| - lo) / ulp exactly
  }
  // f16 normal: 13 dropped bits.
  for (float x : {1.0001f, -3.14159f, 60001.3f, 6.2e-5f, 0.33333334f}) {
    INFO("f16, x " << x);
    const uint16_t lo = sround::f16_bits(x, 0);
    const double ulp = f16_value(lo + 1) - f16_value(lo);  // magnitudes: both move away from zero
    const double frac = (std::fabs(static_cast<double>(x)) - std::fabs(static_cast<double>(f16_value(lo)))) / std::fabs(ulp);
    int64_t ups = 0;
    for (uint32_t top = 0; top < 8192; ++top) ups += sround::f16_bits(x, top << 19) != lo;
    CHECK(static_cast<double>(ups) == frac * 8192.0);
  }
  // f16 subnormal (grid 2^-24): the fraction is taken to 32 bits, so the word's threshold is exact.
  const float sub = 1000.3f * 5.9604644775390625e-08f;  // 1000.3 units of 2^-24
  const uint16_t lo = sround::f16_bits(sub, 0);
  CHECK(lo == 1000);
  const double frac = static_cast<double>(sub) / 5.9604644775390625e-08 - 1000.0;
  const auto threshold = static_cast<uint32_t>(std::ldexp(1.0 - frac, 32));  // the first word that rounds up
  CHECK(sround::f16_bits(sub, threshold - 1) == 1000);
  CHECK(sround::f16_bits(sub, threshold) == 1001);
  CHECK(sround::f16_bits(sub, 0xffffffffu) == 1001);
}

TEST_CASE("stochastic rounding is unbiased: the mean of many roundings is the value within its standard error",
          "[sround]") {
  constexpr int64_t n = 200000;
  for (bool bf16 : {true, false}) {
    // Subnormals of each format: bf16 shares f32's (3e-39), f16's start below 2^-14 (7.1e-6).
    const std::vector<float> values = {1.0001f, -2.7182817f, 0.1f, 123.456f, bf16 ? 3e-39f : 7.1e-6f, -7.1e-6f};
    for (float x : values) {
      INFO((bf16 ? "bf16 " : "f16 ") << x);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t r = sround::draw(42, 3, 7, static_cast<uint64_t>(i)).v[0];
        sum += bf16 ? bf16_value(sround::bf16_bits(x, r)) : f16_value(sround::f16_bits(x, r));
      }
      const double mean = sum / n;
      const uint16_t lo = bf16 ? sround::bf16_bits(x, 0) : sround::f16_bits(x, 0);
      const double a = bf16 ? bf16_value(lo) : f16_value(lo), b = bf16 ? bf16_value(lo + 1) : f16_value(lo + 1);
      const double p = (x - a) / (b - a);
      const double se = std::fabs(b - a) * std::sqrt(p * (1 - p) / n);
      CHECK(p > 0);
      CHECK(std::fabs(mean - x) <= 4 * se);
    }
  }
}

TEST_CASE("stochastic rounding keeps inf, NaN, zeros and grid values, and past the largest value it reaches inf by its ratio",
          "[sround]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (uint32_t r : {0u, 0x80000000u, 0xffffffffu}) {
    CHECK(sround::bf16_bits(inf, r) == 0x7f80);
    CHECK(sround::bf16_bits(-inf, r) == 0xff80);
    CHECK(sround::f16_bits(inf, r) == 0x7c00);
    CHECK(sround::f16_bits(-inf, r) == 0xfc00);
    CHECK(std::isnan(bf16_value(sround::bf16_bits(nan, r))));
    CHECK(std::isnan(f16_value(sround::f16_bits(-nan, r))));
    CHECK((sround::f16_bits(-nan, r) & 0x8000) != 0);  // the sign is kept
    CHECK(sround::bf16_bits(0.0f, r) == 0);
    CHECK(sround::bf16_bits(-0.0f, r) == 0x8000);
    CHECK(sround::f16_bits(-0.0f, r) == 0x8000);
    CHECK(sround::bf16_bits(1.5f, r) == 0x3fc0);
    CHECK(sround::f16_bits(-65504.0f, r) == 0xfbff);
    CHECK(sround::f16_bits(70000.0f, r) == 0x7c00);  // from 65536 up: inf, as rounding to nearest gives
  }
  // Halfway between f16's largest finite value and 65536: inf for half of the words.
  CHECK(sround::f16_bits(65520.0f, 0x7fffffffu) == 0x7bff);
  CHECK(sround::f16_bits(65520.0f, 0x80000000u) == 0x7c00);
  CHECK(sround::bf16_bits(f32_of_bits(0x7f7f8000u), 0x7fffffffu) == 0x7f7f);
  CHECK(sround::bf16_bits(f32_of_bits(0x7f7f8000u), 0x80000000u) == 0x7f80);
}

TEST_CASE("optim: stochastic rounding needs master weights off, and amp refuses it with masters and at O0/O1", "[sround]") {
  auto ps = make_params(kBFloat16, 1);
  optim::SGD opt(ps, optim::SGDOptions(0.1));
  CHECK_THROWS_WITH(opt.set_stochastic_rounding(true), Contains("set_master_weights(false) first"));
  opt.set_master_weights(false);
  opt.set_stochastic_rounding(true, optim::StochasticRoundingOptions().seed(9));
  CHECK(opt.stochastic_rounding());
  CHECK(opt.rounding_seed() == 9);
  CHECK_THROWS_WITH(opt.set_master_weights(true), Contains("set_stochastic_rounding(false) first"));
  opt.set_stochastic_rounding(false);
  CHECK_NOTHROW(opt.set_master_weights(true));

  using amp::Options;
  CHECK_THROWS_WITH(Options().opt_level("O2").dtype(kBFloat16).stochastic_rounding(true).resolve(),
                    Contains("Add master_weights(false)"));
  CHECK_THROWS_WITH(Options().opt_level("O3").master_weights(true).stochastic_rounding(true).resolve(),
                    Contains("master_weights(true) was set"));
  CHECK_THROWS_WITH(Options().opt_level("O1").stochastic_rounding(true).resolve(), Contains("use O3, or O2"));
  CHECK_THROWS_WITH(Options().opt_level("O0").stochastic_rounding(true).resolve(), Contains("use O3, or O2"));
  CHECK_THROWS_WITH(Options().opt_level("O3").low_precision_state(true).resolve(), Contains("stochastic_rounding(true)"));
  const amp::Properties p =
      Options().opt_level("O2").dtype(kBFloat16).master_weights(false).stochastic_rounding(true).resolve();
  CHECK(p.stochastic_rounding);
  CHECK_THAT(p.str(), Contains("stochastic_rounding    : True"));
  CHECK_FALSE(amp::Options().opt_level("O3").resolve().stochastic_rounding);
}

TEST_CASE("optim: updates below half a unit in the last place survive in expectation with stochastic rounding",
          "[sround]") {
  for (DType dt : {kBFloat16, kFloat16}) {
    INFO(dtype_name(dt));
    for (bool sr : {false, true}) {
      Tensor p = ones({8192}, TensorOptions(dt)).set_requires_grad(true);
      optim::SGD opt(std::vector<Tensor>{p}, optim::SGDOptions(1.0));
      opt.set_master_weights(false);
      if (sr) opt.set_stochastic_rounding(true, optim::StochasticRoundingOptions().seed(5));
      const int steps = 40;
      for (int s = 0; s < steps; ++s) {
        p.set_grad(full({8192}, 1e-4));  // a quarter of f16's half-ulp at 1, far less of bf16's
        opt.step();
      }
      const double avg = mean(p.to(kFloat64)).item<double>();
      if (!sr) {
        CHECK(avg == 1.0);  // every update lost
      } else {
        CHECK(std::fabs(avg - (1.0 - steps * 1e-4)) < 2e-4);
      }
    }
  }
  // The state: f32 by default, the parameter's dtype with low_precision_state.
  for (bool low : {false, true}) {
    auto ps = make_params(kBFloat16, 2);
    optim::Adam opt(ps, optim::AdamOptions(1e-3));
    opt.set_master_weights(false);
    opt.set_stochastic_rounding(true, optim::StochasticRoundingOptions().low_precision_state(low));
    set_grads(ps, 0);
    opt.step();
    CHECK(opt.state(ps[1]).buffers.at("exp_avg").dtype() == (low ? kBFloat16 : kFloat32));
    CHECK(opt.state(ps[1]).buffers.at("exp_avg_sq").dtype() == (low ? kBFloat16 : kFloat32));
    CHECK_FALSE(opt.state(ps[1]).master.defined());
  }
}

TEST_CASE("optim: a stochastically rounded step is reproducible, and a saved and loaded state resumes bit for bit",
          "[sround]") {
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "mpx_sround_state.safetensors";
  for (bool adam : {false, true}) {
    for (bool low : {false, true}) {
      INFO((adam ? "AdamW" : "SGD") << (low ? ", bf16 state" : ", f32 state"));
      auto make = [&](std::vector<Tensor> ps, uint64_t seed) -> std::unique_ptr<optim::Optimizer> {
        std::unique_ptr<optim::Optimizer> o;
        if (adam) o = std::make_unique<optim::AdamW>(ps, optim::AdamWOptions(1e-2).amsgrad(true));
        else o = std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.5).momentum(0.9).weight_decay(1e-3));
        o->set_master_weights(false);
        o->set_stochastic_rounding(true, optim::StochasticRoundingOptions().low_precision_state(low).seed(seed));
        return o;
      };
      // Uninterrupted: 6 steps.
      auto whole = make_params(kBFloat16, 3);
      auto ow = make(whole, 77);
      for (int s = 0; s < 6; ++s) set_grads(whole, s), ow->step();
      // The same again: the same bits. Another seed: other bits.
      auto again = make_params(kBFloat16, 3);
      auto oa = make(again, 77);
      auto other = make_params(kBFloat16, 3);
      auto oo = make(other, 78);
      for (int s = 0; s < 6; ++s) set_grads(again, s), oa->step(), set_grads(other, s), oo->step();
      for (size_t i = 0; i < whole.size(); ++i) CHECK(same_bits(whole[i], again[i]));
      CHECK_FALSE(same_bits(whole[2], other[2]));
      // Three steps, saved to a file; a new optimizer (another seed) loads it and takes three more.
      auto first = make_params(kBFloat16, 3);
      {
        auto o1 = make(first, 77);
        for (int s = 0; s < 3; ++s) set_grads(first, s), o1->step();
        const optim::OptimizerState st = o1->state_dict();
        CHECK(st.scalars.at("stochastic_rounding.enabled") == 1.0);
        CHECK(st.scalars.at("stochastic_rounding.low_precision_state") == (low ? 1.0 : 0.0));
        save(*o1, file.string());
      }
      std::vector<Tensor> resumed;
      for (const auto& p : first) resumed.push_back(p.detach().clone().set_requires_grad(true));
      auto o2 = make(resumed, 12345);
      load(*o2, file.string());
      CHECK(o2->rounding_seed() == 77);
      for (int s = 3; s < 6; ++s) set_grads(resumed, s), o2->step();
      for (size_t i = 0; i < whole.size(); ++i) {
        CHECK(same_bits(whole[i], resumed[i]));
        for (const auto& [name, b] : ow->state(whole[i]).buffers) CHECK(same_bits(b, o2->state(resumed[i]).buffers.at(name)));
      }
    }
  }
  std::filesystem::remove(file);
}

namespace {
struct TinyImpl : nn::Module {
  TinyImpl() { fc = register_module("fc", nn::Linear(8, 4)); }
  Tensor forward(const Tensor& x) { return fc(x); }
  nn::Linear fc{nullptr};
};
MPX_MODULE(Tiny);
}  // namespace

TEST_CASE("amp O3 bf16 with stochastic rounding: a step with an inf gradient is skipped and draws nothing", "[sround]") {
  manual_seed(5);
  const Tensor x = randn({4, 8});
  // Run a: one clean step. Run b: an overflowing step (skipped), then the same clean step. O3 keeps
  // its static scale 1.0 through the skip, so both clean steps see the same gradients.
  std::vector<Tensor> weights;
  for (bool overflow_first : {false, true}) {
    amp::reset();
    manual_seed(4);
    Tiny net;
    optim::Adam opt(net->parameters(), optim::AdamOptions(1e-2));
    amp::initialize(net, opt,
                    amp::Options().opt_level("O3").dtype(kBFloat16).stochastic_rounding(true).verbosity(0));
    REQUIRE(opt.stochastic_rounding());
    const Tensor w0 = net->fc->weight.detach().clone();
    if (overflow_first) {
      opt.zero_grad();
      amp::scale_loss(mean(net(x)) * std::numeric_limits<double>::infinity(), opt).backward();
      opt.step();
      CHECK(amp::skipped_steps(opt) == 1);
      CHECK(same_bits(net->fc->weight, w0));
      CHECK(opt.step_count(net->fc->weight) == 0);
    }
    opt.zero_grad();
    amp::scale_loss(mean(net(x)), opt).backward();
    opt.step();
    CHECK(opt.step_count(net->fc->weight) == 1);
    CHECK_FALSE(same_bits(net->fc->weight, w0));
    weights.push_back(net->fc->weight.detach().clone());
  }
  CHECK(same_bits(weights[0], weights[1]));
  amp::reset();
}

TEST_CASE("cuda stochastic rounding: the CUDA steps round to the CPU's bits for the same key", "[cuda][sround]") {
  if (!testing::cuda_ready()) return;
  const Device gpu = Device::cuda();
  for (DType dt : {kBFloat16, kFloat16}) {
    INFO(dtype_name(dt));
    // SGD on values whose f32 update is exact (a power-of-two lr times low-precision gradients,
    // added to low-precision weights): fused multiply-adds cannot change it, so the rounding
    // alone decides the bits, and they must agree everywhere.
    auto exact = [&](Device d) {
      auto ps = make_params(dt, 6, d);
      optim::SGD opt(ps, optim::SGDOptions(1.0 / 64));
      opt.set_master_weights(false);
      opt.set_stochastic_rounding(true, optim::StochasticRoundingOptions().seed(31));
      for (int s = 0; s < 3; ++s) {
        manual_seed(50 + static_cast<uint64_t>(s));
        for (const auto& p : ps) p.set_grad(randn(p.sizes()).to(dt).to(d));
        opt.step();
      }
      return ps;
    };
    const auto c = exact(Device()), g = exact(gpu);
    for (size_t i = 0; i < c.size(); ++i) CHECK(same_bits(c[i], g[i]));
    // Adam with low-precision state: sqrt and division may differ in f32's last place between
    // the devices, which moves a rounding only when a draw lands in that sliver (about 2^-16 of
    // them for bf16): nearly every element agrees, the rest by one unit.
    auto adam = [&](Device d) {
      auto ps = make_params(dt, 7, d);
      optim::Adam opt(ps, optim::AdamOptions(1e-2));
      opt.set_master_weights(false);
      opt.set_stochastic_rounding(true, optim::StochasticRoundingOptions().seed(32).low_precision_state(true));
      for (int s = 0; s < 3; ++s) set_grads(ps, s), opt.step();
      return ps;
    };
    const auto ca = adam(Device()), ga = adam(gpu);
    for (size_t i = 0; i < ca.size(); ++i) {
      const Tensor diff = ne(ca[i], ga[i].cpu()).to(kFloat64).sum();
      CHECK(diff.item<double>() <= 2 + 0.002 * static_cast<double>(ca[i].numel()));
      CHECK(testing::rel_err(ga[i], ca[i]) < 1e-2);
    }
  }
}
