// CPU reduction kernels over the rows of a contiguous 2-d view, and the running sum; f16/bf16/f32 accumulate in f64
// (column sums: runs of 64 in f32 first).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/reduction.h"

namespace mpx::cpu {
namespace {

template <typename T> using wide_t = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

// Sum of one row in 8 interleaved chains combined in a fixed order: the same result on any thread
// count, and 8 independent additions in flight where one chain would wait on each.
// kSquare: the sum of squares (norm's), each square formed in the wide type.
template <typename T, bool kSquare = false>
wide_t<T> row_sum(const T* p, int64_t n) {
  auto term = [](T v) {
    const auto w = static_cast<wide_t<T>>(static_cast<acc_t<T>>(v));
    if constexpr (kSquare) return w * w;
    else return w;
  };
  wide_t<T> c[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) c[j] += term(p[i + j]);
  for (; i < n; ++i) c[i & 7] += term(p[i]);
  return ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
}

template <typename T>
T finish(wide_t<T> s, bool mean, int64_t count) {
  return static_cast<T>(static_cast<acc_t<T>>(mean ? static_cast<double>(s) / static_cast<double>(count) : s));
}

// The sums over the outer and inner dims of a contiguous [outer, rows, inner] tensor (a bias's or
// a channel's gradient over N, H, W): read in place, where moving the rows first would copy it.
template <typename T>
void sum_outer_inner(T* o, const T* p, int64_t outer, int64_t rows, int64_t inner, bool mean) {
  if (inner >= 16) {
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(outer * inner, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        wide_t<T> s = 0;
        for (int64_t a = 0; a < outer; ++a) s += row_sum(p + (a * rows + r) * inner, inner);
        o[r] = finish<T>(s, mean, outer * inner);
      }
    });
    return;
  }
  if (inner == 1) {
    // Column sums of an [outer, rows] matrix (a channels-last bias gradient), in bands of 32
    // columns: 64 rows at a time summed in acc_t lanes (vectorized down the rows), each block
    // then added to the wide sums in order, so the result does not depend on the thread count.
    constexpr int64_t kBand = 32, kBlock = 64;
    // One task per thread (bands whole): a task walks all `outer` rows of its columns.
    const int64_t per = (rows + omp_get_max_threads() - 1) / omp_get_max_threads();
    parallel_for(rows, (per + kBand - 1) / kBand * kBand, [&](int64_t b, int64_t e) {
      for (int64_t c0 = b; c0 < e; c0 += kBand) {
        const int64_t n = std::min(kBand, e - c0);
        wide_t<T> s[kBand] = {};
        for (int64_t a0 = 0; a0 < outer; a0 += kBlock) {
          acc_t<T> blk[kBand] = {};
          const int64_t a1 = std::min(outer, a0 + kBlock);
          if (n == kBand) {
            for (int64_t a = a0; a < a1; ++a)
              for (int64_t c = 0; c < kBand; ++c) blk[c] += static_cast<acc_t<T>>(p[a * rows + c0 + c]);
          } else {
            for (int64_t a = a0; a < a1; ++a)
              for (int64_t c = 0; c < n; ++c) blk[c] += static_cast<acc_t<T>>(p[a * rows + c0 + c]);
          }
          for (int64_t c = 0; c < n; ++c) s[c] += static_cast<wide_t<T>>(blk[c]);
        }
        for (int64_t c = 0; c < n; ++c) o[c0 + c] = finish<T>(s[c], mean, outer);
      }
    });
    return;
  }
  // Short inner runs: each thread walks its rows across the outer dim, whole runs at a time.
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(outer * inner, 1)), [&](int64_t b, int64_t e) {
    std::vector<wide_t<T>> s(static_cast<size_t>(e - b));
    for (int64_t a = 0; a < outer; ++a) {
      const T* q = p + (a * rows + b) * inner;
      for (int64_t r = 0; r < e - b; ++r)
        for (int64_t i = 0; i < inner; ++i) s[r] += static_cast<wide_t<T>>(static_cast<acc_t<T>>(q[r * inner + i]));
    }
    for (int64_t r = b; r < e; ++r) o[r] = finish<T>(s[r - b], mean, outer * inner);
  });
}

