// Convolutions run as one oneDNN matrix product each: bf16 on small maps (im2col / col2im, AMX), f32 weight gradients there, and 1x1-output cases.
#include "ops/cpu/conv_onednn.h"
#include "ops/cpu/onednn_util.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/half.h"

namespace mpx::cpu::onednn {
namespace {
using kernels::Conv2dParams;
using md = dnnl::memory::desc;
using dt = dnnl::memory::data_type;

// Why: on the deep layers of a CNN fed small images (7x7 maps and below at batch 32) oneDNN
// 2.x's convolution kernels use AMX poorly, while its matmul runs the same products as one long
// GEMM at several times the rate. Measured on an AMX Xeon, 2 threads, batch 32, 512->512 3x3 on
// 4x4 maps: convolution forward 5.0 ms, weight gradient 22-24 (its f32 kernel 15-17), and the
// equal-sized bf16 matmul (512 x 512 x 4608) 2.7-2.9 ms. Products are bf16 x bf16 summed in f32,
// and each output is rounded to bf16 once (the input gradient sums its k x k overlapping terms
// in f32 before that rounding): the contract of every other bf16 kernel here.

// A row-major [m, k] x [k, n] product of bf16 or f32 operands (either may be stored transposed)
// into a row-major [m, n] f32 or bf16 matrix, on oneDNN's matmul when it runs its brgemm kernels
// here (and, with amx_only, its AMX ones).
struct Gemm {
  dnnl::matmul prim;
  md a, b, c, scratch;
};
using GemmKey = std::array<int64_t, 8>;

std::shared_ptr<Gemm> gemm(int64_t m, int64_t k, int64_t n, bool a_t, bool b_t, dt in, dt out, bool amx_only) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<GemmKey, std::shared_ptr<Gemm>, KeyHash>();
  const GemmKey key{m, k, n, (a_t ? 1 : 0) + (b_t ? 2 : 0), static_cast<int64_t>(in), static_cast<int64_t>(out),
                    amx_only ? 1 : 0, omp_get_max_threads()};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  std::shared_ptr<Gemm> g;
  try {
    auto e = std::make_shared<Gemm>();
    e->a = md({m, k}, in, a_t ? dnnl::memory::dims{1, m} : dnnl::memory::dims{k, 1});
    e->b = md({k, n}, in, b_t ? dnnl::memory::dims{1, k} : dnnl::memory::dims{n, 1});
    e->c = md({m, n}, out, {n, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->a, e->b, e->c), attr, engine());
    const char* impl = pd.impl_info_str();
    if (std::strncmp(impl, "brg", 3) == 0 && (!amx_only || std::strstr(impl, "amx") != nullptr)) {
      e->scratch = pd.scratchpad_desc();
      e->prim = dnnl::matmul(pd);
      g = e;
    }
  } catch (const dnnl::error&) {
    g = nullptr;
  }
  cache->emplace(key, g);
  return g;
}

void run(Gemm& g, const void* a, const void* b, void* c) {
  dnnl::stream& s = stream();
  g.prim.execute(s, {{DNNL_ARG_SRC, dnnl::memory(g.a, engine(), const_cast<void*>(a))},
                     {DNNL_ARG_WEIGHTS, dnnl::memory(g.b, engine(), const_cast<void*>(b))},
                     {DNNL_ARG_DST, dnnl::memory(g.c, engine(), c)},
                     {DNNL_ARG_SCRATCHPAD, dnnl::memory(g.scratch, engine(), buffer(4, std::max<size_t>(
                                                                                          g.scratch.get_size(), 64)))}});
  s.wait();
}

// One convolution's sizes in forward terms; x [N, C, H, W] and y [N, O, Ho, Wo], NCHW.
struct Shape {
  int64_t N, C, H, W, O, Ho, Wo, kh, kw, sh, sw, ph, pw;
  int64_t rows() const { return C * kh * kw; }  // of the NCHW column matrix: (c, i, j); NHWC's columns (i, j, c)
  int64_t cols() const { return N * Ho * Wo; }  // of the NCHW column matrix: (n, ho, wo); NHWC's rows
};

// The activations' layout when the GEMM path may take the case: 0 NCHW (weights OIHW), 1
// channels-last (weights OHWI, as `model->to(MemoryFormat::ChannelsLast)` leaves them), -1
// neither. bf16 or f32 (all three alike), one group, no dilation.
int gemm_layout(const Tensor& a1, const Tensor& a2, const Tensor& w, const Conv2dParams& p) {
  const DType t = a1.dtype();
  if ((t != kBFloat16 && t != kFloat32) || a2.dtype() != t || w.dtype() != t || p.groups != 1 ||
      p.dilation[0] != 1 || p.dilation[1] != 1 || p.padding[0] < 0 || p.padding[1] < 0)
    return -1;
  if (a1.is_contiguous() && a2.is_contiguous() && w.is_contiguous()) return 0;
  const auto cl = MemoryFormat::ChannelsLast;
  return a1.is_contiguous(cl) && a2.is_contiguous(cl) && w.is_contiguous(cl) ? 1 : -1;
}

// Where the GEMM beats oneDNN's convolution kernels: small maps, and enough channels that the
// product fills AMX tiles. Per direction (same machine, ms per call, convolution / GEMM path):
// the weight gradient wins up to 7x7 outputs from 64 channels on (256->256 on 7x7 8.1 / 3.0,
// 128->256 stride 2 to 7x7 4.2 / 1.4, 512->512 on 4x4 12.2 / 2.9, on 2x2 9.0 / 1.4, 64->64 on
// 4x4 0.25 / 0.20, on 7x7 even); the forward and input gradient only from 4x4 down and with
// C x O >= 64 x 128 (on 7x7 the convolution kernels are faster: forward 1.7 / 5.0; on 4x4
// 512->512 forward 4.3 / 4.1, input gradient 6.0 / 4.8, 64->128 stride 2 input gradient
// 0.63-0.74 / 0.35; on 2x2 3.8 / 1.1 and 5.7 / 1.7; but 64->64 on 4x4 0.15 / 0.20 and
// 0.18 / 0.33). 1x1 maps are one_tap's (below).
struct Limits {
  int64_t max_maps, min_channel_product;
};
constexpr Limits kWeightGradient{49, 64 * 64}, kData{16, 64 * 128};
// In f32 (no AMX; oneDNN's matmul and convolution share the AVX-512 FMA rate) only the weight
// gradient of the widest small-map layers gains: 1 / 2 threads, convolution / GEMM path, 512->512
// on 4x4 34.4 / 27.9 and 17.6 / 14.0 ms, on 3x3 22.0 / 15.2 and 10.5 / 6.6, on 2x2 22.3 / 7.0;
// 256->512 stride 2 to 4x4 15.5 / 11.1; but 256->256 on 4x4 even (7.0 / 6.6, 2.7 / 3.5), 256->256
// on 7x7 18.8 / 22.6, and the forward and input gradient slower from 4x4 on (512->512 4x4 forward
// 22.2 / 27.9).
constexpr Limits kWeightGradientF32{16, 256 * 512};
bool small_maps(const Shape& s, Limits lim) {
  const int64_t maps = s.Ho * s.Wo;
  return maps >= 2 && maps <= lim.max_maps && s.C >= 64 && s.O >= 64 && s.C * s.O >= lim.min_channel_product &&
         s.kh * s.kw > 1;
}
Shape shape_of(const Tensor& x, const Tensor& y, int64_t kh, int64_t kw, const Conv2dParams& p) {
  return Shape{x.size(0), x.size(1), x.size(2), x.size(3), y.size(1), y.size(2), y.size(3), kh, kw,
               p.stride[0], p.stride[1], p.padding[0], p.padding[1]};
}

// For each kernel tap (i, j) and output position q = (ho, wo): the offset in an input plane
// that the tap reads there, ho * sh - ph + i rows and wo * sw - pw + j columns in, or -1 in the
// padding. im2col and col2im walk it per plane instead of testing bounds per element.
std::vector<int32_t> tap_offsets(const Shape& s) {
  std::vector<int32_t> m(static_cast<size_t>(s.kh * s.kw * s.Ho * s.Wo));
  for (int64_t i = 0; i < s.kh; ++i)
    for (int64_t j = 0; j < s.kw; ++j)
      for (int64_t ho = 0; ho < s.Ho; ++ho)
        for (int64_t wo = 0; wo < s.Wo; ++wo) {
          const int64_t h = ho * s.sh - s.ph + i, w = wo * s.sw - s.pw + j;
          m[static_cast<size_t>(((i * s.kw + j) * s.Ho + ho) * s.Wo + wo)] =
              h >= 0 && h < s.H && w >= 0 && w < s.W ? static_cast<int32_t>(h * s.W + w) : -1;
        }
  return m;
}

// col [(c, i, j), (n, ho, wo)] = x[n, c, ho * sh - ph + i, wo * sw - pw + j], 0 in the padding.
template <typename T> void im2col(T* col, const T* x, const Shape& s) {
  const std::vector<int32_t> taps = tap_offsets(s);
  const int64_t cols = s.cols(), HoWo = s.Ho * s.Wo, kk = s.kh * s.kw;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t n = 0; n < s.N; ++n) {
      const T* plane = x + (n * s.C + c) * s.H * s.W;
      for (int64_t t = 0; t < kk; ++t) {
        const int32_t* m = taps.data() + t * HoWo;
        T* d = col + (c * kk + t) * cols + n * HoWo;
        for (int64_t q = 0; q < HoWo; ++q) d[q] = m[q] >= 0 ? plane[m[q]] : T{0};
      }
    }
}

