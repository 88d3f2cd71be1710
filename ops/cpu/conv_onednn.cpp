// f32 and bf16 conv2d forward / input gradient / weight gradient on oneDNN primitives (built only with MPX_WITH_ONEDNN).
#include "ops/cpu/conv_onednn.h"
#include "ops/cpu/onednn_util.h"

#include <omp.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace mpx::cpu::onednn {

dnnl::engine& engine() {
  static auto* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

void* buffer(int slot, size_t bytes) {
  struct Buf {
    void* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  thread_local std::array<Buf, 7> bufs;
  Buf& b = bufs[static_cast<size_t>(slot)];
  if (b.n < bytes) {
    std::free(b.p);
    b.n = (bytes + 63) / 64 * 64;
    b.p = std::aligned_alloc(64, b.n);
    MPX_CHECK(b.p != nullptr, "oneDNN: could not allocate ", b.n, " bytes of scratch memory");
  }
  return b.p;
}

namespace {
using kernels::Conv2dParams;
using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
constexpr auto f32 = dt::f32;

enum class Kind : int64_t { kForward, kBackwardData, kBackwardWeights };

// 0: NCHW-contiguous, 1: channels-last, -1: neither (not handled here).
int layout_of(const Tensor& t) {
  if (t.is_contiguous()) return 0;
  if (t.is_contiguous(MemoryFormat::ChannelsLast)) return 1;
  return -1;
}


// One operand of a primitive: its layout in the tensor and the one the primitive runs in.
struct Arg {
  int id;  // DNNL_ARG_*
  md user, prim;
  bool output;
  std::optional<dnnl::reorder> re;  // user -> prim for inputs, prim -> user for outputs
};

struct Entry {
  dnnl::primitive prim;
  std::vector<Arg> args;  // in the order the caller passes pointers
  md scratch;
  std::string impl;  // oneDNN's name for the kernel it chose
};

// Everything that determines a primitive: the kind, sizes, geometry, layouts, and the
// thread count, which oneDNN fixes when it creates a primitive.
using Key = std::array<int64_t, 23>;

// The sizes of one convolution in forward terms (x input, y output), from any of the three kernels.
struct Geom {
  int64_t N, C, H, W, O, Ho, Wo, kh, kw;
  int lx, ly;  // layouts of the x-side and y-side activations
  bool bias;
  dt type;     // of activations and weights (bias: f32 for f32, its own for bf16)
  dt bias_type = f32;
  int lw = 0;  // weights: 0 [O, C, kh, kw] contiguous, 1 channels-last (OHWI; groups 1 only)
  // The type the primitive computes in when it differs from `type` (reorders convert on the
  // way in and out): see weight_gradient_in_f32.
  std::optional<dt> compute = std::nullopt;
  dt prim_type() const { return compute.value_or(type); }
};

md act_md(int64_t n, int64_t c, int64_t h, int64_t w, int layout, dt type) {
  return md({n, c, h, w}, type, layout == 1 ? tag::nhwc : tag::nchw);
}

// How activations reach the primitives. Channels-last tensors go in as they are: oneDNN's
// NHWC kernels (jit / brgconv) are about as fast as its blocked ones. For NCHW tensors oneDNN
// only has its generic im2col + GEMM convolution, no faster than ours, so they are reordered
// to the layout oneDNN picks (nChw16c on AVX-512) and back, every call. Measured on the CIFAR
// ResNet-18 training step (bench/bench_resnet18_cpu, batch 128, 2 threads, AVX-512): the
// reorders take ~0.2 s of a ~1.2 s step, but the blocked kernels run the convolutions in
// ~0.9 s against ~1.9 s for oneDNN's GEMM path on NCHW (about what Eigen takes), so the
// step goes from ~69 to ~102 images/s. Weights are always reordered to oneDNN's choice;
// they are small next to the activations.
md act_query(int64_t n, int64_t c, int64_t h, int64_t w, int layout, dt type) {
  return layout == 1 ? act_md(n, c, h, w, layout, type) : md({n, c, h, w}, type, tag::any);
}

// oneDNN 2.x's AMX bf16 weight-gradient kernel is slow when the sum over N x Ho x Wo is short
// next to the gradient it writes (the deep layers of a CNN on small inputs): measured on an
// AMX Xeon at 2 threads, batch 32, ms per call bf16 / f32 (both in oneDNN, alternated):
// 512->512 3x3 on 3x3 maps 18 / 10, on 1x1 maps 5.0 / 2.0, 256->512 3x3 stride 2 to 4x4
// 17 / 8, its 1x1 shortcut 3.1 / 0.9; from 7x7 maps on it is even or bf16 wins (14x14:
// 5 / 8). There the gradient is computed in f32 on the bf16 values widened by the input
// reorders and rounded once to bf16 by the output reorder: the same contract as the bf16
// kernel (f32 sums, one rounding), in a different summation order.
bool weight_gradient_in_f32(const Geom& g, const std::string& bf16_impl) {
  return g.type == dt::bf16 && bf16_impl.rfind("jit:avx512_core_amx_bf16", 0) == 0 && g.N * g.Ho * g.Wo <= 1024;
}

// Right padding that makes oneDNN's size rule give `out` exactly: the symmetric value when
// it does (the fast kernels expect that), else the exact one, which may be negative when
// the last rows are never read (or, for a transposed conv's output_padding, never written).
int64_t pad_right(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t kr = (k - 1) * d + 1;
  if (in + 2 * p - kr >= 0 && (in + 2 * p - kr) / s + 1 == out) return p;
  return (out - 1) * s + kr - in - p;
}

std::shared_ptr<Entry> create(Kind kind, const Geom& g, const Conv2dParams& p) {
  const dnnl::memory::dims strides{p.stride[0], p.stride[1]};
  const dnnl::memory::dims dil{p.dilation[0] - 1, p.dilation[1] - 1};  // oneDNN counts the gaps
  const dnnl::memory::dims pl{p.padding[0], p.padding[1]};
  const dnnl::memory::dims pr{pad_right(g.H, g.Ho, g.kh, p.stride[0], p.padding[0], p.dilation[0]),
                              pad_right(g.W, g.Wo, g.kw, p.stride[1], p.padding[1], p.dilation[1])};
  for (int d = 0; d < 2; ++d)
    if (pr[d] + strides[d] <= 0) return nullptr;  // oneDNN requires padding_r > -stride

  const int64_t G = p.groups;
  const dt t = g.type, tp = g.prim_type();
  const md x_user = act_md(g.N, g.C, g.H, g.W, g.lx, t), y_user = act_md(g.N, g.O, g.Ho, g.Wo, g.ly, t);
  const md x_q = act_query(g.N, g.C, g.H, g.W, g.lx, tp), y_q = act_query(g.N, g.O, g.Ho, g.Wo, g.ly, tp);
  const md w_user = G > 1 ? md({G, g.O / G, g.C / G, g.kh, g.kw}, t, tag::goihw)
                          : md({g.O, g.C, g.kh, g.kw}, t, g.lw == 1 ? tag::ohwi : tag::oihw);
  const md w_q = G > 1 ? md({G, g.O / G, g.C / G, g.kh, g.kw}, tp, tag::any) : md({g.O, g.C, g.kh, g.kw}, tp, tag::any);
  const md b_user({g.O}, g.bias_type, tag::x);

  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto algo = dnnl::algorithm::convolution_direct;
  auto e = std::make_shared<Entry>();
  // oneDNN's reference loops (its last resort, for odd channel counts and groups) are far
  // slower than our im2col + GEMM.
  auto usable = [](const auto& pd) { return std::strncmp(pd.impl_info_str(), "ref", 3) != 0; };
  auto arg = [&](int id, const md& user, const md& prim, bool output) {
    Arg a{id, user, prim, output, std::nullopt};
    if (user != prim) {
      a.re = output ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), prim, engine(), user))
                    : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), prim));
    }
    e->args.push_back(std::move(a));
  };

  if (kind == Kind::kForward) {
    auto d = g.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_q, w_q, b_user, y_q,
                                                       strides, dil, pl, pr)
                    : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_q, w_q, y_q, strides,
                                                       dil, pl, pr);
    dnnl::convolution_forward::primitive_desc pd(d, attr, engine());
    if (!usable(pd)) return nullptr;
    arg(DNNL_ARG_SRC, x_user, pd.src_desc(), false);
    arg(DNNL_ARG_WEIGHTS, w_user, pd.weights_desc(), false);
    if (g.bias) arg(DNNL_ARG_BIAS, b_user, pd.bias_desc(), false);
    arg(DNNL_ARG_DST, y_user, pd.dst_desc(), true);
    e->prim = dnnl::convolution_forward(pd);
    e->scratch = pd.scratchpad_desc();
    e->impl = pd.impl_info_str();
    return e;
  }
  // The backward primitives need the forward one as a hint.
  dnnl::convolution_forward::primitive_desc hint(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_q, w_q, y_q, strides, dil, pl, pr),
      engine());
  if (kind == Kind::kBackwardData) {
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(algo, x_q, w_q, y_q, strides, dil, pl, pr), attr, engine(), hint);
    if (!usable(pd)) return nullptr;
    arg(DNNL_ARG_DIFF_DST, y_user, pd.diff_dst_desc(), false);
    arg(DNNL_ARG_WEIGHTS, w_user, pd.weights_desc(), false);
    arg(DNNL_ARG_DIFF_SRC, x_user, pd.diff_src_desc(), true);
    e->prim = dnnl::convolution_backward_data(pd);
    e->scratch = pd.scratchpad_desc();
    e->impl = pd.impl_info_str();
  } else {
    dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(algo, x_q, w_q, y_q, strides, dil, pl, pr), attr, engine(), hint);
    if (!usable(pd)) return nullptr;
    if (!g.compute && weight_gradient_in_f32(g, pd.impl_info_str())) {
      Geom g32 = g;
      g32.compute = f32;
      try {
        if (auto e32 = create(kind, g32, p)) return e32;
      } catch (const dnnl::error&) {
        // keep the bf16 kernel
      }
    }
    arg(DNNL_ARG_DIFF_DST, y_user, pd.diff_dst_desc(), false);
    arg(DNNL_ARG_SRC, x_user, pd.src_desc(), false);
    arg(DNNL_ARG_DIFF_WEIGHTS, w_user, pd.diff_weights_desc(), true);
    e->prim = dnnl::convolution_backward_weights(pd);
    e->scratch = pd.scratchpad_desc();
    e->impl = pd.impl_info_str();
  }
  return e;
}

