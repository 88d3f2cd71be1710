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
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace mpx::cpu {
namespace {
using kernels::SdpaParams;

// Tile sizes: a [kBq, E] query block meets [kBk, E] key blocks; with E = 64 the working set
// (query, transposed keys, values, scores, output accumulator) stays within L2. Tiles are
// padded with zeros to multiples of the micro-kernel's kMr x kNr, so no product has an edge case.
constexpr int64_t kMr = 4, kNr = 16;
constexpr int64_t kBq = 64;  // a multiple of kMr
constexpr int64_t kBk = 64;  // a multiple of kNr
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// exp(x) for x <= 0 (scores minus their running max), vectorizable (no libm call, no branch;
// this file is compiled with -fno-trapping-math so GCC if-converts the selects): 2^n * p(r)
// with a degree-6 polynomial on |r| <= ln2/2, about 2 ulp in f32; x below the smallest
// normal's log (masked keys: -inf) gives exactly 0.
inline float exp_nonpos(float x) {
  const float xc = x > -87.0f ? x : -87.0f;
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const uint32_t keep = x > -87.0f ? 0xFFFFFFFFu : 0u;  // NaN propagates through p (x NaN: xc = -87, keep 0)
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p * scale) & keep) + (x != x ? x : 0.0f);
}
inline double exp_nonpos(double x) { return std::exp(x); }

template <typename A> constexpr A kNegInf = -std::numeric_limits<A>::infinity();

// C[m, n] (=, or += with Acc) op(A) B for dense row-major tiles: op(A) is [m, k] read as
// A[i * lda + p], or with TransA stored [k, m] and read as A[p * lda + i]; B is [k, n]. m is a
// multiple of kMr and n of kNr. A kMr x kNr block of C lives in vector registers (GCC vector
// extensions: 8 AVX2 registers for f32) while k runs, so each loaded row of B feeds kMr FMAs.
template <typename S> struct VecOf {
  typedef S type __attribute__((vector_size(32)));
  // The same vector at element alignment, for loads and stores straight from the tiles.
  typedef S unaligned __attribute__((vector_size(32), __may_alias__, aligned(sizeof(S))));
};
template <bool TransA, bool Acc, typename S>
void tile_gemm(S* __restrict c, int64_t ldc, const S* __restrict a, int64_t lda, const S* __restrict b, int64_t ldb,
               int64_t m, int64_t n, int64_t k) {
  using V = typename VecOf<S>::type;
  using U = typename VecOf<S>::unaligned;
  constexpr int W = 32 / sizeof(S);
  constexpr int NV = 2;  // vectors per row of the block: 16 floats or 8 doubles
  constexpr int NB = NV * W;
  for (int64_t i = 0; i < m; i += kMr)
    for (int64_t j = 0; j < n; j += NB) {
      V acc[kMr][NV];
      for (int r = 0; r < kMr; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = V{};
      for (int64_t p = 0; p < k; ++p) {
        V bv[NV];
        for (int v = 0; v < NV; ++v) bv[v] = *reinterpret_cast<const U*>(b + p * ldb + j + v * W);
        for (int r = 0; r < kMr; ++r) {
          const S x = TransA ? a[p * lda + i + r] : a[(i + r) * lda + p];
          for (int v = 0; v < NV; ++v) acc[r][v] += x * bv[v];
        }
      }
      for (int r = 0; r < kMr; ++r)
        for (int v = 0; v < NV; ++v) {
          U* cv = reinterpret_cast<U*>(c + (i + r) * ldc + j + v * W);
          *cv = Acc ? *cv + acc[r][v] : acc[r][v];
        }
    }
}

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
  int64_t Ep, Evp;  // head dims padded to the micro-kernel's width
  int64_t Sp;       // keys padded to whole key blocks
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
    Ep = round_up(std::max<int64_t>(E, 1), kNr), Evp = round_up(std::max<int64_t>(Ev, 1), kNr);
    Sp = round_up(std::max<int64_t>(S, 1), kBk);
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
};

