// Top-k hit counting with torch.topk's order (NaN above every number, ties by class index), on the logits' device.
#include "tools/topk.h"

#include <cmath>

namespace mpx::cli {

TopkHits topk_hits(const Tensor& logits, const Tensor& target) {
  NoGradGuard no_grad;
  const Tensor l = logits.detach().to(kFloat32);
  const int64_t c = l.size(1);
  const Tensor classes = arange(0, static_cast<double>(c), 1, TensorOptions(kInt64).device(l.device())).view({1, c});
  const Tensor t = target.to(kInt64).view({-1, 1});
  const Tensor truth = sum(where(eq(classes, t), l, zeros({}, l.options())), {1}, /*keepdim=*/true);
  // PyTorch's topk order: larger first, NaN above every number, equal values (NaN with NaN
  // included) by class index. A class precedes the true one when it comes first in that order;
  // the three terms are exclusive (comparisons with NaN are false), so their sum is 0 or 1.
  const Tensor nan_j = ne(l, l).to(kFloat32), truth_nan = ne(truth, truth).to(kFloat32);
  const Tensor before = lt(classes, t).to(kFloat32);
  const Tensor precedes = nan_j * (1.0 - truth_nan + truth_nan * before) + gt(l, truth).to(kFloat32) +
                          eq(l, truth).to(kFloat32) * before;
  const Tensor rank = sum(precedes, {1});
  const Tensor finite_row = eq(sum(lt(abs(l), INFINITY).to(kFloat32), {1}), static_cast<double>(c));
  return {sum(lt(rank, 1.0).to(kFloat64)), sum(lt(rank, 5.0).to(kFloat64)),
          sum((1.0 - finite_row.to(kFloat64)))};
}

}  // namespace mpx::cli
