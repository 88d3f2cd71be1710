// CUDA vs CPU: reductions (sum/mean/var/max/min/arg*), softmax family, dropout, losses and the
// norms composed from them, in every floating dtype, over short/long/many-row shapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/random.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/reduction.h"
#include "test_util.h"

using namespace mpx;
using testing::error_of;

namespace {

const std::vector<DType> kFloats = {kFloat32, kFloat16, kBFloat16, kFloat64};

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

// Seeded standard normal (times `scale`) in dtype dt, on the CPU.
Tensor randn_dt(const IntList& shape, DType dt, uint64_t seed, double scale = 1.0) {
  manual_seed(seed);
  Tensor x = randn(shape);
  if (scale != 1.0) x = x * scale;
  return x.to(dt);
}



// Shapes that reach each launch plan: short rows sharing a warp, a warp per row, a block per
// row, long rows split across blocks, many short rows.
const std::vector<IntList> kRowShapes = {{1, 1}, {7, 13}, {33, 33}, {5, 1024}, {64, 3001}, {3, 100003}, {100000, 10}};

}  // namespace

TEST_CASE("cuda sum and mean match the CPU", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats) {
    for (const IntList& s : kRowShapes) {
      const Tensor x = randn_dt(s, dt, 11);
      const Tensor xd = gpu(x);
      testing::check_cuda_close(sum(xd), sum(x), dt, "sum all");
      testing::check_cuda_close(sum(xd, {1}), sum(x, {1}), dt, "sum dim 1");
      testing::check_cuda_close(sum(xd, {0}), sum(x, {0}), dt, "sum dim 0");
      testing::check_cuda_close(sum(xd, {-1}, true), sum(x, {-1}, true), dt, "sum keepdim");
      testing::check_cuda_close(mean(xd, {1}), mean(x, {1}), dt, "mean dim 1");
      testing::check_cuda_close(mean(xd), mean(x), dt, "mean all");
      // Transposed (strided) input.
      testing::check_cuda_close(sum(xd.t(), {1}), sum(x.t(), {1}), dt, "sum of transposed");
      testing::check_cuda_close(mean(xd.t(), {0}, true), mean(x.t(), {0}, true), dt, "mean of transposed");
    }
    // Several dims of a 4-d tensor, with and without keepdim, and a permuted view.
    const Tensor x = randn_dt({3, 5, 7, 9}, dt, 12);
    const Tensor xd = gpu(x);
    testing::check_cuda_close(sum(xd, {0, 2}), sum(x, {0, 2}), dt, "sum dims {0, 2}");
    testing::check_cuda_close(sum(xd, {1, 3}, true), sum(x, {1, 3}, true), dt, "sum dims {1, 3} keepdim");
    testing::check_cuda_close(mean(xd, {0, 1, 3}), mean(x, {0, 1, 3}), dt, "mean dims {0, 1, 3}");
    testing::check_cuda_close(mean(xd.permute({3, 1, 0, 2}), {1, 2}), mean(x.permute({3, 1, 0, 2}), {1, 2}), dt, "mean permuted");
    // One ~4M-element row (split path) of positive values, so the relative check is meaningful
    // (scaled for f16 so that the sum stays below its largest finite value, 65504).
    manual_seed(13);
    const Tensor big = ((rand({4 * 1024 * 1024 + 7}) + 0.5) * (dt == kFloat16 ? 1.0 / 512 : 1.0)).to(dt);
    testing::check_cuda_close(sum(gpu(big)), sum(big), dt, "sum 4M");
    testing::check_cuda_close(mean(gpu(big)), mean(big), dt, "mean 4M");
    // Empty tensors: sums of nothing are 0, reducing a zero-size non-reduced dim gives an empty result.
    const Tensor e = randn_dt({0, 5}, dt, 14);
    testing::check_cuda_close(sum(gpu(e), {1}), sum(e, {1}), dt, "sum of empty rows");
    CHECK(sum(gpu(e), {1}).numel() == 0);
    testing::check_cuda_close(sum(gpu(e)), sum(e), dt, "sum of empty");
    testing::check_cuda_close(sum(gpu(e), {0}), sum(e, {0}), dt, "sum over an empty dim");
  }
}

