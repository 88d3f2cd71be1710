// mpx::profiler: per-op kernel counts and times of a small conv/BN/ReLU step, on the CPU and (tagged [cuda]) on the GPU.
#include <catch2/catch.hpp>

#include <algorithm>

#include "autograd/engine.h"
#include "core/random.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/profiler.h"
#include "ops/reduction.h"
#include "tests/test_util.h"

using namespace mpx;

namespace {
const profiler::OpStat* find(const std::vector<profiler::OpStat>& rows, const std::string& op, const std::string& dev) {
  for (const auto& r : rows)
    if (r.op == op && r.device == dev) return &r;
  return nullptr;
}

// conv -> batch norm -> relu -> sum, forward and backward, `n` times.
void steps(Device dev, int n) {
  manual_seed(1);
  Tensor x = randn({4, 3, 8, 8}).to(dev);
  Tensor w = randn({5, 3, 3, 3}).to(dev).requires_grad_(true);
  Tensor gamma = ones({5}).to(dev).requires_grad_(true), beta = zeros({5}).to(dev).requires_grad_(true);
  for (int i = 0; i < n; ++i) {
    Tensor y = relu(batch_norm(conv2d(x, w, {}, {1, 1}, {1, 1}), Tensor(), Tensor(), gamma, beta, true, 0.1, 1e-5));
    sum(y).backward();
  }
}

void check_profile(Device dev, const std::string& name) {
  profiler::reset();
  CHECK_FALSE(profiler::recording());
  steps(dev, 1);  // not recorded
  CHECK(profiler::results().empty());
  profiler::start();
  CHECK(profiler::recording());
  steps(dev, 3);
  profiler::stop();
  steps(dev, 1);  // not recorded either
  const auto rows = profiler::results();
  for (const char* op : {"conv2d", "batch_norm", "relu", "conv2d_backward_weight", "batch_norm_backward"}) {
    INFO(op);
    const auto* r = find(rows, op, name);
    REQUIRE(r != nullptr);
    CHECK(r->calls == 3);
    CHECK(r->dtype == "f32");
    CHECK(r->ms >= 0);
    CHECK(r->host_ms > 0);  // every call takes some host time, on a GPU too (its launch)
  }
  double total = 0;
  for (const auto& r : rows) total += r.ms;
  CHECK(total > 0);
  CHECK(std::is_sorted(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; }));
  const std::string rep = profiler::report(3);
  CHECK(rep.find("ms/call") != std::string::npos);
  CHECK(rep.find("host ms/call") != std::string::npos);
  CHECK(rep.find("(the rest)") != std::string::npos);
  CHECK(rep.find("total") != std::string::npos);
  profiler::reset();
  CHECK(profiler::results().empty());
}
}  // namespace

TEST_CASE("profiler counts every kernel call of a conv/BN/ReLU step and only while recording", "[profiler]") {
  check_profile(Device::cpu(), "cpu");
}

TEST_CASE("profiler times CUDA kernels with events", "[cuda][profiler]") {
  if (!testing::cuda_ready()) return;
  check_profile(Device::cuda(0), "cuda");
}
