// CPU fused attention for bf16 inputs on bf16 products: the f32 kernels' blocks and softmax, with every product in bf16 x bf16 -> f32.
//
// The f32 kernels (attention.cpp) widen bf16 inputs to f32 and multiply on the FMA units. Where
// the CPU has AMX, each of the five block products runs on its tiles instead (measured on a
// Xeon core: 940 GFLOPS of bf16 tile products against 160 of f32 FMAs; AVX-512-BF16's vdpbf16ps
// only 79 there). AMD's Zen 4 has no AMX, but there vdpbf16ps does twice the work of an f32 FMA
// in the same time (bf16 matrix products at 200 GFLOPS a core against 100 in f32), so on AMD CPUs
// the same products run on it. Inputs are read as bf16, padded copies of the key
// and value heads made once per call; the weights P and score gradients dS, which are not
// inputs, are rounded to bf16 once before their products (as the GPU's flash attention does;
// PyTorch's CPU kernel rounds P so too); the softmax, its statistics and every sum stay f32, and
// each output is rounded once. AMX and vdpbf16ps treat bf16 subnormals (below 1.2e-38) as 0.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/half.h"
#include "ops/backends.h"
#include "ops/cpu/attention_tiles.h"
#include "ops/cpu/loops.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define MPX_ATTN_AMX 1
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace mpx::cpu::attn {

#if defined(__AVX512BF16__)
namespace {
// A "pair word" holds two bf16 values of consecutive k (the product's inner index), the even one
// in its low half: the B operand of every product is a [k / 2, n] matrix of them. Its A operand
// is [m, k] bf16 rows, its C [m, n] f32 rows.
using Word = uint32_t;
// The products' sizes are padded to 32 (two tiles): query and key blocks, and the padded head
// dims (multiples of kNr) are already.
static_assert(kNr % 32 == 0 && kBq % 32 == 0 && kBk % 32 == 0);

// C [m, n] (=, or += with acc) A [m, k] B on vdpbf16ps, the same contract as amx_gemm below:
// B as [k / 2, n] pair words, m, n and k multiples of 32, and with diag the blocks wholly past
// the causal diagonal (here blocks of 8 rows x 32 columns) left alone. 8 x 32 of C live in 16
// registers while k runs; each pair of A (one word) is broadcast against two vectors of B.
void dot_gemm(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const Word* b, int64_t ldb, int64_t m, int64_t n,
              int64_t k, bool acc, int64_t diag = kNoDiag) {
  constexpr int R = 8;
  for (int64_t i = 0; i < m; i += R)
    for (int64_t j = 0; j < n; j += 32) {
      if (i + diag > j + 31) continue;
      __m512 s[R][2];
      for (int r = 0; r < R; ++r) {
        s[r][0] = acc ? _mm512_loadu_ps(c + (i + r) * ldc + j) : _mm512_setzero_ps();
        s[r][1] = acc ? _mm512_loadu_ps(c + (i + r) * ldc + j + 16) : _mm512_setzero_ps();
      }
      const uint16_t* ar = a + i * lda;
      for (int64_t p = 0; p < k / 2; ++p) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * ldb + j);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * ldb + j + 16);
        for (int r = 0; r < R; ++r) {
          Word w;
          std::memcpy(&w, ar + r * lda + 2 * p, sizeof w);
          const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(w));
          s[r][0] = _mm512_dpbf16_ps(s[r][0], x, b0);
          s[r][1] = _mm512_dpbf16_ps(s[r][1], x, b1);
        }
      }
      for (int r = 0; r < R; ++r) {
        _mm512_storeu_ps(c + (i + r) * ldc + j, s[r][0]);
        _mm512_storeu_ps(c + (i + r) * ldc + j + 16, s[r][1]);
      }
    }
}

#if defined(MPX_ATTN_AMX)
// The CPU has AMX-BF16 and the kernel lets this process use the tile registers (Linux asks each
// process to request them once).
bool amx_usable() {
  constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
  static const bool ok =
      __builtin_cpu_supports("amx-bf16") && syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  return ok;
}
// Each thread's eight tiles as 16 rows of 64 bytes: C blocks of 16 x 16 f32, A blocks of 16 rows
// x 32 bf16, B blocks of 16 pair rows x 16 words.
struct Tiles {
  Tiles() {
    struct alignas(64) {
      uint8_t palette = 1, start_row = 0, reserved[14] = {};
      uint16_t colsb[16] = {};
      uint8_t rows[16] = {};
    } cfg;
    for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
  }
  ~Tiles() { _tile_release(); }
};

