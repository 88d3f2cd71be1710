// CPU loop machinery: parallel ranges and strided elementwise iteration for kernels.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/tensor.h"

namespace mpx::cpu {

/// Accumulation / compute type: f16 and bf16 compute in float, f64 in double.
template <typename T> struct acc_type { using type = T; };
template <> struct acc_type<Half> { using type = float; };
template <> struct acc_type<BFloat16> { using type = float; };
template <typename T> using acc_t = typename acc_type<T>::type;

/// v where `keep`, else zero. Masking the stored bits, rather than rounding a selected float
/// (or choosing with ?:, which GCC may turn into a branch around the rounding), keeps f16/bf16
/// loops free of control flow, so GCC vectorizes them.
template <typename T> T keep_or_zero(bool keep, T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T::from_bits(static_cast<uint16_t>(v.x & (0u - static_cast<unsigned>(keep))));
  else return keep ? v : T(0);
}

/// `take ? a : b` through bit masks: GCC turns a plain ?: on floats or f16/bf16 into a branch,
/// which mispredicts about half the time on data-dependent choices (where, max pooling) and
/// keeps the loop from vectorizing.
/// The unsigned integer of T's size, to move T's bits.
template <typename T>
using bits_of = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t,
                std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;

template <typename T> T select_bits(bool take, T a, T b) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8));
  using Bits = bits_of<T>;
  const Bits mask = static_cast<Bits>(Bits{0} - static_cast<Bits>(take));
  Bits ab, bb;
  std::memcpy(&ab, &a, sizeof(T));
  std::memcpy(&bb, &b, sizeof(T));
  ab = static_cast<Bits>((ab & mask) | (bb & static_cast<Bits>(~mask)));
  std::memcpy(static_cast<void*>(&a), &ab, sizeof(T));  // T may be Half or BFloat16 (trivially copyable)
  return a;
}

/// p[0, n) = v, stored as T's bits: std::fill over the Half/BFloat16 structs does not vectorize (a bf16 fill took
/// 2.5x an f32 one of twice the bytes).
template <typename T> void fill_bits(T* p, int64_t n, T v) {
  bits_of<T> b;
  std::memcpy(&b, &v, sizeof b);
  auto* q = reinterpret_cast<bits_of<T>*>(p);
  std::fill(q, q + n, b);
}

/// Below this many elements a loop runs on one thread (thread start-up costs more).
inline constexpr int64_t kGrain = 32768;

/// Calls f(begin, end) over [0, n) split into fixed chunks. Chunk boundaries depend only
/// on n, never on the thread count, so reductions that combine per-chunk partials in
/// order give identical results on any number of threads.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n <= grain) { f(int64_t{0}, n); return; }
  const int64_t chunks = (n + grain - 1) / grain;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) f(c * grain, std::min(n, (c + 1) * grain));
}

/// The dims of t in its memory order (size-1 dims first, then decreasing stride) when t is
/// dense, its elements filling numel() consecutive slots in some order of dims; empty otherwise.
inline IntList memory_order(const Tensor& t) {
  IntList perm;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) == 1) perm.push_back(d);
  const size_t ones = perm.size();
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) != 1) perm.push_back(d);
  std::stable_sort(perm.begin() + static_cast<std::ptrdiff_t>(ones), perm.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  int64_t expect = 1;
  for (size_t i = perm.size(); i-- > ones;) {
    if (t.stride(perm[i]) != expect) return {};
    expect *= t.size(perm[i]);
  }
  return perm;
}

namespace detail {
// An input read as a flat array, or one value broadcast to every element (all strides 0).
template <typename T> struct FlatIn {
  const T* p;
  T operator()(int64_t i) const { return p[i]; }
};
template <typename T> struct ScalarIn {
  T v;
  T operator()(int64_t) const { return v; }
};

// The flat loop with input K onwards chosen as FlatIn or ScalarIn: each combination is its own
// loop, so a tensor-times-number op vectorizes as a tensor-times-tensor one does.
template <size_t K, typename OutT, typename InTuple, typename F, typename... Acc>
void flat_loop(OutT* o, int64_t n, F& f, const std::array<const void*, std::tuple_size_v<InTuple>>& base,
               const std::array<bool, std::tuple_size_v<InTuple>>& scalar, Acc... acc) {
  if constexpr (K == std::tuple_size_v<InTuple>) {
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = f(acc(i)...);
    });
  } else {
    using T = std::tuple_element_t<K, InTuple>;
    const T* p = static_cast<const T*>(base[K]);
    if (scalar[K]) flat_loop<K + 1, OutT, InTuple>(o, n, f, base, scalar, acc..., ScalarIn<T>{*p});
    else flat_loop<K + 1, OutT, InTuple>(o, n, f, base, scalar, acc..., FlatIn<T>{p});
  }
}

