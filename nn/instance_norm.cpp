// F::instance_norm and the InstanceNorm layers (nn/instance_norm.h) as batch norm over [1, N C, *].
#include "nn/instance_norm.h"

#include "autograd/grad_mode.h"
#include "ops/norm.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx::nn {
namespace functional {

Tensor instance_norm(const Tensor& x, const InstanceNormFuncOptions& o) {
  MPX_CHECK(x.defined() && x.dim() >= 3, "instance_norm: expected [N, C, *] input with at least one spatial dim, got ",
            ops::describe(x));
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor &rm = o.running_mean(), &rv = o.running_var();
  MPX_CHECK(rm.defined() == rv.defined(), "instance_norm: pass both running_mean and running_var, or neither");
  MPX_CHECK(o.use_input_stats() || rm.defined(),
            "instance_norm: use_input_stats(false) normalizes with the running statistics; pass running_mean and "
            "running_var");
  for (const Tensor* t : {&rm, &rv, &o.weight(), &o.bias()})
    MPX_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == c), "instance_norm: the running statistics, weight ",
              "and bias must be [C] = [", c, "] for input ", ops::describe(x), ", got ", ops::describe(*t));
  IntList shape = x.sizes();
  shape[0] = 1;
  shape[1] = n * c;
  // Every sample gets its own copy of the per-channel tensors; running statistics are averaged back below.
  const auto per_instance = [n](const Tensor& t) { return t.defined() ? t.repeat({n}) : Tensor(); };
  Tensor rm_n, rv_n;
  if (rm.defined()) {
    NoGradGuard ng;
    rm_n = per_instance(rm);
    rv_n = per_instance(rv);
  }
  const Tensor y = mpx::batch_norm(x.reshape(shape), rm_n, rv_n, per_instance(o.weight()), per_instance(o.bias()),
                                   o.use_input_stats(), o.momentum(), o.eps());
  if (rm.defined() && o.use_input_stats()) {
    NoGradGuard ng;
    Tensor(rm).copy_(mean(rm_n.view({n, c}), {0}));
    Tensor(rv).copy_(mean(rv_n.view({n, c}), {0}));
  }
  return y.view(x.sizes());
}

}  // namespace functional

namespace F = functional;

Tensor InstanceNormImplBase::forward(const Tensor& x) {
  const int64_t d = spatial_dims_;
  MPX_CHECK(x.defined() && (x.dim() == d + 1 || x.dim() == d + 2), name(), ": expected ", d + 2, "-d input [N, C, ",
            d == 1 ? "L" : d == 2 ? "H, W" : "D, H, W", "] or unbatched ", d + 1, "-d, got ", ops::describe(x));
  const bool unbatched = x.dim() == d + 1;
  const int64_t c = x.size(unbatched ? 0 : 1);
  // PyTorch only warns for a channel count that differs without affine or running statistics; mpx refuses it,
  // since such a layer was almost always built for another input.
  MPX_CHECK(c == options.num_features(), name(), ": expected ", options.num_features(), " channels, got input ",
            ops::describe(x));
  const Tensor xb = unbatched ? x.unsqueeze(0) : x;
  const bool use_input_stats = is_training() || !options.track_running_stats();
  const Tensor y = F::instance_norm(xb, F::InstanceNormFuncOptions()
                                            .running_mean(running_mean)
                                            .running_var(running_var)
                                            .weight(weight)
                                            .bias(bias)
                                            .use_input_stats(use_input_stats)
                                            .momentum(options.momentum().value_or(0.0))
                                            .eps(options.eps()));
  return unbatched ? y.squeeze(0) : y;
}

}  // namespace mpx::nn
