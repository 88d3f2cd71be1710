// Tests for the CUDA elementwise kernels (unary, binary, comparisons, where, addc*, casts, fill, random) against the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/random.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "test_util.h"

using namespace mpx;
using testing::cuda_ready;
using testing::error_of;
using testing::rel_err;

namespace {

const Device kDev = Device::cuda();
const std::vector<DType> kFloats = {kFloat32, kFloat16, kBFloat16, kFloat64};
const std::vector<DType> kAll = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8, kBool};

Tensor dev(const Tensor& t) { return t.to(kDev); }

// Random, non-zero values of dtype dt (integers in a small range so comparisons see ties).
Tensor rnd(const IntList& shape, DType dt) {
  if (dt == kBool) return gt(rand(shape), 0.5);
  if (dt == kUInt8) return randint(1, 200, shape, TensorOptions(kUInt8));
  if (!is_floating(dt)) return randint(-50, 50, shape, TensorOptions(dt));
  NoGradGuard ng;
  Tensor x = randn(shape, TensorOptions(kFloat64));
  return add(x, mul(sign(x), 0.05)).to(dt);  // away from zero
}
// Positive values for log, sqrt, pow and friends.
Tensor rnd_pos(const IntList& shape, DType dt) {
  NoGradGuard ng;
  return add(abs(randn(shape, TensorOptions(kFloat64))), 0.25).to(dt);
}

// The layouts every kernel sees: dense, a transposed view, a broadcast (stride-0) view, an
// NHWC view, and a sliced view whose first element is not 16-byte aligned. Each maker takes
// a same-layout CPU/CUDA pair built from one source.
struct Layout {
  const char* name;
  std::function<Tensor(const Tensor&)> view;  // applied to a [6, 7, 9, 11] source
};
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> l = {
      {"contiguous", [](const Tensor& t) { return t; }},
      {"transposed", [](const Tensor& t) { return t.transpose(1, 3); }},
      {"broadcast", [](const Tensor& t) { return t.narrow(2, 0, 1).expand({6, 7, 9, 11}); }},
      {"channels_last", [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
      {"misaligned", [](const Tensor& t) { return t.flatten().narrow(0, 1, 6 * 7 * 9 * 11 - 3); }},
  };
  return l;
}

void expect_close(const Tensor& got, const Tensor& ref, const std::string& what) {
  INFO(what << " (" << dtype_name(ref.dtype()) << " " << shape_str(ref.sizes()) << ")");
  REQUIRE(got.device().is_cuda());
  REQUIRE(got.dtype() == ref.dtype());
  REQUIRE(got.sizes() == ref.sizes());
  if (!is_floating(ref.dtype())) {
    CHECK(testing::max_abs_diff(got.cpu().to(kInt64), ref.to(kInt64)) == 0);
    return;
  }
  const double e = rel_err(got, ref);
  INFO("rel err " << e << ", bound " << testing::cuda_tolerance(ref.dtype()));
  CHECK(e < testing::cuda_tolerance(ref.dtype()));
}

// Exact equality of values (sign of zero included; NaN equals NaN), for casts and random draws.
int64_t count_mismatches(const Tensor& got, const Tensor& ref) {
  NoGradGuard ng;
  REQUIRE(got.sizes() == ref.sizes());
  REQUIRE(got.dtype() == ref.dtype());
  if (ref.numel() == 0) return 0;
  if (!is_floating(ref.dtype())) {
    Tensor a = got.cpu().to(kInt64).contiguous(), b = ref.cpu().to(kInt64).contiguous();
    const int64_t* pa = a.data_ptr<int64_t>();
    const int64_t* pb = b.data_ptr<int64_t>();
    int64_t bad = 0;
    for (int64_t i = 0; i < a.numel(); ++i) bad += pa[i] != pb[i];
    return bad;
  }
  Tensor a = got.cpu().to(kFloat64).contiguous(), b = ref.cpu().to(kFloat64).contiguous();
  const double* pa = a.data_ptr<double>();
  const double* pb = b.data_ptr<double>();
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const bool same = (pa[i] == pb[i] && std::signbit(pa[i]) == std::signbit(pb[i])) ||
                      (std::isnan(pa[i]) && std::isnan(pb[i]));
    bad += !same;
  }
  return bad;
}

