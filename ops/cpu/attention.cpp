// CPU kernels of fused attention: FlashAttention-2 style tiles (online softmax forward, recomputing backward), O(T) memory.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/random.h"
#include "ops/attention_kernels.h"
#include "ops/cpu/attention_tiles.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace mpx::cpu {
namespace {
using namespace attn;

// C[m, n] (=, or += with Acc) op(A) B for row-major tiles: op(A) is [m, k] read as
// A[i * lda + p], or with TransA stored [k, m] and read as A[p * lda + i]; B is [k, n] with n a
// multiple of kNr. Rows of op(A) past m read as 0 (so A needs no padding rows) but C has room
// for m rounded up to kMr rows. A kMr x kNr block of C lives in vector registers (GCC vector
// extensions: 12 of the 16 AVX2 or 32 AVX-512 registers) while k runs, so each loaded row of B
// feeds kMr FMAs.
//
// One kMr x (NV vectors) block of C at (i, j) over the products p in [p0, p1); Partial: only
// `rows` rows of op(A) are real.
template <bool TransA, bool Acc, bool Partial, typename S>
inline void gemm_block(S* __restrict c, int64_t ldc, const S* __restrict a, int64_t lda, const S* __restrict b,
                       int64_t ldb, int64_t i, int64_t j, int64_t p0, int64_t p1, int64_t rows) {
  using V = typename VecOf<S>::type;
  using U = typename VecOf<S>::unaligned;
  constexpr int W = kVecBytes / sizeof(S);
  V acc[kMr][kNv];
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < kNv; ++v) acc[r][v] = V{};
  for (int64_t p = p0; p < p1; ++p) {
    V bv[kNv];
    for (int v = 0; v < kNv; ++v) bv[v] = *reinterpret_cast<const U*>(b + p * ldb + j + v * W);
    for (int r = 0; r < kMr; ++r) {
      if (Partial && r >= rows) break;
      const S x = TransA ? a[p * lda + i + r] : a[(i + r) * lda + p];
      for (int v = 0; v < kNv; ++v) acc[r][v] += x * bv[v];
    }
  }
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < kNv; ++v) {
      U* cv = reinterpret_cast<U*>(c + (i + r) * ldc + j + v * W);
      *cv = Acc ? *cv + acc[r][v] : acc[r][v];
    }
}
template <bool TransA, bool Acc, Causal Cz = Causal::kNone, typename S>
void tile_gemm(S* __restrict c, int64_t ldc, const S* __restrict a, int64_t lda, const S* __restrict b, int64_t ldb,
               int64_t m, int64_t n, int64_t k, int64_t diag = 0) {
  constexpr int64_t NB = kNv * kVecBytes / sizeof(S);  // kNr floats, or half as many doubles
  for (int64_t i = 0; i < m; i += kMr) {
    const int64_t rows = std::min<int64_t>(kMr, m - i);
    int64_t p0 = 0, p1 = k;
    if constexpr (Cz == Causal::kKeysAfter) p1 = std::clamp<int64_t>(i + kMr - diag, 0, k);
    if constexpr (Cz == Causal::kQueriesBefore) p0 = std::clamp<int64_t>(i + diag, 0, k);
    for (int64_t j = 0; j < n; j += NB) {
      if (Cz == Causal::kMaskedOut && i + diag > j + NB - 1) continue;
      if (rows == kMr) gemm_block<TransA, Acc, false>(c, ldc, a, lda, b, ldb, i, j, p0, p1, rows);
      else gemm_block<TransA, Acc, true>(c, ldc, a, lda, b, ldb, i, j, p0, p1, rows);
    }
  }
}

// f16/bf16 inputs are widened once to f32 (the copy kernel, vectorized); f32/f64 are read in place.
template <typename T> Tensor widened(const Tensor& t) {
  if constexpr (std::is_same_v<T, acc_t<T>>) return t;
  else return t.to(kFloat32);
}
// Key or value heads copied once per call with their rows zero-padded to a multiple of kNr
// elements, [B * Hk, rows, cols_p], for products that read whole vectors of a row (only where
// the head dim is not such a multiple already). O(S * E) memory, like the inputs.
template <typename A>
Tensor pack_heads(const A* src, const Strides4& st, int64_t B, int64_t Hk, int64_t rows, int64_t cols, int64_t cols_p) {
  Tensor packed = empty({std::max<int64_t>(B * Hk * rows * cols_p, 1)}, TensorOptions(dtype_v<A>));
  A* base = packed.data_ptr<A>();
  parallel_for(B * Hk, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      load_tile(base + t * rows * cols_p, cols_p, rows, src + st.at(t / Hk, t % Hk, 0), st.s[2], rows, cols);
  });
  return packed;
}

