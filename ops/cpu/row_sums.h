// Row maxima and sums in independent chains, shared by the CPU softmax and cross-entropy kernels.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/formulas.h"

namespace mpx::cpu {

// One running scalar is a dependency chain that neither vectorizes nor pipelines (a 128-class row
// then costs ~1,000 cycles); kChains independent chains do both. The chains depend only on n, so
// results do not depend on the thread count.
inline constexpr int kChains = 16;
template <typename A> A chain_total(A (&c)[kChains]) {
  for (int w = kChains / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) c[j] += c[j + w];
  return c[0];
}
template <typename A> A row_sum(const A* v, int64_t n) {
  A c[kChains] = {};
  int64_t k = 0;
  for (; k + kChains <= n; k += kChains)
    for (int j = 0; j < kChains; ++j) c[j] += v[k + j];
  for (; k < n; ++k) c[0] += v[k];
  return chain_total(c);
}
// The largest element; a NaN never wins the compare, but its exponential then turns the row's sum
// and so every output of the row into NaN, as PyTorch's softmax does.
template <typename A> A row_max(const A* v, int64_t n) {
  constexpr A lowest = -std::numeric_limits<A>::infinity();
  A c[kChains];
  for (int j = 0; j < kChains; ++j) c[j] = lowest;
  int64_t k = 0;
  for (; k + kChains <= n; k += kChains)
    for (int j = 0; j < kChains; ++j) c[j] = v[k + j] > c[j] ? v[k + j] : c[j];
  A mx = lowest;
  for (; k < n; ++k) mx = v[k] > mx ? v[k] : mx;
  for (int j = 0; j < kChains; ++j) mx = c[j] > mx ? c[j] : mx;
  return mx;
}

/// The softmax statistics of a row: e[k] = exp(v[k] - shift) with shift its maximum, and their sum (returned).
/// An all -inf row keeps shift 0 (subtracting -inf would give NaN): its sum is 0, its log-sum-exp -inf.
template <typename A> A row_exp_sum(const A* v, int64_t n, A* e, A& shift) {
  const A mx = row_max(v, n);
  shift = std::isinf(mx) && mx < 0 ? A(0) : mx;
  for (int64_t k = 0; k < n; ++k) e[k] = formulas::exp(v[k] - shift);
  return row_sum(e, n);
}

}  // namespace mpx::cpu
