// Margin and embedding losses with PyTorch's formulas: margin ranking, hinge and cosine embedding, triplet margin,
// soft margin, multi-label soft margin, multi-class margin; and pairwise_distance. Autocast: fp32.
#pragma once
#include "ops/loss.h"

namespace mpx {

/// ||x1 - x2 + eps||_p over the last dim (PyTorch's pairwise_distance); keepdim keeps it as size 1.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);
/// max(0, -y (x1 - x2) + margin), y in {1, -1}; x1, x2 and y broadcast to one shape.
Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin = 0.0,
                           Reduction reduction = Reduction::Mean);
/// x where y is 1, max(0, margin - x) where y is -1 (either where y is neither, as PyTorch sums both terms).
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& y, double margin = 1.0,
                            Reduction reduction = Reduction::Mean);
/// Per row of x1, x2 ([N, D] or [D]) with y in {1, -1} ([N] or []): 1 - cos where y is 1, max(0, cos - margin)
/// where y is -1; cos = x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)).
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& y, double margin = 0.0,
                             Reduction reduction = Reduction::Mean);
/// max(0, margin + d(a, p) - d(a, n)) with d the pairwise p-norm distance; swap uses min(d(a, n), d(p, n)).
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin = 1.0,
                           double p = 2.0, double eps = 1e-6, bool swap = false, Reduction reduction = Reduction::Mean);
/// log(1 + exp(-y x)) per element, y in {1, -1}.
Tensor soft_margin_loss(const Tensor& input, const Tensor& y, Reduction reduction = Reduction::Mean);
/// Per row of [N, C] (or [C]) logits and 0/1 targets: -mean over classes of weight * (y log sigmoid(x) +
/// (1 - y) log sigmoid(-x)); weight [C] optional.
Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& y, const Tensor& weight = {},
                                   Reduction reduction = Reduction::Mean);
/// Per row of [N, C] (or [C]) scores and i64 class targets: sum over classes i != y of
/// weight[y] max(0, margin - x[y] + x[i])^p, over C; p is 1 or 2, weight [C] optional.
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p = 1, double margin = 1.0,
                         const Tensor& weight = {}, Reduction reduction = Reduction::Mean);

}  // namespace mpx
