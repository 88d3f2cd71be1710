// Tests that the f32 conv kernels (oneDNN when built in, else Eigen) match the f64 Eigen kernels, and are deterministic.
#include <omp.h>

#include <catch2/catch.hpp>

#include "test_util.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/random.h"
#include "ops/conv.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

using namespace mpx;
using kernels::Conv2dParams;

namespace {

// f32 sums over a few hundred terms land near 1e-6 of the f64 result; scale at least 1.
bool close(const Tensor& a, const Tensor& ref, double rtol = 2e-5) { return testing::close(a, ref, rtol, 0.0, 1.0); }

bool bit_equal(const Tensor& a, const Tensor& b) {
  Tensor ac = a.contiguous(), bc = b.contiguous();
  return ac.sizes() == bc.sizes() && ac.dtype() == bc.dtype() &&
         std::memcmp(ac.raw_data(), bc.raw_data(), static_cast<size_t>(ac.numel()) * ac.element_size()) == 0;
}

Tensor as_format(const Tensor& t, bool cl) { return cl ? t.contiguous(MemoryFormat::ChannelsLast) : t.contiguous(); }

struct Case {
  int64_t N, G, Cg, Og, H, W, kh, kw;
  Pair s, p, d;
  bool bias, cl_x, cl_gy;
  int64_t Ho() const { return (H + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1; }
  int64_t Wo() const { return (W + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1; }
  std::string str() const {
    return "N" + std::to_string(N) + " G" + std::to_string(G) + " Cg" + std::to_string(Cg) + " Og" + std::to_string(Og) +
           " " + std::to_string(H) + "x" + std::to_string(W) + " k" + std::to_string(kh) + "x" + std::to_string(kw) +
           " s" + std::to_string(s[0]) + "," + std::to_string(s[1]) + " p" + std::to_string(p[0]) + "," +
           std::to_string(p[1]) + " d" + std::to_string(d[0]) + "," + std::to_string(d[1]) + (bias ? " bias" : "") +
           (cl_x ? " x:NHWC" : "") + (cl_gy ? " gy:NHWC" : "");
  }
};

// Random geometries (fixed seed) covering groups, dilation, stride, padding and both layouts.
std::vector<Case> random_cases(int count) {
  std::mt19937 rng(1234);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<Case> out;
  while (static_cast<int>(out.size()) < count) {
    Case c{pick(1, 4), pick(1, 3), pick(1, 6), pick(1, 6), pick(3, 13), pick(3, 13), pick(1, 3), pick(1, 3),
           {pick(1, 3), pick(1, 3)}, {pick(0, 2), pick(0, 2)}, {pick(1, 2), pick(1, 3)},
           pick(0, 1) == 1, pick(0, 1) == 1, pick(0, 1) == 1};
    if (c.Ho() > 0 && c.Wo() > 0) out.push_back(c);
  }
  // The ResNet shapes: 3x3 pad 1, 3x3 stride 2, 1x1 stride 2, with channel counts that are
  // multiples of oneDNN's 16-wide blocks.
  out.push_back({2, 1, 32, 32, 8, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, false, false, false});
  out.push_back({2, 1, 16, 32, 8, 8, 3, 3, {2, 2}, {1, 1}, {1, 1}, false, true, true});
  out.push_back({2, 1, 16, 32, 8, 8, 1, 1, {2, 2}, {0, 0}, {1, 1}, false, false, false});
  out.push_back({3, 1, 1, 16, 9, 9, 3, 3, {1, 1}, {1, 1}, {1, 1}, true, false, false});
  // 1x1 maps into 1x1 maps, where one kernel tap is live (a product on its weights).
  out.push_back({3, 1, 24, 40, 1, 1, 3, 3, {1, 1}, {1, 1}, {1, 1}, true, false, false});
  out.push_back({2, 1, 16, 24, 1, 1, 2, 2, {2, 2}, {1, 1}, {1, 1}, false, false, false});
  // A kernel covering its whole unpadded input (1x1 outputs): one product over all of it.
  out.push_back({3, 1, 24, 40, 5, 5, 5, 5, {1, 1}, {0, 0}, {1, 1}, true, false, false});
  out.push_back({2, 1, 16, 24, 3, 4, 3, 4, {2, 2}, {0, 0}, {1, 1}, false, true, true});
  // Wide layers on small maps, whose f32 weight gradients are one matrix product (im2col).
  out.push_back({1, 1, 256, 512, 4, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, true, false, false});
  out.push_back({2, 1, 256, 512, 7, 7, 3, 3, {2, 2}, {1, 1}, {1, 1}, false, true, true});
  return out;
}

// A bf16 result against f32 arithmetic on the same bf16 values, rounded once: equal but for
// rare one-ulp differences where the summation order moves a sum across a rounding boundary.
bool within_ulp(const Tensor& got, const Tensor& ref32) {
  NoGradGuard ng;
  REQUIRE(got.dtype() == kBFloat16);
  const Tensor a = got.to(kFloat64), r = ref32.to(kBFloat16).to(kFloat64);
  const double scale = abs(r).max().item<double>();
  const double differ = mean(ne(a, r).to(kFloat64)).item<double>();
  INFO("fraction of outputs not equal to the reference: " << differ);
  return differ < 0.01 && (abs(a - r) - (abs(r) * (1.0 / 128) + 1e-5 * scale)).max().item<double>() <= 0.0;
}

// The three kernels of case c called directly in dtype dt, on x, w, gy cast to dt in the case's
// layouts: y (plus bias b when the case has one), gx (plus the per-channel bias bx when defined,
// as conv_transpose2d's forward) and gw; weights (and gw) channels-last with cl_w.
std::array<Tensor, 3> run_kernels(const Case& c, DType dt, const Tensor& x, const Tensor& w, const Tensor& b,
                                  const Tensor& gy, const Tensor& bx, bool cl_w = false) {
  NoGradGuard ng;
  const Conv2dParams p{c.s, c.p, c.d, c.G};
  auto layout = [](bool cl) { return cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous; };
  const Tensor xd = as_format(x.to(dt), c.cl_x), gyd = as_format(gy.to(dt), c.cl_gy), wd = as_format(w.to(dt), cl_w);
  Tensor y = empty(gy.sizes(), TensorOptions(dt).memory_format(layout(c.cl_gy)));
  dispatch::kernel<kernels::Conv2dFn>(OpId::conv2d, Device::cpu(), dt)(y, xd, wd, c.bias ? b.to(dt) : Tensor(), p);
  Tensor gx = empty(x.sizes(), TensorOptions(dt).memory_format(layout(c.cl_x)));
  dispatch::kernel<kernels::Conv2dBackwardInputFn>(OpId::conv2d_backward_input, Device::cpu(), dt)(
      gx, gyd, wd, bx.defined() ? bx.to(dt) : Tensor(), p);
  Tensor gw = empty(w.sizes(), TensorOptions(dt).memory_format(layout(cl_w)));
  dispatch::kernel<kernels::Conv2dBackwardWeightFn>(OpId::conv2d_backward_weight, Device::cpu(), dt)(gw, gyd, xd, p);
  return {y, gx, gw};
}

// The three bf16 kernels of case c on bf16 values, against the f32 kernels on the same values.
void check_bf16_against_f32(const Case& c, bool cl_w = false) {
  INFO(c.str() << (cl_w ? " w:OHWI" : ""));
  const int64_t C = c.G * c.Cg, O = c.G * c.Og;
  // bf16 values, so that the f32 reference sees exactly what the bf16 kernels see.
  const Tensor x = randn({c.N, C, c.H, c.W}).to(kBFloat16), w = randn({O, c.Cg, c.kh, c.kw}).to(kBFloat16);
  const Tensor b = randn({O}).to(kBFloat16), gy = randn({c.N, O, c.Ho(), c.Wo()}).to(kBFloat16);
  const auto got = run_kernels(c, kBFloat16, x, w, b, gy, Tensor(), cl_w),
             ref = run_kernels(c, kFloat32, x, w, b, gy, Tensor(), cl_w);
  CHECK(within_ulp(got[0], ref[0]));
  CHECK(within_ulp(got[1], ref[1]));
  CHECK(within_ulp(got[2], ref[2]));
}

}  // namespace

TEST_CASE("conv f32 matches f64 through conv2d and autograd on random geometries", "[conv][onednn]") {
  INFO("CPU f32 convolutions: " << cpu_conv_backend());
  manual_seed(11);
  for (const Case& c : random_cases(40)) {
    INFO(c.str());
    const int64_t C = c.G * c.Cg, O = c.G * c.Og;
    Tensor x64 = randn({c.N, C, c.H, c.W}, kFloat64), w64 = randn({O, c.Cg, c.kh, c.kw}, kFloat64);
    Tensor b64 = c.bias ? randn({O}, kFloat64) : Tensor();
    Tensor gy64 = randn({c.N, O, c.Ho(), c.Wo()}, kFloat64);
    auto run = [&](DType dt, bool cl_x, bool cl_gy) {
      Tensor x = as_format(x64.to(dt), cl_x).detach().set_requires_grad(true);
      Tensor w = w64.to(dt).detach().set_requires_grad(true);
      Tensor b = c.bias ? b64.to(dt).detach().set_requires_grad(true) : Tensor();
      Tensor y = conv2d(x, w, b, c.s, c.p, c.d, c.G);
      if (cl_x && !x.is_contiguous()) CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
      y.backward(as_format(gy64.to(dt), cl_gy));
      return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), c.bias ? b.grad() : Tensor()};
    };
    auto ref = run(kFloat64, false, false);
    auto got = run(kFloat32, c.cl_x, c.cl_gy);
    CHECK(close(got[0], ref[0]));
    CHECK(close(got[1], ref[1]));
    CHECK(close(got[2], ref[2]));
    if (c.bias) CHECK(close(got[3], ref[3]));
  }
}

