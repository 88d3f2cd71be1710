// Tests for the cuBLASLt GEMMs (mm, bmm, addmm, matmul, linear, linear_relu) against the CPU, and CPU gradchecks of the fused forms.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gradcheck.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "test_util.h"

using namespace mpx;
using testing::cuda_ready;
using testing::error_of;
using testing::gradcheck;
using testing::gradgradcheck;
using testing::leaf;
using testing::rel_err;

namespace {

const std::vector<DType> kGemmTypes = {kFloat32, kFloat16, kBFloat16, kFloat64};

Tensor rnd(const IntList& shape, DType dt) { return randn(shape).to(dt); }
// Note: a copy to the device is dense, so device views (transposes, slices) are taken after it.
Tensor dev(const Tensor& t) { return t.to(Device::cuda()); }

// The bound for comparing a device GEMM with the CPU's. Both sides accumulate in f32 (f64) and
// round once, so f16/bf16 results differ only where summation order moves a value across a
// rounding boundary: the per-dtype bounds hold. With TF32 the inputs lose 13 mantissa bits.
double tol(DType dt) { return dt == kFloat32 && cuda::tf32_allowed() ? 5e-3 : testing::cuda_tolerance(dt); }

void expect_close(const Tensor& got, const Tensor& ref, const std::string& what) {
  INFO(what << " (" << dtype_name(ref.dtype()) << " " << shape_str(ref.sizes()) << ")");
  REQUIRE(got.device().is_cuda());
  REQUIRE(got.dtype() == ref.dtype());
  const double e = rel_err(got, ref);
  INFO("rel err " << e << ", bound " << tol(ref.dtype()));
  CHECK(e < tol(ref.dtype()));
}

// Restores the TF32 switch however a test section ends.
struct Tf32Guard {
  bool prev = cuda::tf32_allowed();
  explicit Tf32Guard(bool on) { cuda::allow_tf32(on); }
  ~Tf32Guard() { cuda::allow_tf32(prev); }
};

struct Mnk {
  int64_t n, k, m;
};
// Square, odd, k not a multiple of 8, tiny.
const std::vector<Mnk> kShapes = {{256, 256, 256}, {127, 33, 65}, {40, 13, 24}, {1, 1, 1}};

// Every operand layout mm accepts without a copy, plus two that need one or an odd pointer.
void check_mm_layouts(DType dt, const Mnk& s) {
  const int64_t n = s.n, k = s.k, m = s.m;
  Tensor a = dev(rnd({n, k}, dt)), b = dev(rnd({k, m}, dt));
  Tensor at = dev(rnd({k, n}, dt)).t(), bt = dev(rnd({m, k}, dt)).t();  // column-major operands
  expect_close(mm(a, b), mm(a.cpu(), b.cpu()), "mm");
  expect_close(mm(at, b), mm(at.cpu(), b.cpu()), "mm a.t()");
  expect_close(mm(a, bt), mm(a.cpu(), bt.cpu()), "mm b.t()");
  expect_close(mm(at, bt), mm(at.cpu(), bt.cpu()), "mm a.t() b.t()");
  // Offset by one element: a 2- or 4-byte aligned pointer and an odd leading dimension.
  Tensor ab = dev(rnd({n, k + 1}, dt)).narrow(1, 1, k), bb = dev(rnd({k, m + 1}, dt)).narrow(1, 1, m);
  expect_close(mm(ab, bb), mm(ab.cpu(), bb.cpu()), "mm odd pointers");
  // Every other column: dense in neither direction, copied before the GEMM.
  Tensor as = dev(rnd({n, 2 * k}, dt)).slice(1, 0, 2 * k, 2);
  expect_close(mm(as, b), mm(as.cpu(), b.cpu()), "mm strided a");
}

}  // namespace

TEST_CASE("cuda mm matches the CPU in every dtype and layout", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  Tf32Guard off(false);
  manual_seed(1);
  for (DType dt : kGemmTypes)
    for (const auto& s : kShapes) {
      INFO(dtype_name(dt) << " n=" << s.n << " k=" << s.k << " m=" << s.m);
      check_mm_layouts(dt, s);
    }
}

TEST_CASE("cuda f32 mm with TF32 Tensor Cores", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  Tf32Guard on(true);
  manual_seed(2);
  for (const auto& s : kShapes) {
    INFO("n=" << s.n << " k=" << s.k << " m=" << s.m);
    check_mm_layouts(kFloat32, s);
  }
  // A larger product, where TF32 and full f32 genuinely differ.
  Tensor a = rnd({512, 1024}, kFloat32), b = rnd({1024, 384}, kFloat32);
  expect_close(mm(dev(a), dev(b)), mm(a, b), "mm tf32 512x1024x384");
}

