// CPU kernels of the row norms (layer_norm_fwd/bwd, rms_norm_fwd/bwd): one row of D values per
// normalization, rows in parallel, statistics accumulated in f32 (f64 for f64) over 8 lanes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/norm.h"

namespace mpx::cpu {
namespace {

// f16/bf16/f32 rows keep their statistics in f32, f64 rows in f64.
template <typename T> using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
constexpr int kLanes = 8;

// A [D] parameter as a dense array of the statistics dtype (the contract allows any floating dtype).
template <typename S>
Tensor as_stat(const Tensor& t) {
  if (!t.defined()) return t;
  const DType sd = dtype_v<S>;
  return t.dtype() == sd && t.is_contiguous() ? t : t.to(sd).contiguous();
}
template <typename S> const S* cptr(const Tensor& t) { return t.defined() ? static_cast<const S*>(t.raw_data()) : nullptr; }
template <typename S> S* mptr(const Tensor& t) { return t.defined() ? static_cast<S*>(t.raw_data()) : nullptr; }

// kLanes partial sums in one vector register (lane j takes elements j, j + kLanes, ...): written
// as scalar arrays GCC kept them in scalars and shuffled every element in (a third of the
// kernels' time). lane_total adds the lanes in a fixed order. The type is a typedef in a class
// template because GCC drops vector_size from an alias template of a dependent type; vectors
// are passed by reference, as f64's 64 bytes have no register ABI without AVX-512.
template <typename S> struct LanesOf {
  typedef S type __attribute__((vector_size(kLanes * sizeof(S))));
};
template <typename S> using Lanes = typename LanesOf<S>::type;
template <typename S> void load_lanes(Lanes<S>& v, const S* p) { std::memcpy(&v, p, sizeof v); }
// The lanes as an array, for the tail's scalar adds to lane 0.
template <typename S> struct LaneArray {
  S v[kLanes];
};
template <typename S> LaneArray<S> lane_array(const Lanes<S>& l) {
  LaneArray<S> a;
  std::memcpy(a.v, &l, sizeof a.v);
  return a;
}
template <typename S> S lane_total(const S (&v)[kLanes]) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// Rows per parallel chunk: about kGrain elements each.
int64_t row_grain(int64_t D) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(D, 1)); }

// Forward of one kind (Rms: no mean, no bias). One pass for the statistics: sums of d = x - x[0]
// and d^2 (the shift keeps the variance free of cancellation when |mean| >> std). f16/bf16 rows
// are widened once into a row buffer that the output pass reads.
template <typename T, bool Rms> struct RowNormFwd {
  static void run(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& w0,
                  const Tensor& b0, double eps) {
    using S = stat_t<T>;
    constexpr bool kWiden = !std::is_same_v<T, S>;
    const int64_t rows = x.size(0), D = x.size(1);
    if (rows == 0 || D == 0) return;
    const Tensor w = as_stat<S>(w0), b = Rms ? Tensor() : as_stat<S>(b0);
    const T* xp = static_cast<const T*>(x.raw_data());
    T* yp = static_cast<T*>(y.raw_data());
    const S *wp = cptr<S>(w), *bp = cptr<S>(b);
    S *mp = Rms ? nullptr : mptr<S>(mean), *rp = mptr<S>(rstd);
    parallel_for(rows, row_grain(D), [&](int64_t rb, int64_t re) {
      std::vector<S> buf(kWiden ? static_cast<size_t>(D) : 0);
      for (int64_t r = rb; r < re; ++r) {
        const T* xr = xp + r * D;
        T* yr = yp + r * D;
        if constexpr (kWiden)
          for (int64_t k = 0; k < D; ++k) buf[k] = static_cast<S>(xr[k]);
        const S* xs;
        if constexpr (kWiden) xs = buf.data();
        else xs = xr;
        const S shift = Rms ? S(0) : xs[0];
        Lanes<S> sv = {}, qv = {};
        int64_t i = 0;
        for (; i + kLanes <= D; i += kLanes) {
          Lanes<S> d;
          load_lanes(d, xs + i);
          d -= shift;
          sv += d;
          qv += d * d;
        }
        LaneArray<S> s = lane_array<S>(sv), q = lane_array<S>(qv);
        for (; i < D; ++i) {
          const S d = xs[i] - shift;
          s.v[0] += d;
          q.v[0] += d * d;
        }
        const S n = static_cast<S>(D);
        S m = 0, var;
        if constexpr (Rms) {
          var = lane_total(q.v) / n;  // mean of squares
        } else {
          const S ms = lane_total(s.v) / n;
          var = std::max(S(0), lane_total(q.v) / n - ms * ms);
          m = shift + ms;
        }
        const S rs = static_cast<S>(1.0 / std::sqrt(static_cast<double>(var) + eps));
        if (mp) mp[r] = m;
        rp[r] = rs;
        // y = (x - m) * rs * w + b, one rounding at the store (x - m first: no cancellation
        // against a large m * rs).
        if (wp && bp) {
          for (int64_t k = 0; k < D; ++k) yr[k] = static_cast<T>((xs[k] - m) * rs * wp[k] + bp[k]);
        } else if (wp) {
          for (int64_t k = 0; k < D; ++k) yr[k] = static_cast<T>((xs[k] - m) * rs * wp[k]);
        } else if (bp) {
          for (int64_t k = 0; k < D; ++k) yr[k] = static_cast<T>((xs[k] - m) * rs + bp[k]);
        } else {
          for (int64_t k = 0; k < D; ++k) yr[k] = static_cast<T>((xs[k] - m) * rs);
        }
      }
    });
  }
};
template <typename T> using LayerNormFwd = RowNormFwd<T, false>;
template <typename T> using RmsNormFwd = RowNormFwd<T, true>;