TEST_CASE("conv f32 kernels match f64 when called directly with mixed layouts", "[conv][onednn]") {
  manual_seed(12);
  for (const Case& c : random_cases(25)) {
    INFO(c.str());
    const int64_t C = c.G * c.Cg, O = c.G * c.Og;
    Tensor x64 = randn({c.N, C, c.H, c.W}, kFloat64), w64 = randn({O, c.Cg, c.kh, c.kw}, kFloat64);
    Tensor b64 = randn({O}, kFloat64), bx64 = randn({C}, kFloat64);
    Tensor gy64 = randn({c.N, O, c.Ho(), c.Wo()}, kFloat64);
    // The input gradient with a per-channel bias when the case has one, as conv_transpose2d's forward.
    const Tensor bx = c.bias ? bx64 : Tensor();
    // Weights OIHW, and for one group also OHWI (a channels-last model's).
    for (bool cl_w : {false, true}) {
      if (cl_w && c.G != 1) continue;
      INFO((cl_w ? "w:OHWI" : "w:OIHW"));
      const auto got = run_kernels(c, kFloat32, x64, w64, b64, gy64, bx, cl_w);
      const auto ref = run_kernels(c, kFloat64, x64, w64, b64, gy64, bx, cl_w);
      CHECK(close(got[0], ref[0]));
      CHECK(close(got[1], ref[1]));
      CHECK(close(got[2], ref[2]));
    }
  }
}

