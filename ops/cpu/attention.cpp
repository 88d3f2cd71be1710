// CPU kernels of fused attention: FlashAttention-2 style tiles (online softmax forward, recomputing backward), O(T) memory.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/random.h"
#include "ops/attention_kernels.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace mpx::cpu {
namespace {
using kernels::SdpaParams;

// Tile sizes: a [kBq, E] query block meets [kBk, E] key blocks; with E = 64 the working set
// (query, transposed keys, values, scores, output accumulator) stays within L2, and the score
// rows are kBk wide so their loops vectorize with a constant trip count.
constexpr int64_t kBq = 32;
constexpr int64_t kBk = 64;

// exp(x) for x <= 0 (scores minus their running max), vectorizable (no libm call, no branch):
// 2^n * p(r) with a degree-6 polynomial on |r| <= ln2/2, about 2 ulp in f32; x below the
// smallest normal's log (masked keys: -inf) gives exactly 0.
inline float exp_nonpos(float x) {
  const float t = x * 1.44269504088896341f;
  const float n = std::floor(t + 0.5f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t ni = static_cast<int32_t>(std::max(n, -126.0f));
  const float scale = std::bit_cast<float>((ni + 127) << 23);
  return x < -87.0f ? 0.0f : p * scale;
}
inline double exp_nonpos(double x) { return std::exp(x); }

template <typename A> constexpr A kNegInf = -std::numeric_limits<A>::infinity();

// A [B, H, rows, cols] view's element strides.
struct Strides4 {
  int64_t s[4] = {0, 0, 0, 0};
  explicit Strides4(const Tensor& t) {
    if (t.defined())
      for (int d = 0; d < 4; ++d) s[d] = t.stride(d);
  }
  int64_t at(int64_t b, int64_t h, int64_t i) const { return b * s[0] + h * s[1] + i * s[2]; }
};

// f16/bf16 inputs are widened once to f32 (the copy kernel, vectorized); f32/f64 are read in place.
template <typename T> Tensor widened(const Tensor& t) {
  if constexpr (std::is_same_v<T, acc_t<T>>) return t;
  else return t.to(kFloat32);
}

// Scratch buffers come from tensors, so the CPU allocator's counters see every byte.
template <typename A> A* scratch(Tensor& holder, int64_t n) {
  holder = empty({std::max<int64_t>(n, 1)}, TensorOptions(dtype_v<A>));
  return holder.data_ptr<A>();
}

// Everything one (b, h) pair reads: operands as A (f32, f64 for f64), their strides and the mask.
template <typename A> struct Operands {
  const A *q, *k, *v, *mask;
  Strides4 sq, sk, sv, sm;
  int64_t B, H, Hk, L, S, E, Ev;
  double scale;
  bool causal;
  double p;
  A keep_scale;
  uint64_t seed, offset;

  Operands(const Tensor& qa, const Tensor& ka, const Tensor& va, const Tensor& m, const SdpaParams& prm)
      : q(qa.data_ptr<A>()), k(ka.data_ptr<A>()), v(va.data_ptr<A>()), mask(m.defined() ? m.data_ptr<A>() : nullptr),
        sq(qa), sk(ka), sv(va), sm(m) {
    B = qa.size(0), H = qa.size(1), L = qa.size(2), E = qa.size(3);
    Hk = ka.size(1), S = ka.size(2), Ev = va.size(3);
    scale = prm.scale;
    causal = prm.causal;
    p = prm.dropout_p;
    keep_scale = prm.dropout_p >= 1.0 ? A(0) : static_cast<A>(1.0 / (1.0 - prm.dropout_p));
    seed = prm.seed;
    offset = prm.offset;
  }
  int64_t kv_head(int64_t h) const { return h / (H / Hk); }
  // The dropout multiplier of weight (b, h, i, j): 0 or 1/(1-p).
  A dropout_factor(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const uint64_t pos = offset + static_cast<uint64_t>(((b * H + h) * L + i) * S + j);
    return random::uniform(seed, pos) >= p ? keep_scale : A(0);
  }
  // Keys of block [j0, j0 + bk) that query rows up to i_last can see (causal: j <= i).
  int64_t visible_keys(int64_t j0, int64_t bk, int64_t i_last) const {
    if (!causal) return bk;
    return std::clamp<int64_t>(i_last + 1 - j0, 0, bk);
  }
};

// Copies rows [r0, r0 + n) of a [rows, cols] slice (row stride rs, unit column stride) into a
// dense n x cols buffer.
template <typename A> void load_rows(A* dst, const A* src, int64_t rs, int64_t n, int64_t cols) {
  for (int64_t r = 0; r < n; ++r) std::copy(src + r * rs, src + r * rs + cols, dst + r * cols);
}
// The same rows transposed into a cols x kBk buffer (column r of the buffer is row r); columns
// n..kBk are zero so the score loops can run over the whole tile.
template <typename A> void load_rows_t(A* dst, const A* src, int64_t rs, int64_t n, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) std::fill(dst + c * kBk + n, dst + (c + 1) * kBk, A(0));
  for (int64_t r = 0; r < n; ++r) {
    const A* row = src + r * rs;
    for (int64_t c = 0; c < cols; ++c) dst[c * kBk + r] = row[c];
  }
}

// s[i, 0..kBk) = sum_e a[i, e] * bt[e, 0..kBk) for bq rows: the tile's scores (or dO V^T).
template <typename A> void tile_product(A* s, const A* a, const A* bt, int64_t bq, int64_t depth) {
  for (int64_t i = 0; i < bq; ++i) {
    A acc[kBk];
    for (int64_t j = 0; j < kBk; ++j) acc[j] = A(0);
    const A* ar = a + i * depth;
    for (int64_t e = 0; e < depth; ++e) {
      const A x = ar[e];
      const A* br = bt + e * kBk;
      for (int64_t j = 0; j < kBk; ++j) acc[j] += x * br[j];
    }
    std::copy(acc, acc + kBk, s + i * kBk);
  }
}

// Scaled, masked scores of one tile in place: key j of query i (global j0 + j, i0 + i) gets
// -inf when it lies past the block's end, past the causal diagonal, or under a -inf mask.
template <typename A>
void mask_scores(A* s, const Operands<A>& o, int64_t b, int64_t h, int64_t i0, int64_t bq, int64_t j0, int64_t bk) {
  const A sc = static_cast<A>(o.scale);
  for (int64_t i = 0; i < bq; ++i) {
    A* row = s + i * kBk;
    for (int64_t j = 0; j < kBk; ++j) row[j] *= sc;
    const int64_t limit = o.causal ? std::clamp<int64_t>(i0 + i + 1 - j0, 0, bk) : bk;
    for (int64_t j = limit; j < kBk; ++j) row[j] = kNegInf<A>;
    if (o.mask) {
      const A* mr = o.mask + o.sm.at(b, h, i0 + i) + j0 * o.sm.s[3];
      const int64_t ms = o.sm.s[3];
      for (int64_t j = 0; j < limit; ++j) row[j] += mr[j * ms];
    }
  }
}

template <typename T> struct SdpaForward {
  static void run(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& mask, const SdpaParams& prm) {
    using A = acc_t<T>;
    const Tensor qa = widened<T>(q), ka = widened<T>(k), va = widened<T>(v);
    const Operands<A> o(qa, ka, va, mask, prm);
    T* out_p = out.data_ptr<T>();
    A* lse_p = lse.data_ptr<A>();
    const int64_t E = o.E, Ev = o.Ev, L = o.L, S = o.S;
    const int64_t nqb = (L + kBq - 1) / kBq;
    parallel_for(o.B * o.H * nqb, 1, [&](int64_t t0, int64_t t1) {
      Tensor h1, h2, h3, h4, h5;
      A* qt = scratch<A>(h1, kBq * E);
      A* kt = scratch<A>(h2, E * kBk);
      A* vb = scratch<A>(h3, kBk * Ev);
      A* st = scratch<A>(h4, kBq * kBk);
      A* acc = scratch<A>(h5, kBq * Ev);
      A m[kBq], l[kBq];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t qb = t % nqb, bh = t / nqb, b = bh / o.H, h = bh % o.H, hk = o.kv_head(h);
        const int64_t i0 = qb * kBq, bq = std::min(kBq, L - i0);
        load_rows(qt, o.q + o.sq.at(b, h, i0), o.sq.s[2], bq, E);
        std::fill(acc, acc + bq * Ev, A(0));
        std::fill(m, m + bq, kNegInf<A>);
        std::fill(l, l + bq, A(0));
        const int64_t s_end = o.causal ? std::min(S, i0 + bq) : S;
        for (int64_t j0 = 0; j0 < s_end; j0 += kBk) {
          const int64_t bk = std::min(kBk, S - j0);
          load_rows_t(kt, o.k + o.sk.at(b, hk, j0), o.sk.s[2], bk, E);
          load_rows(vb, o.v + o.sv.at(b, hk, j0), o.sv.s[2], bk, Ev);
          tile_product(st, qt, kt, bq, E);
          mask_scores(st, o, b, h, i0, bq, j0, bk);
          for (int64_t i = 0; i < bq; ++i) {
            A* row = st + i * kBk;
            A mx = m[i];
            for (int64_t j = 0; j < kBk; ++j) mx = std::max(mx, row[j]);
            if (mx == kNegInf<A>) continue;  // every key so far masked: nothing to add
            const A alpha = exp_nonpos(m[i] - mx);
            A sum = 0;
            for (int64_t j = 0; j < kBk; ++j) {
              row[j] = exp_nonpos(row[j] - mx);
              sum += row[j];
            }
            m[i] = mx;
            l[i] = l[i] * alpha + sum;
            if (o.p > 0.0)
              for (int64_t j = 0; j < bk; ++j) row[j] *= o.dropout_factor(b, h, i0 + i, j0 + j);
            A* ar = acc + i * Ev;
            for (int64_t c = 0; c < Ev; ++c) ar[c] *= alpha;
            for (int64_t j = 0; j < bk; ++j) {
              const A pj = row[j];
              const A* vr = vb + j * Ev;
              for (int64_t c = 0; c < Ev; ++c) ar[c] += pj * vr[c];
            }
          }
        }
        T* orow = out_p + ((b * o.H + h) * L + i0) * Ev;
        A* lrow = lse_p + (b * o.H + h) * L + i0;
        for (int64_t i = 0; i < bq; ++i) {
          // A row with every key masked has l = 0: output 0, lse -inf (PyTorch's fused kernels).
          const A inv = l[i] > A(0) ? A(1) / l[i] : A(0);
          for (int64_t c = 0; c < Ev; ++c) orow[i * Ev + c] = static_cast<T>(acc[i * Ev + c] * inv);
          lrow[i] = l[i] > A(0) ? m[i] + std::log(l[i]) : kNegInf<A>;
        }
      }
    });
  }
};

