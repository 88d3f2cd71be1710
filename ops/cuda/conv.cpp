// CUDA convolution kernels on cuDNN: conv2d forward, its input gradient (also conv_transpose2d's
// forward) and its weight gradient, NCHW or NHWC, f32/f64/f16/bf16, algorithms cached per shape.
#ifdef MPX_WITH_CUDNN
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda.h"
#include "ops/conv.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cudnn_common.h"
#include "ops/cuda/cudnn_plan.h"
#include "ops/dispatch.h"

namespace mpx::cuda {
namespace {
using cudnn::ConvDescriptor;
using cudnn::FilterDescriptor;
using cudnn::Layout;
using cudnn::Scale;
using cudnn::TensorDescriptor;
using kernels::Conv2dParams;

// Which of the three cuDNN convolution routines a call runs (x, w, y as in cudnn::ConvProblem).
using Dir = cudnn::ConvDir;

// The largest workspace an algorithm may ask for. Workspaces come from the stream-ordered pool
// and return to it right after the call, so a generous bound costs nothing between convolutions.
constexpr size_t kMaxWorkspace = size_t{1} << 30;

// f16/bf16 run on Tensor Cores; f32 only when TF32 is allowed (CUDNN_DEFAULT_MATH would allow
// TF32 on Ampere and later, so "no TF32" must be said with CUDNN_FMA_MATH); f64 has no choice.
cudnnMathType_t math_for(DType dt) {
  if (dt == kFloat16 || dt == kBFloat16) return CUDNN_TENSOR_OP_MATH;
  if (dt == kFloat32) return tf32_allowed() ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}
// Accumulation in f32 for every dtype but f64 (cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configs).
cudnnDataType_t compute_for(DType dt) { return dt == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

// One convolution ready for cuDNN: x, w and y dense in one layout, with their descriptors.
struct Call {
  Dir dir = Dir::kForward;
  const char* op = "conv2d";
  DType dt = kFloat32;
  Layout layout = Layout::kNCHW;
  Conv2dParams p;
  Tensor x, w, y;
  TensorDescriptor xd, yd;
  FilterDescriptor wd;
  ConvDescriptor cd;
  bool deterministic = false;

  void describe() {
    xd.set(x, layout, op);
    yd.set(y, layout, op);
    wd.set(w, layout, op);
    cd.set(p.padding[0], p.padding[1], p.stride[0], p.stride[1], p.dilation[0], p.dilation[1], p.groups,
           compute_for(dt), math_for(dt), op);
  }
  std::string shapes() const {
    return std::string(dtype_name(dt)) + " input " + shape_str(x.sizes()) + ", weight " + shape_str(w.sizes()) +
           ", output " + shape_str(y.sizes()) + " (" + (layout == Layout::kNHWC ? "channels-last" : "NCHW") +
           "), stride " + pair_str(p.stride) + ", padding " + pair_str(p.padding) + ", dilation " +
           pair_str(p.dilation) + ", groups " + std::to_string(p.groups);
  }
};

// An algorithm and the math mode it runs in.
struct Choice {
  bool found = false;  // false: cuDNN has none for this key (remembered too)
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

using Key = std::array<int64_t, 28>;
struct AlgoCache {
  std::mutex mu;
  std::map<Key, Choice> map;
};
AlgoCache& algo_cache() {
  static auto* c = new AlgoCache;  // leaked: nothing to tear down at exit
  return *c;
}

Key key_of(const Call& c, int device, bool benchmark) {
  Key k{};
  size_t i = 0;
  k[i++] = static_cast<int64_t>(c.dir);
  k[i++] = device;
  k[i++] = static_cast<int64_t>(c.dt);
  k[i++] = static_cast<int64_t>(c.layout);
  for (const Tensor* t : {&c.x, &c.w, &c.y})
    for (int d = 0; d < 4; ++d) k[i++] = t->size(d);
  for (int d = 0; d < 2; ++d) {
    k[i++] = c.p.stride[d];
    k[i++] = c.p.padding[d];
    k[i++] = c.p.dilation[d];
  }
  k[i++] = c.p.groups;
  k[i++] = c.deterministic;
  k[i++] = benchmark;
  k[i++] = static_cast<int64_t>(math_for(c.dt));
  return k;
}

// What rules algorithms out after cuDNN listed them: those it then refused to run, and a
// workspace bound lowered below what the pool could not give.
struct Refused {
  std::vector<int> algos;
  size_t limit = kMaxWorkspace;
  bool empty() const { return algos.empty() && limit == kMaxWorkspace; }
};

// The first acceptable result, in cuDNN's order (the heuristic's preference, or fastest first
// for a measured search): it ran (or would run), was not refused since, fits the workspace
// bound, is deterministic when that is asked for, and does not use TF32 for f32 unless allowed.
template <typename Perf>
bool pick(const Perf* r, int n, const Call& c, size_t limit, const Refused& refused, Choice* out) {
  const bool no_tf32 = c.dt == kFloat32 && !tf32_allowed();
  for (int i = 0; i < n; ++i) {
    if (r[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (std::find(refused.algos.begin(), refused.algos.end(), static_cast<int>(r[i].algo)) != refused.algos.end())
      continue;
    if (c.deterministic && r[i].determinism != CUDNN_DETERMINISTIC) continue;
    if (no_tf32 && r[i].mathType != CUDNN_DEFAULT_MATH && r[i].mathType != CUDNN_FMA_MATH) continue;
    if (r[i].memory > std::min(limit, refused.limit)) continue;
    out->algo = static_cast<int>(r[i].algo);
    out->math = no_tf32 ? CUDNN_FMA_MATH : r[i].mathType;
    return true;
  }
  return false;
}

// cuDNN's heuristic ranking (no device work).
bool heuristic(Call& c, cudnnHandle_t h, const Refused& refused, Choice* out) {
  int max = 0, n = 0;
  switch (c.dir) {
    case Dir::kForward: {
      MPX_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max), c.op);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> r(static_cast<size_t>(max));
      MPX_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, c.xd.get(), c.wd.get(), c.cd.get(), c.yd.get(), max,
                                                             &n, r.data()),
                      c.op);
      return pick(r.data(), n, c, kMaxWorkspace, refused, out);
    }
    case Dir::kBackwardData: {
      MPX_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max), c.op);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> r(static_cast<size_t>(max));
      MPX_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.wd.get(), c.yd.get(), c.cd.get(), c.xd.get(),
                                                                  max, &n, r.data()),
                      c.op);
      return pick(r.data(), n, c, kMaxWorkspace, refused, out);
    }
    case Dir::kBackwardFilter: {
      MPX_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max), c.op);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> r(static_cast<size_t>(max));
      MPX_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.xd.get(), c.yd.get(), c.cd.get(),
                                                                    c.wd.get(), max, &n, r.data()),
                      c.op);
      return pick(r.data(), n, c, kMaxWorkspace, refused, out);
    }
  }
  return false;
}