bool has_cuda_sum() { return dispatch::has_kernel(OpId::sum, DeviceType::kCUDA, kFloat32); }

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> f;
  bool positive;  // needs x > 0
};
const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> c = {
      {"neg", [](const Tensor& x) { return neg(x); }, false},
      {"abs", [](const Tensor& x) { return abs(x); }, false},
      {"sign", [](const Tensor& x) { return sign(x); }, false},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, true},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, false},
      {"exp", [](const Tensor& x) { return exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, true},
      {"sin", [](const Tensor& x) { return sin(x); }, false},
      {"cos", [](const Tensor& x) { return cos(x); }, false},
      {"erf", [](const Tensor& x) { return erf(x); }, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, false},
      {"relu", [](const Tensor& x) { return relu(x); }, false},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, false},
      {"gelu", [](const Tensor& x) { return gelu(x); }, false},
      {"silu", [](const Tensor& x) { return silu(x); }, false},
      {"softplus", [](const Tensor& x) { return softplus(x); }, false},
      {"softplus(beta 2, threshold 1)", [](const Tensor& x) { return softplus(x, 2.0, 1.0); }, false},
      {"pow 2", [](const Tensor& x) { return pow(x, 2.0); }, false},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }, false},
      {"pow 0.5", [](const Tensor& x) { return pow(x, 0.5); }, true},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }, false},
      {"clamp_min", [](const Tensor& x) { return clamp_min(x, 0.1); }, false},
  };
  return c;
}

}  // namespace

TEST_CASE("cuda elementwise: unary ops match the CPU in every float dtype and layout", "[cuda][elementwise]") {
  if (!cuda_ready()) return;
  manual_seed(1);
  for (DType dt : kFloats) {
    for (const auto& op : unary_cases()) {
      Tensor src = op.positive ? rnd_pos({6, 7, 9, 11}, dt) : rnd({6, 7, 9, 11}, dt);
      Tensor dsrc = dev(src);
      for (const auto& l : layouts()) {
        NoGradGuard ng;
        expect_close(op.f(l.view(dsrc)), op.f(l.view(src)), std::string(op.name) + " " + l.name);
      }
    }
  }
}

TEST_CASE("cuda elementwise: unary ops on odd, large and empty sizes", "[cuda][elementwise]") {
  if (!cuda_ready()) return;
  manual_seed(2);
  NoGradGuard ng;
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{1001}, int64_t{3000017}}) {
    for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
      Tensor x = rnd({n}, dt), dx = dev(x);
      expect_close(sigmoid(dx), sigmoid(x), "sigmoid n=" + std::to_string(n));
      expect_close(gelu(dx), gelu(x), "gelu n=" + std::to_string(n));
      expect_close(relu(dx), relu(x), "relu n=" + std::to_string(n));
    }
  }
  for (DType dt : kFloats) {
    Tensor e = dev(empty({0, 5}, TensorOptions(dt)));
    CHECK(exp(e).sizes() == IntList{0, 5});
    CHECK(relu(e).device() == kDev);
    CHECK((e + e).numel() == 0);
  }
}

TEST_CASE("cuda elementwise: integer neg, abs and clamp are exact", "[cuda][elementwise]") {
  if (!cuda_ready()) return;
  manual_seed(3);
  NoGradGuard ng;
  for (DType dt : {kInt64, kInt32}) {
    Tensor x = rnd({37, 53}, dt), dx = dev(x);
    expect_close(neg(dx), neg(x), "neg");
    expect_close(abs(dx.t()), abs(x.t()), "abs transposed");
    expect_close(clamp(dx, -20, 31), clamp(x, -20, 31), "clamp");
  }
  Tensor u = rnd({37, 53}, kUInt8);
  expect_close(clamp(dev(u), 30, 150.5), clamp(u, 30, 150.5), "clamp u8");
}