TEST_CASE("cuda addmm and matmul match the CPU", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  Tf32Guard off(false);
  manual_seed(3);
  for (DType dt : kGemmTypes) {
    INFO(dtype_name(dt));
    Tensor a = rnd({127, 33}, dt), b = rnd({33, 65}, dt);
    Tensor row = rnd({65}, dt), full = rnd({127, 65}, dt), col = rnd({127, 1}, dt);
    // A bias row with beta = alpha = 1 takes the fused epilogue; the rest the plain GEMM.
    expect_close(addmm(dev(row), dev(a), dev(b)), addmm(row, a, b), "addmm row");
    expect_close(addmm(dev(full), dev(a), dev(b), 0.5, -2.0), addmm(full, a, b, 0.5, -2.0), "addmm full");
    expect_close(addmm(dev(col), dev(a), dev(b), 1.0, 3.0), addmm(col, a, b, 1.0, 3.0), "addmm column");
    expect_close(addmm(dev(full), dev(a), dev(b), 0.0, 1.0), addmm(full, a, b, 0.0, 1.0), "addmm beta 0");
    expect_close(addmm(dev(row), dev(a.t().contiguous()).t(), dev(b.t().contiguous()).t()), addmm(row, a, b),
                 "addmm transposed");

    // matmul: vector forms, a folded batch, broadcast batch dims, a stride-0 batch operand.
    Tensor v = rnd({33}, dt), x3 = rnd({3, 127, 33}, dt);
    expect_close(matmul(dev(a), dev(v)), matmul(a, v), "matmul matrix @ vector");
    expect_close(matmul(dev(x3), dev(b)), matmul(x3, b), "matmul batch @ matrix");
    Tensor p = rnd({2, 1, 31, 20}, dt), q = rnd({3, 20, 9}, dt);
    expect_close(matmul(dev(p), dev(q)), matmul(p, q), "matmul broadcast batch");
    Tensor r = rnd({4, 20, 9}, dt), s = rnd({31, 20}, dt);
    expect_close(matmul(dev(s), dev(r)), matmul(s, r), "matmul matrix @ batch");
    expect_close(matmul(dev(p), dev(r.transpose(1, 2).contiguous()).transpose(1, 2)), matmul(p, r),
                 "matmul transposed batch");
  }
}

TEST_CASE("cuda bmm is one strided-batched GEMM that matches the CPU", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  Tf32Guard off(false);
  manual_seed(4);
  for (DType dt : kGemmTypes) {
    INFO(dtype_name(dt));
    Tensor a = rnd({5, 33, 17}, dt), b = rnd({5, 17, 29}, dt);
    Tensor at = dev(rnd({5, 17, 33}, dt)).transpose(1, 2), bt = dev(rnd({5, 29, 17}, dt)).transpose(1, 2);
    expect_close(bmm(dev(a), dev(b)), bmm(a, b), "bmm");
    expect_close(bmm(at, bt), bmm(at.cpu(), bt.cpu()), "bmm transposed");
    Tensor b1 = rnd({1, 17, 29}, dt);  // one matrix for every batch element: batch stride 0
    expect_close(bmm(dev(a), dev(b1).expand({5, 17, 29})), bmm(a, b1.expand({5, 17, 29})), "bmm broadcast b");
    // Batch elements that are not adjacent (every other one of a larger batch).
    Tensor a2 = dev(rnd({10, 33, 17}, dt)).slice(0, 0, 10, 2);
    expect_close(bmm(a2, dev(b)), bmm(a2.cpu(), b), "bmm batch stride");
    Tensor big = rnd({6, 64, 64}, dt), big2 = rnd({6, 64, 64}, dt);
    expect_close(bmm(dev(big), dev(big2)), bmm(big, big2), "bmm 6x64^3");
    // The batched kernel with alpha and beta, which bmm itself does not use.
    Tensor out = rnd({5, 33, 29}, dt), dout = dev(out);
    dispatch::kernel<kernels::BmmFn>(OpId::bmm, Device::cpu(), dt)(out, a, b, 0.5, 2.0);
    dispatch::kernel<kernels::BmmFn>(OpId::bmm, Device::cuda(), dt)(dout, dev(a), dev(b), 0.5, 2.0);
    expect_close(dout, out, "bmm kernel alpha beta");
  }
}

