// The process group: rank/world size and collectives (MPI for CPU tensors, NCCL for CUDA tensors).
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace mpx::distributed {

/// How all_reduce combines the ranks' tensors. Avg is the sum divided by the world size.
enum class ReduceOp { Sum, Avg, Max };

/// Options for init(); chained setters.
struct InitOptions {
  /// Seconds one collective may wait for the other ranks before it fails with an error naming
  /// the operation and this rank. Default: $MPX_DISTRIBUTED_TIMEOUT when set, else 600.
  double timeout_seconds = 0;
  InitOptions& timeout(double seconds) { timeout_seconds = seconds; return *this; }
};

/// Joins the process group. Under `mpirun` (Open MPI, or any launcher that sets PMI/PMIx
/// variables) every rank joins MPI_COMM_WORLD; RANK, WORLD_SIZE and LOCAL_RANK, where set,
/// must agree with it, and are set from MPI's view where unset (amp prints on rank 0 only by
/// reading them). Started without a launcher (and WORLD_SIZE unset or 1) the process is
/// rank 0 of a world of size 1 and MPI is not started at all. Calling init() twice is a no-op.
/// Collectives call init() themselves when it has not been called.
void init(const InitOptions& options = {});
/// Leaves the process group (MPI_Finalize). Runs at exit by itself; after a timeout or a lost
/// peer it aborts the whole job instead (MPI_Abort), so the other ranks end too.
void finalize();
bool is_initialized();
/// This process's rank in [0, world_size()).
int rank();
int world_size();
/// Rank among the processes on this machine (LOCAL_RANK, or what the launcher says).
int local_rank();
/// Ranks on this machine.
int local_world_size();
/// True when the library was built with MPI (-DMPX_DISTRIBUTED); without it only world size 1 works.
bool mpi_available();
/// True when the library was built with NCCL (CUDA tensors then reduce on the GPU).
bool nccl_available();
/// One line for `mpx info`: the MPI library and NCCL versions, or why distributed is off.
std::string backend_info();

/// The collective timeout in seconds, and a way to change it (every rank should use the same).
double timeout();
void set_timeout(double seconds);

/// A collective started by an *_async call. wait() blocks until it is done and throws
/// mpx::Error when it failed or timed out; results are in the tensors only after wait().
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  /// Blocks until the collective completed; then writes results back where needed.
  void wait();
  /// True once the collective has finished (wait() then does not block).
  bool is_completed() const;
  /// Seconds the collective spent in the backend, from its start to its completion (0 before).
  double seconds_in_backend() const;
  /// all_gather_async's tensors, one per rank (after wait()); empty for the other collectives.
  const tensor_list& result() const;
  bool defined() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

/// Combines `tensor` over all ranks in place. Floating dtypes and i32/i64 (Sum, Max). On the CPU,
/// f16/bf16 tensors are reduced in f32 and rounded once.
void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
Work all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
/// Copies rank `root`'s tensor into every rank's `tensor` (any dtype; same shape everywhere).
void broadcast(const Tensor& tensor, int root = 0);
Work broadcast_async(const Tensor& tensor, int root = 0);
/// Every rank's tensor, in rank order (same shape and dtype on every rank).
tensor_list all_gather(const Tensor& tensor);
/// all_gather started; the tensors are in the work's result() after wait().
Work all_gather_async(const Tensor& tensor);
/// Waits until every rank has reached the barrier (subject to the timeout).
void barrier();

}  // namespace mpx::distributed
