// Backend sweep over the op table: every promised kernel is registered, every formula's backward
// matches its forward, every CPU kernel matches the f64 kernel, every CUDA kernel the CPU one.
#include <catch2/catch.hpp>

#include <string>

#include "backend_cases.h"

using namespace mpx;
using namespace mpx::backend_sweep;
using formulas::Formula;

TEST_CASE("every ops.def row is consistent: a signature and dtypes, or composite with neither", "[backend]") {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    INFO(op_name(op));
    const bool composite = is_composite(op);
    CHECK(composite == (kCpuDTypes[i] == 0 && kCudaDTypes[i] == 0));
  }
}

TEST_CASE("every (op, device, dtype) the table promises has a kernel, and no kernel is unpromised", "[backend]") {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    for (DType dt : kDTypes) {
      INFO(op_name(op) << " cpu " << dtype_name(dt));
      CHECK(dispatch::has_kernel(op, DeviceType::kCPU, dt) == promises(kCpuDTypes[i], dt));
    }
#ifdef MPX_WITH_CUDA
    for (DType dt : kDTypes) {
      INFO(op_name(op) << " cuda " << dtype_name(dt));
      CHECK(dispatch::has_kernel(op, DeviceType::kCUDA, dt) == promises(cuda_mask(op), dt));
    }
#endif
  }
}

namespace {
template <OpId Op, typename Fn>
concept registrable = requires(Fn fn) { dispatch::register_kernel<Op>(DeviceType::kCPU, kFloat32, fn); };
}  // namespace

TEST_CASE("registering a kernel whose type is not its op's signature does not compile", "[backend]") {
  STATIC_REQUIRE(registrable<OpId::mm, kernels::GemmFn>);
  STATIC_REQUIRE(registrable<OpId::exp, kernels::UnaryFn>);
  STATIC_REQUIRE_FALSE(registrable<OpId::mm, kernels::UnaryFn>);
  STATIC_REQUIRE_FALSE(registrable<OpId::exp, kernels::BinaryFn>);
  STATIC_REQUIRE_FALSE(registrable<OpId::conv2d, kernels::Conv2dBackwardWeightFn>);
  STATIC_REQUIRE_FALSE(registrable<OpId::cat, kernels::Composite>);
  // A run-time op looked up with the wrong signature is refused, not called.
  CHECK_THROWS_WITH(dispatch::kernel<kernels::BinaryFn>(OpId::exp, Device::cpu(), kFloat32),
                    Catch::Contains("exp") && Catch::Contains("signature"));
}

TEST_CASE("every op with kernels has a sweep case, every case an op with kernels", "[backend]") {
  const auto runs = formula_runs();
  const auto cases = kernel_cases();
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    const std::string name = op_name(op);
    INFO(name << ": add it to MPX_*_OPS in ops/formulas.h or a case to tests/test_backend_ops.cpp");
    if (is_composite(op)) continue;
    CHECK((runs.count(name) + cases.count(name) + kCoveredElsewhere.count(name)) == 1);
  }
  for (const auto& [name, c] : cases) {
    OpId op;
    INFO(name);
    REQUIRE(find_op(name, &op));
    CHECK(!is_composite(op));
  }
  // A formula op's row names the kernel type its formula's arity runs as.
#define MPX_CHECK_UNARY(op) CHECK(kSigMatches<kernels::UnaryFn>[static_cast<int>(OpId::op)]);
#define MPX_CHECK_BINARY(op) CHECK(kSigMatches<kernels::BinaryFn>[static_cast<int>(OpId::op)]);
  MPX_UNARY_OPS(MPX_CHECK_UNARY)
  MPX_PARAM_UNARY_OPS(MPX_CHECK_UNARY)
  MPX_BINARY_OPS(MPX_CHECK_BINARY)
#undef MPX_CHECK_UNARY
#undef MPX_CHECK_BINARY
}

