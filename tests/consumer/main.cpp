// Out-of-tree consumer: builds against the installed package, runs a tiny training step, and shows that a CPU program maps no CUDA or MPI library.
#include <mpx/mpx.h>

#include <cstdio>
#include <fstream>
#include <string>

// The consumer's headers of the same paths as mpx's own: each include finds its own file.
#include "core/tensor.h"
#include "data/data.h"

static_assert(CONSUMER_CORE_TENSOR == 1 && CONSUMER_DATA_DATA == 1, "the consumer's own headers");

int main() {
  consumer::Tensor mine;
  mpx::manual_seed(0);
  mpx::Tensor w = mpx::randn({3, 2}).set_requires_grad(true);
  mpx::Tensor x = mpx::ones({4, 3});
  mpx::Tensor loss = mpx::mean(mpx::matmul(x, w) * 2.0);
  loss.backward();
  if (!w.grad().defined() || w.grad().sizes() != mpx::IntList{3, 2} || mine.rank != 0) return 1;
  // A program that never touches a GPU nor runs under mpirun maps no CUDA and no MPI library: libmpx
  // loads those engines' modules on first use.
  const char* engine_libs[] = {"libcudart", "libcublas", "libcudnn", "libnccl", "libnvjpeg", "libmpx_cuda", "libmpi", "libmpx_mpi"};
  auto mapped = [](const char* lib) {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);)
      if (line.find(lib) != std::string::npos) return true;
    return false;
  };
  for (const char* lib : engine_libs)
    if (mapped(lib)) {
      std::printf("consumer: %s is mapped although nothing asked for CUDA or MPI\n", lib);
      return 1;
    }
  std::string rss;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) rss = line.substr(6);
  std::printf("consumer ok: loss %.4f; peak resident memory%s, no CUDA or MPI library mapped\n", loss.item<double>(), rss.c_str());
#ifdef MPX_WITH_CUDA
  // Asking for CUDA loads the installed module from beside the installed libmpx.
  (void)mpx::cuda_device_count();
  if (!mapped("libmpx_cuda")) {
    std::printf("consumer: asking for CUDA devices did not load libmpx_cuda.so: %s\n", mpx::cuda::version_string().c_str());
    return 1;
  }
  std::printf("consumer: CUDA module loaded on demand: %s\n", mpx::cuda::version_string().c_str());
#endif
  return 0;
}