TEST_CASE("conv bf16 kernels equal f32 arithmetic on the same values rounded once (within one bf16 ulp)",
          "[conv][onednn]") {
  // Native (oneDNN's bf16 kernels) or on f32 copies, the contract is the GPU's: products and
  // sums in f32, each output rounded to nearest-even bf16 once. Summation order may move a
  // result across a rounding boundary: one ulp (plus a hair for sums that cancel) in rare
  // elements; any other rounding (truncation, double rounding) would miss in many.
  INFO("CPU convolutions: " << cpu_conv_backend() << ", bf16 native: " << cpu_conv_native(kBFloat16));
  if (cpu_conv_backend().find("avx512") != std::string::npos) CHECK(cpu_conv_native(kBFloat16));
  manual_seed(13);
  for (const Case& c : random_cases(25)) check_bf16_against_f32(c);
}

TEST_CASE("conv bf16 on the deep layers of a CNN: input gradient as a forward convolution, weight gradient in f32",
          "[conv][onednn]") {
  // Where oneDNN 2.x picks its AMX backward kernels, stride-1 input gradients run as forward
  // convolutions of flipped weights and short weight-gradient sums run in f32 (conv_onednn.cpp);
  // elsewhere these are the plain bf16 kernels. Either way the contract is f32 sums, one rounding.
  manual_seed(15);
  const Case cases[] = {
      // VGG's last blocks on 28-px inputs: 3x3 maps, and 1x1 maps where only the centre tap is live.
      {4, 1, 64, 64, 3, 3, 3, 3, {1, 1}, {1, 1}, {1, 1}, true, false, false},
      {4, 1, 32, 48, 1, 1, 3, 3, {1, 1}, {1, 1}, {1, 1}, false, false, false},
      // Other paddings (k - 1 - p from 0 to 4), a 1x1 kernel, channels-last activations.
      {2, 1, 32, 32, 6, 7, 5, 5, {1, 1}, {2, 2}, {1, 1}, false, true, false},
      {2, 1, 32, 32, 6, 6, 3, 3, {1, 1}, {0, 0}, {1, 1}, false, false, true},
      {2, 1, 32, 16, 5, 5, 5, 3, {1, 1}, {0, 1}, {1, 1}, false, true, true},
      {2, 1, 48, 32, 4, 4, 1, 1, {1, 1}, {0, 0}, {1, 1}, false, false, false},
      // Not eligible for the forward form: stride 2, dilation 2, groups (weight gradient still short).
      {2, 1, 32, 64, 8, 8, 3, 3, {2, 2}, {1, 1}, {1, 1}, false, false, false},
      {2, 1, 32, 32, 7, 7, 3, 3, {1, 1}, {2, 2}, {2, 2}, false, false, false},
      {2, 2, 16, 16, 4, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, false, false, false},
      // A long weight-gradient sum (N x Ho x Wo > 1024): the bf16 kernel.
      {8, 1, 32, 32, 14, 14, 3, 3, {1, 1}, {1, 1}, {1, 1}, false, false, false},
  };
  for (const Case& c : cases) check_bf16_against_f32(c);
}

