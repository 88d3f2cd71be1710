// CPU kernels of one separable resampling pass (interpolate's) and its adjoint: two weighted rows per output row.
#include <algorithm>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"

namespace mpx::cpu {
namespace {

template <typename T>
struct Resample {
  static void run(const Tensor& out, const Tensor& x, const Tensor& idx, const Tensor& w) {
    const int64_t outer = out.size(0), n_out = out.size(1), n_in = x.size(1), inner = out.size(2);
    const T* xp = static_cast<const T*>(x.raw_data());
    T* op = static_cast<T*>(out.raw_data());
    const int64_t* ip = idx.data_ptr<int64_t>();
    const T* wp = static_cast<const T*>(w.raw_data());
    parallel_for(outer * n_out, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [=](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / n_out, j = r % n_out;
        const T* a = xp + (o * n_in + ip[2 * j]) * inner;
        const T* c = xp + (o * n_in + ip[2 * j + 1]) * inner;
        const T wa = wp[2 * j], wc = wp[2 * j + 1];
        T* dst = op + r * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] = wa * a[i] + wc * c[i];
      }
    });
  }
};

// The adjoint adds each output row into two input rows: one task per outer slice (no two write the same row).
template <typename T>
struct ResampleBackward {
  static void run(const Tensor& gx, const Tensor& g, const Tensor& idx, const Tensor& w) {
    const int64_t outer = g.size(0), n_out = g.size(1), n_in = gx.size(1), inner = g.size(2);
    const T* gp = static_cast<const T*>(g.raw_data());
    T* xp = static_cast<T*>(gx.raw_data());
    const int64_t* ip = idx.data_ptr<int64_t>();
    const T* wp = static_cast<const T*>(w.raw_data());
    parallel_for(outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(n_out * inner, 1)), [=](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        T* base = xp + o * n_in * inner;
        std::fill(base, base + n_in * inner, T(0));
        for (int64_t j = 0; j < n_out; ++j) {
          const T* src = gp + (o * n_out + j) * inner;
          T* a = base + ip[2 * j] * inner;
          T* c = base + ip[2 * j + 1] * inner;
          const T wa = wp[2 * j], wc = wp[2 * j + 1];
          for (int64_t i = 0; i < inner; ++i) a[i] += wa * src[i];
          for (int64_t i = 0; i < inner; ++i) c[i] += wc * src[i];
        }
      }
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_resize) {
  dispatch::register_types<OpId::resample_dim, Resample, float, double>(DeviceType::kCPU);
  dispatch::register_types<OpId::resample_dim_backward, ResampleBackward, float, double>(DeviceType::kCPU);
}

}  // namespace mpx::cpu
