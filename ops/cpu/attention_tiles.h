// Internal: the tile sizes, operands and elementwise steps shared by the f32 and the bf16 CPU attention kernels.
#pragma once
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/random.h"
#include "core/tensor.h"
#include "ops/attention_kernels.h"

namespace mpx::cpu::attn {
using kernels::SdpaParams;

// Tile sizes: a block of kBq queries meets blocks of kBk keys; with head dims up to 64 the
// working set (transposed query block, score tile, output accumulator) stays within L2.
// Scores are kept transposed, [keys, queries]: the key rows of K and V then feed the products
// as they lie in memory (no per-call transposes), and the softmax over keys becomes
// elementwise work across the rows of the tile, vectorized over queries.
// Vector registers: 512-bit ones double the products each loaded row of B feeds (AVX-512 has
// twice the registers too, so a kMr x kNv block still fits).
#ifdef __AVX512F__
constexpr int kVecBytes = 64;
constexpr int64_t kMr = 8;
#else
constexpr int kVecBytes = 32;
constexpr int64_t kMr = 6;
#endif
constexpr int kNv = 2;  // vectors per row of a block of C
constexpr int64_t kNr = kNv * kVecBytes / sizeof(float);
constexpr int64_t kBq = 64;  // a multiple of kNr
constexpr int64_t kBk = 64;
constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
// Rows a product may write for an m-row operand (a partial block of kMr rows is stored whole).
constexpr int64_t kBqRows = round_up(kBq, kMr), kBkRows = round_up(kBk, kMr);

// exp(x) for x <= 0 (scores minus their running max), vectorizable (no libm call, no branch;
// the attention files are compiled with -fno-trapping-math so GCC if-converts the selects):
// 2^n * p(r) with a degree-6 polynomial on |r| <= ln2/2, about 2 ulp in f32; x below the
// smallest normal's log (masked keys: -inf) gives exactly 0.
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

template <typename S> struct VecOf {
  typedef S type __attribute__((vector_size(kVecBytes)));
  // The same vector at element alignment, for loads and stores straight from the tiles.
  typedef S unaligned __attribute__((vector_size(kVecBytes), __may_alias__, aligned(sizeof(S))));
};

// What a causal tile's product may leave out, given diag = (first key) - (first query) of the
// tile (key j0 + p is seen by query i0 + q iff p + diag <= q):
//   kMaskedOut     C is scores [keys, queries]: blocks wholly above the diagonal are skipped (the
//                  mask overwrites them with -inf);
//   kKeysAfter     C rows are queries, k runs over keys: products with keys no row of the block
//                  sees (their weight is exactly 0) are skipped;
//   kQueriesBefore C rows are keys, k runs over queries: likewise for queries before the key.
// Skipping only exact zeros, the sums equal the full products'. Without a causal mask diag is
// kNoDiag, which skips nothing.
enum class Causal { kNone, kMaskedOut, kKeysAfter, kQueriesBefore };
constexpr int64_t kNoDiag = -(int64_t{1} << 40);

// A [B, H, rows, cols] view's element strides.
struct Strides4 {
  int64_t s[4] = {0, 0, 0, 0};
  explicit Strides4(const Tensor& t) {
    if (t.defined())
      for (int d = 0; d < 4; ++d) s[d] = t.stride(d);
  }
  int64_t at(int64_t b, int64_t h, int64_t i) const { return b * s[0] + h * s[1] + i * s[2]; }
};

// Calls f(begin, end) once per thread over a static split of [0, n) tasks, each writing outputs
// of its own (so results do not depend on the split): a task's scratch is then set up once per
// thread, where parallel_for would call f once per task.
template <typename F> void parallel_tasks(int64_t n, F&& f) {
  if (n <= 0) return;
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t begin = n * id / threads, end = n * (id + 1) / threads;
    if (begin < end) f(begin, end);
  }
}

// Scratch buffers come from tensors, so the CPU allocator's counters see every byte.
template <typename A> A* scratch(Tensor& holder, int64_t n) {
  holder = empty({std::max<int64_t>(n, 1)}, TensorOptions(dtype_v<A>));
  return holder.data_ptr<A>();
}

