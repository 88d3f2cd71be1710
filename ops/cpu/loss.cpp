// CPU kernels for the class-index losses: gather at the target class and its adjoint scatter.
#include <algorithm>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/loss.h"

namespace mpx::cpu {
namespace {

template <typename T> struct NllPick {
  static void run(const Tensor& out, const Tensor& in, const Tensor& target, int64_t ignore_index) {
    const int64_t N = in.size(0), C = in.size(1), inner = in.size(2);
    const int64_t sn = in.stride(0), sc = in.stride(1), si = in.stride(2);
    const T* x = static_cast<const T*>(in.raw_data());
    const int64_t* t = static_cast<const int64_t*>(target.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(N * inner, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const int64_t n = j / inner, i = j % inner, c = t[j];
        // The op layer validated the range; the check here only guards memory.
        o[j] = (c == ignore_index || c < 0 || c >= C) ? static_cast<T>(0.0f) : x[n * sn + c * sc + i * si];
      }
    });
  }
};

template <typename T> struct NllScatter {
  static void run(const Tensor& out, const Tensor& g, const Tensor& target, int64_t ignore_index) {
    const int64_t N = out.size(0), C = out.size(1), inner = out.size(2);
    T* o = static_cast<T*>(out.raw_data());
    const T* gp = static_cast<const T*>(g.raw_data());
    const int64_t* t = static_cast<const int64_t*>(target.raw_data());
    // Rows of C * inner elements are disjoint, so samples can be split across threads.
    parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(C * inner, 1)), [&](int64_t b, int64_t e) {
      std::fill(o + b * C * inner, o + e * C * inner, static_cast<T>(0.0f));
      for (int64_t n = b; n < e; ++n)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t c = t[n * inner + i];
          if (c == ignore_index || c < 0 || c >= C) continue;
          o[(n * C + c) * inner + i] = gp[n * inner + i];
        }
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_loss) {
  using D = DeviceType;
  dispatch::register_types<OpId::nll_loss, NllPick, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::nll_loss_backward, NllScatter, float, double, Half, BFloat16>(D::kCPU);
}

}  // namespace mpx::cpu
