// Matrix products on 16-column f32 panels for AVX2/FMA CPUs, where oneDNN 2.6 falls short: a few rows against a right
// operand packed once (a recurrent layer's steps; oneDNN's packed product is latency-bound there and has no bf16
// kernels), and the weight gradients g^T x that its GEMM runs at half speed.
#include "ops/cpu/gemm_panels.h"

#include <algorithm>

#include <omp.h>

#include "ops/cpu/loops.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MPX_PANELS 1
#endif

namespace mpx::cpu::panels {
#ifdef MPX_PANELS
namespace {
// A 16-column panel is two ymm registers wide; a block of up to 6 rows keeps 12 accumulators, the two panel loads and a
// broadcast in the 16 registers. mm_packed runs k in chunks of 512 rows, so a panel's chunk (32 KiB) is read from L1 by
// every block of a's rows in place.
constexpr int64_t kNr = 16, kMr = 6, kKc = 512;

// m rows in blocks of at most 6, as even as they come (16 rows: 6, 5, 5), so no block runs far below the
// 12-accumulator kernel's rate.
struct RowBlocks {
  int64_t count, base, extra;
  explicit RowBlocks(int64_t m) : count((m + kMr - 1) / kMr), base(m / count), extra(m % count) {}
  int64_t rows(int64_t blk) const { return base + (blk < extra ? 1 : 0); }
};

// out = a @ b with a [m, k], b [k, n] and out [m, n] of one of f32, bf16 and f16, out contiguous, nothing empty.
bool supported(const Tensor& out, const Tensor& a, const Tensor& b) {
  const DType dt = a.dtype();
  if ((dt != kFloat32 && dt != kBFloat16 && dt != kFloat16) || b.dtype() != dt || out.dtype() != dt || a.dim() != 2 ||
      b.dim() != 2 || !out.is_contiguous())
    return false;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  return m > 0 && k > 0 && n > 0 && b.size(0) == k && out.size(0) == m && out.size(1) == n;
}

// Where the f32 sums go: out itself, or for bf16/f16 an f32 copy (holding out's values when beta reads them), which
// the caller rounds into out once.
Tensor f32_out(const Tensor& out, double beta) {
  if (out.dtype() == kFloat32) return out;
  return beta != 0.0 ? out.to(kFloat32).contiguous() : empty(out.sizes());
}

// Rows [k0, k0 + kc) of b [k, n] (strides s0, s1, any element type) for panels [sb, se), widened to f32, into dst:
// panel s at dst + s * kc * 16, kc rows of 16 floats, zero past column n.
template <typename T>
void pack_panels(const T* b, int64_t s0, int64_t s1, int64_t n, int64_t k0, int64_t kc, int64_t sb, int64_t se,
                 float* dst) {
  for (int64_t s = sb; s < se; ++s) {
    float* d = dst + s * kc * kNr;
    const int64_t j0 = s * kNr, w = std::min(kNr, n - j0);
    for (int64_t kk = 0; kk < kc; ++kk, d += kNr) {
      const T* row = b + (k0 + kk) * s0 + j0 * s1;
      int64_t j = 0;
      for (; j < w; ++j) d[j] = static_cast<float>(row[j * s1]);
      for (; j < kNr; ++j) d[j] = 0.0f;
    }
  }
}

// b packed once for mm_packed, in chunks of kKc rows: chunk c of panel s at c * kKc * panels * 16 + s * kc * 16.
struct Plan {
  const void* b = nullptr;
  DType dtype = kFloat32;
  int64_t k = 0, n = 0, s0 = 0, s1 = 0, panels = 0;
  Tensor store;          // f32, from the CPU allocator (64-byte aligned, as the panel loads need)
  float* data = nullptr;  // store's first float
};

// b's elements widened to f32 (a bf16/f16 weight once per plan, instead of once per step).
template <typename T>
void pack(Plan& p, const Tensor& b) {
  p.b = b.raw_data();
  p.k = b.size(0);
  p.n = b.size(1);
  p.s0 = b.stride(0);
  p.s1 = b.stride(1);
  p.panels = (p.n + kNr - 1) / kNr;
  p.store = empty({p.k * p.panels * kNr});
  p.data = p.store.data_ptr<float>();
  const T* src = b.data_ptr<T>();
  parallel_for(p.panels, std::max<int64_t>(1, kGrain / (p.k * kNr)), [&](int64_t sb, int64_t se) {
    for (int64_t c0 = 0; c0 < p.k; c0 += kKc)
      pack_panels(src, p.s0, p.s1, p.n, c0, std::min(kKc, p.k - c0), sb, se, p.data + c0 * p.panels * kNr);
  });
}

// c[MR, 16] (= or +=) alpha * a[MR, kc] @ panel chunk[kc, 16], a's element (i, k) at a[i * ra + k * ka] (its rows in
// place: ka = 1; a packed block: ra = 1, ka = MR). The first chunk of k writes that + beta * c (c not read when beta is
// 0); later chunks add. `w` < 16 masks the panel's columns past n.
template <int MR, bool kFull>
void block(int64_t kc, const float* a, int64_t ra, int64_t ka, const float* pb, float* c, int64_t ldc, bool first,
           float alpha, float beta, int64_t w) {
  // Every loop over the rows unrolled: a loop left rolled keeps the accumulators in memory.
  __m256 lo[MR], hi[MR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  int64_t k = 0;
  if constexpr (MR == 1) {
    // One row has two accumulator chains, each an FMA's latency per step: four steps of k at a time on chains of
    // their own (a batch of one, generating), added at the end.
    __m256 lo1 = _mm256_setzero_ps(), hi1 = lo1, lo2 = lo1, hi2 = lo1, lo3 = lo1, hi3 = lo1;
    for (; k + 4 <= kc; k += 4, pb += 4 * kNr, a += 4 * ka) {
      lo[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(a), _mm256_load_ps(pb), lo[0]);
      hi[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(a), _mm256_load_ps(pb + 8), hi[0]);
      lo1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + ka), _mm256_load_ps(pb + 16), lo1);
      hi1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + ka), _mm256_load_ps(pb + 24), hi1);
      lo2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 2 * ka), _mm256_load_ps(pb + 32), lo2);
      hi2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 2 * ka), _mm256_load_ps(pb + 40), hi2);
      lo3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 3 * ka), _mm256_load_ps(pb + 48), lo3);
      hi3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 3 * ka), _mm256_load_ps(pb + 56), hi3);
    }
    lo[0] = _mm256_add_ps(_mm256_add_ps(lo[0], lo1), _mm256_add_ps(lo2, lo3));
    hi[0] = _mm256_add_ps(_mm256_add_ps(hi[0], hi1), _mm256_add_ps(hi2, hi3));
  }
  for (; k < kc; ++k, pb += kNr, a += ka) {
    const __m256 b0 = _mm256_load_ps(pb), b1 = _mm256_load_ps(pb + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 x = _mm256_broadcast_ss(a + i * ra);
      lo[i] = _mm256_fmadd_ps(x, b0, lo[i]);
      hi[i] = _mm256_fmadd_ps(x, b1, hi[i]);
    }
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(w)), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(w) - 8), lane);
  const bool read = !first || beta != 0.0f;
  const __m256 f = _mm256_set1_ps(first ? beta : 1.0f), va = _mm256_set1_ps(alpha);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    float* p = c + i * ldc;
    lo[i] = _mm256_mul_ps(va, lo[i]);
    hi[i] = _mm256_mul_ps(va, hi[i]);
    if constexpr (kFull) {
      if (read) {
        lo[i] = _mm256_fmadd_ps(f, _mm256_loadu_ps(p), lo[i]);
        hi[i] = _mm256_fmadd_ps(f, _mm256_loadu_ps(p + 8), hi[i]);
      }
      _mm256_storeu_ps(p, lo[i]);
      _mm256_storeu_ps(p + 8, hi[i]);
    } else {
      if (read) {
        lo[i] = _mm256_fmadd_ps(f, _mm256_maskload_ps(p, m0), lo[i]);
        hi[i] = _mm256_fmadd_ps(f, _mm256_maskload_ps(p + 8, m1), hi[i]);
      }
      _mm256_maskstore_ps(p, m0, lo[i]);
      _mm256_maskstore_ps(p + 8, m1, hi[i]);
    }
  }
}