TEST_CASE("cuda GEMMs of empty and tiny shapes", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  manual_seed(5);
  for (DType dt : kGemmTypes) {
    INFO(dtype_name(dt));
    // k = 0: zeros, or beta * self.
    Tensor a0 = rnd({7, 0}, dt), b0 = rnd({0, 5}, dt), c = rnd({7, 5}, dt);
    Tensor z = mm(dev(a0), dev(b0));
    CHECK(z.sizes() == IntList{7, 5});
    expect_close(z, zeros({7, 5}, dt), "mm k=0");
    expect_close(addmm(dev(c), dev(a0), dev(b0), 0.5, 1.0), addmm(c, a0, b0, 0.5, 1.0), "addmm k=0");
    expect_close(bmm(dev(rnd({3, 7, 0}, dt)), dev(rnd({3, 0, 5}, dt))), zeros({3, 7, 5}, dt), "bmm k=0");
    // n = 0, m = 0, B = 0: empty results of the right shape.
    CHECK(mm(dev(rnd({0, 4}, dt)), dev(rnd({4, 5}, dt))).sizes() == IntList{0, 5});
    CHECK(mm(dev(rnd({3, 4}, dt)), dev(rnd({4, 0}, dt))).sizes() == IntList{3, 0});
    CHECK(bmm(dev(rnd({0, 3, 4}, dt)), dev(rnd({0, 4, 5}, dt))).sizes() == IntList{0, 3, 5});
    // linear with no inputs features: the bias in every row; with no rows: empty.
    Tensor w0 = rnd({6, 0}, dt), bias = rnd({6}, dt);
    expect_close(linear(dev(rnd({4, 0}, dt)), dev(w0), dev(bias)), linear(rnd({4, 0}, dt), w0, bias), "linear in=0");
    expect_close(linear_relu(dev(rnd({4, 0}, dt)), dev(w0), dev(bias)), linear_relu(rnd({4, 0}, dt), w0, bias),
                 "linear_relu in=0");
    CHECK(linear(dev(rnd({0, 3}, dt)), dev(rnd({6, 3}, dt)), dev(bias)).sizes() == IntList{0, 6});
    // One row: the bias expanded to [1, m] is a contiguous view of itself and must not be overwritten.
    Tensor x1 = rnd({1, 3}, dt), w1 = rnd({4, 3}, dt), b1 = dev(rnd({4}, dt));
    const Tensor b1_before = b1.cpu();
    expect_close(linear(dev(x1), dev(w1), b1), linear(x1, w1, b1_before), "linear one row");
    expect_close(addmm(b1, dev(x1), dev(w1).t(), 0.5, 1.0), addmm(b1_before, x1, w1.t(), 0.5, 1.0), "addmm one row");
    CHECK(testing::max_abs_diff(b1.cpu(), b1_before) == 0.0);
    // 1 x 1 x 1.
    Tensor one_a = rnd({1, 1}, dt), one_b = rnd({1, 1}, dt), one_c = rnd({1}, dt);
    expect_close(mm(dev(one_a), dev(one_b)), mm(one_a, one_b), "mm 1x1x1");
    expect_close(linear_relu(dev(one_a), dev(one_b), dev(one_c)), linear_relu(one_a, one_b, one_c), "linear_relu 1x1x1");
  }
}

TEST_CASE("cuda linear and linear_relu forwards match the CPU", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  Tf32Guard off(false);
  manual_seed(6);
  for (DType dt : kGemmTypes) {
    INFO(dtype_name(dt));
    Tensor x = rnd({37, 50}, dt), w = rnd({23, 50}, dt), b = rnd({23}, dt), x3 = rnd({4, 9, 50}, dt);
    expect_close(linear(dev(x), dev(w), dev(b)), linear(x, w, b), "linear");
    expect_close(linear(dev(x), dev(w)), linear(x, w), "linear without bias");
    expect_close(linear(dev(x3), dev(w), dev(b)), linear(x3, w, b), "linear 3-d input");
    expect_close(linear_relu(dev(x), dev(w), dev(b)), linear_relu(x, w, b), "linear_relu");
    expect_close(linear_relu(dev(x3), dev(w), dev(b)), linear_relu(x3, w, b), "linear_relu 3-d input");
    expect_close(linear_relu(dev(x.t().contiguous()).t(), dev(w.t().contiguous()).t(), dev(b)), linear_relu(x, w, b),
                 "linear_relu column-major operands");
    Tensor y = linear_relu(dev(x), dev(w), dev(b)).cpu().to(kFloat64);
    CHECK(min(y).item<double>() >= 0.0);
  }
}