TEST_CASE("cuda norm and vector_norm(2) (one sum-of-squares pass) match the CPU, forward and backward", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats) {
    for (const IntList& s : kRowShapes) {
      const Tensor x = randn_dt(s, dt, 15);
      const Tensor xd = gpu(x);
      testing::check_cuda_close(norm(xd), norm(x), dt, "norm");
      testing::check_cuda_close(vector_norm(xd, 2.0, {1}), vector_norm(x, 2.0, {1}), dt, "vector_norm dim 1");
      testing::check_cuda_close(vector_norm(xd.t(), 2.0, {0}, true), vector_norm(x.t(), 2.0, {0}, true), dt,
                                "vector_norm of transposed");
    }
    Tensor c = randn_dt({37, 1000}, dt, 16).set_requires_grad(true);
    Tensor g = gpu(c.detach()).set_requires_grad(true);
    norm(c).backward();
    norm(g).backward();
    testing::check_cuda_close(g.grad(), c.grad(), dt, "norm backward");
  }
}

TEST_CASE("cuda sum of integers is exact", "[cuda]") {
  if (!testing::cuda_ready()) return;
  manual_seed(21);
  for (const IntList& s : kRowShapes) {
    const Tensor x = randint(-1000000, 1000000, s);
    const Tensor xd = gpu(x);
    CHECK(testing::same_values(sum(xd), sum(x)));
    CHECK(testing::same_values(sum(xd, {1}), sum(x, {1})));
    CHECK(testing::same_values(sum(xd.t(), {1}, true), sum(x.t(), {1}, true)));
  }
  const Tensor big = randint(0, 1 << 20, {4 * 1024 * 1024 + 3});
  CHECK(testing::same_values(sum(gpu(big)), sum(big)));
  // i32 and bool inputs are summed in i64 (a count of true values).
  const Tensor b = gt(randn_dt({1000, 17}, kFloat32, 22), 0.0);
  CHECK(testing::same_values(sum(gpu(b), {1}), sum(b, {1})));
  const Tensor i32 = randint(-50, 50, {33, 9}, TensorOptions(kInt32));
  CHECK(testing::same_values(sum(gpu(i32), {0}), sum(i32, {0})));
}

TEST_CASE("cuda cumsum and logsumexp match the CPU, forward and backward, integers exact", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats)
    for (const IntList& shape : {IntList{4, 7}, IntList{3, 50257}, IntList{2, 300, 5}}) {
      INFO(dtype_name(dt) << " " << shape_str(shape));
      const Tensor x = randn_dt(shape, dt, 13);
      for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
        const Tensor xc = x.detach().set_requires_grad(true), xd = gpu(x).detach().set_requires_grad(true);
        const Tensor yc = cumsum(xc, dim), yd = cumsum(xd, dim);
        testing::check_cuda_close(yd, yc, dt, "cumsum");
        const Tensor up = randn_dt(shape, dt, 14);
        sum(yc * up).backward();
        sum(yd * gpu(up)).backward();
        testing::check_cuda_close(xd.grad(), xc.grad(), dt, "cumsum backward");
        testing::check_cuda_close(logsumexp(gpu(x), {dim}), logsumexp(x, {dim}), kFloat32, "logsumexp");
      }
    }
  const Tensor i = randint(-5, 5, {3, 1000}, TensorOptions(kInt64));
  CHECK(testing::same_values(cumsum(gpu(i), 1).cpu(), cumsum(i, 1)));
}