TEST_CASE("cuda elementwise: binary ops match the CPU with broadcasting and every layout", "[cuda][elementwise]") {
  if (!cuda_ready()) return;
  manual_seed(4);
  NoGradGuard ng;
  using Bin = std::function<Tensor(const Tensor&, const Tensor&)>;
  struct Case { const char* name; Bin f; bool floats_only; bool positive; };
  const std::vector<Case> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, false, false},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); }, false, false},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, -3.0); }, false, false},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, false, false},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, true, false},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, false, false},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, false, false},
  };
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8}) {
    for (const auto& c : cases) {
      if (c.floats_only && !is_floating(dt)) continue;
      Tensor a = c.positive ? rnd_pos({6, 7, 9, 11}, dt) : rnd({6, 7, 9, 11}, dt);
      Tensor b = c.positive ? rnd_pos({6, 7, 9, 11}, dt) : rnd({6, 7, 9, 11}, dt);
      Tensor da = dev(a), db = dev(b);
      for (const auto& l : layouts())
        expect_close(c.f(l.view(da), db.flatten().narrow(0, 0, l.view(a).numel()).view(l.view(a).sizes())),
                     c.f(l.view(a), b.flatten().narrow(0, 0, l.view(a).numel()).view(l.view(a).sizes())),
                     std::string(c.name) + " " + l.name);
      // Broadcast on both sides, and a Python scalar (a 0-dim tensor expanded to stride 0).
      Tensor r = b.narrow(0, 0, 1).narrow(3, 0, 1);  // [1, 7, 9, 1]
      Tensor col = a.select(1, 0).select(1, 0).unsqueeze(1).unsqueeze(1);  // [6, 1, 1, 11]
      expect_close(c.f(dev(col), dev(r)), c.f(col, r), std::string(c.name) + " broadcast both");
      if (is_floating(dt) || std::string(c.name) != "pow") {
        expect_close(c.f(da, full({}, 2.0, TensorOptions(dt).device(kDev))), c.f(a, full({}, 2.0, TensorOptions(dt))),
                     std::string(c.name) + " scalar");
      }
    }
  }
  // Odd and large sizes, and the scalar helpers.
  for (int64_t n : {int64_t{5}, int64_t{1003}, int64_t{3000001}}) {
    Tensor a = rnd({n}, kFloat16), b = rnd({n}, kFloat16);
    expect_close(dev(a) * dev(b), a * b, "mul f16 n=" + std::to_string(n));
    expect_close(dev(a) + 0.5, a + 0.5, "add scalar f16 n=" + std::to_string(n));
  }
  Tensor u1 = rnd({100}, kUInt8), u2 = rnd({100}, kUInt8);
  expect_close(dev(u1) + dev(u2), u1 + u2, "u8 add wraps like the CPU");
  expect_close(sub(dev(u1), dev(u2), 3.0), sub(u1, u2, 3.0), "u8 sub wraps like the CPU");
}

TEST_CASE("cuda elementwise: comparisons give bool and match the CPU in every dtype", "[cuda][elementwise]") {
  if (!cuda_ready()) return;
  manual_seed(5);
  NoGradGuard ng;
  for (DType dt : kAll) {
    Tensor a = randint(0, 3, {37, 53}).to(dt), b = randint(0, 3, {37, 53}).to(dt);  // many ties
    Tensor da = dev(a), db = dev(b);
    expect_close(eq(da, db), eq(a, b), "eq");
    expect_close(ne(da.t(), db.t()), ne(a.t(), b.t()), "ne transposed");
    if (dt == kBool) continue;
    expect_close(lt(da, db.narrow(0, 0, 1)), lt(a, b.narrow(0, 0, 1)), "lt broadcast");
    expect_close(le(da, db), le(a, b), "le");
    expect_close(gt(da, 1.0), gt(a, 1.0), "gt scalar");
    expect_close(ge(da, db), ge(a, b), "ge");
    CHECK(eq(da, db).dtype() == kBool);
  }
}

TEST_CASE("cuda elementwise: where, addcmul, addcdiv and threshold_backward", "[cuda][elementwise]") {
  if (!cuda_ready()) return;
  manual_seed(6);
  NoGradGuard ng;
  for (DType dt : kAll) {
    Tensor c = gt(rand({37, 1}), 0.5), a = rnd({37, 53}, dt), b = rnd({53}, dt);
    expect_close(where(dev(c), dev(a), dev(b)), where(c, a, b), "where broadcast");
    Tensor c2 = gt(rand({53, 37}), 0.5), a2 = rnd({53, 37}, dt);
    expect_close(where(dev(c2).t(), dev(a), dev(a2).t()), where(c2.t(), a, a2.t()), "where transposed");
    expect_close(where(dev(c), dev(a), full({}, 1.0, TensorOptions(dt).device(kDev))),
                 where(c, a, full({}, 1.0, TensorOptions(dt))), "where scalar");
  }
  for (DType dt : kFloats) {
    Tensor s = rnd({37, 53}, dt), t1 = rnd({37, 53}, dt), t2 = rnd_pos({53}, dt);
    expect_close(addcmul(dev(s), dev(t1), dev(t2), 0.7), addcmul(s, t1, t2, 0.7), "addcmul");
    expect_close(addcdiv(dev(s), dev(t1), dev(t2), -1.3), addcdiv(s, t1, t2, -1.3), "addcdiv");
    expect_close(addcmul(dev(s).t(), dev(t1).t(), dev(t1).t()), addcmul(s.t(), t1.t(), t1.t()), "addcmul transposed");
    Tensor g = rnd({37, 53}, dt), x = rnd({37, 53}, dt);
    expect_close(threshold_backward(dev(g), dev(x), 0.1), threshold_backward(g, x, 0.1), "threshold_backward");
    expect_close(threshold_backward(dev(g).t(), dev(x).t(), 0.0), threshold_backward(g.t(), x.t(), 0.0),
                 "threshold_backward transposed");
  }
}

