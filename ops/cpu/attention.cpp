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

// C[m, n] (=, or += with Acc) op(A) B for row-major tiles: op(A) is [m, k] read as
// A[i * lda + p], or with TransA stored [k, m] and read as A[p * lda + i]; B is [k, n] with n a
// multiple of kNr. Rows of op(A) past m read as 0 (so A needs no padding rows) but C has room
// for m rounded up to kMr rows. A kMr x kNr block of C lives in vector registers (GCC vector
// extensions: 12 of the 16 AVX2 or 32 AVX-512 registers) while k runs, so each loaded row of B
// feeds kMr FMAs.
template <typename S> struct VecOf {
  typedef S type __attribute__((vector_size(kVecBytes)));
  // The same vector at element alignment, for loads and stores straight from the tiles.
  typedef S unaligned __attribute__((vector_size(kVecBytes), __may_alias__, aligned(sizeof(S))));
};
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
  if constexpr (std::is_same_v<A, float>) {
    const int64_t nb = n / 16 * 16, cb = cols / 16 * 16;
    for (; r0 < nb; r0 += 16) {
      for (int64_t c = 0; c < cb; c += 16) transpose16(dst + c * kBq + r0, kBq, src + r0 * rs + c, rs);
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
template <typename A>
void mask_scores_t(A* st, const Operands<A>& o, int64_t b, int64_t h, int64_t i0, int64_t bq, int64_t bqn, int64_t j0,
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

template <typename T> struct SdpaForward {
  static void run(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& mask, const SdpaParams& prm) {
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
    parallel_for(o.B * o.H * nqb, 1, [&](int64_t t0, int64_t t1) {
      Tensor h1, h2, h3;
      A* qt = scratch<A>(h1, E * kBq);     // the query block transposed, [E, kBq]
      A* st = scratch<A>(h2, kBkRows * kBq);   // scores, then weights, [keys, queries]
      A* acc = scratch<A>(h3, kBqRows * Evp);  // unnormalized output rows
      A m[kBq], l[kBq], safe[kBq], alpha[kBq];
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
          // Online softmax down the key rows, all queries at once.
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
          if (o.p > 0.0)
            for (int64_t j = 0; j < nk; ++j)
              for (int64_t i = 0; i < bq; ++i) st[j * kBq + i] *= o.dropout_factor(b, h, i0 + i, j0 + j);
          for (int64_t i = 0; i < bq; ++i)
            for (int64_t c = 0; c < Evp; ++c) acc[i * Evp + c] *= alpha[i];
          tile_gemm<true, true, Causal::kKeysAfter>(acc, Evp, st, kBq, vr.row(b, hk, j0), vr.ld, bq, Evp, nk, diag);
        }
        T* orow = out_p + so.at(b, h, i0);
        A* lrow = lse_p + (b * o.H + h) * L + i0;
        for (int64_t i = 0; i < bq; ++i) {
          // A row with every key masked has l = 0: output 0, lse -inf (PyTorch's fused kernels).
          const A inv = l[i] > A(0) ? A(1) / l[i] : A(0);
          for (int64_t c = 0; c < Ev; ++c) orow[i * so.s[2] + c] = static_cast<T>(acc[i * Evp + c] * inv);
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
    const A sc = static_cast<A>(o.scale);
    const HeadRows<A> kr(o.k, o.sk, o.B, o.Hk, S, E, Ep);
    // One task per (b, kv head): it owns its keys' dk/dv (the grouped query heads are summed in
    // order, so results do not depend on the thread count) and the dq rows of its query heads.
    parallel_for(o.B * o.Hk, 1, [&](int64_t t0, int64_t t1) {
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
            for (int64_t i = 0; i < bqn; ++i) {
              A d = 0;
              if (i < bq)
                for (int64_t c = 0; c < Ev; ++c) d += gp[i * Evp + c] * osrc[i * so.s[2] + c];
              D[i] = d;
              // A query with every key masked (lse -inf) gets weights exp(s - inf) = 0.
              const A li = i < bq ? lse_p[row0 + i] : A(0);
              lsafe[i] = li == kNegInf<A> ? std::numeric_limits<A>::infinity() : li;
            }
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
              for (int64_t j = 0; j < nkm; ++j) {
                A* prow = pt + j * kBq;
                A* drow = dst + j * kBq;
                if (o.p > 0.0 && j < nk) {
                  // prow becomes the dropped weights (dv's factor); dS = P * (Z * dP - D).
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
              // dv += P^T dO, dk += dS^T q, dq += dS k (dS already carries the scale).
              constexpr auto kQ = Causal::kQueriesBefore;
              tile_gemm<false, true, kQ>(dv_acc + j0 * Evp, Evp, pt, kBq, gp, Evp, nk, Evp, bq, diag);
              tile_gemm<false, true, kQ>(dk_acc + j0 * Ep, Ep, dst, kBq, qp, Ep, nk, Ep, bq, diag);
              tile_gemm<true, true, Causal::kKeysAfter>(dq_acc, Ep, dst, kBq, kr.row(b, hk, j0), kr.ld, bq, Ep, nk,
                                                        diag);
            }
            T* dqo = dq_p + sdq.at(b, h, i0);
            for (int64_t i = 0; i < bq; ++i)
              for (int64_t c = 0; c < E; ++c) dqo[i * sdq.s[2] + c] = static_cast<T>(dq_acc[i * Ep + c]);
          }
        }
        T* dko = dk_p + sdk.at(b, hk, 0);
        T* dvo = dv_p + sdv.at(b, hk, 0);
        for (int64_t j = 0; j < S; ++j) {
          for (int64_t c = 0; c < E; ++c) dko[j * sdk.s[2] + c] = static_cast<T>(dk_acc[j * Ep + c]);
          for (int64_t c = 0; c < Ev; ++c) dvo[j * sdv.s[2] + c] = static_cast<T>(dv_acc[j * Evp + c]);
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
