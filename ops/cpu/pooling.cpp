// CPU pooling kernels: max (with argmax indices), average and adaptive average, forward and backward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/pooling.h"

namespace mpx::cpu {
namespace {
using kernels::Pool2dParams;

struct Planes {
  int64_t planes, H, W, Ho, Wo;
};
Planes planes_of(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}
int64_t grain_for(int64_t per_plane) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(per_plane, 1)); }

// Window [h0, h1) x [w0, w1) of output (oh, ow) clipped to the image, and its divisor.
struct Window {
  int64_t h0, h1, w0, w1;
  double div;
};
Window avg_window(const Pool2dParams& p, int64_t H, int64_t W, int64_t oh, int64_t ow) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]), w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
  const int64_t pool = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H);
  w1 = std::min(w1, W);
  const int64_t div = p.count_include_pad ? pool : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, static_cast<double>(std::max<int64_t>(div, 1))};
}

// PyTorch's adaptive bins: [floor(i * in / out), ceil((i + 1) * in / out)).
int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }
// The adaptive bin of output (oh, ow) as a window, divided by its own size.
Window adaptive_window(int64_t H, int64_t W, int64_t Ho, int64_t Wo, int64_t oh, int64_t ow) {
  const int64_t h0 = bin_start(oh, H, Ho), h1 = bin_end(oh, H, Ho), w0 = bin_start(ow, W, Wo), w1 = bin_end(ow, W, Wo);
  return {h0, h1, w0, w1, static_cast<double>((h1 - h0) * (w1 - w0))};
}

// ---- Channels-last ([N, H, W, C] in memory) ----
// The inner loops run along C, contiguous in memory. Each output takes its window in the same
// (h, w) order, and each input gradient its contributions in the same output order, as the
// row-major kernels above: both layouts give the same values bit for bit.
bool nhwc(const Tensor& t) { return t.suggest_memory_format() == MemoryFormat::ChannelsLast; }
struct Nhwc {
  int64_t N, C, H, W, Ho, Wo;
};
Nhwc nhwc_of(const Tensor& in, const Tensor& out) {
  return {in.size(0), in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}
// The backward kernels scatter into a whole image: their tasks are (image, block of channels).
constexpr int64_t kChannelBlock = 64;

// One tap of a max-pool window: the first maximum wins, and a NaN wins and stays (PyTorch
// propagates NaN through max pooling). Selects, not branches, so the loops around it vectorize.
template <typename A, typename Pos> inline void max_tap(A& best, Pos& at, A v, Pos here) {
  const A b0 = best;
  const bool take = (b0 == b0) & ((at < 0) | (v > b0) | (v != v));
  best = take ? v : b0;
  at = take ? here : at;
}

// Positions in the image are tracked as Pos next to the maxima: int32 beside f32 lets the channel
// loop compare and select lanes of one width, so it vectorizes (int64 positions kept it scalar,
// 12x slower than PyTorch's kernel). int64 serves images of 2^31 pixels or more.
template <typename T, typename Pos>
void max_pool_nhwc(const Tensor& y, const Tensor& idx, const Tensor& x, const Pool2dParams& p) {
  using A = acc_t<T>;
  const Nhwc s = nhwc_of(x, y);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  int64_t* ip = static_cast<int64_t*>(idx.raw_data());
  parallel_for(s.N * s.Ho, grain_for(s.Wo * s.C), [&](int64_t b, int64_t e) {
    std::vector<A> best_v(static_cast<size_t>(s.C));
    std::vector<Pos> at_v(static_cast<size_t>(s.C));
    A* const best = best_v.data();
    Pos* const at = at_v.data();
    for (int64_t r = b; r < e; ++r) {
      const int64_t n = r / s.Ho, oh = r % s.Ho;
      for (int64_t ow = 0; ow < s.Wo; ++ow) {
        std::fill(best, best + s.C, -std::numeric_limits<A>::infinity());
        std::fill(at, at + s.C, Pos{-1});
        const int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
        for (int64_t i = 0; i < p.kernel[0]; ++i) {
          const int64_t h = h0 + i * p.dilation[0];
          if (h < 0 || h >= s.H) continue;
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            const int64_t w = w0 + j * p.dilation[1];
            if (w < 0 || w >= s.W) continue;
            const T* xi = xp + ((n * s.H + h) * s.W + w) * s.C;
            const auto here = static_cast<Pos>(h * s.W + w);
            for (int64_t c = 0; c < s.C; ++c) max_tap(best[c], at[c], static_cast<A>(xi[c]), here);
          }
        }
        const int64_t o = ((n * s.Ho + oh) * s.Wo + ow) * s.C;
        for (int64_t c = 0; c < s.C; ++c) {
          yp[o + c] = T(best[c]);
          ip[o + c] = at[c];
        }
      }
    }
  });
}

