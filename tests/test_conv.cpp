// Tests for conv2d / conv_transpose2d: PyTorch goldens per dtype, gradchecks, a direct-loop reference, errors, formats.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/serialize.h"
#include "gradcheck.h"
#include "nn/nn.h"
#include "test_util.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

using namespace mpx;
using testing::gradcheck;
using testing::gradgradcheck;
using testing::leaf;
using testing::close;

namespace {

Tensor golden(const std::string& name) { return testing::golden_tensor("conv.safetensors", name); }

struct Case {
  std::string name;
  bool transposed;
  Pair stride, padding, dilation, output_padding;
  int64_t groups;
};
// Hyper-parameters from tests/golden/gen_golden.py.
const Case kCases[] = {
    {"conv2d_a", false, {2, 2}, {1, 1}, {1, 1}, {0, 0}, 1},
    {"conv2d_b", false, {1, 2}, {2, 1}, {2, 1}, {0, 0}, 2},
    {"conv_t_a", true, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1},
    {"conv_t_b", true, {2, 2}, {0, 0}, {1, 1}, {0, 0}, 2},
};

Tensor run_case(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  return c.transposed ? conv_transpose2d(x, w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation)
                      : conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
}

void check_golden(DType dt, double rtol) {
  for (const Case& c : kCases) {
    SECTION(c.name) {
      auto input = [&](const char* n) { return golden(c.name + n).to(dt).detach().set_requires_grad(true); };
      Tensor x = input(".x"), w = input(".w"), b = input(".b");
      Tensor y = run_case(c, x, w, b);
      CHECK(y.dtype() == dt);
      CHECK(close(y, golden(c.name + ".y"), rtol));
      sum(y * golden(c.name + ".gy").to(dt)).backward();
      CHECK(close(x.grad(), golden(c.name + ".gx"), rtol));
      CHECK(close(w.grad(), golden(c.name + ".gw"), rtol));
      CHECK(close(b.grad(), golden(c.name + ".gb"), rtol));
    }
  }
}

// Direct-loop conv2d in f64 (x, w, b contiguous f64), the reference for the fast paths.
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Pair s, Pair p, Pair d, int64_t G) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kh = w.size(2), kw = w.size(3), Og = O / G;
  const int64_t Ho = (H + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
  const int64_t Wo = (W + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
  Tensor y = zeros({N, O, Ho, Wo}, kFloat64);
  const double *xp = x.data_ptr<double>(), *wp = w.data_ptr<double>();
  double* yp = y.data_ptr<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double acc = b.defined() ? b.data_ptr<double>()[o] : 0.0;
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * s[0] - p[0] + i * d[0], iw = ow * s[1] - p[1] + j * d[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += xp[((n * C + g * Cg + c) * H + ih) * W + iw] * wp[((o * Cg + c) * kh + i) * kw + j];
              }
          yp[((n * O + o) * Ho + oh) * Wo + ow] = acc;
        }
  (void)C;
  return y;
}

double dotp(const Tensor& a, const Tensor& b) { return sum(a.to(kFloat64) * b.to(kFloat64)).item<double>(); }

}  // namespace

TEST_CASE("conv goldens f64", "[conv]") { check_golden(kFloat64, 1e-10); }
TEST_CASE("conv goldens f32", "[conv]") { check_golden(kFloat32, 1e-5); }
TEST_CASE("conv goldens f16", "[conv]") { check_golden(kFloat16, 2e-2); }
TEST_CASE("conv goldens bf16", "[conv]") { check_golden(kBFloat16, 3e-2); }

