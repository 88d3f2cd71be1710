// CPU convolution kernels: im2col/col2im + Eigen GEMM, parallel over chunks of images; f32 goes
// to oneDNN first when the library is built with it (MPX_WITH_ONEDNN).
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/conv.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#ifdef MPX_WITH_ONEDNN
#include "ops/cpu/conv_onednn.h"
#endif

namespace mpx::cpu {
namespace {
using kernels::Conv2dParams;

template <typename S>
using RMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename S>
using MapR = Eigen::Map<RMat<S>, 0, Eigen::OuterStride<>>;
template <typename S>
using CMapR = Eigen::Map<const RMat<S>, 0, Eigen::OuterStride<>>;

// Small spatial outputs make skinny GEMMs; chunks of images are batched side by side in
// the column matrix until it has about this many columns (Eigen's kernels want width).
constexpr int64_t kTargetCols = 256;
// Weight gradients are summed over a fixed number of partial buffers, so the result
// does not depend on the thread count.
constexpr int64_t kWeightBuckets = 4;

// Sizes of one convolution in "conv2d forward" terms: x is the input, y the output.
struct Geom {
  int64_t N, C, H, W, O, Ho, Wo, kh, kw, G, Cg, Og, K, P, HW;
  int64_t sh, sw, ph, pw, dh, dw;
  bool pointwise;  // the column matrix of an image is the image itself
  int64_t nb, nchunks;
};

Geom geom(const IntList& xs, const IntList& ws, const IntList& ys, const Conv2dParams& p) {
  Geom g{};
  g.N = xs[0]; g.C = xs[1]; g.H = xs[2]; g.W = xs[3];
  g.O = ys[1]; g.Ho = ys[2]; g.Wo = ys[3];
  g.kh = ws[2]; g.kw = ws[3];
  g.G = p.groups; g.Cg = g.C / g.G; g.Og = g.O / g.G;
  g.K = g.Cg * g.kh * g.kw;
  g.P = g.Ho * g.Wo;
  g.HW = g.H * g.W;
  g.sh = p.stride[0]; g.sw = p.stride[1];
  g.ph = p.padding[0]; g.pw = p.padding[1];
  g.dh = p.dilation[0]; g.dw = p.dilation[1];
  g.pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  g.nb = std::clamp<int64_t>((kTargetCols + g.P - 1) / std::max<int64_t>(g.P, 1), 1, std::max<int64_t>(g.N, 1));
  g.nchunks = (g.N + g.nb - 1) / g.nb;
  return g;
}

// Per-thread scratch that only grows, so steady-state training allocates nothing here.
template <typename S>
S* scratch(int slot, size_t n) {
  thread_local std::vector<S> bufs[3];
  auto& b = bufs[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// col[k, p] (row stride ld) for k = (c, i, j) and p = (oh, ow) from one image's group of channels.
template <typename S>
void im2col(const S* x, const Geom& g, S* col, int64_t ld) {
  if (g.pointwise) {
    for (int64_t c = 0; c < g.Cg; ++c) std::memcpy(col + c * ld, x + c * g.HW, sizeof(S) * g.P);
    return;
  }
  for (int64_t c = 0; c < g.Cg; ++c) {
    const S* xc = x + c * g.HW;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        S* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        const int64_t iw0 = j * g.dw - g.pw;
        // Output columns whose input column lies inside the image.
        const int64_t lo = std::clamp<int64_t>(g.sw == 1 ? -iw0 : (-iw0 + g.sw - 1) / g.sw, 0, g.Wo);
        const int64_t hi = std::clamp<int64_t>(g.W - iw0 <= 0 ? 0 : (g.W - iw0 + g.sw - 1) / g.sw, lo, g.Wo);
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          S* r = row + oh * g.Wo;
          if (ih < 0 || ih >= g.H) {
            fill_bits(r, g.Wo, S(0));
            continue;
          }
          const S* xr = xc + ih * g.W + iw0;
          fill_bits(r, lo, S(0));
          if (g.sw == 1) {
            std::memcpy(r + lo, xr + lo, sizeof(S) * (hi - lo));
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) r[ow] = xr[ow * g.sw];
          }
          fill_bits(r + hi, g.Wo - hi, S(0));
        }
      }
    }
  }
}

// The adjoint of im2col: accumulates col into one image's group of channels (already zeroed).
template <typename S>
void col2im(const S* col, int64_t ld, const Geom& g, S* x) {
  for (int64_t c = 0; c < g.Cg; ++c) {
    S* xc = x + c * g.HW;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const S* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        const int64_t iw0 = j * g.dw - g.pw;
        const int64_t lo = std::clamp<int64_t>(g.sw == 1 ? -iw0 : (-iw0 + g.sw - 1) / g.sw, 0, g.Wo);
        const int64_t hi = std::clamp<int64_t>(g.W - iw0 <= 0 ? 0 : (g.W - iw0 + g.sw - 1) / g.sw, lo, g.Wo);
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const S* r = row + oh * g.Wo;
          S* xr = xc + ih * g.W + iw0;
          if (g.sw == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) xr[ow] += r[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) xr[ow * g.sw] += r[ow];
          }
        }
      }
    }
  }
}