// Channels-last: col [(n, ho, wo), (i, j, c)] = x[n, ho * sh - ph + i, wo * sw - pw + j, c], whole
// channel rows at a time.
template <typename T> void im2col_nhwc(T* col, const T* x, const Shape& s) {
  const int64_t K = s.rows();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < s.cols(); ++r) {
    const int64_t n = r / (s.Ho * s.Wo), ho = r / s.Wo % s.Ho, wo = r % s.Wo;
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        const int64_t h = ho * s.sh - s.ph + i, w = wo * s.sw - s.pw + j;
        T* d = col + r * K + (i * s.kw + j) * s.C;
        if (h >= 0 && h < s.H && w >= 0 && w < s.W) std::memcpy(d, x + ((n * s.H + h) * s.W + w) * s.C, s.C * sizeof(T));
        else std::fill(d, d + s.C, T{0});
      }
  }
}

// [A, B, L] -> [B, A, L] (NCHW's [N, O, HW] and the GEMM's [O, N, HW]).
template <typename T> void swap_outer(T* dst, const T* src, int64_t A, int64_t B, int64_t L) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < A; ++a) std::memcpy(dst + (b * A + a) * L, src + (a * B + b) * L, L * sizeof(T));
}

uint16_t to_bf16(float f) { return BFloat16(f).x; }
// The element types the small-map path runs: bf16 (its 16 bits) and f32. `narrow` is the one
// rounding of an f32 sum to T; `kAmxOnly` says the product is only worth it on AMX tiles.
template <typename T> constexpr dt kType = std::is_same_v<T, float> ? dt::f32 : dt::bf16;
template <typename T> constexpr bool kAmxOnly = !std::is_same_v<T, float>;
template <typename T> T narrow(float f) {
  if constexpr (std::is_same_v<T, float>) return f;
  else return to_bf16(f);
}
template <typename T> T* scratch(int slot, int64_t n) { return static_cast<T*>(buffer(slot, static_cast<size_t>(n) * sizeof(T))); }

