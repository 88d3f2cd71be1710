// Margin and embedding losses: composites of elementwise ops and reductions, in f32 (f64 for f64 inputs).
#include "ops/margin_loss.h"

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/logical.h"
#include "ops/loss_internal.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx {
using namespace loss_detail;

namespace {
// The tensors checked floating (names given), cast by the op's autocast policy, then to the compute dtype.
tensor_list prepare(const char* op, OpId id, const tensor_list& ts, std::initializer_list<const char*> names) {
  auto name = names.begin();
  for (const Tensor& t : ts) check_floating(op, *name++, t);
  tensor_list in = ops::autocast(id, ts);
  const DType cdt = compute_dtype(in);
  for (Tensor& t : in) t = t.to(cdt);
  return in;
}
}  // namespace

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  MPX_CHECK(p >= 1.0, "pairwise_distance: p must be at least 1 (or inf), got ", p);
  check_floating("pairwise_distance", "x1", x1);
  check_floating("pairwise_distance", "x2", x2);
  const int64_t nd = std::max(x1.dim(), x2.dim());
  MPX_CHECK(nd > 0, "pairwise_distance: needs inputs with at least one dim, got ", ops::describe(x1), " and ",
            ops::describe(x2));
  return vector_norm(x1 - x2 + eps, p, {-1}, keepdim);
}

Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin, Reduction r) {
  const tensor_list in = prepare("margin_ranking_loss", OpId::margin_ranking_loss, {x1, x2, y}, {"x1", "x2", "y"});
  return reduce_loss(clamp_min(-in[2] * (in[0] - in[1]) + margin, 0.0), r);
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& y, double margin, Reduction r) {
  const tensor_list in = prepare("hinge_embedding_loss", OpId::hinge_embedding_loss, {input, y}, {"input", "y"});
  check_same_shape("hinge_embedding_loss", input, y);
  const Tensor& x = in[0];
  const Tensor& t = in[1];
  return reduce_loss(where(ne(t, 1.0), clamp_min(margin - x, 0.0), 0.0) + where(ne(t, -1.0), x, 0.0), r);
}

Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin, Reduction r) {
  MPX_CHECK(x1.defined() && x2.defined() && x1.sizes() == x2.sizes() && (x1.dim() == 1 || x1.dim() == 2),
            "cosine_embedding_loss: x1 and x2 must be [N, D] or [D] of one shape, got ",
            ops::describe(x1), " and ", ops::describe(x2));
  MPX_CHECK(y.defined() && y.dim() == x1.dim() - 1 && (y.dim() == 0 || y.size(0) == x1.size(0)),
            "cosine_embedding_loss: y must hold one label per row of x1 ", ops::describe(x1), ", got ",
            ops::describe(y));
  const tensor_list in = prepare("cosine_embedding_loss", OpId::cosine_embedding_loss, {x1, x2, y}, {"x1", "x2", "y"});
  constexpr double kEps = 1e-12;  // PyTorch's EPSILON in this loss
  const int64_t d = x1.dim() - 1;
  const Tensor prod = sum(in[0] * in[1], {d});
  const Tensor m1 = sum(in[0] * in[0], {d}) + kEps, m2 = sum(in[1] * in[1], {d}) + kEps;
  const Tensor cos = prod / sqrt(m1 * m2);
  return reduce_loss(where(eq(in[2], 1.0), 1.0 - cos, 0.0) + where(eq(in[2], -1.0), clamp_min(cos - margin, 0.0), 0.0), r);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin, double p,
                           double eps, bool swap, Reduction r) {
  const tensor_list in = prepare("triplet_margin_loss", OpId::triplet_margin_loss, {anchor, positive, negative},
                                 {"anchor", "positive", "negative"});
  MPX_CHECK(anchor.dim() == positive.dim() && anchor.dim() == negative.dim() && (anchor.dim() == 1 || anchor.dim() == 2),
            "triplet_margin_loss: anchor, positive and negative must all be [N, D] or all [D], got ",
            ops::describe(anchor), ", ", ops::describe(positive), ", ", ops::describe(negative));
  const Tensor dap = pairwise_distance(in[0], in[1], p, eps);
  Tensor dan = pairwise_distance(in[0], in[2], p, eps);
  if (swap) dan = minimum(dan, pairwise_distance(in[1], in[2], p, eps));
  return reduce_loss(clamp_min(dap - dan + margin, 0.0), r);
}

