// A two-rank program whose rank 1 goes silent or dies in the middle of training steps (CTest fault cases).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <mpx/mpx.h>

int main(int argc, char** argv) {
  namespace dist = mpx::distributed;
  const char* mode = argc > 1 ? argv[1] : "silent";
  dist::init();
  auto t = mpx::ones({1024});
  for (int step = 0; step < 5; ++step) {
    if (dist::rank() == 1 && step == 2) {
      if (std::strcmp(mode, "dead") == 0) _exit(7);  // no MPI_Finalize: a crash, as far as MPI can tell
      std::this_thread::sleep_for(std::chrono::seconds(40));  // longer than the test's limit
    }
    try {
      dist::all_reduce(t);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d caught: %s\n", dist::rank(), e.what());
      return 1;  // the exit handler aborts the job, which ends the silent rank too
    }
  }
  std::printf("fault test: finished normally\n");
  return 0;
}
