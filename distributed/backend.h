// Internal: what the process group asks of its transports (MPI on a worker thread, NCCL).
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "distributed/process_group.h"

namespace mpx::distributed {

/// Shared by a Work handle, the caller and the transport that completes it.
struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;       // the transport finished (or failed)
  bool finished = false;   // finish() ran on the waiting thread
  std::string error;       // set on failure
  double backend_seconds = 0;
  /// Runs once on the thread that waits: copies results back into the caller's tensors.
  std::function<void()> finish;
  /// Transport-specific wait (NCCL: an event on the stream); null for the MPI worker.
  std::function<void()> device_wait;
  tensor_list result;
  void complete(std::string err, double seconds) {
    {
      std::lock_guard<std::mutex> lock(mu);
      error = std::move(err);
      backend_seconds = seconds;
      done = true;
    }
    cv.notify_all();
  }
};

namespace detail {

/// One collective on raw, contiguous host memory.
struct RawOp {
  enum class Kind { AllReduce, Broadcast, AllGather, Barrier } kind = Kind::Barrier;
  void* buffer = nullptr;  // in/out (all_reduce, broadcast) or the send buffer (all_gather)
  void* recv = nullptr;    // all_gather: world_size * count elements
  int64_t count = 0;       // elements of `dtype`
  DType dtype = kFloat32;
  ReduceOp op = ReduceOp::Sum;  // Sum or Max; Avg arrives as Sum with `average` set
  bool average = false;         // MPI: the caller divides afterwards; NCCL: ncclAvg
  int root = 0;
  std::string what;  // "all_reduce #12 (f32, 4096 elements)" for errors
};

struct Topology {
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
};

/// True when a launcher (mpirun, srun with PMI/PMIx) started this process.
bool launched_by_mpi();

/// MPI lives in its own module (libmpx_mpi), loaded by the first of these calls that needs it,
/// so a program that is not started by mpirun never maps the MPI libraries.
struct MpiTransport {
  virtual ~MpiTransport() = default;
  virtual std::string version() = 0;
  virtual Topology init(double timeout_seconds) = 0;
  virtual void submit(RawOp op, std::shared_ptr<Work::State> state) = 0;
  virtual void set_timeout(double seconds) = 0;
  virtual void finalize() = 0;
  /// Ends every rank of the job now (MPI_Abort with `code`); does not return.
  [[noreturn]] virtual void abort(int code) = 0;
};
/// Why MPI cannot be used ("" when it can): not built, or the module did not load.
std::string mpi_problem();
/// MPI_Init (threads serialized through one worker) and the ranks; throws when MPI cannot be used.
Topology mpi_init(double timeout_seconds);
/// Queues `op` on the MPI worker; `state` is completed (or failed, with a message) from there.
void mpi_submit(RawOp op, std::shared_ptr<Work::State> state);
void mpi_set_timeout(double seconds);
/// Stops the worker and finalizes MPI; aborts the job instead when a collective timed out or failed.
void mpi_finalize();
/// Ends the whole job with `code`: MPI_Abort when MPI is running, else this process's exit.
[[noreturn]] void mpi_abort(int code);
bool mpi_compiled();
std::string mpi_version();

/// NCCL: CUDA tensors, through the CUDA module, which installs its transport as it loads.
/// nccl_submit returns false when there is none.
struct NcclTransport {
  virtual ~NcclTransport() = default;
  virtual std::string version() = 0;
  virtual bool submit(const Tensor& tensor, RawOp op, const std::shared_ptr<Work::State>& state,
                      const Topology& topo) = 0;
  virtual void finalize() = 0;
};
void install_nccl(NcclTransport* transport);
/// Loads the CUDA module to answer (a question about CUDA tensors).
bool nccl_compiled();
std::string nccl_version();
bool nccl_submit(const Tensor& tensor, RawOp op, const std::shared_ptr<Work::State>& state, const Topology& topo);
/// Destroys the communicator if the module is loaded; never loads it.
void nccl_finalize();

}  // namespace detail
}  // namespace mpx::distributed