// C [m, n] (=, or += with acc) A [m, k] B, with B as [k / 2, n] pair words; m, n and k multiples
// of 32 (the callers pad with zeros). C in 32 x 32 blocks of four tiles; with diag (C rows keys,
// columns queries, key diag + r seen by query c iff r + diag <= c), blocks wholly past the causal
// diagonal are left alone (the mask overwrites them).
void amx_gemm(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const Word* b, int64_t ldb, int64_t m,
              int64_t n, int64_t k, bool acc, int64_t diag = kNoDiag) {
  const int64_t sc = ldc * 4, sa = lda * 2, sb = ldb * 4;  // row strides in bytes
  for (int64_t i = 0; i < m; i += 32)
    for (int64_t j = 0; j < n; j += 32) {
      if (i + diag > j + 31) continue;
      float* c0 = c + i * ldc + j;
      float* c2 = c0 + 16 * ldc;
      if (acc) {
        _tile_loadd(0, c0, sc);
        _tile_loadd(1, c0 + 16, sc);
        _tile_loadd(2, c2, sc);
        _tile_loadd(3, c2 + 16, sc);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t p = 0; p < k; p += 32) {
        _tile_loadd(4, a + i * lda + p, sa);
        _tile_loadd(5, a + (i + 16) * lda + p, sa);
        _tile_loadd(6, b + p / 2 * ldb + j, sb);
        _tile_loadd(7, b + p / 2 * ldb + j + 16, sb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c0, sc);
      _tile_stored(1, c0 + 16, sc);
      _tile_stored(2, c2, sc);
      _tile_stored(3, c2 + 16, sc);
    }
}

#else
bool amx_usable() { return false; }
#endif

// Which unit runs the products: AMX's tiles where usable, vdpbf16ps on AMD CPUs (see the top),
// none elsewhere (the f32 kernels then run bf16 widened). MPX_CPU_ATTENTION_BF16=dot or f32
// picks one of those two instead, on any CPU (read at each call: tests and measurements set it).
enum class Engine { kF32, kAmx, kDot };
Engine engine() {
  static const Engine native = amx_usable() ? Engine::kAmx : __builtin_cpu_is("amd") ? Engine::kDot : Engine::kF32;
  if (const char* e = std::getenv("MPX_CPU_ATTENTION_BF16")) {
    if (std::strcmp(e, "dot") == 0) return Engine::kDot;
    if (std::strcmp(e, "f32") == 0) return Engine::kF32;
  }
  return native;
}

// One task's block products on the chosen unit; with AMX, the tile configuration held while the task runs.
class Products {
 public:
  explicit Products(Engine e) : amx_(e == Engine::kAmx) {
#if defined(MPX_ATTN_AMX)
    if (amx_) tiles_.emplace();
#endif
  }
  void operator()(float* c, int64_t ldc, const uint16_t* a, int64_t lda, const Word* b, int64_t ldb, int64_t m,
                  int64_t n, int64_t k, bool acc, int64_t diag = kNoDiag) const {
#if defined(MPX_ATTN_AMX)
    if (amx_) return amx_gemm(c, ldc, a, lda, b, ldb, m, n, k, acc, diag);
#endif
    dot_gemm(c, ldc, a, lda, b, ldb, m, n, k, acc, diag);
  }

 private:
  bool amx_;
#if defined(MPX_ATTN_AMX)
  std::optional<Tiles> tiles_;
#endif
};

// Words 2c and 2c + 1 of the result: element c of the low and of the high 256 bits.
inline __m512i interleave_halves(__m512i x) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, x);
}

