// A two-rank program whose rank 1 goes silent or dies in the middle of training steps (CTest fault cases).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <mpx/c10d.h>
#include <mpx/mpx.h>

namespace dist = mpx::distributed;
namespace F = mpx::nn::functional;

namespace {
void stall_or_die(const char* mode) {
  if (std::strstr(mode, "dead")) _exit(7);  // no MPI_Finalize: a crash, as far as MPI can tell
  std::this_thread::sleep_for(std::chrono::seconds(40));  // longer than the test's limit
}
}  // namespace

// Modes: silent, dead (raw all-reduces); silent_ddp (rank 1 stops before backward, so rank 0
// waits inside DDP's bucket all-reduce, in the middle of its backward); c10d_abort (rank 1 calls
// LibTorch's ProcessGroup::abort() while rank 0 waits in an allreduce: the whole job must end).
int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "silent";
  dist::init();
  try {
    if (std::strstr(mode, "c10d_abort")) {
      auto pg = c10d::ProcessGroupMPI::createProcessGroupMPI();
      std::vector<mpx::Tensor> t = {mpx::ones({1024})};
      for (int step = 0; step < 5; ++step) {
        if (pg->getRank() == 1 && step == 2) {
          std::printf("fault test: rank 1 calls abort\n");
          pg->abort();
        }
        pg->allreduce(t)->wait();
      }
    } else if (std::strstr(mode, "ddp")) {
      mpx::nn::Sequential net(mpx::nn::Linear(8, 8), mpx::nn::ReLU(), mpx::nn::Linear(8, 2));
      mpx::nn::DistributedDataParallel ddp(net);
      for (int step = 0; step < 5; ++step) {
        auto loss = F::cross_entropy(ddp(mpx::randn({4, 8})), mpx::zeros({4}, mpx::kInt64));
        if (dist::rank() == 1 && step == 2) stall_or_die(mode);
        loss.backward();
      }
    } else {
      auto t = mpx::ones({1024});
      for (int step = 0; step < 5; ++step) {
        if (dist::rank() == 1 && step == 2) stall_or_die(mode);
        dist::all_reduce(t);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d caught: %s\n", dist::rank(), e.what());
    return 1;  // the exit handler aborts the job, which ends the silent rank too
  }
  std::printf("fault test: finished normally\n");
  return 0;
}
