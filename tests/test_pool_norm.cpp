// Tests for pooling and normalization: PyTorch goldens, gradchecks, running statistics, mixed precision, errors.
#include <omp.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/serialize.h"
#include "gradcheck.h"
#include "test_util.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/norm.h"
#include "ops/pooling.h"
#include "ops/reduction.h"

using namespace mpx;
using testing::gradcheck;
using testing::gradgradcheck;
using testing::leaf;
using testing::close;

namespace {

Tensor golden(const std::string& name) { return testing::golden_tensor("norm_pool.safetensors", name); }
Tensor golden_leaf(const std::string& name) { return golden(name).clone().detach().set_requires_grad(true); }


// Distinct, well separated values in random order, so finite differences never flip an argmax.
Tensor distinct_leaf(const IntList& shape) {
  const int64_t n = numel_of(shape);
  Tensor r = rand({n}, kFloat64);
  std::vector<std::pair<double, int64_t>> kv;
  for (int64_t i = 0; i < n; ++i) kv.push_back({r.data_ptr<double>()[i], i});
  std::sort(kv.begin(), kv.end());
  std::vector<double> p;
  for (auto& e : kv) p.push_back((static_cast<double>(e.second) - n / 2.0) / 10.0);
  return tensor(p, shape).set_requires_grad(true);
}

// Linear ops have no second derivative in x; instead check that their backward is itself
// differentiable in the upstream gradient: gradcheck of gy -> dL/dx built with create_graph.
std::string backward_gradcheck(const testing::Fn& f, const Tensor& x) {
  Tensor gy = leaf(f({x}).sizes());
  return gradcheck([&](const tensor_list& t) {
    AutoGradMode on(true);  // gradcheck evaluates under no-grad for its finite differences
    return autograd::grad({f({x})}, {x}, {t[0]}, true, true)[0];
  }, {gy});
}

std::vector<double> values(const Tensor& t) {
  Tensor d = t.to(kFloat64).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

}  // namespace

// ---- goldens ----
TEST_CASE("batch_norm training golden, running statistics included", "[norm][golden]") {
  Tensor x = golden_leaf("bn_train.x"), w = golden_leaf("bn_train.weight"), b = golden_leaf("bn_train.bias");
  Tensor rm = zeros({3}, kFloat64), rv = ones({3}, kFloat64);
  const uint64_t v0 = rm.version();
  Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
  CHECK(close(y, golden("bn_train.y"), 1e-10));
  CHECK(close(rm, golden("bn_train.running_mean"), 1e-10));
  CHECK(close(rv, golden("bn_train.running_var"), 1e-10));
  CHECK(rm.version() > v0);
  sum(y * golden("bn_train.gy")).backward();
  CHECK(close(x.grad(), golden("bn_train.gx"), 1e-9));
  CHECK(close(w.grad(), golden("bn_train.gweight"), 1e-10));
  CHECK(close(b.grad(), golden("bn_train.gbias"), 1e-10));
}

TEST_CASE("batch norm updates running statistics kept in another dtype or strided, through scratch copies",
          "[norm]") {
  manual_seed(3);
  const Tensor x = randn({4, 3, 5, 5}) * 2.0 + 1.0;
  const Tensor mean = x.mean({0, 2, 3}), var = x.var({0, 2, 3}, /*unbiased=*/true);
  for (const int fused : {0, 1, 2}) {
    INFO((fused == 2 ? "batch_norm_relu" : fused == 1 ? "batch_norm_add_relu" : "batch_norm"));
    // f64 buffers beside f32 statistics, and every other element of a [6] buffer.
    Tensor rm64 = zeros({3}, TensorOptions(kFloat64)), rv64 = ones({3}, TensorOptions(kFloat64));
    Tensor rm_all = full({6}, 7.0), rv_all = full({6}, 7.0);
    Tensor rm_s = rm_all.slice(0, 0, 6, 2), rv_s = rv_all.slice(0, 0, 6, 2);
    REQUIRE(!rm_s.is_contiguous());
    rv_s.fill_(1.0);
    rm_s.zero_();
    for (auto [rm, rv] : {std::pair{rm64, rv64}, std::pair{rm_s, rv_s}}) {
      if (fused == 2) (void)batch_norm_relu(x, rm, rv, Tensor(), Tensor(), true, 0.25, 1e-5);
      else if (fused == 1) (void)batch_norm_add_relu(x, zeros_like(x), rm, rv, Tensor(), Tensor(), true, 0.25, 1e-5);
      else (void)batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.25, 1e-5);
      CHECK(mpx::testing::rel_err(rm.to(kFloat32), mean * 0.25) < 1e-6);
      CHECK(mpx::testing::rel_err(rv.to(kFloat32), var * 0.25 + 0.75) < 1e-6);
    }
    CHECK(rm64.dtype() == kFloat64);
    // The elements between the strided view's are untouched.
    CHECK(equal(rm_all.slice(0, 1, 6, 2), full({3}, 7.0)));
    CHECK(equal(rv_all.slice(0, 1, 6, 2), full({3}, 7.0)));
  }
}

