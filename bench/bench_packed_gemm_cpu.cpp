// CPU time of a recurrent layer's per-step product (rows x k against a right operand packed once): mpx's AVX2 panels,
// oneDNN's packed product and the plain GEMM, on the shapes of LSTM/GRU steps; f32, best of 50 calls per kernel.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "ops/cpu/gemm_panels.h"
#include "ops/linalg.h"
#ifdef MPX_WITH_ONEDNN
#include "ops/cpu/matmul_onednn.h"
#endif

using namespace mpx;

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// GFLOP/s of f over its best of 50 calls (after one untimed call), "-" where it declined.
template <typename F>
std::string rate(double flops, F f) {
  if (!f()) return "-";
  double best = 1e30;
  for (int r = 0; r < 50; ++r) {
    const double t = now();
    f();
    best = std::min(best, now() - t);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", flops / best / 1e9);
  return buf;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    std::fprintf(stderr, "usage: %s   (threads from OMP_NUM_THREADS)\n", argv[0]);
    return 2;
  }
  std::printf("panels preferred here: %s\n", cpu::panels::preferred() ? "yes" : "no");
  std::printf("%5s %5s %5s  %14s %14s %14s  (GFLOP/s)\n", "rows", "k", "n", "mpx panels", "oneDNN packed", "plain mm");
  // Rows: the batch (one while generating); b: w_hh^T [hidden, 4 hidden] forward, w_hh [4 hidden, hidden] backward.
  const int64_t shapes[][3] = {{1, 512, 2048},  {2, 512, 2048},  {4, 512, 2048},  {8, 512, 2048},
                               {16, 512, 2048}, {16, 2048, 512}, {32, 512, 2048}, {64, 512, 2048},
                               {16, 256, 1024}, {16, 1024, 256}, {64, 1024, 4096}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], k = s[1], n = s[2];
    const Tensor w = randn({n, k}), b = w.t(), a = randn({m, k});
    Tensor out = zeros({m, n});
    std::shared_ptr<void> p1, p2;
    const double flops = 2.0 * static_cast<double>(m * k * n);
    const std::string panels = rate(flops, [&] { return cpu::panels::matmul_packed(out, a, b, 1.0, p1); });
#ifdef MPX_WITH_ONEDNN
    const std::string onednn = rate(flops, [&] { return cpu::onednn::matmul_packed(out, a, b, 1.0, p2); });
#else
    const std::string onednn = "-";
#endif
    const std::string plain = rate(flops, [&] {
      mm(a, b);
      return true;
    });
    std::printf("%5ld %5ld %5ld  %14s %14s %14s\n", static_cast<long>(m), static_cast<long>(k), static_cast<long>(n),
                panels.c_str(), onednn.c_str(), plain.c_str());
  }
  return 0;
}