// The rows of one key/value head as a product reads them: in place when each row holds whole
// vectors (the head dim a multiple of kNr, unit stride), else from a padded copy.
template <typename A> struct HeadRows {
  Tensor packed;
  const A* base;
  Strides4 st;
  int64_t ld;
  HeadRows(const A* src, const Strides4& s, int64_t B, int64_t Hk, int64_t rows, int64_t cols, int64_t cols_p)
      : base(src), st(s), ld(s.s[2]) {
    if (cols == cols_p) return;
    packed = pack_heads(src, s, B, Hk, rows, cols, cols_p);
    base = packed.data_ptr<A>();
    st.s[0] = Hk * rows * cols_p, st.s[1] = rows * cols_p, st.s[2] = cols_p, st.s[3] = 1;
    ld = cols_p;
  }
  const A* row(int64_t b, int64_t hk, int64_t j) const { return base + st.at(b, hk, j); }
};

// Queries few enough that a tile of kBq would be mostly padding (one per step when generating
// with a key/value cache): each query row on its own, its scores over all keys in one pass (a
// dot product per key, vectorized over the head dim), one exp per weight, then the weighted sum
// of value rows. Reads K and V once per query, in place and in their own dtype.
constexpr int64_t kFewQueries = 4;

template <typename T> void few_queries_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                               const Tensor& v, const Tensor& mask, const SdpaParams& prm) {
  using A = acc_t<T>;
  const Operands<A, T> o(q, k, v, mask, prm);
  T* out_p = out.data_ptr<T>();
  const Strides4 so(out);
  A* lse_p = lse.data_ptr<A>();
  const int64_t E = o.E, Ev = o.Ev, L = o.L, S = o.S;
  const A sc = static_cast<A>(o.scale);
  parallel_tasks(o.B * o.H * L, [&](int64_t t0, int64_t t1) {
    Tensor h1, h2, h3;
    A* w = scratch<A>(h1, S);  // scores, then weights
    A* qa = scratch<A>(h2, E);
    A* acc = scratch<A>(h3, Ev);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t % L, bh = t / L, b = bh / o.H, h = bh % o.H, hk = o.kv_head(h);
      const T* qrow = o.q + o.sq.at(b, h, i);
      for (int64_t c = 0; c < E; ++c) qa[c] = static_cast<A>(qrow[c]) * sc;
      const int64_t seen = o.causal ? std::min(S, i + 1) : S;  // PyTorch's is_causal: key j <= query i
      A mx = kNegInf<A>;
      for (int64_t j = 0; j < seen; ++j) {
        const T* krow = o.k + o.sk.at(b, hk, j);
        A d = 0;
#pragma omp simd reduction(+ : d)
        for (int64_t c = 0; c < E; ++c) d += qa[c] * static_cast<A>(krow[c]);
        if (o.mask) d += o.mask[o.sm.at(b, h, i) + j * o.sm.s[3]];
        w[j] = d;
        mx = d > mx ? d : mx;
      }
      std::fill(acc, acc + Ev, A(0));
      A l = 0;
      if (mx != kNegInf<A>) {  // else every key is masked: a zero row, lse -inf
#pragma omp simd reduction(+ : l)
        for (int64_t j = 0; j < seen; ++j) {
          w[j] = exp_nonpos(w[j] - mx);
          l += w[j];
        }
        for (int64_t j = 0; j < seen; ++j) {
          const A p = o.p > 0.0 ? w[j] * o.dropout_factor(b, h, i, j) : w[j];
          if (p == A(0)) continue;
          const T* vrow = o.v + o.sv.at(b, hk, j);
#pragma omp simd
          for (int64_t c = 0; c < Ev; ++c) acc[c] += p * static_cast<A>(vrow[c]);
        }
      }
      finish_rows(out_p + so.at(b, h, i), so.s[2], lse_p + (b * o.H + h) * L + i, acc, Ev, &mx, &l, 1, Ev);
    }
  });
}