namespace {
// Cast sources: floats spanning f16/bf16 subnormals, overflow and rounding ties (exactly
// representable halfway points included); integers beyond 2^24 and 2^53; bools.
Tensor cast_source(DType dt, bool int_safe) {
  NoGradGuard ng;
  const int64_t rows = 64, cols = 37;
  if (dt == kBool) return gt(rand({rows, cols}), 0.5);
  if (dt == kUInt8) return randint(0, 256, {rows, cols}, TensorOptions(kUInt8));
  if (!is_floating(dt)) {
    Tensor r = randint(-300, 300, {rows * cols}, TensorOptions(dt));
    std::vector<int64_t> big = {(int64_t{1} << 24) + 1, -((int64_t{1} << 24) + 3), (int64_t{1} << 30) + 7, 0};
    if (dt == kInt64) big = {(int64_t{1} << 53) + 1, -((int64_t{1} << 40) + 3), (int64_t{1} << 24) + 1, 0};
    return cat({tensor(big).to(dt), r.narrow(0, big.size(), rows * cols - big.size())}).view({rows, cols});
  }
  if (int_safe) return mul(randn({rows, cols}, TensorOptions(kFloat64)), 90.0).to(dt);
  Tensor scale = pow(full({rows * cols}, 10.0, TensorOptions(kFloat64)), randint(-9, 6, {rows * cols}).to(kFloat64));
  Tensor x = mul(randn({rows * cols}, TensorOptions(kFloat64)), scale);
  std::vector<double> special = {0.0, -0.0, INFINITY, -INFINITY, NAN, 65504.0, 65520.0, 65519.99, 1e-8, -6e-8,
                                 3.0e38, 1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, 1.0 + 1.0 / 256, 1.0 + 3.0 / 256,
                                 2.0000001192092896, 1e-45, 1.00000005960464477539};
  return cat({tensor(special), x.narrow(0, special.size(), rows * cols - special.size())}).view({rows, cols}).to(dt);
}

double max_rel_diff(const Tensor& got, const Tensor& ref) {
  NoGradGuard ng;
  Tensor a = got.cpu().to(kFloat64).contiguous(), b = ref.cpu().to(kFloat64).contiguous();
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data_ptr<double>()[i], y = b.data_ptr<double>()[i];
    m = std::max(m, std::abs(x - y) / std::max(std::abs(y), 1e-30));
  }
  return m;
}
}  // namespace

TEST_CASE("cuda elementwise: the cast matrix equals the CPU's bit for bit", "[cuda][elementwise][copy]") {
  if (!cuda_ready()) return;
  manual_seed(8);
  NoGradGuard ng;
  for (DType s : kAll) {
    for (DType d : kAll) {
      // Float -> integer casts of NaN, inf or out-of-range values are undefined in C++; feed
      // those destinations values that fit.
      const bool int_safe = is_floating(s) && !is_floating(d) && d != kBool;
      Tensor src = cast_source(s, int_safe), dsrc = dev(src);
      INFO(dtype_name(s) << " -> " << dtype_name(d));
      CHECK(count_mismatches(dsrc.to(d), src.to(d)) == 0);                  // contiguous
      CHECK(count_mismatches(dsrc.t().to(d), src.t().to(d)) == 0);          // strided source
      Tensor o = full({37, 64}, 0.0, TensorOptions(d).device(kDev));
      Tensor ref = full({37, 64}, 0.0, TensorOptions(d));
      o.t().copy_(dsrc);  // strided destination
      ref.t().copy_(src);
      CHECK(count_mismatches(o, ref) == 0);
      Tensor ob = full({64, 37}, 0.0, TensorOptions(d).device(kDev));
      Tensor refb = full({64, 37}, 0.0, TensorOptions(d));
      ob.copy_(dsrc.narrow(0, 3, 1));  // broadcast source
      refb.copy_(src.narrow(0, 3, 1));
      CHECK(count_mismatches(ob, refb) == 0);
    }
  }
}

