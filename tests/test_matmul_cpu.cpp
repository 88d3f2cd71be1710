// CPU matrix products (oneDNN where built and supported, Eigen otherwise) against f64 loops: mm, bmm, linear, strides.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <tuple>
#include <vector>

#include <omp.h>

#include "autograd/engine.h"
#include "core/random.h"
#include "ops/backends.h"
#include "ops/cpu/gemm_panels.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/reduction.h"
#include "test_util.h"

using namespace mpx;

namespace {

// out[b, i, j] = sum_k a[b, i, k] * b[b, k, j] in f64 on any strides (a batch stride 0 broadcasts).
Tensor ref_bmm(const Tensor& a, const Tensor& b) {
  NoGradGuard ng;
  const Tensor a3 = a.dim() == 2 ? a.unsqueeze(0) : a, b3 = b.dim() == 2 ? b.unsqueeze(0) : b;
  const Tensor ad = a3.to(kFloat64), bd = b3.to(kFloat64);
  const int64_t B = std::max(a3.size(0), b3.size(0)), n = a3.size(1), k = a3.size(2), m = b3.size(2);
  std::vector<double> out(static_cast<size_t>(B * n * m), 0.0);
  for (int64_t z = 0; z < B; ++z)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q)
          s += ad.select(0, a3.size(0) == 1 ? 0 : z).select(0, i).select(0, q).item<double>() *
               bd.select(0, b3.size(0) == 1 ? 0 : z).select(0, q).select(0, j).item<double>();
        out[static_cast<size_t>((z * n + i) * m + j)] = s;
      }
  Tensor r = tensor(out, {B, n, m});
  return a.dim() == 2 ? r.squeeze(0) : r;
}

// f32 sums of k products near 1 land within ~k ulp; bf16 and f16 add one rounding of the result (2^-8, 2^-11).
double tol(DType dt) { return dt == kBFloat16 ? 1e-2 : dt == kFloat16 ? 2e-3 : 2e-5; }

Tensor rnd(const IntList& shape, DType dt) { return randn(shape).to(dt); }

}  // namespace

TEST_CASE("CPU mm matches f64 for row-major, transposed and sliced operands", "[linalg]") {
  INFO("CPU matrix products: " << cpu_matmul_backend());
  manual_seed(1);
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    INFO(dtype_name(dt));
    const Tensor a = rnd({37, 53}, dt), b = rnd({53, 29}, dt);
    CHECK(testing::close(mm(a, b), ref_bmm(a, b), tol(dt), 0.0, 1.0));
    CHECK(testing::close(mm(a, b.t().contiguous().t()), ref_bmm(a, b), tol(dt), 0.0, 1.0));  // column-major b
    CHECK(testing::close(mm(a.t().contiguous().t(), b), ref_bmm(a, b), tol(dt), 0.0, 1.0));  // column-major a
    const Tensor wide = rnd({37, 80}, dt);
    const Tensor sliced = wide.narrow(1, 10, 53);  // a leading dimension larger than the row
    CHECK(testing::close(mm(sliced, b), ref_bmm(sliced, b), tol(dt), 0.0, 1.0));
    const Tensor neither = rnd({53, 37}, dt).t().narrow(0, 0, 37);  // column-major view
    CHECK(testing::close(mm(neither, b), ref_bmm(neither, b), tol(dt), 0.0, 1.0));
  }
}

