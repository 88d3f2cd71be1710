// In-place ops under autograd, PyTorch's rule: recorded on non-leaves (history rebased), refused on
// leaves that require grad and on views, saved tensors modified afterwards caught at backward;
// apex's promotion cases for in-place ops under autocast (tests/L0/run_amp/test_promotion.py);
// in-place arithmetic with a number: its values and dtype rules; copy_ into views with size-1 dims.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "amp/autocast.h"
#include "gradcheck.h"
#include "test_util.h"
#include "ops/shape.h"

using namespace mpx;
using testing::gradcheck;

namespace {
Tensor leaf(const IntList& shape, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64)).set_requires_grad(true);
}
}  // namespace

TEST_CASE("in-place ops on non-leaf tensors are recorded and pass gradcheck", "[autograd][inplace]") {
  Tensor x = leaf({3, 4}, 1), y = leaf({3, 4}, 2), row = leaf({4}, 3);
  Tensor pos = (leaf({3, 4}, 4).detach().abs() + 0.5).set_requires_grad(true);  // away from div's pole
  const std::vector<std::pair<const char*, testing::Fn>> cases = {
      {"add_", [](const tensor_list& in) { Tensor h = in[0] * 1.5; h.add_(in[1], 0.5); return h; }},
      {"add_ broadcast", [](const tensor_list& in) { Tensor h = in[0].clone(); h.add_(in[2]); return h * h; }},
      {"add_ scalar", [](const tensor_list& in) { Tensor h = in[0].clone(); h.add_(2.0); return h * h; }},
      {"sub_", [](const tensor_list& in) { Tensor h = in[0] * in[1]; h.sub_(in[1], 2.0); return h; }},
      {"mul_", [](const tensor_list& in) { Tensor h = in[0].clone(); h.mul_(in[1]); return h * in[0]; }},
      {"mul_ scalar", [](const tensor_list& in) { Tensor h = in[0] * 1.0; h.mul_(3.0); return h * h; }},
      {"div_", [](const tensor_list& in) { Tensor h = in[0] * in[1]; h.div_(in[3]); return h; }},
      {"clamp_", [](const tensor_list& in) { Tensor h = in[0] * 2.0; h.clamp_(-0.5, 0.7); return h * in[1]; }},
      {"relu_", [](const tensor_list& in) { Tensor h = in[0] + in[1]; h.relu_(); return h; }},
      {"copy_", [](const tensor_list& in) { Tensor h = in[0] * 2.0; h.copy_(in[2]); return h * in[1]; }},
      {"fill_", [](const tensor_list& in) { Tensor h = in[0] * 2.0; h.fill_(0.25); return h * in[1]; }},
      {"zero_ then add_", [](const tensor_list& in) { Tensor h = in[0] * 2.0; h.zero_(); h.add_(in[1]); return h * in[0]; }},
      {"chain", [](const tensor_list& in) {
         Tensor h = in[0] * in[1];
         h += in[0];  // a ResNet's `out += identity`
         h.relu_();
         h *= in[1];
         return h;
       }},
  };
  for (const auto& [name, fn] : cases) {
    INFO(name);
    CHECK(gradcheck(fn, {x, y, row, pos}) == "");
  }
}

TEST_CASE("in-place on a non-leaf keeps its dtype and rebases its history", "[autograd][inplace]") {
  Tensor x = leaf({4}, 5);
  Tensor h = x.clone();
  h.add_(2.0);
  CHECK(h.grad_fn()->name() == "AddBackward");
  CHECK_FALSE(h.is_leaf());
  h.retain_grad();
  h.mul_(3.0);
  CHECK(h.grad_fn()->name() == "MulBackward");
  sum(h).backward();
  CHECK(allclose(x.grad(), full({4}, 3.0, kFloat64)));
  CHECK(allclose(h.grad(), ones({4}, kFloat64)));  // retain_grad follows the rebase

  // A tensor that did not require grad takes the history of what is added into it (torch's buffers).
  Tensor w = leaf({3}, 6);
  Tensor buf = zeros({3}, kFloat64);
  buf.add_(w);
  CHECK(buf.requires_grad());
  sum(buf * buf).backward();
  CHECK(allclose(w.grad(), w.detach() * 2.0));

  // copy_ converts to the destination's dtype and routes the gradient back in the source's.
  Tensor src = tensor(std::vector<float>{1, 2, 3}).set_requires_grad(true);
  Tensor dst = leaf({2, 3}, 7) * 1.0;
  dst.copy_(src);
  CHECK(dst.dtype() == kFloat64);
  sum(dst * 2.0).backward();
  REQUIRE(src.grad().defined());
  CHECK(src.grad().dtype() == kFloat32);
  CHECK(allclose(src.grad(), full({3}, 4.0)));
}