// The bias widened to f32 once per call (zeros without one), so the output loops read plain floats.
std::vector<float> bias_f32(const Tensor& b, int64_t O) {
  std::vector<float> v(static_cast<size_t>(O), 0.0f);
  if (b.defined())
    for (int64_t o = 0; o < O; ++o)
      v[static_cast<size_t>(o)] = b.dtype() == kFloat32 ? static_cast<const float*>(b.raw_data())[o]
                                                        : static_cast<float>(static_cast<const BFloat16*>(b.raw_data())[o]);
  return v;
}

// The NCHW forms: the column matrix is [(c, i, j), (n, ho, wo)], and the GEMM's [O, (n, ho, wo)]
// side is NCHW's [N, O, HW] with its outer dims swapped.
template <typename T> bool forward_nchw(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Shape& s) {
  // y' [O, (n, ho, wo)] = w [O, (c, i, j)] col [(c, i, j), (n, ho, wo)], in f32; then the bias
  // and the one rounding on the way to NCHW.
  auto g = gemm(s.O, s.rows(), s.cols(), false, false, kType<T>, dt::f32, kAmxOnly<T>);
  if (!g) return false;
  T* col = scratch<T>(0, s.rows() * s.cols());
  float* acc = scratch<float>(1, s.O * s.cols());
  im2col(col, static_cast<const T*>(x.raw_data()), s);
  run(*g, w.raw_data(), col, acc);
  auto* out = static_cast<T*>(y.raw_data());
  const int64_t HW = s.Ho * s.Wo;
  const std::vector<float> bias = bias_f32(b, s.O);
#pragma omp parallel for schedule(static)
  for (int64_t no = 0; no < s.N * s.O; ++no) {
    const int64_t n = no / s.O, o = no % s.O;
    const float* src = acc + (o * s.N + n) * HW;
    for (int64_t q = 0; q < HW; ++q) out[no * HW + q] = narrow<T>(src[q] + bias[static_cast<size_t>(o)]);
  }
  return true;
}

