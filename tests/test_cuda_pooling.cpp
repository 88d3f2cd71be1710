// CUDA vs CPU: max, average and adaptive average pooling, padding and resampling, forward and backward, in every
// floating dtype, NCHW and channels-last (layout kept on the device), NaN inputs, odd and empty shapes; and, on any
// machine, the multiply-and-shift division the kernels index with.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/random.h"
#include "ops/cuda/fast_divmod.h"
#include "ops/elementwise.h"
#include "ops/pad.h"
#include "ops/pooling.h"
#include "ops/resize.h"
#include "test_util.h"

using namespace mpx;

namespace {

const std::vector<DType> kFloats = {kFloat32, kFloat64, kFloat16, kBFloat16};
using PoolFn = std::function<Tensor(const Tensor&)>;

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

Tensor randn_dt(const IntList& shape, DType dt, uint64_t seed) {
  manual_seed(seed);
  return randn(shape).to(dt);
}

bool is_channels_last_only(const Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(MemoryFormat::ChannelsLast);
}



// Runs f forward and backward (random upstream gradient) on the CPU and on the device, the
// device input NCHW or channels-last, and compares values, gradients and output layouts.
// `exact`: forward values must match bit for bit (max pooling).
enum class Fill { kRandn, kNaN, kTies };
void check_pool(const PoolFn& f, const IntList& shape, DType dt, bool channels_last, bool exact,
                const std::string& what, uint64_t seed = 7, Fill fill = Fill::kRandn) {
  INFO(what << (channels_last ? " channels-last" : " NCHW") << " dtype " << dtype_name(dt) << " input "
            << shape_str(shape));
  Tensor x = randn_dt(shape, dt, seed);
  if (fill != Fill::kRandn && x.numel() > 0) {
    Tensor xf = x.to(kFloat64).contiguous();
    double* p = xf.data_ptr<double>();
    if (fill == Fill::kNaN) {
      // NaNs at fixed places, some sharing a window with other NaNs.
      for (int64_t i = 0; i < xf.numel(); i += 7) p[i] = std::numeric_limits<double>::quiet_NaN();
    } else {
      // A few integer levels: many ties in every window; the gradient shows which one won.
      for (int64_t i = 0; i < xf.numel(); ++i) p[i] = std::floor(p[i] * 1.5);
    }
    x = xf.to(dt);
  }
  Tensor xc = x.detach();
  xc.set_requires_grad(true);
  Tensor xd = gpu(x);
  if (channels_last) xd = xd.contiguous(MemoryFormat::ChannelsLast);
  xd = xd.detach();
  xd.set_requires_grad(true);

  Tensor yc = f(xc);
  Tensor yd = f(xd);
  REQUIRE(yd.sizes() == yc.sizes());
  CHECK(yd.device().is_cuda());
  if (channels_last && yd.dim() == 4 && yd.size(1) > 1 && yd.size(2) * yd.size(3) > 1) {
    INFO("a channels-last input gives a channels-last output");
    CHECK(is_channels_last_only(yd));
  }
  if (!channels_last) CHECK(yd.is_contiguous());
  if (exact) {
    CHECK(testing::same_values(yd, yc));
  } else {
    testing::check_cuda_close(yd, yc, dt, what + " forward");
  }

  if (yc.numel() == 0 && xc.numel() == 0) return;
  const Tensor gy = randn_dt(yc.sizes(), dt, seed + 1);
  yc.backward(gy);
  Tensor gyd = gpu(gy);
  if (channels_last && gyd.dim() == 4) gyd = gyd.contiguous(MemoryFormat::ChannelsLast);
  yd.backward(gyd);
  REQUIRE(xd.grad().defined());
  if (channels_last && shape[1] > 1 && shape[2] * shape[3] > 1) {
    INFO("the gradient of a channels-last input is channels-last");
    CHECK(is_channels_last_only(xd.grad()));
  }
  testing::check_cuda_close(xd.grad(), xc.grad(), dt, what + " backward");
}

struct MaxCase {
  IntList shape;
  Pair k, s, p, d;
  bool ceil;
  const char* what;
};
const std::vector<MaxCase> kMaxCases = {
    {{2, 5, 13, 11}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, "k3 s2 p1"},
    {{2, 4, 12, 10}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false, "k2 s2"},
    {{2, 3, 15, 14}, {3, 3}, {1, 1}, {1, 1}, {2, 2}, false, "k3 s1 p1 dilation 2"},
    {{1, 3, 9, 8}, {3, 2}, {2, 1}, {1, 1}, {1, 2}, true, "k3x2 s2x1 d1x2 ceil"},
    {{2, 3, 10, 11}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true, "k2 s2 ceil (odd width)"},
    {{1, 37, 9, 9}, {3, 3}, {1, 1}, {0, 0}, {1, 1}, false, "k3 s1 overlapping, batch 1"},
    {{3, 2, 7, 7}, {5, 5}, {3, 3}, {2, 2}, {1, 1}, true, "k5 s3 p2 ceil"},
    // Channels-last kernels take up to 16 bytes of channels per thread when C allows: 16 and 24
    // give 8 (f16, bf16), 4 (f32) and 2 (f64) channels a thread; 12 gives 4, 4 and 2; 6 gives 2.
    {{2, 16, 13, 11}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, "k3 s2 p1, 16 channels"},
    {{1, 24, 9, 8}, {3, 2}, {2, 1}, {1, 1}, {1, 2}, true, "k3x2 s2x1 d1x2 ceil, 24 channels"},
    {{2, 12, 10, 11}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true, "k2 s2 ceil, 12 channels"},
    {{3, 6, 7, 7}, {5, 5}, {3, 3}, {2, 2}, {1, 1}, true, "k5 s3 p2 ceil, 6 channels"},
};

}  // namespace

