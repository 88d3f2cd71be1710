// CTC loss: the alignment lattice on the device's kernels as one autograd node (CPU), or as a recursion over frames
// of log-space tensor ops that autograd differentiates (other devices, and every second derivative).
#include "ops/ctc.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/dispatch.h"

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
            " must be a 0-d or 1-d integer tensor, got ", ops::describe(t));
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
// The host's description of every sequence's lattice: extended labels (blank, l1, blank, ..., blank) [N, L], the
// states a path may enter by skipping a blank, the states it may start and end in, and the lengths.
struct Lattice {
  int64_t N = 0, L = 1, frames = 0, blank = 0;
  std::vector<int64_t> ext, last, il, tl;
  std::vector<double> skip, start, one_end;
};

Tensor device_mask(const std::vector<double>& v, const IntList& shape, Device dev) {
  return gt(tensor(v, shape).to(dev), 0.5);
}

// Each sequence's -log p as tensor ops frame by frame (any device, differentiable to any order); sequences with no
// alignment come out near -kNoPath, for the caller to mask.
Tensor recursion_nll(const Tensor& lp, const Lattice& k) {
  const int64_t T = lp.size(0), N = k.N, L = k.L;
  const Device dev = lp.device();
  const Tensor ext = tensor(k.ext, {N, L}).to(dev), lens = tensor(k.il, {N, 1}).to(dev);
  // Every frame's log-probability of every extended label: [T, N, L].
  const Tensor emit = gather(lp, 2, ext.unsqueeze(0).expand({T, N, L}));
  Tensor alpha = masked_fill(emit.select(0, 0), logical_not(device_mask(k.start, {N, L}, dev)), kNoPath);
  if (L > 1) {
    const Tensor none1 = full({N, 1}, kNoPath, lp.options()), none2 = full({N, 2}, kNoPath, lp.options());
    const Tensor no_skip = logical_not(device_mask(k.skip, {N, L}, dev));
    for (int64_t t = 1; t < k.frames; ++t) {
      const Tensor from1 = cat({none1, alpha.narrow(1, 0, L - 1)}, 1);
      const Tensor from2 = masked_fill(cat({none2, alpha.narrow(1, 0, L - 2)}, 1), no_skip, kNoPath);
      const Tensor next = log_add3(alpha, from1, from2) + emit.select(0, t);
      alpha = where(gt(lens, static_cast<double>(t)), next, alpha);  // a sequence that has ended keeps its alpha
    }
  } else {
    // No labels anywhere: every frame emits a blank.
    for (int64_t t = 1; t < k.frames; ++t) alpha = where(gt(lens, static_cast<double>(t)), alpha + emit.select(0, t), alpha);
  }
  // The path ends in the last label or the blank after it (one state when there is no label).
  const Tensor ends = gather(alpha, 1, tensor(k.last, {N, 2}).to(dev));
  const Tensor e1 = masked_fill(ends.select(1, 1), device_mask(k.one_end, {N}, dev), kNoPath);
  return neg(log_add3(ends.select(1, 0), e1, full({N}, kNoPath, lp.options())));
}

// The same on the device's lattice kernels, as one autograd node. Under create_graph the backward runs the
// recursion on the saved log-probabilities and differentiates it, which gives a differentiable gradient.
Tensor lattice_nll(const Tensor& lp0, const Lattice& k) {
  const Tensor lp = lp0.contiguous();
  const int64_t T = lp.size(0);
  const Tensor ext = tensor(k.ext, {k.N, k.L}), il = tensor(k.il, {k.N}), tl = tensor(k.tl, {k.N});
  const Tensor nll = empty({k.N}, lp.options()), alpha = empty({k.N, T, k.L}, lp.options());
  {
    NoGradGuard ng;
    dispatch::kernel<OpId::ctc_lattice>(lp.device(), lp.dtype())(nll, alpha, lp, ext, il, tl, k.blank);
  }
  auto backward = [k, ext, il, tl](autograd::FunctionNode& self, const tensor_list& g) -> tensor_list {
    const Tensor lp = self.saved(0);
    const Tensor gn = g[0].defined() ? g[0].to(lp.dtype()).contiguous() : zeros({k.N}, lp.options());
    if (GradMode::is_enabled()) return autograd::grad({recursion_nll(lp, k)}, {lp}, {gn}, true, true);
    const Tensor grad = empty(lp.sizes(), lp.options());
    dispatch::kernel<OpId::ctc_lattice_backward>(lp.device(), lp.dtype())(grad, gn, lp, self.saved(1), self.saved(2),
                                                                          ext, il, tl, k.blank);
    return {grad};
  };
  if (auto n = autograd::record("CtcLossBackward", {lp}, {nll}, backward)) {
    n->save(lp);
    n->save(alpha);
    n->save(nll, true);
  }
  return nll;
}
}  // namespace