// dst [rows2, ldw] pair words from n bf16 rows of `cols` (row stride rs): word (r2, c) =
// (src[2 r2][c], src[2 r2 + 1][c]); zero past n rows and past cols.
void pair_rows(Word* dst, int64_t ldw, int64_t rows2, const uint16_t* src, int64_t rs, int64_t n, int64_t cols) {
  for (int64_t r2 = 0; r2 < rows2; ++r2) {
    Word* d = dst + r2 * ldw;
    const int64_t r = 2 * r2;
    if (r >= n) {
      std::fill(d, d + ldw, Word{0});
      continue;
    }
    const uint16_t* lo = src + r * rs;
    const uint16_t* hi = r + 1 < n ? lo + rs : nullptr;
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
      const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + c));
      const __m256i h = hi ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + c)) : _mm256_setzero_si256();
      _mm512_storeu_si512(d + c, interleave_halves(_mm512_inserti64x4(_mm512_castsi256_si512(l), h, 1)));
    }
    for (; c < cols; ++c) d[c] = Word{lo[c]} | (hi ? Word{hi[c]} << 16 : 0u);
    std::fill(d + cols, d + ldw, Word{0});
  }
}

// n f32 rows of `cols` (a multiple of 32; row stride ls) rounded to bf16 once (to nearest even)
// into rows of stride ld.
void round_rows(uint16_t* dst, int64_t ld, const float* src, int64_t ls, int64_t n, int64_t cols) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < cols; c += 32) {
      const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + r * ls + c + 16), _mm512_loadu_ps(src + r * ls + c));
      _mm512_storeu_si512(dst + r * ld + c, (__m512i)x);
    }
}

// A [keys, queries] f32 tile (row stride kBq) as the bf16 A operand [queries, keys] of a product
// over keys: its first bqn query columns, all kBk key rows (rows from nkm on are cleared first:
// they hold no weight of this block).
void transpose_round(uint16_t* dst, float* tmp, float* st, int64_t nkm, int64_t bqn) {
  std::fill(st + nkm * kBq, st + kBk * kBq, 0.0f);
  for (int64_t j = 0; j < kBk; j += 16)
    for (int64_t i = 0; i < bqn; i += 16) transpose16(tmp + i * kBk + j, kBk, st + j * kBq + i, kBq);
  round_rows(dst, kBk, tmp, kBk, bqn, kBk);
}

// Key or value heads as the products read them: bf16 rows (A operands), in place where the head
// dim fills whole tiles (a multiple of 32) and the rows whole blocks of 32, else copied with zero
// padding to [B * Hk, Sp, ld]; and on request their keys paired into words (B operands),
// [B * Hk, Sp / 2, ld]. The copies take O(S * E) memory, like the inputs.
struct Heads {
  Tensor rows_t, pairs_t;
  const uint16_t* rows;
  Strides4 rs;  // row j of head (b, h) at rows + rs.at(b, h, j)
  const Word* pairs = nullptr;
  int64_t Hk, Sp, ld;
  Heads(const uint16_t* src, const Strides4& st, int64_t B, int64_t Hk_, int64_t S, int64_t cols, int64_t ld_,
        bool want_pairs)
      : rows(src), rs(st), Hk(Hk_), Sp(round_up(std::max<int64_t>(S, 1), kBk)), ld(ld_) {
    const bool copy_rows = cols % 32 != 0 || S % 32 != 0;
    uint16_t* r = nullptr;
    Word* p = nullptr;
    if (copy_rows) {
      rows_t = empty({B * Hk * Sp * ld}, TensorOptions(kBFloat16));
      rows = r = static_cast<uint16_t*>(rows_t.raw_data());
      rs.s[0] = Hk * Sp * ld, rs.s[1] = Sp * ld, rs.s[2] = ld, rs.s[3] = 1;
    }
    if (want_pairs) {
      pairs_t = empty({B * Hk * Sp / 2 * ld}, TensorOptions(kInt32));
      pairs = p = static_cast<Word*>(pairs_t.raw_data());
    }
    const int64_t Spv = Sp, ldv = ld;
    parallel_for(B * Hk, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const uint16_t* s = src + st.at(t / Hk_, t % Hk_, 0);
        if (r) load_tile(r + t * Spv * ldv, ldv, Spv, s, st.s[2], S, cols);
        if (p) pair_rows(p + t * Spv / 2 * ldv, ldv, Spv / 2, s, st.s[2], S, cols);
      }
    });
  }
  const uint16_t* row(int64_t b, int64_t h, int64_t j) const { return rows + rs.at(b, h, j); }
  int64_t row_stride() const { return rs.s[2]; }
  const Word* pair(int64_t b, int64_t h, int64_t j) const { return pairs + ((b * Hk + h) * Sp + j) / 2 * ld; }
};

