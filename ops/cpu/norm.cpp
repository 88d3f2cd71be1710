// CPU batch-norm kernels: per-channel statistics (accumulated in double), normalization and backward,
// for row-major [N, C, S] and channels-last [N, C, H, W] activations.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/norm.h"

namespace mpx::cpu {
namespace {

// f16/bf16/f32 inputs keep their statistics in f32, f64 inputs in f64.
template <typename T> using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename S>
S* mut(const Tensor& t) { return t.defined() ? static_cast<S*>(t.raw_data()) : nullptr; }

// A channel's sums in double, in 8 lanes: lane j adds the values at i = j (mod 8) of each row's
// whole blocks of 8, in order, lane 0 the row's tail after them, and total() adds the lanes in a
// fixed tree: fixed subsets in a fixed order, so results never depend on threads. Written with
// vectors of doubles, since GCC left the same sums in scalar form (the widening to double, two
// sums at once) unvectorized; two vectors of 4 rather than one of 8, which AVX2 builds kept on
// the stack and moved a lane at a time (instance norm's forward 4x slower than on AVX-512).
typedef double Lanes4 __attribute__((vector_size(32)));
struct LaneSums {
  Lanes4 lo = {}, hi = {};  // lanes 0-3 and 4-7
  double total() const { return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3])); }
};
// Eight values from p (f32 or f64) as doubles, lanes 0-3 and 4-7.
template <typename A> void load8(Lanes4& lo, Lanes4& hi, const A* p) {
  if constexpr (std::is_same_v<A, double>) {
    std::memcpy(&lo, p, sizeof lo);
    std::memcpy(&hi, p + 4, sizeof hi);
  } else {
    typedef float F4 __attribute__((vector_size(16)));
    F4 f0, f1;
    std::memcpy(&f0, p, sizeof f0);
    std::memcpy(&f1, p + 4, sizeof f1);
    lo = __builtin_convertvector(f0, Lanes4);
    hi = __builtin_convertvector(f1, Lanes4);
  }
}
// s += r[i] over a row of n values.
template <typename A> void add_row(LaneSums& s, const A* r, int64_t n) {
  int64_t i = 0;
  for (Lanes4 lo, hi; i + 8 <= n; i += 8) {
    load8(lo, hi, r + i);
    s.lo += lo;
    s.hi += hi;
  }
  for (; i < n; ++i) s.lo[0] += static_cast<double>(r[i]);
}
// s += (r[i] - m)^2.
template <typename A> void add_sq_row(LaneSums& s, const A* r, int64_t n, double m) {
  int64_t i = 0;
  for (Lanes4 lo, hi; i + 8 <= n; i += 8) {
    load8(lo, hi, r + i);
    lo -= m;
    hi -= m;
    s.lo += lo * lo;
    s.hi += hi * hi;
  }
  for (; i < n; ++i) {
    const double d = static_cast<double>(r[i]) - m;
    s.lo[0] += d * d;
  }
}
// sg += g[i], sgx += g[i] * (x[i] - m).
template <typename A> void add_grad_row(LaneSums& sg, LaneSums& sgx, const A* g, const A* x, int64_t n, double m) {
  int64_t i = 0;
  for (Lanes4 glo, ghi, xlo, xhi; i + 8 <= n; i += 8) {
    load8(glo, ghi, g + i);
    load8(xlo, xhi, x + i);
    sg.lo += glo;
    sg.hi += ghi;
    sgx.lo += glo * (xlo - m);
    sgx.hi += ghi * (xhi - m);
  }
  for (; i < n; ++i) {
    const double gv = static_cast<double>(g[i]);
    sg.lo[0] += gv;
    sgx.lo[0] += gv * (static_cast<double>(x[i]) - m);
  }
}

// Channels are independent; a channel's work is N segments of S contiguous elements.
template <typename F>
void for_channels(int64_t C, int64_t per_channel, F f) {
  parallel_for(C, std::max<int64_t>(1, kGrain / std::max<int64_t>(per_channel, 1)), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) f(c);
  });
}