template <typename T> bool backward_input_nchw(const Tensor& gx, const Tensor& gy, const Tensor& w, const Shape& s) {
  // dcol [(c, i, j), (n, ho, wo)] = w^T [(c, i, j), O] gy' [O, (n, ho, wo)] in f32, then each
  // input element sums the terms that read it (col2im) and is rounded once.
  auto g = gemm(s.rows(), s.O, s.cols(), true, false, kType<T>, dt::f32, kAmxOnly<T>);
  if (!g) return false;
  const int64_t HoWo = s.Ho * s.Wo;
  T* gyt = scratch<T>(2, s.O * s.cols());
  float* dcol = scratch<float>(1, s.rows() * s.cols());
  swap_outer(gyt, static_cast<const T*>(gy.raw_data()), s.N, s.O, HoWo);
  run(*g, w.raw_data(), gyt, dcol);
  auto* out = static_cast<T*>(gx.raw_data());
  const std::vector<int32_t> taps = tap_offsets(s);
  const int64_t cols = s.cols(), kk = s.kh * s.kw, HW = s.H * s.W;
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(HW));
#pragma omp for schedule(static)
    for (int64_t nc = 0; nc < s.N * s.C; ++nc) {
      const int64_t n = nc / s.C, c = nc % s.C;
      std::fill(acc.begin(), acc.end(), 0.0f);
      // Taps in a fixed order, so each sum is the same whatever the thread count.
      for (int64_t t = 0; t < kk; ++t) {
        const int32_t* m = taps.data() + t * HoWo;
        const float* src = dcol + (c * kk + t) * cols + n * HoWo;
        for (int64_t q = 0; q < HoWo; ++q)
          if (m[q] >= 0) acc[static_cast<size_t>(m[q])] += src[q];
      }
      T* o = out + nc * HW;
      for (int64_t q = 0; q < HW; ++q) o[q] = narrow<T>(acc[static_cast<size_t>(q)]);
    }
  }
  return true;
}

template <typename T> bool backward_weight_nchw(const Tensor& gw, const Tensor& gy, const Tensor& x, const Shape& s) {
  // gw [O, (c, i, j)] = gy' [O, (n, ho, wo)] col^T [(n, ho, wo), (c, i, j)], rounded once.
  auto g = gemm(s.O, s.cols(), s.rows(), false, true, kType<T>, kType<T>, kAmxOnly<T>);
  if (!g) return false;
  T* col = scratch<T>(0, s.rows() * s.cols());
  T* gyt = scratch<T>(2, s.O * s.cols());
  im2col(col, static_cast<const T*>(x.raw_data()), s);
  swap_outer(gyt, static_cast<const T*>(gy.raw_data()), s.N, s.O, s.Ho * s.Wo);
  run(*g, gyt, col, gw.raw_data());
  return true;
}