// One block of mr rows against one panel (w of its 16 columns in use).
void block_rows(int64_t mr, int64_t kc, const float* a, int64_t ra, int64_t ka, const float* pb, float* c, int64_t ldc,
                bool first, float alpha, float beta, int64_t w) {
#define MPX_PANEL_ROWS(R)                                                                  \
  case R:                                                                                  \
    if (w == kNr) return block<R, true>(kc, a, ra, ka, pb, c, ldc, first, alpha, beta, w); \
    return block<R, false>(kc, a, ra, ka, pb, c, ldc, first, alpha, beta, w);
  switch (mr) {
    MPX_PANEL_ROWS(6)
    MPX_PANEL_ROWS(5)
    MPX_PANEL_ROWS(4)
    MPX_PANEL_ROWS(3)
    MPX_PANEL_ROWS(2)
    default: MPX_PANEL_ROWS(1)
  }
#undef MPX_PANEL_ROWS
}

}  // namespace

bool preferred() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          !__builtin_cpu_supports("avx512f");
  return yes;
}

bool matmul_packed(const Tensor& out, const Tensor& a, const Tensor& b, double beta, std::shared_ptr<void>& plan) {
  if (!supported(out, a, b)) return false;
  const DType dt = a.dtype();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (!plan) {
    auto p = std::make_shared<Plan>();
    p->dtype = dt;
    if (dt == kFloat32) pack<float>(*p, b);
    else if (dt == kBFloat16) pack<BFloat16>(*p, b);
    else pack<Half>(*p, b);
    plan = p;
  }
  const Plan& p = *static_cast<const Plan*>(plan.get());
  if (p.b != b.raw_data() || p.dtype != dt || p.k != k || p.n != n || p.s0 != b.stride(0) || p.s1 != b.stride(1))
    return false;
  // The kernel walks a's rows along k: a view with another unit stride is copied row-major first. bf16/f16 run on
  // f32 copies of a and out, and each output is rounded once (the GPU's contract: f32 sums).
  const Tensor ar = dt != kFloat32 ? a.to(kFloat32).contiguous() : a.stride(1) == 1 ? a : a.contiguous();
  const Tensor o32 = f32_out(out, beta);
  const float* pa = ar.data_ptr<float>();
  const int64_t lda = ar.stride(0);
  float* pc = o32.data_ptr<float>();
  const RowBlocks rb(m);
  const auto fb = static_cast<float>(beta);
  const int64_t threads = omp_get_max_threads();
  const int64_t grain = 2 * m * k * n < (1 << 20) ? p.panels : std::max<int64_t>(1, (p.panels + threads - 1) / threads);
  parallel_for(p.panels, grain, [&](int64_t sb, int64_t se) {
    for (int64_t c0 = 0; c0 < k; c0 += kKc) {
      const int64_t kc = std::min(kKc, k - c0);
      for (int64_t s = sb; s < se; ++s) {
        const float* panel = p.data + c0 * p.panels * kNr + s * kc * kNr;
        const int64_t j0 = s * kNr, w = std::min(kNr, n - j0);
        for (int64_t blk = 0, r0 = 0; blk < rb.count; r0 += rb.rows(blk), ++blk)
          block_rows(rb.rows(blk), kc, pa + r0 * lda + c0, lda, 1, panel, pc + r0 * n + j0, n, c0 == 0, 1.0f, fb, w);
      }
    }
  });
  if (dt != kFloat32) Tensor(out).copy_(o32);
  return true;
}

