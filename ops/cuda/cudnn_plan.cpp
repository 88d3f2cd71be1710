// Convolution execution plans on cuDNN's graph API, built once per shape and cached (see cudnn_plan.h).
#ifdef MPX_WITH_CUDNN
#include "ops/cuda/cudnn_plan.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda.h"

// The graph's handle attributes are deprecated in favour of device-property descriptors in
// recent cuDNN 9 releases; they remain the way to bind a plan to a handle in cuDNN 8 and 9.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace mpx::cuda::cudnn {
namespace {

// An owned backend descriptor (none when default-constructed).
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) { status_ = cudnnBackendCreateDescriptor(type, &d_); }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc(Desc&& o) noexcept : d_(o.d_), status_(o.status_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    status_ = o.status_;
    return *this;
  }
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* addr() { return &d_; }
  cudnnStatus_t status() const { return status_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
};

// Building a plan stops at the first status that is not SUCCESS; `ok` says whether all were.
struct Builder {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  bool ok() const { return st == CUDNN_STATUS_SUCCESS; }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t n, const void* v) {
    if (ok()) st = cudnnBackendSetAttribute(d, name, type, n, v);
  }
  void finalize(cudnnBackendDescriptor_t d) {
    if (ok()) st = cudnnBackendFinalize(d);
  }
  void created(const Desc& d) {
    if (ok()) st = d.status();
  }
};

struct Plan {
  Desc plan;  // none: the graph API has no plan for this problem
  int64_t workspace = 0;
  bool usable() const { return plan.get() != nullptr; }
};

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';
// The same bound as the legacy path: workspaces come from the stream-ordered pool.
constexpr int64_t kMaxWorkspace = int64_t{1} << 30;

// Dense strides of a [d0, d1, d2, d3] tensor in the layout (NHWC: d1 is the fastest dimension).
std::array<int64_t, 4> strides_of(const std::array<int64_t, 4>& d, Layout l) {
  if (l == Layout::kNHWC) return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}
int64_t alignment_of(const Tensor& t) {
  const auto a = reinterpret_cast<uintptr_t>(t.raw_data());
  int64_t al = 16;
  while (al > 1 && a % static_cast<uintptr_t>(al) != 0) al /= 2;
  return al;
}

