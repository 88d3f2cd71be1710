// CPU kernels of interpolate's separable resampling over the last two dims and its adjoint, in one pass each.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/resize.h"

namespace mpx::cpu {
namespace {

// One axis of the map: output position j reads input positions i[2j] (weight w[2j]) and i[2j + 1] (w[2j + 1]);
// nearest (no weights) reads i[2j] alone, so inf and NaN copy through as they are; identity: the axis is kept.
template <typename A>
struct AxisMap {
  const int64_t* i = nullptr;
  const A* w = nullptr;
  int64_t n_in = 0, n_out = 0;
  bool identity() const { return i == nullptr; }
  bool nearest() const { return w == nullptr; }
};
template <typename A>
AxisMap<A> axis(const Tensor& idx, const Tensor& w, int64_t n_in, int64_t n_out) {
  AxisMap<A> m{nullptr, nullptr, n_in, n_out};
  if (idx.defined()) m.i = idx.data_ptr<int64_t>();
  if (w.defined()) m.w = static_cast<const A*>(w.raw_data());
  return m;
}

// dst[m] = the W-resampled row src (length wm.n_in), in A; 32-bit copies of the positions let the compiler use
// 16-lane gathers.
template <typename T, typename A>
void resample_row(A* dst, const T* src, const AxisMap<A>& wm, const int32_t* i32) {
  const int64_t n = wm.n_out;
  if (wm.identity()) {
    for (int64_t m = 0; m < n; ++m) dst[m] = static_cast<A>(src[m]);
  } else if (wm.nearest()) {
    for (int64_t m = 0; m < n; ++m) dst[m] = static_cast<A>(src[i32[2 * m]]);
  } else {
    const A* w = wm.w;
    for (int64_t m = 0; m < n; ++m)
      dst[m] = w[2 * m] * static_cast<A>(src[i32[2 * m]]) + w[2 * m + 1] * static_cast<A>(src[i32[2 * m + 1]]);
  }
}

std::vector<int32_t> narrow_positions(const int64_t* i, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n > 0 ? 2 * n : 0));
  if (i) for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<int32_t>(i[k]);
  return v;
}

// out[o] = H(W(x[o])): each input row is resampled along W once (kept in a two-row cache, as the rows an output row
// reads never decrease), then output rows blend two of them, in PyTorch's order of operations. Nearest output rows
// that read the row their predecessor read are copies of it.
template <typename T>
struct Resample {
  using A = acc_t<T>;
  static void run(const Tensor& out, const Tensor& x, const Tensor& ih, const Tensor& wh, const Tensor& iw,
                  const Tensor& ww) {
    const int64_t outer = out.size(0), ho = out.size(1), wo = out.size(2), hi = x.size(1), wi = x.size(2);
    const AxisMap<A> hm = axis<A>(ih, wh, hi, ho), wm = axis<A>(iw, ww, wi, wo);
    const std::vector<int32_t> i32 = narrow_positions(wm.i, wo);
    const T* xp = static_cast<const T*>(x.raw_data());
    T* op = static_cast<T*>(out.raw_data());
    // Rows read in place: f32/f64 rows whose W axis is kept need no cache.
    constexpr bool kSameType = std::is_same_v<T, A>;
    parallel_for(outer * ho, std::max<int64_t>(1, kGrain / std::max<int64_t>(wo, 1)), [&](int64_t b, int64_t e) {
      std::vector<A> cache(static_cast<size_t>(2 * wo));
      int64_t key[2] = {-1, -1};
      int slot_next = 0;
      auto row = [&](int64_t o, int64_t k) -> const A* {
        const T* src = xp + (o * hi + k) * wi;
        if constexpr (kSameType) {
          if (wm.identity()) return src;
        }
        const int64_t id = o * hi + k;
        for (int s = 0; s < 2; ++s)
          if (key[s] == id) return cache.data() + s * wo;
        const int s = slot_next;
        slot_next ^= 1;
        key[s] = id;
        resample_row(cache.data() + s * wo, src, wm, i32.data());
        return cache.data() + s * wo;
      };
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / ho, j = r % ho;
        T* dst = op + r * wo;
        if (hm.nearest()) {
          const int64_t k = hm.identity() ? j : hm.i[2 * j];
          if (r > b && j > 0 && !hm.identity() && hm.i[2 * j - 2] == k) {
            std::memcpy(dst, dst - wo, static_cast<size_t>(wo) * sizeof(T));
            continue;
          }
          const A* s = row(o, k);
          for (int64_t m = 0; m < wo; ++m) dst[m] = static_cast<T>(s[m]);
          continue;
        }
        const A* ra = row(o, hm.i[2 * j]);
        const A* rc = row(o, hm.i[2 * j + 1]);
        const A wa = hm.w[2 * j], wc = hm.w[2 * j + 1];
        for (int64_t m = 0; m < wo; ++m) dst[m] = static_cast<T>(wa * ra[m] + wc * rc[m]);
      }
    });
  }
};

