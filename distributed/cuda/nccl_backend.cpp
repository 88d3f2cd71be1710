// The CUDA module's NCCL transport for CUDA tensors: one communicator per process, its unique id broadcast over MPI.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "core/cuda.h"
#include "distributed/backend.h"

namespace mpx::distributed::detail {
namespace {

ncclComm_t g_comm = nullptr;
int g_device = -1;

void check_nccl(ncclResult_t r, const std::string& what) {
  MPX_CHECK(r == ncclSuccess, "mpx distributed: NCCL ", what, " failed: ", ncclGetErrorString(r),
            " (NCCL_DEBUG=WARN prints NCCL's own diagnosis)");
}

ncclDataType_t nccl_type(DType t, const std::string& what) {
  switch (t) {
    case kFloat32: return ncclFloat32;
    case kFloat64: return ncclFloat64;
    case kFloat16: return ncclFloat16;
    case kBFloat16: return ncclBfloat16;
    case kInt64: return ncclInt64;
    case kInt32: return ncclInt32;
    case kUInt8: case kBool: return ncclUint8;
  }
  MPX_ERROR("distributed: ", what, ": no NCCL type for ", dtype_name(t));
}

// One communicator, made on the first CUDA collective: all ranks reach it in the same order,
// because collectives are issued in program order everywhere.
void ensure_comm(const Tensor& t, const Topology& topo) {
  const int dev = t.device().index;
  if (g_comm) {
    MPX_CHECK(dev == g_device, "distributed: a collective on cuda:", dev, " but this rank's NCCL communicator is on "
              "cuda:", g_device, "; one process drives one GPU (pick it with LOCAL_RANK before the first collective)");
    return;
  }
  ncclUniqueId id;
  if (topo.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (topo.world > 1) {
    Tensor bytes = zeros({static_cast<int64_t>(sizeof(id))}, kUInt8);
    if (topo.rank == 0) std::memcpy(bytes.raw_data(), &id, sizeof(id));
    broadcast(bytes, 0);  // over MPI
    std::memcpy(&id, bytes.raw_data(), sizeof(id));
  }
  cuda::DeviceGuard guard(dev);
  check_nccl(ncclCommInitRank(&g_comm, topo.world, id, topo.rank), "ncclCommInitRank");
  g_device = dev;
}

struct Nccl final : NcclTransport {
  std::string version() override;
  bool submit(const Tensor& t, RawOp op, const std::shared_ptr<Work::State>& state, const Topology& topo) override;
  void finalize() override;
};

std::string Nccl::version() {
  int v = 0;
  ncclGetVersion(&v);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

bool Nccl::submit(const Tensor& t, RawOp op, const std::shared_ptr<Work::State>& state, const Topology& topo) {
  ensure_comm(t, topo);
  cuda::DeviceGuard guard(g_device);
  auto stream = static_cast<cudaStream_t>(cuda::current_stream(g_device).handle);
  const ncclDataType_t type = nccl_type(op.dtype, op.what);
  ncclResult_t r = ncclSuccess;
  switch (op.kind) {
    case RawOp::Kind::AllReduce:
      r = ncclAllReduce(op.buffer, op.buffer, op.count, type,
                        op.op == ReduceOp::Max ? ncclMax : op.average ? ncclAvg : ncclSum, g_comm, stream);
      break;
    case RawOp::Kind::Broadcast: r = ncclBroadcast(op.buffer, op.buffer, op.count, type, op.root, g_comm, stream); break;
    case RawOp::Kind::AllGather: r = ncclAllGather(op.buffer, op.recv, op.count, type, g_comm, stream); break;
    case RawOp::Kind::Barrier: return false;
  }
  check_nccl(r, op.what);
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  cudaEventRecord(ev, stream);
  const double limit = timeout();
  const std::string what = op.what + " on rank " + std::to_string(topo.rank);
  // The host waits on an event, polled so a lost peer becomes an error instead of a hang.
  state->device_wait = [ev, limit, what] {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      cudaError_t q = cudaEventQuery(ev);
      if (q == cudaSuccess) break;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(g_comm, &async);
      const bool late = std::chrono::steady_clock::now() - start > std::chrono::duration<double>(limit);
      if (q != cudaErrorNotReady || async != ncclSuccess || late) {
        ncclCommAbort(g_comm);
        g_comm = nullptr;
        MPX_ERROR("mpx distributed: NCCL ", what, late ? " timed out" : " failed", " (", cudaGetErrorString(q), ", ",
                  ncclGetErrorString(async), "); a peer rank died or stopped calling collectives");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    cudaEventDestroy(ev);
  };
  state->complete("", 0);
  return true;
}

void Nccl::finalize() {
  if (g_comm) ncclCommDestroy(g_comm);
  g_comm = nullptr;
}

struct Install {
  Install() {
    static Nccl nccl;
    install_nccl(&nccl);
  }
} install;

}  // namespace

}  // namespace mpx::distributed::detail