template <typename S>
void forward(S* y, const S* x, const S* w, const S* b, const Geom& g) {
#pragma omp parallel for schedule(static) if (g.nchunks > 1)
  for (int64_t ch = 0; ch < g.nchunks; ++ch) {
    const int64_t n0 = ch * g.nb, cnt = std::min(g.nb, g.N - n0), cols = cnt * g.P;
    for (int64_t grp = 0; grp < g.G; ++grp) {
      CMapR<S> Wg(w + grp * g.Og * g.K, g.Og, g.K, Eigen::OuterStride<>(g.K));
      const S* B;
      if (g.pointwise && cnt == 1) {
        B = x + n0 * g.C * g.HW + grp * g.Cg * g.HW;
      } else {
        S* col = scratch<S>(0, static_cast<size_t>(g.K * cols));
        for (int64_t j = 0; j < cnt; ++j) im2col(x + (n0 + j) * g.C * g.HW + grp * g.Cg * g.HW, g, col + j * g.P, cols);
        B = col;
      }
      CMapR<S> Bm(B, g.K, cols, Eigen::OuterStride<>(cols));
      if (cnt == 1) {
        S* yo = y + n0 * g.O * g.P + grp * g.Og * g.P;
        MapR<S> Y(yo, g.Og, g.P, Eigen::OuterStride<>(g.P));
        Y.noalias() = Wg * Bm;
        if (b)
          for (int64_t o = 0; o < g.Og; ++o) {
            const S bv = b[grp * g.Og + o];
            S* r = yo + o * g.P;
            for (int64_t q = 0; q < g.P; ++q) r[q] += bv;
          }
      } else {
        S* tmp = scratch<S>(1, static_cast<size_t>(g.Og * cols));
        MapR<S> T(tmp, g.Og, cols, Eigen::OuterStride<>(cols));
        T.noalias() = Wg * Bm;
        for (int64_t j = 0; j < cnt; ++j)
          for (int64_t o = 0; o < g.Og; ++o) {
            S* dst = y + (n0 + j) * g.O * g.P + (grp * g.Og + o) * g.P;
            const S* src = tmp + o * cols + j * g.P;
            const S bv = b ? b[grp * g.Og + o] : S(0);
            for (int64_t q = 0; q < g.P; ++q) dst[q] = src[q] + bv;
          }
      }
    }
  }
}

// gx (C channels, H x W) from gy (O channels, Ho x Wo), plus an optional per-channel bias.
template <typename S>
void backward_input(S* gx, const S* gy, const S* w, const S* b, const Geom& g) {
#pragma omp parallel for schedule(static) if (g.nchunks > 1)
  for (int64_t ch = 0; ch < g.nchunks; ++ch) {
    const int64_t n0 = ch * g.nb, cnt = std::min(g.nb, g.N - n0), cols = cnt * g.P;
    for (int64_t grp = 0; grp < g.G; ++grp) {
      CMapR<S> Wg(w + grp * g.Og * g.K, g.Og, g.K, Eigen::OuterStride<>(g.K));
      const S* A;
      if (cnt == 1) {
        A = gy + n0 * g.O * g.P + grp * g.Og * g.P;
      } else {
        S* gyc = scratch<S>(1, static_cast<size_t>(g.Og * cols));
        for (int64_t j = 0; j < cnt; ++j)
          for (int64_t o = 0; o < g.Og; ++o)
            std::memcpy(gyc + o * cols + j * g.P, gy + (n0 + j) * g.O * g.P + (grp * g.Og + o) * g.P, sizeof(S) * g.P);
        A = gyc;
      }
      CMapR<S> GY(A, g.Og, cols, Eigen::OuterStride<>(cols));
      if (g.pointwise && cnt == 1) {
        MapR<S> GX(gx + n0 * g.C * g.HW + grp * g.Cg * g.HW, g.Cg, g.HW, Eigen::OuterStride<>(g.HW));
        GX.noalias() = Wg.transpose() * GY;
        continue;
      }
      S* col = scratch<S>(0, static_cast<size_t>(g.K * cols));
      MapR<S> Col(col, g.K, cols, Eigen::OuterStride<>(cols));
      Col.noalias() = Wg.transpose() * GY;
      for (int64_t j = 0; j < cnt; ++j) {
        S* gxi = gx + (n0 + j) * g.C * g.HW + grp * g.Cg * g.HW;
        if (g.pointwise) {
          for (int64_t c = 0; c < g.Cg; ++c) std::memcpy(gxi + c * g.HW, col + c * cols + j * g.P, sizeof(S) * g.P);
        } else {
          fill_bits(gxi, g.Cg * g.HW, S(0));
          col2im(col + j * g.P, cols, g, gxi);
        }
      }
    }
    if (b)
      for (int64_t j = 0; j < cnt; ++j)
        for (int64_t c = 0; c < g.C; ++c) {
          S* r = gx + (n0 + j) * g.C * g.HW + c * g.HW;
          const S bv = b[c];
          for (int64_t q = 0; q < g.HW; ++q) r[q] += bv;
        }
  }
}