TEST_CASE("cuda var matches the CPU", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats) {
    for (const IntList& s : kRowShapes) {
      if (s[1] == 1) continue;  // one sample: the unbiased variance is NaN on both sides, checked below
      const Tensor x = randn_dt(s, dt, 31, 3.0);
      const Tensor xd = gpu(x);
      testing::check_cuda_close(var(xd, {1}), var(x, {1}), dt, "var unbiased dim 1");
      testing::check_cuda_close(var(xd, {1}, false, true), var(x, {1}, false, true), dt, "var biased keepdim");
      if (s[0] > 1) testing::check_cuda_close(var(xd, {0}), var(x, {0}), dt, "var dim 0 (transposed rows)");
      testing::check_cuda_close(var(xd, {}), var(x, {}), dt, "var all");
    }
    const Tensor x = randn_dt({4, 6, 5}, dt, 32) + 10.0;  // an offset mean tests the centring
    testing::check_cuda_close(var(gpu(x), {0, 2}), var(x, {0, 2}), dt, "var dims {0, 2}");
    testing::check_cuda_close(mpx::std(gpu(x), {1}, false), mpx::std(x, {1}, false), dt, "std");
    manual_seed(33);
    const Tensor big = (randn({4 * 1024 * 1024 + 5}) * 2.0 + 1.0).to(dt);
    testing::check_cuda_close(var(gpu(big), {0}), var(big, {0}), dt, "var 4M");
    // One element per row: n - 1 = 0 gives NaN (biased: 0), as on the CPU.
    const Tensor one = randn_dt({5, 1}, dt, 34);
    CHECK(testing::same_values(var(gpu(one), {1}), var(one, {1})));
    CHECK(testing::same_values(var(gpu(one), {1}, false), var(one, {1}, false)));
  }
}

TEST_CASE("cuda max/min/argmax/argmin give the CPU's values and indices", "[cuda]") {
  if (!testing::cuda_ready()) return;
  const std::vector<DType> types = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8};
  for (DType dt : types) {
    for (const IntList& s : kRowShapes) {
      manual_seed(41);
      // Floating inputs are distinct in practice; integer inputs have many ties, which must
      // resolve to the first index exactly as on the CPU.
      const Tensor x = is_floating(dt) ? randn_dt(s, dt, 41) : randint(0, dt == kUInt8 ? 255 : 1000, s, TensorOptions(dt));
      const Tensor xd = gpu(x);
      for (int64_t d : {0, 1}) {
        INFO("dtype " << dtype_name(dt) << " shape " << shape_str(s) << " dim " << d);
        auto [v, i] = max(xd, d);
        auto [vc, ic] = max(x, d);
        CHECK(testing::same_values(v, vc));
        CHECK(testing::same_values(i, ic));
        auto [v2, i2] = min(xd, d, true);
        auto [vc2, ic2] = min(x, d, true);
        CHECK(testing::same_values(v2, vc2));
        CHECK(testing::same_values(i2, ic2));
        CHECK(testing::same_values(argmax(xd, d), argmax(x, d)));
        CHECK(testing::same_values(argmin(xd.t(), d), argmin(x.t(), d)));
      }
      CHECK(testing::same_values(max(xd), max(x)));
      CHECK(testing::same_values(min(xd), min(x)));
    }
  }
  const Tensor x = randn_dt({3, 4, 5}, kFloat32, 42);
  CHECK(testing::same_values(amax(gpu(x), {0, 2}), amax(x, {0, 2})));
  CHECK(testing::same_values(amin(gpu(x), {1, 2}, true), amin(x, {1, 2}, true)));
  manual_seed(43);
  const Tensor big = randn({4 * 1024 * 1024 + 1});
  CHECK(testing::same_values(argmax(gpu(big), 0), argmax(big, 0)));
  CHECK(testing::same_values(argmin(gpu(big), 0), argmin(big, 0)));
  CHECK(testing::error_of([&] { max(gpu(randn_dt({0, 3}, kFloat32, 1)), 1); }).find("cannot reduce an empty tensor") !=
        std::string::npos);
}