namespace {
// Central differences of fwd in f64 against bwd at a grid of points that avoids every kink
// (0, +-1, +-3 and the samples' thresholds lie between grid points).
template <OpId Op>
void check_formula_derivative() {
  using F = Formula<Op>;
  constexpr double lo = lo_of<F>(), hi = hi_of<F>(), p0 = p0_of<F>(), p1 = p1_of<F>(), h = 1e-6;
  INFO(op_name(Op));
  for (int k = 0; k < 12; ++k) {
    const double x = lo + (hi - lo) * (k + 0.5) / 12.0;
    if constexpr (F::kArity == 1) {
      if constexpr ((F::kFlags & formulas::kNoGrad) == 0) {
        const double y = F::fwd(x, p0, p1);
        const double num = (F::fwd(x + h, p0, p1) - F::fwd(x - h, p0, p1)) / (2 * h);
        const double ana = F::bwd(1.0, x, y, p0, p1);
        INFO("x " << x << ": analytic " << ana << " numeric " << num);
        CHECK(std::abs(ana - num) <= 1e-6 * (1.0 + std::abs(num)));
      }
    } else if constexpr (!F::kCompare && Op != OpId::threshold_backward && Op != OpId::gelu_backward) {
      const double b = lo + (hi - lo) * ((k * 5 + 3) % 12 + 0.25) / 12.0, alpha = 1.5;
      const auto g = F::bwd(1.0, x, b, alpha);
      const double na = (F::fwd(x + h, b, alpha) - F::fwd(x - h, b, alpha)) / (2 * h);
      const double nb = (F::fwd(x, b + h, alpha) - F::fwd(x, b - h, alpha)) / (2 * h);
      INFO("a " << x << " b " << b << ": analytic " << g.a << ", " << g.b << " numeric " << na << ", " << nb);
      CHECK(std::abs(g.a - na) <= 1e-6 * (1.0 + std::abs(na)));
      CHECK(std::abs(g.b - nb) <= 1e-6 * (1.0 + std::abs(nb)));
    }
  }
}
}  // namespace

TEST_CASE("every formula's backward is the derivative of its forward (f64, central differences)", "[backend]") {
#define MPX_CHECK_FORMULA(op) check_formula_derivative<OpId::op>();
  MPX_UNARY_OPS(MPX_CHECK_FORMULA)
  MPX_PARAM_UNARY_OPS(MPX_CHECK_FORMULA)
  MPX_BINARY_OPS(MPX_CHECK_FORMULA)
#undef MPX_CHECK_FORMULA
}



TEST_CASE("every CPU kernel agrees with the f64 kernel on the same inputs", "[backend]") {
  const auto runs = formula_runs();
  const auto cases = kernel_cases();
  const Device cpu = Device::cpu();
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    const std::string name = op_name(op);
    for (DType dt : kDTypes) {
      if (dt == kFloat64 || !promises(kCpuDTypes[i], dt)) continue;
      INFO(name << " " << dtype_name(dt));
      tensor_list got, ref;
      if (auto f = runs.find(name); f != runs.end()) {
        got = f->second(dt, dt, cpu);
        // Integer and bool kernels against the f64 kernel on the same small integers, where it has one.
        ref = f->second(dt, promises(kCpuDTypes[i], kFloat64) ? kFloat64 : dt, cpu);
      } else if (auto c = cases.find(name); c != cases.end()) {
        if (!is_floating(dt)) continue;  // the cases make floating inputs; integer kernels are formula ops
        Sample s{dt, dt, cpu}, r{dt, kFloat64, cpu};
        got = c->second(s);
        ref = c->second(r);
      } else {
        continue;
      }
      check_outputs(got, ref, 1.0);
    }
  }
}

TEST_CASE("every CUDA kernel agrees with the CPU kernel", "[backend][cuda]") {
  if (!testing::cuda_ready()) return;
  const auto runs = formula_runs();
  const auto cases = kernel_cases();
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    const std::string name = op_name(op);
    for (DType dt : kDTypes) {
      if (!promises(cuda_mask(op), dt)) continue;
      INFO(name << " " << dtype_name(dt));
      tensor_list got, ref;
      if (auto f = runs.find(name); f != runs.end()) {
        got = f->second(dt, dt, Device::cuda());
        ref = f->second(dt, dt, Device::cpu());
      } else if (auto c = cases.find(name); c != cases.end()) {
        if (!is_floating(dt)) continue;
        // linear has no CPU kernel: its composite (mm + add) is the reference.
        Sample s{dt, dt, Device::cuda()}, r{dt, dt, Device::cpu()};
        got = c->second(s);
        ref = c->second(r);
      } else {
        continue;
      }
      for (const Tensor& g : got) CHECK(g.device().is_cuda());
      check_outputs(got, ref, 2.0);
    }
  }
}