// Channel c's normalization y = x * scale + shift, once its mean and var are known; writes invstd.
template <typename A, typename St>
std::pair<A, A> affine(int64_t c, const St* mp, const St* vp, St* ip, const St* wp, const St* bp, double eps) {
  const double is = 1.0 / std::sqrt(static_cast<double>(vp[c]) + eps);
  ip[c] = static_cast<St>(is);
  const double w = wp ? static_cast<double>(wp[c]) : 1.0;
  return {static_cast<A>(is * w),
          static_cast<A>((bp ? static_cast<double>(bp[c]) : 0.0) - static_cast<double>(mp[c]) * is * w)};
}

// Channel c's backward from sg = sum(gy) and sgx = sum(gy * (x - mean)) over its M values:
// writes the weight and bias gradients and returns gx = k * (gy - gmean - (x - am) * xcoef),
// which in training is w * is * (gy - mean(gy) - xhat * mean(gy * xhat)), xhat = (x - m) * is.
template <typename A> struct GradCoef { A k, gmean, xcoef, am; };
template <typename A, typename St>
GradCoef<A> grad_coef(int64_t c, double sg, double sgx, int64_t M, const St* mp, const St* ip, const St* wp, St* gwp,
                      St* gbp, bool training) {
  const double is = static_cast<double>(ip[c]), w = wp ? static_cast<double>(wp[c]) : 1.0;
  if (gbp) gbp[c] = static_cast<St>(sg);
  if (gwp) gwp[c] = static_cast<St>(sgx * is);
  const bool t = training && M > 0;
  return {static_cast<A>(w * is), t ? static_cast<A>(sg / static_cast<double>(M)) : A(0),
          t ? static_cast<A>(sgx * is * is / static_cast<double>(M)) : A(0), static_cast<A>(mp[c])};
}

// A channel's N row segments of S values, as A: f32/f64 rows are read in place; f16/bf16 rows
// (and masked gradients) are widened into a per-thread buffer by the first pass over them, so
// that the later passes and the double sums read f32 (each value is widened to f32 on its way to
// double in any case).
template <typename A> struct ChannelRows {
  const A* base;
  int64_t stride;
  const A* row(int64_t n) const { return base + n * stride; }
};
// n values of a row as A (a loop of its own: GCC vectorizes it, and the sums after it, only apart).
template <typename T, typename A> void widen_row(A* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<A>(src[i]);
}
template <typename A> A* row_buffer(int slot, int64_t n) {
  thread_local std::vector<A> buf[2];
  buf[slot].resize(static_cast<size_t>(std::max<int64_t>(n, 1)));
  return buf[slot].data();
}

// What follows the normalization in a forward kernel: nothing, a ReLU, or the add of z and a
// ReLU (each rounded once, at the end).
enum class Epi { kNone, kRelu, kAddRelu };

// The epilogue of one value v = bn(x) (z: the residual's value, used by kAddRelu only).
template <Epi E, typename T, typename A> T epilogue(A v, const T* z, int64_t i) {
  if constexpr (E == Epi::kNone) {
    return T(v);
  } else {
    if constexpr (E == Epi::kAddRelu) v = static_cast<A>(v + static_cast<A>(z[i]));
    // NaN -> 0, as relu; a choice of the rounded bits, since GCC turns a choice between two
    // rounded values into a branch that keeps the f16 loop scalar (13 ms instead of 2.6).
    return keep_or_zero(v > A(0), T(v));
  }
}

// Rows of C channels per chunk of the channels-last loops.
int64_t rows_per_chunk(int64_t C) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)); }