// The cached primitive for one case, or null when oneDNN cannot run it (also cached).
// Creation is slow (milliseconds), and every training step asks for the same few dozen.
std::shared_ptr<Entry> lookup(Kind kind, const Geom& g, const Conv2dParams& p) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash>();
  const Key key{static_cast<int64_t>(kind), g.N, g.C, g.H, g.W, g.O, g.Ho, g.Wo, g.kh, g.kw,
                p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1],
                p.groups, g.bias, g.lx, g.ly, omp_get_max_threads(),
                static_cast<int64_t>(g.type) * 256 + static_cast<int64_t>(g.bias_type), g.lw};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  std::shared_ptr<Entry> e;
  try {
    e = create(kind, g, p);
  } catch (const dnnl::error&) {
    e = nullptr;  // an unsupported case: the Eigen kernel takes it
  }
  cache->emplace(key, e);
  return e;
}

// Runs a cached primitive on the callers' buffers (in Entry::args order).
void execute(Entry& e, const std::vector<void*>& ptrs) {
  dnnl::stream& s = stream();
  std::unordered_map<int, dnnl::memory> margs;
  std::vector<std::pair<const Arg*, std::pair<dnnl::memory, dnnl::memory>>> outs;
  for (size_t i = 0; i < e.args.size(); ++i) {
    const Arg& a = e.args[i];
    dnnl::memory um(a.user, engine(), ptrs[i]);
    if (!a.re) {
      margs.emplace(a.id, um);
      continue;
    }
    dnnl::memory pm(a.prim, engine(), buffer(static_cast<int>(i), a.prim.get_size()));
    if (a.output) {
      outs.push_back({&a, {pm, um}});
    } else {
      a.re->execute(s, um, pm);
    }
    margs.emplace(a.id, pm);
  }
  margs.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e.scratch, engine(), buffer(4, std::max<size_t>(e.scratch.get_size(), 64))));
  e.prim.execute(s, margs);
  for (auto& [a, m] : outs) a->re->execute(s, m.first, m.second);
  s.wait();
}