TEST_CASE("CPU addmm keeps alpha and beta, and bmm broadcasts a batch of one", "[linalg]") {
  manual_seed(2);
  const Tensor c = randn({6, 5}), a = randn({6, 9}), b = randn({9, 5});
  const Tensor want = c.to(kFloat64) * 0.5 + ref_bmm(a, b) * 2.0;
  CHECK(testing::close(addmm(c, a, b, 0.5, 2.0), want, 2e-5, 0.0, 1.0));
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    const Tensor x = rnd({3, 7, 11}, dt), y = rnd({1, 11, 4}, dt).expand({3, 11, 4});
    CHECK(testing::close(bmm(x, y), ref_bmm(x, y), tol(dt), 0.0, 1.0));
    const Tensor xt = rnd({3, 11, 7}, dt).transpose(1, 2);  // q @ k^T-style transposed batch operand
    CHECK(testing::close(bmm(xt, y), ref_bmm(xt, y), tol(dt), 0.0, 1.0));
    // Batched attention shapes through matmul's broadcasting.
    const Tensor q = rnd({2, 3, 5, 8}, dt), k = rnd({2, 3, 6, 8}, dt);
    const Tensor s = matmul(q, k.transpose(-2, -1));
    CHECK(testing::close(s.reshape({6, 5, 6}), ref_bmm(q.reshape({6, 5, 8}), k.reshape({6, 6, 8}).transpose(1, 2)),
                         tol(dt), 0.0, 1.0));
  }
}

TEST_CASE("CPU linear with bias and linear_relu match f64, forward and gradients", "[linalg]") {
  manual_seed(3);
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    INFO(dtype_name(dt));
    const Tensor x = rnd({4, 6, 24}, dt).set_requires_grad(true), w = rnd({10, 24}, dt).set_requires_grad(true);
    const Tensor b = rnd({10}, dt).set_requires_grad(true);
    const Tensor want = ref_bmm(x.detach().reshape({24, 24}), w.detach().t()) + b.detach().to(kFloat64);
    CHECK(testing::close(linear(x, w, b).reshape({24, 10}), want, tol(dt), 0.0, 1.0));
    CHECK(testing::close(linear_relu(x, w, b).reshape({24, 10}), relu(want), tol(dt), 0.0, 1.0));
    Tensor g = rnd({4, 6, 10}, dt);
    sum(linear(x, w, b) * g).backward();
    const Tensor g2 = g.reshape({24, 10});
    CHECK(testing::close(x.grad().reshape({24, 24}), ref_bmm(g2, w.detach()), tol(dt), 0.0, 1.0));
    CHECK(testing::close(w.grad(), ref_bmm(g2.t(), x.detach().reshape({24, 24})), tol(dt), 0.0, 1.0));
    CHECK(testing::close(b.grad(), sum(g2.to(kFloat64), {0}), tol(dt), 0.0, 1.0));
  }
}

TEST_CASE("CPU f16 and bf16 products of one to four rows (a token at a time) match f64", "[linalg]") {
  manual_seed(4);
  // The f64 product (Eigen on f64, a path of its own) as the reference: the loops of ref_bmm would take seconds here.
  const auto ref = [](const Tensor& x, const Tensor& y) { return mm(x.to(kFloat64), y.to(kFloat64)); };
  for (DType dt : {kBFloat16, kFloat16}) {
    const double t = dt == kBFloat16 ? 1e-2 : 2e-3;
    for (int64_t M : {1, 2, 3, 4, 5}) {  // 5: the general path
      INFO(dtype_name(dt) << " M " << M);
      const Tensor a = rnd({M, 70}, dt), w = rnd({600, 70}, dt), b = rnd({70, 600}, dt), bias = rnd({600}, dt);
      CHECK(testing::close(mm(a, w.t()), ref(a, w.t()), t, 0.0, 1.0));        // linear's w^T: dot products
      CHECK(testing::close(mm(a, b), ref(a, b), t, 0.0, 1.0));                // row-major: scaled rows
      const Tensor wide = rnd({600, 90}, dt).narrow(1, 5, 70);                     // w's rows 90 apart
      CHECK(testing::close(mm(a, wide.t()), ref(a, wide.t()), t, 0.0, 1.0));
      const Tensor at = rnd({70, M}, dt).t();                                      // a transposed
      CHECK(testing::close(mm(at, b), ref(at, b), t, 0.0, 1.0));
      const Tensor want = ref(a, w.t()) + bias.to(kFloat64);
      CHECK(testing::close(linear(a, w, bias), want, t, 0.0, 1.0));
      CHECK(testing::close(linear_relu(a, w, bias), relu(want), t, 0.0, 1.0));
      const Tensor c = rnd({M, 600}, dt);
      CHECK(testing::close(addmm(c, a, b, 0.5, 2.0), c.to(kFloat64) * 0.5 + ref(a, b) * 2.0, t, 0.0, 1.0));
    }
  }
}