template <typename T>
void max_pool_backward_nhwc(const Tensor& gx, const Tensor& gy, const Tensor& idx) {
  using A = acc_t<T>;
  const Nhwc s = nhwc_of(gx, gy);
  const T* gp = static_cast<const T*>(gy.raw_data());
  const int64_t* ip = static_cast<const int64_t*>(idx.raw_data());
  T* xp = static_cast<T*>(gx.raw_data());
  const int64_t blocks = (s.C + kChannelBlock - 1) / kChannelBlock;
  parallel_for(s.N * blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<A> acc;
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / blocks, c0 = t % blocks * kChannelBlock, nc = std::min(kChannelBlock, s.C - c0);
      acc.assign(static_cast<size_t>(s.H * s.W * nc), A(0));
      for (int64_t o = 0; o < s.Ho * s.Wo; ++o) {
        const int64_t off = (n * s.Ho * s.Wo + o) * s.C + c0;
        for (int64_t c = 0; c < nc; ++c) {
          const int64_t i = ip[off + c];
          if (i >= 0) acc[i * nc + c] += static_cast<A>(gp[off + c]);
        }
      }
      for (int64_t i = 0; i < s.H * s.W; ++i) {
        T* xi = xp + (n * s.H * s.W + i) * s.C + c0;
        for (int64_t c = 0; c < nc; ++c) xi[c] = T(acc[i * nc + c]);
      }
    }
  });
}

// Average pooling over the windows window(oh, ow) gives: avg_pool2d's, or the adaptive bins.
template <typename T, typename WindowFn>
void avg_pool_nhwc(const Tensor& y, const Tensor& x, WindowFn window) {
  using A = acc_t<T>;
  const Nhwc s = nhwc_of(x, y);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  parallel_for(s.N * s.Ho, grain_for(s.Wo * s.C), [&](int64_t b, int64_t e) {
    std::vector<A> acc(static_cast<size_t>(s.C));
    for (int64_t r = b; r < e; ++r) {
      const int64_t n = r / s.Ho, oh = r % s.Ho;
      for (int64_t ow = 0; ow < s.Wo; ++ow) {
        const Window wd = window(oh, ow);
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t h = wd.h0; h < wd.h1; ++h)
          for (int64_t w = wd.w0; w < wd.w1; ++w) {
            const T* xi = xp + ((n * s.H + h) * s.W + w) * s.C;
            for (int64_t c = 0; c < s.C; ++c) acc[c] += static_cast<A>(xi[c]);
          }
        T* yo = yp + ((n * s.Ho + oh) * s.Wo + ow) * s.C;
        for (int64_t c = 0; c < s.C; ++c) yo[c] = T(static_cast<A>(acc[c] / static_cast<A>(wd.div)));
      }
    }
  });
}