TEST_CASE("in-place refusals: leaves that require grad, views, detached tensors", "[autograd][inplace]") {
  Tensor x = leaf({4}, 8);
  CHECK_THROWS_WITH(x.add_(1.0), Catch::Contains("leaf tensor that requires grad") && Catch::Contains("add_") &&
                                     Catch::Contains("NoGradGuard"));
  CHECK_THROWS_WITH(x.relu_(), Catch::Contains("relu_"));
  {
    NoGradGuard ng;  // what optimizers do
    x.add_(1.0);
  }
  Tensor h = x * 2.0;
  CHECK_THROWS_WITH(h.narrow(0, 0, 2).mul_(2.0), Catch::Contains("view") && Catch::Contains("clone()"));
  Tensor w = leaf({4}, 9);
  CHECK_THROWS_WITH(h.detach().add_(w), Catch::Contains("detach()ed tensor"));
  // A view not in the graph into which a graph tensor would be written: refused, not silently cut.
  Tensor base = zeros({2, 4}, kFloat64);
  CHECK_THROWS_WITH(base.select(0, 1).copy_(w), Catch::Contains("view"));
  // A view taken before a recorded in-place op on its base no longer matches its history.
  Tensor v = h.narrow(0, 0, 2);
  h.mul_(3.0);
  CHECK_THROWS_WITH(sum(v), Catch::Contains("view") && Catch::Contains("take the view again"));
  Tensor v2 = h.narrow(0, 0, 2);  // taken after: fine
  sum(v2).backward();
  CHECK(allclose(x.grad(), tensor(std::vector<double>{6, 6, 0, 0})));
}

TEST_CASE("a tensor saved for backward and then modified in place is an error at backward naming the node",
          "[autograd][inplace]") {
  Tensor x = leaf({3}, 10);
  Tensor y = x.clone();
  Tensor z = y * y;  // MulBackward saves y
  y.add_(1.0);       // allowed (non-leaf), but z's backward needs y's old values
  CHECK_THROWS_WITH(sum(z).backward(), Catch::Contains("MulBackward") && Catch::Contains("modified by an in-place"));

  Tensor e = exp(x * 1.0);  // ExpBackward saves its output
  e.mul_(2.0);
  CHECK_THROWS_WITH(sum(e).backward(), Catch::Contains("ExpBackward"));

  // add/sub keep no inputs, so writing into one of them afterwards is fine.
  Tensor a = x * 1.0;
  Tensor s = a + 1.0;
  a.add_(5.0);
  sum(s).backward();
  CHECK(allclose(x.grad(), ones({3}, kFloat64)));
}

