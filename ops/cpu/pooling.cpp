// CPU pooling kernels: max (with argmax indices), average and adaptive average, forward and backward.
#include <cmath>
#include <limits>

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

template <typename T> struct MaxPool {
  static void run(const Tensor& y, const Tensor& idx, const Tensor& x, const Pool2dParams& p) {
    using A = acc_t<T>;
    const Planes s = planes_of(x, y);
    const T* xp = static_cast<const T*>(x.raw_data());
    T* yp = static_cast<T*>(y.raw_data());
    int64_t* ip = static_cast<int64_t*>(idx.raw_data());
    parallel_for(s.planes, grain_for(s.H * s.W), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        const T* xi = xp + pl * s.H * s.W;
        for (int64_t oh = 0; oh < s.Ho; ++oh)
          for (int64_t ow = 0; ow < s.Wo; ++ow) {
            const int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
            A best = -std::numeric_limits<A>::infinity();
            int64_t bi = -1;
            // NaN wins and stays (PyTorch propagates NaN through max pooling).
            for (int64_t i = 0; i < p.kernel[0] && !std::isnan(best); ++i) {
              const int64_t h = h0 + i * p.dilation[0];
              if (h < 0 || h >= s.H) continue;
              for (int64_t j = 0; j < p.kernel[1]; ++j) {
                const int64_t w = w0 + j * p.dilation[1];
                if (w < 0 || w >= s.W) continue;
                const A v = static_cast<A>(xi[h * s.W + w]);
                if (bi < 0 || v > best || std::isnan(v)) {
                  best = v;
                  bi = h * s.W + w;
                  if (std::isnan(v)) break;
                }
              }
            }
            const int64_t o = pl * s.Ho * s.Wo + oh * s.Wo + ow;
            yp[o] = T(best);
            ip[o] = bi;
          }
      }
    });
  }
};

template <typename T> struct MaxPoolBackward {
  static void run(const Tensor& gx, const Tensor& gy, const Tensor& idx, const Pool2dParams&) {
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

template <typename T> struct AvgPool {
  static void run(const Tensor& y, const Tensor& x, const Pool2dParams& p) {
    using A = acc_t<T>;
    const Planes s = planes_of(x, y);
    const T* xp = static_cast<const T*>(x.raw_data());
    T* yp = static_cast<T*>(y.raw_data());
    parallel_for(s.planes, grain_for(s.H * s.W), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        const T* xi = xp + pl * s.H * s.W;
        for (int64_t oh = 0; oh < s.Ho; ++oh)
          for (int64_t ow = 0; ow < s.Wo; ++ow) {
            const Window wd = avg_window(p, s.H, s.W, oh, ow);
            A acc = 0;
            for (int64_t h = wd.h0; h < wd.h1; ++h)
              for (int64_t w = wd.w0; w < wd.w1; ++w) acc += static_cast<A>(xi[h * s.W + w]);
            yp[pl * s.Ho * s.Wo + oh * s.Wo + ow] = T(static_cast<A>(acc / static_cast<A>(wd.div)));
          }
      }
    });
  }
};

template <typename T> struct AvgPoolBackward {
  static void run(const Tensor& gx, const Tensor& gy, const Pool2dParams& p) {
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
            const Window wd = avg_window(p, s.H, s.W, oh, ow);
            const A g = static_cast<A>(gp[pl * s.Ho * s.Wo + oh * s.Wo + ow]) / static_cast<A>(wd.div);
            for (int64_t h = wd.h0; h < wd.h1; ++h)
              for (int64_t w = wd.w0; w < wd.w1; ++w) acc[h * s.W + w] += g;
          }
        T* xi = xp + pl * s.H * s.W;
        for (int64_t i = 0; i < s.H * s.W; ++i) xi[i] = T(acc[i]);
      }
    });
  }
};

// PyTorch's adaptive bins: [floor(i * in / out), ceil((i + 1) * in / out)).
int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

template <typename T> struct AdaptiveAvgPool {
  static void run(const Tensor& y, const Tensor& x) {
    using A = acc_t<T>;
    const Planes s = planes_of(x, y);
    const T* xp = static_cast<const T*>(x.raw_data());
    T* yp = static_cast<T*>(y.raw_data());
    parallel_for(s.planes, grain_for(s.H * s.W), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        const T* xi = xp + pl * s.H * s.W;
        for (int64_t oh = 0; oh < s.Ho; ++oh) {
          const int64_t h0 = bin_start(oh, s.H, s.Ho), h1 = bin_end(oh, s.H, s.Ho);
          for (int64_t ow = 0; ow < s.Wo; ++ow) {
            const int64_t w0 = bin_start(ow, s.W, s.Wo), w1 = bin_end(ow, s.W, s.Wo);
            A acc = 0;
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) acc += static_cast<A>(xi[h * s.W + w]);
            yp[pl * s.Ho * s.Wo + oh * s.Wo + ow] = T(static_cast<A>(acc / static_cast<A>((h1 - h0) * (w1 - w0))));
          }
        }
      }
    });
  }
};

template <typename T> struct AdaptiveAvgPoolBackward {
  static void run(const Tensor& gx, const Tensor& gy) {
    using A = acc_t<T>;
    const Planes s = planes_of(gx, gy);
    const T* gp = static_cast<const T*>(gy.raw_data());
    T* xp = static_cast<T*>(gx.raw_data());
    parallel_for(s.planes, grain_for(s.H * s.W), [&](int64_t b, int64_t e) {
      std::vector<A> acc(static_cast<size_t>(s.H * s.W));
      for (int64_t pl = b; pl < e; ++pl) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t oh = 0; oh < s.Ho; ++oh) {
          const int64_t h0 = bin_start(oh, s.H, s.Ho), h1 = bin_end(oh, s.H, s.Ho);
          for (int64_t ow = 0; ow < s.Wo; ++ow) {
            const int64_t w0 = bin_start(ow, s.W, s.Wo), w1 = bin_end(ow, s.W, s.Wo);
            const A g = static_cast<A>(gp[pl * s.Ho * s.Wo + oh * s.Wo + ow]) / static_cast<A>((h1 - h0) * (w1 - w0));
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) acc[h * s.W + w] += g;
          }
        }
        T* xi = xp + pl * s.H * s.W;
        for (int64_t i = 0; i < s.H * s.W; ++i) xi[i] = T(acc[i]);
      }
    });
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