TEST_CASE("conv bf16 on small maps as one matrix product (im2col / col2im around the AMX matmul)", "[conv][onednn]") {
  // Where oneDNN's matmul runs on AMX, NCHW bf16 convolutions with 64+ channels on small maps go
  // through conv_gemm_onednn.cpp: all three directions from 4x4 outputs down (64 x 128 channels
  // and more), the weight gradient up to 7x7. Elsewhere (no AMX) these are the convolution
  // kernels; the contract is the same.
  manual_seed(16);
  const Case cases[] = {
      // ResNet-18's last stage on 28-px inputs, with a bias; its stride-2 entry (7x7 -> 4x4).
      {4, 1, 64, 128, 4, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, true, false, false},
      {4, 1, 64, 128, 7, 7, 3, 3, {2, 2}, {1, 1}, {1, 1}, false, false, false},
      // 7x7 outputs (the weight gradient only), 2x2 maps, and padding 2 (rows of pure padding).
      {2, 1, 64, 64, 7, 7, 3, 3, {1, 1}, {1, 1}, {1, 1}, false, false, false},
      {4, 1, 128, 64, 2, 2, 3, 3, {1, 1}, {1, 1}, {1, 1}, true, false, false},
      {2, 1, 64, 128, 2, 2, 3, 3, {1, 1}, {2, 2}, {1, 1}, false, false, false},
      // Unequal kernel sides, strides and paddings.
      {3, 1, 64, 128, 5, 6, 3, 2, {1, 2}, {1, 0}, {1, 1}, false, false, false},
      // 1x1 maps into 1x1 maps: only the tap at (ph, pw) is live, whatever the channel count.
      {4, 1, 64, 64, 1, 1, 3, 3, {1, 1}, {1, 1}, {1, 1}, true, false, false},
      {2, 1, 24, 40, 1, 1, 2, 2, {2, 2}, {1, 1}, {1, 1}, false, false, false},
      // A kernel covering its whole input: DCGAN's first and last layers.
      {4, 1, 100, 128, 7, 7, 7, 7, {1, 1}, {0, 0}, {1, 1}, false, false, false},
      {4, 1, 128, 1, 4, 4, 4, 4, {1, 1}, {0, 0}, {1, 1}, true, false, false},
  };
  for (const Case& c : cases) check_bf16_against_f32(c);
  // A channels-last model (activations NHWC, weights OHWI): the same products without transposes.
  const Case nhwc[] = {
      {4, 1, 64, 128, 4, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, true, true, true},
      {4, 1, 128, 64, 7, 7, 3, 3, {2, 2}, {1, 1}, {1, 1}, false, true, true},
      {2, 1, 64, 64, 7, 7, 3, 3, {1, 1}, {1, 1}, {1, 1}, false, true, true},
      {3, 1, 64, 128, 5, 6, 3, 2, {1, 2}, {1, 0}, {1, 1}, false, true, true},
      {4, 1, 64, 64, 1, 1, 3, 3, {1, 1}, {1, 1}, {1, 1}, true, true, true},
      {4, 1, 100, 128, 7, 7, 7, 7, {1, 1}, {0, 0}, {1, 1}, true, true, true},
  };
  for (const Case& c : nhwc) check_bf16_against_f32(c, true);
}