// apex tests/L0/run_amp/test_promotion.py: run_binary_promote_test with x_inplace (test_inplace_add_matches_self)
// and out of place (test_mul_matches_widest), under O1's autocast for f16 and bf16.
TEST_CASE("apex promotion: in-place add_ keeps self's dtype, mul matches the widest, grads keep the leaf dtype",
          "[autograd][inplace][amp]") {
  for (DType low : {kFloat16, kBFloat16}) {
    amp::AutocastGuard ac(low);
    for (DType xt : {low, kFloat32})
      for (DType yt : {low, kFloat32}) {
        INFO(dtype_name(low) << " x " << dtype_name(xt) << " y " << dtype_name(yt));
        for (bool inplace : {true, false}) {
          manual_seed(11);
          Tensor x_leaf = randn({16}, TensorOptions(xt)).set_requires_grad(true);
          Tensor x = inplace ? x_leaf.clone() : x_leaf;
          Tensor y = randn({16}, TensorOptions(yt));
          Tensor out = inplace ? x.add_(y) : mul(x, y);
          if (inplace) {
            CHECK(out.dtype() == xt);
            CHECK(out.is_same(x));
          } else {
            CHECK(out.dtype() == ((xt == kFloat32 || yt == kFloat32) ? kFloat32 : low));
          }
          sum(out.to(kFloat32)).backward();
          REQUIRE(x_leaf.grad().defined());
          CHECK(x_leaf.grad().dtype() == xt);
          if (inplace) CHECK(allclose(x_leaf.grad().to(kFloat32), ones({16})));
        }
      }
  }
}

TEST_CASE("in-place arithmetic with a number: PyTorch's values, rounded once, in every dtype", "[inplace]") {
  // f16 and bf16 take the number in f32 (PyTorch's opmath), not rounded to 16 bits first: 1 + 0.1
  // rounds once to f16's 1.0996, where 1 + f16(0.1) would round 0.0999755859375 first.
  for (DType dt : {kFloat16, kBFloat16, kFloat32, kFloat64}) {
    INFO(dtype_name(dt));
    Tensor h = tensor(std::vector<double>{1.0, -2.5, 1000.0}, {3}).to(dt);
    const Tensor ref = (h.to(kFloat64) + (dt == kFloat64 ? 0.1 : static_cast<double>(0.1f))).to(dt);
    h.add_(0.1);
    CHECK(equal(h, ref));
    h.mul_(-3.0);
    CHECK(equal(h, (ref.to(kFloat64) * -3.0).to(dt)));
  }
  // x * v keeps the sign of zero: -0 * 2 is -0, 0 * -2 is -0, -0 * -2 is +0.
  Tensor z = tensor(std::vector<float>{-0.0f, 0.0f, -0.0f}, {3});
  Tensor v = tensor(std::vector<float>{2.0f, -2.0f, -2.0f}, {3});
  const float* zp = z.data_ptr<float>();
  for (int i = 0; i < 3; ++i) {
    Tensor one = z.narrow(0, i, 1).clone();
    one.mul_(static_cast<double>(v.data_ptr<float>()[i]));
    CHECK(std::signbit(one.item<float>()) == std::signbit(zp[i] * v.data_ptr<float>()[i]));
  }
  // Integers stay integers and exact; a fraction makes PyTorch's error, not a truncation.
  Tensor c = tensor(std::vector<int64_t>{(int64_t{1} << 53) + 1, -7}, {2});
  c.add_(2.0);
  CHECK(c.data_ptr<int64_t>()[0] == (int64_t{1} << 53) + 3);
  CHECK(c.data_ptr<int64_t>()[1] == -5);
  c.mul_(3.0);
  CHECK(c.data_ptr<int64_t>()[1] == -15);
  CHECK_THROWS_WITH(c.add_(0.5), Catch::Contains("cannot be written into"));
  CHECK_THROWS_WITH(c.mul_(full({2}, 1.5)), Catch::Contains("cannot be written into"));
  CHECK(c.data_ptr<int64_t>()[1] == -15);  // untouched by the refused writes
  CHECK_THROWS_WITH(affine(c, 0.5, 0.0), Catch::Contains("integer tensor"));
  // Inf and NaN as multiplication and addition give them.
  Tensor f = tensor(std::vector<float>{0.0f, 1.0f, INFINITY}, {3});
  f.mul_(INFINITY);
  CHECK(std::isnan(f.data_ptr<float>()[0]));
  CHECK(f.data_ptr<float>()[1] == INFINITY);
  f.add_(-INFINITY);
  CHECK(std::isnan(f.data_ptr<float>()[2]));
}