// Batch norm forward, then the epilogue E.
template <typename T, Epi E>
void forward(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x,
             const Tensor& z, const Tensor& weight, const Tensor& bias, bool training, double eps) {
  using St = stat_t<T>;
  using A = acc_t<T>;
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2), M = N * S;
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* zp = E == Epi::kAddRelu ? static_cast<const T*>(z.raw_data()) : nullptr;
  T* yp = static_cast<T*>(y.raw_data());
  St *mp = mut<St>(mean), *vp = mut<St>(var), *ip = mut<St>(invstd);
  const St *wp = mut<St>(weight), *bp = mut<St>(bias);
  constexpr bool kWide = !std::is_same_v<T, A>;
  for_channels(C, M, [&](int64_t c) {
    A* wide = kWide ? row_buffer<A>(0, M) : nullptr;
    ChannelRows<A> rows{wide, S};
    if constexpr (!kWide) rows = {xp + c * S, C * S};
    // The first pass widens 16-bit rows and, in training, sums each row while it is in L1.
    LaneSums s;
    for (int64_t n = 0; n < N; ++n) {
      if constexpr (kWide) widen_row(wide + n * S, xp + (n * C + c) * S, S);
      if (training) add_row(s, rows.row(n), S);
    }
    if (training) {
      const double m = M > 0 ? s.total() / static_cast<double>(M) : 0.0;
      LaneSums q;
      for (int64_t n = 0; n < N; ++n) add_sq_row(q, rows.row(n), S, m);
      mp[c] = static_cast<St>(m);
      vp[c] = static_cast<St>(M > 0 ? q.total() / static_cast<double>(M) : 0.0);
    }
    const auto [scale, shift] = affine<A>(c, mp, vp, ip, wp, bp, eps);
    for (int64_t n = 0; n < N; ++n) {
      const A* r = rows.row(n);
      T* o = yp + (n * C + c) * S;
      const T* zr = zp ? zp + (n * C + c) * S : nullptr;
      for (int64_t i = 0; i < S; ++i) o[i] = epilogue<E>(static_cast<A>(r[i] * scale + shift), zr, i);
    }
  });
}

// One row segment of the backward's first pass: g = gy, or with a ReLU after batch norm (y
// given) g = gy where y > 0 else 0, written to gz (the residual's gradient) when asked; x and g
// go to the rows ox/og as A where they are not the inputs themselves (null: read in place), and
// sum(g), sum(g * (x - m)) are added to sg and sgx while the row is in L1. Simple loops, each of
// which vectorizes (one loop doing all of it stayed scalar).
template <typename T, typename A>
void grad_sums_row(LaneSums& sg, LaneSums& sgx, const T* x, const T* gy, const T* y, T* gz, A* ox, A* og, int64_t S,
                   double m) {
  if (ox) widen_row(ox, x, S);
  if (y && gz) {
    for (int64_t i = 0; i < S; ++i) {
      const bool keep = static_cast<A>(y[i]) > A(0);
      og[i] = select_bits(keep, static_cast<A>(gy[i]), A(0));
      gz[i] = keep_or_zero(keep, gy[i]);
    }
  } else if (y) {
    for (int64_t i = 0; i < S; ++i) og[i] = select_bits(static_cast<A>(y[i]) > A(0), static_cast<A>(gy[i]), A(0));
  } else if (og) {
    widen_row(og, gy, S);
  }
  add_grad_row(sg, sgx, og ? og : reinterpret_cast<const A*>(gy), ox ? ox : reinterpret_cast<const A*>(x), S, m);
}

// Batch norm's backward; with y (the fused ops' output) the ReLU's mask is applied to gy first,
// and the masked gy is written to gz where gz is defined.
template <typename T>
void backward(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy, const Tensor& x,
              const Tensor& mean, const Tensor& invstd, const Tensor& weight, bool training, const Tensor& y,
              const Tensor& gz) {
  using St = stat_t<T>;
  using A = acc_t<T>;
  constexpr bool kWide = !std::is_same_v<T, A>;
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2), M = N * S;
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* gp = static_cast<const T*>(gy.raw_data());
  const T* yp = y.defined() ? static_cast<const T*>(y.raw_data()) : nullptr;
  T* gzp = mut<T>(gz);
  T* gxp = mut<T>(gx);
  St *gwp = mut<St>(gweight), *gbp = mut<St>(gbias);
  const St *mp = mut<St>(mean), *ip = mut<St>(invstd), *wp = mut<St>(weight);
  const bool own_g = kWide || yp;
  for_channels(C, M, [&](int64_t c) {
    const double m = static_cast<double>(mp[c]);
    A* bx = kWide ? row_buffer<A>(0, M) : nullptr;
    A* bg = own_g ? row_buffer<A>(1, M) : nullptr;
    LaneSums sg, sgx;  // sum(g), sum(g * (x - mean))
    for (int64_t n = 0; n < N; ++n) {
      const int64_t off = (n * C + c) * S;
      A* ox = bx ? bx + n * S : nullptr;
      A* og = bg ? bg + n * S : nullptr;
      grad_sums_row(sg, sgx, xp + off, gp + off, yp ? yp + off : nullptr, gzp ? gzp + off : nullptr, ox, og, S, m);
    }
    const auto [k, gmean, xcoef, am] =
        grad_coef<A>(c, sg.total(), sgx.total(), M, mp, ip, wp, gwp, gbp, training);
    if (!gxp) return;
    // x and g as the sums saw them: the rows written above, or the inputs in place.
    ChannelRows<A> xr{bx, S}, gr{bg, S};
    if constexpr (!kWide) {
      xr = {xp + c * S, C * S};
      if (!own_g) gr = {gp + c * S, C * S};
    }
    for (int64_t n = 0; n < N; ++n) {
      const A* r = xr.row(n);
      const A* g = gr.row(n);
      T* o = gxp + (n * C + c) * S;
      for (int64_t i = 0; i < S; ++i) o[i] = T(static_cast<A>(k * (g[i] - gmean - (r[i] - am) * xcoef)));
    }
  });
}

