// CPU time of the layers of decoders and image-to-image generators, forward and forward + backward: interpolate
// (nearest and bilinear) as a decoder or a DCGAN upsamples, with --pad P the four padding modes, with --instance-norm
// an InstanceNorm2d (affine, running statistics, in the data's dtype) (peer: bench/peer_resize_cpu.py, the same flags).
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
  bool instance_norm = false;
  double scale = 2.0;
  std::string dtype = "f32";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool value = i + 1 < argc;
    if (arg == "--instance-norm") instance_norm = true;
    else if (arg == "--shape" && value && std::sscanf(argv[++i], "%ld,%ld,%ld,%ld", &n, &c, &h, &w) == 4) continue;
    else if (arg == "--scale" && value) scale = std::stod(argv[++i]);
    else if (arg == "--reps" && value) reps = std::stoll(argv[++i]);
    else if (arg == "--dtype" && value) dtype = argv[++i];
    else if (arg == "--pad" && value) padding = std::stoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--shape N,C,H,W] [--scale S] [--dtype f32|bf16] [--pad P | --instance-norm] "
                   "[--reps R]\n", argv[0]);
      return 2;
    }
  }
  const DType dt = dtype == "bf16" ? kBFloat16 : kFloat32;
  manual_seed(0);
  const Tensor x0 = randn({n, c, h, w}).to(dt);
  const std::vector<const char*> modes = instance_norm ? std::vector<const char*>{"affine"}
                                         : padding     ? std::vector<const char*>{"reflect", "replicate", "circular", "constant"}
                                                       : std::vector<const char*>{"nearest", "bilinear"};
  nn::InstanceNorm2d norm(nn::InstanceNormOptions(c).affine(true).track_running_stats(true));
  norm->to(dt);
  const char* what = instance_norm ? "instance_norm" : padding ? "pad" : "interpolate";
  for (const char* mode : modes) {
    for (const bool backward : {false, true}) {
      std::vector<double> ms;
      double sum = 0;
      for (int64_t r = 0; r < reps; ++r) {
        Tensor x = x0.detach().set_requires_grad(backward);
        const auto t0 = std::chrono::steady_clock::now();
        Tensor y = instance_norm ? norm(x)
                   : padding     ? pad(x, {padding, padding, padding, padding}, mode)
                                 : interpolate(x, {}, {scale}, mode);
        if (backward) y.backward(ones_like(y));
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        if (r == 0) sum = (backward ? x.grad() : y).to(kFloat64).sum().item<double>();
      }
      std::sort(ms.begin(), ms.end());
      char how[32] = "";
      if (padding) std::snprintf(how, sizeof how, " pad %ld", padding);
      else if (!instance_norm) std::snprintf(how, sizeof how, " x%g", scale);
      std::printf("mpx %s %s %s [%ld,%ld,%ld,%ld]%s %s: %.2f ms (median of %ld, min %.2f), sum %.6g\n", what, mode,
                  dtype.c_str(), n, c, h, w, how, backward ? "forward+backward" : "forward", ms[ms.size() / 2], reps,
                  ms[0], sum);
    }
  }
  return 0;
}
