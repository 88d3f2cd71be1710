// CPU kernels for the class-index losses: gather at the target class and its adjoint scatter, and the fused
// cross-entropy rows (softmax statistics, loss and gradient without log-probabilities in memory).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/cpu/row_sums.h"
#include "ops/dispatch.h"
#include "ops/formulas.h"
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

// Row r of x in the compute type: the row itself for f32/f64, else widened into buf.
template <typename A, typename T> const A* row_in(const T* x, int64_t C, int64_t r, std::vector<A>& buf) {
  if constexpr (std::is_same_v<A, T>) {
    return x + r * C;
  } else {
    for (int64_t k = 0; k < C; ++k) buf[k] = static_cast<A>(x[r * C + k]);
    return buf.data();
  }
}

template <typename T> struct CrossEntropyRows {
  static void run(const Tensor& loss, const Tensor& lse, const Tensor& in, const Tensor& target, int64_t ignore_index,
                  double smoothing) {
    using A = acc_t<T>;
    const int64_t N = in.size(0), C = in.size(1);
    const T* x = static_cast<const T*>(in.raw_data());
    const int64_t* t = static_cast<const int64_t*>(target.raw_data());
    A* lo = static_cast<A*>(loss.raw_data());
    A* ls = static_cast<A*>(lse.raw_data());
    const A eps = static_cast<A>(smoothing), inv_c = A(1) / static_cast<A>(C);
    parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
      std::vector<A> buf(std::is_same_v<A, T> ? 0 : C), ex(C);
      for (int64_t r = b; r < e; ++r) {
        const A* v = row_in<A>(x, C, r, buf);
        A shift;
        const A s = row_exp_sum(v, C, ex.data(), shift);
        const A l = shift + std::log(s);
        ls[r] = l;
        const int64_t c = t[r];
        if (c == ignore_index) lo[r] = A(0);
        else if (c < 0 || c >= C) lo[r] = std::numeric_limits<A>::quiet_NaN();  // guarded; the op layer reports it
        else lo[r] = formulas::cross_entropy_row_loss(l, v[c], eps == A(0) ? A(0) : row_sum(v, C), eps, inv_c);
      }
    });
  }
};

template <typename T> struct CrossEntropyRowsBackward {
  static void run(const Tensor& dx, const Tensor& g, const Tensor& in, const Tensor& target, const Tensor& lse,
                  int64_t ignore_index, double smoothing) {
    using A = acc_t<T>;
    const int64_t N = in.size(0), C = in.size(1);
    const T* x = static_cast<const T*>(in.raw_data());
    const int64_t* t = static_cast<const int64_t*>(target.raw_data());
    const A* gp = static_cast<const A*>(g.raw_data());
    const A* ls = static_cast<const A*>(lse.raw_data());
    T* o = static_cast<T*>(dx.raw_data());
    const A eps = static_cast<A>(smoothing), inv_c = A(1) / static_cast<A>(C);
    parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T* orow = o + r * C;
        const int64_t c = t[r];
        if (c == ignore_index || c < 0 || c >= C) {
          std::fill(orow, orow + C, static_cast<T>(A(0)));
          continue;
        }
        const T* xr = x + r * C;
        const A gr = gp[r], l = ls[r];
        // Every class as a non-target, then the target's element again: the loop stays branch-free and vectorizes.
        for (int64_t k = 0; k < C; ++k)
          orow[k] = static_cast<T>(
              formulas::cross_entropy_row_grad(gr, formulas::exp(static_cast<A>(xr[k]) - l), A(0), eps, inv_c));
        orow[c] = static_cast<T>(
            formulas::cross_entropy_row_grad(gr, formulas::exp(static_cast<A>(xr[c]) - l), A(1), eps, inv_c));
      }
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_loss) {
  using D = DeviceType;
  dispatch::register_types<OpId::nll_loss, NllPick, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::nll_loss_backward, NllScatter, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::cross_entropy_rows, CrossEntropyRows, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::cross_entropy_rows_backward, CrossEntropyRowsBackward, float, double, Half,
                           BFloat16>(D::kCPU);
}

}  // namespace mpx::cpu