// The adjoint, gx[o] = W^T(H^T(g[o])): the output rows are added into per-input-row sums (at most two open at a
// time: rows never decrease), and each finished sum goes through W's adjoint once into its gx row, which is
// written whole; rows no output reads are zero. One task per outer slice, so no two tasks touch a row.
template <typename T>
struct ResampleBackward {
  using A = acc_t<T>;
  static void run(const Tensor& gx, const Tensor& g, const Tensor& ih, const Tensor& wh, const Tensor& iw,
                  const Tensor& ww) {
    const int64_t outer = g.size(0), ho = g.size(1), wo = g.size(2), hi = gx.size(1), wi = gx.size(2);
    const AxisMap<A> hm = axis<A>(ih, wh, hi, ho), wm = axis<A>(iw, ww, wi, wo);
    const T* gp = static_cast<const T*>(g.raw_data());
    T* xp = static_cast<T*>(gx.raw_data());
    parallel_for(outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(ho * wo, 1)), [&](int64_t b, int64_t e) {
      std::vector<A> sums(static_cast<size_t>(2 * wo)), wrow(static_cast<size_t>(wi));
      for (int64_t o = b; o < e; ++o) {
        T* base = xp + o * hi * wi;
        const T* go = gp + o * ho * wo;
        int64_t key[2] = {-1, -1}, next_row = 0;
        auto flush = [&](int s) {
          const int64_t k = key[s];
          fill_bits(base + next_row * wi, (k - next_row) * wi, T(0));
          const A* src = sums.data() + s * wo;
          T* dst = base + k * wi;
          if (wm.identity()) {
            for (int64_t l = 0; l < wi; ++l) dst[l] = static_cast<T>(src[l]);
          } else {
            std::fill(wrow.begin(), wrow.end(), A(0));
            for (int64_t m = 0; m < wo; ++m) {
              if (wm.nearest()) {
                wrow[static_cast<size_t>(wm.i[2 * m])] += src[m];
              } else {
                wrow[static_cast<size_t>(wm.i[2 * m])] += wm.w[2 * m] * src[m];
                wrow[static_cast<size_t>(wm.i[2 * m + 1])] += wm.w[2 * m + 1] * src[m];
              }
            }
            for (int64_t l = 0; l < wi; ++l) dst[l] = static_cast<T>(wrow[static_cast<size_t>(l)]);
          }
          next_row = k + 1;
          key[s] = -1;
        };
        // Adds w * g row j into the open sum of input row k (opening it, in the free slot, if need be).
        auto add = [&](int64_t k, const T* grow, const A* w) {
          int s = key[0] == k ? 0 : key[1] == k ? 1 : -1;
          if (s < 0) {
            s = key[0] < 0 ? 0 : 1;
            key[s] = k;
            A* acc = sums.data() + s * wo;
            if (w) for (int64_t m = 0; m < wo; ++m) acc[m] = *w * static_cast<A>(grow[m]);
            else for (int64_t m = 0; m < wo; ++m) acc[m] = static_cast<A>(grow[m]);
            return;
          }
          A* acc = sums.data() + s * wo;
          if (w) for (int64_t m = 0; m < wo; ++m) acc[m] += *w * static_cast<A>(grow[m]);
          else for (int64_t m = 0; m < wo; ++m) acc[m] += static_cast<A>(grow[m]);
        };
        for (int64_t j = 0; j < ho; ++j) {
          const int64_t a = hm.identity() ? j : hm.i[2 * j];
          // Sums of rows below a are complete: flush them in row order.
          const int lo = key[0] >= 0 && (key[1] < 0 || key[0] < key[1]) ? 0 : 1;
          for (const int s : {lo, 1 - lo})
            if (key[s] >= 0 && key[s] < a) flush(s);
          const T* grow = go + j * wo;
          if (hm.nearest()) {
            add(a, grow, nullptr);
          } else {
            add(a, grow, hm.w + 2 * j);
            add(hm.i[2 * j + 1], grow, hm.w + 2 * j + 1);
          }
        }
        const int lo = key[0] >= 0 && (key[1] < 0 || key[0] < key[1]) ? 0 : 1;
        for (const int s : {lo, 1 - lo})
          if (key[s] >= 0) flush(s);
        fill_bits(base + next_row * wi, (hi - next_row) * wi, T(0));
      }
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_resize) {
  dispatch::register_types<OpId::resample, Resample, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::resample_backward, ResampleBackward, float, double, Half, BFloat16>(DeviceType::kCPU);
}

}  // namespace mpx::cpu