// n rows of `cols` elements (row stride rs, unit column stride) into a rows_total x ld tile,
// zero everywhere else.
template <typename A>
void load_tile(A* dst, int64_t ld, int64_t rows_total, const A* src, int64_t rs, int64_t n, int64_t cols) {
  for (int64_t r = 0; r < rows_total; ++r) {
    A* d = dst + r * ld;
    if (r < n) {
      std::copy(src + r * rs, src + r * rs + cols, d);
      std::fill(d + cols, d + ld, A(0));
    } else {
      std::fill(d, d + ld, A(0));
    }
  }
}
// Key/value heads repacked once per call, zero-padded to whole tiles, so every tile product
// reads them in place: [B * Hk, rows_p, cols_p] (rows as stored), or with `transpose`
// [B * Hk, cols, rows_p] (column r of a head is its row r). O(S * E) memory, like the inputs.
template <typename A>
Tensor pack_heads(const A* src, const Strides4& st, int64_t B, int64_t Hk, int64_t rows, int64_t cols, int64_t rows_p,
                  int64_t cols_p, bool transpose) {
  const int64_t per = transpose ? cols * rows_p : rows_p * cols_p;
  Tensor packed = empty({std::max<int64_t>(B * Hk * per, 1)}, TensorOptions(dtype_v<A>));
  A* base = packed.data_ptr<A>();
  parallel_for(B * Hk, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const A* __restrict in = src + st.at(t / Hk, t % Hk, 0);
      A* __restrict out = base + t * per;
      const int64_t rs = st.s[2];
      if (transpose) {
        // Row blocks small enough to stay in L1 while each column of them is written out contiguously.
        for (int64_t c = 0; c < cols; ++c) std::fill(out + c * rows_p + rows, out + (c + 1) * rows_p, A(0));
        for (int64_t r0 = 0; r0 < rows; r0 += 64) {
          const int64_t r1 = std::min(rows, r0 + 64);
          for (int64_t c = 0; c < cols; ++c) {
            A* __restrict oc = out + c * rows_p;
            for (int64_t r = r0; r < r1; ++r) oc[r] = in[r * rs + c];
          }
        }
      } else {
        load_tile(out, cols_p, rows_p, in, rs, rows, cols);
      }
    }
  });
  return packed;
}

// Max and sum over a kBk-wide row in 8 lanes (plain reductions would not vectorize).
template <typename A> A row_max(const A* row) {
  A m8[8];
  for (int l = 0; l < 8; ++l) m8[l] = kNegInf<A>;
  for (int64_t j = 0; j < kBk; j += 8)
    for (int l = 0; l < 8; ++l) m8[l] = row[j + l] > m8[l] ? row[j + l] : m8[l];
  A m = m8[0];
  for (int l = 1; l < 8; ++l) m = m8[l] > m ? m8[l] : m;
  return m;
}
template <typename A> A row_sum(const A* row) {
  A s8[8] = {};
  for (int64_t j = 0; j < kBk; j += 8)
    for (int l = 0; l < 8; ++l) s8[l] += row[j + l];
  A s = 0;
  for (int l = 0; l < 8; ++l) s += s8[l];
  return s;
}