Tensor ctc_loss(const Tensor& log_probs0, const Tensor& targets0, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank, Reduction reduction, bool zero_infinity) {
  MPX_CHECK(log_probs0.defined() && is_floating(log_probs0.dtype()) &&
                (log_probs0.dim() == 3 || log_probs0.dim() == 2),
            "ctc_loss: log_probs must be floating [T, N, C] (or [T, C] for one sequence), got ",
            ops::describe(log_probs0));
  MPX_CHECK(targets0.defined() && (targets0.dtype() == kInt64 || targets0.dtype() == kInt32),
            "ctc_loss: targets must be integer class indices, got ",
            ops::describe(targets0));
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

  // The extended label sequences, where a step may skip a blank, where paths start and end; which sequences have
  // no alignment (fewer frames than labels plus repeats) and which are empty (no frames, no labels: p = 1).
  Lattice k;
  k.N = N;
  k.L = 2 * S + 1;
  k.blank = blank;
  k.il = input_lengths;
  k.tl = target_lengths;
  const int64_t L = k.L;
  k.ext.assign(static_cast<size_t>(N * L), blank);
  k.last.assign(static_cast<size_t>(2 * N), 0);
  k.skip.assign(static_cast<size_t>(N * L), 0.0);
  k.start.assign(static_cast<size_t>(N * L), 0.0);
  k.one_end.assign(static_cast<size_t>(N), 0.0);
  std::vector<double> impossible(static_cast<size_t>(N), 0.0), empty_ok(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const auto& l = labels[static_cast<size_t>(n)];
    const int64_t tl = static_cast<int64_t>(l.size()), il = input_lengths[static_cast<size_t>(n)];
    const size_t row = static_cast<size_t>(n * L);
    int64_t repeats = 0;
    for (int64_t j = 0; j < tl; ++j) {
      const size_t s = row + static_cast<size_t>(2 * j + 1);
      k.ext[s] = l[static_cast<size_t>(j)];
      if (j > 0 && l[static_cast<size_t>(j)] == l[static_cast<size_t>(j - 1)]) ++repeats;
      if (j > 0 && l[static_cast<size_t>(j)] != l[static_cast<size_t>(j - 1)]) k.skip[s] = 1.0;
    }
    k.start[row] = 1.0;
    if (tl > 0) k.start[row + 1] = 1.0;
    k.last[static_cast<size_t>(2 * n)] = 2 * tl;
    k.last[static_cast<size_t>(2 * n + 1)] = tl > 0 ? 2 * tl - 1 : 0;
    k.one_end[static_cast<size_t>(n)] = tl == 0 ? 1.0 : 0.0;
    impossible[static_cast<size_t>(n)] = il < tl + repeats || (il == 0 && tl > 0) ? 1.0 : 0.0;
    empty_ok[static_cast<size_t>(n)] = il == 0 && tl == 0 ? 1.0 : 0.0;
    k.frames = std::max(k.frames, il);
  }
  const Device dev = lp.device();
  const bool kernel = dispatch::has_kernel(OpId::ctc_lattice, dev.type, lp.dtype()) &&
                      std::getenv("MPX_CTC_RECURSION") == nullptr;
  Tensor nll = kernel ? lattice_nll(lp, k) : recursion_nll(lp, k);
  nll = masked_fill(nll, device_mask(empty_ok, {N}, dev), 0.0);
  nll = masked_fill(nll, device_mask(impossible, {N}, dev), zero_infinity ? 0.0 : std::numeric_limits<double>::infinity());

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