void* ptr(const Tensor& t) { return t.raw_data(); }

// oneDNN's data type for an mpx dtype it runs here: f32, and bf16 (f32 accumulation and one
// rounding of each output, as the GPU's and our own f16/bf16 kernels: the same contract).
std::optional<dt> type_of(DType d) {
  if (d == kFloat32) return f32;
  if (d == kBFloat16) return dt::bf16;
  return std::nullopt;
}
// Weights' layout (Geom::lw), or -1 when oneDNN is not given them here. Channels-last
// weights come from `model->to(MemoryFormat::ChannelsLast)`; oneDNN reads them as OHWI.
int weight_layout(const Tensor& w, int64_t groups) {
  if (w.is_contiguous()) return 0;
  return groups == 1 && w.dim() == 4 && w.is_contiguous(MemoryFormat::ChannelsLast) ? 1 : -1;
}
// The common data type of the operands, when oneDNN runs them here.
std::optional<dt> common_type(std::initializer_list<Tensor> ts) {
  std::optional<dt> t;
  for (const Tensor& x : ts) {
    if (!x.defined()) continue;
    const auto tx = type_of(x.dtype());
    if (!tx || (t && *t != *tx)) return std::nullopt;
    t = tx;
  }
  return t;
}

// oneDNN 2.x's AMX bf16 input-gradient kernel is 1.2-5x slower than its forward kernel on the
// same sizes (same machine and runs as weight_gradient_in_f32: 512->512 3x3 on 3x3 maps 6.5-7.3
// against 1.4 ms, 4x4 maps 8.3 / 4.5, 7x7 maps 4.9 / 2.5, 28x28 2.1 / 1.6). With stride 1, no
// dilation and one group the input gradient is a forward convolution: gy with the weights
// flipped in both spatial dims and their two channel dims swapped, padded by k - 1 - p (what
// oneDNN 3.x does inside). Same products and f32 sums, in another order.
bool input_gradient_as_forward(const Geom& g, const Conv2dParams& p, const Entry& bwd) {
  return g.type == dt::bf16 && bwd.impl.rfind("jit:avx512_core_amx_bf16", 0) == 0 && p.groups == 1 &&
         p.stride[0] == 1 && p.stride[1] == 1 && p.dilation[0] == 1 && p.dilation[1] == 1 && p.padding[0] >= 0 &&
         p.padding[1] >= 0 && p.padding[0] < g.kh && p.padding[1] < g.kw &&
         g.H == g.Ho + g.kh - 1 - 2 * p.padding[0] && g.W == g.Wo + g.kw - 1 - 2 * p.padding[1];
}