template <typename T, typename WindowFn>
void avg_pool_backward_nhwc(const Tensor& gx, const Tensor& gy, WindowFn window) {
  using A = acc_t<T>;
  const Nhwc s = nhwc_of(gx, gy);
  const T* gp = static_cast<const T*>(gy.raw_data());
  T* xp = static_cast<T*>(gx.raw_data());
  const int64_t blocks = (s.C + kChannelBlock - 1) / kChannelBlock;
  parallel_for(s.N * blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<A> acc, g(static_cast<size_t>(kChannelBlock));
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / blocks, c0 = t % blocks * kChannelBlock, nc = std::min(kChannelBlock, s.C - c0);
      acc.assign(static_cast<size_t>(s.H * s.W * nc), A(0));
      for (int64_t oh = 0; oh < s.Ho; ++oh)
        for (int64_t ow = 0; ow < s.Wo; ++ow) {
          const Window wd = window(oh, ow);
          const T* go = gp + ((n * s.Ho + oh) * s.Wo + ow) * s.C + c0;
          for (int64_t c = 0; c < nc; ++c) g[c] = static_cast<A>(go[c]) / static_cast<A>(wd.div);
          for (int64_t h = wd.h0; h < wd.h1; ++h)
            for (int64_t w = wd.w0; w < wd.w1; ++w) {
              A* a = acc.data() + (h * s.W + w) * nc;
              for (int64_t c = 0; c < nc; ++c) a[c] += g[c];
            }
        }
      for (int64_t i = 0; i < s.H * s.W; ++i) {
        T* xi = xp + (n * s.H * s.W + i) * s.C + c0;
        for (int64_t c = 0; c < nc; ++c) xi[c] = T(acc[i * nc + c]);
      }
    }
  });
}

// ---- The kernels: channels-last inputs take the kernels above, all else the row-major ones ----
// Row-major: an output row is computed tap by tap for all its outputs at once. Every output still
// meets its taps in (i, j) order, so the first maximum and the first NaN win as before, and the
// loop along the row has no branch (max_tap; positions as Pos, see above).
template <typename T, typename Pos>
void max_pool_rows(const Tensor& y, const Tensor& idx, const Tensor& x, const Pool2dParams& p) {
  using A = acc_t<T>;
  const Planes s = planes_of(x, y);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  int64_t* ip = static_cast<int64_t*>(idx.raw_data());
  const int64_t sw = p.stride[1];
  parallel_for(s.planes * s.Ho, grain_for(s.Wo * p.kernel[0] * p.kernel[1]), [&](int64_t b, int64_t e) {
    std::vector<A> best_v(static_cast<size_t>(s.Wo));
    std::vector<Pos> at_v(static_cast<size_t>(s.Wo));
    A* const best = best_v.data();
    Pos* const at = at_v.data();
    for (int64_t r = b; r < e; ++r) {
      const int64_t pl = r / s.Ho, oh = r % s.Ho;
      std::fill(best, best + s.Wo, -std::numeric_limits<A>::infinity());
      std::fill(at, at + s.Wo, Pos{-1});
      for (int64_t i = 0; i < p.kernel[0]; ++i) {
        const int64_t h = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
        if (h < 0 || h >= s.H) continue;
        const T* row = xp + (pl * s.H + h) * s.W;
        for (int64_t j = 0; j < p.kernel[1]; ++j) {
          // Output ow reads column ow * sw + off: the outputs [lo, hi) read inside the image.
          const int64_t off = j * p.dilation[1] - p.padding[1];
          const int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
          const int64_t hi = s.W - 1 - off < 0 ? 0 : std::min(s.Wo, (s.W - 1 - off) / sw + 1);
          for (int64_t ow = lo; ow < hi; ++ow) {
            const int64_t w = ow * sw + off;
            max_tap(best[ow], at[ow], static_cast<A>(row[w]), static_cast<Pos>(h * s.W + w));
          }
        }
      }
      const int64_t o = (pl * s.Ho + oh) * s.Wo;
      for (int64_t ow = 0; ow < s.Wo; ++ow) {
        yp[o + ow] = T(best[ow]);
        ip[o + ow] = at[ow];
      }
    }
  });
}