// cuDNN's measured search: runs every algorithm on the call's own tensors (overwriting the
// output, which the real call then writes again) and waits for the device.
bool measure(Call& c, cudnnHandle_t h, const Refused& refused, Choice* out) {
  Tensor ws;
  size_t bytes = 0;
  for (size_t b : {kMaxWorkspace, kMaxWorkspace / 8, size_t{0}}) {
    try {
      ws = cudnn::workspace(c.y, b);
      bytes = b;
      break;
    } catch (const std::exception&) {
      // Not that much free memory: search among algorithms that need less.
    }
  }
  void* wp = ws.defined() ? ws.raw_data() : nullptr;
  int max = 0, n = 0;
  switch (c.dir) {
    case Dir::kForward: {
      MPX_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max), c.op);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> r(static_cast<size_t>(max));
      MPX_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, c.xd.get(), c.x.raw_data(), c.wd.get(), c.w.raw_data(),
                                                             c.cd.get(), c.yd.get(), c.y.raw_data(), max, &n, r.data(),
                                                             wp, bytes),
                      c.op);
      return pick(r.data(), n, c, bytes, refused, out);
    }
    case Dir::kBackwardData: {
      MPX_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max), c.op);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> r(static_cast<size_t>(max));
      MPX_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, c.wd.get(), c.w.raw_data(), c.yd.get(),
                                                                  c.y.raw_data(), c.cd.get(), c.xd.get(), c.x.raw_data(),
                                                                  max, &n, r.data(), wp, bytes),
                      c.op);
      return pick(r.data(), n, c, bytes, refused, out);
    }
    case Dir::kBackwardFilter: {
      MPX_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max), c.op);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> r(static_cast<size_t>(max));
      MPX_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, c.xd.get(), c.x.raw_data(), c.yd.get(),
                                                                    c.y.raw_data(), c.cd.get(), c.wd.get(),
                                                                    c.w.raw_data(), max, &n, r.data(), wp, bytes),
                      c.op);
      return pick(r.data(), n, c, bytes, refused, out);
    }
  }
  return false;
}

