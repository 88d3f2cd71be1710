// GEMM throughput of mpx::mm on a CUDA device (cuBLASLt) in f16, bf16 and f32+TF32; the peer of bench/peer_gemm_cuda.py.
#include <mpx/mpx.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace mpx;

namespace {

struct Case {
  const char* label;  // the CSV's dtype field
  DType dt;
  bool tf32;
};

// Median milliseconds of one n^3 mm: `warmup` untimed calls, then `runs` calls timed one by one
// with CUDA events, rotating among three input sets so no run finds its operands in L2.
double median_ms(const Case& c, int64_t n, int warmup, int runs) {
  cuda::allow_tf32(c.tf32);
  std::vector<Tensor> as, bs;
  {
    Tensor a = randn({n, n}).to(c.dt), b = randn({n, n}).to(c.dt);
    for (int i = 0; i < 3; ++i) {
      as.push_back(a.to(Device::cuda()));  // three distinct device buffers
      bs.push_back(b.to(Device::cuda()));
    }
  }
  for (int i = 0; i < warmup; ++i) mm(as[i % 3], bs[i % 3]);
  cuda::synchronize();
  std::vector<double> ms;
  cuda::Event start, end;
  for (int i = 0; i < runs; ++i) {
    start.record();
    Tensor out = mm(as[i % 3], bs[i % 3]);
    end.record();
    end.synchronize();
    ms.push_back(start.elapsed_ms(end));
  }
  std::sort(ms.begin(), ms.end());
  return runs % 2 ? ms[runs / 2] : 0.5 * (ms[runs / 2 - 1] + ms[runs / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {4096, 8192};
  int warmup = 5, runs = 20;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--sizes")) {
      sizes.clear();
      std::string s = next("--sizes");
      for (size_t p = 0; p < s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        sizes.push_back(std::stoll(s.substr(p, q - p)));
        p = q + 1;
      }
    } else if (!std::strcmp(argv[i], "--warmup")) {
      warmup = std::stoi(next("--warmup"));
    } else if (!std::strcmp(argv[i], "--runs")) {
      runs = std::max(1, std::stoi(next("--runs")));
    } else {
      std::fprintf(stderr, "usage: %s [--sizes 4096,8192] [--warmup N] [--runs N]\n", argv[0]);
      return 2;
    }
  }
  if (!cuda_is_available()) {
    std::fprintf(stderr, "bench_gemm_cuda: no CUDA device is visible (check nvidia-smi); nothing to measure\n");
    return 1;
  }
  try {
    manual_seed(0);
    const cuda::DeviceProperties p = cuda::device_properties();
    std::printf("device: %s (sm_%d%d), %s\n", p.name.c_str(), p.major, p.minor, cuda::version_string().c_str());
    std::printf("mpx::mm, n x n x n, median of %d runs after %d warm-up runs, 3 rotating input sets\n\n", runs, warmup);
    const Case cases[] = {{"f16", kFloat16, false}, {"bf16", kBFloat16, false}, {"tf32", kFloat32, true}};
    std::vector<std::string> csv;
    std::printf("%-6s %6s %10s %9s\n", "dtype", "n", "ms", "TFLOP/s");
    for (const Case& c : cases)
      for (int64_t n : sizes) {
        const double ms = median_ms(c, n, warmup, runs);
        const double tflops = 2.0 * static_cast<double>(n) * n * n / (ms * 1e-3) / 1e12;
        std::printf("%-6s %6lld %10.3f %9.1f\n", c.label, static_cast<long long>(n), ms, tflops);
        csv.push_back("gemm," + std::string(c.label) + "," + std::to_string(n) + "," + std::to_string(tflops));
      }
    cuda::allow_tf32(false);
    std::printf("\n");
    for (const auto& l : csv) std::printf("%s\n", l.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