// The channels-last forms: the column matrix is [(n, ho, wo), (i, j, c)] and the products need
// no transposes (an NHWC activation is already a [(n, h, w), channels] matrix).
template <typename T> bool forward_nhwc(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Shape& s) {
  // y [(n, ho, wo), O] = col [(n, ho, wo), (i, j, c)] w^T, in f32; the bias, one rounding.
  auto g = gemm(s.cols(), s.rows(), s.O, false, true, kType<T>, dt::f32, kAmxOnly<T>);
  if (!g) return false;
  T* col = scratch<T>(0, s.rows() * s.cols());
  float* acc = scratch<float>(1, s.O * s.cols());
  im2col_nhwc(col, static_cast<const T*>(x.raw_data()), s);
  run(*g, col, w.raw_data(), acc);
  auto* out = static_cast<T*>(y.raw_data());
  const std::vector<float> bias = bias_f32(b, s.O);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < s.cols(); ++r)
    for (int64_t o = 0; o < s.O; ++o) out[r * s.O + o] = narrow<T>(acc[r * s.O + o] + bias[static_cast<size_t>(o)]);
  return true;
}

template <typename T> bool backward_input_nhwc(const Tensor& gx, const Tensor& gy, const Tensor& w, const Shape& s) {
  // dcol [(n, ho, wo), (i, j, c)] = gy [(n, ho, wo), O] w [O, (i, j, c)] in f32; then each input
  // element sums the taps that read it, in a fixed order, and is rounded once.
  auto g = gemm(s.cols(), s.O, s.rows(), false, false, kType<T>, dt::f32, kAmxOnly<T>);
  if (!g) return false;
  float* dcol = scratch<float>(1, s.rows() * s.cols());
  run(*g, gy.raw_data(), w.raw_data(), dcol);
  auto* out = static_cast<T*>(gx.raw_data());
  const int64_t K = s.rows();
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(s.C));
#pragma omp for schedule(static)
    for (int64_t px = 0; px < s.N * s.H * s.W; ++px) {
      const int64_t n = px / (s.H * s.W), h = px / s.W % s.H, x = px % s.W;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t i = 0; i < s.kh; ++i) {
        const int64_t hs = h + s.ph - i;
        if (hs < 0 || hs % s.sh != 0 || hs / s.sh >= s.Ho) continue;
        for (int64_t j = 0; j < s.kw; ++j) {
          const int64_t ws = x + s.pw - j;
          if (ws < 0 || ws % s.sw != 0 || ws / s.sw >= s.Wo) continue;
          const float* src = dcol + ((n * s.Ho + hs / s.sh) * s.Wo + ws / s.sw) * K + (i * s.kw + j) * s.C;
          for (int64_t c = 0; c < s.C; ++c) acc[static_cast<size_t>(c)] += src[c];
        }
      }
      for (int64_t c = 0; c < s.C; ++c) out[px * s.C + c] = narrow<T>(acc[static_cast<size_t>(c)]);
    }
  }
  return true;
}

template <typename T> bool backward_weight_nhwc(const Tensor& gw, const Tensor& gy, const Tensor& x, const Shape& s) {
  // gw [O, (i, j, c)] = gy^T [O, (n, ho, wo)] col [(n, ho, wo), (i, j, c)], rounded once.
  auto g = gemm(s.O, s.cols(), s.rows(), true, false, kType<T>, kType<T>, kAmxOnly<T>);
  if (!g) return false;
  T* col = scratch<T>(0, s.rows() * s.cols());
  im2col_nhwc(col, static_cast<const T*>(x.raw_data()), s);
  run(*g, gy.raw_data(), col, gw.raw_data());
  return true;
}

// A convolution of 1x1 maps into 1x1 maps (VGG's last block on 28-px inputs: 3x3, padding 1)
// reads one kernel tap, (ph, pw); the others only ever meet padding. It is then one product of
// [N, C] and that tap's [C, O] weights: measured 512 -> 512 at batch 32, 2 threads, bf16, oneDNN's
// convolution over all nine taps 2.4-4.4 ms forward, 4-7.5 input gradient, 3-3.7 weight gradient.
// f32 or bf16 (all three tensors alike), one group, no dilation; the weights OIHW or OHWI (the
// 1x1 activations are the same memory either way).
bool one_tap(const Tensor& xa, const Tensor& ya, const Tensor& w, const Conv2dParams& p, const Shape& s) {
  return (xa.dtype() == kBFloat16 || xa.dtype() == kFloat32) && ya.dtype() == xa.dtype() && w.dtype() == xa.dtype() &&
         xa.is_contiguous() && ya.is_contiguous() &&
         (w.is_contiguous() || w.is_contiguous(MemoryFormat::ChannelsLast)) && p.groups == 1 && p.dilation[0] == 1 &&
         p.dilation[1] == 1 && s.H == 1 && s.W == 1 && s.Ho == 1 && s.Wo == 1 && s.ph >= 0 && s.pw >= 0 &&
         s.ph < s.kh && s.pw < s.kw && s.kh * s.kw > 1;
}
dt type_of_tensor(const Tensor& t) { return t.dtype() == kBFloat16 ? dt::bf16 : dt::f32; }