// Everything one (b, h) pair reads: q, k and v as X (A, or bf16's bits for the bf16 kernels), their
// strides and the mask, in A (f32, f64 for f64).
template <typename A, typename X = A> struct Operands {
  const X *q, *k, *v;
  const A* mask;
  Strides4 sq, sk, sv, sm;
  int64_t B, H, Hk, L, S, E, Ev;
  int64_t Ep, Evp;  // head dims padded to the micro-kernel's width
  double scale;
  bool causal;
  double p;
  A keep_scale;
  uint64_t seed, offset;

  Operands(const Tensor& qa, const Tensor& ka, const Tensor& va, const Tensor& m, const SdpaParams& prm)
      : q(static_cast<const X*>(qa.raw_data())), k(static_cast<const X*>(ka.raw_data())),
        v(static_cast<const X*>(va.raw_data())), mask(m.defined() ? m.data_ptr<A>() : nullptr),
        sq(qa), sk(ka), sv(va), sm(m) {
    B = qa.size(0), H = qa.size(1), L = qa.size(2), E = qa.size(3);
    Hk = ka.size(1), S = ka.size(2), Ev = va.size(3);
    Ep = round_up(std::max<int64_t>(E, 1), kNr), Evp = round_up(std::max<int64_t>(Ev, 1), kNr);
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

#ifdef __AVX512F__
// 16 rows of 16 floats (row stride rs) into 16 rows of 16 (stride ld), transposed in registers:
// the source rows are read whole, where a column-by-column copy misses the cache on every row.
// Interleave pairs of rows within each 128-bit lane, then pairs of pairs, then move the lanes.
inline void transpose16(float* dst, int64_t ld, const float* src, int64_t rs) {
  using V = VecOf<float>::type;
  using U = VecOf<float>::unaligned;
  V r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = *reinterpret_cast<const U*>(src + i * rs);
#define MPX_LANES(f) f(0), f(1), f(2), f(3)
#define MPX_LO(l) 4 * l, 16 + 4 * l, 4 * l + 1, 17 + 4 * l
#define MPX_HI(l) 4 * l + 2, 18 + 4 * l, 4 * l + 3, 19 + 4 * l
#define MPX_P01(l) 4 * l, 4 * l + 1, 16 + 4 * l, 17 + 4 * l
#define MPX_P23(l) 4 * l + 2, 4 * l + 3, 18 + 4 * l, 19 + 4 * l
#define MPX_EVEN 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27
#define MPX_ODD 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31
  for (int i = 0; i < 16; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], MPX_LANES(MPX_LO));
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], MPX_LANES(MPX_HI));
  }
  for (int i = 0; i < 16; i += 4)
    for (int k = 0; k < 2; ++k) {
      r[i + 2 * k] = __builtin_shufflevector(t[i + k], t[i + k + 2], MPX_LANES(MPX_P01));
      r[i + 2 * k + 1] = __builtin_shufflevector(t[i + k], t[i + k + 2], MPX_LANES(MPX_P23));
    }
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; ++i) {
      t[h + i] = __builtin_shufflevector(r[h + i], r[h + i + 4], MPX_EVEN);
      t[h + i + 4] = __builtin_shufflevector(r[h + i], r[h + i + 4], MPX_ODD);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = __builtin_shufflevector(t[i], t[i + 8], MPX_EVEN);
    r[i + 8] = __builtin_shufflevector(t[i], t[i + 8], MPX_ODD);
  }
#undef MPX_LANES
#undef MPX_LO
#undef MPX_HI
#undef MPX_P01
#undef MPX_P23
#undef MPX_EVEN
#undef MPX_ODD
  for (int i = 0; i < 16; ++i) *reinterpret_cast<U*>(dst + i * ld) = r[i];
}
#endif