Tensor soft_margin_loss(const Tensor& input, const Tensor& y, Reduction r) {
  return pointwise_loss("soft_margin_loss", OpId::soft_margin_loss, input, y, r,
                        [](const Tensor& x, const Tensor& t) { return softplus(-t * x); });
}

Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& y, const Tensor& weight, Reduction r) {
  check_same_shape("multilabel_soft_margin_loss", input, y);
  MPX_CHECK(input.dim() == 1 || input.dim() == 2, "multilabel_soft_margin_loss: input must be [N, C] or [C], got ",
            ops::describe(input));
  tensor_list ts{input, y};
  if (weight.defined()) {
    MPX_CHECK(weight.dim() == 1 && weight.size(0) == input.size(-1), "multilabel_soft_margin_loss: weight must be [",
              input.size(-1), "] (one per class), got ", ops::describe(weight));
    ts.push_back(weight);
  }
  const tensor_list in = prepare("multilabel_soft_margin_loss", OpId::multilabel_soft_margin_loss, ts,
                                 {"input", "target", "weight"});
  Tensor l = -(in[1] * logsigmoid(in[0]) + (1.0 - in[1]) * logsigmoid(-in[0]));
  if (weight.defined()) l = l * in[2];
  return reduce_loss(mean(l, {input.dim() - 1}), r);
}

Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p, double margin, const Tensor& weight,
                         Reduction r) {
  MPX_CHECK(p == 1 || p == 2, "multi_margin_loss: p must be 1 or 2, got ", p);
  MPX_CHECK(input.defined() && (input.dim() == 1 || input.dim() == 2) && input.numel() > 0,
            "multi_margin_loss: input must be non-empty [N, C] or [C], got ", ops::describe(input));
  MPX_CHECK(target.defined() && target.dtype() == kInt64 && target.dim() == input.dim() - 1 &&
                (target.dim() == 0 || target.size(0) == input.size(0)),
            "multi_margin_loss: target must hold one i64 class per row of ", ops::describe(input), ", got ",
            ops::describe(target));
  const int64_t c = input.size(-1);
  MPX_CHECK(all(ge(target, 0.0) & lt(target, static_cast<double>(c))).to(kFloat64).item<double>() != 0.0,
            "multi_margin_loss: a target class is outside [0, ", c, ")");
  tensor_list ts{input};
  if (weight.defined()) {
    MPX_CHECK(weight.dim() == 1 && weight.size(0) == c, "multi_margin_loss: weight must be [", c,
              "] (one per class), got ", ops::describe(weight));
    ts.push_back(weight);
  }
  const tensor_list in = prepare("multi_margin_loss", OpId::multi_margin_loss, ts, {"input", "weight"});
  const Tensor x = in[0].dim() == 1 ? in[0].unsqueeze(0) : in[0];
  const Tensor t = (target.dim() == 0 ? target.unsqueeze(0) : target).unsqueeze(1);
  const Tensor xy = gather(x, 1, t);                    // [N, 1]: the target's score
  Tensor h = clamp_min(x - xy + margin, 0.0);           // [N, C]
  if (p == 2) h = h * h;
  if (weight.defined()) h = h * gather(in[1], 0, t.reshape({t.numel()})).unsqueeze(1);
  // The target's own term (margin^p, or 0 if margin < 0) is not part of the sum.
  h = h * (1.0 - one_hot(t.reshape({t.numel()}), c).to(h.dtype()));
  Tensor l = sum(h, {1}) / static_cast<double>(c);
  if (input.dim() == 1) l = l.reshape({});
  return reduce_loss(l, r);
}

}  // namespace mpx