// dst [O, C] = w[:, :, ph, pw] (or, with `to_w`, the reverse into a zeroed w: the other taps' gradients are 0).
template <typename E> void tap_copy(E* mat, E* w, const Shape& s, bool to_w, bool ohwi) {
  const int64_t kk = s.kh * s.kw, t = s.ph * s.kw + s.pw;
  // Element (o, c) of tap q: OIHW (o * C + c) * kk + q, OHWI (o * kk + q) * C + c.
  const int64_t so = s.C * kk, sc = ohwi ? 1 : kk, sq = ohwi ? s.C : 1;
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < s.O; ++o) {
    E* wo = w + o * so;
    if (to_w) std::fill(wo, wo + so, E{});
    for (int64_t c = 0; c < s.C; ++c) {
      if (to_w) wo[c * sc + t * sq] = mat[o * s.C + c];
      else mat[o * s.C + c] = wo[c * sc + t * sq];
    }
  }
}
void tap_copy(void* mat, const Tensor& w, const Shape& s, bool to_w) {
  const bool ohwi = !w.is_contiguous();
  if (w.dtype() == kFloat32) tap_copy(static_cast<float*>(mat), static_cast<float*>(w.raw_data()), s, to_w, ohwi);
  else tap_copy(static_cast<uint16_t*>(mat), static_cast<uint16_t*>(w.raw_data()), s, to_w, ohwi);
}

// A convolution whose kernel covers its whole unpadded input, giving 1x1 maps (DCGAN's generator
// input layer, read as a transposed convolution, and its discriminator's last layer): a product of
// [N, C x kh x kw] and [C x kh x kw, O], in NCHW with OIHW weights or NHWC with OHWI (the inner dim
// is (c, i, j) or (i, j, c) alike in both operands). Measured, DCGAN's 100 -> 128 by 7x7 at batch
// 32, bf16, 2 threads: oneDNN 0.39 ms as a transposed convolution, 1.04 its backward.
bool whole_input(const Tensor& xa, const Tensor& ya, const Tensor& w, const Conv2dParams& p, const Shape& s) {
  const auto cl = MemoryFormat::ChannelsLast;
  return (xa.dtype() == kBFloat16 || xa.dtype() == kFloat32) && ya.dtype() == xa.dtype() && w.dtype() == xa.dtype() &&
         ya.is_contiguous() && ((xa.is_contiguous() && w.is_contiguous()) || (xa.is_contiguous(cl) && w.is_contiguous(cl))) &&
         p.groups == 1 && p.dilation[0] == 1 && p.dilation[1] == 1 && s.ph == 0 && s.pw == 0 && s.H == s.kh &&
         s.W == s.kw && s.Ho == 1 && s.Wo == 1 && s.kh * s.kw > 1;
}

// y [N, O] = x [N, K] w^T for w stored [O, K], in f32; then the bias and the one rounding.
bool product_forward(const Tensor& y, const void* x, const void* w, const Tensor& b, int64_t N, int64_t K, int64_t O) {
  const dt in = type_of_tensor(y);
  auto g = gemm(N, K, O, false, true, in, dt::f32, false);
  if (!g) return false;
  auto* acc = static_cast<float*>(buffer(1, static_cast<size_t>(N * O) * 4));
  run(*g, x, w, acc);
  const std::vector<float> bias = bias_f32(b, O);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const float v = acc[n * O + o] + bias[static_cast<size_t>(o)];
      if (in == dt::f32) static_cast<float*>(y.raw_data())[n * O + o] = v;
      else static_cast<uint16_t*>(y.raw_data())[n * O + o] = to_bf16(v);
    }
  return true;
}