TEST_CASE("cuda arg-reductions break ties and propagate NaN like the CPU", "[cuda]") {
  if (!testing::cuda_ready()) return;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    // Ties: the first index of the extreme value wins; -0.0 and 0.0 are equal.
    const Tensor ties = tensor<float>({1, 3, 3, 2, 3, 0, -0.0f, 0, 5, 5, 5, 5, -1, -1, 7, -1}, {4, 4}).to(dt);
    // NaN: the first NaN wins for both max and min, and the value is NaN.
    const Tensor nans = tensor<float>({1, nan, 3, nan, 9, 2, 1, nan, nan, 0, 0, 0, 4, 4, 4, 4}, {4, 4}).to(dt);
    for (const Tensor& x : {ties, nans}) {
      for (int64_t d : {0, 1}) {
        INFO("dtype " << dtype_name(dt) << " dim " << d);
        auto [v, i] = max(gpu(x), d);
        auto [vc, ic] = max(x, d);
        CHECK(testing::same_values(v, vc));
        CHECK(testing::same_values(i, ic));
        auto [v2, i2] = min(gpu(x), d);
        auto [vc2, ic2] = min(x, d);
        CHECK(testing::same_values(v2, vc2));
        CHECK(testing::same_values(i2, ic2));
      }
    }
    // Ties and NaN far apart in one long row, landing in different blocks of the split path.
    Tensor longrow = zeros({3, 300000});
    float* p = longrow.data_ptr<float>();
    p[123] = p[250000] = 2.0f;                     // row 0: tie for the max
    p[300000 + 7] = p[300000 + 200000] = -3.0f;    // row 1: tie for the min
    p[300000 + 100] = 2.0f;
    p[600000 + 290000] = nan;                      // row 2: NaN late, and a second one later
    p[600000 + 299999] = nan;
    p[600000 + 5] = 9.0f;
    const Tensor lr = longrow.to(dt);
    for (bool is_max : {true, false}) {
      auto [v, i] = is_max ? max(gpu(lr), 1) : min(gpu(lr), 1);
      auto [vc, ic] = is_max ? max(lr, 1) : min(lr, 1);
      CHECK(testing::same_values(v, vc));
      CHECK(testing::same_values(i, ic));
    }
  }
}