// n rows of `cols` elements (row stride rs) transposed into a cols x kBq tile (row r of the
// source is column r), zero in columns n..kBq.
template <typename A> void load_tile_t(A* dst, const A* src, int64_t rs, int64_t n, int64_t cols) {
  int64_t r0 = 0;  // source rows before r0 are done
#ifdef __AVX512F__
  if constexpr (sizeof(A) == 4) {  // f32, or bf16 pairs as 32-bit words (shuffles move bits unchanged)
    const int64_t nb = n / 16 * 16, cb = cols / 16 * 16;
    for (; r0 < nb; r0 += 16) {
      for (int64_t c = 0; c < cb; c += 16)
        transpose16(reinterpret_cast<float*>(dst + c * kBq + r0), kBq,
                    reinterpret_cast<const float*>(src + r0 * rs + c), rs);
      for (int64_t c = cb; c < cols; ++c)
        for (int64_t r = r0; r < r0 + 16; ++r) dst[c * kBq + r] = src[r * rs + c];
    }
  }
#endif
  for (int64_t c = 0; c < cols; ++c) {
    A* __restrict d = dst + c * kBq;
    for (int64_t r = r0; r < n; ++r) d[r] = src[r * rs + c];
    std::fill(d + n, d + kBq, A(0));
  }
}

// The transposed score tile of keys [j0, j0 + nk) and queries [i0, i0 + bq), scaled and masked
// in place: -inf past the causal diagonal, under a -inf mask, in the padding columns up to bqn
// and in the padding rows up to nk rounded to kMr.
template <typename A, typename X>
void mask_scores_t(A* st, const Operands<A, X>& o, int64_t b, int64_t h, int64_t i0, int64_t bq, int64_t bqn, int64_t j0,
                   int64_t nk) {
  const A sc = static_cast<A>(o.scale);
  for (int64_t j = 0; j < round_up(nk, kMr); ++j) {
    A* row = st + j * kBq;
    if (j >= nk) {
      std::fill(row, row + bqn, kNegInf<A>);
      continue;
    }
    const int64_t first = o.causal ? std::clamp<int64_t>(j0 + j - i0, 0, bq) : 0;  // key j0 + j <= query
    std::fill(row, row + first, kNegInf<A>);
    if (o.mask) {
      const A* mc = o.mask + o.sm.at(b, h, i0) + (j0 + j) * o.sm.s[3];
      const int64_t ms = o.sm.s[2];
      for (int64_t i = first; i < bq; ++i) row[i] = row[i] * sc + mc[i * ms];
    } else {
      for (int64_t i = first; i < bq; ++i) row[i] *= sc;
    }
    std::fill(row + bq, row + bqn, kNegInf<A>);
  }
}

// One key block's step of the online softmax, down the key rows of the transposed score tile st
// [nkm, kBq], all bqn query columns at once: the running max m and sum l are updated, alpha gets
// the factor that rescales the output accumulated so far, and st becomes exp(s - max).
template <typename A>
void online_softmax_step(A* __restrict st, int64_t nkm, int64_t bqn, A* __restrict m, A* __restrict l, A* __restrict alpha) {
  A safe[kBq];
  for (int64_t i = 0; i < bqn; ++i) alpha[i] = m[i];
  for (int64_t j = 0; j < nkm; ++j) {
    const A* row = st + j * kBq;
    for (int64_t i = 0; i < bqn; ++i) alpha[i] = row[i] > alpha[i] ? row[i] : alpha[i];
  }
  for (int64_t i = 0; i < bqn; ++i) {
    // A query that has seen only masked keys keeps weight 0 (its max stays -inf).
    safe[i] = alpha[i] == kNegInf<A> ? A(0) : alpha[i];
    const A prev = m[i];
    m[i] = alpha[i];
    alpha[i] = exp_nonpos(prev - safe[i]);
    l[i] *= alpha[i];
  }
  for (int64_t j = 0; j < nkm; ++j) {
    A* row = st + j * kBq;
    for (int64_t i = 0; i < bqn; ++i) {
      row[i] = exp_nonpos(row[i] - safe[i]);
      l[i] += row[i];
    }
  }
}

// Dropout on the forward's weights of keys [j0, j0 + nk) and queries [i0, i0 + bq).
template <typename A, typename X>
void drop_weights(A* st, const Operands<A, X>& o, int64_t b, int64_t h, int64_t i0, int64_t bq, int64_t j0, int64_t nk) {
  if (o.p > 0.0)
    for (int64_t j = 0; j < nk; ++j)
      for (int64_t i = 0; i < bq; ++i) st[j * kBq + i] *= o.dropout_factor(b, h, i0 + i, j0 + j);
}