TEST_CASE("cuda fused epilogues are available for the Tensor Core dtypes", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  Tf32Guard off(false);
  manual_seed(7);
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    auto k = dispatch::kernel<kernels::GemmEpilogueFn>(OpId::linear, Device::cuda(), dt);
    Tensor a = rnd({64, 40}, dt), b = rnd({40, 48}, dt), bias = rnd({48}, dt);
    Tensor out = dev(zeros({64, 48}, dt));
    REQUIRE(k(out, dev(a), dev(b), dev(bias), kernels::GemmEpilogue::kBias));
    expect_close(out, addmm(bias, a, b), "bias epilogue");
    REQUIRE(k(out, dev(a), dev(b), dev(bias), kernels::GemmEpilogue::kBiasRelu));
    expect_close(out, relu(addmm(bias, a, b)), "bias+relu epilogue");
    // The weight-gradient shape of linear's backward: g^T [out, N] @ x [N, in].
    Tensor g = rnd({40, 64}, dt), x = rnd({40, 48}, dt);
    Tensor gw = dev(zeros({64, 48}, dt)), gb = dev(zeros({64}, dt));
    if (k(gw, dev(g).t(), dev(x), gb, kernels::GemmEpilogue::kBiasGrad)) {
      expect_close(gw, mm(g.t(), x), "bgradb product");
      expect_close(gb, sum(g, {0}), "bgradb bias gradient");
    } else {
      WARN("cuBLASLt has no BGRADB algorithm for " << dtype_name(dt) << ": linear's bias gradient is a separate sum");
    }
  }
}

TEST_CASE("cuda linear, linear_relu and matmul backward match the CPU", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  Tf32Guard off(false);
  manual_seed(8);
  for (DType dt : kGemmTypes) {
    INFO(dtype_name(dt));
    auto leaf_of = [](const Tensor& t) { return t.detach().set_requires_grad(true); };
    Tensor x = rnd({37, 50}, dt), w = rnd({23, 50}, dt), b = rnd({23}, dt), gy = rnd({37, 23}, dt);
    for (int relu_on = 0; relu_on < 2; ++relu_on) {
      INFO((relu_on ? "linear_relu" : "linear"));
      Tensor cx = leaf_of(x.clone()), cw = leaf_of(w.clone()), cb = leaf_of(b.clone());
      Tensor dx = leaf_of(dev(x)), dw = leaf_of(dev(w)), db = leaf_of(dev(b));
      Tensor cy = relu_on ? linear_relu(cx, cw, cb) : linear(cx, cw, cb);
      Tensor dy = relu_on ? linear_relu(dx, dw, db) : linear(dx, dw, db);
      cy.backward(gy);
      dy.backward(dev(gy));
      expect_close(dx.grad(), cx.grad(), "grad x");
      expect_close(dw.grad(), cw.grad(), "grad w");
      expect_close(db.grad(), cb.grad(), "grad b");
    }
    // Weight and bias only (a frozen input), 3-d input.
    Tensor x3 = rnd({4, 9, 50}, dt), gy3 = rnd({4, 9, 23}, dt);
    Tensor cw = leaf_of(w.clone()), cb = leaf_of(b.clone()), dw = leaf_of(dev(w)), db = leaf_of(dev(b));
    linear(x3, cw, cb).backward(gy3);
    linear(dev(x3), dw, db).backward(dev(gy3));
    expect_close(dw.grad(), cw.grad(), "grad w (3-d input)");
    expect_close(db.grad(), cb.grad(), "grad b (3-d input)");
    // matmul with broadcast batch dims.
    Tensor p = rnd({2, 1, 31, 20}, dt), q = rnd({3, 20, 9}, dt), gz = rnd({2, 3, 31, 9}, dt);
    Tensor cp = leaf_of(p.clone()), cq = leaf_of(q.clone()), dp = leaf_of(dev(p)), dq = leaf_of(dev(q));
    matmul(cp, cq).backward(gz);
    matmul(dp, dq).backward(dev(gz));
    expect_close(dp.grad(), cp.grad(), "matmul grad a");
    expect_close(dq.grad(), cq.grad(), "matmul grad b");
  }
}

TEST_CASE("cuda GEMM errors name the op and operands", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  Tensor a = dev(ones({3, 4})), b = dev(ones({4, 5}, kFloat16));
  CHECK_THAT(error_of([&] { mm(a, b); }), Catch::Contains("mm") && Catch::Contains("f16"));
  CHECK_THAT(error_of([&] { linear_relu(a, dev(ones({5, 3})), dev(ones({5}))); }), Catch::Contains("linear_relu"));
  CHECK_THAT(error_of([&] { mm(a, ones({4, 5})); }), Catch::Contains("mm"));
}

