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
/// Computed in f32 (f64 for f64) whatever the input dtype; autocast policy fp32. On the CPU the lattice runs on
/// its kernels (OpId::ctc_lattice, one sequence per thread); elsewhere, and for second derivatives, as a recursion
/// over frames of [N, 2S+1] log-space tensor ops (MPX_CTC_RECURSION=1 takes it on the CPU too).
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);
/// The same with the lengths as i64 tensors (read back to the host).
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);

}  // namespace mpx

namespace mpx::kernels {
/// The CTC lattice (OpId::ctc_lattice): for lp contiguous [T, N, C] (f32 or f64), the extended labels ext i64
/// [N, L] (blank, l1, blank, ..., blank; L = 2 S + 1) and the lengths il, tl i64 [N] (host tensors), writes each
/// sequence's -log p into nll [N] (+inf where no alignment exists) and the log forward variables into alpha
/// [N, T, L] (-inf where unreachable or past a sequence's frames), all in lp's dtype.
using CtcFn = void (*)(const Tensor& nll, const Tensor& alpha, const Tensor& lp, const Tensor& ext, const Tensor& il,
                       const Tensor& tl, int64_t blank);
/// Its backward (OpId::ctc_lattice_backward): grad [T, N, C] = g[n] * d nll[n] / d lp[t, n, c] (the true
/// derivative, 0 past a sequence's frames and for a sequence with no alignment), from the forward's alpha and nll
/// and backward variables it computes itself.
using CtcBackwardFn = void (*)(const Tensor& grad, const Tensor& g, const Tensor& lp, const Tensor& alpha,
                               const Tensor& nll, const Tensor& ext, const Tensor& il, const Tensor& tl, int64_t blank);
}  // namespace mpx::kernels