// The algorithm for a call: cached per shape/dtype/layout/switches; a measured search only in
// benchmark mode and never while a CUDA graph is being captured (it waits for the device).
// With algorithms refused, the choice is made again without them and replaces the cached one.
Choice choose(Call& c, cudnnHandle_t h, int device, const Refused& refused) {
  const bool capturing = is_capturing();
  const bool bench = cudnn_benchmark_enabled() && !capturing;
  const Key key = key_of(c, device, bench);
  AlgoCache& cache = algo_cache();
  if (refused.empty()) {
    std::lock_guard<std::mutex> lock(cache.mu);
    // Captured in benchmark mode: what the eager warm-up steps measured, if they ran this shape.
    if (capturing && cudnn_benchmark_enabled()) {
      auto it = cache.map.find(key_of(c, device, true));
      if (it != cache.map.end() && it->second.found) return it->second;
    }
    auto it = cache.map.find(key);
    if (it != cache.map.end()) return it->second;
  }
  Choice ch;
  ch.found = bench ? measure(c, h, refused, &ch) : heuristic(c, h, refused, &ch);
  std::lock_guard<std::mutex> lock(cache.mu);
  // "None left" after refusals or a memory shortage is not remembered: the next call (with more
  // memory free) starts from cuDNN's full list again.
  if (ch.found || refused.empty()) cache.map[key] = ch;
  else cache.map.erase(key);
  return ch;
}

[[noreturn]] void no_algorithm(const Call& c) {
  MPX_ERROR(c.op, ": cuDNN has no algorithm for ", c.shapes(), c.deterministic ? " among its deterministic ones" : "",
            " (nor in the other memory format) within a ", kMaxWorkspace >> 20, " MiB workspace",
            c.deterministic ? "; turn off cuda::cudnn_deterministic" : "; try another dtype");
}

// The workspace of an algorithm, or undefined with *short_of = bytes when the pool cannot give
// that much now (the error is kept in *why).
Tensor try_workspace(const Tensor& out, size_t bytes, size_t* short_of, std::string* why) {
  try {
    return cudnn::workspace(out, bytes);
  } catch (const Error& e) {
    *short_of = bytes;
    *why = e.what();
    return Tensor();
  }
}