template <typename T> struct SdpaForward {
  static void run(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& mask, const SdpaParams& prm) {
    if (q.size(2) <= kFewQueries) return few_queries_forward<T>(out, lse, q, k, v, mask, prm);
    if constexpr (std::is_same_v<T, BFloat16>)
      if (sdpa_forward_bf16(out, lse, q, k, v, mask, prm)) return;
    using A = acc_t<T>;
    const Tensor qa = widened<T>(q), ka = widened<T>(k), va = widened<T>(v);
    const Operands<A> o(qa, ka, va, mask, prm);
    T* out_p = out.data_ptr<T>();
    const Strides4 so(out);  // any dense order of dims with unit stride in the last (the op's choice)
    A* lse_p = lse.data_ptr<A>();
    const int64_t E = o.E, Ev = o.Ev, Evp = o.Evp, L = o.L, S = o.S;
    const int64_t nqb = (L + kBq - 1) / kBq;
    const HeadRows<A> vr(o.v, o.sv, o.B, o.Hk, S, Ev, Evp);
    // One task per (b, h, query block); each writes its own rows only.
    parallel_tasks(o.B * o.H * nqb, [&](int64_t t0, int64_t t1) {
      Tensor h1, h2, h3;
      A* qt = scratch<A>(h1, E * kBq);     // the query block transposed, [E, kBq]
      A* st = scratch<A>(h2, kBkRows * kBq);   // scores, then weights, [keys, queries]
      A* acc = scratch<A>(h3, kBqRows * Evp);  // unnormalized output rows
      A m[kBq], l[kBq], alpha[kBq];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t qb = t % nqb, bh = t / nqb, b = bh / o.H, h = bh % o.H, hk = o.kv_head(h);
        const int64_t i0 = qb * kBq, bq = std::min(kBq, L - i0), bqn = round_up(bq, kNr);
        load_tile_t(qt, o.q + o.sq.at(b, h, i0), o.sq.s[2], bq, E);
        std::fill(acc, acc + kBqRows * Evp, A(0));
        std::fill(m, m + kBq, kNegInf<A>);
        std::fill(l, l + kBq, A(0));
        const int64_t s_end = o.causal ? std::min(S, i0 + bq) : S;
        for (int64_t j0 = 0; j0 < s_end; j0 += kBk) {
          // Keys of the block that some query of the block may see (causal: up to its last query).
          const int64_t bk = std::min(kBk, S - j0), nk = o.causal ? std::min(bk, i0 + bq - j0) : bk;
          const int64_t nkm = round_up(nk, kMr);
          const int64_t diag = o.causal ? j0 - i0 : kNoDiag;
          tile_gemm<false, false, Causal::kMaskedOut>(st, kBq, o.k + o.sk.at(b, hk, j0), o.sk.s[2], qt, kBq, nk, bqn, E,
                                                      diag);
          mask_scores_t(st, o, b, h, i0, bq, bqn, j0, nk);
          online_softmax_step(st, nkm, bqn, m, l, alpha);
          drop_weights(st, o, b, h, i0, bq, j0, nk);
          for (int64_t i = 0; i < bq; ++i)
            for (int64_t c = 0; c < Evp; ++c) acc[i * Evp + c] *= alpha[i];
          tile_gemm<true, true, Causal::kKeysAfter>(acc, Evp, st, kBq, vr.row(b, hk, j0), vr.ld, bq, Evp, nk, diag);
        }
        finish_rows(out_p + so.at(b, h, i0), so.s[2], lse_p + (b * o.H + h) * L + i0, acc, Evp, m, l, bq, Ev);
      }
    });
  }
};