inline bool all_strides_zero(const Tensor& t) {
  for (int64_t s : t.strides())
    if (s != 0) return false;
  return true;
}

// elementwise() for a row-major out.
template <typename OutT, typename... InT, typename F>
void elementwise_row_major(const Tensor& out, F f, const std::conditional_t<true, Tensor, InT>&... ins) {
  constexpr size_t K = sizeof...(InT);
  const int64_t n = out.numel();
  if (n == 0) return;
  OutT* o = static_cast<OutT*>(out.raw_data());
  std::array<const void*, K> base = {ins.raw_data()...};
  if constexpr (K >= 1 && K <= 2) {
    // Contiguous inputs beside broadcast numbers (x * 0.5, a bias of one value).
    const std::array<bool, K> scalar = {all_strides_zero(ins)...};
    const bool mixed = ((ins.is_contiguous() || all_strides_zero(ins)) && ... && true);
    if (mixed && (scalar[0] || scalar[K - 1])) {
      flat_loop<0, OutT, std::tuple<InT...>>(o, n, f, base, scalar);
      return;
    }
  }
  bool flat = ((ins.is_contiguous()) && ... && true);
  if (flat) {
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
      [&]<size_t... I>(std::index_sequence<I...>) {
        for (int64_t i = b; i < e; ++i) o[i] = f(static_cast<const InT*>(base[I])[i]...);
      }(std::index_sequence_for<InT...>{});
    });
    return;
  }
  const IntList& sz = out.sizes();
  const int64_t nd = static_cast<int64_t>(sz.size());
  const int64_t inner = sz[nd - 1];
  const int64_t rows = n / inner;
  std::array<const IntList*, K> st = {&ins.strides()...};
  parallel_for(rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      std::array<int64_t, K> off{};
      int64_t rem = r;
      for (int64_t d = nd - 2; d >= 0; --d) {
        const int64_t idx = rem % sz[d];
        rem /= sz[d];
        for (size_t k = 0; k < K; ++k) off[k] += idx * (*st[k])[d];
      }
      OutT* orow = o + r * inner;
      [&]<size_t... I>(std::index_sequence<I...>) {
        const std::array<int64_t, K> is = {(*st[I])[nd - 1]...};
        for (int64_t i = 0; i < inner; ++i)
          orow[i] = f(static_cast<const InT*>(base[I])[off[I] + i * is[I]]...);
      }(std::index_sequence_for<InT...>{});
    }
  });
}
}  // namespace detail

/// Elementwise driver: out[i] = f(ins[i]...) with out dense (row-major, or channels-last as
/// elementwise ops keep it) and each input a view of out's shape (any strides, including 0
/// for broadcast dims). The loops walk out's memory in order, the inputs' dims permuted alike,
/// so inputs in out's layout are read as flat arrays too.
template <typename OutT, typename... InT, typename F>
void elementwise(const Tensor& out, F f, const std::conditional_t<true, Tensor, InT>&... ins) {
  if (out.is_contiguous() || out.numel() == 0) {
    detail::elementwise_row_major<OutT, InT...>(out, f, ins...);
    return;
  }
  const IntList perm = memory_order(out);
  MPX_CHECK(!perm.empty(), "elementwise kernel: the output (sizes ", shape_str(out.sizes()), ", strides ",
            shape_str(out.strides()), ") is not dense");
  detail::elementwise_row_major<OutT, InT...>(out.permute(perm), f, ins.permute(perm)...);
}

/// Calls f(offset) for every element of a strided tensor in row-major order (serial).
template <typename F>
void for_each_offset(const IntList& sizes, const IntList& strides, int64_t start, F f) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  if (n == 0) return;
  std::vector<int64_t> idx(nd, 0);
  int64_t off = start;
  for (int64_t i = 0; i < n; ++i) {
    f(off);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < sizes[d]) { off += strides[d]; break; }
      off -= strides[d] * (sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

/// Runs `f.template operator()<T>()` with T the C++ type of `dt`.
template <typename F>
decltype(auto) visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case kFloat32: return f.template operator()<float>();
    case kFloat16: return f.template operator()<Half>();
    case kBFloat16: return f.template operator()<BFloat16>();
    case kFloat64: return f.template operator()<double>();
    case kInt64: return f.template operator()<int64_t>();
    case kInt32: return f.template operator()<int32_t>();
    case kUInt8: return f.template operator()<uint8_t>();
    case kBool: return f.template operator()<bool>();
  }
  MPX_ERROR("unknown dtype");
}

}  // namespace mpx::cpu