TEST_CASE("batch_norm eval golden", "[norm][golden]") {
  Tensor x = golden_leaf("bn_eval.x"), w = golden_leaf("bn_eval.weight"), b = golden_leaf("bn_eval.bias");
  Tensor rm = golden("bn_eval.running_mean").clone(), rv = golden("bn_eval.running_var").clone();
  Tensor y = batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5);
  CHECK(close(y, golden("bn_eval.y"), 1e-10));
  CHECK(close(rm, golden("bn_eval.running_mean"), 0.0));  // untouched in eval
  sum(y * golden("bn_eval.gy")).backward();
  CHECK(close(x.grad(), golden("bn_eval.gx"), 1e-10));
  CHECK(close(w.grad(), golden("bn_eval.gweight"), 1e-10));
  CHECK(close(b.grad(), golden("bn_eval.gbias"), 1e-10));
}

TEST_CASE("pooling goldens in every dtype", "[pool][golden]") {
  struct Tol { DType dt; double rtol; };
  for (Tol t : {Tol{kFloat64, 1e-12}, Tol{kFloat32, 1e-6}, Tol{kFloat16, 1e-2}, Tol{kBFloat16, 2e-2}}) {
    INFO("dtype " << dtype_name(t.dt));
    auto run = [&](const std::string& p, auto fn) {
      INFO(p);
      Tensor x = golden(p + ".x").to(t.dt).detach().set_requires_grad(true);
      Tensor y = fn(x);
      CHECK(y.dtype() == t.dt);
      CHECK(close(y, golden(p + ".y"), t.rtol));
      sum(y * golden(p + ".gy").to(t.dt)).backward();
      CHECK(close(x.grad(), golden(p + ".gx"), t.rtol));
    };
    run("maxpool", [](const Tensor& x) { return max_pool2d(x, {3, 3}, {2, 2}, {1, 1}); });
    run("avgpool", [](const Tensor& x) { return avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false, true); });
    run("adaptive", [](const Tensor& x) { return adaptive_avg_pool2d(x, {3, 2}); });
  }
}

// ---- pooling details ----
TEST_CASE("pooling ceil_mode and count_include_pad follow PyTorch", "[pool]") {
  Tensor x = arange(9.0, TensorOptions(kFloat64)).reshape({1, 1, 3, 3});
  // Windows at the bottom/right edge are cut by the image: divisor counts only rows/cols
  // up to the (right) padding limit.
  Tensor a = avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}, true, true);
  CHECK(values(a) == std::vector<double>{2.0, 3.5, 6.5, 8.0});
  Tensor m = max_pool2d(x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true);
  CHECK(values(m) == std::vector<double>{4, 5, 7, 8});
  CHECK(max_pool2d(x, {2, 2}).sizes() == IntList{1, 1, 1, 1});
  // count_include_pad=false divides by the in-image window only.
  Tensor c = avg_pool2d(x, {3, 3}, {1, 1}, {1, 1}, false, false);
  CHECK(values(c)[0] == Approx((0 + 1 + 3 + 4) / 4.0));
  Tensor ci = avg_pool2d(x, {3, 3}, {1, 1}, {1, 1}, false, true);
  CHECK(values(ci)[0] == Approx((0 + 1 + 3 + 4) / 9.0));
  // Adaptive to a larger size repeats values.
  CHECK(values(adaptive_avg_pool2d(x, {6, 6})).size() == 36);
  // NaN propagates through max pooling.
  Tensor xn = x.clone();
  xn.data_ptr<double>()[4] = NAN;
  CHECK(std::isnan(values(max_pool2d(xn, {2, 2}, {1, 1}))[0]));
}