namespace {
// matmul's body for a and b of element type T (widened to f32 as they are packed) into f32 c [m, n].
template <typename T>
void panel_gemm(const Tensor& a, const Tensor& b, float* pc, float alpha, float beta) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  // BLIS's loop order. Per chunk of 256 rows of k: b's chunk packed into panels, shared by the team (a panel's chunk,
  // 16 KiB, is read from L1 by every row block of a macro block); per macro block of a's rows (at most 120), its
  // chunk packed as 6-row tuples (120 KiB, read from L2), so a transposed a is read in runs along its unit stride.
  constexpr int64_t kChunk = 256, kMacro = 120;
  const int64_t panels = (n + kNr - 1) / kNr;
  const int64_t threads = m * k * n < (int64_t{1} << 19) ? 1 : omp_get_max_threads();
  // Macro blocks of a multiple of 6 rows, about even, as many as a multiple of the threads where the rows allow.
  int64_t macros = std::max<int64_t>((m + kMacro - 1) / kMacro, threads);
  macros = (macros + threads - 1) / threads * threads;
  const int64_t mc = ((m + macros - 1) / macros + kMr - 1) / kMr * kMr;
  macros = (m + mc - 1) / mc;
  // Scratch from the CPU allocator (aligned, kept in the heap between calls): b's packed chunk, shared by the team,
  // and a macro block's packed rows for each thread.
  const Tensor scratch = empty({kChunk * panels * kNr + threads * mc * kChunk});
  float* bp = scratch.data_ptr<float>();
  const T *pa = a.data_ptr<T>(), *pb = b.data_ptr<T>();
  const int64_t as0 = a.stride(0), as1 = a.stride(1), bs0 = b.stride(0), bs1 = b.stride(1);
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    float* ap = bp + kChunk * panels * kNr + omp_get_thread_num() * mc * kChunk;
    for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
      const int64_t kc = std::min(kChunk, k - c0);
      // Each loop ends at a barrier: every panel is packed before any is read, and read before the next chunk's.
#pragma omp for schedule(static)
      for (int64_t s = 0; s < panels; ++s) pack_panels(pb, bs0, bs1, n, c0, kc, s, s + 1, bp);
#pragma omp for schedule(static)
      for (int64_t mb = 0; mb < macros; ++mb) {
        const int64_t i0 = mb * mc;
        const RowBlocks rb(std::min(mc, m - i0));
        float* d = ap;
        for (int64_t blk = 0, r0 = 0; blk < rb.count; r0 += rb.rows(blk), ++blk)
          for (int64_t kk = 0; kk < kc; ++kk)
            for (int64_t i = 0; i < rb.rows(blk); ++i)
              *d++ = static_cast<float>(pa[(i0 + r0 + i) * as0 + (c0 + kk) * as1]);
        for (int64_t s = 0; s < panels; ++s) {
          const float* ablk = ap;
          for (int64_t blk = 0, r0 = 0; blk < rb.count; r0 += rb.rows(blk), ++blk) {
            const int64_t mr = rb.rows(blk);
            block_rows(mr, kc, ablk, 1, mr, bp + s * kc * kNr, pc + (i0 + r0) * n + s * kNr, n, c0 == 0, alpha, beta,
                       std::min(kNr, n - s * kNr));
            ablk += mr * kc;
          }
        }
      }
    }
  }
}
}  // namespace

bool matmul(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  if (!supported(out, a, b)) return false;
  const DType dt = a.dtype();
  const Tensor o32 = f32_out(out, beta);
  const auto fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
  if (dt == kFloat32) panel_gemm<float>(a, b, o32.data_ptr<float>(), fa, fb);
  else if (dt == kBFloat16) panel_gemm<BFloat16>(a, b, o32.data_ptr<float>(), fa, fb);
  else panel_gemm<Half>(a, b, o32.data_ptr<float>(), fa, fb);
  if (dt != kFloat32) Tensor(out).copy_(o32);
  return true;
}
#else
bool preferred() { return false; }
bool matmul_packed(const Tensor&, const Tensor&, const Tensor&, double, std::shared_ptr<void>&) { return false; }
bool matmul(const Tensor&, const Tensor&, const Tensor&, double, double) { return false; }
#endif
}  // namespace mpx::cpu::panels