TEST_CASE("cuda softmax and log_softmax forward and backward match the CPU", "[cuda]") {
  if (!testing::cuda_ready()) return;
  struct Case {
    IntList shape;
    int64_t dim;
  };
  const std::vector<Case> cases = {{{1}, 0},           {{5, 10}, 1},         {{1000, 10}, -1},   {{33, 37}, 1},
                                   {{16, 3001}, 1},    {{2, 100003}, 1},     {{4, 37, 9}, 1},    {{8, 500, 64}, 1},
                                   {{2, 40001, 3}, 1}, {{3, 5, 7}, 0},       {{200000, 3}, 1},   {{2, 7, 1, 5}, 2}};
  for (DType dt : kFloats) {
    for (const Case& c : cases) {
      for (bool log : {false, true}) {
        // Large magnitudes: without subtracting the max, exp would overflow.
        const double scale = dt == kFloat16 ? 300.0 : 1000.0;
        const Tensor x = randn_dt(c.shape, dt, 51, scale);
        const Tensor g = randn_dt(c.shape, dt, 52);
        Tensor xc = x.clone().set_requires_grad(true);
        Tensor xd = gpu(x).set_requires_grad(true);
        Tensor yc = log ? log_softmax(xc, c.dim) : softmax(xc, c.dim);
        Tensor yd = log ? log_softmax(xd, c.dim) : softmax(xd, c.dim);
        const std::string what = std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(c.dim);
        testing::check_cuda_close(yd, yc, dt, what);
        yc.backward(g);
        yd.backward(gpu(g));
        testing::check_cuda_close(xd.grad(), xc.grad(), dt, what + " backward");
        // Moderate inputs, where the gradient is not concentrated on one element per row.
        const Tensor xm = randn_dt(c.shape, dt, 53);
        Tensor xmc = xm.clone().set_requires_grad(true);
        Tensor xmd = gpu(xm).set_requires_grad(true);
        Tensor ymc = log ? log_softmax(xmc, c.dim) : softmax(xmc, c.dim);
        Tensor ymd = log ? log_softmax(xmd, c.dim) : softmax(xmd, c.dim);
        testing::check_cuda_close(ymd, ymc, dt, what + " moderate");
        ymc.backward(g);
        ymd.backward(gpu(g));
        testing::check_cuda_close(xmd.grad(), xmc.grad(), dt, what + " moderate backward");
      }
    }
    // Empty tensors, and -inf / NaN / inf lanes (NaN where the CPU gives NaN; values that are exact
    // in any libm, so they compare bit for bit).
    const Tensor e = randn_dt({0, 5}, dt, 54);
    CHECK(softmax(gpu(e), 1).numel() == 0);
    CHECK(log_softmax(gpu(randn_dt({3, 0}, dt, 55)), 1).sizes() == IntList{3, 0});
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const Tensor special = tensor<float>({-inf, -inf, -inf, -inf, 0, -inf, 2, nan, 3, inf, 1, 2}, {4, 3}).to(dt);
    CHECK(testing::same_values(softmax(gpu(special), 1), softmax(special, 1)));
    CHECK(testing::same_values(log_softmax(gpu(special), 1), log_softmax(special, 1)));
  }
  // The 4M-element row (split path), f32. The CPU kernel sums the 4M exponentials one after
  // the other in f32, which loses more than the device's tree does, so the reference is the
  // CPU's f64 result.
  const Tensor big = randn_dt({1, 4 * 1024 * 1024 + 9}, kFloat32, 56, 10.0);
  testing::check_cuda_close(softmax(gpu(big), 1), softmax(big.to(kFloat64), 1).to(kFloat32), kFloat32, "softmax 4M");
  testing::check_cuda_close(log_softmax(gpu(big), 1), log_softmax(big.to(kFloat64), 1).to(kFloat32), kFloat32, "log_softmax 4M");
  const Tensor big_inner = randn_dt({2, 1024 * 1024 + 3, 2}, kFloat32, 58, 10.0);
  testing::check_cuda_close(softmax(gpu(big_inner), 1), softmax(big_inner.to(kFloat64), 1).to(kFloat32), kFloat32,
              "softmax 4M over a middle dim");
  // A softmax over a transposed view, and with a dtype argument.
  const Tensor x = randn_dt({9, 17}, kFloat16, 57);
  testing::check_cuda_close(softmax(gpu(x).t(), 1), softmax(x.t(), 1), kFloat16, "softmax transposed");
  testing::check_cuda_close(log_softmax(gpu(x), 1, kFloat32), log_softmax(x, 1, kFloat32), kFloat32, "log_softmax dtype=f32");
}

TEST_CASE("cuda dropout draws the CPU's mask for the same seed", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats) {
    for (const IntList& s : std::vector<IntList>{{1}, {1001}, {37, 53}, {4 * 1024 * 1024 + 3}}) {
      for (double p : {0.1, 0.5, 0.9}) {
        INFO("dtype " << dtype_name(dt) << " shape " << shape_str(s) << " p " << p);
        const Tensor x = randn_dt(s, dt, 61);
        const Tensor g = randn_dt(s, dt, 62);
        Tensor xc = x.clone().set_requires_grad(true);
        Tensor xd = gpu(x).set_requires_grad(true);
        manual_seed(1234);
        Tensor yc = dropout(xc, p, true);
        Tensor yc2 = dropout(x, p, true);  // the generator's offset advances the same way
        manual_seed(1234);
        Tensor yd = dropout(xd, p, true);
        Tensor yd2 = dropout(gpu(x), p, true);
        CHECK(yd.device().is_cuda());
        // Same mask and the same f32 product: bit-identical.
        CHECK(testing::same_values(yd, yc));
        CHECK(testing::same_values(yd2, yc2));
        yc.backward(g);
        yd.backward(gpu(g));
        CHECK(testing::same_values(xd.grad(), xc.grad()));
      }
    }
    // p = 0 is the identity; p = 1 zeroes everything (and its gradient); eval is the identity.
    const Tensor x = randn_dt({123}, dt, 63);
    CHECK(testing::same_values(dropout(gpu(x), 0.0, true), x));
    CHECK(testing::same_values(dropout(gpu(x), 0.5, false), x));
    Tensor xd = gpu(x).set_requires_grad(true);
    Tensor y1 = dropout(xd, 1.0, true);
    CHECK(testing::same_values(y1, zeros({123}, dt)));
    y1.backward(gpu(ones({123}, dt)));
    CHECK(testing::same_values(xd.grad(), zeros({123}, dt)));
    CHECK(dropout(gpu(randn_dt({0, 4}, dt, 64)), 0.5, true).numel() == 0);
  }
}