// Words of bf16 rows: every stride even and the data 4-byte aligned, so that a row's pairs
// are whole words.
bool word_rows(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.raw_data()) % 4 != 0 || t.stride(3) != 1) return false;
  for (int d = 0; d < 3; ++d)
    if (t.stride(d) % 2 != 0) return false;
  return true;
}

bool runs_here(Engine e, const Tensor& q, const Tensor& k, const Tensor& v) {
  return e != Engine::kF32 && q.dtype() == kBFloat16 && q.size(3) % 2 == 0 && v.size(3) % 2 == 0 && word_rows(q);
}

const Word* words(const uint16_t* p) { return reinterpret_cast<const Word*>(p); }
// Zeroed scratch (padding rows and columns of the operands stay 0).
template <typename X> X* zeroed(Tensor& holder, int64_t n) {
  holder = zeros({std::max<int64_t>(n, 1)}, TensorOptions(sizeof(X) == 2 ? kBFloat16 : kInt32));
  return static_cast<X*>(holder.raw_data());
}
uint16_t* bf16_scratch(Tensor& holder, int64_t n) { return zeroed<uint16_t>(holder, n); }
Word* word_scratch(Tensor& holder, int64_t n) { return zeroed<Word>(holder, n); }
}  // namespace

bool sdpa_forward_bf16(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask, const SdpaParams& prm) {
  const Engine e = engine();
  if (!runs_here(e, q, k, v)) return false;
  const Operands<float, uint16_t> o(q, k, v, mask, prm);
  auto* out_p = static_cast<BFloat16*>(out.raw_data());
  const Strides4 so(out);
  float* lse_p = lse.data_ptr<float>();
  const int64_t E = o.E, Ep = o.Ep, Ev = o.Ev, Evp = o.Evp, L = o.L, S = o.S;
  const int64_t nqb = (L + kBq - 1) / kBq;
  const Heads kh(o.k, o.sk, o.B, o.Hk, S, E, Ep, false), vh(o.v, o.sv, o.B, o.Hk, S, Ev, Evp, true);
  // One task per (b, h, query block); each writes its own rows only.
  parallel_tasks(o.B * o.H * nqb, [&](int64_t t0, int64_t t1) {
    const Products gemm(e);
    Tensor h[5];
    Word* qw = word_scratch(h[0], Ep / 2 * kBq);       // q^T, features paired
    float* st = scratch<float>(h[1], kBk * kBq);       // scores, then weights, [keys, queries]
    float* acc = scratch<float>(h[2], kBqRows * Evp);  // unnormalized output rows
    float* tmp = scratch<float>(h[3], kBq * kBk);
    uint16_t* pt = bf16_scratch(h[4], kBq * kBk);      // weights, [queries, keys]
    float m[kBq], l[kBq], alpha[kBq];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t qb = t % nqb, bh = t / nqb, b = bh / o.H, hh = bh % o.H, hk = o.kv_head(hh);
      const int64_t i0 = qb * kBq, bq = std::min(kBq, L - i0), bqn = round_up(bq, kNr);
      load_tile_t(qw, words(o.q + o.sq.at(b, hh, i0)), o.sq.s[2] / 2, bq, E / 2);
      std::fill(acc, acc + kBqRows * Evp, 0.0f);
      std::fill(m, m + kBq, kNegInf<float>);
      std::fill(l, l + kBq, 0.0f);
      const int64_t s_end = o.causal ? std::min(S, i0 + bq) : S;
      for (int64_t j0 = 0; j0 < s_end; j0 += kBk) {
        const int64_t bk = std::min(kBk, S - j0), nk = o.causal ? std::min(bk, i0 + bq - j0) : bk;
        const int64_t nkm = round_up(nk, kMr);
        const int64_t diag = o.causal ? j0 - i0 : kNoDiag;
        gemm(st, kBq, kh.row(b, hk, j0), kh.row_stride(), qw, kBq, round_up(nk, 32), bqn, Ep, false, diag);
        mask_scores_t(st, o, b, hh, i0, bq, bqn, j0, nk);
        online_softmax_step(st, nkm, bqn, m, l, alpha);
        drop_weights(st, o, b, hh, i0, bq, j0, nk);
        for (int64_t i = 0; i < bq; ++i)
          for (int64_t c = 0; c < Evp; ++c) acc[i * Evp + c] *= alpha[i];
        transpose_round(pt, tmp, st, nkm, bqn);
        gemm(acc, Evp, pt, kBk, vh.pair(b, hk, j0), Evp, bqn, Evp, kBk, true);
      }
      finish_rows(out_p + so.at(b, hh, i0), so.s[2], lse_p + (b * o.H + hh) * L + i0, acc, Evp, m, l, bq, Ev);
    }
  });
  return true;
}

