// mpx::profiler: per-op kernel counts and times of a small conv/BN/ReLU step, on the CPU and (tagged [cuda]) on the GPU.
#include <catch2/catch.hpp>

#include <algorithm>

#include "autograd/engine.h"
#include "core/random.h"
#include "models/resnet.h"
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

// A GPU step is short of small kernels more than of arithmetic (ResNet-50 has 53 batch norms):
// a training batch norm with running statistics is one kernel, which updates them itself (cuDNN
// does in the same call). Any generic op around it (an update, a fill, a copy back) shows up here.
TEST_CASE("a training batch norm is one kernel: the running statistics are updated inside it, as cuDNN does",
          "[profiler][norm]") {
  manual_seed(2);
  const Tensor x = randn({4, 3, 5, 5}), w = ones({3}), b = zeros({3});
  Tensor rm = zeros({3}), rv = ones({3});
  profiler::reset();
  profiler::start();
  (void)batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
  profiler::stop();
  const auto rows = profiler::results();
  int64_t calls = 0;
  for (const auto& r : rows) {
    INFO(r.op << " " << r.dtype << " x" << r.calls);
    CHECK(r.op == "batch_norm");
    calls += r.calls;
  }
  CHECK(calls == 1);
  profiler::reset();
  // And the statistics are PyTorch's: (1 - m) r + m s, the variance unbiased.
  const Tensor mean = x.mean({0, 2, 3}), var = x.var({0, 2, 3}, /*unbiased=*/true);
  CHECK(testing::rel_err(rm, mean * 0.1) < 1e-6);
  CHECK(testing::rel_err(rv, var * 0.1 + 0.9) < 1e-6);
}

// Each batch norm of a ResNet block ends in its ReLU (and the block's add) inside one kernel,
// forward and backward: no separate ReLU passes over the activations.
TEST_CASE("a ResNet bottleneck's batch norms carry its ReLUs: no relu or threshold_backward kernels",
          "[profiler][norm][models]") {
  manual_seed(4);
  models::Bottleneck block(8, 4, 2);
  const Tensor x = randn({2, 8, 6, 6});
  profiler::reset();
  profiler::start();
  block(x).sum().backward();
  profiler::stop();
  const auto rows = profiler::results();
  auto calls = [&](const std::string& op) {
    const auto* r = find(rows, op, "cpu");
    return r ? r->calls : 0;
  };
  CHECK(calls("batch_norm_relu") == 2);
  CHECK(calls("batch_norm_relu_backward") == 2);
  CHECK(calls("batch_norm_add_relu") == 1);
  CHECK(calls("batch_norm_add_relu_backward") == 1);
  CHECK(calls("batch_norm") == 1);  // the downsample's, whose output is the residual
  CHECK(calls("relu") == 0);
  CHECK(calls("threshold_backward") == 0);
  profiler::reset();
}

TEST_CASE("in-place arithmetic runs one kernel into its destination when nothing records", "[profiler]") {
  Tensor a = ones({6}), b = full({6}, 2.0);
  Tensor counter = zeros({}, TensorOptions().dtype(kInt64));
  profiler::reset();
  profiler::start();
  a.add_(b, 0.5);   // 2
  a.mul_(b);        // 4
  a.div_(b);        // 2
  a.sub_(b, 0.25);  // 1.5
  counter.add_(1);  // a number: one affine kernel, no 0-d operand to fill first
  a.mul_(2.0);      // 3
  profiler::stop();
  int64_t copies = 0, fills = 0, kernels = 0;
  for (const auto& r : profiler::results()) {
    if (r.op == "copy") copies += r.calls;
    if (r.op == "fill") fills += r.calls;
    kernels += r.calls;
  }
  profiler::reset();
  CHECK(copies == 0);
  CHECK(fills == 0);
  CHECK(kernels == 6);
  a.mul_(0.5);
  CHECK(testing::same_values(a, full({6}, 1.5)));
  CHECK(counter.item<int64_t>() == 1);
  // Where the result cannot go straight in (another dtype, memory shared with a shifted view)
  // the general path still gives PyTorch's values.
  Tensor h = ones({4}, TensorOptions().dtype(kFloat16));
  h.add_(full({4}, 0.5));  // f32 other: computed in f32, written back in f16
  CHECK(testing::same_values(h, full({4}, 1.5, TensorOptions().dtype(kFloat16))));
  Tensor s = arange(0, 5).to(kFloat32);
  Tensor head = s.narrow(0, 1, 4);
  head.add_(s.narrow(0, 0, 4));  // reads the elements it writes, shifted by one
  CHECK(testing::same_values(s, tensor(std::vector<float>{0, 1, 3, 5, 7}, {5})));
}

TEST_CASE("profiler names the kernel charged with the memory peak and what was live before it", "[profiler]") {
  const Tensor a = ones({1 << 16});  // 256 KiB
  profiler::reset();
  cpu::reset_peak_memory_stats();
  const int64_t live = cpu::memory_stats().allocated;
  profiler::start();
  {
    const Tensor s = sum(a);       // call 0: a few bytes
    const Tensor b = mul(a, a);    // call 1: 256 KiB, the peak
    (void)s;
    (void)b;
  }
  { const Tensor c = add(a, a); }  // call 2: as large, no higher
  profiler::stop();
  auto peaks = profiler::memory_peaks();
  REQUIRE(peaks.size() == 1);
  CHECK(peaks[0].device == "cpu");
  CHECK(peaks[0].op == "mul");
  CHECK(peaks[0].dtype == "f32");
  CHECK(peaks[0].call == 1);
  CHECK(peaks[0].live_before > live);  // sum's output
  CHECK(peaks[0].peak - peaks[0].live_before == int64_t{4} << 16);
  CHECK(profiler::report().find("memory peak on cpu: ") != std::string::npos);

  // Memory allocated between two kernels outside any op is charged to the next kernel.
  profiler::reset();
  cpu::reset_peak_memory_stats();
  profiler::start();
  { const Tensor s = sum(a); }
  { const Tensor e = empty({1 << 20}); }  // 4 MiB, no kernel
  { const Tensor f = mul(a, a); }
  profiler::stop();
  peaks = profiler::memory_peaks();
  REQUIRE(peaks.size() == 1);
  CHECK(peaks[0].op == "mul");
  CHECK(peaks[0].call == 1);
  const auto sum_out = static_cast<int64_t>(kCpuAlignment);  // live when sum's kernel ended
  CHECK(peaks[0].live_before == live + sum_out);
  CHECK(peaks[0].peak == live + (int64_t{4} << 20));
  profiler::reset();
  CHECK(profiler::memory_peaks().empty());
}
