// nn::SyncBatchNorm and convert_sync_batchnorm: batch-norm statistics over every rank's batch.
#pragma once
#include <memory>

#include "nn/modules.h"

namespace mpx::nn {

/// Batch norm whose training statistics cover the global batch: count, sum and sum of squares
/// are all-reduced in f32, and backward all-reduces the gradients of those sums, so output,
/// gradients and running statistics equal BatchNorm over the concatenated batch on every rank
/// (PyTorch's SyncBatchNorm). Takes [N, C, ...] inputs; eval mode uses the running statistics.
/// With world size 1 it is BatchNorm computed from sums.
class SyncBatchNormImpl : public BatchNormImplBase {
 public:
  explicit SyncBatchNormImpl(const BatchNormOptions& options);
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(BatchNormOptions(num_features)) {}
  std::string name() const override { return "SyncBatchNorm"; }

 protected:
  void check_input_dim(const Tensor& x) const override;
};
MPX_MODULE(SyncBatchNorm);

/// The synchronized training forward: installed as a batch norm's sync_forward.
Tensor sync_batch_norm_forward(BatchNormImplBase& bn, const Tensor& x, double factor);

/// Makes every BatchNorm1d/2d in `module`'s tree synchronize its statistics across ranks and
/// returns how many it converted. Unlike PyTorch it converts in place (the modules keep their
/// type, parameters and buffers) so that models holding typed members (`BatchNorm2d bn1`)
/// call the synchronized forward too. Apply it before DistributedDataParallel wraps the model.
int convert_sync_batchnorm(Module& module);
template <typename H>
  requires requires(H& h) { h.ptr(); }
int convert_sync_batchnorm(H& holder) {
  return convert_sync_batchnorm(*holder.ptr());
}

}  // namespace mpx::nn