// The backward's tile step: from the scores pt and dP (dst), both [keys, queries], the weights
// P = exp(s - lse) into pt (times the dropout factor Z, dv's operand) and dS = P * (Z * dP - D) *
// scale into dst, for key rows up to nkm (D: each query's dO . out).
template <typename A, typename X>
void weights_and_score_grads(A* __restrict pt, A* __restrict dst, const Operands<A, X>& o, int64_t b, int64_t h,
                             int64_t i0, int64_t bq, int64_t bqn, int64_t j0, int64_t nk, int64_t nkm,
                             const A* __restrict D, const A* __restrict lsafe) {
  const A sc = static_cast<A>(o.scale);
  for (int64_t j = 0; j < nkm; ++j) {
    A* prow = pt + j * kBq;
    A* drow = dst + j * kBq;
    if (o.p > 0.0 && j < nk) {
      for (int64_t i = 0; i < bqn; ++i) {
        const A p = exp_nonpos(prow[i] - lsafe[i]);
        const A z = i < bq ? o.dropout_factor(b, h, i0 + i, j0 + j) : A(0);
        drow[i] = p * (z * drow[i] - D[i]) * sc;
        prow[i] = p * z;
      }
    } else {
      for (int64_t i = 0; i < bqn; ++i) {
        const A p = exp_nonpos(prow[i] - lsafe[i]);
        drow[i] = p * (drow[i] - D[i]) * sc;
        prow[i] = p;
      }
    }
  }
}

// Per query row of a block: D = dO . out (the softmax backward's row term) and the lse to
// subtract, +inf for a row with every key masked (lse -inf), so that its weights exp(s - inf) are
// 0; rows bq..bqn get D = 0. dO and out rows as X (any type convertible to A), row strides gs, os.
template <typename A, typename X>
void row_terms(A* D, A* lsafe, const X* g, int64_t gs, const X* out, int64_t os, const A* lse, int64_t bq,
               int64_t bqn, int64_t Ev) {
  for (int64_t i = 0; i < bqn; ++i) {
    A d = 0;
    if (i < bq)
      for (int64_t c = 0; c < Ev; ++c) d += static_cast<A>(g[i * gs + c]) * static_cast<A>(out[i * os + c]);
    D[i] = d;
    const A li = i < bq ? lse[i] : A(0);
    lsafe[i] = li == kNegInf<A> ? std::numeric_limits<A>::infinity() : li;
  }
}

// The forward's last step for a query block: out rows = acc / l (0 for a row whose keys were all
// masked, as PyTorch's fused kernels), and each row's log-sum-exp (-inf for those rows).
template <typename A, typename T>
void finish_rows(T* orow, int64_t os, A* lrow, const A* acc, int64_t ldacc, const A* m, const A* l, int64_t bq,
                 int64_t Ev) {
  for (int64_t i = 0; i < bq; ++i) {
    // l is 0 only for a fully masked row; a NaN score (a NaN in q or k) makes it NaN, which must reach the output.
    const bool seen = !(l[i] == A(0));
    const A inv = seen ? A(1) / l[i] : A(0);
    for (int64_t c = 0; c < Ev; ++c) orow[i * os + c] = static_cast<T>(acc[i * ldacc + c] * inv);
    lrow[i] = seen ? m[i] + std::log(l[i]) : kNegInf<A>;
  }
}

// rows x cols f32 sums (row stride ls) into a gradient's rows (row stride ds), rounded once to T.
template <typename T, typename A>
void store_rows(T* dst, int64_t ds, const A* src, int64_t ls, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * ds + c] = static_cast<T>(src[r * ls + c]);
}

/// The bf16 kernels on AMX tiles (attention_bf16.cpp): false where they do not run the case (the
/// CPU or the build lacks AMX-BF16, an odd head dim or row stride), and the caller's widened f32
/// kernels take it.
bool sdpa_forward_bf16(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask, const SdpaParams& p);
bool sdpa_backward_bf16(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                        const SdpaParams& p);

}  // namespace mpx::cpu::attn