TEST_CASE("CPU linear_gelu: the GELU epilogue in inference equals gelu(linear), and the recorded path its gradients",
          "[linalg]") {
  manual_seed(6);
  for (DType dt : {kFloat32, kBFloat16, kFloat16})
    for (const char* approx : {"tanh", "none"})
      for (int64_t rows : {2, 37}) {  // 2: the few-row kernel (f16/bf16); 37: oneDNN's post-op (f32/bf16)
        INFO(dtype_name(dt) << " " << approx << " rows " << rows);
        const Tensor x = rnd({rows, 40}, dt), w = rnd({30, 40}, dt), b = rnd({30}, dt);
        const Tensor want = gelu(linear(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64)), approx);
        Tensor fused;
        {
          NoGradGuard ng;
          fused = linear_gelu(x, w, b, approx);
        }
        CHECK(fused.dtype() == dt);
        CHECK(testing::close(fused, want, dt == kFloat32 ? 2e-5 : 2e-2, 1e-3, 1.0));
        // 3-d input keeps its leading dims.
        NoGradGuard ng;
        CHECK(linear_gelu(x.unsqueeze(0), w, b, approx).sizes() == IntList{1, rows, 30});
      }
  // With gradients the pre-activation is kept: the same values and gradients as gelu(linear(...)).
  const Tensor x = randn({5, 8}).set_requires_grad(true), w = randn({6, 8}).set_requires_grad(true);
  const Tensor b = randn({6}).set_requires_grad(true);
  const Tensor y = linear_gelu(x, w, b, "tanh");
  const Tensor z = gelu(linear(x, w, b), "tanh");
  CHECK(max(abs(y - z)).item<double>() == 0.0);
  const tensor_list g1 = autograd::grad({sum(y * y)}, {x, w, b}), g2 = autograd::grad({sum(z * z)}, {x, w, b});
  for (size_t i = 0; i < 3; ++i) CHECK(max(abs(g1[i] - g2[i])).item<double>() == 0.0);
  CHECK_THROWS_WITH(linear_gelu(x, w, b, "fast"), Catch::Contains("\"none\" or \"tanh\""));
}

TEST_CASE("CPU f32 products whose right operand's rows lie 4 KiB apart (packed for oneDNN) match f64",
          "[linalg]") {
  // Row strides of 1,024 and 3,072 floats: plain, the right operand of a transposed-left product, a sliced view
  // narrower than its stride, and linear's backward (dX = dY W with W [out, in]).
  manual_seed(17);
  auto check = [](const Tensor& a, const Tensor& b) {
    INFO("a " << shape_str(a.sizes()) << " strides " << shape_str(a.strides()) << ", b " << shape_str(b.sizes())
              << " strides " << shape_str(b.strides()));
    CHECK(testing::close(mm(a, b), mm(a.to(kFloat64), b.to(kFloat64)), tol(kFloat32), 0.0, 1.0));
  };
  check(randn({24, 40}), randn({40, 1024}));
  check(randn({40, 24}).t(), randn({40, 3072}));
  check(randn({24, 40}), randn({40, 1024}).narrow(1, 0, 1000));
  Tensor x = randn({24, 1024}).set_requires_grad(true), w = randn({1024, 1024}).set_requires_grad(true);
  Tensor y = linear(x, w, Tensor());
  sum(y * y).backward();
  const Tensor gy = 2.0 * mm(x.detach().to(kFloat64), w.detach().to(kFloat64).t());
  CHECK(testing::close(x.grad(), mm(gy, w.detach().to(kFloat64)), 1e-4, 0.0, 1.0));
}