TEST_CASE("conv2d matches a direct loop on every kernel path", "[conv]") {
  manual_seed(7);
  struct Cfg {
    IntList xs, ws;
    Pair s, p, d;
    int64_t g;
  };
  // 18x18 outputs give one image per GEMM; tiny outputs batch several images per GEMM;
  // 1x1 stride-1 convs skip im2col.
  const Cfg cfgs[] = {
      {{2, 3, 18, 18}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{2, 4, 17, 19}, {6, 2, 3, 2}, {2, 1}, {2, 0}, {1, 2}, 2},
      {{3, 6, 16, 16}, {4, 6, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
      {{37, 6, 4, 4}, {4, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 2},
      {{37, 5, 5, 4}, {3, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{3, 4, 9, 9}, {4, 4, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},
      {{2, 6, 7, 7}, {6, 1, 3, 3}, {2, 3}, {3, 1}, {2, 1}, 6},
  };
  for (const Cfg& c : cfgs) {
    INFO("x " << shape_str(c.xs) << " w " << shape_str(c.ws));
    Tensor x = randn(c.xs, kFloat64), w = randn(c.ws, kFloat64), b = randn({c.ws[0]}, kFloat64);
    Tensor y = conv2d(x, w, b, c.s, c.p, c.d, c.g);
    CHECK(close(y, naive_conv2d(x, w, b, c.s, c.p, c.d, c.g), 1e-12));
    // Gradients through the adjoint identities <conv(x, w), gy> = <x, gx> = <w, gw>.
    Tensor xl = x.detach().set_requires_grad(true), wl = w.detach().set_requires_grad(true);
    Tensor gy = randn(y.sizes(), kFloat64);
    Tensor y0 = conv2d(xl, wl, {}, c.s, c.p, c.d, c.g);
    sum(y0 * gy).backward();
    const double ref = dotp(y0.detach(), gy);
    CHECK(dotp(xl, xl.grad()) == Approx(ref).epsilon(1e-10));
    CHECK(dotp(wl, wl.grad()) == Approx(ref).epsilon(1e-10));
    // The f32 kernels take the same paths.
    Tensor yf = conv2d(x.to(kFloat32), w.to(kFloat32), b.to(kFloat32), c.s, c.p, c.d, c.g);
    CHECK(close(yf, y, 1e-5));
  }
}

TEST_CASE("conv2d gradcheck", "[conv][gradcheck]") {
  manual_seed(1);
  SECTION("stride, padding, dilation, bias") {
    Tensor x = leaf({2, 3, 6, 5}), w = leaf({4, 3, 3, 2}), b = leaf({4});
    CHECK(gradcheck([](const tensor_list& t) { return conv2d(t[0], t[1], t[2], {2, 1}, {1, 2}, {1, 2}); }, {x, w, b}) == "");
  }
  SECTION("groups, no bias") {
    Tensor x = leaf({2, 4, 5, 5}), w = leaf({6, 2, 2, 3});
    CHECK(gradcheck([](const tensor_list& t) { return conv2d(t[0], t[1], {}, {1, 2}, {1, 0}, {2, 1}, 2); }, {x, w}) == "");
  }
  SECTION("1x1, larger images") {
    Tensor x = leaf({1, 3, 17, 16}), w = leaf({2, 3, 1, 1}), b = leaf({2});
    CHECK(gradcheck([](const tensor_list& t) { return conv2d(t[0], t[1], t[2]); }, {x, w, b}) == "");
  }
  SECTION("second derivatives") {
    Tensor x = leaf({2, 2, 4, 4}), w = leaf({2, 2, 3, 3}), b = leaf({2});
    CHECK(gradgradcheck([](const tensor_list& t) { return conv2d(t[0], t[1], t[2], {2, 1}, {1, 1}); }, {x, w, b}) == "");
  }
}

TEST_CASE("conv_transpose2d gradcheck", "[conv][gradcheck]") {
  manual_seed(2);
  SECTION("output_padding, groups") {
    Tensor x = leaf({2, 4, 3, 4}), w = leaf({4, 3, 3, 2}), b = leaf({6});
    CHECK(gradcheck([](const tensor_list& t) {
            return conv_transpose2d(t[0], t[1], t[2], {2, 3}, {1, 0}, {1, 2}, 2);
          }, {x, w, b}) == "");
  }
  SECTION("dilation") {
    Tensor x = leaf({1, 2, 4, 3}), w = leaf({2, 2, 2, 3});
    CHECK(gradcheck([](const tensor_list& t) {
            return conv_transpose2d(t[0], t[1], {}, {1, 2}, {1, 1}, {0, 1}, 1, {2, 1});
          }, {x, w}) == "");
  }
  SECTION("output_padding beyond the stride (allowed below the dilation)") {
    Tensor x = leaf({1, 2, 3, 3}), w = leaf({2, 1, 2, 2});
    CHECK(gradcheck([](const tensor_list& t) {
            return conv_transpose2d(t[0], t[1], {}, {1, 1}, {0, 0}, {1, 1}, 1, {2, 2});
          }, {x, w}) == "");
  }
  SECTION("second derivatives") {
    Tensor x = leaf({1, 2, 3, 3}), w = leaf({2, 2, 3, 3});
    CHECK(gradgradcheck([](const tensor_list& t) { return conv_transpose2d(t[0], t[1], {}, {2, 2}, {1, 1}, {1, 1}); },
                        {x, w}) == "");
  }
}

TEST_CASE("conv channels-last input gives the same values and keeps its format", "[conv]") {
  manual_seed(3);
  for (DType dt : {kFloat64, kFloat32}) {
    Tensor x = randn({2, 3, 6, 7}, dt), w = randn({4, 3, 3, 3}, dt), b = randn({4}, dt);
    Tensor xc = x.contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
    Tensor xr = x.detach().set_requires_grad(true);
    Tensor yc = conv2d(xc, w, b, {1, 2}, {1, 1});
    Tensor yr = conv2d(xr, w, b, {1, 2}, {1, 1});
    CHECK(yc.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(close(yc, yr, 1e-6));
    Tensor gy = randn(yr.sizes(), dt);
    sum(yc * gy).backward();
    sum(yr * gy).backward();
    CHECK(close(xc.grad(), xr.grad(), 1e-6));

    Tensor wt = randn({3, 2, 3, 3}, dt);
    Tensor tc = conv_transpose2d(xc.detach(), wt, {}, {2, 2}, {1, 1}, {1, 1});
    CHECK(tc.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(close(tc, conv_transpose2d(x, wt, {}, {2, 2}, {1, 1}, {1, 1}), 1e-6));
  }
}

// f16/bf16 convolutions compute on f32 copies (f16 everywhere, bf16 where oneDNN has no bf16
// kernels): the copies keep a channels-last layout, so outputs and gradients come back
// channels-last with the row-major computation's values (each rounded once; the f32 sums may
// differ in order between layouts, hence one rounding of slack).
TEST_CASE("f16/bf16 conv on channels-last tensors keeps the layout and the values", "[conv]") {
  manual_seed(8);
  for (DType dt : {kFloat16, kBFloat16}) {
    const double tol = dt == kFloat16 ? 2e-3 : 1e-2;
    const Tensor x = randn({2, 8, 7, 6}).to(dt), w = randn({5, 8, 3, 3}).to(dt), b = randn({5}).to(dt);
    const Tensor gy = randn({2, 5, 4, 6}).to(dt);
    auto run = [&](MemoryFormat f) {
      Tensor xl = x.contiguous(f).detach().set_requires_grad(true);
      Tensor wl = w.contiguous(f).detach().set_requires_grad(true);
      Tensor y = conv2d(xl, wl, b, {2, 1}, {1, 1});
      y.backward(gy.contiguous(f));
      return tensor_list{y, xl.grad(), wl.grad()};
    };
    const tensor_list cl = run(MemoryFormat::ChannelsLast), rm = run(MemoryFormat::Contiguous);
    INFO(dtype_name(dt));
    for (size_t i = 0; i < cl.size(); ++i) {
      INFO("output " << i << " (y, dx, dw)");
      CHECK(cl[i].dtype() == dt);
      CHECK(cl[i].is_contiguous(MemoryFormat::ChannelsLast));
      CHECK(close(cl[i], rm[i], tol));
    }
  }
}

TEST_CASE("conv accepts unbatched 3-d input", "[conv]") {
  Tensor x = randn({3, 5, 5}, kFloat64), w = randn({2, 3, 3, 3}, kFloat64);
  Tensor y = conv2d(x, w, {}, {1, 1}, {1, 1});
  REQUIRE(y.sizes() == IntList{2, 5, 5});
  CHECK(close(y, conv2d(x.unsqueeze(0), w, {}, {1, 1}, {1, 1}).squeeze(0), 0.0));
}

TEST_CASE("conv validation errors name the shapes", "[conv][errors]") {
  Tensor x = randn({2, 4, 8, 8}), w = randn({6, 4, 3, 3});
  CHECK_THROWS_AS(conv2d(randn({2, 4, 8}).unsqueeze(0).unsqueeze(0), w), Error);
  REQUIRE_THROWS_WITH(conv2d(randn({4, 8}), w), Catch::Contains("4-d input"));
  REQUIRE_THROWS_WITH(conv2d(x, randn({6, 4, 3})), Catch::Contains("4-d weight"));
  REQUIRE_THROWS_WITH(conv2d(x, randn({6, 3, 3, 3})), Catch::Contains("4 channels") && Catch::Contains("[6, 3, 3, 3]"));
  REQUIRE_THROWS_WITH(conv2d(x, randn({5, 2, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 2),
                      Catch::Contains("not divisible by groups=2"));
  REQUIRE_THROWS_WITH(conv2d(x, randn({6, 1, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 3),
                      Catch::Contains("groups=3"));
  REQUIRE_THROWS_WITH(conv2d(x, randn({6, 4, 9, 3})), Catch::Contains("too small") && Catch::Contains("[2, 4, 8, 8]"));
  REQUIRE_THROWS_WITH(conv2d(x, w.to(kFloat64)), Catch::Contains("same dtype"));
  REQUIRE_THROWS_WITH(conv2d(x, w, randn({5})), Catch::Contains("bias"));
  REQUIRE_THROWS_WITH(conv2d(x, w, {}, {0, 1}), Catch::Contains("stride must be positive"));
  REQUIRE_THROWS_WITH(conv2d(x, w, {}, {1, 1}, {-1, 0}), Catch::Contains("padding"));
  REQUIRE_THROWS_WITH(conv2d(x.to(kInt64), w.to(kInt64)), Catch::Contains("floating"));
  REQUIRE_THROWS_WITH(conv_transpose2d(x, randn({3, 2, 3, 3})), Catch::Contains("expects 3"));
  REQUIRE_THROWS_WITH(conv_transpose2d(x, randn({4, 2, 3, 3}), {}, {2, 2}, {0, 0}, {2, 0}),
                      Catch::Contains("output_padding"));
  REQUIRE_THROWS_WITH(conv_transpose2d(randn({1, 4, 1, 1}), randn({4, 2, 1, 1}), {}, {1, 1}, {1, 1}),
                      Catch::Contains("non-positive output size"));
}

TEST_CASE("conv runs in the autocast dtype and its gradients reach f32 leaves", "[conv][amp]") {
  manual_seed(5);
  Tensor x = randn({2, 3, 6, 6}), w = randn({4, 3, 3, 3}).set_requires_grad(true), b = randn({4}).set_requires_grad(true);
  AutocastState& st = autocast_state();
  const AutocastState saved = st;
  st.enabled = true;
  st.dtype = kBFloat16;
  Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
  st = saved;
  CHECK(y.dtype() == kBFloat16);
  CHECK(close(y, conv2d(x, w.detach(), b.detach(), {1, 1}, {1, 1}), 3e-2));
  sum(y.to(kFloat32)).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(b.grad().dtype() == kFloat32);
}

TEST_CASE("conv1d matches a direct loop, takes unbatched input and passes gradcheck", "[conv]") {
  manual_seed(5);
  // stride 2, padding 1, dilation 2, groups 2: every parameter away from its default.
  const int64_t N = 2, C = 4, L = 11, O = 6, K = 3, s = 2, p = 1, d = 2, g = 2;
  const Tensor x = randn({N, C, L}, TensorOptions(kFloat64)), w = randn({O, C / g, K}, TensorOptions(kFloat64)),
               b = randn({O}, TensorOptions(kFloat64));
  const Tensor y = conv1d(x, w, b, s, p, d, g);
  const int64_t Lo = (L + 2 * p - d * (K - 1) - 1) / s + 1;
  REQUIRE(y.sizes() == IntList{N, O, Lo});
  const Tensor xc = x.contiguous(), wc = w.contiguous();
  const double *px = xc.data_ptr<double>(), *pw = wc.data_ptr<double>(), *pb = b.data_ptr<double>();
  double worst = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t t = 0; t < Lo; ++t) {
        double acc = pb[o];
        const int64_t grp = o / (O / g);
        for (int64_t c = 0; c < C / g; ++c)
          for (int64_t k = 0; k < K; ++k) {
            const int64_t i = t * s - p + k * d;
            if (i >= 0 && i < L) acc += px[(n * C + grp * (C / g) + c) * L + i] * pw[(o * (C / g) + c) * K + k];
          }
        worst = std::max(worst, std::abs(acc - y.select(0, n).select(0, o).select(0, t).item<double>()));
      }
  CHECK(worst < 1e-12);
  // Unbatched [C, L] gives the batch's first row.
  CHECK(close(conv1d(x.select(0, 0), w, b, s, p, d, g), y.select(0, 0), 1e-12));
  CHECK(gradcheck([](const tensor_list& t) { return conv1d(t[0], t[1], t[2], 2, 1, 2, 2); },
                  {leaf({N, C, L}), leaf({O, C / g, K}), leaf({O})}) == "");
}

TEST_CASE("conv1d: shape errors name conv1d and the shapes", "[conv]") {
  const Tensor x = randn({2, 4, 10}), w = randn({6, 4, 3});
  REQUIRE_THROWS_WITH(conv1d(randn({2, 4, 10, 1}), w), Catch::Contains("conv1d") && Catch::Contains("[N, C, L]"));
  REQUIRE_THROWS_WITH(conv1d(x, randn({6, 4})), Catch::Contains("conv1d: weight"));
  REQUIRE_THROWS_WITH(conv1d(x, randn({6, 3, 3})), Catch::Contains("4 channels") && Catch::Contains("[6, 3, 3]"));
  REQUIRE_THROWS_WITH(conv1d(randn({2, 4, 2}), randn({6, 4, 5})), Catch::Contains("too short"));
  REQUIRE_THROWS_WITH(conv1d(x, w, {}, 0), Catch::Contains("stride (0)"));
}

TEST_CASE("conv_transpose1d matches a direct scatter loop, ConvTranspose1d has PyTorch's layout, errors", "[conv]") {
  manual_seed(6);
  // stride 3, padding 1, output_padding 1, dilation 2, groups 2.
  const int64_t N = 2, C = 4, L = 5, O = 6, K = 3, s = 3, p = 1, op = 1, d = 2, g = 2;
  const Tensor x = randn({N, C, L}, TensorOptions(kFloat64)), w = randn({C, O / g, K}, TensorOptions(kFloat64)),
               b = randn({O}, TensorOptions(kFloat64));
  const Tensor y = conv_transpose1d(x, w, b, s, p, op, g, d);
  const int64_t Lo = (L - 1) * s - 2 * p + d * (K - 1) + op + 1;
  REQUIRE(y.sizes() == IntList{N, O, Lo});
  // The definition: every input element scatters its kernel row into the output.
  std::vector<double> ref(static_cast<size_t>(N * O * Lo));
  const Tensor xc = x.contiguous(), wc = w.contiguous();
  const double *px = xc.data_ptr<double>(), *pw = wc.data_ptr<double>(), *pb = b.data_ptr<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t t = 0; t < Lo; ++t) ref[static_cast<size_t>((n * O + o) * Lo + t)] = pb[o];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t oo = 0; oo < O / g; ++oo)
          for (int64_t k = 0; k < K; ++k) {
            const int64_t t = l * s - p + k * d, o = (c / (C / g)) * (O / g) + oo;
            if (t >= 0 && t < Lo)
              ref[static_cast<size_t>((n * O + o) * Lo + t)] += px[(n * C + c) * L + l] * pw[(c * (O / g) + oo) * K + k];
          }
  CHECK(close(y, tensor(ref, {N, O, Lo}), 1e-12));
  CHECK(close(conv_transpose1d(x.select(0, 1), w, b, s, p, op, g, d), y.select(0, 1), 1e-12));
  CHECK(gradcheck([](const tensor_list& t) { return conv_transpose1d(t[0], t[1], t[2], 2, 1, 1, 2, 1); },
                  {leaf({N, C, L}), leaf({C, O / g, K}), leaf({O})}) == "");
  nn::ConvTranspose1d m(nn::ConvTranspose1dOptions(4, 6, 3).stride(2).groups(2));
  CHECK(m->weight.sizes() == IntList{4, 3, 3});
  CHECK(m->bias.sizes() == IntList{6});
  CHECK(m(randn({2, 4, 7})).sizes() == IntList{2, 6, 15});
  std::ostringstream os;
  m->pretty_print(os);
  CHECK(os.str() == "ConvTranspose1d(4, 6, kernel_size=(3,), stride=(2,), groups=2)");
  CHECK_THROWS_WITH(conv_transpose1d(randn({2, 4, 5, 1}), randn({4, 3, 3})), Catch::Contains("[N, C, L]"));
  CHECK_THROWS_WITH(conv_transpose1d(randn({2, 4, 5}), randn({4, 3})), Catch::Contains("conv_transpose1d: weight"));
  CHECK_THROWS_WITH(nn::ConvTranspose1d(nn::ConvTranspose1dOptions(4, 5, 3).groups(2)), Catch::Contains("divisible"));
}
