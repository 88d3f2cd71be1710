// nn::DistributedDataParallel: one model replica per rank, gradients averaged in overlapped buckets.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/arg.h"
#include "distributed/reducer.h"
#include "nn/container.h"
#include "nn/module.h"

namespace mpx::nn {

/// Options of DistributedDataParallel (PyTorch's and apex's DDP arguments).
struct DDPOptions {
  /// Gradients are reduced in buckets of about this many MiB, in reverse registration order
  /// (roughly the order backward produces them); each bucket's all-reduce starts as soon as its
  /// last gradient is ready, so communication overlaps the rest of backward. The bucket of the
  /// earliest-registered parameters, ready only when backward ends, is kept to 1 MiB.
  MPX_ARG(double, bucket_cap_mb) = 25;
  /// apex: gradients are divided by this before the all-reduce and by world_size / factor
  /// after it (a guard against overflow of f16 sums over many ranks).
  MPX_ARG(double, gradient_predivide_factor) = 1.0;
  /// Reduce f16/bf16 gradients in f32 (apex's allreduce_always_fp32); otherwise the buckets
  /// are in the gradients' dtype (the CPU transport still adds them up in f32).
  MPX_ARG(bool, allreduce_always_fp32) = false;
  /// Copy rank 0's buffers (batch-norm running statistics) to every rank before each forward.
  MPX_ARG(bool, broadcast_buffers) = true;
  /// Parameters that get no gradient in a backward are reduced as zeros instead of being an
  /// error (slower: their buckets start only when backward ends).
  MPX_ARG(bool, find_unused_parameters) = false;
};

/// What the last synchronized backward did (for tests and benchmarks).
using DDPStats = distributed::ReducerStats;

/// Wraps a module for data-parallel training (PyTorch's DistributedDataParallel): broadcasts
/// rank 0's parameters and buffers at construction after checking every rank holds the same
/// parameter names, shapes and dtypes; averages gradients across ranks during backward. Wrap
/// after amp::initialize (apex's order). Child "module" is the wrapped model, so state-dict keys
/// read "module.<name>" as in PyTorch.
class DistributedDataParallelImpl : public Module {
 public:
  explicit DistributedDataParallelImpl(AnyModule module, const DDPOptions& options = {});
  ~DistributedDataParallelImpl() override;
  /// Broadcasts buffers (when asked), prepares the reducer and runs the wrapped module.
  Tensor forward(const Tensor& x);
  /// Call before running the wrapped module some other way than forward(x) (several inputs):
  /// does forward()'s work up to the call.
  void prepare_forward();

  /// While the guard lives, backward accumulates gradients locally without reducing them; the
  /// first backward after it reduces everything accumulated (gradient accumulation).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallelImpl& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallelImpl& ddp_;
    bool prev_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  const AnyModule& module() const { return module_; }
  const DDPOptions& options() const { return options_; }
  const DDPStats& stats() const;
  /// Parameter names per bucket, in the order their all-reduces start.
  std::vector<std::vector<std::string>> bucket_layout() const;
  void pretty_print(std::ostream& os) const override;

 private:
  AnyModule module_;
  DDPOptions options_;
  std::unique_ptr<distributed::Reducer> reducer_;
};
MPX_MODULE(DistributedDataParallel);

}  // namespace mpx::nn
