// CPU kernels of the fused LSTM/GRU cells: the pointwise half of a step (f32 math for f16/bf16,
// one rounding per stored value), rows of the batch in parallel.
#include <cmath>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/formulas.h"
#include "ops/rnn_kernels.h"

namespace mpx::cpu {
namespace {

// formulas::exp and tanh: the f32 forms are branch-free, so the cell loops vectorize (libm's are scalar calls,
// ~20 ns an element, which made the cells a third of an LSTM step).
template <typename A> A sigm(A v) { return A(1) / (A(1) + formulas::exp(-v)); }
template <typename A> A tanh_of(A v) { return formulas::tanh(v); }
template <typename T> const T* in(const Tensor& t) { return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr; }
template <typename T> T* out(const Tensor& t) { return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr; }

// Rows of H values per parallel chunk.
template <typename F> void for_rows(int64_t N, int64_t H, F f) {
  parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(4 * H, 1)), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) f(n);
  });
}

// One row of the LSTM cell: a function of its own with one restrict pointer per stream, which GCC vectorizes (the
// same loop inside the row lambda, with captured pointers and bounds, stayed scalar: 45 ns an element).
template <typename T, typename A>
void lstm_row(const T* __restrict__ g, const T* __restrict__ cp, T* __restrict__ co, T* __restrict__ ho,
              T* __restrict__ act, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const A i = sigm(static_cast<A>(g[j])), f = sigm(static_cast<A>(g[H + j]));
    const A gg = tanh_of(static_cast<A>(g[2 * H + j])), o = sigm(static_cast<A>(g[3 * H + j]));
    const A c = f * static_cast<A>(cp[j]) + i * gg;
    co[j] = static_cast<T>(c);
    ho[j] = static_cast<T>(o * tanh_of(c));
    act[j] = static_cast<T>(i);
    act[H + j] = static_cast<T>(f);
    act[2 * H + j] = static_cast<T>(gg);
    act[3 * H + j] = static_cast<T>(o);
  }
}

template <typename T> struct LstmCell {
  static void run(const Tensor& h_out, const Tensor& c_out, const Tensor& act, const Tensor& gates,
                  const Tensor& c_prev) {
    const int64_t N = c_prev.size(0), H = c_prev.size(1);
    const T *gp = in<T>(gates), *cp = in<T>(c_prev);
    T *hp = out<T>(h_out), *cop = out<T>(c_out), *ap = out<T>(act);
    for_rows(N, H, [&](int64_t n) {
      lstm_row<T, acc_t<T>>(gp + n * 4 * H, cp + n * H, cop + n * H, hp + n * H, ap + n * 4 * H, H);
    });
  }
};

// The other cells' rows likewise, every pointer present: an absent gradient (an output nobody used) reads zeros and
// an unwanted one is written to scratch (`Absent`), so no row holds a branch.
// Stand-ins for absent gradients: zeros to read, scratch to write ([N, H] each, allocated only when needed).
template <typename T> struct Absent {
  std::vector<T> zeros, scratch;
  const T* in(const T* p, int64_t N, int64_t H) {
    if (p) return p;
    zeros.assign(static_cast<size_t>(N * H), static_cast<T>(0.0f));
    return zeros.data();
  }
  T* out(T* p, int64_t N, int64_t H) {
    if (p) return p;
    scratch.resize(static_cast<size_t>(N * H));
    return scratch.data();
  }
};

template <typename T, typename A>
void lstm_backward_row(T* __restrict__ dg, T* __restrict__ dcp, const T* __restrict__ dh, const T* __restrict__ dc,
                       const T* __restrict__ a, const T* __restrict__ cp, const T* __restrict__ co, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const A i = static_cast<A>(a[j]), f = static_cast<A>(a[H + j]), g = static_cast<A>(a[2 * H + j]),
            o = static_cast<A>(a[3 * H + j]);
    const A tc = tanh_of(static_cast<A>(co[j]));
    const A gh = static_cast<A>(dh[j]);
    const A dct = static_cast<A>(dc[j]) + gh * o * (A(1) - tc * tc);
    dg[j] = static_cast<T>(dct * g * i * (A(1) - i));
    dg[H + j] = static_cast<T>(dct * static_cast<A>(cp[j]) * f * (A(1) - f));
    dg[2 * H + j] = static_cast<T>(dct * i * (A(1) - g * g));
    dg[3 * H + j] = static_cast<T>(gh * tc * o * (A(1) - o));
    dcp[j] = static_cast<T>(dct * f);
  }
}