template <typename T> struct SdpaBackward {
  static void run(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                  const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                  const SdpaParams& prm) {
    if constexpr (std::is_same_v<T, BFloat16>)
      if (sdpa_backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, mask, prm)) return;
    using A = acc_t<T>;
    const Tensor qa = widened<T>(q), ka = widened<T>(k), va = widened<T>(v);
    const Tensor ga = widened<T>(dout), oa = widened<T>(out);
    const Operands<A> o(qa, ka, va, mask, prm);
    // Every tensor here may be a view in any dense order of dims with a unit last stride (the op
    // keeps the caller's [B, T, H, D] layouts, so no head transposes are copied around the call).
    const A* g_p = ga.data_ptr<A>();
    const A* o_p = oa.data_ptr<A>();
    const Strides4 sg(ga), so(oa), sdq(dq), sdk(dk), sdv(dv);
    const A* lse_p = lse.data_ptr<A>();
    T* dq_p = dq.data_ptr<T>();
    T* dk_p = dk.data_ptr<T>();
    T* dv_p = dv.data_ptr<T>();
    const int64_t E = o.E, Ev = o.Ev, Ep = o.Ep, Evp = o.Evp, L = o.L, S = o.S, G = o.Hk > 0 ? o.H / o.Hk : 0;
    const int64_t Sp = round_up(std::max<int64_t>(S, 1), kBk);
    const HeadRows<A> kr(o.k, o.sk, o.B, o.Hk, S, E, Ep);
    // One task per (b, kv head): it owns its keys' dk/dv (the grouped query heads are summed in
    // order, so results do not depend on the thread count) and the dq rows of its query heads.
    parallel_tasks(o.B * o.Hk, [&](int64_t t0, int64_t t1) {
      Tensor h1, h2, h3, h4, h5, h6, h7, h8, h9;
      A* dk_acc = scratch<A>(h1, (Sp + kMr) * Ep);
      A* dv_acc = scratch<A>(h2, (Sp + kMr) * Evp);
      A* qt = scratch<A>(h3, E * kBq);      // query block transposed
      A* qp = scratch<A>(h4, kBq * Ep);     // query block, rows padded
      A* gt = scratch<A>(h5, Ev * kBq);     // dO block transposed
      A* gp = scratch<A>(h6, kBq * Evp);    // dO block, rows padded
      A* pt = scratch<A>(h7, kBkRows * kBq);   // weights, [keys, queries]
      A* dst = scratch<A>(h8, kBkRows * kBq);  // dP, then dS, [keys, queries]
      A* dq_acc = scratch<A>(h9, kBqRows * Ep);
      A D[kBq], lsafe[kBq];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / o.Hk, hk = t % o.Hk;
        std::fill(dk_acc, dk_acc + Sp * Ep, A(0));
        std::fill(dv_acc, dv_acc + Sp * Evp, A(0));
        for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
          for (int64_t i0 = 0; i0 < L; i0 += kBq) {
            const int64_t bq = std::min(kBq, L - i0), bqn = round_up(bq, kNr);
            const int64_t row0 = (b * o.H + h) * L + i0;
            const A* qsrc = o.q + o.sq.at(b, h, i0);
            const A* gsrc = g_p + sg.at(b, h, i0);
            const A* osrc = o_p + so.at(b, h, i0);
            load_tile_t(qt, qsrc, o.sq.s[2], bq, E);
            load_tile(qp, Ep, bq, qsrc, o.sq.s[2], bq, E);
            load_tile_t(gt, gsrc, sg.s[2], bq, Ev);
            load_tile(gp, Evp, bq, gsrc, sg.s[2], bq, Ev);
            row_terms(D, lsafe, gsrc, sg.s[2], osrc, so.s[2], lse_p + row0, bq, bqn, Ev);
            std::fill(dq_acc, dq_acc + kBqRows * Ep, A(0));
            const int64_t s_end = o.causal ? std::min(S, i0 + bq) : S;
            for (int64_t j0 = 0; j0 < s_end; j0 += kBk) {
              const int64_t bk = std::min(kBk, S - j0), nk = o.causal ? std::min(bk, i0 + bq - j0) : bk;
              const int64_t nkm = round_up(nk, kMr);
              const int64_t diag = o.causal ? j0 - i0 : kNoDiag;
              tile_gemm<false, false, Causal::kMaskedOut>(pt, kBq, o.k + o.sk.at(b, hk, j0), o.sk.s[2], qt, kBq, nk,
                                                          bqn, E, diag);
              mask_scores_t(pt, o, b, h, i0, bq, bqn, j0, nk);
              tile_gemm<false, false>(dst, kBq, o.v + o.sv.at(b, hk, j0), o.sv.s[2], gt, kBq, nk, bqn, Ev);
              weights_and_score_grads(pt, dst, o, b, h, i0, bq, bqn, j0, nk, nkm, D, lsafe);
              // dv += P^T dO, dk += dS^T q, dq += dS k (dS already carries the scale).
              constexpr auto kQ = Causal::kQueriesBefore;
              tile_gemm<false, true, kQ>(dv_acc + j0 * Evp, Evp, pt, kBq, gp, Evp, nk, Evp, bq, diag);
              tile_gemm<false, true, kQ>(dk_acc + j0 * Ep, Ep, dst, kBq, qp, Ep, nk, Ep, bq, diag);
              tile_gemm<true, true, Causal::kKeysAfter>(dq_acc, Ep, dst, kBq, kr.row(b, hk, j0), kr.ld, bq, Ep, nk,
                                                        diag);
            }
            store_rows(dq_p + sdq.at(b, h, i0), sdq.s[2], dq_acc, Ep, bq, E);
          }
        }
        store_rows(dk_p + sdk.at(b, hk, 0), sdk.s[2], dk_acc, Ep, S, E);
        store_rows(dv_p + sdv.at(b, hk, 0), sdv.s[2], dv_acc, Evp, S, Ev);
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