template <typename S>
void backward_weight(S* gw, const S* gy, const S* x, const Geom& g) {
  const int64_t wsize = g.O * g.K;
  const int64_t nbk = std::max<int64_t>(1, std::min(kWeightBuckets, g.nchunks));
  // Bucket 0 accumulates straight into gw; the others into partials summed in order.
  std::vector<S> partial(static_cast<size_t>((nbk - 1) * wsize));
#pragma omp parallel for schedule(static) if (nbk > 1)
  for (int64_t bk = 0; bk < nbk; ++bk) {
    S* acc = bk == 0 ? gw : partial.data() + (bk - 1) * wsize;
    std::fill(acc, acc + wsize, S(0));
    const int64_t c0 = bk * g.nchunks / nbk, c1 = (bk + 1) * g.nchunks / nbk;
    for (int64_t ch = c0; ch < c1; ++ch) {
      const int64_t n0 = ch * g.nb, cnt = std::min(g.nb, g.N - n0), cols = cnt * g.P;
      for (int64_t grp = 0; grp < g.G; ++grp) {
        const S* A;
        if (cnt == 1) {
          A = gy + n0 * g.O * g.P + grp * g.Og * g.P;
        } else {
          S* gyc = scratch<S>(1, static_cast<size_t>(g.Og * cols));
          for (int64_t j = 0; j < cnt; ++j)
            for (int64_t o = 0; o < g.Og; ++o)
              std::memcpy(gyc + o * cols + j * g.P, gy + (n0 + j) * g.O * g.P + (grp * g.Og + o) * g.P, sizeof(S) * g.P);
          A = gyc;
        }
        const S* B;
        if (g.pointwise && cnt == 1) {
          B = x + n0 * g.C * g.HW + grp * g.Cg * g.HW;
        } else {
          S* col = scratch<S>(0, static_cast<size_t>(g.K * cols));
          for (int64_t j = 0; j < cnt; ++j) im2col(x + (n0 + j) * g.C * g.HW + grp * g.Cg * g.HW, g, col + j * g.P, cols);
          B = col;
        }
        CMapR<S> GY(A, g.Og, cols, Eigen::OuterStride<>(cols));
        CMapR<S> Col(B, g.K, cols, Eigen::OuterStride<>(cols));
        MapR<S> GW(acc + grp * g.Og * g.K, g.Og, g.K, Eigen::OuterStride<>(g.K));
        GW.noalias() += GY * Col.transpose();
      }
    }
  }
  for (int64_t bk = 1; bk < nbk; ++bk) {
    const S* p = partial.data() + (bk - 1) * wsize;
    for (int64_t i = 0; i < wsize; ++i) gw[i] += p[i];
  }
}

// f32 and bf16 try oneDNN first (it returns false for what it cannot run). The choice is made
// here, in the entry points, rather than by a second registration, so it never depends on the
// order in which files' static registrations run. oneDNN's bf16 convolutions accumulate in f32
// and round each output once: the "compute in f32, round once" contract of our f16/bf16
// kernels, without widened copies (ResNet-18 O1 bf16 on AVX512-BF16: see bench/RESULTS.md).
// f64 stays on the Eigen kernels; f16, and bf16 oneDNN refuses, compute on f32 copies.
template <typename T>
constexpr bool kNative = std::is_same_v<T, float> || std::is_same_v<T, double>;
template <typename T>
constexpr bool kOneDnn = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;

