// ExpandingArray<N>: N sizes written as one integer for all of them or as a list, as LibTorch's kernel sizes.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"

namespace mpx {

/// `2` means {2, 2}; `{3, 5}` and std::array give each dim its own; reads as a std::array and as an IntList.
template <size_t N>
struct ExpandingArray {
  std::array<int64_t, N> v{};
  ExpandingArray() = default;
  ExpandingArray(int64_t x) { v.fill(x); }                     // NOLINT: `.stride(2)` reads naturally
  ExpandingArray(std::array<int64_t, N> a) : v(a) {}           // NOLINT
  ExpandingArray(std::initializer_list<int64_t> l) {           // NOLINT
    MPX_CHECK(l.size() == N || l.size() == 1, "expected 1 or ", N, " values for a ", N, "-d size, got ", l.size());
    if (l.size() == 1) v.fill(*l.begin());
    else std::copy(l.begin(), l.end(), v.begin());
  }
  operator std::array<int64_t, N>() const { return v; }       // NOLINT
  operator IntList() const { return IntList(v.begin(), v.end()); }  // NOLINT: `reshape(x, shape)`
  int64_t operator[](size_t i) const { return v[i]; }
  int64_t& operator[](size_t i) { return v[i]; }
  static constexpr size_t size() { return N; }
  bool operator==(const ExpandingArray& o) const = default;
};

}  // namespace mpx
