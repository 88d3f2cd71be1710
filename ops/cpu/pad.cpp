// CPU kernels of pad (ops/pad.h): the gather as row copies of the W map's runs, and its adjoint as per-input-row sums.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/pad.h"
#include "ops/pad_map.h"

namespace mpx::cpu {
namespace {

padmap::Axis axis(const Tensor& map, int64_t n_in, int64_t n_out) { return {map.data_ptr<int64_t>(), n_in, n_out}; }

// W's map as runs: outputs [out, out + len) read inputs [src, src + len), or the fill value where src is -1. A
// row is then a few memcpy/fill calls (one long run for the interior) whatever the mode.
struct Run {
  int64_t out, src, len;
};
std::vector<Run> runs_of(const padmap::Axis& w) {
  std::vector<Run> runs;
  for (int64_t j = 0; j < w.n_out; ++j) {
    const int64_t s = w.src(j);
    if (!runs.empty()) {
      Run& r = runs.back();
      if ((s < 0 && r.src < 0) || (s >= 0 && r.src >= 0 && s == r.src + r.len)) {
        ++r.len;
        continue;
      }
    }
    runs.push_back({j, s, 1});
  }
  return runs;
}

template <typename T> T fill_value(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0.0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <typename T>
struct Pad {
  static void run(const Tensor& out, const Tensor& x, const Tensor& md, const Tensor& mh, const Tensor& mw, double v) {
    const int64_t outer = out.size(0), di = x.size(1), hi = x.size(2), wi = x.size(3);
    const padmap::Axis d = axis(md, di, out.size(1)), h = axis(mh, hi, out.size(2)), w = axis(mw, wi, out.size(3));
    const std::vector<Run> runs = runs_of(w);
    const T val = fill_value<T>(v);
    const T* xp = static_cast<const T*>(x.raw_data());
    T* op = static_cast<T*>(out.raw_data());
    const int64_t rows = outer * d.n_out * h.n_out, wo = w.n_out;
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(wo, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t hh = r % h.n_out, dd = (r / h.n_out) % d.n_out, o = r / (h.n_out * d.n_out);
        T* dst = op + r * wo;
        const int64_t sd = d.src(dd), sh = h.src(hh);
        if (sd < 0 || sh < 0) {
          fill_bits(dst, wo, val);
          continue;
        }
        const T* src = xp + ((o * di + sd) * hi + sh) * wi;
        for (const Run& run : runs) {
          if (run.src < 0) fill_bits(dst + run.out, run.len, val);
          else std::memcpy(dst + run.out, src + run.src, static_cast<size_t>(run.len) * sizeof(T));
        }
      }
    });
  }
};

// gx's row (o, i, k) sums the gy rows that read it (D's readers of i, then H's of k, ascending), each through W's
// adjoint, in A (f32 for f16/bf16), rounded once: every element's terms in the order the CUDA kernel adds them. A row
// read by one gy row (all but the few D/H edge rows) is that row's runs copied, then the W positions read more than
// once are summed over their readers.
template <typename T>
struct PadBackward {
  using A = acc_t<T>;
  static void run(const Tensor& gx, const Tensor& gy, const Tensor& md, const Tensor& mh, const Tensor& mw, double) {
    const int64_t outer = gx.size(0), di = gx.size(1), hi = gx.size(2), wi = gx.size(3);
    const padmap::Axis d = axis(md, di, gy.size(1)), h = axis(mh, hi, gy.size(2)), w = axis(mw, wi, gy.size(3));
    std::vector<Run> runs = runs_of(w);
    runs.erase(std::remove_if(runs.begin(), runs.end(), [](const Run& r) { return r.src < 0; }), runs.end());
    std::vector<int64_t> shared;  // W positions with more than one reader
    bool all_read = true;
    for (int64_t l = 0; l < wi; ++l) {
      if (w.end(l) - w.begin(l) > 1) shared.push_back(l);
      all_read = all_read && w.end(l) > w.begin(l);
    }
    const T* gp = static_cast<const T*>(gy.raw_data());
    T* xp = static_cast<T*>(gx.raw_data());
    const int64_t rows = outer * di * hi, wo = w.n_out;
    const auto gy_row = [&](int64_t o, int64_t a, int64_t c) {
      return gp + ((o * d.n_out + d.reader(a)) * h.n_out + h.reader(c)) * wo;
    };
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(wi, 1)), [&](int64_t b, int64_t e) {
      std::vector<A> acc;
      for (int64_t r = b; r < e; ++r) {
        const int64_t k = r % hi, i = (r / hi) % di, o = r / (hi * di);
        T* dst = xp + r * wi;
        const int64_t nd = d.end(i) - d.begin(i), nh = h.end(k) - h.begin(k);
        if (nd == 0 || nh == 0) {
          fill_bits(dst, wi, T(0));
          continue;
        }
        if (nd == 1 && nh == 1) {
          const T* src = gy_row(o, d.begin(i), h.begin(k));
          if (!all_read) fill_bits(dst, wi, T(0));
          for (const Run& run : runs) std::memcpy(dst + run.src, src + run.out, static_cast<size_t>(run.len) * sizeof(T));
          for (const int64_t l : shared) {
            A s = A(0);
            for (int64_t q = w.begin(l); q < w.end(l); ++q) s += static_cast<A>(src[w.reader(q)]);
            dst[l] = static_cast<T>(s);
          }
          continue;
        }
        acc.assign(static_cast<size_t>(wi), A(0));
        for (int64_t a = d.begin(i); a < d.end(i); ++a) {
          for (int64_t c = h.begin(k); c < h.end(k); ++c) {
            const T* src = gy_row(o, a, c);
            for (const Run& run : runs) {
              A* to = acc.data() + run.src;
              const T* from = src + run.out;
              for (int64_t t = 0; t < run.len; ++t) to[t] += static_cast<A>(from[t]);
            }
          }
        }
        for (int64_t t = 0; t < wi; ++t) dst[t] = static_cast<T>(acc[static_cast<size_t>(t)]);
      }
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_pad) {
  dispatch::register_types<OpId::pad, Pad, float, double, Half, BFloat16, int64_t, int32_t, uint8_t, bool>(
      DeviceType::kCPU);
  dispatch::register_types<OpId::pad_backward, PadBackward, float, double, Half, BFloat16>(DeviceType::kCPU);
}

}  // namespace mpx::cpu