// dst [C, O, kh, kw] (contiguous) = w [O, C, kh, kw] (any strides) with C and O swapped and
// both spatial dims reversed; 16-bit elements.
void flip_swap_channels(uint16_t* dst, const Tensor& w) {
  const int64_t O = w.size(0), C = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t s0 = w.stride(0), s1 = w.stride(1), s2 = w.stride(2), s3 = w.stride(3);
  const auto* src = static_cast<const uint16_t*>(w.raw_data());
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t o = 0; o < O; ++o) {
      const uint16_t* s = src + o * s0 + c * s1 + (kh - 1) * s2 + (kw - 1) * s3;
      uint16_t* d = dst + (c * O + o) * kh * kw;
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) d[i * kw + j] = s[-i * s2 - j * s3];
    }
}

}  // namespace

bool conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  const auto t = common_type({y, x, w});
  const int lw = weight_layout(w, p.groups);
  if (!t || y.numel() == 0 || x.numel() == 0 || w.numel() == 0 || lw < 0) return false;
  if (gemm_conv_forward(y, x, w, b, p)) return true;
  Geom g{x.size(0), x.size(1), x.size(2), x.size(3), y.size(1), y.size(2), y.size(3), w.size(2), w.size(3),
         layout_of(x), layout_of(y), b.defined(), *t};
  g.lw = lw;
  if (b.defined()) {
    const auto tb = type_of(b.dtype());
    if (!tb || (*t == f32 && *tb != f32)) return false;
    g.bias_type = *tb;
  }
  if (g.lx < 0 || g.ly < 0 || (b.defined() && !b.is_contiguous())) return false;
  auto e = lookup(Kind::kForward, g, p);
  if (!e) return false;
  std::vector<void*> ptrs{ptr(x), ptr(w)};
  if (b.defined()) ptrs.push_back(ptr(b));
  ptrs.push_back(ptr(y));
  execute(*e, ptrs);
  return true;
}