// The 2x2, stride-2 window without padding (VGG's, AlexNet's, most CNNs' downsampling). The
// general kernel's per-row set-up dominated on the short rows of small feature maps, and as scalar
// code the taps' data-dependent choices mispredict about half the time (20 ns an output); GCC does
// not vectorize the NaN-aware choice, so it is written in 8-lane vector types. The window is taken
// as two pairs, each pair's first maximum (or first NaN), then the better of the two, the top pair
// on a tie: the same choice as max_tap's taps in (i, j) order. won[] is the winning tap, 0..3.
template <typename A>
inline bool beats(A v, A best) {
  return (v > best) | ((v != v) & (best == best));
}
template <typename A>
inline void pool_2x2_scalar(const A* r0, const A* r1, A* y, int32_t* won, int64_t from, int64_t to) {
  for (int64_t ow = from; ow < to; ++ow) {
    const A a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
    const bool tb = beats(b, a), td = beats(d, c);
    const A up = select_bits(tb, b, a), down = select_bits(td, d, c);
    const bool tf = beats(down, up);
    y[ow] = select_bits(tf, down, up);
    const int32_t f = -static_cast<int32_t>(tf);
    won[ow] = (f & (2 + td)) | (~f & static_cast<int32_t>(tb));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
using f8 = float __attribute__((vector_size(32)));
using i8 = int32_t __attribute__((vector_size(32)));
inline i8 beats8(f8 v, f8 best) { return (v > best) | ((v != v) & (best == best)); }
inline f8 pick8(i8 m, f8 a, f8 b) { return reinterpret_cast<f8>((reinterpret_cast<i8>(a) & m) | (reinterpret_cast<i8>(b) & ~m)); }
inline void pool_2x2_row(const float* r0, const float* r1, float* y, int32_t* won, int64_t Wo) {
  const i8 even = {0, 2, 4, 6, 8, 10, 12, 14}, odd = even + 1;
  int64_t ow = 0;
  for (; ow + 8 <= Wo; ow += 8) {
    f8 t[4];
    std::memcpy(&t[0], r0 + 2 * ow, 32), std::memcpy(&t[1], r0 + 2 * ow + 8, 32);
    std::memcpy(&t[2], r1 + 2 * ow, 32), std::memcpy(&t[3], r1 + 2 * ow + 8, 32);
    const f8 a = __builtin_shuffle(t[0], t[1], even), b = __builtin_shuffle(t[0], t[1], odd);
    const f8 c = __builtin_shuffle(t[2], t[3], even), d = __builtin_shuffle(t[2], t[3], odd);
    const i8 tb = beats8(b, a), td = beats8(d, c);
    const f8 up = pick8(tb, b, a), down = pick8(td, d, c);
    const i8 tf = beats8(down, up);
    const f8 out = pick8(tf, down, up);
    const i8 code = (tf & (2 + (td & 1))) | (~tf & (tb & 1));
    std::memcpy(y + ow, &out, 32), std::memcpy(won + ow, &code, 32);
  }
  pool_2x2_scalar(r0, r1, y, won, ow, Wo);
}
#else
inline void pool_2x2_row(const float* r0, const float* r1, float* y, int32_t* won, int64_t Wo) {
  pool_2x2_scalar(r0, r1, y, won, 0, Wo);
}
#endif
inline void pool_2x2_row(const double* r0, const double* r1, double* y, int32_t* won, int64_t Wo) {
  pool_2x2_scalar(r0, r1, y, won, 0, Wo);
}

template <typename T>
void max_pool_2x2(const Tensor& y, const Tensor& idx, const Tensor& x) {
  using A = acc_t<T>;
  const Planes s = planes_of(x, y);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  int64_t* ip = static_cast<int64_t*>(idx.raw_data());
  parallel_for(s.planes * s.Ho, grain_for(s.Wo * 4), [&](int64_t b, int64_t e) {
    const int64_t H = s.H, W = s.W, Ho = s.Ho, Wo = s.Wo;  // locals: stores cannot alias them
    // f16/bf16 rows are widened to f32 first (exactly), and the maxima narrowed back (exactly).
    constexpr bool wide = std::is_same_v<T, A>;
    std::vector<A> buf(wide ? 0 : static_cast<size_t>(4 * Wo + Wo));
    std::vector<int32_t> won_v(static_cast<size_t>(Wo));
    int32_t* const won = won_v.data();
    // Plane and output row stepped along, not divided out per row (a 64-bit division a row cost
    // as much as the row's maxima on 7-wide rows).
    int64_t pl = b / Ho, oh = b % Ho;
    for (int64_t r = b; r < e; ++r, oh = oh + 1 == Ho ? (++pl, 0) : oh + 1) {
      const int64_t top = 2 * oh * W;
      const T* r0 = xp + pl * H * W + top;
      T* yo = yp + r * Wo;
      if constexpr (wide) {
        pool_2x2_row(r0, r0 + W, yo, won, Wo);
      } else {
        A* w0 = buf.data();
        for (int64_t i = 0; i < 2 * Wo; ++i) w0[i] = static_cast<A>(r0[i]), w0[2 * Wo + i] = static_cast<A>(r0[W + i]);
        pool_2x2_row(w0, w0 + 2 * Wo, w0 + 4 * Wo, won, Wo);
        for (int64_t i = 0; i < Wo; ++i) yo[i] = T(w0[4 * Wo + i]);
      }
      int64_t* io = ip + r * Wo;
      for (int64_t ow = 0; ow < Wo; ++ow) io[ow] = top + 2 * ow + (won[ow] >> 1) * W + (won[ow] & 1);
    }
  });
}

bool is_2x2_stride_2(const Pool2dParams& p) {
  return p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 && p.stride[1] == 2 && p.padding[0] == 0 &&
         p.padding[1] == 0 && p.dilation[0] == 1 && p.dilation[1] == 1;
}

template <typename T> struct MaxPool {
  static void run(const Tensor& y, const Tensor& idx, const Tensor& x, const Pool2dParams& p) {
    const bool small = x.size(2) * x.size(3) < (int64_t{1} << 31);
    if (nhwc(x)) small ? max_pool_nhwc<T, int32_t>(y, idx, x, p) : max_pool_nhwc<T, int64_t>(y, idx, x, p);
    else if (is_2x2_stride_2(p) && x.size(2) >= 2 * y.size(2) && x.size(3) >= 2 * y.size(3)) max_pool_2x2<T>(y, idx, x);
    else small ? max_pool_rows<T, int32_t>(y, idx, x, p) : max_pool_rows<T, int64_t>(y, idx, x, p);
  }
};

template <typename T> struct MaxPoolBackward {
  static void run(const Tensor& gx, const Tensor& gy, const Tensor& idx, const Pool2dParams&) {
    if (nhwc(gx)) return max_pool_backward_nhwc<T>(gx, gy, idx);
    using A = acc_t<T>;
    const Planes s = planes_of(gx, gy);
    const T* gp = static_cast<const T*>(gy.raw_data());
    const int64_t* ip = static_cast<const int64_t*>(idx.raw_data());
    T* xp = static_cast<T*>(gx.raw_data());
    parallel_for(s.planes, grain_for(s.H * s.W), [&](int64_t b, int64_t e) {
      std::vector<A> acc(static_cast<size_t>(s.H * s.W));
      for (int64_t pl = b; pl < e; ++pl) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t o = 0; o < s.Ho * s.Wo; ++o) {
          const int64_t i = ip[pl * s.Ho * s.Wo + o];
          if (i >= 0) acc[i] += static_cast<A>(gp[pl * s.Ho * s.Wo + o]);
        }
        T* xi = xp + pl * s.H * s.W;
        for (int64_t i = 0; i < s.H * s.W; ++i) xi[i] = T(acc[i]);
      }
    });
  }
};

