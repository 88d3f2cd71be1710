// Data-parallel CPU throughput: ResNet-18 (small input) under DDP; run it with mpirun -np 1 and -np 2.
#include <mpx/mpx.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sys/resource.h>
#include <string>
#include <vector>

using namespace mpx;
namespace F = mpx::nn::functional;
namespace dist = mpx::distributed;

// This process's CPU time (user + system, every thread): unlike wall time, another tenant's load
// barely moves it, so it shows what DDP itself costs per step.
static double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static int time_allreduce(double mb, int warmup, int steps) {
  Tensor g = ones({static_cast<int64_t>(mb * (1 << 20) / 4)});
  std::vector<double> times;
  for (int s = 0; s < warmup + steps; ++s) {
    dist::barrier();
    const auto t0 = std::chrono::steady_clock::now();
    dist::all_reduce(g);
    if (s >= warmup) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  if (dist::rank() == 0)
    std::printf("all_reduce f32 %.1f MB, %d ranks: median %.4f s of %d (%.2f GB/s of buffer)\n", mb, dist::world_size(),
                times[times.size() / 2], steps, mb / 1024 / times[times.size() / 2]);
  return 0;
}

int main(int argc, char** argv) {
  int64_t batch = 32;  // per rank
  int warmup = 2, steps = 8;
  double bucket_mb = 25;
  bool use_ddp = true;
  double allreduce_mb = 0;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", flag); std::exit(2); }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--batch")) batch = std::stoll(next("--batch"));
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::stoi(next("--warmup"));
    else if (!std::strcmp(argv[i], "--steps")) steps = std::stoi(next("--steps"));
    else if (!std::strcmp(argv[i], "--bucket-mb")) bucket_mb = std::stod(next("--bucket-mb"));
    // Every rank trains alone (no gradient averaging): the scaling the machine allows without
    // communication, to tell DDP's cost from the ranks' competition for cores and memory.
    else if (!std::strcmp(argv[i], "--no-ddp")) use_ddp = false;
    // Times all_reduce alone on a buffer of that many MB (f32), ResNet-18's gradients being 45 MB.
    else if (!std::strcmp(argv[i], "--allreduce-mb")) allreduce_mb = std::stod(next("--allreduce-mb"));
    else {
      std::fprintf(stderr, "usage: [mpirun -np N] %s [--batch PER_RANK] [--warmup N] [--steps N] [--bucket-mb MB] [--no-ddp] [--allreduce-mb MB]\n",
                   argv[0]);
      return 2;
    }
  }
  dist::init();
  const int world = dist::world_size(), rank = dist::rank();
  if (allreduce_mb > 0) return time_allreduce(allreduce_mb, warmup, steps);
  manual_seed(0);
  models::ResNet net = models::resnet18(models::ResNetOptions().in_channels(1).num_classes(10).small_input(true));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9).weight_decay(5e-4));
  std::optional<nn::DistributedDataParallel> ddp;
  if (use_ddp) ddp.emplace(net, nn::DDPOptions().bucket_cap_mb(bucket_mb));
  manual_seed(1 + rank);
  Tensor x = randn({batch, 1, 28, 28});
  Tensor y = randint(0, 10, {batch});
  std::vector<double> times;
  double comm = 0, waited = 0, cpu = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    dist::barrier();  // steps start together, so a step's time is the slowest rank's
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    opt.zero_grad();
    F::cross_entropy(use_ddp ? (*ddp)(x) : net(x), y).backward();
    opt.step();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) {
      times.push_back(dt);
      cpu += cpu_seconds() - c0;
      if (use_ddp) {
        comm += (*ddp)->stats().allreduce_seconds;
        waited += (*ddp)->stats().wait_seconds;
      }
    }
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  if (rank == 0) {
    const char* th = std::getenv("OMP_NUM_THREADS");
    std::printf("%s resnet18 (1x28x28) ranks %d threads/rank %s batch %lld/rank buckets %lld: %.1f images/s "
                "(median step %.3f s of %d, CPU %.3f s/step on rank 0); all-reduce %.3f s/step, of which hidden behind backward %.0f %%\n",
                use_ddp ? "ddp" : "independent", world, th ? th : "default", static_cast<long long>(batch),
                use_ddp ? static_cast<long long>((*ddp)->stats().buckets) : 0LL, world * batch / med, med, steps, cpu / steps,
                comm / steps, comm > 0 ? 100.0 * std::max(0.0, 1.0 - waited / comm) : 100.0);
  }
  return 0;
}
