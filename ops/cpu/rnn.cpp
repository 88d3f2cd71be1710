// CPU kernels of the fused LSTM/GRU cells: the pointwise half of a step (f32 math for f16/bf16,
// one rounding per stored value), rows of the batch in parallel.
#include <cmath>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/rnn_kernels.h"

namespace mpx::cpu {
namespace {

template <typename A> A sigm(A v) { return A(1) / (A(1) + std::exp(-v)); }
template <typename T> const T* in(const Tensor& t) { return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr; }
template <typename T> T* out(const Tensor& t) { return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr; }
template <typename T, typename A> A at(const T* p, int64_t i) { return p ? static_cast<A>(p[i]) : A(0); }

// Rows of H values per parallel chunk.
template <typename F> void for_rows(int64_t N, int64_t H, F f) {
  parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(4 * H, 1)), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) f(n);
  });
}

template <typename T> struct LstmCell {
  static void run(const Tensor& h_out, const Tensor& c_out, const Tensor& act, const Tensor& gates,
                  const Tensor& c_prev) {
    using A = acc_t<T>;
    const int64_t N = c_prev.size(0), H = c_prev.size(1);
    const T *gp = in<T>(gates), *cp = in<T>(c_prev);
    T *hp = out<T>(h_out), *cop = out<T>(c_out), *ap = out<T>(act);
    for_rows(N, H, [&](int64_t n) {
      const T* g = gp + n * 4 * H;
      T* a = ap + n * 4 * H;
      for (int64_t j = 0; j < H; ++j) {
        const A i = sigm(static_cast<A>(g[j])), f = sigm(static_cast<A>(g[H + j]));
        const A gg = std::tanh(static_cast<A>(g[2 * H + j])), o = sigm(static_cast<A>(g[3 * H + j]));
        const A c = f * static_cast<A>(cp[n * H + j]) + i * gg;
        cop[n * H + j] = static_cast<T>(c);
        hp[n * H + j] = static_cast<T>(o * std::tanh(c));
        a[j] = static_cast<T>(i);
        a[H + j] = static_cast<T>(f);
        a[2 * H + j] = static_cast<T>(gg);
        a[3 * H + j] = static_cast<T>(o);
      }
    });
  }
};

template <typename T> struct LstmCellBackward {
  static void run(const Tensor& dgates, const Tensor& dc_prev, const Tensor& dh, const Tensor& dc, const Tensor& act,
                  const Tensor& c_prev, const Tensor& c_out) {
    using A = acc_t<T>;
    const int64_t N = c_prev.size(0), H = c_prev.size(1);
    const T *dhp = in<T>(dh), *dcp = in<T>(dc), *ap = in<T>(act), *cp = in<T>(c_prev), *cop = in<T>(c_out);
    T *dgp = out<T>(dgates), *dcpp = out<T>(dc_prev);
    for_rows(N, H, [&](int64_t n) {
      const T* a = ap + n * 4 * H;
      T* dg = dgp + n * 4 * H;
      for (int64_t j = 0; j < H; ++j) {
        const int64_t k = n * H + j;
        const A i = static_cast<A>(a[j]), f = static_cast<A>(a[H + j]), g = static_cast<A>(a[2 * H + j]),
                o = static_cast<A>(a[3 * H + j]);
        const A tc = std::tanh(static_cast<A>(cop[k]));
        const A gh = at<T, A>(dhp, k);
        const A dct = at<T, A>(dcp, k) + gh * o * (A(1) - tc * tc);
        dg[j] = static_cast<T>(dct * g * i * (A(1) - i));
        dg[H + j] = static_cast<T>(dct * static_cast<A>(cp[k]) * f * (A(1) - f));
        dg[2 * H + j] = static_cast<T>(dct * i * (A(1) - g * g));
        dg[3 * H + j] = static_cast<T>(gh * tc * o * (A(1) - o));
        if (dcpp) dcpp[k] = static_cast<T>(dct * f);
      }
    });
  }
};

template <typename T> struct GruCell {
  static void run(const Tensor& h_out, const Tensor& ws, const Tensor& gi, const Tensor& gh, const Tensor& h_prev) {
    using A = acc_t<T>;
    const int64_t N = h_prev.size(0), H = h_prev.size(1);
    const T *ip = in<T>(gi), *hp = in<T>(gh), *pp = in<T>(h_prev);
    T *op = out<T>(h_out), *wp = out<T>(ws);
    for_rows(N, H, [&](int64_t n) {
      const T *x = ip + n * 3 * H, *h = hp + n * 3 * H;
      T* w = wp + n * 4 * H;
      for (int64_t j = 0; j < H; ++j) {
        const A r = sigm(static_cast<A>(x[j]) + static_cast<A>(h[j]));
        const A z = sigm(static_cast<A>(x[H + j]) + static_cast<A>(h[H + j]));
        const A hn = static_cast<A>(h[2 * H + j]);
        const A nn = std::tanh(static_cast<A>(x[2 * H + j]) + r * hn);
        op[n * H + j] = static_cast<T>((A(1) - z) * nn + z * static_cast<A>(pp[n * H + j]));
        w[j] = static_cast<T>(r);
        w[H + j] = static_cast<T>(z);
        w[2 * H + j] = static_cast<T>(nn);
        w[3 * H + j] = h[2 * H + j];
      }
    });
  }
};

template <typename T> struct GruCellBackward {
  static void run(const Tensor& dgi, const Tensor& dgh, const Tensor& dh_prev, const Tensor& dh, const Tensor& ws,
                  const Tensor& h_prev) {
    using A = acc_t<T>;
    const int64_t N = h_prev.size(0), H = h_prev.size(1);
    const T *gp = in<T>(dh), *wp = in<T>(ws), *pp = in<T>(h_prev);
    T *dip = out<T>(dgi), *dhp = out<T>(dgh), *dpp = out<T>(dh_prev);
    for_rows(N, H, [&](int64_t n) {
      const T* w = wp + n * 4 * H;
      T *di = dip + n * 3 * H, *dg = dhp + n * 3 * H;
      for (int64_t j = 0; j < H; ++j) {
        const int64_t k = n * H + j;
        const A r = static_cast<A>(w[j]), z = static_cast<A>(w[H + j]), nn = static_cast<A>(w[2 * H + j]),
                hn = static_cast<A>(w[3 * H + j]);
        const A g = at<T, A>(gp, k);
        const A dnp = g * (A(1) - z) * (A(1) - nn * nn);
        const A drp = dnp * hn * r * (A(1) - r);
        const A dzp = g * (static_cast<A>(pp[k]) - nn) * z * (A(1) - z);
        di[j] = static_cast<T>(drp);
        di[H + j] = static_cast<T>(dzp);
        di[2 * H + j] = static_cast<T>(dnp);
        dg[j] = static_cast<T>(drp);
        dg[H + j] = static_cast<T>(dzp);
        dg[2 * H + j] = static_cast<T>(dnp * r);
        if (dpp) dpp[k] = static_cast<T>(g * z);
      }
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
