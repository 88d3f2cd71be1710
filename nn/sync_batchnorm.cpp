// SyncBatchNorm: global-batch statistics from all-reduced f32 sums, differentiable through the reduction.
#include "nn/sync_batchnorm.h"

#include "autograd/node.h"
#include "distributed/process_group.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx::nn {

namespace dist = mpx::distributed;

namespace {

// Sum over ranks as a graph node: the gradient of a sum over ranks is the sum over ranks of
// the gradients (each rank's loss depends on the global statistics).
Tensor all_reduce_sum_differentiable(const Tensor& local) {
  Tensor out = local.detach().clone();
  dist::all_reduce(out);
  autograd::record("sync_batch_norm_all_reduce", {local}, {out}, [](autograd::FunctionNode&, const tensor_list& g) {
    Tensor s = g[0].contiguous().clone();
    dist::all_reduce(s);
    return tensor_list{s};
  });
  return out;
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const BatchNormOptions& options) : BatchNormImplBase(options) {
  sync_forward = sync_batch_norm_forward;
}

void SyncBatchNormImpl::check_input_dim(const Tensor& x) const {
  MPX_CHECK(x.dim() >= 2, "SyncBatchNorm: expected an input of at least 2 dimensions [N, C, ...], got ",
            dtype_name(x.dtype()), shape_str(x.sizes()));
}

Tensor sync_batch_norm_forward(BatchNormImplBase& bn, const Tensor& x, double factor) {
  const int64_t c = x.size(1);
  IntList dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  IntList bshape(x.dim(), 1);
  bshape[1] = c;
  // Statistics in f32 whatever the activations' dtype (autocast and keep_batchnorm_fp32 alike).
  Tensor xf = x.to(kFloat32);
  const double local_count = static_cast<double>(x.numel() / c);
  Tensor stats = cat({xf.sum(dims), (xf * xf).sum(dims), full({1}, local_count, kFloat32)});
  Tensor g = all_reduce_sum_differentiable(stats);
  const double count = g.narrow(0, 2 * c, 1).item<double>();
  MPX_CHECK(count > 1 || !bn.is_training(), bn.name(), ": expected more than 1 value per channel over all ranks "
            "when training, got input ", dtype_name(x.dtype()), shape_str(x.sizes()));
  Tensor mean = g.narrow(0, 0, c) / count;
  // E[x^2] - E[x]^2 can come out a hair below zero for near-constant channels.
  Tensor var = (g.narrow(0, c, c) / count - mean * mean).clamp(0.0, 3.0e38);
  Tensor invstd = (var + bn.options.eps()).pow(-0.5);
  Tensor y = (xf - mean.view(bshape)) * invstd.view(bshape);
  if (bn.weight.defined()) y = y * bn.weight.to(kFloat32).view(bshape) + bn.bias.to(kFloat32).view(bshape);
  if (bn.running_mean.defined()) {
    NoGradGuard ng;
    Tensor m = mean.detach(), v = var.detach() * (count / (count - 1));  // running variance is unbiased
    bn.running_mean.mul_(1.0 - factor).add_(m.to(bn.running_mean.dtype()), factor);
    bn.running_var.mul_(1.0 - factor).add_(v.to(bn.running_var.dtype()), factor);
  }
  return y.to(x.dtype());
}

int convert_sync_batchnorm(Module& module) {
  int n = 0;
  module.apply([&](Module& m) {
    if (auto* bn = dynamic_cast<BatchNormImplBase*>(&m)) {
      if (!bn->sync_forward) bn->sync_forward = sync_batch_norm_forward;
      ++n;
    }
  });
  return n;
}

}  // namespace mpx::nn