// ---- channels-last ([N, C, H, W] stored NHWC: rows of C channels) ----
// Per-channel sums over the rows, in fixed chunks of rows whose partials are added in order:
// the same result on any thread count. The inner loops run along the channels, which are
// contiguous, so they vectorize.
template <int K, typename F>
void column_sums(int64_t rows, int64_t C, F f, std::vector<double>& partial) {
  const int64_t chunk = rows_per_chunk(C);
  const int64_t chunks = (rows + chunk - 1) / chunk;
  partial.assign(static_cast<size_t>(chunks * K * C), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    double* acc = partial.data() + k * K * C;
    for (int64_t r = k * chunk; r < std::min(rows, (k + 1) * chunk); ++r) f(r, acc);
  }
}
// The K sums of channel c: the chunks' partials in order.
template <int K>
double chunk_total(const std::vector<double>& partial, int64_t C, int k, int64_t c) {
  double t = 0.0;
  for (size_t at = static_cast<size_t>(k * C + c); at < partial.size(); at += static_cast<size_t>(K * C)) t += partial[at];
  return t;
}

template <typename T, Epi E>
void forward_nhwc(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x,
                  const Tensor& z, const Tensor& weight, const Tensor& bias, bool training, double eps) {
  using St = stat_t<T>;
  using A = acc_t<T>;
  const int64_t C = x.size(1), R = x.numel() / C;
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* zp = E == Epi::kAddRelu ? static_cast<const T*>(z.raw_data()) : nullptr;
  T* yp = static_cast<T*>(y.raw_data());
  St *mp = mut<St>(mean), *vp = mut<St>(var), *ip = mut<St>(invstd);
  const St *wp = mut<St>(weight), *bp = mut<St>(bias);
  if (training) {
    std::vector<double> partial, m(static_cast<size_t>(C));
    column_sums<1>(R, C, [&](int64_t r, double* acc) {
      const T* row = xp + r * C;
      for (int64_t c = 0; c < C; ++c) acc[c] += static_cast<double>(static_cast<A>(row[c]));
    }, partial);
    for (int64_t c = 0; c < C; ++c) m[c] = R > 0 ? chunk_total<1>(partial, C, 0, c) / static_cast<double>(R) : 0.0;
    column_sums<1>(R, C, [&](int64_t r, double* acc) {
      const T* row = xp + r * C;
      for (int64_t c = 0; c < C; ++c) {
        const double d = static_cast<double>(static_cast<A>(row[c])) - m[c];
        acc[c] += d * d;
      }
    }, partial);
    for (int64_t c = 0; c < C; ++c) {
      mp[c] = static_cast<St>(m[c]);
      vp[c] = static_cast<St>(R > 0 ? chunk_total<1>(partial, C, 0, c) / static_cast<double>(R) : 0.0);
    }
  }
  std::vector<A> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) std::tie(scale[c], shift[c]) = affine<A>(c, mp, vp, ip, wp, bp, eps);
  parallel_for(R, rows_per_chunk(C), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* row = xp + r * C;
      T* o = yp + r * C;
      const T* zr = zp ? zp + r * C : nullptr;
      for (int64_t c = 0; c < C; ++c)
        o[c] = epilogue<E>(static_cast<A>(static_cast<A>(row[c]) * scale[c] + shift[c]), zr, c);
    }
  });
}