TEST_CASE("cuda cross_entropy and nll_loss match the CPU forward and backward", "[cuda]") {
  if (!testing::cuda_ready()) return;
  struct Case {
    IntList shape;  // logits [N, C, ...]
    int64_t ignore = -100;
    double smoothing = 0.0;
    bool weighted = false;
  };
  const std::vector<Case> cases = {{{64, 10}},
                                   {{64, 10}, 3, 0.0, false},
                                   {{37, 11}, -100, 0.1, false},
                                   {{37, 11}, 2, 0.2, true},
                                   {{8, 5, 4, 3}, 1, 0.1, true},
                                   {{10}, -100, 0.0, false},
                                   {{4096, 1000}, 7, 0.1, true}};
  for (DType dt : kFloats) {
    for (const Case& c : cases) {
      const int64_t C = c.shape.size() == 1 ? c.shape[0] : c.shape[1];
      IntList tshape;
      if (c.shape.size() > 1) {
        tshape.push_back(c.shape[0]);
        for (size_t d = 2; d < c.shape.size(); ++d) tshape.push_back(c.shape[d]);
      }
      manual_seed(71);
      Tensor target = randint(0, C, tshape);
      // Some targets equal to ignore_index (when it is not a class) or to the ignored class.
      int64_t* tp = target.data_ptr<int64_t>();
      for (int64_t i = 1; i < target.numel(); i += 5) tp[i] = c.ignore;
      const Tensor w = c.weighted ? (rand({C}) + 0.5).to(dt) : Tensor();
      for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
        INFO("shape " << shape_str(c.shape) << " ignore " << c.ignore << " smoothing " << c.smoothing << " weighted "
                      << c.weighted << " reduction " << static_cast<int>(r));
        const Tensor x = randn_dt(c.shape, dt, 72, 3.0);
        Tensor xc = x.clone().set_requires_grad(true);
        Tensor xd = gpu(x).set_requires_grad(true);
        Tensor lc = cross_entropy(xc, target, r, c.ignore, c.smoothing, w);
        Tensor ld = cross_entropy(xd, gpu(target), r, c.ignore, c.smoothing, w.defined() ? gpu(w) : w);
        testing::check_cuda_close(ld, lc, dt == kFloat64 ? kFloat64 : kFloat32, "cross_entropy");
        const Tensor g = randn_dt(lc.sizes(), lc.dtype(), 73);
        lc.backward(g);
        ld.backward(gpu(g));
        testing::check_cuda_close(xd.grad(), xc.grad(), dt, "cross_entropy backward");

        // nll_loss on log-probabilities.
        const Tensor lp = log_softmax(x.to(dt == kFloat64 ? kFloat64 : kFloat32), c.shape.size() == 1 ? 0 : 1);
        Tensor lpc = lp.clone().set_requires_grad(true);
        Tensor lpd = gpu(lp).set_requires_grad(true);
        const Tensor wl = w.defined() ? w.to(lp.dtype()) : w;
        Tensor nc = nll_loss(lpc, target, r, c.ignore, wl);
        Tensor nd = nll_loss(lpd, gpu(target), r, c.ignore, wl.defined() ? gpu(wl) : wl);
        testing::check_cuda_close(nd, nc, lp.dtype(), "nll_loss");
        const Tensor gn = randn_dt(nc.sizes(), nc.dtype(), 74);
        nc.backward(gn);
        nd.backward(gpu(gn));
        testing::check_cuda_close(lpd.grad(), lpc.grad(), lp.dtype(), "nll_loss backward");
      }
    }
  }
  // Soft (probability) targets.
  const Tensor x = randn_dt({16, 7}, kFloat32, 75);
  const Tensor probs = softmax(randn_dt({16, 7}, kFloat32, 76), 1);
  testing::check_cuda_close(cross_entropy(gpu(x), gpu(probs), Reduction::Mean, -100, 0.1),
              cross_entropy(x, probs, Reduction::Mean, -100, 0.1), kFloat32, "cross_entropy soft targets");
  // Empty batch.
  const Tensor e = randn_dt({0, 5}, kFloat32, 77);
  testing::check_cuda_close(cross_entropy(gpu(e), gpu(randint(0, 5, {0})), Reduction::Sum),
              cross_entropy(e, randint(0, 5, {0}), Reduction::Sum), kFloat32, "cross_entropy empty");
  // Errors: a bad class index is found on the device without stalling the call; its loss is
  // NaN and the error (value and position) comes at the next check; devices must agree.
  const Tensor bad = tensor<int64_t>({0, 5, 1});
  Tensor bad_loss;
  CHECK(error_of([&] { bad_loss = cross_entropy(gpu(randn_dt({3, 5}, kFloat32, 78)), gpu(bad)); }).empty());
  CHECK(std::isnan(bad_loss.item<double>()));
  const std::string msg = error_of([] { report_target_checks(/*wait=*/true); });
  CHECK(msg.find("target value 5") != std::string::npos);
  CHECK(msg.find("flat position 1") != std::string::npos);
  CHECK(msg.find("out of range for 5 classes") != std::string::npos);
  CHECK(error_of([] { report_target_checks(true); }).empty());  // reported once
  const std::string dev = error_of([&] { nll_loss(gpu(randn_dt({3, 5}, kFloat32, 79)), tensor<int64_t>({0, 1, 2})); });
  CHECK(dev.find("expected all tensors on one device") != std::string::npos);
}

