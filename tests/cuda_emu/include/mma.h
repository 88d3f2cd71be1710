// Host stand-in for <mma.h> in the emulated kernel tests: the WMMA calls of ops/cuda/flash_attention.cuh, with
// each lane holding a whole 16 x 16 tile (lane 0 stores) and CUDA's alignment rules checked on every access.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "warp_threads.h"

namespace nvcuda::wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "only the 16x16x16 shape is emulated");
  float x[16][16];
};

namespace detail {
inline float widen(float v) { return v; }
inline float widen(__half v) { return __half2float(v); }
inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
// WMMA wants 256-bit aligned tile pointers and ldm a multiple of 16 bytes.
inline void check(const void* p, unsigned ldm, size_t elem, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * elem) % 16 != 0)
    throw std::logic_error(std::string(what) + ": misaligned tile pointer or ldm " + std::to_string(ldm));
}
}  // namespace detail

template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  detail::check(p, ldm, sizeof(T), "load_matrix_sync");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r][c] = detail::widen(std::is_same_v<L, row_major> ? p[r * ldm + c] : p[c * ldm + r]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  detail::check(p, ldm, 4, "load_matrix_sync (accumulator)");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r][c] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  detail::check(p, ldm, 4, "store_matrix_sync");
  if (cuda_emu::lane() != 0) return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r][c];
}
template <class F> void fill_fragment(F& f, float v) {
  for (auto& row : f.x)
    for (float& e : row) e = v;
}
// Products of the widened inputs summed in f32, as the Tensor Cores do (their summation order differs).
template <class A, class B>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const A& a, const B& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float t[16][16];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[r][n];
      for (int k = 0; k < 16; ++k) s += a.x[r][k] * b.x[k][n];
      t[r][n] = s;
    }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) d.x[r][n] = t[r][n];
}
}  // namespace nvcuda::wmma