template <typename T>
void backward_nhwc(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy, const Tensor& x,
                   const Tensor& mean, const Tensor& invstd, const Tensor& weight, bool training) {
  using St = stat_t<T>;
  using A = acc_t<T>;
  const int64_t C = x.size(1), R = x.numel() / C;
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* gp = static_cast<const T*>(gy.raw_data());
  T* gxp = mut<T>(gx);
  St *gwp = mut<St>(gweight), *gbp = mut<St>(gbias);
  const St *mp = mut<St>(mean), *ip = mut<St>(invstd), *wp = mut<St>(weight);
  std::vector<double> partial, m(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) m[c] = static_cast<double>(mp[c]);
  // sum(gy) and sum(gy * (x - mean)) side by side: [chunk][2][C].
  column_sums<2>(R, C, [&](int64_t r, double* acc) {
    const T* row = xp + r * C;
    const T* g = gp + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const double gv = static_cast<double>(static_cast<A>(g[c]));
      acc[c] += gv;
      acc[C + c] += gv * (static_cast<double>(static_cast<A>(row[c])) - m[c]);
    }
  }, partial);
  std::vector<GradCoef<A>> co(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c)
    co[c] = grad_coef<A>(c, chunk_total<2>(partial, C, 0, c), chunk_total<2>(partial, C, 1, c), R, mp, ip, wp, gwp,
                         gbp, training);
  if (!gxp) return;
  parallel_for(R, rows_per_chunk(C), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* row = xp + r * C;
      const T* g = gp + r * C;
      T* o = gxp + r * C;
      for (int64_t c = 0; c < C; ++c)
        o[c] = T(static_cast<A>(co[c].k * (static_cast<A>(g[c]) - co[c].gmean - (static_cast<A>(row[c]) - co[c].am) * co[c].xcoef)));
    }
  });
}

// The kernels' two layouts: [N, C, S] views (row-major) and 4-d channels-last tensors.
template <typename T, Epi E>
void forward_any(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x,
                 const Tensor& z, const Tensor& weight, const Tensor& bias, bool training, double eps) {
  if (x.dim() == 4) forward_nhwc<T, E>(y, mean, var, invstd, x, z, weight, bias, training, eps);
  else forward<T, E>(y, mean, var, invstd, x, z, weight, bias, training, eps);
}
template <typename T>
void backward_any(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy, const Tensor& x,
                  const Tensor& mean, const Tensor& invstd, const Tensor& weight, bool training) {
  if (x.dim() == 4) backward_nhwc<T>(gx, gweight, gbias, gy, x, mean, invstd, weight, training);
  else backward<T>(gx, gweight, gbias, gy, x, mean, invstd, weight, training, Tensor(), Tensor());
}

// PyTorch's running update from the batch statistics just written, in the statistics dtype S:
// r += m (s - r), the variance unbiased by M / (M - 1), M the values per channel.
template <typename S>
void update_running(const kernels::BnRunning& r, const Tensor& mean, const Tensor& var, int64_t M) {
  const int64_t C = mean.numel();
  const S *bm = static_cast<const S*>(mean.raw_data()), *bv = static_cast<const S*>(var.raw_data());
  S *rm = static_cast<S*>(r.mean.raw_data()), *rv = static_cast<S*>(r.var.raw_data());
  const double m = r.momentum, unbias = static_cast<double>(M) / static_cast<double>(M - 1);
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = static_cast<S>(rm[c] + m * (static_cast<double>(bm[c]) - rm[c]));
    rv[c] = static_cast<S>(rv[c] + m * (static_cast<double>(bv[c]) * unbias - rv[c]));
  }
}
template <typename T, Epi E>
Tensor forward_kernel(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x,
                      const Tensor& z, const Tensor& weight, const Tensor& bias, bool training, double eps,
                      const kernels::BnRunning& running) {
  forward_any<T, E>(y, mean, var, invstd, x, z, weight, bias, training, eps);
  if (training && running.mean.defined()) {
    const int64_t M = x.numel() / x.size(1);
    if (mean.dtype() == kFloat64) update_running<double>(running, mean, var, M);
    else update_running<float>(running, mean, var, M);
  }
  return Tensor();
}