TEST_CASE("cuda elementwise: large, odd, empty and channels-last copies", "[cuda][elementwise][copy]") {
  if (!cuda_ready()) return;
  manual_seed(9);
  NoGradGuard ng;
  for (int64_t n : {int64_t{3145728}, int64_t{3000017}, int64_t{13}}) {
    Tensor x = randn({n}), dx = dev(x);
    CHECK(count_mismatches(dx.to(kBFloat16), x.to(kBFloat16)) == 0);
    CHECK(count_mismatches(dx.to(kFloat16), x.to(kFloat16)) == 0);
    CHECK(count_mismatches(dx.to(kFloat16).to(kFloat32), x.to(kFloat16).to(kFloat32)) == 0);
    CHECK(count_mismatches(dx.clone(), x) == 0);
    CHECK(count_mismatches(dx.narrow(0, 1, n - 1).to(kFloat16), x.narrow(0, 1, n - 1).to(kFloat16)) == 0);
  }
  Tensor img = randn({4, 5, 7, 9}), dimg = dev(img);
  Tensor cl = dimg.to(MemoryFormat::ChannelsLast);
  CHECK(cl.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(count_mismatches(cl, img) == 0);
  CHECK(count_mismatches(cl.contiguous(), img) == 0);
  CHECK(count_mismatches(cl.to(kFloat16), img.to(kFloat16)) == 0);  // preserves NHWC, dense path
  CHECK(cl.to(kFloat16).is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(count_mismatches(dimg.permute({0, 2, 3, 1}).contiguous(), img.permute({0, 2, 3, 1}).contiguous()) == 0);
  for (DType dt : kAll) {
    Tensor e = empty({3, 0}, TensorOptions(dt).device(kDev));
    CHECK(e.to(kFloat32).numel() == 0);
    CHECK(e.cpu().numel() == 0);
    CHECK(e.t().contiguous().sizes() == IntList{0, 3});
    e.fill_(1.0);
    e.copy_(empty({3, 0}, TensorOptions(kFloat64)));
  }
}

TEST_CASE("cuda elementwise: fill and factories on the device", "[cuda][elementwise]") {
  if (!cuda_ready()) return;
  NoGradGuard ng;
  const TensorOptions on = TensorOptions().device(kDev);
  for (DType dt : kAll) {
    for (double v : {3.7, -1.0, 0.0, 300.0, 0.3, 1e-9, 70000.0}) {
      if (is_floating(dt) || v == std::floor(v) || dt == kBool) {
        INFO(dtype_name(dt) << " value " << v);
        CHECK(count_mismatches(full({37, 5}, v, TensorOptions(on).dtype(dt)), full({37, 5}, v, TensorOptions(dt))) == 0);
      }
    }
    // fill_ of a non-contiguous view only writes the view.
    Tensor d = zeros({6, 8}, TensorOptions(on).dtype(dt)), c = zeros({6, 8}, TensorOptions(dt));
    d.t().narrow(0, 1, 3).fill_(1.0);
    c.t().narrow(0, 1, 3).fill_(1.0);
    CHECK(count_mismatches(d, c) == 0);
    CHECK(count_mismatches(ones({5}, TensorOptions(on).dtype(dt)), ones({5}, TensorOptions(dt))) == 0);
    CHECK(zeros_like(d).device() == kDev);
    CHECK(empty_like(d).device() == kDev);
    CHECK(count_mismatches(full_like(d, 1.0), full_like(c, 1.0)) == 0);
  }
  CHECK(count_mismatches(arange(10, TensorOptions(kInt64).device(kDev)), arange(10)) == 0);
  CHECK(count_mismatches(arange(0.5, 3.0, 0.25, TensorOptions(kFloat32).device(kDev)),
                         arange(0.5, 3.0, 0.25, TensorOptions(kFloat32))) == 0);
  Tensor t = tensor(std::vector<float>{1.5f, -2.0f, 3.25f, 4.0f}, {2, 2}, TensorOptions(kFloat32).device(kDev));
  CHECK(t.device() == kDev);
  CHECK(t[1][0].item<double>() == 3.25);
  Tensor tb = tensor(std::vector<bool>{true, false, true}, {}, TensorOptions(kBool).device(kDev));
  CHECK(tb[1].item<double>() == 0.0);
  CHECK(tensor(std::vector<int32_t>{7, 8}, {}, TensorOptions(kFloat16).device(kDev))[1].item<float>() == 8.0f);
  CHECK(scalar_tensor(2.5, on).item<double>() == 2.5);
  const std::string s = t.str();
  CHECK(s.find("cuda:0") != std::string::npos);
  CHECK(s.find("3.25") != std::string::npos);
  std::ostringstream os;
  os << t;
  CHECK(os.str() == s);
  CHECK(count_mismatches(cat({t, t.t()}, 1), cat({t.cpu(), t.cpu().t()}, 1)) == 0);
  CHECK(count_mismatches(stack({t, t.to(kFloat16)}, 0), stack({t.cpu(), t.cpu().to(kFloat16)}, 0)) == 0);
  CHECK(count_mismatches(cat({t.to(kInt32), t.to(kFloat16)}, 0), cat({t.cpu().to(kInt32), t.cpu().to(kFloat16)}, 0)) == 0);
  if (!has_cuda_sum()) {
    WARN("all_finite / allclose / equal on the device skipped: no CUDA sum kernel registered");
    return;
  }
  CHECK(t.all_finite());
  CHECK_FALSE(div(t, zeros({2, 2}, on)).all_finite());
  CHECK(allclose(t, t * (1.0 + 1e-7)));
  CHECK_FALSE(allclose(t, t + 1.0));
  CHECK(equal(t, t.clone()));
  CHECK_FALSE(equal(t, t.t()));
}

TEST_CASE("cuda elementwise: rand and randn on the device draw the CPU's stream", "[cuda][elementwise][random]") {
  if (!cuda_ready()) return;
  NoGradGuard ng;
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{3000017}}) {
    for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8}) {
      INFO(dtype_name(dt) << " n=" << n);
      manual_seed(42);
      Tensor c1 = rand({n}, TensorOptions(dt)), c2 = randint(-7, 300, {n}, TensorOptions(dt));
      manual_seed(42);
      Tensor d1 = rand({n}, TensorOptions(dt).device(kDev)), d2 = randint(-7, 300, {n}, TensorOptions(dt).device(kDev));
      CHECK(count_mismatches(d1, c1) == 0);
      CHECK(count_mismatches(d2, c2) == 0);
    }
    for (DType dt : kFloats) {
      INFO(dtype_name(dt) << " n=" << n);
      manual_seed(43);
      Tensor c1 = randn({n}, TensorOptions(dt)), c2 = randn({n}, TensorOptions(dt));
      manual_seed(43);
      Tensor d1 = randn({n}, TensorOptions(dt).device(kDev)), d2 = randn({n}, TensorOptions(dt).device(kDev));
      if (dt == kFloat32 || dt == kFloat64) {
        // Box-Muller's log/cos/sqrt may differ in the last ulp of an f64 between libm and CUDA.
        CHECK(max_rel_diff(d1, c1) < 1e-6);
        CHECK(max_rel_diff(d2, c2) < 1e-6);
      } else {
        CHECK(count_mismatches(d1, c1) <= n / 1000 + 1);  // a last-ulp f64 difference may flip a rounding
        CHECK(rel_err(d2, c2) < testing::cuda_tolerance(dt));
      }
    }
  }
  // In-place draws and the *_like factories take the same positions.
  manual_seed(44);
  Tensor c = empty({33, 17}), cu = empty({33, 17});
  c.normal_(1.5, 2.0);
  cu.uniform_(-1.0, 3.0);
  Tensor cr = rand_like(c);
  manual_seed(44);
  Tensor d = empty({33, 17}, TensorOptions().device(kDev)), du = empty({33, 17}, TensorOptions().device(kDev));
  d.normal_(1.5, 2.0);
  du.uniform_(-1.0, 3.0);
  Tensor dr = rand_like(d);
  CHECK(dr.device() == kDev);
  CHECK(max_rel_diff(d, c) < 1e-6);
  CHECK(count_mismatches(du, cu) == 0);
  CHECK(count_mismatches(dr, cr) == 0);
  Tensor e = rand({0, 4}, TensorOptions().device(kDev));
  CHECK(e.numel() == 0);
}