// param (kernels::ReduceFn): 0 sum, 1 mean, 2 sum of squares (rows only, not the outer/inner form).
template <typename T> struct Sum {
  static void run(const Tensor& out, const Tensor& in, double param) {
    const T* p = static_cast<const T*>(in.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    const bool mean = param == 1.0;
    if (in.dim() == 3) {
      MPX_CHECK(param != 2.0, "sum of squares: rows only");
      return sum_outer_inner(o, p, in.size(0), in.size(1), in.size(2), mean);
    }
    if constexpr (std::is_integral_v<T>) rows<false>(o, p, in, mean);
    else if (param == 2.0) rows<true>(o, p, in, false);
    else rows<false>(o, p, in, mean);
  }
  template <bool kSquare> static void rows(T* o, const T* p, const Tensor& in, bool mean) {
    const int64_t rows = in.size(0), cols = in.size(1);
    if (rows == 1 && cols > kGrain) {
      const int64_t blocks = (cols + kGrain - 1) / kGrain;
      std::vector<wide_t<T>> part(blocks);
      parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) part[k] = row_sum<T, kSquare>(p + k * kGrain, std::min(kGrain, cols - k * kGrain));
      });
      wide_t<T> s = 0;
      for (auto v : part) s += v;
      o[0] = finish<T>(s, mean, cols);
      return;
    }
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) o[r] = finish<T>(row_sum<T, kSquare>(p + r * cols, cols), mean, cols);
    });
  }
};

template <typename T> struct Var {
  static void run(const Tensor& out, const Tensor& in, double correction) {
    const int64_t rows = in.size(0), cols = in.size(1);
    const T* p = static_cast<const T*>(in.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(rows, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* q = p + r * cols;
        const double m = row_sum(q, cols) / static_cast<double>(cols);
        double ss = 0;
        for (int64_t i = 0; i < cols; ++i) {
          const double d = static_cast<double>(static_cast<acc_t<T>>(q[i])) - m;
          ss += d * d;
        }
        o[r] = static_cast<T>(static_cast<acc_t<T>>(ss / std::max(0.0, static_cast<double>(cols) - correction)));
      }
    });
  }
};

template <bool IsMax>
struct ArgReduce {
  template <typename T> struct K {
    static void run(const Tensor& values, const Tensor& indices, const Tensor& in) {
      const int64_t rows = in.size(0), cols = in.size(1);
      const T* p = static_cast<const T*>(in.raw_data());
      T* v = static_cast<T*>(values.raw_data());
      int64_t* ix = static_cast<int64_t*>(indices.raw_data());
      parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const T* q = p + r * cols;
          int64_t best = 0;
          acc_t<T> bv = static_cast<acc_t<T>>(q[0]);
          for (int64_t i = 1; i < cols; ++i) {
            const acc_t<T> x = static_cast<acc_t<T>>(q[i]);
            if constexpr (std::is_floating_point_v<acc_t<T>>) {
              if (std::isnan(bv)) break;  // NaN propagates, first NaN wins
              if (std::isnan(x)) { best = i; bv = x; break; }
            }
            if (IsMax ? x > bv : x < bv) { best = i; bv = x; }
          }
          v[r] = q[best];
          ix[r] = best;
        }
      });
    }
  };
};

}  // namespace

// Running sums (products) along the middle dim of [outer, n, inner]: each (outer, inner) lane accumulates in wide_t
// (f64 for floats), rounded once per output; lanes of a row of `inner` advance together, reading memory in order.
template <typename T, bool kProd> struct ScanOf {
  static void run(const Tensor& out, const Tensor& in, bool reverse) {
    const int64_t outer = in.size(0), n = in.size(1), inner = in.size(2);
    const T* x = static_cast<const T*>(in.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    parallel_for(outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(n * inner, 1)), [&](int64_t b, int64_t e) {
      std::vector<wide_t<T>> acc(static_cast<size_t>(inner));
      for (int64_t o = b; o < e; ++o) {
        std::fill(acc.begin(), acc.end(), wide_t<T>(kProd ? 1 : 0));
        for (int64_t s = 0; s < n; ++s) {
          const int64_t j = reverse ? n - 1 - s : s, base = (o * n + j) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            const auto v = static_cast<wide_t<T>>(static_cast<acc_t<T>>(x[base + i]));
            if constexpr (kProd) acc[i] *= v;
            else acc[i] += v;
            y[base + i] = static_cast<T>(static_cast<acc_t<T>>(acc[i]));
          }
        }
      }
    });
  }
};

template <typename T> struct Scan : ScanOf<T, false> {};
template <typename T> struct ScanProd : ScanOf<T, true> {};

MPX_REGISTER_KERNELS(cpu_reduction) {
  using D = DeviceType;
  dispatch::register_types<OpId::sum, Sum, float, double, Half, BFloat16, int64_t>(D::kCPU);
  dispatch::register_types<OpId::var, Var, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::cumsum, Scan, float, double, Half, BFloat16, int64_t>(D::kCPU);
  dispatch::register_types<OpId::cumprod, ScanProd, float, double, Half, BFloat16, int64_t>(D::kCPU);
  dispatch::register_types<OpId::max_dim, ArgReduce<true>::K, float, double, Half, BFloat16, int64_t, int32_t, uint8_t>(D::kCPU);
  dispatch::register_types<OpId::min_dim, ArgReduce<false>::K, float, double, Half, BFloat16, int64_t, int32_t, uint8_t>(D::kCPU);
}

}  // namespace mpx::cpu
