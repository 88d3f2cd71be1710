// The process group's side of NCCL: the transport the CUDA module installs, or none.
#include <atomic>

#include "core/cuda_backend.h"
#include "distributed/backend.h"

namespace mpx::distributed::detail {
namespace {
std::atomic<NcclTransport*> g_nccl{nullptr};
}

void install_nccl(NcclTransport* transport) { g_nccl.store(transport); }

bool nccl_compiled() {
  cuda::detail::backend();  // loads the module, whose NCCL transport (if built with one) installs itself
  return g_nccl.load() != nullptr;
}
std::string nccl_version() { return nccl_compiled() ? g_nccl.load()->version() : "none"; }
bool nccl_submit(const Tensor& tensor, RawOp op, const std::shared_ptr<Work::State>& state, const Topology& topo) {
  NcclTransport* t = g_nccl.load();  // a CUDA tensor exists, so the module is loaded
  return t && t->submit(tensor, std::move(op), state, topo);
}
void nccl_finalize() {
  if (NcclTransport* t = g_nccl.load()) t->finalize();
}

}  // namespace mpx::distributed::detail
