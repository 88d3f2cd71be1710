// Low-precision training end to end on the CPU: every layer of a small CNN runs forward and
// backward in f16 and bf16, and the optimizer's f32 masters carry the updates.
#include <catch2/catch.hpp>

#include <mpx/mpx.h>

#include "models/small_cnn.h"

using namespace mpx;
namespace F = mpx::nn::functional;

TEST_CASE("a small CNN trains in f16 and bf16 with f32 masters", "[train][lowp]") {
  for (DType dt : {kFloat16, kBFloat16}) {
    manual_seed(1);
    models::SmallCnn net;
    net->to(dt);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    // A learnable synthetic task: the label is the brightest quadrant, one quadrant per class pair.
    Tensor x = randn({64, 1, 28, 28});
    Tensor y = randint(0, 4, {64});
    {
      NoGradGuard ng;
      for (int64_t i = 0; i < 64; ++i) {
        const int64_t q = y[i].item<int64_t>();
        x[i].narrow(1, (q / 2) * 14, 14).narrow(2, (q % 2) * 14, 14).add_(2.0);
      }
    }
    Tensor xl = x.to(dt);
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      opt.zero_grad();
      Tensor logits = net(xl);
      REQUIRE(logits.dtype() == dt);
      Tensor loss = F::cross_entropy(logits, y);
      REQUIRE(loss.dtype() == kFloat32);  // losses compute in f32
      loss.backward();
      for (auto& p : net->parameters()) REQUIRE(p.grad().dtype() == dt);
      opt.step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    INFO(dtype_name(dt) << ": loss " << first << " -> " << last);
    CHECK(std::isfinite(last));
    CHECK(last < 0.5 * first);
    for (auto& p : net->parameters()) {
      CHECK(p.dtype() == dt);
      CHECK(opt.master(p).dtype() == kFloat32);
      CHECK(equal(opt.master(p).to(dt), p.detach()));  // the model copy is the rounded master
    }
  }
}