TEST_CASE("copy_ into strided views writes exactly the view's elements, in every layout of source and destination", "[inplace][copy]") {
  NoGradGuard ng;
  manual_seed(11);
  // The q/k/v slices of a [B, T, 3C] buffer (narrow's backward), a transposed source, a
  // broadcast row, a dtype change, and a destination whose inner dim is strided.
  const Tensor src = randn({2, 5, 6});
  for (int64_t part = 0; part < 3; ++part) {
    Tensor buf = full({2, 5, 18}, -7.0);
    buf.narrow(2, part * 6, 6).copy_(src);
    const Tensor back = buf.narrow(2, part * 6, 6);
    CHECK(equal(back, src));
    CHECK(sum(ne(buf, -7.0).to(kInt64)).item<int64_t>() == src.numel());  // nothing outside the slice
  }
  Tensor buf = zeros({6, 9, 4});
  const Tensor tr = randn({4, 4, 5}).transpose(1, 2);
  buf.narrow(0, 1, 4).narrow(1, 2, 5).copy_(tr);  // a transposed source into a strided slice
  CHECK(equal(buf.narrow(0, 1, 4).narrow(1, 2, 5), tr));
  CHECK(sum(ne(buf, 0.0).to(kInt64)).item<int64_t>() == tr.numel());
  Tensor t = zeros({4, 5, 9});
  t.narrow(2, 2, 6).copy_(src.select(0, 0).narrow(0, 0, 1).expand({4, 5, 6}));  // a broadcast row
  CHECK(equal(t.narrow(2, 2, 6), src.select(0, 0).narrow(0, 0, 1).expand({4, 5, 6})));
  Tensor h = zeros({2, 5, 12}, TensorOptions(kFloat16));
  h.narrow(2, 3, 6).copy_(src);  // f32 into f16, rounded once
  CHECK(equal(h.narrow(2, 3, 6), src.to(kFloat16)));
  Tensor col = zeros({6, 4});
  col.t().copy_(randn({4, 6}).contiguous());  // destination strided in its last dim: the general path
  Tensor want = randn({4, 6});
  col.t().copy_(want);
  CHECK(equal(col.t(), want));
}

TEST_CASE("copy_ into views with size-1 dims writes exactly the view's elements, and select's backward scatters there",
          "[inplace][copy]") {
  // Views whose trailing dims have size 1 ([.., n, 1]: what select's backward copies into) take
  // the copy kernels with the unit dims dropped; every other element must stay as it was.
  manual_seed(41);
  for (DType dt : {kFloat32, kBFloat16, kFloat64}) {
    INFO(dtype_name(dt));
    Tensor z = full({5, 4, 3, 3}, 7.0, TensorOptions(dt));
    const Tensor g = randn({5, 4}).to(dt);
    z.select(3, 1).select(2, 2).copy_(g);
    for (int64_t a = 0; a < 5; ++a)
      for (int64_t b = 0; b < 4; ++b)
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 3; ++j) {
            const double want = i == 2 && j == 1 ? g[a][b].item<double>() : 7.0;
            CHECK(z[a][b][i][j].item<double>() == want);
          }
    // Unit dims in the middle and a unit-size source dim, converting the dtype on the way.
    Tensor m = zeros({3, 1, 6}, TensorOptions(dt));
    m.narrow(2, 1, 4).copy_(g.narrow(0, 0, 3).unsqueeze(1).to(kFloat32));
    CHECK(m[2][0][0].item<double>() == 0.0);
    CHECK(m[2][0][4].item<double>() == g[2][3].item<double>());
    CHECK(m[1][0][5].item<double>() == 0.0);
  }
  Tensor w = randn({6, 5, 3, 3}, kFloat64).set_requires_grad(true);
  const Tensor gy = randn({6, 5}, kFloat64);
  w.select(3, 0).select(2, 1).backward(gy);
  const Tensor want = zeros({6, 5, 3, 3}, kFloat64);
  want.select(3, 0).select(2, 1).copy_(gy);
  CHECK(mpx::testing::same_values(w.grad(), want));
  CHECK(gradcheck([](const tensor_list& in) { return in[0].select(3, 2).select(1, 1); }, {randn({2, 3, 4, 3}, kFloat64).set_requires_grad(true)}) ==
        "");
}
