// GPU figures of the fused amp kernels (bandwidth against a device-to-device copy) and of an MLP
// training step at O0-O3; the peer of bench/peer_mlp_cuda.py. Prints a table and CSV lines.
#include <mpx/mpx.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cuda_timing.h"

using namespace mpx;
using bench::median_ms;
namespace F = mpx::nn::functional;

namespace {

void bandwidth() {
  const Device gpu = Device::cuda();
  // Copy ceiling: 1 GiB of f32, counting bytes read plus bytes written.
  Tensor big = rand({int64_t{1} << 28}).to(gpu), dst = empty({int64_t{1} << 28}, TensorOptions().device(gpu));
  const double copy_ms = median_ms([&] { dst.copy_(big); });
  const double copy_gbs = 2.0 * 4.0 * static_cast<double>(big.numel()) / (copy_ms * 1e6);
  big = dst = Tensor();

  // ResNet-50's parameter shapes: the tensor list an optimizer of a real model steps over.
  NoGradGuard ng;
  auto net = models::create("resnet50");
  tensor_list master, grad16, model16, mom, exp_avg, exp_avg_sq, out32;
  int64_t n = 0;
  for (const Tensor& p : net.ptr()->parameters()) {
    n += p.numel();
    master.push_back(p.to(gpu));
    grad16.push_back(randn(p.sizes()).to(kFloat16).to(gpu));
    model16.push_back(master.back().to(kFloat16));
    mom.push_back(zeros(p.sizes(), TensorOptions().device(gpu)));
    exp_avg.push_back(zeros(p.sizes(), TensorOptions().device(gpu)));
    exp_avg_sq.push_back(zeros(p.sizes(), TensorOptions().device(gpu)));
    out32.push_back(empty(p.sizes(), TensorOptions().device(gpu)));
  }
  const Tensor inv = scalar_tensor(1.0 / 65536, TensorOptions().device(gpu));
  const Tensor found = zeros({}, TensorOptions().device(gpu));

  kernels::StepTensors ts;
  ts.params = master;
  ts.grads = grad16;
  ts.models = model16;
  ts.found_inf = found;
  ts.inv_scale = inv;
  for (size_t i = 0; i < master.size(); ++i) {
    ts.steps.push_back(1);
    ts.fresh.push_back(0);
  }
  kernels::StepTensors adam = ts;
  ts.states = {mom};
  adam.states = {exp_avg, exp_avg_sq};
  auto sgd_fn = dispatch::kernel<kernels::SgdStepFn>(OpId::sgd_step, gpu, kFloat32);
  auto adam_fn = dispatch::kernel<kernels::AdamStepFn>(OpId::adam_step, gpu, kFloat32);
  kernels::SgdHyper sh;
  sh.lr = 0.1;
  sh.momentum = 0.9;
  kernels::AdamHyper ah;
  ah.lr = 1e-3;

  struct Row {
    const char* name;
    double bytes_per_elem;
    std::function<void()> f;
  };
  const Row rows[] = {
      {"check f16 grads (found_inf only)", 2, [&] { unscale_check_inf_(grad16, {}, inv, found); }},
      {"unscale f16 grads -> f32", 6, [&] { unscale_check_inf_(grad16, out32, inv, found); }},
      {"SGD momentum, f32 master + f16 model", 20, [&] { sgd_fn(ts, sh); }},
      {"Adam, f32 master + f16 model", 28, [&] { adam_fn(adam, ah); }},
  };
  std::printf("\nfused amp kernels over ResNet-50's %zu parameters (%lld elements); copy ceiling %.0f GB/s\n",
              master.size(), static_cast<long long>(n), copy_gbs);
  // "eager" includes the host's argument checks and launches as a lone call sees them; "device"
  // is the kernels' own time: ten calls captured in a CUDA graph, replayed back to back.
  std::printf("%-40s %10s %10s %10s %8s\n", "kernel", "eager ms", "device ms", "GB/s", "of copy");
  for (const Row& r : rows) {
    const double eager = median_ms(r.f);
    cuda::Graph g;
    g.capture_begin();
    for (int i = 0; i < 10; ++i) r.f();
    g.capture_end();
    const double ms = median_ms([&] { g.replay(); }) / 10.0;
    const double gbs = r.bytes_per_elem * static_cast<double>(n) / (ms * 1e6);
    std::printf("%-40s %10.3f %10.3f %10.0f %7.0f%%\n", r.name, eager, ms, gbs, 100.0 * gbs / copy_gbs);
    std::printf("csv,amp_kernel,%s,%.4f,%.4f,%.1f,%.3f\n", r.name, eager, ms, gbs, gbs / copy_gbs);
  }
}

// An MLP step at an opt level: forward, cross-entropy, scaled backward, fused optimizer step.
struct MlpImpl : nn::Module {
  nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr};
  MlpImpl(int64_t in, int64_t hidden, int64_t classes) {
    l1 = register_module("l1", nn::Linear(in, hidden));
    l2 = register_module("l2", nn::Linear(hidden, hidden));
    l3 = register_module("l3", nn::Linear(hidden, classes));
  }
  Tensor forward(const Tensor& x) { return l3(relu(l2(relu(l1(x))))); }
};
MPX_MODULE(Mlp);

