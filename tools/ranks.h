// The data-parallel side of the training commands: joining the ranks, rank-0 output, sums over ranks, the mpirun re-launch.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpx/mpx.h>

namespace mpx::cli {

/// This process's place in a run started by `mpirun -np N mpx train|dcgan ...` (world 1 without a launcher).
struct Ranks {
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  /// Started by a launcher (mpirun) or with WORLD_SIZE set, even to 1.
  bool launched = false;
  /// More than one process: data sharded, lr scaled, rank 0 alone writes, sums over ranks.
  bool distributed() const { return world > 1; }
  /// The model is wrapped in DistributedDataParallel: with several ranks, and with one that a
  /// launcher started, so `mpirun -np 1` or `WORLD_SIZE=1` runs DDP's path (its all-reduces on
  /// NCCL for a GPU) with a single process and changes no number.
  bool data_parallel() const { return world > 1 || launched; }
  /// Rank 0 alone prints progress and writes metrics, plots and checkpoints.
  bool leader() const { return rank == 0; }
};

/// How a run's announcement shows `batch`: "64", or "64 per rank x 2 ranks" when data-parallel.
std::string batch_per_rank_text(int64_t batch, const Ranks& r);

/// Joins the process group when a launcher started this process, and sends the standard output
/// of every rank but 0 to /dev/null, so one progress line and one summary are printed (errors and
/// warnings on stderr stay visible from every rank). Without a launcher: world 1, nothing changes.
Ranks join_ranks();
/// The Ranks of this process once join_ranks() ran (world 1 before).
const Ranks& ranks();

/// Element-wise sums of `values` over all ranks (one f64 all-reduce; unchanged at world 1).
std::vector<double> sum_over_ranks(std::vector<double> values);
/// Whether `flag` is set on any rank (a Max all-reduce; `flag` itself at world 1). Used where a
/// per-process event (a signal) must stop every rank at the same step.
bool any_rank(bool flag);

/// Throws mpx::Error on every rank when the ranks were given different run flags (`canonical`
/// is the command's flags as text): each rank compares a hash of its text with rank 0's.
void check_same_flags(const std::string& command, const std::string& canonical);

/// Copies rank 0's buffers (batch-norm running statistics) to every rank, so evaluating the
/// unwrapped model sees what rank 0 checkpoints.
void sync_buffers_from_rank0(nn::Module& m);

/// Indices rank, rank + world, ... below n: a disjoint, unpadded shard of an evaluation set (the
/// ranks' shards together are the set exactly once, so summed counts are the whole set's).
class StrideSampler : public data::Sampler {
 public:
  StrideSampler(int64_t n, int64_t rank, int64_t world);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

 private:
  int64_t n_, rank_, world_;
};

/// `mpx train|dcgan --nproc-per-node N ...`: replaces this process with
/// `mpirun -np N --bind-to none <this program> <command> <the same flags without --nproc-per-node>`.
/// Returns (doing nothing) when the flag is absent; throws UsageError when it is malformed, when
/// mpirun is not on PATH, when the build has no MPI, or when this process is already one rank of
/// an MPI job.
void relaunch_under_mpirun(const std::string& command, int argc, char** argv);

/// After an error in a run of several ranks: flushes the output and ends this process at once
/// with `code`, without waiting in MPI_Finalize for peers that may be blocked in a collective;
/// mpirun then stops the other ranks. Returns `code` (doing nothing) at world 1.
int end_failed_rank(int code);

}  // namespace mpx::cli
