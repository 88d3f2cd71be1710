// ResNet-50 training throughput on the GPU at O0-O3 (synthetic 224x224 data, channels-last);
// the peer of bench/peer_resnet50_cuda.py. Prints a table and CSV lines.
#include <mpx/mpx.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {

void run(const std::string& level, DType low, int64_t batch, int windows, int steps_per_window) {
  amp::reset();
  manual_seed(0);
  const Device gpu = Device::cuda();
  auto net = models::create("resnet50");
  net.ptr()->to(gpu);
  net.ptr()->to(MemoryFormat::ChannelsLast);
  optim::SGD opt(net.ptr()->parameters(), optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
  amp::initialize(net, opt, amp::Options().opt_level(level).dtype(low).verbosity(0));
  // O0 compares with PyTorch's defaults for f32 convolutions, which use TF32.
  cuda::allow_tf32(level == "O0");
  const Tensor x = randn({batch, 3, 224, 224}).to(gpu).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = randint(0, 1000, {batch}).to(gpu);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(net(x), y);
    amp::scale_loss(loss, opt).backward();
    opt.step();
  };
  const int64_t fallbacks_before = cuda::cudnn_fallbacks();
  for (int i = 0; i < 3; ++i) step();
  const int64_t fallbacks = cuda::cudnn_fallbacks() - fallbacks_before;
  const int64_t conv_before = cuda::layout_conversions();
  step();
  const int64_t conversions = cuda::layout_conversions() - conv_before;
  cuda::synchronize();
  cuda::reset_peak_memory_stats();
  std::vector<double> per_s;
  cuda::Event a, b;
  for (int w = 0; w < windows; ++w) {
    a.record();
    for (int i = 0; i < steps_per_window; ++i) step();
    b.record();
    b.synchronize();
    per_s.push_back(static_cast<double>(batch * steps_per_window) / (a.elapsed_ms(b) / 1000.0));
  }
  std::sort(per_s.begin(), per_s.end());
  const double med = per_s[per_s.size() / 2];
  const double peak_gib = static_cast<double>(cuda::memory_stats().peak_allocated) / (1 << 30);
  std::printf("resnet50 %-3s %-4s batch %lld: %8.0f images/s (spread %.0f-%.0f), peak %.1f GiB, %lld layout "
              "conversions/step\n", level.c_str(), dtype_name(low), static_cast<long long>(batch), med, per_s.front(),
              per_s.back(), peak_gib, static_cast<long long>(conversions));
  std::printf("csv,mpx_resnet50,%s,%s,%lld,%.1f,%.2f\n", level.c_str(), dtype_name(low),
              static_cast<long long>(batch), med, peak_gib);
  if (fallbacks > 0)
    std::printf("  %lld cuDNN fallbacks to slower kernels, the last: %s\n", static_cast<long long>(fallbacks),
                cuda::cudnn_last_fallback().c_str());
  std::fflush(stdout);
  amp::reset();
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_is_available()) {
    std::fprintf(stderr, "bench_resnet50_cuda: no CUDA device is visible; run it on a GPU machine\n");
    return 1;
  }
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 256;
  try {
    std::printf("%s, %s, cuDNN %s\n", cuda::device_properties().name.c_str(), cuda::version_string().c_str(),
                cuda::cudnn_version().c_str());
    for (const char* level : {"O0", "O1", "O2", "O3"}) run(level, kFloat16, batch, 3, 5);
    run("O1", kBFloat16, batch, 3, 5);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_resnet50_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