template <typename T> struct BatchNorm {
  static Tensor run(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x,
                    const Tensor& weight, const Tensor& bias, bool training, double eps,
                    const kernels::BnRunning& running) {
    return forward_kernel<T, Epi::kNone>(y, mean, var, invstd, x, Tensor(), weight, bias, training, eps, running);
  }
};
template <typename T> struct BatchNormBackward {
  static void run(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy, const Tensor& x,
                  const Tensor& mean, const Tensor& invstd, const Tensor& weight, const Tensor&, bool training) {
    backward_any<T>(gx, gweight, gbias, gy, x, mean, invstd, weight, training);
  }
};
template <typename T> struct BatchNormAddRelu {
  static Tensor run(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x,
                    const Tensor& z, const Tensor& weight, const Tensor& bias, bool training, double eps,
                    const kernels::BnRunning& running) {
    return forward_kernel<T, Epi::kAddRelu>(y, mean, var, invstd, x, z, weight, bias, training, eps, running);
  }
};
template <typename T> struct BatchNormRelu {
  static Tensor run(const Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& invstd, const Tensor& x,
                    const Tensor& weight, const Tensor& bias, bool training, double eps,
                    const kernels::BnRunning& running) {
    return forward_kernel<T, Epi::kRelu>(y, mean, var, invstd, x, Tensor(), weight, bias, training, eps, running);
  }
};
// The backward of both fused ops: gz (batch_norm_add_relu's z) is the masked gy itself.
template <typename T> struct BatchNormAddReluBackward {
  static void run(const Tensor& gx, const Tensor& gz, const Tensor& gweight, const Tensor& gbias, const Tensor& gy,
                  const Tensor& x, const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                  const Tensor&, const Tensor&, bool training) {
    const bool bn_grads = gx.defined() || gweight.defined() || gbias.defined();
    // Row-major: the ReLU's mask is applied inside the backward's first pass (writing gz there).
    if (x.dim() != 4 && bn_grads) {
      backward<T>(gx, gweight, gbias, gy, x, mean, invstd, weight, training, y, gz);
      return;
    }
    // Channels-last (or gz alone): the mask first (it is gz), then batch norm's backward of it.
    // gy, y and gz share one dense layout (either of the two), so they are walked as flat arrays.
    const Tensor gr = gz.defined() ? gz : empty(gy.sizes(), gy.options().memory_format(gy.dim() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous));
    const T *g = static_cast<const T*>(gy.raw_data()), *yv = static_cast<const T*>(y.raw_data());
    T* o = static_cast<T*>(gr.raw_data());
    parallel_for(gy.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = keep_or_zero(static_cast<acc_t<T>>(yv[i]) > acc_t<T>(0), g[i]);
    });
    if (bn_grads) backward_any<T>(gx, gweight, gbias, gr, x, mean, invstd, weight, training);
  }
};
template <typename T> struct BatchNormReluBackward {
  static void run(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy, const Tensor& x,
                  const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& weight, const Tensor& bias,
                  const Tensor& reserve, bool training) {
    BatchNormAddReluBackward<T>::run(gx, Tensor(), gweight, gbias, gy, x, y, mean, invstd, weight, bias, reserve,
                                     training);
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_norm) {
  dispatch::register_types<OpId::batch_norm, BatchNorm, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::batch_norm_backward, BatchNormBackward, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::batch_norm_add_relu, BatchNormAddRelu, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::batch_norm_add_relu_backward, BatchNormAddReluBackward, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::batch_norm_relu, BatchNormRelu, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::batch_norm_relu_backward, BatchNormReluBackward, float, double, Half, BFloat16>(DeviceType::kCPU);
}

}  // namespace mpx::cpu
