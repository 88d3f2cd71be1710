// Event-timed medians of GPU work for the bench/bench_*_cuda.cpp programs.
#pragma once
#include <mpx/mpx.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace mpx::bench {

/// Median milliseconds of `f` over `runs` event-timed calls after `warmup` untimed ones.
inline double median_ms(const std::function<void()>& f, int warmup = 3, int runs = 20) {
  for (int i = 0; i < warmup; ++i) f();
  cuda::synchronize();
  std::vector<double> ms;
  cuda::Event a, b;
  for (int i = 0; i < runs; ++i) {
    a.record();
    f();
    b.record();
    b.synchronize();
    ms.push_back(a.elapsed_ms(b));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace mpx::bench