TEST_CASE("cuda elementwise: cross-device copy_ and to() round trips", "[cuda][elementwise][copy]") {
  if (!cuda_ready()) return;
  manual_seed(10);
  NoGradGuard ng;
  for (DType dt : kAll) {
    Tensor x = cast_source(dt, false);
    INFO(dtype_name(dt));
    CHECK(count_mismatches(x.to(kDev).cpu(), x) == 0);
    CHECK(count_mismatches(x.cuda().to(Device::cpu()), x) == 0);
    CHECK(count_mismatches(x.t().to(kDev).cpu(), x.t()) == 0);
    CHECK(x.t().to(kDev).device() == kDev);
  }
  Tensor x = cast_source(kFloat32, false);
  // Host -> device with conversion into a strided destination, and back.
  Tensor d = full({37, 64}, 0.0, TensorOptions(kFloat16).device(kDev));
  Tensor c = full({37, 64}, 0.0, TensorOptions(kFloat16));
  d.t().copy_(x);
  c.t().copy_(x);
  CHECK(count_mismatches(d, c) == 0);
  Tensor h = empty({64, 37}, TensorOptions(kFloat64));
  h.copy_(d.t());
  CHECK(count_mismatches(h, c.t().to(kFloat64)) == 0);
  CHECK(count_mismatches(x.to(kDev, kBFloat16), x.to(kBFloat16)) == 0);
  CHECK(count_mismatches(x.to(kDev, kBFloat16).to(Device::cpu(), kFloat32), x.to(kBFloat16).to(kFloat32)) == 0);
  Tensor pinned = x.to(kDev, true).cpu();
  CHECK(count_mismatches(pinned, x) == 0);
}