TEST_CASE("pooling gradcheck", "[pool][gradcheck]") {
  manual_seed(11);
  SECTION("max_pool2d: padding, dilation, ceil_mode") {
    Tensor x = distinct_leaf({2, 2, 7, 6});
    CHECK(gradcheck([](const tensor_list& t) { return max_pool2d(t[0], {3, 2}, {2, 1}, {1, 1}, {1, 2}, true); }, {x}) == "");
    CHECK(gradcheck([](const tensor_list& t) { return max_pool2d(t[0], {2, 2}); }, {x}) == "");
  }
  SECTION("avg_pool2d") {
    Tensor x = leaf({2, 2, 7, 6});
    for (bool ceil : {false, true})
      for (bool incl : {false, true}) {
        INFO("ceil_mode " << ceil << " count_include_pad " << incl);
        auto f = [=](const tensor_list& t) { return avg_pool2d(t[0], {3, 2}, {2, 2}, {1, 1}, ceil, incl); };
        CHECK(gradcheck(f, {x}) == "");
        CHECK(backward_gradcheck(f, x) == "");
      }
  }
  SECTION("adaptive_avg_pool2d") {
    Tensor x = leaf({2, 2, 7, 5});
    for (Pair o : {Pair{3, 2}, Pair{1, 1}, Pair{9, 6}}) {
      auto f = [=](const tensor_list& t) { return adaptive_avg_pool2d(t[0], o); };
      CHECK(gradcheck(f, {x}) == "");
      CHECK(backward_gradcheck(f, x) == "");
    }
  }
}

// Channels-last inputs run the CPU's channels-last kernels, which take every window (and every
// input gradient its contributions) in the row-major kernels' order: values, max-pool choices
// (seen through the gradients) and input gradients are the same bit for bit, with ties and NaN,
// and results and gradients stay channels-last.
TEST_CASE("pooling on channels-last equals row-major bit for bit and keeps the layout", "[pool]") {
  manual_seed(12);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
  };
  const std::vector<Case> cases = {
      {"max 3x3 stride 2 pad 1", [](const Tensor& x) { return max_pool2d(x, {3, 3}, {2, 2}, {1, 1}); }},
      {"max 2x2 stride 2x1 dilation 2 ceil",
       [](const Tensor& x) { return max_pool2d(x, {2, 2}, {2, 1}, {0, 0}, {2, 2}, true); }},
      {"avg 3x3 stride 2 pad 1 ceil, padding not counted",
       [](const Tensor& x) { return avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, true, false); }},
      {"avg 2x3 stride 1", [](const Tensor& x) { return avg_pool2d(x, {2, 3}, {1, 1}); }},
      {"adaptive to 4x3", [](const Tensor& x) { return adaptive_avg_pool2d(x, {4, 3}); }},
      {"adaptive global", [](const Tensor& x) { return adaptive_avg_pool2d(x, {1, 1}); }},
  };
  const auto CL = MemoryFormat::ChannelsLast;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (int64_t C : {3, 70}) {  // 70: more than one channel block in the backward kernels
      // Three distinct values, so windows hold ties, and two NaNs.
      std::vector<float> v(static_cast<size_t>(3 * C * 9 * 7));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int64_t>(i * 7919 % 13 % 3) - 1);
      v[5] = v[v.size() / 2] = std::nanf("");
      const Tensor x = tensor(v, {3, C, 9, 7}).to(dt);
      for (const Case& c : cases) {
        INFO(c.name << ", " << dtype_name(dt) << ", C = " << C);
        Tensor xr = x.detach().set_requires_grad(true), xc = x.contiguous(CL).detach().set_requires_grad(true);
        const Tensor yr = c.f(xr), yc = c.f(xc);
        CHECK(yc.is_contiguous(CL));
        CHECK(testing::same_values(yc, yr));
        const Tensor gy = randn(yr.sizes()).to(dt);
        yr.backward(gy);
        yc.backward(gy.contiguous(CL));
        CHECK(xc.grad().is_contiguous(CL));
        CHECK(testing::same_values(xc.grad(), xr.grad()));
      }
    }
  }
}