TEST_CASE("FastDivmod divides every index like the / operator", "[pool]") {
  // Every divisor up to 2^12 and the extremes above, against numerators at and around each
  // multiple's boundary, the ends of the range and a pseudo-random spread (the host computes
  // exactly what the device does: a 32-bit high multiply, an add and a shift).
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (uint32_t d : {65535u, 65536u, 65537u, 1000003u, (1u << 30) - 1, 1u << 30, (1u << 30) + 1,
                     (1u << 31) - 1})
    divisors.push_back(d);
  const uint32_t top = (1u << 31) - 1;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  size_t wrong = 0, checked = 0;
  for (uint32_t d : divisors) {
    const mpx::cuda::FastDivmod f(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, top, top - 1, top - d + 1};
    for (uint32_t k : {1u, 2u, 3u, 1000u, top / d}) {
      const uint64_t m = uint64_t{k} * d;
      for (int64_t delta : {-1, 0, 1})
        if (m + delta <= top && static_cast<int64_t>(m) + delta >= 0) ns.push_back(static_cast<uint32_t>(m + delta));
    }
    for (int r = 0; r < 64; ++r) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      ns.push_back(static_cast<uint32_t>(state >> 33) & top);
    }
    for (uint32_t n : ns) {
      uint32_t q = 0, rem = 0;
      f.divmod(n, q, rem);
      ++checked;
      if (q != n / d || rem != n % d || f.div(n) != n / d || f.mod(n) != n % d) {
        if (++wrong <= 5) UNSCOPED_INFO("n " << n << " / d " << d << ": got " << q << " r " << rem);
      }
    }
  }
  INFO(checked << " divisions checked");
  CHECK(wrong == 0);
  CHECK(checked > 300000);
}

TEST_CASE("cuda max_pool2d forward and backward match the CPU", "[cuda][pool]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats)
    for (const MaxCase& c : kMaxCases)
      for (bool cl : {false, true}) {
        const auto f = [&](const Tensor& x) { return max_pool2d(x, c.k, c.s, c.p, c.d, c.ceil); };
        check_pool(f, c.shape, dt, cl, true, std::string("max_pool2d ") + c.what);
      }
}