// Row-major average pooling over the windows window(oh, ow) gives, one plane per task.
template <typename T, typename WindowFn>
void avg_pool_planes(const Tensor& y, const Tensor& x, WindowFn window) {
  using A = acc_t<T>;
  const Planes s = planes_of(x, y);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  parallel_for(s.planes, grain_for(s.H * s.W), [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      const T* xi = xp + pl * s.H * s.W;
      for (int64_t oh = 0; oh < s.Ho; ++oh)
        for (int64_t ow = 0; ow < s.Wo; ++ow) {
          const Window wd = window(oh, ow);
          A acc = 0;
          for (int64_t h = wd.h0; h < wd.h1; ++h)
            for (int64_t w = wd.w0; w < wd.w1; ++w) acc += static_cast<A>(xi[h * s.W + w]);
          yp[pl * s.Ho * s.Wo + oh * s.Wo + ow] = T(static_cast<A>(acc / static_cast<A>(wd.div)));
        }
    }
  });
}

template <typename T, typename WindowFn>
void avg_pool_backward_planes(const Tensor& gx, const Tensor& gy, WindowFn window) {
  using A = acc_t<T>;
  const Planes s = planes_of(gx, gy);
  const T* gp = static_cast<const T*>(gy.raw_data());
  T* xp = static_cast<T*>(gx.raw_data());
  parallel_for(s.planes, grain_for(s.H * s.W), [&](int64_t b, int64_t e) {
    std::vector<A> acc(static_cast<size_t>(s.H * s.W));
    for (int64_t pl = b; pl < e; ++pl) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t oh = 0; oh < s.Ho; ++oh)
        for (int64_t ow = 0; ow < s.Wo; ++ow) {
          const Window wd = window(oh, ow);
          const A g = static_cast<A>(gp[pl * s.Ho * s.Wo + oh * s.Wo + ow]) / static_cast<A>(wd.div);
          for (int64_t h = wd.h0; h < wd.h1; ++h)
            for (int64_t w = wd.w0; w < wd.w1; ++w) acc[h * s.W + w] += g;
        }
      T* xi = xp + pl * s.H * s.W;
      for (int64_t i = 0; i < s.H * s.W; ++i) xi[i] = T(acc[i]);
    }
  });
}