// Scaled, masked scores of one tile in place: key j of query i (global j0 + j, i0 + i) gets
// -inf when it lies past the block's end, past the causal diagonal, or under a -inf mask.
// Columns past the causal limit may hold anything (the products skip them): they are only written.
template <typename A>
void mask_scores(A* s, const Operands<A>& o, int64_t b, int64_t h, int64_t i0, int64_t bq, int64_t j0, int64_t bk) {
  const A sc = static_cast<A>(o.scale);
  for (int64_t i = 0; i < bq; ++i) {
    A* row = s + i * kBk;
    const int64_t limit = o.causal ? std::clamp<int64_t>(i0 + i + 1 - j0, 0, bk) : bk;
    if (o.mask) {
      const A* mr = o.mask + o.sm.at(b, h, i0 + i) + j0 * o.sm.s[3];
      const int64_t ms = o.sm.s[3];
      for (int64_t j = 0; j < limit; ++j) row[j] = row[j] * sc + mr[j * ms];
    } else {
      for (int64_t j = 0; j < limit; ++j) row[j] *= sc;
    }
    for (int64_t j = limit; j < kBk; ++j) row[j] = kNegInf<A>;
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
    const int64_t E = o.E, Ev = o.Ev, Evp = o.Evp, L = o.L, S = o.S, Sp = o.Sp;
    const int64_t nqb = (L + kBq - 1) / kBq;
    const Tensor kt_all = pack_heads(o.k, o.sk, o.B, o.Hk, S, E, Sp, E, true);     // [.., E, Sp]
    const Tensor v_all = pack_heads(o.v, o.sv, o.B, o.Hk, S, Ev, Sp, Evp, false);  // [.., Sp, Evp]
    const A* kt_p = kt_all.data_ptr<A>();
    const A* v_pk = v_all.data_ptr<A>();
    // One task per (b, h, query block); each writes its own rows only.
    parallel_for(o.B * o.H * nqb, 1, [&](int64_t t0, int64_t t1) {
      Tensor h1, h2, h3;
      A* qt = scratch<A>(h1, kBq * E);
      A* st = scratch<A>(h2, kBq * kBk);
      A* acc = scratch<A>(h3, kBq * Evp);
      A m[kBq], l[kBq];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t qb = t % nqb, bh = t / nqb, b = bh / o.H, h = bh % o.H, hk = o.kv_head(h);
        const int64_t i0 = qb * kBq, bq = std::min(kBq, L - i0), bqp = round_up(bq, kMr);
        load_tile(qt, E, bqp, o.q + o.sq.at(b, h, i0), o.sq.s[2], bq, E);
        std::fill(acc, acc + bqp * Evp, A(0));
        std::fill(m, m + kBq, kNegInf<A>);
        std::fill(l, l + kBq, A(0));
        const int64_t s_end = o.causal ? std::min(S, i0 + bq) : S;
        for (int64_t j0 = 0; j0 < s_end; j0 += kBk) {
          // bk keys in the block, nk of them visible to some row (causal: up to the last row).
          const int64_t bk = std::min(kBk, S - j0), nk = o.causal ? std::min(bk, i0 + bq - j0) : bk;
          const A* kt = kt_p + (b * o.Hk + hk) * E * Sp + j0;
          const A* vb = v_pk + ((b * o.Hk + hk) * Sp + j0) * Evp;
          tile_gemm<false, false>(st, kBk, qt, E, kt, Sp, bqp, round_up(nk, kNr), E);
          mask_scores(st, o, b, h, i0, bq, j0, bk);
          for (int64_t i = 0; i < bqp; ++i) {
            A* row = st + i * kBk;
            const A mx = i < bq ? std::max(m[i], row_max(row)) : kNegInf<A>;
            if (mx == kNegInf<A>) {  // padding, or every key so far masked: nothing to add
              std::fill(row, row + kBk, A(0));
              continue;
            }
            const A alpha = exp_nonpos(m[i] - mx);
            for (int64_t j = 0; j < kBk; ++j) row[j] = exp_nonpos(row[j] - mx);
            m[i] = mx;
            l[i] = l[i] * alpha + row_sum(row);
            if (o.p > 0.0)
              for (int64_t j = 0; j < bk; ++j) row[j] *= o.dropout_factor(b, h, i0 + i, j0 + j);
            A* ar = acc + i * Evp;
            for (int64_t c = 0; c < Evp; ++c) ar[c] *= alpha;
          }
          tile_gemm<false, true>(acc, Evp, st, kBk, vb, Evp, bqp, Evp, nk);
        }
        T* orow = out_p + ((b * o.H + h) * L + i0) * Ev;
        A* lrow = lse_p + (b * o.H + h) * L + i0;
        for (int64_t i = 0; i < bq; ++i) {
          // A row with every key masked has l = 0: output 0, lse -inf (PyTorch's fused kernels).
          const A inv = l[i] > A(0) ? A(1) / l[i] : A(0);
          for (int64_t c = 0; c < Ev; ++c) orow[i * Ev + c] = static_cast<T>(acc[i * Evp + c] * inv);
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
    const int64_t E = o.E, Ev = o.Ev, Ep = o.Ep, Evp = o.Evp, L = o.L, S = o.S, G = o.H / o.Hk;
    const int64_t Sp = o.Sp;
    const A sc = static_cast<A>(o.scale);
    const Tensor kt_all = pack_heads(o.k, o.sk, o.B, o.Hk, S, E, Sp, E, true);     // [.., E, Sp]
    const Tensor k_all = pack_heads(o.k, o.sk, o.B, o.Hk, S, E, Sp, Ep, false);    // [.., Sp, Ep]
    const Tensor vt_all = pack_heads(o.v, o.sv, o.B, o.Hk, S, Ev, Sp, Ev, true);   // [.., Ev, Sp]
    const A* kt_p = kt_all.data_ptr<A>();
    const A* k_pk = k_all.data_ptr<A>();
    const A* vt_p = vt_all.data_ptr<A>();
    // One task per (b, kv head): it owns its keys' dk/dv (the grouped query heads are summed in
    // order, so results do not depend on the thread count) and the dq rows of its query heads.
    parallel_for(o.B * o.Hk, 1, [&](int64_t t0, int64_t t1) {
      Tensor h1, h2, h3, h4, h5, h6, h7;
      A* dk_acc = scratch<A>(h1, Sp * Ep);
      A* dv_acc = scratch<A>(h2, Sp * Evp);
      A* qt = scratch<A>(h3, kBq * Ep);
      A* gt = scratch<A>(h4, kBq * Evp);
      A* pt = scratch<A>(h5, kBq * kBk);
      A* dst = scratch<A>(h6, kBq * kBk);
      A* dq_acc = scratch<A>(h7, kBq * Ep);
      A D[kBq];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / o.Hk, hk = t % o.Hk;
        std::fill(dk_acc, dk_acc + Sp * Ep, A(0));
        std::fill(dv_acc, dv_acc + Sp * Evp, A(0));
        for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
          for (int64_t i0 = 0; i0 < L; i0 += kBq) {
            const int64_t bq = std::min(kBq, L - i0), bqp = round_up(bq, kMr);
            const int64_t row0 = (b * o.H + h) * L + i0;
            load_tile(qt, Ep, bqp, o.q + o.sq.at(b, h, i0), o.sq.s[2], bq, E);
            load_tile(gt, Evp, bqp, g_p + row0 * Ev, Ev, bq, Ev);
            for (int64_t i = 0; i < bq; ++i) {
              A d = 0;
              for (int64_t c = 0; c < Ev; ++c) d += gt[i * Evp + c] * o_p[(row0 + i) * Ev + c];
              D[i] = d;
            }
            std::fill(dq_acc, dq_acc + bqp * Ep, A(0));
            const int64_t s_end = o.causal ? std::min(S, i0 + bq) : S;
            for (int64_t j0 = 0; j0 < s_end; j0 += kBk) {
              const int64_t bk = std::min(kBk, S - j0), nk = o.causal ? std::min(bk, i0 + bq - j0) : bk;
              const int64_t nkp = round_up(nk, kNr);  // columns the products compute (the rest: unused)
              const int64_t head = b * o.Hk + hk;
              const A* kt = kt_p + head * E * Sp + j0;
              const A* kb = k_pk + (head * Sp + j0) * Ep;
              const A* vt = vt_p + head * Ev * Sp + j0;
              tile_gemm<false, false>(pt, kBk, qt, Ep, kt, Sp, bqp, nkp, E);
              mask_scores(pt, o, b, h, i0, bq, j0, bk);
              tile_gemm<false, false>(dst, kBk, gt, Evp, vt, Sp, bqp, nkp, Ev);
              for (int64_t i = 0; i < bqp; ++i) {
                A* prow = pt + i * kBk;
                A* drow = dst + i * kBk;
                const A li = i < bq ? lse_p[row0 + i] : kNegInf<A>;
                if (li == kNegInf<A>) {  // padding, or every key masked: no gradient through this row
                  std::fill(prow, prow + nkp, A(0));
                  std::fill(drow, drow + nkp, A(0));
                  continue;
                }
                const A di = D[i];
                for (int64_t j = 0; j < nkp; ++j) prow[j] = exp_nonpos(prow[j] - li);
                if (o.p > 0.0) {
                  // prow becomes the dropped weights (dv's factor); dS = P * (Z * dP - D).
                  for (int64_t j = 0; j < bk; ++j) {
                    const A z = o.dropout_factor(b, h, i0 + i, j0 + j);
                    drow[j] = prow[j] * (z * drow[j] - di) * sc;
                    prow[j] *= z;
                  }
                } else {
                  for (int64_t j = 0; j < nkp; ++j) drow[j] = prow[j] * (drow[j] - di) * sc;
                }
              }
              // dv += P^T dO, dk += dS^T q, dq += dS k (dS already carries the scale).
              tile_gemm<true, true>(dv_acc + j0 * Evp, Evp, pt, kBk, gt, Evp, nkp, Evp, bqp);
              tile_gemm<true, true>(dk_acc + j0 * Ep, Ep, dst, kBk, qt, Ep, nkp, Ep, bqp);
              tile_gemm<false, true>(dq_acc, Ep, dst, kBk, kb, Ep, bqp, Ep, nk);
            }
            T* dqo = dq_p + row0 * E;
            for (int64_t i = 0; i < bq; ++i)
              for (int64_t c = 0; c < E; ++c) dqo[i * E + c] = static_cast<T>(dq_acc[i * Ep + c]);
          }
        }
        T* dko = dk_p + (b * o.Hk + hk) * S * E;
        T* dvo = dv_p + (b * o.Hk + hk) * S * Ev;
        for (int64_t j = 0; j < S; ++j) {
          for (int64_t c = 0; c < E; ++c) dko[j * E + c] = static_cast<T>(dk_acc[j * Ep + c]);
          for (int64_t c = 0; c < Ev; ++c) dvo[j * Ev + c] = static_cast<T>(dv_acc[j * Evp + c]);
        }
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