TEST_CASE("cuda max_pool2d propagates NaN like the CPU", "[cuda][pool]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats)
    for (bool cl : {false, true}) {
      check_pool([](const Tensor& x) { return max_pool2d(x, {3, 3}, {2, 2}, {1, 1}); }, {2, 3, 9, 10}, dt, cl, true,
                 "max_pool2d NaN k3 s2 p1", 3, Fill::kNaN);
      check_pool([](const Tensor& x) { return max_pool2d(x, {2, 2}, {1, 1}); }, {1, 4, 6, 7}, dt, cl, true,
                 "max_pool2d NaN k2 s1", 5, Fill::kNaN);
      check_pool([](const Tensor& x) { return max_pool2d(x, {3, 3}, {2, 2}, {1, 1}); }, {2, 16, 9, 10}, dt, cl, true,
                 "max_pool2d NaN k3 s2 p1, 16 channels", 4, Fill::kNaN);
    }
}

TEST_CASE("cuda max_pool2d ties pick the first maximum like the CPU", "[cuda][pool]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats)
    for (bool cl : {false, true}) {
      const auto f = [](const Tensor& x) { return max_pool2d(x, {3, 3}, {1, 1}, {1, 1}); };
      check_pool(f, {2, 3, 8, 9}, dt, cl, true, "max_pool2d ties", 6, Fill::kTies);
      check_pool(f, {2, 8, 8, 9}, dt, cl, true, "max_pool2d ties, 8 channels", 9, Fill::kTies);
      const auto g = [](const Tensor& x) { return max_pool2d(x, {2, 3}, {1, 2}, {1, 1}, {2, 1}, true); };
      check_pool(g, {1, 5, 7, 9}, dt, cl, true, "max_pool2d ties, dilation, ceil", 8, Fill::kTies);
    }
}

TEST_CASE("cuda avg_pool2d forward and backward match the CPU", "[cuda][pool]") {
  if (!testing::cuda_ready()) return;
  struct AvgCase {
    IntList shape;
    Pair k, s, p;
    bool ceil, incl;
    const char* what;
  };
  const std::vector<AvgCase> cases = {
      {{2, 5, 13, 11}, {3, 3}, {2, 2}, {1, 1}, false, true, "k3 s2 p1 include pad"},
      {{2, 5, 13, 11}, {3, 3}, {2, 2}, {1, 1}, false, false, "k3 s2 p1 exclude pad"},
      {{2, 4, 12, 10}, {2, 2}, {2, 2}, {0, 0}, false, true, "k2 s2"},
      {{1, 3, 9, 8}, {3, 2}, {2, 1}, {1, 1}, true, true, "k3x2 s2x1 p1 ceil include pad"},
      {{1, 3, 9, 8}, {3, 2}, {2, 1}, {1, 1}, true, false, "k3x2 s2x1 p1 ceil exclude pad"},
      {{2, 3, 10, 11}, {2, 2}, {2, 2}, {0, 0}, true, true, "k2 s2 ceil (odd width)"},
      {{1, 37, 9, 9}, {3, 3}, {1, 1}, {1, 1}, false, true, "k3 s1 overlapping, batch 1"},
  };
  for (DType dt : kFloats)
    for (const auto& c : cases)
      for (bool cl : {false, true}) {
        const auto f = [&](const Tensor& x) { return avg_pool2d(x, c.k, c.s, c.p, c.ceil, c.incl); };
        check_pool(f, c.shape, dt, cl, false, std::string("avg_pool2d ") + c.what);
      }
}

TEST_CASE("cuda adaptive_avg_pool2d forward and backward match the CPU", "[cuda][pool]") {
  if (!testing::cuda_ready()) return;
  struct AdaCase {
    IntList shape;
    Pair out;
    const char* what;
  };
  const std::vector<AdaCase> cases = {
      {{2, 5, 7, 7}, {1, 1}, "global 7x7"},
      {{3, 37, 5, 6}, {1, 1}, "global, channels not a multiple of 32"},
      {{1, 64, 1, 1}, {1, 1}, "global of 1x1"},
      {{2, 3, 61, 67}, {1, 1}, "global of a large plane"},
      {{3, 24, 5, 3}, {1, 1}, "global, 24 channels (several per thread in channels-last)"},
      {{2, 4, 14, 14}, {7, 7}, "14 -> 7"},
      {{2, 3, 10, 10}, {3, 3}, "10 -> 3"},
      {{1, 5, 11, 7}, {4, 3}, "11x7 -> 4x3"},
      {{2, 3, 4, 5}, {6, 7}, "upsampling bins 4x5 -> 6x7"},
      {{1, 6, 9, 9}, {7, 7}, "9 -> 7, batch 1"},
  };
  for (DType dt : kFloats)
    for (const auto& c : cases)
      for (bool cl : {false, true}) {
        const auto f = [&](const Tensor& x) { return adaptive_avg_pool2d(x, c.out); };
        check_pool(f, c.shape, dt, cl, false, std::string("adaptive_avg_pool2d ") + c.what);
      }
}