TEST_CASE("CPU mm_packed: one plan packs the right operand for many products of shrinking row counts, and "
          "declines another right operand", "[linalg]") {
  // A recurrent layer's use: h [16, 64] against w_hh^T (a transposed [256, 64] weight), adding to out; a packed
  // sequence's later steps have fewer rows.
  manual_seed(23);
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    INFO(dtype_name(dt));
    NoGradGuard ng;
    const Tensor w = rnd({256, 64}, dt), b = w.t();
    auto k = dispatch::kernel<OpId::mm_packed>(Device::cpu(), dt);
    std::shared_ptr<void> plan;
    for (int64_t rows : {16, 16, 11, 3, 16, 1}) {
      INFO(rows << " rows");
      const Tensor a = rnd({rows, 64}, dt), c = rnd({rows, 256}, dt);
      Tensor out = c.clone();
      if (!k(out, a, b, 1.0, plan)) {
        // bf16/f16 with neither native oneDNN kernels nor the AVX2 panels: rnn_layer runs mm instead.
        if (dt == kFloat32) testing::skip_test("mm_packed declines f32 here (no oneDNN and no AVX2 panels)");
        break;
      }
      CHECK(plan != nullptr);
      CHECK(testing::close(out, mm(a.to(kFloat64), b.to(kFloat64)) + c.to(kFloat64), tol(dt), 0.0, 1.0));
    }
    // Another right operand is not the plan's: nothing written, declined.
    if (plan) {
      const Tensor a = rnd({16, 64}, dt), out = zeros({16, 256}, TensorOptions(dt));
      CHECK_FALSE(k(out, a, rnd({64, 256}, dt), 1.0, plan));
      CHECK(max(abs(out.to(kFloat32))).item<double>() == 0.0);
    }
  }
}

TEST_CASE("CPU panel products (AVX2): row blocks, panel and chunk edges, strides, beta, bf16/f16 rounding, threads", "[linalg]") {
  // Called directly, so every x86 machine checks the kernel, not only those where mm_packed prefers it.
  manual_seed(29);
  NoGradGuard ng;
  struct Case {
    int64_t m, k, n;
  };
  // Rows in blocks of 1-6, columns ending inside a 16-column panel, k inside and across a 512-row chunk.
  for (const Case c : {Case{16, 512, 2048}, Case{1, 5, 7}, Case{4, 513, 300}, Case{13, 1100, 33}, Case{7, 64, 16},
                       Case{64, 40, 17}, Case{17, 1, 1}, Case{1, 600, 40}}) {
    INFO("m " << c.m << " k " << c.k << " n " << c.n);
    const Tensor w = randn({c.n, c.k});
    // b as a weight's transpose (a recurrent layer's w_hh^T), row-major, and a column slice of a wider matrix.
    for (const Tensor& b : {w.t(), randn({c.k, c.n}), randn({c.k, c.n + 5}).narrow(1, 3, c.n)}) {
      std::shared_ptr<void> plan;
      for (const Tensor& a : {randn({c.m, c.k}), randn({c.k, c.m}).t(), randn({c.m + 2, c.k + 3}).narrow(0, 1, c.m).narrow(1, 1, c.k)}) {
        for (double beta : {0.0, 1.0, 0.5}) {
          INFO("a strides " << shape_str(a.strides()) << ", b strides " << shape_str(b.strides()) << ", beta " << beta);
          const Tensor c0 = randn({c.m, c.n});
          // beta 0: out's old values are never read, NaN included.
          Tensor out = beta == 0.0 ? full({c.m, c.n}, std::nan("")) : c0.clone();
          if (!cpu::panels::matmul_packed(out, a, b, beta, plan)) {
            testing::skip_test("the panel kernels are built for AVX2/FMA only");
            return;
          }
          const Tensor ref = mm(a.to(kFloat64), b.to(kFloat64)) + beta * c0.to(kFloat64);
          CHECK(testing::close(out, ref, 2e-5, 0.0, 1.0));
        }
      }
    }
  }
  // bf16 and f16: b widened into the plan, a and out widened per call, f32 sums rounded once: the f32 product of the
  // widened operands, rounded, bit for bit.
  for (DType dt : {kBFloat16, kFloat16}) {
    INFO(dtype_name(dt));
    const Tensor a = randn({16, 600}).to(dt), b = randn({300, 600}).to(dt).t(), c0 = randn({16, 300}).to(dt);
    for (double beta : {0.0, 1.0}) {
      std::shared_ptr<void> plan, plan32;
      Tensor out = c0.clone(), ref = c0.to(kFloat32);
      if (!cpu::panels::matmul_packed(out, a, b, beta, plan)) break;
      REQUIRE(cpu::panels::matmul_packed(ref, a.to(kFloat32), b.to(kFloat32), beta, plan32));
      CHECK(testing::same_values(out, ref.to(dt)));
      // A plan packed from bf16 is not an f16 plan, nor the f32 one.
      CHECK_FALSE(cpu::panels::matmul_packed(out, a.to(kFloat32), b, beta, plan));
    }
  }
  // The same bits on one and on three threads: each output is one thread's, summed in one order.
  const Tensor a = randn({16, 700}), b = randn({700, 900});
  const int saved = omp_get_max_threads();
  Tensor one = empty({16, 900}), three = empty({16, 900});
  std::shared_ptr<void> plan;
  omp_set_num_threads(1);
  const bool ran = cpu::panels::matmul_packed(one, a, b, 0.0, plan);
  omp_set_num_threads(3);
  cpu::panels::matmul_packed(three, a, b, 0.0, plan);
  omp_set_num_threads(saved);
  if (ran) CHECK(std::memcmp(one.raw_data(), three.raw_data(), sizeof(float) * 16 * 900) == 0);
  // Not the plan's operand, another dtype, an empty product: declined, nothing written.
  if (ran) {
    Tensor out = zeros({16, 900});
    CHECK_FALSE(cpu::panels::matmul_packed(out, a, b.clone(), 0.0, plan));
    std::shared_ptr<void> fresh;
    CHECK_FALSE(cpu::panels::matmul_packed(out, a.to(kFloat64), b.to(kFloat64), 0.0, fresh));
    CHECK_FALSE(cpu::panels::matmul_packed(out.narrow(1, 0, 0), a, b.narrow(1, 0, 0), 0.0, fresh));
    CHECK(fresh == nullptr);
    CHECK(max(abs(out)).item<double>() == 0.0);
  }
}