// Runs one algorithm of a described call; cuDNN's status rather than a throw, so that an
// algorithm it refuses at this point can be replaced (and nothing runs, with *short_of set,
// when its workspace cannot be had).
cudnnStatus_t run_algo(Call& c, cudnnHandle_t h, const Choice& ch, const Tensor& out, size_t* short_of,
                       std::string* why) {
  c.cd.set_math(ch.math, c.op);
  const Scale one(1.0), zero(0.0);
  size_t bytes = 0;
  // The size query's status, then the call on a workspace of that size (if one can be had).
  auto with_workspace = [&](cudnnStatus_t query, auto&& call) {
    if (query != CUDNN_STATUS_SUCCESS) return query;
    const Tensor ws = try_workspace(out, bytes, short_of, why);
    if (*short_of) return CUDNN_STATUS_SUCCESS;
    return call(ws.defined() ? ws.raw_data() : nullptr);
  };
  switch (c.dir) {
    case Dir::kForward: {
      const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(ch.algo);
      return with_workspace(
          cudnnGetConvolutionForwardWorkspaceSize(h, c.xd.get(), c.wd.get(), c.cd.get(), c.yd.get(), algo, &bytes),
          [&](void* ws) {
            return cudnnConvolutionForward(h, one.of(c.dt), c.xd.get(), c.x.raw_data(), c.wd.get(), c.w.raw_data(),
                                           c.cd.get(), algo, ws, bytes, zero.of(c.dt), c.yd.get(), c.y.raw_data());
          });
    }
    case Dir::kBackwardData: {
      const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(ch.algo);
      return with_workspace(
          cudnnGetConvolutionBackwardDataWorkspaceSize(h, c.wd.get(), c.yd.get(), c.cd.get(), c.xd.get(), algo, &bytes),
          [&](void* ws) {
            return cudnnConvolutionBackwardData(h, one.of(c.dt), c.wd.get(), c.w.raw_data(), c.yd.get(),
                                                c.y.raw_data(), c.cd.get(), algo, ws, bytes, zero.of(c.dt), c.xd.get(),
                                                c.x.raw_data());
          });
    }
    case Dir::kBackwardFilter: {
      const auto algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(ch.algo);
      return with_workspace(
          cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c.xd.get(), c.yd.get(), c.cd.get(), c.wd.get(), algo,
                                                         &bytes),
          [&](void* ws) {
            return cudnnConvolutionBackwardFilter(h, one.of(c.dt), c.xd.get(), c.x.raw_data(), c.yd.get(),
                                                  c.y.raw_data(), c.cd.get(), algo, ws, bytes, zero.of(c.dt),
                                                  c.wd.get(), c.w.raw_data());
          });
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

// Runs a described call, overwriting its output (y, x or w by direction). False, with nothing
// done, when cuDNN has no algorithm for it (the caller then tries the other layout). An
// algorithm cuDNN lists but then refuses (a status of its bad-parameter or not-supported
// families) is counted as a fallback and replaced by the next acceptable one; other failures throw.
bool execute(Call& c, const Tensor& out) {
  c.deterministic = cudnn_deterministic_enabled();
  cudnnHandle_t h = cudnn::handle(out);
  // A cached graph-API plan costs the host a few microseconds; the legacy API below plans
  // every call again (a quarter of a millisecond on cuDNN 9) and runs what the graph API cannot.
  if (cudnn::run_conv_plan(h, cudnn::ConvProblem{c.dir, c.dt, c.layout, c.p, c.x, c.w, c.y, c.deterministic}, out,
                           cudnn_benchmark_enabled()))
    return true;
  c.describe();
  Refused refused;
  std::string oom;
  for (;;) {
    const Choice ch = choose(c, h, out.device().index, refused);
    if (!ch.found) {
      // Every algorithm cuDNN has needs more workspace than is free: that, not "no algorithm", is the error.
      if (!oom.empty()) MPX_ERROR(c.op, ": no cuDNN algorithm for ", c.shapes(), " fits in free memory: ", oom);
      return false;
    }
    size_t short_of = 0;
    const cudnnStatus_t st = run_algo(c, h, ch, out, &short_of, &oom);
    if (short_of > 0) {
      // PyTorch's remedy too: a leaner algorithm (cached for this shape from now on).
      cudnn::count_fallback(std::string(c.op) + ": no " + std::to_string(short_of) + "-byte workspace free for " +
                                "algorithm " + std::to_string(ch.algo) + ", a leaner one runs, for " + c.shapes(),
                            CUDNN_STATUS_SUCCESS);
      refused.limit = short_of - 1;
      continue;
    }
    if (st == CUDNN_STATUS_SUCCESS) return true;
    if (!cudnn::refused(st)) cudnn::throw_error(st, c.op, "the convolution");
    cudnn::count_fallback(std::string(c.op) + ": cuDNN refused algorithm " + std::to_string(ch.algo) + " for " +
                              c.shapes(),
                          st);
    refused.algos.push_back(ch.algo);
  }
}

Layout other(Layout l) { return l == Layout::kNHWC ? Layout::kNCHW : Layout::kNHWC; }

// The layout a call runs in: the output's, or, when the output is dense in both (size-1 dims),
// the main input's, so that no activation needs a layout copy.
// f64 always runs NCHW: cuDNN's double-precision algorithms are NCHW ones.
Layout layout_for(const Tensor& out, const Tensor& in) {
  if (out.dtype() == kFloat64) return Layout::kNCHW;
  if (cudnn::layout_of(out) == Layout::kNHWC) return Layout::kNHWC;
  if (out.is_contiguous(MemoryFormat::ChannelsLast) && cudnn::layout_of(in) == Layout::kNHWC) return Layout::kNHWC;
  return Layout::kNCHW;
}

// The output itself when cuDNN can write it in place, else a dense temporary copied back after.
Tensor out_in(const Tensor& t, Layout l) {
  const bool aligned = reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0;
  if (aligned && t.is_contiguous(cudnn::memory_format(l))) return t;
  return empty(t.sizes(), t.options().memory_format(cudnn::memory_format(l)));
}
void finish(const Tensor& out, const Tensor& dense) {
  if (!dense.is_same(out)) Tensor(out).copy_(dense);
}

// gy as cuDNN's gradient routines need it: exactly the conv2d output size of x. conv_transpose2d
// with output_padding >= stride (allowed below the dilation) makes x longer than gy accounts
// for; the missing rows of gy reach no input and are zeros.
Tensor fit_gy(const Tensor& gy, int64_t Ho, int64_t Wo, Layout l, const char* op) {
  if (gy.size(2) == Ho && gy.size(3) == Wo) return gy;
  MPX_CHECK(gy.size(2) <= Ho && gy.size(3) <= Wo, op, ": gradient ", shape_str(gy.sizes()), " is larger than the ",
            Ho, " x ", Wo, " output the geometry gives");
  Tensor z = zeros({gy.size(0), gy.size(1), Ho, Wo}, gy.options().memory_format(cudnn::memory_format(l)));
  Tensor v = z.narrow(2, 0, gy.size(2)).narrow(3, 0, gy.size(3));
  v.copy_(gy);
  return z;
}

void add_bias(const Tensor& out, const Tensor& b) {
  // cuDNN has already rounded f16/bf16 outputs, so with a bias they round twice (within 1 ulp of
  // the CPU's single rounding). cudnnConvolutionBiasActivationForward fuses the bias, but for one
  // algorithm only and with its own dtype rules: not worth the slower convolutions.
  if (b.defined()) Tensor(out).add_(b.view({1, -1, 1, 1}));
}

void conv_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  if (y.numel() == 0) return;
  TensorDeviceGuard g(y);
  if (x.numel() == 0 || w.numel() == 0) {  // no input channels: the bias alone
    Tensor(y).zero_();
    add_bias(y, b);
    return;
  }
  // The preferred layout, else the other one (some dtype/layout pairs have no algorithm).
  const Layout first = layout_for(y, x);
  for (Layout l : {first, other(first)}) {
    Call c;
    c.dir = Dir::kForward;
    c.op = "conv2d";
    c.dt = y.dtype();
    c.p = p;
    c.layout = l;
    c.x = cudnn::dense_in(x, l);
    c.w = cudnn::dense_in(w, l);
    c.y = out_in(y, l);
    if (execute(c, y)) {
      add_bias(c.y, b);
      finish(y, c.y);
      return;
    }
    if (l != first) no_algorithm(c);
  }
}

void backward_input(const char* op, const Tensor& gx, const Tensor& gy, const Tensor& w, const Tensor& b,
                    const Conv2dParams& p) {
  if (gx.numel() == 0) return;
  TensorDeviceGuard g(gx);
  if (gy.numel() == 0 || w.numel() == 0) {
    Tensor(gx).zero_();
    add_bias(gx, b);
    return;
  }
  const int64_t Ho = conv_out(gx.size(2), w.size(2), p.stride[0], p.padding[0], p.dilation[0]);
  const int64_t Wo = conv_out(gx.size(3), w.size(3), p.stride[1], p.padding[1], p.dilation[1]);
  const Layout first = layout_for(gx, gy);
  for (Layout l : {first, other(first)}) {
    Call c;
    c.dir = Dir::kBackwardData;
    c.op = op;
    c.dt = gx.dtype();
    c.p = p;
    c.layout = l;
    c.y = cudnn::dense_in(fit_gy(gy, Ho, Wo, l, op), l);
    c.w = cudnn::dense_in(w, l);
    c.x = out_in(gx, l);
    if (execute(c, gx)) {
      add_bias(c.x, b);
      finish(gx, c.x);
      return;
    }
    if (l != first) no_algorithm(c);
  }
}

void conv_backward_input(const Tensor& gx, const Tensor& gy, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  backward_input("conv2d_backward_input", gx, gy, w, b, p);
}
void conv_transpose_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  backward_input("conv_transpose2d", y, x, w, b, p);
}