TEST_CASE("cuda pooling: a ResNet-sized stem and head", "[cuda][pool]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : {kFloat32, kFloat16})
    for (bool cl : {false, true}) {
      // About 2M input elements.
      check_pool([](const Tensor& x) { return max_pool2d(x, {3, 3}, {2, 2}, {1, 1}); }, {4, 32, 112, 112}, dt, cl,
                 true, "max_pool2d stem");
      check_pool([](const Tensor& x) { return adaptive_avg_pool2d(x, {1, 1}); }, {8, 2048, 7, 7}, dt, cl, false,
                 "global average head");
    }
}

TEST_CASE("cuda pooling: empty batch, 3-d input, mixed layouts", "[cuda][pool]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats) {
    for (bool cl : {false, true}) {
      const Tensor x = gpu(randn_dt({0, 3, 8, 8}, dt, 1));
      const Tensor xe = cl ? x.contiguous(MemoryFormat::ChannelsLast) : x;
      CHECK(max_pool2d(xe, {3, 3}, {2, 2}, {1, 1}).sizes() == IntList{0, 3, 4, 4});
      CHECK(avg_pool2d(xe, {2, 2}).sizes() == IntList{0, 3, 4, 4});
      CHECK(adaptive_avg_pool2d(xe, {1, 1}).sizes() == IntList{0, 3, 1, 1});
      CHECK(adaptive_avg_pool2d(xe, {3, 3}).sizes() == IntList{0, 3, 3, 3});
    }
    // 3-d [C, H, W] input.
    const Tensor x3 = randn_dt({4, 9, 9}, dt, 2);
    testing::check_cuda_close(max_pool2d(gpu(x3), {3, 3}, {2, 2}, {1, 1}), max_pool2d(x3, {3, 3}, {2, 2}, {1, 1}), dt, "3-d max");
    testing::check_cuda_close(avg_pool2d(gpu(x3), {3, 3}, {2, 2}, {1, 1}), avg_pool2d(x3, {3, 3}, {2, 2}, {1, 1}), dt, "3-d avg");
    testing::check_cuda_close(adaptive_avg_pool2d(gpu(x3), {2, 2}), adaptive_avg_pool2d(x3, {2, 2}), dt, "3-d adaptive");
    // A strided (neither NCHW nor channels-last) input is made dense first.
    const Tensor xs = randn_dt({2, 3, 10, 12}, dt, 3).transpose(2, 3);
    testing::check_cuda_close(max_pool2d(gpu(xs), {2, 2}), max_pool2d(xs, {2, 2}), dt, "transposed max");
    testing::check_cuda_close(avg_pool2d(gpu(xs), {3, 3}, {2, 2}, {1, 1}), avg_pool2d(xs, {3, 3}, {2, 2}, {1, 1}), dt,
                "transposed avg");
    testing::check_cuda_close(adaptive_avg_pool2d(gpu(xs), {1, 1}), adaptive_avg_pool2d(xs, {1, 1}), dt, "transposed global");
  }
}

TEST_CASE("cuda pooling backward with an NCHW gradient for a channels-last input", "[cuda][pool]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : {kFloat32, kBFloat16}) {
    const Tensor x = randn_dt({2, 6, 9, 9}, dt, 4);
    const Tensor gy = randn_dt({2, 6, 5, 5}, dt, 5);
    const std::vector<PoolFn> fns = {
        [](const Tensor& t) { return max_pool2d(t, {3, 3}, {2, 2}, {1, 1}); },
        [](const Tensor& t) { return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1}); },
        [](const Tensor& t) { return adaptive_avg_pool2d(t, {5, 5}); },
    };
    for (const auto& f : fns) {
      Tensor xc = x.detach();
      xc.set_requires_grad(true);
      f(xc).backward(gy);
      Tensor xd = gpu(x).contiguous(MemoryFormat::ChannelsLast).detach();
      xd.set_requires_grad(true);
      f(xd).backward(gpu(gy));  // NCHW gradient into a channels-last graph
      testing::check_cuda_close(xd.grad(), xc.grad(), dt, "mixed-layout backward");
      CHECK(is_channels_last_only(xd.grad()));  // the forward input's layout wins
    }
  }
}

