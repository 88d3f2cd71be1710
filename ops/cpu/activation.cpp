// CPU kernels for softmax / log_softmax (forward and fused backward) and dropout.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/random.h"
#include "ops/activation.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/row_sums.h"
#include "ops/dispatch.h"
#include "ops/formulas.h"

namespace mpx::cpu {
namespace {

// One lane is the n elements at base + k * inner; lanes are independent, so the
// result does not depend on how they are split across threads.
template <typename T> struct Softmax {
  static void run(const Tensor& out, const Tensor& in, int64_t outer, int64_t n, int64_t inner, bool log) {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    const int64_t lanes = outer * inner;
    parallel_for(lanes, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t end) {
      std::vector<A> buf(n), e(n);
      for (int64_t l = b; l < end; ++l) {
        const int64_t base = (l / inner) * n * inner + (l % inner);
        if (inner == 1)
          for (int64_t k = 0; k < n; ++k) buf[k] = static_cast<A>(x[base + k]);
        else
          for (int64_t k = 0; k < n; ++k) buf[k] = static_cast<A>(x[base + k * inner]);
        A shift;
        const A s = row_exp_sum(buf.data(), n, e.data(), shift);
        T* yl = y + base;
        if (log) {
          const A ls = std::log(s);
          if (inner == 1)
            for (int64_t k = 0; k < n; ++k) yl[k] = static_cast<T>(buf[k] - shift - ls);
          else
            for (int64_t k = 0; k < n; ++k) yl[k * inner] = static_cast<T>(buf[k] - shift - ls);
        } else {
          const A inv = A(1) / s;
          if (inner == 1)
            for (int64_t k = 0; k < n; ++k) yl[k] = static_cast<T>(e[k] * inv);
          else
            for (int64_t k = 0; k < n; ++k) yl[k * inner] = static_cast<T>(e[k] * inv);
        }
      }
    });
  }
};

template <typename T> struct SoftmaxBackward {
  static void run(const Tensor& gin, const Tensor& g, const Tensor& yt, int64_t outer, int64_t n, int64_t inner,
                  bool log) {
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(g.raw_data());
    const T* y = static_cast<const T*>(yt.raw_data());
    T* o = static_cast<T*>(gin.raw_data());
    const int64_t lanes = outer * inner;
    parallel_for(lanes, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      std::vector<A> gv(n), yv(n), t(n);
      for (int64_t l = b; l < e; ++l) {
        const int64_t base = (l / inner) * n * inner + (l % inner);
        if (inner == 1)
          for (int64_t k = 0; k < n; ++k) gv[k] = static_cast<A>(gp[base + k]), yv[k] = static_cast<A>(y[base + k]);
        else
          for (int64_t k = 0; k < n; ++k)
            gv[k] = static_cast<A>(gp[base + k * inner]), yv[k] = static_cast<A>(y[base + k * inner]);
        // log_softmax: dx = g - exp(y) * sum(g); softmax: dx = y * (g - sum(g * y)).
        if (!log)
          for (int64_t k = 0; k < n; ++k) t[k] = gv[k] * yv[k];
        const A s = row_sum(log ? gv.data() : t.data(), n);
        if (log)
          for (int64_t k = 0; k < n; ++k) t[k] = gv[k] - formulas::exp(yv[k]) * s;
        else
          for (int64_t k = 0; k < n; ++k) t[k] = yv[k] * (gv[k] - s);
        T* ol = o + base;
        if (inner == 1)
          for (int64_t k = 0; k < n; ++k) ol[k] = static_cast<T>(t[k]);
        else
          for (int64_t k = 0; k < n; ++k) ol[k * inner] = static_cast<T>(t[k]);
      }
    });
  }
};

// Dropout's two passes over a chunk as functions with restrict pointers and no branch in the loop, so GCC
// vectorizes the hash and the select (one loop with `if (draw)` inside stayed scalar: 4-7 ns an element, half of a
// Transformer layer's bf16 step). The mask bits are those of random::uniform, as on CUDA.
inline void dropout_draw(uint8_t* __restrict__ m, int64_t b, int64_t e, uint64_t seed, uint64_t offset, double p) {
  for (int64_t i = b; i < e; ++i) m[i] = random::uniform(seed, offset + static_cast<uint64_t>(i)) >= p ? 1 : 0;
}
template <typename T, typename A>
void dropout_apply(T* __restrict__ y, const T* __restrict__ x, const uint8_t* __restrict__ m, int64_t b, int64_t e,
                   A sc) {
  for (int64_t i = b; i < e; ++i) y[i] = keep_or_zero(m[i] != 0, static_cast<T>(static_cast<A>(x[i]) * sc));
}

template <typename T> struct Dropout {
  static void run(const Tensor& out, const Tensor& mask, const Tensor& in, uint64_t seed, uint64_t offset, double p,
                  double scale, bool draw) {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    uint8_t* m = static_cast<uint8_t*>(mask.raw_data());
    const A sc = static_cast<A>(scale);
    parallel_for(out.numel(), kGrain, [&](int64_t b, int64_t e) {
      if (draw) dropout_draw(m, b, e, seed, offset, p);
      dropout_apply<T, A>(y, x, m, b, e, sc);
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_activation) {
  using D = DeviceType;
  dispatch::register_types<OpId::softmax, Softmax, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::log_softmax, Softmax, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::softmax_backward, SoftmaxBackward, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::log_softmax_backward, SoftmaxBackward, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::dropout, Dropout, float, double, Half, BFloat16>(D::kCPU);
}

}  // namespace mpx::cpu