// Max pooling written out as PyTorch defines it: each window's first maximum, or its first NaN
// (windows taken row by row), and the gradient routed to that element. Both layouts' kernels
// must agree with it exactly, with ties and NaN in the windows.
TEST_CASE("max pooling picks each window's first maximum or first NaN in both layouts", "[pool]") {
  struct Setting {
    Pair k, s, pad, d;
    bool ceil;
  };
  const Setting settings[] = {{{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
                              {{2, 2}, {2, 1}, {0, 0}, {2, 2}, true},
                              {{3, 2}, {1, 1}, {1, 0}, {1, 1}, false},
                              {{1, 3}, {3, 2}, {0, 1}, {1, 1}, true},
                              // 2x2 stride 2 has a kernel of its own (vector lanes over 8 outputs,
                              // then one at a time); with ceil_mode the general one takes the
                              // clipped last window.
                              {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
                              {{2, 2}, {2, 2}, {0, 0}, {1, 1}, true}};
  const int64_t N = 2, C = 5, H = 9, W = 18;
  std::vector<float> v(static_cast<size_t>(N * C * H * W));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int64_t>(i * 7919 % 11 % 3) - 1);
  v[3] = v[40] = v[41] = v[200] = std::nanf("");
  const Tensor x64 = tensor(v, {N, C, H, W}).to(kFloat64);
  for (const Setting& st : settings) {
    const Tensor y0 = max_pool2d(x64, st.k, st.s, st.pad, st.d, st.ceil);
    const int64_t Ho = y0.size(2), Wo = y0.size(3);
    const Tensor gy = randn(y0.sizes(), kFloat64);
    Tensor y_ref = empty(y0.sizes(), kFloat64), gx_ref = zeros(x64.sizes(), kFloat64);
    const double* xs = x64.data_ptr<double>();
    for (int64_t pl = 0; pl < N * C; ++pl)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          int64_t at = -1;
          for (int64_t i = 0; i < st.k[0]; ++i)
            for (int64_t j = 0; j < st.k[1]; ++j) {
              const int64_t h = oh * st.s[0] - st.pad[0] + i * st.d[0], w = ow * st.s[1] - st.pad[1] + j * st.d[1];
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              const double cand = xs[pl * H * W + h * W + w];
              if (at >= 0 && std::isnan(xs[pl * H * W + at])) continue;  // a NaN stays
              if (at < 0 || cand > xs[pl * H * W + at] || std::isnan(cand)) at = h * W + w;
            }
          const int64_t o = (pl * Ho + oh) * Wo + ow;
          y_ref.data_ptr<double>()[o] = xs[pl * H * W + at];
          gx_ref.data_ptr<double>()[pl * H * W + at] += gy.data_ptr<double>()[o];
        }
    for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
      for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        INFO("kernel " << st.k[0] << "x" << st.k[1] << " stride " << st.s[0] << "x" << st.s[1] << ", " << dtype_name(dt)
                       << (f == MemoryFormat::ChannelsLast ? ", channels-last" : ", row-major"));
        Tensor x = x64.to(dt).contiguous(f).detach().set_requires_grad(true);
        const Tensor y = max_pool2d(x, st.k, st.s, st.pad, st.d, st.ceil);
        CHECK(testing::same_values(y, y_ref.to(dt)));
        y.backward(gy.to(dt).contiguous(f));
        // Exact in f64; in the narrower dtypes gy itself was rounded, and a misrouted gradient
        // would still be off by a whole gy.
        if (dt == kFloat64) CHECK(testing::same_values(x.grad(), gx_ref));
        else CHECK(close(x.grad(), gx_ref, dt == kFloat32 ? 1e-6 : 2e-2));
      }
    }
  }
}

TEST_CASE("pooling validation errors", "[pool][errors]") {
  Tensor x = randn({2, 3, 5, 5});
  REQUIRE_THROWS_WITH(max_pool2d(randn({5, 5}), {2, 2}), Catch::Contains("4-d input"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {0, 2}), Catch::Contains("kernel size must be positive"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {2, 2}, {2, 2}, {2, 0}), Catch::Contains("at most half the kernel"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {6, 6}), Catch::Contains("too small") && Catch::Contains("[2, 3, 5, 5]"));
  REQUIRE_THROWS_WITH(avg_pool2d(x.to(kInt64), {2, 2}), Catch::Contains("floating"));
  REQUIRE_THROWS_WITH(adaptive_avg_pool2d(x, {0, 2}), Catch::Contains("output_size must be positive"));
  CHECK_THROWS_AS(avg_pool2d(x, {2, 2}, {-1, 1}), Error);
}