bool sdpa_backward_bf16(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& mask,
                        const SdpaParams& prm) {
  const Engine e = engine();
  if (!runs_here(e, q, k, v) || !word_rows(dout)) return false;
  const Operands<float, uint16_t> o(q, k, v, mask, prm);
  const auto* g_p = static_cast<const uint16_t*>(dout.raw_data());
  const auto* o_p = static_cast<const BFloat16*>(out.raw_data());
  const Strides4 sg(dout), so(out), sdq(dq), sdk(dk), sdv(dv);
  const float* lse_p = lse.data_ptr<float>();
  auto* dq_p = static_cast<BFloat16*>(dq.raw_data());
  auto* dk_p = static_cast<BFloat16*>(dk.raw_data());
  auto* dv_p = static_cast<BFloat16*>(dv.raw_data());
  const int64_t E = o.E, Ev = o.Ev, Ep = o.Ep, Evp = o.Evp, L = o.L, S = o.S, G = o.Hk > 0 ? o.H / o.Hk : 0;
  const Heads kh(o.k, o.sk, o.B, o.Hk, S, E, Ep, true), vh(o.v, o.sv, o.B, o.Hk, S, Ev, Evp, false);
  const int64_t Sp = kh.Sp;
  // One task per (b, kv head), as the f32 kernel: dk/dv of its keys, dq of its query heads.
  parallel_tasks(o.B * o.Hk, [&](int64_t t0, int64_t t1) {
    const Products gemm(e);
    Tensor h[11];
    float* dk_acc = scratch<float>(h[0], Sp * Ep);
    float* dv_acc = scratch<float>(h[1], Sp * Evp);
    Word* qw = word_scratch(h[2], Ep / 2 * kBq);   // q^T, features paired
    Word* qp = word_scratch(h[3], kBq / 2 * Ep);   // q, queries paired
    Word* gw = word_scratch(h[4], Evp / 2 * kBq);  // dO^T, features paired
    Word* gp = word_scratch(h[5], kBq / 2 * Evp);  // dO, queries paired
    float* pt = scratch<float>(h[6], kBk * kBq);   // weights, [keys, queries]
    float* dst = scratch<float>(h[7], kBk * kBq);  // dP, then dS
    float* tmp = scratch<float>(h[8], kBq * kBk);
    uint16_t* rounded = bf16_scratch(h[9], kBk * kBq);  // P, dS or dS^T in bf16
    float* dq_acc = scratch<float>(h[10], kBqRows * Ep);
    float D[kBq], lsafe[kBq];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / o.Hk, hk = t % o.Hk;
      std::fill(dk_acc, dk_acc + Sp * Ep, 0.0f);
      std::fill(dv_acc, dv_acc + Sp * Evp, 0.0f);
      for (int64_t hh = hk * G; hh < (hk + 1) * G; ++hh) {
        for (int64_t i0 = 0; i0 < L; i0 += kBq) {
          const int64_t bq = std::min(kBq, L - i0), bqn = round_up(bq, kNr);
          const uint16_t* qsrc = o.q + o.sq.at(b, hh, i0);
          const uint16_t* gsrc = g_p + sg.at(b, hh, i0);
          load_tile_t(qw, words(qsrc), o.sq.s[2] / 2, bq, E / 2);
          pair_rows(qp, Ep, kBq / 2, qsrc, o.sq.s[2], bq, E);
          load_tile_t(gw, words(gsrc), sg.s[2] / 2, bq, Ev / 2);
          pair_rows(gp, Evp, kBq / 2, gsrc, sg.s[2], bq, Ev);
          row_terms(D, lsafe, reinterpret_cast<const BFloat16*>(gsrc), sg.s[2], o_p + so.at(b, hh, i0), so.s[2],
                    lse_p + (b * o.H + hh) * L + i0, bq, bqn, Ev);
          std::fill(dq_acc, dq_acc + kBqRows * Ep, 0.0f);
          const int64_t s_end = o.causal ? std::min(S, i0 + bq) : S;
          for (int64_t j0 = 0; j0 < s_end; j0 += kBk) {
            const int64_t bk = std::min(kBk, S - j0), nk = o.causal ? std::min(bk, i0 + bq - j0) : bk;
            const int64_t nkm = round_up(nk, kMr), nk32 = round_up(nk, 32);
            const int64_t diag = o.causal ? j0 - i0 : kNoDiag;
            gemm(pt, kBq, kh.row(b, hk, j0), kh.row_stride(), qw, kBq, nk32, bqn, Ep, false, diag);
            mask_scores_t(pt, o, b, hh, i0, bq, bqn, j0, nk);
            gemm(dst, kBq, vh.row(b, hk, j0), vh.row_stride(), gw, kBq, nk32, bqn, Evp, false);
            weights_and_score_grads(pt, dst, o, b, hh, i0, bq, bqn, j0, nk, nkm, D, lsafe);
            std::fill(pt + nkm * kBq, pt + nk32 * kBq, 0.0f);
            std::fill(dst + nkm * kBq, dst + nk32 * kBq, 0.0f);
            // dv += P dO and dk += dS q over the block's queries (P, dS as bf16 rows); dq += dS^T k
            // over its keys.
            round_rows(rounded, kBq, pt, kBq, nk32, bqn);
            gemm(dv_acc + j0 * Evp, Evp, rounded, kBq, gp, Evp, nk32, Evp, bqn, true);
            round_rows(rounded, kBq, dst, kBq, nk32, bqn);
            gemm(dk_acc + j0 * Ep, Ep, rounded, kBq, qp, Ep, nk32, Ep, bqn, true);
            transpose_round(rounded, tmp, dst, nkm, bqn);
            gemm(dq_acc, Ep, rounded, kBk, kh.pair(b, hk, j0), Ep, bqn, Ep, kBk, true);
          }
          store_rows(dq_p + sdq.at(b, hh, i0), sdq.s[2], dq_acc, Ep, bq, E);
        }
      }
      store_rows(dk_p + sdk.at(b, hk, 0), sdk.s[2], dk_acc, Ep, S, E);
      store_rows(dv_p + sdv.at(b, hk, 0), sdv.s[2], dv_acc, Evp, S, Ev);
    }
  });
  return true;
}

#else  // the build's target has no AVX-512-BF16: the widened f32 kernels run bf16

bool sdpa_forward_bf16(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const SdpaParams&) {
  return false;
}
bool sdpa_backward_bf16(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&, const Tensor&, const SdpaParams&) {
  return false;
}

#endif

}  // namespace mpx::cpu::attn

namespace mpx {
std::string cpu_attention_backend() {
#if defined(__AVX512BF16__)
  switch (cpu::attn::engine()) {
    case cpu::attn::Engine::kAmx: return "f32 FMA tiles; bf16 on AMX tiles";
    case cpu::attn::Engine::kDot: return "f32 FMA tiles; bf16 on AVX-512-BF16 dot products";
    case cpu::attn::Engine::kF32: break;
  }
  return "f32 FMA tiles; bf16 widened to f32 (no AMX-BF16 from the CPU or the OS, and not an AMD CPU, where vdpbf16ps would pay)";
#else
  return "f32 FMA tiles; bf16 widened to f32 (built without AVX-512-BF16: -march has none)";
#endif
}
}  // namespace mpx