TEST_CASE("conv_transpose2d f32 matches f64 with bias, groups and output_padding", "[conv][onednn]") {
  manual_seed(13);
  struct T {
    IntList xs, ws;
    Pair s, p, op;
    int64_t g;
    Pair d;
    bool cl;
  };
  // The last two have output rows that no input reaches (output_padding >= stride).
  const T cases[] = {
      {{2, 4, 5, 6}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, {1, 1}, false},
      {{2, 6, 5, 5}, {6, 2, 3, 2}, {2, 3}, {1, 0}, {1, 2}, 3, {1, 1}, true},
      {{1, 4, 4, 4}, {4, 2, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 2, {2, 2}, false},
      {{2, 3, 4, 5}, {3, 2, 2, 3}, {1, 1}, {1, 0}, {1, 0}, 1, {3, 1}, true},
  };
  for (const T& c : cases) {
    INFO("x " << shape_str(c.xs) << " w " << shape_str(c.ws));
    Tensor x64 = randn(c.xs, kFloat64), w64 = randn(c.ws, kFloat64), b64 = randn({c.ws[1] * c.g}, kFloat64);
    auto run = [&](DType dt) {
      Tensor x = as_format(x64.to(dt), c.cl).detach().set_requires_grad(true);
      Tensor w = w64.to(dt).detach().set_requires_grad(true);
      Tensor y = conv_transpose2d(x, w, b64.to(dt), c.s, c.p, c.op, c.g, c.d);
      sum(y * y).backward();
      return std::vector<Tensor>{y.detach(), x.grad(), w.grad()};
    };
    auto ref = run(kFloat64), got = run(kFloat32);
    for (size_t i = 0; i < ref.size(); ++i) CHECK(close(got[i], ref[i]));
  }
}

TEST_CASE("conv f32 forward and backward are bit-identical run to run", "[conv][onednn]") {
  const int saved = omp_get_max_threads();
  manual_seed(14);
  // Strided 32 -> 32 channels, and the ResNet layer-1 shape (64 -> 64, 3x3, stride 1).
  const int64_t C = GENERATE(32, 64);
  const int64_t S = C == 32 ? 2 : 1, N = C == 32 ? 8 : 16, H = C == 32 ? 12 : 28;
  Tensor x0 = randn({N, C, H, H}), w0 = randn({C, C, 3, 3}), gy = randn({N, C, H / S, H / S});
  auto step = [&](bool cl) {
    Tensor x = as_format(x0, cl).detach().set_requires_grad(true), w = w0.detach().set_requires_grad(true);
    Tensor y = conv2d(x, w, {}, {S, S}, {1, 1});
    y.backward(gy);
    return std::vector<Tensor>{y.detach(), x.grad(), w.grad()};
  };
  std::vector<std::vector<Tensor>> by_threads;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (bool cl : {false, true}) {
      auto a = step(cl), b = step(cl);
      INFO(threads << " threads, channels-last " << cl);
      for (size_t i = 0; i < a.size(); ++i) CHECK(bit_equal(a[i], b[i]));
      if (!cl) by_threads.push_back(a);
    }
  }
  omp_set_num_threads(saved);
  // Across thread counts the weight gradient may differ in the last bits: oneDNN splits its
  // reduction over the batch by thread (seen for the 64-channel case with oneDNN 2.6; the
  // Eigen kernels sum fixed buckets and do not). y and the input gradient are bit-identical.
  for (size_t i = 0; i < by_threads[0].size(); ++i) {
    INFO("output " << i);
    if (i < 2) CHECK(bit_equal(by_threads[1][i], by_threads[0][i]));
    CHECK(close(by_threads[1][i], by_threads[0][i], 1e-5));
  }
}