// ---- normalization ----
TEST_CASE("batch_norm gradcheck", "[norm][gradcheck]") {
  manual_seed(21);
  Tensor x = leaf({3, 2, 4, 3}, 2.0, 1.0), w = leaf({2}, 0.5, 1.0), b = leaf({2});
  Tensor rm = randn({2}, kFloat64), rv = rand({2}, kFloat64) + 0.5;
  SECTION("training, affine") {
    auto f = [](const tensor_list& t) { return batch_norm(t[0], {}, {}, t[1], t[2], true); };
    CHECK(gradcheck(f, {x, w, b}) == "");
    CHECK(gradgradcheck(f, {x, w, b}) == "");
  }
  SECTION("training, no affine, 2-d input") {
    Tensor x2 = leaf({5, 3});
    CHECK(gradcheck([](const tensor_list& t) { return batch_norm(t[0], {}, {}, {}, {}, true); }, {x2}) == "");
  }
  SECTION("eval, affine and not") {
    auto f = [&](const tensor_list& t) { return batch_norm(t[0], rm, rv, t[1], t[2], false); };
    CHECK(gradcheck(f, {x, w, b}) == "");
    CHECK(gradgradcheck(f, {x, w, b}) == "");
    CHECK(gradcheck([&](const tensor_list& t) { return batch_norm(t[0], rm, rv, {}, {}, false); }, {x}) == "");
  }
}

TEST_CASE("batch_norm f16 input with f32 weights and running statistics", "[norm][amp]") {
  manual_seed(22);
  Tensor x64 = randn({4, 3, 5, 5}, kFloat64) * 2.0 + 1.0;
  Tensor x = x64.to(kFloat16).detach().set_requires_grad(true);
  Tensor w = (rand({3}) + 0.5).detach().set_requires_grad(true), b = randn({3}).detach().set_requires_grad(true);
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
  CHECK(y.dtype() == kFloat16);
  CHECK(rm.dtype() == kFloat32);

  // Reference in f64 from the same (f16-rounded) input.
  Tensor xr = x.detach().to(kFloat64).set_requires_grad(true);
  Tensor wr = w.detach().to(kFloat64).set_requires_grad(true), br = b.detach().to(kFloat64).set_requires_grad(true);
  Tensor rmr = zeros({3}, kFloat64), rvr = ones({3}, kFloat64);
  Tensor yr = batch_norm(xr, rmr, rvr, wr, br, true, 0.1, 1e-5);
  CHECK(close(y, yr, 2e-3));
  CHECK(close(rm, rmr, 1e-6));
  CHECK(close(rv, rvr, 1e-6));

  Tensor gy = randn(y.sizes(), kFloat64);
  sum(y * gy.to(kFloat16)).backward();
  sum(yr * gy.to(kFloat16).to(kFloat64)).backward();
  CHECK(x.grad().dtype() == kFloat16);
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(close(x.grad(), xr.grad(), 5e-3));
  CHECK(close(w.grad(), wr.grad(), 1e-4));
  CHECK(close(b.grad(), br.grad(), 1e-4));

  // bf16 eval with f32 running statistics.
  Tensor ye = batch_norm(x64.to(kBFloat16), rm, rv, w.detach(), b.detach(), false);
  CHECK(ye.dtype() == kBFloat16);
  CHECK(close(ye, batch_norm(x64, rm.to(kFloat64), rv.to(kFloat64), w.detach().to(kFloat64), b.detach().to(kFloat64), false),
              2e-2));
}

