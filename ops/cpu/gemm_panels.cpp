// Products of a few rows against a right operand packed once into 16-column f32 panels (a recurrent layer's steps) on
// AVX2/FMA CPUs, where oneDNN 2.6's packed product is latency-bound on so few rows and has no bf16 kernels.
#include "ops/cpu/gemm_panels.h"

#include <algorithm>
#include <vector>

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
// broadcast in the 16 registers. K runs in chunks of 512 so a panel's chunk (32 KiB) is read from L1 by every block.
constexpr int64_t kNr = 16, kMr = 6, kKc = 512;

// b [k, n] in panels: chunk c (rows c*kKc .. +kc) of panel s holds kc rows of 16 floats, zero past column n, at
// c*kKc*panels*16 + s*kc*16.
struct Plan {
  const void* b = nullptr;
  DType dtype = kFloat32;
  int64_t k = 0, n = 0, s0 = 0, s1 = 0, panels = 0;
  std::vector<float> store;
  float* data = nullptr;  // store's first 32-byte aligned float
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
  p.store.assign(static_cast<size_t>(p.k * p.panels * kNr + 8), 0.0f);
  p.data = p.store.data() + (8 - (reinterpret_cast<uintptr_t>(p.store.data()) / sizeof(float)) % 8) % 8;
  const T* src = b.data_ptr<T>();
  parallel_for(p.panels, std::max<int64_t>(1, kGrain / (p.k * kNr)), [&](int64_t sb, int64_t se) {
    for (int64_t c0 = 0; c0 < p.k; c0 += kKc) {
      const int64_t kc = std::min(kKc, p.k - c0);
      for (int64_t s = sb; s < se; ++s) {
        float* d = p.data + c0 * p.panels * kNr + s * kc * kNr;
        const int64_t j0 = s * kNr, w = std::min(kNr, p.n - j0);
        for (int64_t kk = 0; kk < kc; ++kk, d += kNr)
          for (int64_t j = 0; j < w; ++j) d[j] = static_cast<float>(src[(c0 + kk) * p.s0 + (j0 + j) * p.s1]);
      }
    }
  });
}

// c[MR, 16] (= or +=) a[MR, kc] @ panel chunk[kc, 16]: a's rows lda apart, unit stride along k. The first chunk writes
// acc + beta * c (c not read when beta is 0); later chunks add. `w` < 16 masks the panel's columns past n.
template <int MR, bool kFull>
void block(int64_t kc, const float* a, int64_t lda, const float* pb, float* c, int64_t ldc, bool first, float beta,
           int64_t w) {
  // Every loop over the rows unrolled: a loop left rolled keeps the accumulators in memory.
  __m256 lo[MR], hi[MR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  int64_t k = 0;
  if constexpr (MR == 1) {
    // One row has two accumulator chains, each an FMA's latency per step: four steps of k at a time on chains of
    // their own (a batch of one, generating), added at the end.
    __m256 lo1 = _mm256_setzero_ps(), hi1 = lo1, lo2 = lo1, hi2 = lo1, lo3 = lo1, hi3 = lo1;
    for (; k + 4 <= kc; k += 4, pb += 4 * kNr) {
      lo[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k), _mm256_load_ps(pb), lo[0]);
      hi[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k), _mm256_load_ps(pb + 8), hi[0]);
      lo1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k + 1), _mm256_load_ps(pb + 16), lo1);
      hi1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k + 1), _mm256_load_ps(pb + 24), hi1);
      lo2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k + 2), _mm256_load_ps(pb + 32), lo2);
      hi2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k + 2), _mm256_load_ps(pb + 40), hi2);
      lo3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k + 3), _mm256_load_ps(pb + 48), lo3);
      hi3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k + 3), _mm256_load_ps(pb + 56), hi3);
    }
    lo[0] = _mm256_add_ps(_mm256_add_ps(lo[0], lo1), _mm256_add_ps(lo2, lo3));
    hi[0] = _mm256_add_ps(_mm256_add_ps(hi[0], hi1), _mm256_add_ps(hi2, hi3));
  }
  for (; k < kc; ++k, pb += kNr) {
    const __m256 b0 = _mm256_load_ps(pb), b1 = _mm256_load_ps(pb + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 x = _mm256_broadcast_ss(a + i * lda + k);
      lo[i] = _mm256_fmadd_ps(x, b0, lo[i]);
      hi[i] = _mm256_fmadd_ps(x, b1, hi[i]);
    }
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(w)), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(w) - 8), lane);
  const __m256 vbeta = _mm256_set1_ps(beta);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    float* p = c + i * ldc;
    const bool read = !first || beta != 0.0f;
    const __m256 f = first ? vbeta : _mm256_set1_ps(1.0f);
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