TEST_CASE("cuda pointwise losses match the CPU forward and backward", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats) {
    for (const IntList& s : std::vector<IntList>{{1}, {37, 11}, {4 * 1024 * 1024 + 1}, {0, 3}}) {
      const Tensor x = randn_dt(s, dt, 81, 2.0);
      manual_seed(82);
      const Tensor t = rand(s).to(dt);  // in [0, 1): a valid BCE target, and a regression target
      const DType ldt = dt == kFloat64 ? kFloat64 : kFloat32;
      for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
        for (int which = 0; which < 4; ++which) {
          const char* names[] = {"mse_loss", "l1_loss", "smooth_l1_loss", "bce_with_logits"};
          INFO(names[which] << " dtype " << dtype_name(dt) << " shape " << shape_str(s) << " reduction "
                            << static_cast<int>(r));
          auto loss = [&](const Tensor& a, const Tensor& b) {
            switch (which) {
              case 0: return mse_loss(a, b, r);
              case 1: return l1_loss(a, b, r);
              case 2: return smooth_l1_loss(a, b, r, 0.5);
              default: return binary_cross_entropy_with_logits(a, b, r);
            }
          };
          Tensor xc = x.clone().set_requires_grad(true);
          Tensor xd = gpu(x).set_requires_grad(true);
          Tensor lc = loss(xc, t), ld = loss(xd, gpu(t));
          testing::check_cuda_close(ld, lc, ldt, names[which]);
          if (x.numel() == 0) continue;
          const Tensor g = randn_dt(lc.sizes(), lc.dtype(), 83);
          lc.backward(g);
          ld.backward(gpu(g));
          testing::check_cuda_close(xd.grad(), xc.grad(), dt, std::string(names[which]) + " backward");
        }
      }
    }
  }
  // bce_with_logits with weight and pos_weight (broadcast over the batch).
  const Tensor x = randn_dt({32, 6}, kFloat32, 84);
  manual_seed(85);
  const Tensor t = rand({32, 6}), w = rand({6}) + 0.5, pw = rand({6}) + 1.0;
  testing::check_cuda_close(binary_cross_entropy_with_logits(gpu(x), gpu(t), Reduction::Mean, gpu(w), gpu(pw)),
              binary_cross_entropy_with_logits(x, t, Reduction::Mean, w, pw), kFloat32, "bce_with_logits weighted");
}