TEST_CASE("batch_norm channels-last matches contiguous", "[norm]") {
  manual_seed(23);
  Tensor x = randn({2, 3, 4, 4}, kFloat64);
  Tensor xc = x.contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
  Tensor xr = x.detach().set_requires_grad(true);
  Tensor yc = batch_norm(xc, {}, {}, {}, {}, true), yr = batch_norm(xr, {}, {}, {}, {}, true);
  CHECK(yc.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(close(yc, yr, 1e-12));
  Tensor gy = randn(x.sizes(), kFloat64);
  sum(yc * gy).backward();
  sum(yr * gy).backward();
  CHECK(close(xc.grad(), xr.grad(), 1e-12));
}

TEST_CASE("batch_norm on channels-last f32 is identical on one and two threads", "[norm]") {
  // The channels-last kernels sum rows in fixed chunks: thread count must not change a bit.
  manual_seed(26);
  const Tensor x0 = (randn({8, 24, 20, 20}) * 3.0 + 1.0).contiguous(MemoryFormat::ChannelsLast);
  const Tensor z0 = randn({8, 24, 20, 20}).contiguous(MemoryFormat::ChannelsLast);
  const Tensor gy = randn({8, 24, 20, 20}).contiguous(MemoryFormat::ChannelsLast);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor x = x0.clone().detach().set_requires_grad(true), w = ones({24}).set_requires_grad(true);
    Tensor y = batch_norm_add_relu(batch_norm(x, {}, {}, w, {}, true), z0, {}, {}, w, {}, true);
    y.backward(gy);
    omp_set_num_threads(saved);
    return std::make_pair(y.detach(), x.grad());
  };
  const auto [y1, g1] = run(1);
  const auto [y2, g2] = run(2);
  CHECK(y1.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(g1.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(equal(y1, y2));
  CHECK(equal(g1, g2));
}

TEST_CASE("row-major batch_norm: the same bits on any thread count, exact residual gradients, statistics of offset data",
          "[norm]") {
  // The row-major kernels sum each channel in 8 double lanes over rows of 49 values (a tail of 1
  // per row) and widen 16-bit rows into per-thread buffers: neither may depend on the threads.
  manual_seed(27);
  const Tensor x0 = randn({6, 5, 7, 7}) * 3.0 + 1.0, z0 = randn({6, 5, 7, 7}), g0 = randn({6, 5, 7, 7});
  for (DType dt : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    INFO(dtype_name(dt));
    const DType st = dt == kFloat64 ? kFloat64 : kFloat32;
    auto run = [&](int threads, bool add) {
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      Tensor x = x0.to(dt).detach().set_requires_grad(true), z = z0.to(dt).detach().set_requires_grad(true);
      Tensor w = (ones({5}) * 0.7).to(st).set_requires_grad(true), b = (ones({5}) * 0.1).to(st).set_requires_grad(true);
      Tensor y = add ? batch_norm_add_relu(x, z, {}, {}, w, b, true) : batch_norm_relu(x, {}, {}, w, b, true);
      const Tensor gy = g0.to(dt);
      y.backward(gy);
      omp_set_num_threads(saved);
      if (add) CHECK(equal(z.grad(), where(gt(y.detach(), 0.0), gy, 0.0)));  // the masked gy, bit for bit
      return tensor_list{y.detach(), x.grad(), w.grad(), b.grad()};
    };
    for (bool add : {false, true}) {
      const tensor_list one = run(1, add), three = run(3, add);
      for (size_t i = 0; i < one.size(); ++i) CHECK(equal(one[i], three[i]));
    }
  }
  // Data far from 0: the two-pass statistics in double keep the variance of values around 1,000.
  const Tensor x = randn({16, 3, 9, 9}) + 1000.0;
  Tensor rm = zeros({3}), rv = ones({3});
  batch_norm(x, rm, rv, {}, {}, true, 1.0);
  const Tensor xd = x.to(kFloat64).transpose(0, 1).reshape({3, -1});
  CHECK(close(rm, mean(xd, {1}).to(kFloat32), 1e-6, 1e-7));
  CHECK(close(rv, var(xd, {1}).to(kFloat32), 1e-5, 1e-5));
}

TEST_CASE("batch_norm validation errors", "[norm][errors]") {
  Tensor x = randn({4, 3, 2, 2});
  REQUIRE_THROWS_WITH(batch_norm(randn({4}), {}, {}, {}, {}, true), Catch::Contains("at least 2 dims"));
  REQUIRE_THROWS_WITH(batch_norm(x, {}, {}, ones({4}), {}, true), Catch::Contains("weight") && Catch::Contains("3 elements"));
  REQUIRE_THROWS_WITH(batch_norm(x, {}, {}, {}, {}, false), Catch::Contains("running_mean"));
  REQUIRE_THROWS_WITH(batch_norm(randn({1, 3}), {}, {}, {}, {}, true), Catch::Contains("more than 1 value per channel"));
}

namespace {
// batch_norm_add_relu against relu(batch_norm(x) + z) (add), or batch_norm_relu against
// relu(batch_norm(x)): output, running statistics and the gradients of x, z, weight and bias.
void check_fused_bn(bool add, DType dt, DType wdt, bool training, bool channels_last, double tol) {
  INFO((add ? "batch_norm_add_relu " : "batch_norm_relu ")
       << dtype_name(dt) << " (stats " << dtype_name(wdt) << ") " << (training ? "training" : "eval")
       << (channels_last ? ", channels-last" : ""));
  manual_seed(24);
  auto make = [&](const Tensor& t) {
    Tensor v = t.to(dt);
    if (channels_last) v = v.contiguous(MemoryFormat::ChannelsLast);
    return v.detach().set_requires_grad(true);
  };
  const Tensor x0 = randn({4, 3, 5, 6}) * 2.0 + 0.5, z0 = randn({4, 3, 5, 6});
  Tensor x = make(x0), z = make(z0), xr = make(x0), zr = make(z0);
  Tensor w = (rand({3}) + 0.5).to(wdt).detach().set_requires_grad(true), wr = w.detach().clone().set_requires_grad(true);
  Tensor b = randn({3}).to(wdt).detach().set_requires_grad(true), br = b.detach().clone().set_requires_grad(true);
  Tensor rm = randn({3}).to(wdt), rv = (rand({3}) + 0.5).to(wdt), rmr = rm.clone(), rvr = rv.clone();

  Tensor y = add ? batch_norm_add_relu(x, z, rm, rv, w, b, training, 0.1, 1e-5)
                 : batch_norm_relu(x, rm, rv, w, b, training, 0.1, 1e-5);
  Tensor bn = batch_norm(xr, rmr, rvr, wr, br, training, 0.1, 1e-5);
  Tensor yr = relu(add ? bn + zr : bn);
  CHECK(y.dtype() == dt);
  CHECK(y.is_contiguous(channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous));
  CHECK(close(y, yr, tol, tol));
  CHECK(close(rm, rmr, 1e-6, 1e-6));
  CHECK(close(rv, rvr, 1e-6, 1e-6));
  Tensor gy = randn(y.sizes()).to(dt);
  // Where the composite's f16 sum rounds to exactly 0 the fused one may not: compare the
  // gradients where both outputs are clearly away from the ReLU's kink.
  Tensor away = gt(abs(yr.detach().to(kFloat64)), 4 * tol).to(dt);
  (y * gy * away).sum().backward();
  (yr * gy * away).sum().backward();
  CHECK(close(x.grad(), xr.grad(), 10 * tol, 10 * tol));
  if (add) CHECK(close(z.grad(), zr.grad(), tol, tol));
  CHECK(close(w.grad(), wr.grad(), 10 * tol, 10 * tol));
  CHECK(close(b.grad(), br.grad(), 10 * tol, 10 * tol));
  CHECK(w.grad().dtype() == wdt);
}
}  // namespace

TEST_CASE("batch_norm_add_relu and batch_norm_relu equal their composites in every dtype and layout", "[norm]") {
  for (bool add : {true, false})
    for (bool training : {true, false})
      for (bool cl : {false, true}) {
        check_fused_bn(add, kFloat64, kFloat64, training, cl, 1e-12);
        check_fused_bn(add, kFloat32, kFloat32, training, cl, 1e-5);
        check_fused_bn(add, kFloat16, kFloat32, training, cl, 2e-3);
        check_fused_bn(add, kBFloat16, kFloat32, training, cl, 1.6e-2);
      }
}

TEST_CASE("batch_norm_add_relu and batch_norm_relu gradcheck, composite fallbacks and errors", "[norm][gradcheck]") {
  manual_seed(25);
  // Shifted so that no value sits within the finite difference's step of the ReLU's kink.
  Tensor x = leaf({3, 2, 4, 3}, 2.0, 1.0), z = leaf({3, 2, 4, 3}), w = leaf({2}, 0.5, 1.0), b = leaf({2});
  Tensor rm = randn({2}, kFloat64), rv = rand({2}, kFloat64) + 0.5;
  for (bool training : {true, false}) {
    INFO((training ? "training" : "eval"));
    auto f = [&](const tensor_list& t) {
      return batch_norm_add_relu(t[0], t[1], training ? Tensor() : rm, training ? Tensor() : rv, t[2], t[3], training);
    };
    CHECK(gradcheck(f, {x, z, w, b}) == "");
    CHECK(gradgradcheck(f, {x, z, w, b}) == "");
    auto g = [&](const tensor_list& t) {
      return batch_norm_relu(t[0], training ? Tensor() : rm, training ? Tensor() : rv, t[1], t[2], training);
    };
    CHECK(gradcheck(g, {x, w, b}) == "");
    CHECK(gradgradcheck(g, {x, w, b}) == "");
  }
  // A broadcast residual or one of another dtype: the composite, with the add's promotion.
  Tensor xf = randn({2, 3, 4, 4}), zb = randn({1, 3, 1, 1});
  CHECK(close(batch_norm_add_relu(xf, zb, {}, {}, {}, {}, true), relu(batch_norm(xf, {}, {}, {}, {}, true) + zb), 1e-6));
  Tensor yp = batch_norm_add_relu(xf.to(kFloat16), xf, {}, {}, {}, {}, true);
  CHECK(yp.dtype() == kFloat32);
  REQUIRE_THROWS_WITH(batch_norm_add_relu(xf, Tensor(), {}, {}, {}, {}, true), Catch::Contains("residual z"));
  REQUIRE_THROWS_WITH(batch_norm_add_relu(xf, xf, {}, {}, ones({4}), {}, true),
                      Catch::Contains("batch_norm_add_relu") && Catch::Contains("3 elements"));
  REQUIRE_THROWS_WITH(batch_norm_add_relu(xf, randn({2, 3, 4, 5}), {}, {}, {}, {}, true), Catch::Contains("4, 5"));
  // batch_norm_relu checks as batch_norm does, under its own name; empty input: the composite.
  REQUIRE_THROWS_WITH(batch_norm_relu(xf, {}, {}, ones({4}), {}, true),
                      Catch::Contains("batch_norm_relu") && Catch::Contains("3 elements"));
  REQUIRE_THROWS_WITH(batch_norm_relu(xf, {}, {}, {}, {}, false), Catch::Contains("running_mean"));
  REQUIRE_THROWS_WITH(batch_norm_relu(randn({1, 3}), {}, {}, {}, {}, true),
                      Catch::Contains("more than 1 value per channel"));
  CHECK(batch_norm_relu(zeros({0, 3, 2, 2}), zeros({3}), ones({3}), {}, {}, false).sizes() == IntList{0, 3, 2, 2});
}

TEST_CASE("layer_norm and group_norm", "[norm][gradcheck]") {
  manual_seed(24);
  SECTION("layer_norm forward normalizes the trailing dims") {
    Tensor x = randn({3, 4, 5}, kFloat64) * 3.0 + 2.0;
    Tensor y = layer_norm(x, {4, 5});
    CHECK(close(mean(y, {1, 2}), zeros({3}, kFloat64), 0.0, 1e-12));
    CHECK(close(var(y, {1, 2}, false), ones({3}, kFloat64), 1e-4));
  }
  SECTION("layer_norm gradcheck") {
    Tensor x = leaf({2, 3, 4}), w = leaf({4}), b = leaf({4});
    auto f = [](const tensor_list& t) { return layer_norm(t[0], {4}, t[1], t[2]); };
    CHECK(gradcheck(f, {x, w, b}) == "");
    CHECK(gradgradcheck(f, {x, w, b}) == "");
    CHECK(gradcheck([](const tensor_list& t) { return layer_norm(t[0], {3, 4}); }, {x}) == "");
  }
  SECTION("group_norm gradcheck and per-group statistics") {
    Tensor x = leaf({2, 4, 3, 2}), w = leaf({4}), b = leaf({4});
    auto f = [](const tensor_list& t) { return group_norm(t[0], 2, t[1], t[2]); };
    CHECK(gradcheck(f, {x, w, b}) == "");
    Tensor y = group_norm(x.detach(), 2);
    CHECK(close(mean(y.reshape({2, 2, -1}), {2}), zeros({2, 2}, kFloat64), 0.0, 1e-12));
  }
  SECTION("low precision input keeps its dtype") {
    Tensor x = randn({2, 4, 3}).to(kFloat16);
    CHECK(layer_norm(x, {3}).dtype() == kFloat16);
    CHECK(group_norm(x, 2).dtype() == kFloat16);
    CHECK(close(group_norm(x, 2), group_norm(x.to(kFloat64), 2), 5e-3));
  }
  SECTION("errors") {
    Tensor x = randn({2, 4, 3});
    REQUIRE_THROWS_WITH(layer_norm(x, {4}), Catch::Contains("trailing dims"));
    REQUIRE_THROWS_WITH(layer_norm(x, {3}, ones({4})), Catch::Contains("weight"));
    REQUIRE_THROWS_WITH(group_norm(x, 3), Catch::Contains("not divisible by num_groups=3"));
  }
}
