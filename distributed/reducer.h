// The gradient reducer behind DistributedDataParallel: bucketed all-reduces overlapped with backward.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/process_group.h"

namespace mpx::distributed {

/// How the reducer groups and averages gradients (nn::DDPOptions carries the same fields).
struct ReducerOptions {
  double bucket_cap_mb = 25;
  double gradient_predivide_factor = 1.0;
  bool allreduce_always_fp32 = false;
  bool find_unused_parameters = false;
};

/// What the last synchronized backward did (for tests and benchmarks).
struct ReducerStats {
  int64_t buckets = 0;
  /// Buckets whose all-reduce started while some parameter still waited for its gradient.
  int64_t buckets_started_during_backward = 0;
  /// Seconds the all-reduces spent in the transport, summed over buckets.
  double allreduce_seconds = 0;
  /// Seconds backward's end waited for the all-reduces to finish (the part not hidden).
  double wait_seconds = 0;
  int64_t synchronized_backwards = 0;
};

/// Averages the gradients of the parameters it is given over all ranks during each backward:
/// a post-accumulate-grad hook per parameter marks it ready, a bucket (about bucket_cap_mb MiB
/// of one dtype, in reverse registration order; the one holding the earliest-registered
/// parameters, ready last, at most 1 MiB) starts its all-reduce when its last gradient is ready, buckets start strictly in order (the same collectives in the same order
/// on every rank), and a callback at the end of backward waits for them and writes the averages
/// back into .grad. Parameters that do not require grad are left out.
class Reducer {
 public:
  Reducer(const std::vector<std::pair<std::string, Tensor>>& params, const ReducerOptions& options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;
  /// false: backward leaves gradients local (no_sync); the next synchronized backward reduces
  /// everything accumulated meanwhile.
  void set_require_sync(bool on);
  bool require_sync() const;
  /// Forgets a backward that never finished (after an error); called before each forward.
  void reset();
  /// Throws when the parameters are no longer the tensors (or dtypes) it hooked.
  void check_parameters_unchanged(const std::vector<std::pair<std::string, Tensor>>& params) const;
  /// Parameter names per bucket, in the order their all-reduces start.
  std::vector<std::vector<std::string>> bucket_layout() const;
  const ReducerStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Copies rank `root`'s values into `tensors` on every rank with one broadcast per dtype and
/// device rather than one per tensor (a ResNet has dozens of small batch-norm buffers).
void broadcast_coalesced(const tensor_list& tensors, int root = 0);

}  // namespace mpx::distributed