// Backward: with g = dy * w and xhat = (x - mean) * rstd,
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (RMS: without the mean(g) term),
//   dw = sum over rows of dy * xhat, db = sum over rows of dy.
// Each row's dy and xhat are widened once into row buffers. The parameter gradients are summed
// per fixed chunk of rows (at most kMaxChunks, boundaries depending only on the shape), then the
// chunks in order: the same bits on any thread count.
template <typename T, bool Rms> struct RowNormBwd {
  static constexpr int64_t kMaxChunks = 64;
  static void run(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                  const Tensor& mean, const Tensor& rstd, const Tensor& w0) {
    using S = stat_t<T>;
    const int64_t rows = x.size(0), D = x.size(1);
    // Ones for an absent weight keep the dx loops free of a per-element choice.
    const Tensor w = w0.defined() ? as_stat<S>(w0) : full({D}, 1.0, TensorOptions(dtype_v<S>));
    const T* xp = static_cast<const T*>(x.raw_data());
    const T* gp = static_cast<const T*>(dy.raw_data());
    T* dxp = mptr<T>(dx);
    const S *wp = cptr<S>(w), *mp = Rms ? nullptr : cptr<S>(mean), *rp = cptr<S>(rstd);
    S *dwp = mptr<S>(dw), *dbp = Rms ? nullptr : mptr<S>(db);
    const bool params = dwp || dbp;
    const int64_t grain = std::max(row_grain(D), (rows + kMaxChunks - 1) / kMaxChunks);
    const int64_t chunks = rows == 0 ? 0 : (rows + grain - 1) / grain;
    // Per chunk: D partial sums of dy * xhat, then D of dy.
    std::vector<S> part(params ? static_cast<size_t>(chunks * 2 * D) : 0, S(0));
    parallel_for(rows, grain, [&](int64_t rb, int64_t re) {
      S* pw = params ? part.data() + (rb / grain) * 2 * D : nullptr;
      S* pb = pw ? pw + D : nullptr;
      std::vector<S> gbuf(static_cast<size_t>(D)), xbuf(static_cast<size_t>(D));
      S *gs = gbuf.data(), *xh = xbuf.data();
      for (int64_t r = rb; r < re; ++r) {
        const T* xr = xp + r * D;
        const T* gr = gp + r * D;
        const S m = mp ? mp[r] : S(0), rs = rp[r];
        for (int64_t k = 0; k < D; ++k) {
          gs[k] = static_cast<S>(gr[k]);
          xh[k] = (static_cast<S>(xr[k]) - m) * rs;
        }
        if (pw)
          for (int64_t k = 0; k < D; ++k) {
            pw[k] += gs[k] * xh[k];
            pb[k] += gs[k];
          }
        if (!dxp) continue;
        Lanes<S> gv = {}, gxv = {};
        int64_t i = 0;
        for (; i + kLanes <= D; i += kLanes) {
          Lanes<S> g, w, x;
          load_lanes(g, gs + i);
          load_lanes(w, wp + i);
          load_lanes(x, xh + i);
          g *= w;
          gv += g;
          gxv += g * x;
        }
        LaneArray<S> sg = lane_array<S>(gv), sgx = lane_array<S>(gxv);
        for (; i < D; ++i) {
          const S g = gs[i] * wp[i];
          sg.v[0] += g;
          sgx.v[0] += g * xh[i];
        }
        const S n = static_cast<S>(std::max<int64_t>(D, 1));
        const S a = Rms ? S(0) : lane_total(sg.v) / n, c = lane_total(sgx.v) / n;
        T* dr = dxp + r * D;
        for (int64_t k = 0; k < D; ++k) dr[k] = static_cast<T>(rs * (gs[k] * wp[k] - a - xh[k] * c));
      }
    });
    if (!params) return;
    parallel_for(D, std::max<int64_t>(1, kGrain / std::max<int64_t>(chunks, 1)), [&](int64_t kb, int64_t ke) {
      for (int64_t k = kb; k < ke; ++k) {
        double sw = 0, sb = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          sw += static_cast<double>(part[static_cast<size_t>(c * 2 * D + k)]);
          sb += static_cast<double>(part[static_cast<size_t>(c * 2 * D + D + k)]);
        }
        if (dwp) dwp[k] = static_cast<S>(sw);
        if (dbp) dbp[k] = static_cast<S>(sb);
      }
    });
  }
};
template <typename T> using LayerNormBwd = RowNormBwd<T, false>;
template <typename T> using RmsNormBwd = RowNormBwd<T, true>;

}  // namespace

MPX_REGISTER_KERNELS(cpu_row_norm) {
  using D = DeviceType;
  dispatch::register_types<OpId::layer_norm_fwd, LayerNormFwd, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::layer_norm_bwd, LayerNormBwd, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::rms_norm_fwd, RmsNormFwd, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::rms_norm_bwd, RmsNormBwd, float, double, Half, BFloat16>(D::kCPU);
}

}  // namespace mpx::cpu