TEST_CASE("CPU panel GEMM (AVX2): macro blocks, chunks of k, strides, alpha and beta, threads", "[linalg]") {
  manual_seed(31);
  NoGradGuard ng;
  struct Case {
    int64_t m, k, n;
  };
  // Macro blocks of a few rows and of many (300 rows on 1-3 threads), k across 256-row chunks, ragged panels.
  for (const Case c : {Case{300, 700, 300}, Case{1, 1, 1}, Case{7, 256, 16}, Case{130, 257, 17}, Case{13, 5, 33}}) {
    INFO("m " << c.m << " k " << c.k << " n " << c.n);
    // a as a weight gradient reads it (g^T), row-major, a slice; b row-major and transposed.
    for (const Tensor& a : {randn({c.k, c.m}).t(), randn({c.m, c.k}),
                            randn({c.m + 1, c.k + 2}).narrow(0, 1, c.m).narrow(1, 2, c.k)}) {
      for (const Tensor& b : {randn({c.k, c.n}), randn({c.n, c.k}).t()}) {
        for (const auto& [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 1.0}, std::pair{1.0, -2.0}}) {
          INFO("a strides " << shape_str(a.strides()) << ", b strides " << shape_str(b.strides()) << ", alpha "
                            << alpha << ", beta " << beta);
          const Tensor c0 = randn({c.m, c.n});
          Tensor out = beta == 0.0 ? full({c.m, c.n}, std::nan("")) : c0.clone();
          if (!cpu::panels::matmul(out, a, b, alpha, beta)) {
            testing::skip_test("the panel kernels are built for AVX2/FMA only");
            return;
          }
          const Tensor ref = alpha * mm(a.to(kFloat64), b.to(kFloat64)) + beta * c0.to(kFloat64);
          CHECK(testing::close(out, ref, 2e-5, 0.0, 1.0));
          // bf16/f16: the f32 product of the widened operands, rounded once.
          for (DType dt : {kBFloat16, kFloat16}) {
            INFO(dtype_name(dt));
            const Tensor al = a.to(dt), bl = b.to(dt), cl = c0.to(dt);
            Tensor lo = cl.clone(), wide = cl.to(kFloat32);
            REQUIRE(cpu::panels::matmul(lo, al, bl, alpha, beta));
            REQUIRE(cpu::panels::matmul(wide, al.to(kFloat32), bl.to(kFloat32), alpha, beta));
            CHECK(testing::same_values(lo, wide.to(dt)));
          }
        }
      }
    }
  }
  // The same bits on one and on three threads.
  const Tensor a = randn({900, 250}).t(), b = randn({900, 400});
  const int saved = omp_get_max_threads();
  Tensor one = empty({250, 400}), three = empty({250, 400});
  omp_set_num_threads(1);
  const bool ran = cpu::panels::matmul(one, a, b, 1.0, 0.0);
  omp_set_num_threads(3);
  cpu::panels::matmul(three, a, b, 1.0, 0.0);
  omp_set_num_threads(saved);
  if (ran) CHECK(std::memcmp(one.raw_data(), three.raw_data(), sizeof(float) * 250 * 400) == 0);
  Tensor out = zeros({4, 4});
  CHECK_FALSE(cpu::panels::matmul(out, randn({4, 3}).to(kFloat64), randn({3, 4}).to(kFloat64), 1.0, 0.0));
  CHECK_FALSE(cpu::panels::matmul(out.narrow(1, 0, 0), randn({4, 3}), randn({3, 0}), 1.0, 0.0));
  CHECK(max(abs(out)).item<double>() == 0.0);
}