// f16/bf16 inputs compute in f32 copies (on oneDNN when it is there) and round the result back
// once. The copies keep a channels-last layout, which oneDNN takes as it is, instead of
// converting it to row-major and the result back.
Tensor widen(const Tensor& t) {
  if (!t.defined()) return t;
  const Tensor f = t.to(kFloat32);
  return f.is_contiguous() || f.is_contiguous(MemoryFormat::ChannelsLast) ? f : f.contiguous();
}
Tensor f32_like(const Tensor& t) {
  return empty(t.sizes(), TensorOptions(kFloat32).memory_format(t.suggest_memory_format()));
}
// The Eigen kernels run on NCHW: channels-last outputs are computed in a dense temporary.
Tensor dense_out(const Tensor& t) { return t.is_contiguous() ? t : empty(t.sizes(), t.options()); }
void finish(const Tensor& out, const Tensor& dense) {
  if (!dense.is_same(out)) Tensor(out).copy_(dense);
}
#ifndef MPX_WITH_ONEDNN
namespace onednn {  // stand-ins so the f16/bf16 paths read the same with or without oneDNN
inline bool conv_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) { return false; }
inline bool conv_backward_input(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  return false;
}
inline bool conv_backward_weight(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) { return false; }
}  // namespace onednn
#endif
template <typename S>
const S* ptr(const Tensor& t) { return t.defined() ? static_cast<const S*>(t.raw_data()) : nullptr; }

template <typename T> struct ConvForward {
  static void run(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
    if (y.numel() == 0) return;
    if constexpr (kOneDnn<T>) if (onednn::conv_forward(y, x, w, b, p)) return;
    if constexpr (kNative<T>) {
      const Geom g = geom(x.sizes(), w.sizes(), y.sizes(), p);
      const Tensor xc = x.contiguous(), yc = dense_out(y), wc = w.contiguous();
      forward<T>(static_cast<T*>(yc.raw_data()), ptr<T>(xc), ptr<T>(wc), ptr<T>(b), g);
      finish(y, yc);
    } else {
      const Tensor yf = f32_like(y);
      ConvForward<float>::run(yf, widen(x), widen(w), widen(b), p);
      Tensor(y).copy_(yf);
    }
  }
};

template <typename T> struct ConvBackwardInput {
  static void run(const Tensor& gx, const Tensor& gy, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
    if (gx.numel() == 0) return;
    if (gy.numel() == 0 || w.numel() == 0) {
      Tensor(gx).zero_();
      if (b.defined()) Tensor(gx).add_(b.view({1, -1, 1, 1}));
      return;
    }
    if constexpr (kOneDnn<T>) if (onednn::conv_backward_input(gx, gy, w, b, p)) return;
    if constexpr (kNative<T>) {
      const Geom g = geom(gx.sizes(), w.sizes(), gy.sizes(), p);
      const Tensor gyc = gy.contiguous(), gxc = dense_out(gx), wc = w.contiguous();
      backward_input<T>(static_cast<T*>(gxc.raw_data()), ptr<T>(gyc), ptr<T>(wc), ptr<T>(b), g);
      finish(gx, gxc);
    } else {
      const Tensor gxf = f32_like(gx);
      ConvBackwardInput<float>::run(gxf, widen(gy), widen(w), widen(b), p);
      Tensor(gx).copy_(gxf);
    }
  }
};

template <typename T> struct ConvBackwardWeight {
  static void run(const Tensor& gw, const Tensor& gy, const Tensor& x, const Conv2dParams& p) {
    if (gw.numel() == 0) return;
    if (gy.numel() == 0) { Tensor(gw).zero_(); return; }
    if constexpr (kOneDnn<T>) if (onednn::conv_backward_weight(gw, gy, x, p)) return;
    if constexpr (kNative<T>) {
      const Geom g = geom(x.sizes(), gw.sizes(), gy.sizes(), p);
      const Tensor gwc = dense_out(gw);
      backward_weight<T>(static_cast<T*>(gwc.raw_data()), ptr<T>(gy.contiguous()), ptr<T>(x.contiguous()), g);
      finish(gw, gwc);
    } else {
      const Tensor gwf = f32_like(gw);
      ConvBackwardWeight<float>::run(gwf, widen(gy), widen(x), p);
      Tensor(gw).copy_(gwf);
    }
  }
};

}  // namespace

}  // namespace mpx::cpu

namespace mpx {
std::string cpu_conv_backend() {
#ifdef MPX_WITH_ONEDNN
  return cpu::onednn::version();
#else
  return "im2col + Eigen GEMM";
#endif
}
bool cpu_conv_native(DType dt) {
  if (dt == kFloat32 || dt == kFloat64) return true;
#ifdef MPX_WITH_ONEDNN
  if (dt == kBFloat16) return cpu::onednn::bf16_native();
#endif
  return false;
}
}  // namespace mpx

namespace mpx::cpu {
MPX_REGISTER_KERNELS(cpu_conv) {
  dispatch::register_types<OpId::conv2d, ConvForward, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::conv2d_backward_input, ConvBackwardInput, float, double, Half, BFloat16>(DeviceType::kCPU);
  // conv_transpose2d's forward is exactly conv2d's input gradient (plus bias).
  dispatch::register_types<OpId::conv_transpose2d, ConvBackwardInput, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::conv2d_backward_weight, ConvBackwardWeight, float, double, Half, BFloat16>(DeviceType::kCPU);
}

}  // namespace mpx::cpu