template <typename T> struct LstmCellBackward {
  static void run(const Tensor& dgates, const Tensor& dc_prev, const Tensor& dh, const Tensor& dc, const Tensor& act,
                  const Tensor& c_prev, const Tensor& c_out) {
    const int64_t N = c_prev.size(0), H = c_prev.size(1);
    Absent<T> ab, ab2;
    const T *dhp = ab.in(in<T>(dh), N, H), *dcp = ab2.in(in<T>(dc), N, H), *ap = in<T>(act), *cp = in<T>(c_prev),
            *cop = in<T>(c_out);
    T *dgp = out<T>(dgates), *dcpp = ab.out(out<T>(dc_prev), N, H);
    for_rows(N, H, [&](int64_t n) {
      lstm_backward_row<T, acc_t<T>>(dgp + n * 4 * H, dcpp + n * H, dhp + n * H, dcp + n * H, ap + n * 4 * H,
                                     cp + n * H, cop + n * H, H);
    });
  }
};

template <typename T, typename A>
void gru_row(const T* __restrict__ x, const T* __restrict__ h, const T* __restrict__ hp, T* __restrict__ ho,
             T* __restrict__ w, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const A r = sigm(static_cast<A>(x[j]) + static_cast<A>(h[j]));
    const A z = sigm(static_cast<A>(x[H + j]) + static_cast<A>(h[H + j]));
    const A hn = static_cast<A>(h[2 * H + j]);
    const A nn = tanh_of(static_cast<A>(x[2 * H + j]) + r * hn);
    ho[j] = static_cast<T>((A(1) - z) * nn + z * static_cast<A>(hp[j]));
    w[j] = static_cast<T>(r);
    w[H + j] = static_cast<T>(z);
    w[2 * H + j] = static_cast<T>(nn);
    w[3 * H + j] = static_cast<T>(hn);  // exact: hn is h[2H + j] widened (a plain element copy kept the loop scalar)
  }
}

template <typename T> struct GruCell {
  static void run(const Tensor& h_out, const Tensor& ws, const Tensor& gi, const Tensor& gh, const Tensor& h_prev) {
    const int64_t N = h_prev.size(0), H = h_prev.size(1);
    const T *ip = in<T>(gi), *hp = in<T>(gh), *pp = in<T>(h_prev);
    T *op = out<T>(h_out), *wp = out<T>(ws);
    for_rows(N, H, [&](int64_t n) {
      gru_row<T, acc_t<T>>(ip + n * 3 * H, hp + n * 3 * H, pp + n * H, op + n * H, wp + n * 4 * H, H);
    });
  }
};

template <typename T, typename A>
void gru_backward_row(T* __restrict__ di, T* __restrict__ dg, T* __restrict__ dp, const T* __restrict__ gp,
                      const T* __restrict__ w, const T* __restrict__ pp, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const A r = static_cast<A>(w[j]), z = static_cast<A>(w[H + j]), nn = static_cast<A>(w[2 * H + j]),
            hn = static_cast<A>(w[3 * H + j]);
    const A g = static_cast<A>(gp[j]);
    const A dnp = g * (A(1) - z) * (A(1) - nn * nn);
    const A drp = dnp * hn * r * (A(1) - r);
    const A dzp = g * (static_cast<A>(pp[j]) - nn) * z * (A(1) - z);
    di[j] = static_cast<T>(drp);
    di[H + j] = static_cast<T>(dzp);
    di[2 * H + j] = static_cast<T>(dnp);
    dg[j] = static_cast<T>(drp);
    dg[H + j] = static_cast<T>(dzp);
    dg[2 * H + j] = static_cast<T>(dnp * r);
    dp[j] = static_cast<T>(g * z);
  }
}

template <typename T> struct GruCellBackward {
  static void run(const Tensor& dgi, const Tensor& dgh, const Tensor& dh_prev, const Tensor& dh, const Tensor& ws,
                  const Tensor& h_prev) {
    const int64_t N = h_prev.size(0), H = h_prev.size(1);
    Absent<T> ab;
    const T *gp = ab.in(in<T>(dh), N, H), *wp = in<T>(ws), *pp = in<T>(h_prev);
    T *dip = out<T>(dgi), *dhp = out<T>(dgh), *dpp = ab.out(out<T>(dh_prev), N, H);
    for_rows(N, H, [&](int64_t n) {
      gru_backward_row<T, acc_t<T>>(dip + n * 3 * H, dhp + n * 3 * H, dpp + n * H, gp + n * H, wp + n * 4 * H,
                                    pp + n * H, H);
    });
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_rnn) {
  using D = DeviceType;
  dispatch::register_types<OpId::lstm_cell_fused, LstmCell, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::lstm_cell_fused_backward, LstmCellBackward, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::gru_cell_fused, GruCell, float, double, Half, BFloat16>(D::kCPU);
  dispatch::register_types<OpId::gru_cell_fused_backward, GruCellBackward, float, double, Half, BFloat16>(D::kCPU);
}

}  // namespace mpx::cpu
