// Tests of the op registry: ops.def-generated names and policies, overrides, missing kernels, autocast stage.
#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

using namespace mpx;

TEST_CASE("ops.def drives names and policies", "[registry]") {
  CHECK(std::string(op_name(OpId::conv2d)) == "conv2d");
  CHECK(op_policy(OpId::mm) == CastPolicy::lower);
  CHECK(op_policy(OpId::softmax) == CastPolicy::fp32);
  CHECK(op_policy(OpId::add) == CastPolicy::promote);
  CHECK(op_policy(OpId::relu) == CastPolicy::none);
  CHECK(op_policy(OpId::binary_cross_entropy) == CastPolicy::banned);
  OpId id;
  REQUIRE(find_op("log_softmax", &id));
  CHECK(id == OpId::log_softmax);
  CHECK_FALSE(find_op("no_such_op", &id));
}

TEST_CASE("policies can be overridden at run time and reset", "[registry]") {
  set_op_policy(OpId::relu, CastPolicy::fp32);
  CHECK(op_policy(OpId::relu) == CastPolicy::fp32);
  reset_op_policies();
  CHECK(op_policy(OpId::relu) == CastPolicy::none);
}

TEST_CASE("a missing kernel is a clear error naming op, dtype and device", "[registry]") {
  CHECK_THROWS_WITH(dispatch::find_kernel(OpId::mm, DeviceType::kCPU, kInt64),
                    Catch::Contains("mm") && Catch::Contains("i64") && Catch::Contains("cpu"));
  // An op with no kernels on any device (prelu is composite: built from where and mul).
  CHECK_THROWS_WITH(dispatch::find_kernel(OpId::prelu, DeviceType::kCUDA, kFloat32), Catch::Contains("cuda"));
  CHECK_THROWS_WITH(mm(ones({2, 2}, kInt64), ones({2, 2}, kInt64)), Catch::Contains("floating dtype"));
  CHECK(dispatch::has_kernel(OpId::mm, DeviceType::kCPU, kBFloat16));
}

TEST_CASE("the autocast stage follows each op's policy", "[registry][autocast]") {
  Tensor a = ones({2, 2}), b = ones({2, 2});
  {
    amp::AutocastGuard guard(kBFloat16);
    CHECK(mm(a, b).dtype() == kBFloat16);                                   // lower
    CHECK(exp(a.to(kFloat16)).dtype() == kFloat32);                         // fp32
    CHECK(add(a.to(kBFloat16), a).dtype() == kFloat32);                     // promote: widest
    CHECK(relu(a.to(kBFloat16)).dtype() == kBFloat16);                      // none
    CHECK(mm(a.to(kFloat64), b.to(kFloat64)).dtype() == kFloat64);          // f64 is left alone
    CHECK_THROWS_WITH(add(a.to(kFloat16), a.to(kBFloat16)), Catch::Contains("mix f16 and bf16"));
    CHECK_THROWS_WITH(binary_cross_entropy(full({2}, 0.5), full({2}, 1.0)), Catch::Contains("bce_with_logits"));
    // Gradients reach f32 leaves in f32 through the recorded casts.
    Tensor w = ones({2, 2}).set_requires_grad(true);
    sum(mm(a, w)).backward();
    CHECK(w.grad().dtype() == kFloat32);
    {
      amp::AutocastGuard off(kBFloat16, false);  // a nested disabled region
      CHECK(mm(a, b).dtype() == kFloat32);
    }
    CHECK(mm(a, b).dtype() == kBFloat16);
  }
  CHECK_FALSE(amp::is_autocast_enabled());
  CHECK(mm(a, b).dtype() == kFloat32);
  CHECK_THROWS_WITH(amp::AutocastGuard(kFloat32), Catch::Contains("kFloat16 or kBFloat16"));
}
