// The process group's side of MPI: the launcher check, and the MPI module (libmpx_mpi) loaded when a launcher started this process.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/module.h"
#include "distributed/backend.h"

namespace mpx::distributed::detail {
namespace {
std::atomic<MpiTransport*> g_mpi{nullptr};  // set once, inside the call_once below
std::string g_problem;
std::once_flag g_once;

MpiTransport* mpi() {
  std::call_once(g_once, [] {
#ifndef MPX_WITH_MPI
    g_problem = "mpx was built without MPI (" MPX_DISTRIBUTED_WHY "); install Open MPI (libopenmpi-dev) and rebuild "
                "with -DMPX_DISTRIBUTED=ON";
#else
    std::string err;
    // Global: Open MPI loads its own plugins, which need libmpi's symbols visible to them.
    if (auto entry = reinterpret_cast<MpiTransport* (*)()>(mpx::detail::load_module("mpx_mpi", "mpx_mpi_transport", true, err)))
      g_mpi.store(entry());
    else
      g_problem = "the MPI module libmpx_mpi.so did not load (" + err +
                  "); install it beside libmpx.so with the MPI library it needs (ldd libmpx_mpi.so)";
#endif
  });
  return g_mpi.load();
}
// Only once loaded: finalizing or retiming an MPI nobody started must not load it.
MpiTransport* loaded() { return g_mpi.load(); }
}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

std::string mpi_problem() {
  mpi();
  return g_problem;
}
bool mpi_compiled() { return mpi() != nullptr; }
std::string mpi_version() { return mpi() ? mpi()->version() : "none"; }
Topology mpi_init(double timeout_seconds) {
  MpiTransport* m = mpi();
  MPX_CHECK(m, "distributed: ", g_problem);
  return m->init(timeout_seconds);
}
void mpi_submit(RawOp op, std::shared_ptr<Work::State> state) {
  MpiTransport* m = mpi();
  if (!m) {
    state->complete("distributed: " + op.what + " needs MPI: " + g_problem, 0);
    return;
  }
  m->submit(std::move(op), std::move(state));
}
void mpi_set_timeout(double seconds) {
  if (MpiTransport* m = loaded()) m->set_timeout(seconds);
}
void mpi_finalize() {
  if (MpiTransport* m = loaded()) m->finalize();
}
void mpi_abort(int code) {
  std::fflush(nullptr);  // what the ranks printed before the end is the user's only clue
  if (MpiTransport* m = loaded()) m->abort(code);
  std::_Exit(code);
}

}  // namespace mpx::distributed::detail