// ---- CPU: the new forward/backward forms, checked by finite differences in f64 ----

TEST_CASE("linear, linear_relu and bmm gradients on the CPU", "[linalg][gradcheck]") {
  manual_seed(9);
  using testing::Fn;
  auto both = [](const Fn& f, const tensor_list& in) {
    CHECK(gradcheck(f, in) == "");
    Fn sq = [f](const tensor_list& x) {
      Tensor y = f(x);
      return y * y;
    };
    CHECK(gradgradcheck(sq, in) == "");
  };
  Tensor x = leaf({5, 4}), w = leaf({3, 4}), b = leaf({3});
  both([](const tensor_list& i) { return linear(i[0], i[1], i[2]); }, {x, w, b});
  both([](const tensor_list& i) { return linear(i[0], i[1]); }, {leaf({2, 5, 4}), w});
  both([](const tensor_list& i) { return linear(i[0], i[1], i[2]); }, {leaf({2, 5, 4}), w, b});
  both([](const tensor_list& i) { return linear(i[0].t(), i[1], i[2]); }, {leaf({4, 5}), w, b});
  // Random pre-activations are never within the finite-difference step of relu's kink.
  Tensor xr = leaf({6, 4}), wr = leaf({3, 4}), br = leaf({3});
  both([](const tensor_list& i) { return linear_relu(i[0], i[1], i[2]); }, {xr, wr, br});
  both([](const tensor_list& i) { return linear_relu(i[0].reshape({2, 3, 4}), i[1], i[2]); }, {xr, wr, br});
  // Only some inputs need gradients.
  Tensor xc = leaf({5, 4}).detach();
  CHECK(gradcheck([](const tensor_list& i) { return linear_relu(i[0], i[1], i[2]); }, {xc, w, b}) == "");
  CHECK(gradcheck([](const tensor_list& i) { return linear(i[0], i[1], i[2]); }, {x, w.detach(), b}) == "");
  // bmm through the batched kernel, with transposed and broadcast operands.
  both([](const tensor_list& i) { return bmm(i[0], i[1]); }, {leaf({3, 2, 4}), leaf({3, 4, 5})});
  both([](const tensor_list& i) { return bmm(i[0].transpose(1, 2), i[1]); }, {leaf({3, 4, 2}), leaf({3, 4, 5})});
  both([](const tensor_list& i) { return matmul(i[0], i[1]); }, {leaf({2, 4}), leaf({3, 4, 5})});
}

TEST_CASE("linear_relu on the CPU is relu(linear)", "[linalg]") {
  manual_seed(10);
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    Tensor x = rnd({9, 7}, dt), w = rnd({5, 7}, dt), b = rnd({5}, dt);
    CHECK(testing::max_abs_diff(linear_relu(x, w, b), relu(linear(x, w, b))) == 0.0);
    CHECK(testing::max_abs_diff(linear(x, w, b), addmm(b, x, w.t())) == 0.0);
  }
  // A bias that the GEMM's output could alias (one row) keeps its values.
  Tensor x1 = randn({1, 3}), w1 = randn({4, 3}), b1 = randn({4}), c1 = randn({1, 4});
  const Tensor b1_before = b1.clone(), c1_before = c1.clone();
  linear(x1, w1, b1);
  linear_relu(x1, w1, b1);
  addmm(c1, x1, w1.t(), 0.5, 2.0);
  CHECK(testing::max_abs_diff(b1, b1_before) == 0.0);
  CHECK(testing::max_abs_diff(c1, c1_before) == 0.0);
  // The CPU batched kernel against a loop of mm.
  Tensor a = randn({3, 4, 6}), b = randn({3, 6, 2});
  Tensor r = bmm(a, b);
  for (int64_t i = 0; i < 3; ++i) CHECK(testing::max_abs_diff(r.select(0, i), mm(a.select(0, i), b.select(0, i))) == 0.0);
  CHECK_THAT(error_of([] { linear_relu(ones({2, 3}), ones({4, 5}), ones({4})); }), Catch::Contains("linear_relu"));
  CHECK_THAT(error_of([] { linear_relu(ones({2, 3}), ones({4, 3}), ones({5})); }), Catch::Contains("bias"));
  CHECK_THAT(error_of([] { linear(ones({2, 3}), ones({4, 3}), ones({4}, kFloat64)); }), Catch::Contains("linear"));
}