// gx [N, K] = gy [N, O] w [O, K], and gw [O, K] = gy^T [O, N] x [N, K]: one sum per element, rounded once.
bool product_input_grad(void* gx, const void* gy, const void* w, int64_t N, int64_t O, int64_t K, dt in) {
  auto g = gemm(N, O, K, false, false, in, in, false);
  if (!g) return false;
  run(*g, gy, w, gx);
  return true;
}
bool product_weight_grad(void* gw, const void* gy, const void* x, int64_t N, int64_t O, int64_t K, dt in) {
  auto g = gemm(O, N, K, true, false, in, in, false);
  if (!g) return false;
  run(*g, gy, x, gw);
  return true;
}

}  // namespace

bool gemm_conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  if (b.defined() && (!b.is_contiguous() || (b.dtype() != kFloat32 && b.dtype() != kBFloat16))) return false;
  const Shape s = shape_of(x, y, w.size(2), w.size(3), p);
  if (one_tap(x, y, w, p, s)) {
    void* wt = buffer(3, static_cast<size_t>(s.O * s.C) * x.element_size());
    tap_copy(wt, w, s, false);
    return product_forward(y, x.raw_data(), wt, b, s.N, s.C, s.O);
  }
  if (whole_input(x, y, w, p, s)) return product_forward(y, x.raw_data(), w.raw_data(), b, s.N, s.rows(), s.O);
  const int layout = gemm_layout(x, y, w, p);
  if (layout < 0 || x.dtype() != kBFloat16 || !small_maps(s, kData)) return false;
  return layout == 1 ? forward_nhwc<uint16_t>(y, x, w, b, s) : forward_nchw<uint16_t>(y, x, w, b, s);
}

bool gemm_conv_backward_input(const Tensor& gx, const Tensor& gy, const Tensor& w, const Conv2dParams& p) {
  const Shape s = shape_of(gx, gy, w.size(2), w.size(3), p);
  if (one_tap(gx, gy, w, p, s)) {
    void* wt = buffer(3, static_cast<size_t>(s.O * s.C) * gx.element_size());
    tap_copy(wt, w, s, false);
    return product_input_grad(gx.raw_data(), gy.raw_data(), wt, s.N, s.O, s.C, type_of_tensor(gx));
  }
  if (whole_input(gx, gy, w, p, s))
    return product_input_grad(gx.raw_data(), gy.raw_data(), w.raw_data(), s.N, s.O, s.rows(), type_of_tensor(gx));
  const int layout = gemm_layout(gx, gy, w, p);
  if (layout < 0 || gx.dtype() != kBFloat16 || !small_maps(s, kData)) return false;
  return layout == 1 ? backward_input_nhwc<uint16_t>(gx, gy, w, s) : backward_input_nchw<uint16_t>(gx, gy, w, s);
}

bool gemm_conv_backward_weight(const Tensor& gw, const Tensor& gy, const Tensor& x, const Conv2dParams& p) {
  const Shape s = shape_of(x, gy, gw.size(2), gw.size(3), p);
  if (one_tap(x, gy, gw, p, s)) {
    // The live tap's gradient; the other taps' are 0.
    void* r = buffer(1, static_cast<size_t>(s.O * s.C) * gw.element_size());
    if (!product_weight_grad(r, gy.raw_data(), x.raw_data(), s.N, s.O, s.C, type_of_tensor(gw))) return false;
    tap_copy(r, gw, s, true);
    return true;
  }
  if (whole_input(x, gy, gw, p, s))
    return product_weight_grad(gw.raw_data(), gy.raw_data(), x.raw_data(), s.N, s.O, s.rows(), type_of_tensor(gw));
  const int layout = gemm_layout(x, gy, gw, p);
  const bool f32 = x.dtype() == kFloat32;
  if (layout < 0 || !small_maps(s, f32 ? kWeightGradientF32 : kWeightGradient)) return false;
  if (layout == 1) return f32 ? backward_weight_nhwc<float>(gw, gy, x, s) : backward_weight_nhwc<uint16_t>(gw, gy, x, s);
  return f32 ? backward_weight_nchw<float>(gw, gy, x, s) : backward_weight_nchw<uint16_t>(gw, gy, x, s);
}

}  // namespace mpx::cpu::onednn