Desc tensor_desc(Builder& b, const Tensor& t, Layout l, int64_t uid, cudnnDataType_t type) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  b.created(d);
  const std::array<int64_t, 4> dims{t.size(0), t.size(1), t.size(2), t.size(3)};
  const auto strides = strides_of(dims, l);
  const int64_t align = alignment_of(t);
  b.set(d.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  b.set(d.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  b.set(d.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  b.set(d.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  b.set(d.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  b.finalize(d.get());
  return d;
}

// MPX_CUDNN_REDUCED_PRECISION=1, for comparisons only: also consider engines that reduce in 16
// bits, which PyTorch's convolutions may pick and mpx's numerics contract (f32 accumulation)
// excludes, to measure what the contract costs.
bool reduced_precision_allowed() {
  static const bool on = [] {
    const char* v = std::getenv("MPX_CUDNN_REDUCED_PRECISION");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

// Whether an engine config's engine may run this problem under mpx's numerics contract, and
// whether it compiles kernels at run time (tried only when nothing else is left).
struct Notes {
  bool usable = false, runtime_compiled = false;
};
Notes notes_of(cudnnBackendDescriptor_t cfg, const ConvProblem& c) {
  Notes out;
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (engine.status() != CUDNN_STATUS_SUCCESS) return out;
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                               engine.addr()) != CUDNN_STATUS_SUCCESS)
    return out;
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> num{};
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> beh{};
  int64_t nn = 0, nb = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(num.size()), &nn, num.data()) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               static_cast<int64_t>(beh.size()), &nb, beh.data()) != CUDNN_STATUS_SUCCESS)
    return out;
  const bool f32 = c.dt == kFloat32;
  for (int64_t i = 0; i < std::min<int64_t>(nn, static_cast<int64_t>(num.size())); ++i) {
    switch (num[static_cast<size_t>(i)]) {
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        if (f32 && !tf32_allowed()) return out;  // TF32 for f32 data only when allowed
        break;
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        if (f32) return out;
        break;
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
        if (!reduced_precision_allowed()) return out;  // mpx accumulates in f32
        break;
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
        if (c.deterministic) return out;
        break;
      default: break;
    }
  }
  for (int64_t i = 0; i < std::min<int64_t>(nb, static_cast<int64_t>(beh.size())); ++i)
    if (beh[static_cast<size_t>(i)] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) out.runtime_compiled = true;
  out.usable = true;
  return out;
}

// One execution of a plan on the problem's tensors; cuDNN's status.
cudnnStatus_t execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const ConvProblem& c, void* ws) {
  std::array<int64_t, 3> uids{kUidX, kUidW, kUidY};
  std::array<void*, 3> ptrs{c.x.raw_data(), c.w.raw_data(), c.y.raw_data()};
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  Builder b;
  b.created(pack);
  b.set(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids.data());
  b.set(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs.data());
  b.set(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  b.finalize(pack.get());
  if (b.ok()) b.st = cudnnBackendExecute(h, plan, pack.get());
  return b.st;
}

// A plan's workspace from the pool into *ws (left undefined for none); false when the pool
// cannot give that much now.
bool workspace_for(const Plan& p, const Tensor& out, Tensor* ws) {
  if (p.workspace == 0) return true;
  try {
    *ws = workspace(out, static_cast<size_t>(p.workspace));
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Milliseconds of three runs of a plan after one untimed run (the output is overwritten, as
// the real call then writes it again); negative when it cannot run now. `best` is the fastest
// three runs so far (negative: none): a first run already 1.5x slower per run than that ends
// the timing there, since among slow f32 engines on large layers the search's runs take minutes.
double time_plan(cudnnHandle_t h, const Plan& p, const ConvProblem& c, const Tensor& out, double best) {
  Tensor ws;
  if (!workspace_for(p, out, &ws)) return -1;
  void* wsp = ws.defined() ? ws.raw_data() : nullptr;
  if (execute(h, p.plan.get(), c, wsp) != CUDNN_STATUS_SUCCESS) return -1;
  Event start(true), first(true), end(true);
  start.record();
  if (execute(h, p.plan.get(), c, wsp) != CUDNN_STATUS_SUCCESS) return -1;
  first.record();
  if (best >= 0) {
    first.synchronize();
    const double one = start.elapsed_ms(first);
    if (one > 1.5 * best / 3) return 3 * one;
  }
  for (int i = 0; i < 2; ++i)
    if (execute(h, p.plan.get(), c, wsp) != CUDNN_STATUS_SUCCESS) return -1;
  end.record();
  end.synchronize();
  return start.elapsed_ms(end);
}

// At most how many usable plans a measured search times. PyTorch's benchmark mode times every
// config of the heuristic and of the fallback list; the heuristic's ranking alone misses the
// fastest engine for some shapes, so mpx's does the same, bounded against a pathological list.
constexpr size_t kMeasured = 32;

// The plan of a problem, or an empty Plan when cuDNN's graph API offers none: the heuristic's
// first usable one, or with `measure` the fastest of the usable configs of the heuristic and the
// fallback list (at most kMeasured) on the call's tensors.
std::unique_ptr<Plan> build(cudnnHandle_t h, const ConvProblem& c, bool measure, const Tensor& out) {
  auto plan = std::make_unique<Plan>();
  Builder b;
  const cudnnDataType_t type = data_type(c.dt, "conv2d");
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  Desc x = tensor_desc(b, c.x, c.layout, kUidX, type);
  Desc w = tensor_desc(b, c.w, c.layout, kUidW, type);
  Desc y = tensor_desc(b, c.y, c.layout, kUidY, type);

  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  b.created(conv);
  const int64_t dims = 2;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::array<int64_t, 2> stride{c.p.stride[0], c.p.stride[1]}, pad{c.p.padding[0], c.p.padding[1]},
      dil{c.p.dilation[0], c.p.dilation[1]};
  b.set(conv.get(), CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  b.set(conv.get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  b.set(conv.get(), CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  b.set(conv.get(), CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil.data());
  b.set(conv.get(), CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride.data());
  b.set(conv.get(), CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad.data());
  b.set(conv.get(), CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad.data());
  b.finalize(conv.get());

  // The operation; groups follow from x's channels over w's input channels.
  struct Names {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
  };
  const Names n =
      c.dir == ConvDir::kForward
          ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y}
      : c.dir == ConvDir::kBackwardData
          ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY}
          : Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
  Desc op(n.type);
  b.created(op);
  const float alpha = 1.0f, beta = 0.0f;
  b.set(op.get(), n.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  b.set(op.get(), n.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  b.set(op.get(), n.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, conv.addr());
  b.set(op.get(), n.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, x.addr());
  b.set(op.get(), n.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, w.addr());
  b.set(op.get(), n.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, y.addr());
  b.finalize(op.get());

  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  b.created(graph);
  b.set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, op.addr());
  b.set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  b.finalize(graph.get());
  if (!b.ok()) return plan;

  // Heuristic mode A's ranking, then the fallback list: the first usable engine config whose
  // plan finalizes within the workspace bound, those compiling kernels at run time last. A
  // measured search collects from both lists, and takes engines compiling kernels at run time
  // (seconds each) only when nothing else runs.
  std::vector<std::unique_ptr<Plan>> found;
  for (cudnnBackendHeurMode_t mode_h : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    if (found.size() >= kMeasured) break;
    Builder hb;
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    hb.created(heur);
    hb.set(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, graph.addr());
    hb.set(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode_h);
    hb.finalize(heur.get());
    int64_t count = 0;
    if (hb.ok())
      hb.st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                       &count, nullptr);
    if (!hb.ok() || count <= 0) continue;
    std::vector<Desc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      if (cfgs.back().status() != CUDNN_STATUS_SUCCESS) return plan;
      raw.push_back(cfgs.back().get());
    }
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &count, raw.data()) != CUDNN_STATUS_SUCCESS)
      continue;
    count = std::min<int64_t>(count, static_cast<int64_t>(raw.size()));
    for (bool compiled : {false, true}) {
      if (compiled && !found.empty()) break;
      for (int64_t i = 0; i < count; ++i) {
        const Notes notes = notes_of(raw[static_cast<size_t>(i)], c);
        if (!notes.usable || notes.runtime_compiled != compiled) continue;
        Desc p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        Builder pb;
        pb.created(p);
        pb.set(p.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
        pb.set(p.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &raw[static_cast<size_t>(i)]);
        pb.finalize(p.get());
        int64_t ws = 0, got = 0;
        if (pb.ok())
          pb.st = cudnnBackendGetAttribute(p.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                           &got, &ws);
        if (!pb.ok() || ws < 0 || ws > kMaxWorkspace) continue;
        auto f = std::make_unique<Plan>();
        f->workspace = ws;
        f->plan = std::move(p);
        if (!measure) return f;
        found.push_back(std::move(f));
        if (found.size() == kMeasured) break;
      }
      if (found.size() == kMeasured) break;
    }
  }
  double best = -1;
  for (auto& f : found) {
    const double ms = time_plan(h, *f, c, out, best);
    if (ms >= 0 && (best < 0 || ms < best)) best = ms, plan = std::move(f);
  }
  return plan;
}

using Key = std::array<int64_t, 30>;
Key key_of(cudnnHandle_t h, const ConvProblem& c, int device, bool measured) {
  Key k{};
  size_t i = 0;
  k[i++] = measured;
  k[i++] = reinterpret_cast<int64_t>(h);  // plans are bound to the handle that built them
  k[i++] = device;
  k[i++] = static_cast<int64_t>(c.dir);
  k[i++] = static_cast<int64_t>(c.dt);
  k[i++] = static_cast<int64_t>(c.layout);
  for (const Tensor* t : {&c.x, &c.w, &c.y}) {
    for (int d = 0; d < 4; ++d) k[i++] = t->size(d);
    k[i++] = alignment_of(*t);
  }
  for (int d = 0; d < 2; ++d) {
    k[i++] = c.p.stride[d];
    k[i++] = c.p.padding[d];
    k[i++] = c.p.dilation[d];
  }
  k[i++] = c.deterministic;
  k[i++] = tf32_allowed();
  return k;
}

struct Cache {
  std::mutex mu;
  std::map<Key, std::shared_ptr<Plan>> map;
};
Cache& cache() {
  static auto* c = new Cache;  // leaked: plans outlive static destruction order
  return *c;
}

bool legacy_only() {
  static const bool on = [] {
    const char* v = std::getenv("MPX_CUDNN_LEGACY");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

}  // namespace

bool run_conv_plan(cudnnHandle_t h, const ConvProblem& c, const Tensor& out, bool benchmark) {
  if (c.dt == kFloat64 || legacy_only()) return false;
  // A measured search waits for the device, which a graph capture forbids: a capture takes what
  // the eager warm-up measured for this shape, else the heuristic's plan.
  const bool capturing = is_capturing();
  const bool measure = benchmark && !capturing;
  const int device = out.device().index;
  Key key = key_of(h, c, device, measure);
  Cache& cc = cache();
  std::shared_ptr<Plan> plan;
  {
    std::lock_guard<std::mutex> l(cc.mu);
    if (benchmark && capturing) {
      auto it = cc.map.find(key_of(h, c, device, true));
      if (it != cc.map.end() && it->second->usable()) plan = it->second;
    }
    if (!plan) {
      auto it = cc.map.find(key);
      if (it != cc.map.end()) plan = it->second;
    }
  }
  if (!plan) {
    plan = build(h, c, measure, out);
    if (!plan->usable())
      count_fallback(std::string("conv2d: cuDNN's graph API has no plan for ") + dtype_name(c.dt) + " " +
                         shape_str(c.x.sizes()) + " * " + shape_str(c.w.sizes()) + " (" +
                         (c.layout == Layout::kNHWC ? "channels-last" : "NCHW") + "); the legacy API runs it",
                     CUDNN_STATUS_SUCCESS);
    std::lock_guard<std::mutex> l(cc.mu);
    cc.map.emplace(key, plan);
  }
  if (!plan->usable()) return false;
  Tensor ws;
  if (!workspace_for(*plan, out, &ws)) return false;  // not that much free now: the legacy path finds a leaner one
  const cudnnStatus_t st = execute(h, plan->plan.get(), c, ws.defined() ? ws.raw_data() : nullptr);
  if (st == CUDNN_STATUS_SUCCESS) return true;
  if (!refused(st)) throw_error(st, "conv2d", "cudnnBackendExecute");
  // Refused at run time: this shape goes to the legacy API from now on.
  count_fallback(std::string("conv2d: cuDNN refused its graph-API plan for ") + dtype_name(c.dt) + " " +
                     shape_str(c.x.sizes()) + "; the legacy API runs it",
                 st);
  std::lock_guard<std::mutex> l(cc.mu);
  cc.map[key] = std::make_shared<Plan>();
  return false;
}

}  // namespace mpx::cuda::cudnn
#endif  // MPX_WITH_CUDNN