TEST_CASE("cuda layer_norm and group_norm match the CPU forward and backward", "[cuda]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : kFloats) {
    struct Ln {
      IntList shape, normalized;
    };
    for (const Ln& c : std::vector<Ln>{{{4, 10}, {10}}, {{3, 7, 33}, {33}}, {{2, 5, 6, 7}, {6, 7}}, {{64, 4097}, {4097}}}) {
      INFO("layer_norm dtype " << dtype_name(dt) << " shape " << shape_str(c.shape));
      const Tensor x = randn_dt(c.shape, dt, 91, 2.0) + 1.0;
      const Tensor w0 = randn_dt(c.normalized, dt, 92), b0 = randn_dt(c.normalized, dt, 93);
      Tensor xc = x.clone().set_requires_grad(true), wc = w0.clone().set_requires_grad(true),
             bc = b0.clone().set_requires_grad(true);
      Tensor xd = gpu(x).set_requires_grad(true), wd = gpu(w0).set_requires_grad(true),
             bd = gpu(b0).set_requires_grad(true);
      Tensor yc = layer_norm(xc, c.normalized, wc, bc), yd = layer_norm(xd, c.normalized, wd, bd);
      testing::check_cuda_close(yd, yc, dt, "layer_norm");
      const Tensor g = randn_dt(c.shape, dt, 94);
      yc.backward(g);
      yd.backward(gpu(g));
      testing::check_cuda_close(xd.grad(), xc.grad(), dt, "layer_norm grad x");
      testing::check_cuda_close(wd.grad(), wc.grad(), dt, "layer_norm grad weight");
      testing::check_cuda_close(bd.grad(), bc.grad(), dt, "layer_norm grad bias");
    }
    struct Gn {
      IntList shape;
      int64_t groups;
    };
    for (const Gn& c : std::vector<Gn>{{{2, 6, 5}, 3}, {{4, 8, 7, 9}, 2}, {{3, 12, 5, 5}, 12}, {{2, 32, 64, 64}, 8}}) {
      INFO("group_norm dtype " << dtype_name(dt) << " shape " << shape_str(c.shape) << " groups " << c.groups);
      const Tensor x = randn_dt(c.shape, dt, 95, 2.0) - 0.5;
      const Tensor w0 = randn_dt({c.shape[1]}, dt, 96), b0 = randn_dt({c.shape[1]}, dt, 97);
      Tensor xc = x.clone().set_requires_grad(true), wc = w0.clone().set_requires_grad(true),
             bc = b0.clone().set_requires_grad(true);
      Tensor xd = gpu(x).set_requires_grad(true), wd = gpu(w0).set_requires_grad(true),
             bd = gpu(b0).set_requires_grad(true);
      Tensor yc = group_norm(xc, c.groups, wc, bc), yd = group_norm(xd, c.groups, wd, bd);
      testing::check_cuda_close(yd, yc, dt, "group_norm");
      const Tensor g = randn_dt(c.shape, dt, 98);
      yc.backward(g);
      yd.backward(gpu(g));
      testing::check_cuda_close(xd.grad(), xc.grad(), dt, "group_norm grad x");
      testing::check_cuda_close(wd.grad(), wc.grad(), dt, "group_norm grad weight");
      testing::check_cuda_close(bd.grad(), bc.grad(), dt, "group_norm grad bias");
    }
  }
}
