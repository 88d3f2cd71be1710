// CPU kernels of the CTC lattice: each sequence's forward variables in log space (one sequence per thread), then
// the backward variables and the gradient in the log-probabilities, as Graves et al. and PyTorch's CPU kernel
// compute them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/ctc.h"
#include "ops/dispatch.h"

namespace mpx::cpu {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)): one exp and one log1p (the lattice's steps are mostly two-term: blanks and repeated labels
// take no skip).
template <typename T> T log_add(T a, T b) {
  const T m = std::max(a, b), l = std::min(a, b);
  if (l == T(-kInf)) return m;
  return m + std::log1p(std::exp(l - m));
}
// log(exp(a) + exp(b) + exp(c)), -inf when all three are.
template <typename T> T log_add3(T a, T b, T c) {
  if (c == T(-kInf)) return log_add(a, b);
  const T m = std::max(a, std::max(b, c));
  return m + std::log(std::exp(a - m) + std::exp(b - m) + std::exp(c - m));
}

// One sequence's lattice shape: its frames, its extended labels (blank, l1, blank, ...) and their count.
struct Seq {
  int64_t frames, width;
  const int64_t* ext;
  // Whether a path may come to label s from s - 2, skipping the blank between (the labels differ).
  bool skips(int64_t s, int64_t blank) const { return s > 1 && ext[s] != blank && ext[s] != ext[s - 2]; }
};

Seq seq_of(int64_t n, const Tensor& ext, const Tensor& il, const Tensor& tl) {
  const int64_t L = ext.size(1);
  return {static_cast<const int64_t*>(il.raw_data())[n], 2 * static_cast<const int64_t*>(tl.raw_data())[n] + 1,
          static_cast<const int64_t*>(ext.raw_data()) + n * L};
}

template <typename T> struct CtcLattice {
  static void run(const Tensor& nll, const Tensor& alpha, const Tensor& lp, const Tensor& ext, const Tensor& il,
                  const Tensor& tl, int64_t blank) {
    const int64_t T_ = lp.size(0), N = lp.size(1), C = lp.size(2), L = ext.size(1);
    const T* x = static_cast<const T*>(lp.raw_data());
    T* a = static_cast<T*>(alpha.raw_data());
    T* out = static_cast<T*>(nll.raw_data());
    constexpr T kNone = -std::numeric_limits<T>::infinity();
    parallel_for(N, 1, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        const Seq q = seq_of(n, ext, il, tl);
        T* an = a + n * T_ * L;
        std::fill(an, an + T_ * L, kNone);
        if (q.frames == 0) {
          out[n] = q.width == 1 ? T(0) : std::numeric_limits<T>::infinity();
          continue;
        }
        auto emit = [&](int64_t t, int64_t s) { return x[(t * N + n) * C + q.ext[s]]; };
        an[0] = emit(0, 0);
        if (q.width > 1) an[1] = emit(0, 1);
        for (int64_t t = 1; t < q.frames; ++t) {
          const T* prev = an + (t - 1) * L;
          T* cur = an + t * L;
          for (int64_t s = 0; s < q.width; ++s) {
            const T v = log_add3(prev[s], s > 0 ? prev[s - 1] : kNone, q.skips(s, blank) ? prev[s - 2] : kNone);
            cur[s] = v == kNone ? kNone : v + emit(t, s);
          }
        }
        const T* last = an + (q.frames - 1) * L;
        out[n] = -log_add3(last[q.width - 1], q.width > 1 ? last[q.width - 2] : kNone, kNone);
      }
    });
  }
};

template <typename T> struct CtcLatticeBackward {
  static void run(const Tensor& grad, const Tensor& g, const Tensor& lp, const Tensor& alpha, const Tensor& nll,
                  const Tensor& ext, const Tensor& il, const Tensor& tl, int64_t blank) {
    const int64_t T_ = lp.size(0), N = lp.size(1), C = lp.size(2), L = ext.size(1);
    const T* x = static_cast<const T*>(lp.raw_data());
    const T* a = static_cast<const T*>(alpha.raw_data());
    const T* loss = static_cast<const T*>(nll.raw_data());
    const T* gn = static_cast<const T*>(g.raw_data());
    T* d = static_cast<T*>(grad.raw_data());
    constexpr T kNone = -std::numeric_limits<T>::infinity();
    fill_bits(d, grad.numel(), T(0));
    parallel_for(N, 1, [&](int64_t b, int64_t e) {
      std::vector<T> beta, occupancy(static_cast<size_t>(C));
      for (int64_t n = b; n < e; ++n) {
        const Seq q = seq_of(n, ext, il, tl);
        // No alignment (or no frames): the loss is constant in lp.
        if (q.frames == 0 || !std::isfinite(loss[n]) || gn[n] == T(0)) continue;
        beta.assign(static_cast<size_t>(q.frames * L), kNone);
        auto emit = [&](int64_t t, int64_t s) { return x[(t * N + n) * C + q.ext[s]]; };
        T* bl = beta.data() + (q.frames - 1) * L;
        bl[q.width - 1] = emit(q.frames - 1, q.width - 1);
        if (q.width > 1) bl[q.width - 2] = emit(q.frames - 1, q.width - 2);
        for (int64_t t = q.frames - 2; t >= 0; --t) {
          const T* next = beta.data() + (t + 1) * L;
          T* cur = beta.data() + t * L;
          for (int64_t s = 0; s < q.width; ++s) {
            const T v = log_add3(next[s], s + 1 < q.width ? next[s + 1] : kNone,
                                 s + 2 < q.width && q.skips(s + 2, blank) ? next[s + 2] : kNone);
            cur[s] = v == kNone ? kNone : v + emit(t, s);
          }
        }
        // d nll / d lp[t, c] = -sum over states s labelled c of exp(alpha + beta - lp[t, c] + nll): both variables
        // hold frame t's emission, which the division by it (the subtraction here) removes once. The sum is taken
        // shifted by the frame's largest alpha + beta: one exp per state and one per class.
        const T* an = a + n * T_ * L;
        for (int64_t t = 0; t < q.frames; ++t) {
          const T* ab = an + t * L;
          const T* bt = beta.data() + t * L;
          T top = kNone;
          for (int64_t s = 0; s < q.width; ++s) top = std::max(top, ab[s] + bt[s]);
          if (top == kNone) continue;
          std::fill(occupancy.begin(), occupancy.end(), T(0));
          for (int64_t s = 0; s < q.width; ++s) occupancy[static_cast<size_t>(q.ext[s])] += std::exp(ab[s] + bt[s] - top);
          T* dt = d + (t * N + n) * C;
          const T* xt = x + (t * N + n) * C;
          for (int64_t c = 0; c < C; ++c) {
            const T o = occupancy[static_cast<size_t>(c)];
            if (o > T(0)) dt[c] = -o * std::exp(top - xt[c] + loss[n]) * gn[n];
          }
        }
      }
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_ctc) {
  dispatch::register_types<OpId::ctc_lattice, CtcLattice, float, double>(DeviceType::kCPU);
  dispatch::register_types<OpId::ctc_lattice_backward, CtcLatticeBackward, float, double>(DeviceType::kCPU);
}

}  // namespace mpx::cpu