template <typename T> struct AvgPool {
  static void run(const Tensor& y, const Tensor& x, const Pool2dParams& p) {
    auto window = [&p, H = x.size(2), W = x.size(3)](int64_t oh, int64_t ow) { return avg_window(p, H, W, oh, ow); };
    nhwc(x) ? avg_pool_nhwc<T>(y, x, window) : avg_pool_planes<T>(y, x, window);
  }
};
template <typename T> struct AvgPoolBackward {
  static void run(const Tensor& gx, const Tensor& gy, const Pool2dParams& p) {
    auto window = [&p, H = gx.size(2), W = gx.size(3)](int64_t oh, int64_t ow) { return avg_window(p, H, W, oh, ow); };
    nhwc(gx) ? avg_pool_backward_nhwc<T>(gx, gy, window) : avg_pool_backward_planes<T>(gx, gy, window);
  }
};
template <typename T> struct AdaptiveAvgPool {
  static void run(const Tensor& y, const Tensor& x) {
    auto window = [H = x.size(2), W = x.size(3), Ho = y.size(2), Wo = y.size(3)](int64_t oh, int64_t ow) {
      return adaptive_window(H, W, Ho, Wo, oh, ow);
    };
    nhwc(x) ? avg_pool_nhwc<T>(y, x, window) : avg_pool_planes<T>(y, x, window);
  }
};
template <typename T> struct AdaptiveAvgPoolBackward {
  static void run(const Tensor& gx, const Tensor& gy) {
    auto window = [H = gx.size(2), W = gx.size(3), Ho = gy.size(2), Wo = gy.size(3)](int64_t oh, int64_t ow) {
      return adaptive_window(H, W, Ho, Wo, oh, ow);
    };
    nhwc(gx) ? avg_pool_backward_nhwc<T>(gx, gy, window) : avg_pool_backward_planes<T>(gx, gy, window);
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_pooling) {
  constexpr auto cpu = DeviceType::kCPU;
  dispatch::register_types<OpId::max_pool2d, MaxPool, float, double, Half, BFloat16>(cpu);
  dispatch::register_types<OpId::max_pool2d_backward, MaxPoolBackward, float, double, Half, BFloat16>(cpu);
  dispatch::register_types<OpId::avg_pool2d, AvgPool, float, double, Half, BFloat16>(cpu);
  dispatch::register_types<OpId::avg_pool2d_backward, AvgPoolBackward, float, double, Half, BFloat16>(cpu);
  dispatch::register_types<OpId::adaptive_avg_pool2d, AdaptiveAvgPool, float, double, Half, BFloat16>(cpu);
  dispatch::register_types<OpId::adaptive_avg_pool2d_backward, AdaptiveAvgPoolBackward, float, double, Half, BFloat16>(cpu);
}

}  // namespace mpx::cpu