bool conv_backward_input(const Tensor& gx, const Tensor& gy, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  const auto t = common_type({gx, gy, w});
  // conv_transpose2d's bias is added below in f32 only.
  if (!t || (b.defined() && (*t != f32 || b.dtype() != kFloat32))) return false;
  const int lw = weight_layout(w, p.groups);
  if (gx.numel() == 0 || gy.numel() == 0 || w.numel() == 0 || lw < 0) return false;
  if (!b.defined() && gemm_conv_backward_input(gx, gy, w, p)) return true;
  Geom g{gx.size(0), gx.size(1), gx.size(2), gx.size(3), gy.size(1), gy.size(2), gy.size(3), w.size(2), w.size(3),
         layout_of(gx), layout_of(gy), false, *t};
  g.lw = lw;
  if (g.lx < 0 || g.ly < 0 || (b.defined() && !b.is_contiguous())) return false;
  auto e = lookup(Kind::kBackwardData, g, p);
  if (!e) return false;
  std::shared_ptr<Entry> as_fwd;
  Conv2dParams pf;
  if (input_gradient_as_forward(g, p, *e)) {
    pf.padding = {g.kh - 1 - p.padding[0], g.kw - 1 - p.padding[1]};
    as_fwd = lookup(Kind::kForward, Geom{g.N, g.O, g.Ho, g.Wo, g.C, g.H, g.W, g.kh, g.kw, g.ly, g.lx, false, g.type}, pf);
  }
  if (as_fwd) {
    auto* wf = static_cast<uint16_t*>(buffer(6, static_cast<size_t>(w.numel()) * sizeof(uint16_t)));
    flip_swap_channels(wf, w);
    execute(*as_fwd, {ptr(gy), wf, ptr(gx)});
  } else {
    execute(*e, {ptr(gy), ptr(w), ptr(gx)});
  }
  if (b.defined()) {
    // conv_transpose2d's bias: oneDNN's backward-data primitive has none.
    float* out = static_cast<float*>(gx.raw_data());
    const float* bv = static_cast<const float*>(b.raw_data());
    const int64_t C = g.C, HW = g.H * g.W;
    if (g.lx == 0) {
#pragma omp parallel for schedule(static)
      for (int64_t nc = 0; nc < g.N * C; ++nc) {
        float* r = out + nc * HW;
        const float v = bv[nc % C];
        for (int64_t q = 0; q < HW; ++q) r[q] += v;
      }
    } else {
#pragma omp parallel for schedule(static)
      for (int64_t px = 0; px < g.N * HW; ++px) {
        float* r = out + px * C;
        for (int64_t c = 0; c < C; ++c) r[c] += bv[c];
      }
    }
  }
  return true;
}

bool conv_backward_weight(const Tensor& gw, const Tensor& gy, const Tensor& x, const Conv2dParams& p) {
  const auto t = common_type({gw, gy, x});
  const int lw = weight_layout(gw, p.groups);
  if (!t || gw.numel() == 0 || gy.numel() == 0 || x.numel() == 0 || lw < 0) return false;
  if (gemm_conv_backward_weight(gw, gy, x, p)) return true;
  Geom g{x.size(0), x.size(1), x.size(2), x.size(3), gy.size(1), gy.size(2), gy.size(3), gw.size(2), gw.size(3),
         layout_of(x), layout_of(gy), false, *t};
  g.lw = lw;
  if (g.lx < 0 || g.ly < 0) return false;
  auto e = lookup(Kind::kBackwardWeights, g, p);
  if (!e) return false;
  execute(*e, {ptr(gy), ptr(x), ptr(gw)});
  return true;
}

bool bf16_native() {
  // Asked once: a ResNet-sized 3x3 convolution in all three directions (oneDNN's reference
  // loops, all it has for bf16 without AVX-512, count as no).
  static const bool ok = [] {
    Conv2dParams p;
    p.padding = {1, 1};
    const Geom g{2, 16, 8, 8, 16, 8, 8, 3, 3, 1, 1, false, dt::bf16};
    return lookup(Kind::kForward, g, p) && lookup(Kind::kBackwardData, g, p) && lookup(Kind::kBackwardWeights, g, p);
  }();
  return ok;
}

std::string version() {
  const dnnl_version_t* v = dnnl::version();
  std::string isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: isa = "sse41"; break;
    case dnnl::cpu_isa::avx: isa = "avx"; break;
    case dnnl::cpu_isa::avx2: isa = "avx2"; break;
    case dnnl::cpu_isa::avx2_vnni: isa = "avx2_vnni"; break;
    case dnnl::cpu_isa::avx512_core: isa = "avx512_core"; break;
    case dnnl::cpu_isa::avx512_core_vnni: isa = "avx512_core_vnni"; break;
    case dnnl::cpu_isa::avx512_core_bf16: isa = "avx512_core_bf16"; break;
    case dnnl::cpu_isa::avx512_core_amx: isa = "avx512_core_amx"; break;
    default: isa = "other"; break;
  }
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (CPU ISA " + isa + ")";
}

}  // namespace mpx::cpu::onednn