TEST_CASE("cuda elementwise: backward on the device matches the CPU", "[cuda][elementwise][autograd]") {
  if (!cuda_ready()) return;
  manual_seed(11);
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    Tensor x = rnd({37, 53}, dt), g = rnd({37, 53}, dt);
    auto grads = [&](Device device, const std::function<Tensor(const Tensor&)>& f) {
      Tensor xl = x.to(device).detach();  // a fresh leaf also on the CPU, where to() returns x itself
      xl.set_requires_grad(true);
      f(xl).backward(g.to(device));
      return xl.grad();
    };
    for (const auto& op : unary_cases()) {
      if (op.positive || std::string(op.name) == "sign") continue;
      expect_close(grads(kDev, op.f), grads(Device::cpu(), op.f), std::string(op.name) + " backward");
    }
    // where: gradients routed by the condition, no broadcasting.
    Tensor cond = gt(rand({37, 53}), 0.5);
    auto wf = [&](const Tensor& xl) { return where(cond.to(xl.device()), xl * 2.0, -xl); };
    expect_close(grads(kDev, wf), grads(Device::cpu(), wf), "where backward");
  }
  if (!has_cuda_sum()) {
    WARN("broadcasting backward on the device skipped: no CUDA sum kernel registered");
    return;
  }
  for (DType dt : {kFloat32, kFloat16}) {
    Tensor a = rnd({37, 53}, dt), b = rnd({53}, dt), g = rnd({37, 53}, dt);
    auto run = [&](Device device) {
      Tensor al = a.to(device).detach(), bl = b.to(device).detach();
      al.set_requires_grad(true);
      bl.set_requires_grad(true);
      mul(al, bl).backward(g.to(device));
      return std::make_pair(al.grad(), bl.grad());
    };
    auto [ga, gb] = run(kDev);
    auto [ca, cb] = run(Device::cpu());
    expect_close(ga, ca, "mul broadcast backward a");
    expect_close(gb, cb, "mul broadcast backward b");
  }
}

TEST_CASE("cuda elementwise: errors name the op and the limit", "[cuda][elementwise]") {
  if (!cuda_ready()) return;
  Tensor x = rand({1, 1, 1, 1, 1, 1, 1, 2, 2}).to(kDev);
  const std::string e = error_of([&] { relu(x.transpose(7, 8)); });
  CHECK(e.find("at most 8 dimensions") != std::string::npos);
  CHECK(error_of([&] { add(x.view({4}), rand({4})); }).find("expected all tensors on one device") != std::string::npos);
}
