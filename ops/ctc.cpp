// CTC loss as a recursion over frames of log-space tensor ops: the alignment lattice's forward variables
// (alpha) for every sequence at once, differentiated by autograd.
#include "ops/ctc.h"

#include <algorithm>
#include <limits>
#include <string>

#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/logical.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx {
namespace {
// The log of "no path": finite, so that exp() of it is 0 with a 0 gradient (-inf would give 0 * inf = NaN in the
// backward of a log-sum-exp over unreachable states only).
constexpr double kNoPath = -1e30;

std::vector<int64_t> host_ints(const Tensor& t, const char* what) {
  MPX_CHECK(t.defined() && !is_floating(t.dtype()) && t.dim() <= 1, "ctc_loss: ", what,
            " must be a 0-d or 1-d integer tensor, got ", t.defined() ? ops::describe(t) : std::string("undefined"));
  const Tensor c = t.to(kInt64).contiguous().cpu();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// log(exp(a) + exp(b) + exp(c)) elementwise, shifted by the (constant) largest term.
Tensor log_add3(const Tensor& a, const Tensor& b, const Tensor& c) {
  Tensor m;
  {
    NoGradGuard ng;
    m = maximum(maximum(a, b), c);
  }
  return m + log(exp(a - m) + exp(b - m) + exp(c - m));
}
}  // namespace

Tensor ctc_loss(const Tensor& log_probs0, const Tensor& targets0, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank, Reduction reduction, bool zero_infinity) {
  MPX_CHECK(log_probs0.defined() && is_floating(log_probs0.dtype()) &&
                (log_probs0.dim() == 3 || log_probs0.dim() == 2),
            "ctc_loss: log_probs must be floating [T, N, C] (or [T, C] for one sequence), got ",
            log_probs0.defined() ? ops::describe(log_probs0) : std::string("undefined"));
  MPX_CHECK(targets0.defined() && (targets0.dtype() == kInt64 || targets0.dtype() == kInt32),
            "ctc_loss: targets must be integer class indices, got ",
            targets0.defined() ? ops::describe(targets0) : std::string("undefined"));
  const bool unbatched = log_probs0.dim() == 2;
  Tensor lp = ops::autocast(OpId::ctc_loss, {log_probs0})[0];
  if (lp.dtype() != kFloat64) lp = lp.to(kFloat32);
  if (unbatched) lp = lp.unsqueeze(1);
  const int64_t T = lp.size(0), N = lp.size(1), C = lp.size(2);
  MPX_CHECK(static_cast<int64_t>(input_lengths.size()) == N && static_cast<int64_t>(target_lengths.size()) == N,
            "ctc_loss: ", input_lengths.size(), " input lengths and ", target_lengths.size(), " target lengths for ",
            N, " sequences; give one of each per sequence");
  MPX_CHECK(T >= 1, "ctc_loss: log_probs has no frames (T = 0)");
  MPX_CHECK(blank >= 0 && blank < C, "ctc_loss: blank ", blank, " is not a class of the ", C, " in log_probs");

  // One sequence's targets [S] are its padded row (PyTorch's unbatched form).
  const Tensor targets = unbatched && targets0.dim() == 1 ? targets0.unsqueeze(0) : targets0;
  MPX_CHECK(targets.dim() == 1 || targets.dim() == 2, "ctc_loss: targets must be [N, S] padded or 1-d concatenated, got ",
            ops::describe(targets0));
  const bool padded = targets.dim() == 2;
  const int64_t stride = padded ? targets.size(1) : 0;
  MPX_CHECK(!padded || targets.size(0) == N, "ctc_loss: padded targets ", ops::describe(targets0), " must have ", N,
            " rows, one per sequence");
  // The targets per sequence, on the host.
  const std::vector<int64_t> flat = [&] {
    const Tensor c = targets.to(kInt64).contiguous().cpu();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  }();
  int64_t S = 0, offset = 0;
  std::vector<std::vector<int64_t>> labels(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t tl = target_lengths[static_cast<size_t>(n)], il = input_lengths[static_cast<size_t>(n)];
    MPX_CHECK(il >= 0 && il <= T, "ctc_loss: input_lengths[", n, "] = ", il, " is outside [0, ", T,
              "] (the frames in log_probs)");
    MPX_CHECK(tl >= 0 && (!padded || tl <= stride), "ctc_loss: target_lengths[", n, "] = ", tl, " is outside [0, ",
              padded ? std::to_string(stride) : std::string("the targets"), "]");
    const int64_t start = padded ? n * stride : offset;
    MPX_CHECK(start + tl <= static_cast<int64_t>(flat.size()), "ctc_loss: the target lengths sum to more than the ",
              flat.size(), " concatenated targets");
    for (int64_t k = 0; k < tl; ++k) {
      const int64_t c = flat[static_cast<size_t>(start + k)];
      MPX_CHECK(c >= 0 && c < C && c != blank, "ctc_loss: target ", c, " of sequence ", n, " is ",
                c == blank ? "the blank" : "not a class", " (classes 0 .. ", C - 1, ", blank ", blank, ")");
      labels[static_cast<size_t>(n)].push_back(c);
    }
    offset += tl;
    S = std::max(S, tl);
  }
  MPX_CHECK(padded || offset == static_cast<int64_t>(flat.size()), "ctc_loss: the target lengths sum to ", offset,
            " but the concatenated targets hold ", flat.size());

  // The extended label sequences (blank, l1, blank, l2, ..., blank), where a step may skip a blank, the
  // impossible sequences, and the final states.
  const int64_t L = 2 * S + 1;
  std::vector<int64_t> ext(static_cast<size_t>(N * L), blank), last(static_cast<size_t>(2 * N), 0);
  std::vector<double> skip(static_cast<size_t>(N * L), 0.0), start(static_cast<size_t>(N * L), 0.0);
  std::vector<double> impossible(static_cast<size_t>(N), 0.0), empty_ok(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const auto& l = labels[static_cast<size_t>(n)];
    const int64_t tl = static_cast<int64_t>(l.size()), il = input_lengths[static_cast<size_t>(n)];
    int64_t repeats = 0;
    for (int64_t k = 0; k < tl; ++k) {
      ext[static_cast<size_t>(n * L + 2 * k + 1)] = l[static_cast<size_t>(k)];
      if (k > 0 && l[static_cast<size_t>(k)] == l[static_cast<size_t>(k - 1)]) ++repeats;
      if (k > 0 && l[static_cast<size_t>(k)] != l[static_cast<size_t>(k - 1)]) skip[static_cast<size_t>(n * L + 2 * k + 1)] = 1.0;
    }
    start[static_cast<size_t>(n * L)] = 1.0;
    if (tl > 0) start[static_cast<size_t>(n * L + 1)] = 1.0;
    last[static_cast<size_t>(2 * n)] = 2 * tl;
    last[static_cast<size_t>(2 * n + 1)] = tl > 0 ? 2 * tl - 1 : 2 * tl;
    impossible[static_cast<size_t>(n)] = il < tl + repeats || (il == 0 && tl > 0) ? 1.0 : 0.0;
    empty_ok[static_cast<size_t>(n)] = il == 0 && tl == 0 ? 1.0 : 0.0;
  }
  const Device dev = lp.device();
  auto mask = [&](const std::vector<double>& v, const IntList& shape) { return gt(tensor(v, shape).to(dev), 0.5); };
  const Tensor ext_t = tensor(ext, {N, L}).to(dev), can_skip = mask(skip, {N, L}), first = mask(start, {N, L});

  // Every frame's log-probability of every extended label: [T, N, L].
  const Tensor emit = gather(lp, 2, ext_t.unsqueeze(0).expand({T, N, L}));
  Tensor alpha = masked_fill(emit.select(0, 0), logical_not(first), kNoPath);
  int64_t frames = 0;
  for (int64_t il : input_lengths) frames = std::max(frames, il);
  if (L > 1) {
    const Tensor none1 = full({N, 1}, kNoPath, lp.options()), none2 = full({N, std::min<int64_t>(2, L)}, kNoPath, lp.options());
    const Tensor lens = tensor(input_lengths, {N, 1}).to(dev);
    for (int64_t t = 1; t < frames; ++t) {
      const Tensor from1 = cat({none1, alpha.narrow(1, 0, L - 1)}, 1);
      const Tensor from2 = masked_fill(cat({none2, alpha.narrow(1, 0, L - 2)}, 1), logical_not(can_skip), kNoPath);
      const Tensor next = log_add3(alpha, from1, from2) + emit.select(0, t);
      alpha = where(gt(lens, static_cast<double>(t)), next, alpha);  // a sequence that has ended keeps its alpha
    }
  } else {
    // No labels anywhere: every frame emits a blank.
    const Tensor lens = tensor(input_lengths, {N, 1}).to(dev);
    for (int64_t t = 1; t < frames; ++t) alpha = where(gt(lens, static_cast<double>(t)), alpha + emit.select(0, t), alpha);
  }
  // The path ends in the last label or the blank after it.
  const Tensor ends = gather(alpha, 1, tensor(last, {N, 2}).to(dev));
  const Tensor e0 = ends.select(1, 0), e1 = ends.select(1, 1);
  const Tensor same = mask([&] {
    std::vector<double> v(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) v[static_cast<size_t>(n)] = last[static_cast<size_t>(2 * n)] == last[static_cast<size_t>(2 * n + 1)];
    return v;
  }(), {N});
  const Tensor e1_or_none = masked_fill(e1, same, kNoPath);
  Tensor nll = neg(log_add3(e0, e1_or_none, full({N}, kNoPath, lp.options())));
  nll = masked_fill(nll, mask(empty_ok, {N}), 0.0);
  nll = masked_fill(nll, mask(impossible, {N}), zero_infinity ? 0.0 : std::numeric_limits<double>::infinity());

  switch (reduction) {
    case Reduction::None: return unbatched ? nll.squeeze(0) : nll;
    case Reduction::Sum: return sum(nll);
    default: {
      std::vector<double> tl(target_lengths.begin(), target_lengths.end());
      for (double& v : tl) v = std::max(v, 1.0);
      return mean(nll / tensor(tl, {N}).to(dev).to(nll.dtype()));
    }
  }
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank, Reduction reduction, bool zero_infinity) {
  return ctc_loss(log_probs, targets, host_ints(input_lengths, "input_lengths"),
                  host_ints(target_lengths, "target_lengths"), blank, reduction, zero_infinity);
}

}  // namespace mpx
