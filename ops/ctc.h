// Connectionist temporal classification loss (Graves et al. 2006; PyTorch's ctc_loss): the negative log-likelihood
// of a label sequence summed over every alignment of it to a longer sequence of per-frame class scores.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/loss.h"

namespace mpx {

/// log_probs [T, N, C] (log-softmax over C; [T, C] for one sequence), targets i64 [N, S] padded or 1-d, the
/// target sequences concatenated ([sum(target_lengths)]), input_lengths and target_lengths one per sequence
/// (input_lengths <= T, target labels in [0, C) other than `blank`). Per sequence: -log of the sum over
/// alignments; an impossible one (fewer frames than labels plus repeats) is +inf, or 0 with zero_infinity, and
/// gives no gradient. Mean divides each loss by its target length (at least 1) and averages over the batch, as
/// PyTorch. The gradient is the true derivative with respect to log_probs (PyTorch's CPU and CUDA kernels return
/// it plus exp(log_probs), which is the same once it flows back through a log_softmax); second derivatives work.
/// Computed in f32 (f64 for f64) whatever the input dtype; autocast policy fp32. Runs on every device as a
/// recursion over frames of [N, 2S+1] log-space tensor ops.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);
/// The same with the lengths as i64 tensors (read back to the host).
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);

}  // namespace mpx
