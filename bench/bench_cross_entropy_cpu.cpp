// CPU time and peak memory of cross_entropy forward + backward on language-model logits [N, C] (peer:
// bench/peer_cross_entropy_cpu.py): the fused row kernels against the unfused path (log_softmax, nll and their
// backwards on an f32 copy), which the same call takes when it is given class weights (here all ones).
#include <mpx/mpx.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace mpx;

int main(int argc, char** argv) {
  int64_t rows = 1024, classes = 50257, reps = 7;
  std::string dtype = "bf16";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) rows = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--classes")) classes = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--rows N] [--classes C] [--dtype f32|bf16] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  const DType dt = dtype == "bf16" ? kBFloat16 : kFloat32;
  manual_seed(0);
  const Tensor x0 = (randn({rows, classes}) * 2.0).to(dt);
  const Tensor t = randint(0, classes, {rows});
  const Tensor ones_w = ones({classes});
  for (const bool fused : {true, false}) {
    std::vector<double> ms;
    int64_t peak = 0;
    double loss = 0;
    for (int64_t r = 0; r < reps; ++r) {
      Tensor x = x0.clone().set_requires_grad(true);
      cpu::reset_peak_memory_stats();
      const int64_t before = cpu::memory_stats().allocated;
      const auto t0 = std::chrono::steady_clock::now();
      {
        // bf16 as a model's logits under autocast (O1), f32 as at O0.
        amp::AutocastGuard ac(kBFloat16, dt == kBFloat16);
        Tensor l = fused ? nn::functional::cross_entropy(x, t)
                         : cross_entropy(x, t, Reduction::Mean, -100, 0.0, ones_w);
        l.backward();
        loss = l.item<double>();
      }
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      peak = std::max(peak, cpu::memory_stats().peak_allocated - before);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("mpx cross_entropy %s [%lld x %lld] %s: forward+backward %.1f ms (median of %lld, min %.1f), "
                "peak %.0f MiB above the logits, loss %.6f\n",
                dtype.c_str(), static_cast<long long>(rows), static_cast<long long>(classes),
                fused ? "fused rows" : "unfused (class weights of ones)", ms[ms.size() / 2],
                static_cast<long long>(reps), ms[0], static_cast<double>(peak) / (1 << 20), loss);
  }
  return 0;
}