TEST_CASE("cuda avg pooling double backward matches the CPU", "[cuda][pool]") {
  if (!testing::cuda_ready()) return;
  const Tensor x = randn_dt({2, 3, 8, 8}, kFloat64, 9);
  const Tensor gy = randn_dt({2, 3, 4, 4}, kFloat64, 10);
  const Tensor v = randn_dt({2, 3, 8, 8}, kFloat64, 11);
  for (bool cl : {false, true}) {
    auto run = [&](const Tensor& x0, const Tensor& gy0, const Tensor& v0) {
      Tensor xx = x0.detach();
      xx.set_requires_grad(true);
      Tensor g = gy0.detach();
      g.set_requires_grad(true);
      Tensor y = avg_pool2d(xx, {3, 3}, {2, 2}, {1, 1}, false, false);
      y.backward(g, false, true);
      Tensor gx = xx.grad();
      sum(mul(gx, v0)).backward();
      return g.grad();
    };
    Tensor xd = gpu(x), gyd = gpu(gy), vd = gpu(v);
    if (cl) {
      xd = xd.contiguous(MemoryFormat::ChannelsLast);
      gyd = gyd.contiguous(MemoryFormat::ChannelsLast);
      vd = vd.contiguous(MemoryFormat::ChannelsLast);
    }
    testing::check_cuda_close(run(xd, gyd, vd), run(x, gy, v), kFloat64, "avg_pool2d double backward");
  }
}

TEST_CASE("cuda pad (every mode) and interpolate forward and backward match the CPU", "[cuda][pool][pad]") {
  if (!testing::cuda_ready()) return;
  struct PadCase {
    IntList shape, pads;
    const char* mode;
  };
  const std::vector<PadCase> pads = {
      {{2, 3, 9}, {3, 5}, "reflect"},           {{2, 3, 9, 14}, {2, -1, 6, 1}, "replicate"},
      {{2, 3, 9, 14}, {-1, 3, 3, 1}, "circular"}, {{1, 2, 5, 6, 7}, {1, 2, 3, 0, 4, 1}, "reflect"},
      {{2, 3, 5, 6}, {1, 2, -1, 3}, "constant"},
  };
  const auto check = [](const std::function<Tensor(const Tensor&)>& f, const IntList& shape, DType dt,
                        const std::string& what) {
    INFO(what << " " << dtype_name(dt));
    Tensor x = randn_dt(shape, dt, 21).set_requires_grad(true);
    Tensor xg = gpu(x.detach()).set_requires_grad(true);
    const Tensor y = f(x), yg = f(xg);
    const Tensor gy = randn_dt(y.sizes(), dt, 22);
    sum(y * gy).backward();
    sum(yg * gpu(gy)).backward();
    testing::check_cuda_close(yg, y, dt, what + " forward");
    testing::check_cuda_close(xg.grad(), x.grad(), dt, what + " backward");
  };
  for (DType dt : kFloats) {
    for (const PadCase& c : pads)
      check([&](const Tensor& x) { return pad(x, c.pads, c.mode, 0.5); }, c.shape, dt, std::string("pad ") + c.mode);
    check([](const Tensor& x) { return interpolate(x, {20, 5}, {}, "bilinear"); }, {2, 3, 9, 14}, dt, "bilinear");
    check([](const Tensor& x) { return interpolate(x, {4, 31}, {}, "nearest"); }, {2, 3, 9, 14}, dt, "nearest");
  }
  // Integer data pads on the device too.
  const Tensor ints = tensor<int64_t>({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  CHECK(testing::same_values(pad(gpu(ints), {2, 1}, "reflect").cpu(), pad(ints, {2, 1}, "reflect")));
}
