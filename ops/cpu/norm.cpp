// CPU batch-norm kernels: per-channel statistics (accumulated in double), normalization and backward,
// for row-major [N, C, S] and channels-last [N, C, H, W] activations.
#include <algorithm>
#include <cmath>
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

// Adds f(i) over [0, n) into `sums` (K double accumulators side by side, each summing its own
// fixed subset in a fixed order, so results never depend on threads): independent lanes
// let the compiler vectorize what one serial double sum would not.
template <int K, typename F>
void add_lanes(double (&sums)[K][8], int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    double v[K][8];
    for (int j = 0; j < 8; ++j) f(i + j, v, j);
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < 8; ++j) sums[k][j] += v[k][j];
  }
  for (; i < n; ++i) {
    double v[K][8];
    f(i, v, 0);
    for (int k = 0; k < K; ++k) sums[k][0] += v[k][0];
  }
}
template <int K>
double total(const double (&sums)[K][8], int k) {
  const double* s = sums[k];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
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

// Channel c's N row segments of S values as A: f32/f64 rows in place; f16/bf16 rows widened into a
// per-thread buffer first (one vectorized pass), since the double sums over them vectorize on f32
// input and not on 16-bit input (bf16 batch norm took twice f32's time). Values, sums and their
// order are unchanged: each value was widened to f32 on its way to double before.
template <typename A> struct ChannelRows {
  const A* base;
  int64_t stride;
  const A* row(int64_t n) const { return base + n * stride; }
};
template <typename T, typename A = acc_t<T>>
ChannelRows<A> channel_rows(const T* p, int64_t c, int64_t N, int64_t C, int64_t S, int slot) {
  if constexpr (std::is_same_v<T, A>) {
    return {p + c * S, C * S};
  } else {
    thread_local std::vector<A> buf[2];
    std::vector<A>& b = buf[slot];
    b.resize(static_cast<size_t>(N * S));
    for (int64_t n = 0; n < N; ++n) {
      const T* r = p + (n * C + c) * S;
      A* o = b.data() + n * S;
      for (int64_t i = 0; i < S; ++i) o[i] = static_cast<A>(r[i]);
    }
    return {b.data(), S};
  }
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
  for_channels(C, M, [&](int64_t c) {
    const auto rows = channel_rows(xp, c, N, C, S, 0);
    if (training) {
      double s[1][8] = {};
      for (int64_t n = 0; n < N; ++n) {
        const A* r = rows.row(n);
        add_lanes(s, S, [&](int64_t i, double (&v)[1][8], int j) { v[0][j] = static_cast<double>(r[i]); });
      }
      const double m = M > 0 ? total(s, 0) / static_cast<double>(M) : 0.0;
      double q[1][8] = {};
      for (int64_t n = 0; n < N; ++n) {
        const A* r = rows.row(n);
        add_lanes(q, S, [&](int64_t i, double (&v)[1][8], int j) {
          const double d = static_cast<double>(r[i]) - m;
          v[0][j] = d * d;
        });
      }
      const double ss = total(q, 0);
      mp[c] = static_cast<St>(m);
      vp[c] = static_cast<St>(M > 0 ? ss / static_cast<double>(M) : 0.0);
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

template <typename T>
void backward(const Tensor& gx, const Tensor& gweight, const Tensor& gbias, const Tensor& gy, const Tensor& x,
              const Tensor& mean, const Tensor& invstd, const Tensor& weight, bool training) {
  using St = stat_t<T>;
  using A = acc_t<T>;
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2), M = N * S;
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* gp = static_cast<const T*>(gy.raw_data());
  T* gxp = mut<T>(gx);
  St *gwp = mut<St>(gweight), *gbp = mut<St>(gbias);
  const St *mp = mut<St>(mean), *ip = mut<St>(invstd), *wp = mut<St>(weight);
  for_channels(C, M, [&](int64_t c) {
    const double m = static_cast<double>(mp[c]);
    const auto xr = channel_rows(xp, c, N, C, S, 0), gr = channel_rows(gp, c, N, C, S, 1);
    double sums[2][8] = {};  // sum(gy), sum(gy * (x - mean))
    for (int64_t n = 0; n < N; ++n) {
      const A* r = xr.row(n);
      const A* g = gr.row(n);
      add_lanes(sums, S, [&](int64_t i, double (&v)[2][8], int j) {
        const double gv = static_cast<double>(g[i]);
        v[0][j] = gv;
        v[1][j] = gv * (static_cast<double>(r[i]) - m);
      });
    }
    const auto [k, gmean, xcoef, am] =
        grad_coef<A>(c, total(sums, 0), total(sums, 1), M, mp, ip, wp, gwp, gbp, training);
    if (!gxp) return;
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
  else backward<T>(gx, gweight, gbias, gy, x, mean, invstd, weight, training);
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
    // The ReLU's mask first (it is gz), then batch norm's backward of it: two simple passes
    // that vectorize, where one pass with the mask inside measured 4x slower.
    // gy, y and gz share one dense layout (either of the two), so they are walked as flat arrays.
    const Tensor gr = gz.defined() ? gz : empty(gy.sizes(), gy.options().memory_format(gy.dim() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous));
    const T *g = static_cast<const T*>(gy.raw_data()), *yv = static_cast<const T*>(y.raw_data());
    T* o = static_cast<T*>(gr.raw_data());
    parallel_for(gy.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = keep_or_zero(static_cast<acc_t<T>>(yv[i]) > acc_t<T>(0), g[i]);
    });
    if (gx.defined() || gweight.defined() || gbias.defined())
      backward_any<T>(gx, gweight, gbias, gr, x, mean, invstd, weight, training);
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