TEST_CASE("CPU weight gradients in the shapes routed to the panels (g^T x) match f64, as mm and through linear",
          "[linalg]") {
  // 1,030 and 2,000 rows against 200 and 64 columns: where AVX2 builds leave oneDNN.
  manual_seed(37);
  for (const auto& [rows, in, out] : {std::tuple{int64_t{40}, int64_t{200}, int64_t{1030}},
                                      std::tuple{int64_t{70}, int64_t{64}, int64_t{2000}}}) {
    INFO(rows << " rows, linear " << in << " -> " << out);
    const Tensor g = randn({rows, out}), x = randn({rows, in});
    for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
      INFO(dtype_name(dt));
      const Tensor gl = g.to(dt), xl = x.to(dt);
      CHECK(testing::close(mm(gl.t(), xl), mm(gl.t().to(kFloat64), xl.to(kFloat64)), tol(dt), 0.0, 1.0));
    }
    // Without a bias (mm) and with one (the weight and bias gradients from one fused call).
    for (bool with_bias : {false, true}) {
      Tensor w = randn({out, in}).set_requires_grad(true), b = randn({out}).set_requires_grad(with_bias);
      const Tensor y = linear(x, w, with_bias ? b : Tensor());
      y.backward(g);
      CHECK(testing::close(w.grad(), mm(g.t().to(kFloat64), x.to(kFloat64)), tol(kFloat32), 0.0, 1.0));
      if (with_bias) CHECK(testing::close(b.grad(), sum(g.to(kFloat64), {0}), tol(kFloat32), 0.0, 1.0));
    }
  }
}

TEST_CASE("CPU matrix products of empty and one-element shapes", "[linalg]") {
  const Tensor a = zeros({3, 0}), b = zeros({0, 4});
  const Tensor z = mm(a, b);
  CHECK(z.sizes() == IntList{3, 4});
  CHECK(sum(abs(z)).item<double>() == 0.0);
  CHECK(mm(zeros({0, 5}), zeros({5, 2})).sizes() == IntList{0, 2});
  const Tensor one = mm(full({1, 1}, 3.0), full({1, 1}, -2.0));
  CHECK(one.item<double>() == -6.0);
}
