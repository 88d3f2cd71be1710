// LibTorch's c10d process-group API (ProcessGroupMPI, Work, the option structs) over mpx::distributed.
#pragma once
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"

namespace mpx::c10d {

/// LibTorch's reduction names. SUM, AVG, MAX run as mpx::distributed's reductions; MIN and PRODUCT
/// gather every rank's tensor and reduce here (world-size times the memory); the bitwise ones and
/// PREMUL_SUM are refused with an error.
struct ReduceOp {
  enum RedOpType : uint8_t { SUM = 0, AVG = 1, PRODUCT = 2, MIN = 3, MAX = 4, BAND = 5, BOR = 6, BXOR = 7,
                             PREMUL_SUM = 8, UNUSED = 9 };
  ReduceOp() = default;
  ReduceOp(RedOpType op) : op_(op) {}  // NOLINT: implicit, as LibTorch's
  operator RedOpType() const { return op_; }
  RedOpType op_ = SUM;
};

/// Per-call timeouts are accepted and not applied, as in LibTorch's MPI backend: every collective
/// is bounded by the job-wide timeout (MPX_DISTRIBUTED_TIMEOUT, mpx::distributed::set_timeout).
inline constexpr std::chrono::milliseconds kNoTimeout{0};
inline constexpr std::chrono::milliseconds kUnsetTimeout{-1};

struct AllreduceOptions {
  ReduceOp reduceOp = ReduceOp::SUM;
  std::chrono::milliseconds timeout = kUnsetTimeout;
};
using AllreduceCoalescedOptions = AllreduceOptions;
struct BroadcastOptions {
  int64_t rootRank = 0;
  /// Which of the root's tensors is sent (when a call passes several, all receive it).
  int64_t rootTensor = 0;
  std::chrono::milliseconds timeout = kUnsetTimeout;
};
struct AllgatherOptions {
  std::chrono::milliseconds timeout = kUnsetTimeout;
};
struct BarrierOptions {
  std::vector<int64_t> device_ids;
  std::chrono::milliseconds timeout = kUnsetTimeout;
};

/// A collective in flight. wait() blocks until it is done and throws mpx::Error when it failed
/// (a peer gone, the job-wide timeout), as LibTorch's does; results are in the caller's tensors
/// only after wait().
class Work {
 public:
  /// True once every part of the collective has finished (successfully or not).
  bool isCompleted();
  /// True when it completed without an error.
  bool isSuccess() const;
  /// The error it failed with (after wait() threw), else null.
  std::exception_ptr exception() const;
  /// Blocks until done and writes the results into the tensors; returns true. A positive `timeout`
  /// bounds this wait: past it, throws without cancelling the collective.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout);
  /// wait() without the return value.
  void synchronize() { wait(); }
  /// The tensors holding the results: allreduce's and broadcast's inputs, allgather's first output list.
  std::vector<Tensor> result();

 private:
  friend class ProcessGroup;
  struct Part {
    distributed::Work work;
    std::function<void(distributed::Work&)> finish;  // copies into the caller's tensors (may be null)
  };
  std::vector<Part> parts_;
  std::vector<Tensor> result_;
  std::exception_ptr error_;
  bool finished_ = false;
};

/// The world of mpx::distributed (every rank of the job) with LibTorch's method names. Every call
/// takes a list of tensors (LibTorch's MPI backend takes exactly one; mpx accepts several and runs
/// one collective per tensor) and returns its Work at once.
class ProcessGroup {
 public:
  /// LibTorch 1.x spelled the work type ProcessGroup::Work.
  using Work = c10d::Work;
  virtual ~ProcessGroup() = default;
  int getRank() const;
  int getSize() const;
  /// "mpi", as LibTorch names this group's backend (CUDA tensors still go over NCCL).
  const std::string getBackendName() const;

  /// Reduces each tensor over all ranks, in place.
  std::shared_ptr<Work> allreduce(std::vector<Tensor>& tensors, const AllreduceOptions& opts = AllreduceOptions());
  /// allreduce of several tensors (one collective each).
  std::shared_ptr<Work> allreduce_coalesced(std::vector<Tensor>& tensors,
                                            const AllreduceCoalescedOptions& opts = AllreduceCoalescedOptions());
  /// Every rank's tensors become rank opts.rootRank's tensors[opts.rootTensor].
  std::shared_ptr<Work> broadcast(std::vector<Tensor>& tensors, const BroadcastOptions& opts = BroadcastOptions());
  /// outputs[i][r] receives rank r's inputs[i]; each outputs[i] holds getSize() tensors shaped like inputs[i].
  std::shared_ptr<Work> allgather(std::vector<std::vector<Tensor>>& outputs, std::vector<Tensor>& inputs,
                                  const AllgatherOptions& opts = AllgatherOptions());
  /// Returns once every rank has called it (its Work is already complete).
  std::shared_ptr<Work> barrier(const BarrierOptions& opts = BarrierOptions());
  /// Ends every rank of the job (MPI_Abort); does not return.
  [[noreturn]] void abort();

 protected:
  ProcessGroup();
};

/// LibTorch's MPI process group: under mpirun every rank of MPI_COMM_WORLD, else a world of one.
class ProcessGroupMPI : public ProcessGroup {
 public:
  /// `ranks` empty (or every rank in order): the whole world. mpx has no subgroups: any other list
  /// is an error.
  static std::shared_ptr<ProcessGroupMPI> createProcessGroupMPI(std::vector<int> ranks = {});
};

}  // namespace mpx::c10d
