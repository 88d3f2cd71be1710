// CPU time of interpolate (nearest and bilinear, forward and forward + backward) on feature maps as a decoder or a
// DCGAN upsamples them, or with --pad P of the four padding modes of an image-to-image generator
// (peer: bench/peer_resize_cpu.py, the same flags).
#include <mpx/mpx.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace mpx;

int main(int argc, char** argv) {
  int64_t n = 16, c = 64, h = 64, w = 64, reps = 11, padding = 0;
  double scale = 2.0;
  std::string dtype = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--shape") && std::sscanf(argv[i + 1], "%ld,%ld,%ld,%ld", &n, &c, &h, &w) == 4) continue;
    if (!std::strcmp(argv[i], "--scale")) scale = std::stod(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
    else if (!std::strcmp(argv[i], "--pad")) padding = std::stoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--shape N,C,H,W] [--scale S] [--dtype f32|bf16] [--pad P] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  const DType dt = dtype == "bf16" ? kBFloat16 : kFloat32;
  manual_seed(0);
  const Tensor x0 = randn({n, c, h, w}).to(dt);
  const std::vector<const char*> modes = padding ? std::vector<const char*>{"reflect", "replicate", "circular", "constant"}
                                                 : std::vector<const char*>{"nearest", "bilinear"};
  for (const char* mode : modes) {
    for (const bool backward : {false, true}) {
      std::vector<double> ms;
      double sum = 0;
      for (int64_t r = 0; r < reps; ++r) {
        Tensor x = x0.detach().set_requires_grad(backward);
        const auto t0 = std::chrono::steady_clock::now();
        Tensor y = padding ? pad(x, {padding, padding, padding, padding}, mode) : interpolate(x, {}, {scale}, mode);
        if (backward) y.backward(ones_like(y));
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        if (r == 0) sum = (backward ? x.grad() : y).to(kFloat64).sum().item<double>();
      }
      std::sort(ms.begin(), ms.end());
      std::printf("mpx %s %s %s [%ld,%ld,%ld,%ld] %s%g %s: %.2f ms (median of %ld, min %.2f), sum %.6g\n",
                  padding ? "pad" : "interpolate", mode, dtype.c_str(), n, c, h, w, padding ? "pad " : "x",
                  padding ? double(padding) : scale, backward ? "forward+backward" : "forward", ms[ms.size() / 2],
                  reps, ms[0], sum);
    }
  }
  return 0;
}