void mlp(const std::string& level, DType low, int64_t batch) {
  amp::reset();
  manual_seed(0);
  Mlp net(1024, 4096, 1000);
  net->to(Device::cuda());
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  amp::initialize(net, opt, amp::Options().opt_level(level).dtype(low).verbosity(0));
  const Tensor x = randn({batch, 1024}).to(Device::cuda());
  const Tensor y = randint(0, 1000, {batch}).to(Device::cuda());
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(net(x), y);
    amp::scale_loss(loss, opt).backward();
    opt.step();
  };
  std::vector<double> per_s;
  for (int w = 0; w < 5; ++w) {
    const double ms = median_ms(step, w == 0 ? 10 : 2, 10);
    per_s.push_back(static_cast<double>(batch) / (ms / 1000.0));
  }
  std::sort(per_s.begin(), per_s.end());
  const double med = per_s[per_s.size() / 2];
  std::printf("mlp %-3s %-4s batch %lld: %10.0f samples/s (spread %.0f-%.0f)\n", level.c_str(), dtype_name(low),
              static_cast<long long>(batch), med, per_s.front(), per_s.back());
  std::printf("csv,mpx_mlp,%s,%s,%lld,%.1f\n", level.c_str(), dtype_name(low), static_cast<long long>(batch), med);
  amp::reset();
}

// torch.amp's recipe (autocast + GradScaler): nothing in the step waits for the host except
// the loss's target check, so it can also be captured once as a CUDA graph and replayed.
void mlp_autocast(DType low, int64_t batch, bool graph) {
  manual_seed(0);
  Mlp net(1024, 4096, 1000);
  net->to(Device::cuda());
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  amp::GradScaler scaler;
  const Tensor x = randn({batch, 1024}).to(Device::cuda());
  const Tensor y = randint(0, 1000, {batch}).to(Device::cuda());
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard ac(low);
      loss = F::cross_entropy(net(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  std::function<void()> timed = step;
  cuda::Graph g;
  if (graph) {
    for (int i = 0; i < 3; ++i) step();
    g.capture_begin();
    step();
    g.capture_end();
    timed = [&] { g.replay(); };
  }
  std::vector<double> per_s;
  for (int w = 0; w < 5; ++w) {
    const double ms = median_ms(timed, w == 0 ? 10 : 2, 10);
    per_s.push_back(static_cast<double>(batch) / (ms / 1000.0));
  }
  std::sort(per_s.begin(), per_s.end());
  const double med = per_s[per_s.size() / 2];
  const char* name = graph ? "O1-autocast-graph" : "O1-autocast";
  std::printf("mlp %-17s %-4s batch %lld: %10.0f samples/s (spread %.0f-%.0f)\n", name, dtype_name(low),
              static_cast<long long>(batch), med, per_s.front(), per_s.back());
  std::printf("csv,mpx_mlp,%s,%s,%lld,%.1f\n", name, dtype_name(low), static_cast<long long>(batch), med);
}

}  // namespace

int main() {
  if (!cuda_is_available()) {
    std::fprintf(stderr, "bench_amp_cuda: no CUDA device is visible; run it on a GPU machine\n");
    return 1;
  }
  try {
    std::printf("%s, %s\n", cuda::device_properties().name.c_str(), cuda::version_string().c_str());
    bandwidth();
    std::printf("\nMLP 1024-4096-4096-1000, SGD momentum, synthetic data\n");
    for (int64_t batch : {512, 4096}) {
      for (const char* level : {"O0", "O1", "O2", "O3"}) mlp(level, kFloat16, batch);
      for (const char* level : {"O1", "O2", "O3"}) mlp(level, kBFloat16, batch);
      for (bool graph : {false, true}) mlp_autocast(kFloat16, batch, graph);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_amp_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