template <typename T> struct SdpaBackward {
  static void run(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                  const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                  const SdpaParams& prm) {
    using A = acc_t<T>;
    const Tensor qa = widened<T>(q), ka = widened<T>(k), va = widened<T>(v);
    const Tensor ga = widened<T>(dout), oa = widened<T>(out);
    const Operands<A> o(qa, ka, va, mask, prm);
    const A* g_p = ga.data_ptr<A>();
    const A* o_p = oa.data_ptr<A>();
    const A* lse_p = lse.data_ptr<A>();
    T* dq_p = dq.data_ptr<T>();
    T* dk_p = dk.data_ptr<T>();
    T* dv_p = dv.data_ptr<T>();
    const int64_t E = o.E, Ev = o.Ev, L = o.L, S = o.S, G = o.H / o.Hk;
    const A sc = static_cast<A>(o.scale);
    // One task per (b, kv head): it owns its keys' dk/dv (the grouped query heads are summed in
    // order, so results do not depend on the thread count) and the dq rows of its query heads.
    parallel_for(o.B * o.Hk, 1, [&](int64_t t0, int64_t t1) {
      Tensor h1, h2, h3, h4, h5, h6, h7, h8, h9, h10;
      A* dk_acc = scratch<A>(h1, S * E);
      A* dv_acc = scratch<A>(h2, S * Ev);
      A* qt = scratch<A>(h3, kBq * E);
      A* gt = scratch<A>(h4, kBq * Ev);
      A* kt = scratch<A>(h5, E * kBk);
      A* vt = scratch<A>(h6, Ev * kBk);
      A* kb = scratch<A>(h7, kBk * E);
      A* pt = scratch<A>(h8, kBq * kBk);
      A* dpt = scratch<A>(h9, kBq * kBk);
      A* dq_acc = scratch<A>(h10, kBq * E);
      A D[kBq], lrow[kBq];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / o.Hk, hk = t % o.Hk;
        std::fill(dk_acc, dk_acc + S * E, A(0));
        std::fill(dv_acc, dv_acc + S * Ev, A(0));
        for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
          for (int64_t i0 = 0; i0 < L; i0 += kBq) {
            const int64_t bq = std::min(kBq, L - i0);
            const int64_t row0 = (b * o.H + h) * L + i0;
            load_rows(qt, o.q + o.sq.at(b, h, i0), o.sq.s[2], bq, E);
            std::copy(g_p + row0 * Ev, g_p + (row0 + bq) * Ev, gt);
            for (int64_t i = 0; i < bq; ++i) {
              A d = 0;
              for (int64_t c = 0; c < Ev; ++c) d += gt[i * Ev + c] * o_p[(row0 + i) * Ev + c];
              D[i] = d;
              lrow[i] = lse_p[row0 + i];
            }
            std::fill(dq_acc, dq_acc + bq * E, A(0));
            const int64_t s_end = o.causal ? std::min(S, i0 + bq) : S;
            for (int64_t j0 = 0; j0 < s_end; j0 += kBk) {
              const int64_t bk = std::min(kBk, S - j0);
              const A* ksrc = o.k + o.sk.at(b, hk, j0);
              load_rows_t(kt, ksrc, o.sk.s[2], bk, E);
              load_rows(kb, ksrc, o.sk.s[2], bk, E);
              load_rows_t(vt, o.v + o.sv.at(b, hk, j0), o.sv.s[2], bk, Ev);
              tile_product(pt, qt, kt, bq, E);
              mask_scores(pt, o, b, h, i0, bq, j0, bk);
              tile_product(dpt, gt, vt, bq, Ev);
              for (int64_t i = 0; i < bq; ++i) {
                A* prow = pt + i * kBk;
                A* dprow = dpt + i * kBk;
                const A li = lrow[i];
                if (li == kNegInf<A>) {  // every key masked: no gradient through this row
                  std::fill(prow, prow + kBk, A(0));
                  std::fill(dprow, dprow + kBk, A(0));
                  continue;
                }
                for (int64_t j = 0; j < kBk; ++j) prow[j] = exp_nonpos(prow[j] - li);
                if (o.p > 0.0) {
                  // prow becomes the dropped weights (dv's factor); dS = P * (Z * dP - D).
                  for (int64_t j = 0; j < bk; ++j) {
                    const A z = o.dropout_factor(b, h, i0 + i, j0 + j);
                    dprow[j] = prow[j] * (z * dprow[j] - D[i]) * sc;
                    prow[j] *= z;
                  }
                } else {
                  for (int64_t j = 0; j < kBk; ++j) dprow[j] = prow[j] * (dprow[j] - D[i]) * sc;
                }
              }
              // dv[j] += sum_i P[i, j] dO[i]; dk[j] += sum_i dS[i, j] q[i]; dq[i] += sum_j dS[i, j] k[j].
              for (int64_t i = 0; i < bq; ++i) {
                const A* prow = pt + i * kBk;
                const A* dsrow = dpt + i * kBk;
                const A* gr = gt + i * Ev;
                const A* qr = qt + i * E;
                A* dqr = dq_acc + i * E;
                for (int64_t j = 0; j < bk; ++j) {
                  const A pj = prow[j], dsj = dsrow[j];
                  A* dvr = dv_acc + (j0 + j) * Ev;
                  A* dkr = dk_acc + (j0 + j) * E;
                  const A* kr = kb + j * E;
                  for (int64_t c = 0; c < Ev; ++c) dvr[c] += pj * gr[c];
                  for (int64_t c = 0; c < E; ++c) {
                    dkr[c] += dsj * qr[c];
                    dqr[c] += dsj * kr[c];
                  }
                }
              }
            }
            T* dqo = dq_p + row0 * E;
            for (int64_t n = 0; n < bq * E; ++n) dqo[n] = static_cast<T>(dq_acc[n]);
          }
        }
        T* dko = dk_p + (b * o.Hk + hk) * S * E;
        T* dvo = dv_p + (b * o.Hk + hk) * S * Ev;
        for (int64_t n = 0; n < S * E; ++n) dko[n] = static_cast<T>(dk_acc[n]);
        for (int64_t n = 0; n < S * Ev; ++n) dvo[n] = static_cast<T>(dv_acc[n]);
      }
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_attention) {
  dispatch::register_types<OpId::sdpa_fused, SdpaForward, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::sdpa_fused_backward, SdpaBackward, float, double, Half, BFloat16>(DeviceType::kCPU);
}

}  // namespace mpx::cpu