template <bool kFull>
void block_rows(int64_t mr, int64_t kc, const float* a, int64_t lda, const float* pb, float* c, int64_t ldc, bool first,
                float beta, int64_t w) {
  switch (mr) {
    case 6: return block<6, kFull>(kc, a, lda, pb, c, ldc, first, beta, w);
    case 5: return block<5, kFull>(kc, a, lda, pb, c, ldc, first, beta, w);
    case 4: return block<4, kFull>(kc, a, lda, pb, c, ldc, first, beta, w);
    case 3: return block<3, kFull>(kc, a, lda, pb, c, ldc, first, beta, w);
    case 2: return block<2, kFull>(kc, a, lda, pb, c, ldc, first, beta, w);
    default: return block<1, kFull>(kc, a, lda, pb, c, ldc, first, beta, w);
  }
}
}  // namespace

bool preferred() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          !__builtin_cpu_supports("avx512f");
  return yes;
}

bool matmul_packed(const Tensor& out, const Tensor& a, const Tensor& b, double beta, std::shared_ptr<void>& plan) {
  const DType dt = a.dtype();
  if ((dt != kFloat32 && dt != kBFloat16 && dt != kFloat16) || b.dtype() != dt || out.dtype() != dt || a.dim() != 2 ||
      b.dim() != 2 || !out.is_contiguous())
    return false;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || k == 0 || n == 0 || b.size(0) != k || out.size(0) != m || out.size(1) != n) return false;
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
  const Tensor o32 = dt == kFloat32 ? out : beta != 0.0 ? out.to(kFloat32).contiguous() : empty({m, n});
  const float* pa = ar.data_ptr<float>();
  const int64_t lda = ar.stride(0);
  float* pc = o32.data_ptr<float>();
  // Rows in blocks of at most 6, as even as they come (16 rows: 6, 5, 5), so no block runs far below the
  // 12-accumulator kernel's rate.
  const int64_t blocks = (m + kMr - 1) / kMr, base = m / blocks, extra = m % blocks;
  const auto fb = static_cast<float>(beta);
  const int64_t threads = omp_get_max_threads();
  const int64_t grain = 2 * m * k * n < (1 << 20) ? p.panels : std::max<int64_t>(1, (p.panels + threads - 1) / threads);
  parallel_for(p.panels, grain, [&](int64_t sb, int64_t se) {
    for (int64_t c0 = 0; c0 < k; c0 += kKc) {
      const int64_t kc = std::min(kKc, k - c0);
      for (int64_t s = sb; s < se; ++s) {
        const float* panel = p.data + c0 * p.panels * kNr + s * kc * kNr;
        const int64_t j0 = s * kNr, w = std::min(kNr, n - j0);
        for (int64_t blk = 0, r0 = 0; blk < blocks; ++blk) {
          const int64_t mr = base + (blk < extra ? 1 : 0);
          const float* ablk = pa + r0 * lda + c0;
          float* cblk = pc + r0 * n + j0;
          if (w == kNr) block_rows<true>(mr, kc, ablk, lda, panel, cblk, n, c0 == 0, fb, w);
          else block_rows<false>(mr, kc, ablk, lda, panel, cblk, n, c0 == 0, fb, w);
          r0 += mr;
        }
      }
    }
  });
  if (dt != kFloat32) Tensor(out).copy_(o32);
  return true;
}
#else
bool preferred() { return false; }
bool matmul_packed(const Tensor&, const Tensor&, const Tensor&, double, std::shared_ptr<void>&) { return false; }
#endif
}  // namespace mpx::cpu::panels