void conv_backward_weight(const Tensor& gw, const Tensor& gy, const Tensor& x, const Conv2dParams& p) {
  if (gw.numel() == 0) return;
  TensorDeviceGuard g(gw);
  if (gy.numel() == 0 || x.numel() == 0) {
    Tensor(gw).zero_();
    return;
  }
  const int64_t Ho = conv_out(x.size(2), gw.size(2), p.stride[0], p.padding[0], p.dilation[0]);
  const int64_t Wo = conv_out(x.size(3), gw.size(3), p.stride[1], p.padding[1], p.dilation[1]);
  // The activations decide (the weight gradient is small): x's layout, or gy's when x is both.
  const Layout first = layout_for(x, gy);
  for (Layout l : {first, other(first)}) {
    Call c;
    c.dir = Dir::kBackwardFilter;
    c.op = "conv2d_backward_weight";
    c.dt = gw.dtype();
    c.p = p;
    c.layout = l;
    c.x = cudnn::dense_in(x, l);
    c.y = cudnn::dense_in(fit_gy(gy, Ho, Wo, l, c.op), l);
    c.w = out_in(gw, l);
    if (execute(c, gw)) {
      finish(gw, c.w);
      return;
    }
    if (l != first) no_algorithm(c);
  }
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_conv) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    dispatch::register_kernel<OpId::conv2d>(DeviceType::kCUDA, dt, &conv_forward);
    dispatch::register_kernel<OpId::conv2d_backward_input>(DeviceType::kCUDA, dt, &conv_backward_input);
    dispatch::register_kernel<OpId::conv_transpose2d>(DeviceType::kCUDA, dt, &conv_transpose_forward);
    dispatch::register_kernel<OpId::conv2d_backward_weight>(DeviceType::kCUDA, dt, &conv_backward_weight);
  }
}

}  // namespace mpx::cuda
#endif  // MPX_WITH_CUDNN
