// CUDA kernels for row reductions (sum/mean, var, max/min with indices), softmax/log_softmax forward and fused
// backward, and the cross-entropy rows' forward. Launchers take POD arguments.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/launch.h"
#include "ops/cuda/reduction_launch.h"
#include "ops/cuda/convert.cuh"
#include "ops/formulas.h"

namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kStateBytes = 32;  // workspace slot per (row, chunk) partial state
constexpr int64_t kMaxBlocks = 65535LL * 8;

template <typename V> __device__ __forceinline__ bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) return isnan(v);
  else return false;
}
template <typename V> __device__ __forceinline__ V shfl(V v, int off, int width) {
  return __shfl_xor_sync(0xffffffffu, v, off, width);
}
__device__ __forceinline__ float exp_a(float x) { return expf(x); }
__device__ __forceinline__ double exp_a(double x) { return exp(x); }
__device__ __forceinline__ float log_a(float x) { return logf(x); }
__device__ __forceinline__ double log_a(double x) { return log(x); }

// A row of the reduction: n elements `inner` apart, starting at base(r); rows are the
// outer * inner lanes of an [outer, n, inner] layout (inner = 1: contiguous rows).
struct Geom {
  int64_t n, inner;
  __device__ __forceinline__ int64_t base(int64_t r) const { return (r / inner) * n * inner + r % inner; }
};

// ---- the row ops: each defines S (partial state), init/step/combine/shfl, and either
// finish (write out[r]) or prepare/apply (rewrite every element of the row, softmax) ----

template <typename T> struct SumOp {
  using A = std::conditional_t<std::is_integral_v<T>, int64_t, acc_t<T>>;
  using S = A;
  using V = A;
  using P = S;
  static constexpr bool kApply = false;
  Geom g;
  const T* in;
  T* out;
  bool mean;
  bool square;  // the sum of squares (norm's), each square formed in A
  __device__ static S init() { return S(0); }
  __device__ V load(int64_t off) const {
    const A v = load_as<A>(in, off);
    return square ? v * v : v;
  }
  __device__ void step(S& s, V v, int64_t) const { s += v; }
  __device__ S combine(S a, S b) const { return a + b; }
  __device__ static S shfl_s(S s, int off, int w) { return shfl(s, off, w); }
  __device__ void finish(S s, int64_t r, int64_t) const {
    if constexpr (std::is_integral_v<T>) {
      out[r] = mean ? static_cast<T>(static_cast<double>(s) / static_cast<double>(g.n)) : static_cast<T>(s);
    } else {
      out[r] = from_acc<T>(mean ? s / static_cast<A>(g.n) : s);
    }
  }
  __device__ P prepare(S s) const { return s; }
  __device__ void apply(P, int64_t) const {}
};

template <typename A> struct Welford {
  int64_t n;
  A mean, m2;
};
// Accumulates in f64 like the CPU's two-pass kernel: in f32, Welford's running mean loses about
// mean/std relative digits (4e-5 at mean 1e4, std 1), more than f32 results may differ by.
template <typename T> struct VarOp {
  using A = double;
  using S = Welford<A>;
  using V = A;
  using P = S;
  static constexpr bool kApply = false;
  Geom g;
  const T* in;
  T* out;
  double correction;
  __device__ static S init() { return S{0, A(0), A(0)}; }
  __device__ V load(int64_t off) const { return load_as<A>(in, off); }
  __device__ void step(S& s, V x, int64_t) const {
    s.n += 1;
    const A d = x - s.mean;
    s.mean += d / static_cast<A>(s.n);
    s.m2 += d * (x - s.mean);
  }
  // Chan et al.'s parallel combination of two partial (count, mean, M2) states.
  __device__ S combine(S a, S b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const A d = b.mean - a.mean;
    const A fb = static_cast<A>(b.n) / static_cast<A>(n);
    return S{n, a.mean + d * fb, a.m2 + b.m2 + d * d * static_cast<A>(a.n) * fb};
  }
  __device__ static S shfl_s(S s, int off, int w) {
    return S{shfl(s.n, off, w), shfl(s.mean, off, w), shfl(s.m2, off, w)};
  }
  __device__ void finish(S s, int64_t r, int64_t) const {
    const double denom = fmax(0.0, static_cast<double>(g.n) - correction);
    out[r] = from_acc<T>(static_cast<A>(static_cast<double>(s.m2) / denom));
  }
  __device__ P prepare(S s) const { return s; }
  __device__ void apply(P, int64_t) const {}
};

// Integers compare in their own type (u8 widened to int for the shuffles).
template <typename T> struct ArgAccOf { using type = acc_t<T>; };
template <> struct ArgAccOf<uint8_t> { using type = int; };
template <typename A> struct ArgState {
  A v;
  int64_t i;  // -1: no element seen
};
// Max (min) with the CPU's choice among equals: the smallest index; a NaN beats every
// number and the first NaN wins. That order is associative, so any reduction tree agrees
// with the CPU's left-to-right scan.
template <typename T> struct ArgOp {
  using A = typename ArgAccOf<T>::type;
  using S = ArgState<A>;
  using V = A;
  using P = S;
  static constexpr bool kApply = false;
  Geom g;
  const T* in;
  T* values;
  int64_t* indices;
  bool is_max;
  __device__ static S init() { return S{A(0), -1}; }
  __device__ V load(int64_t off) const { return load_as<A>(in, off); }
  __device__ bool better(A x, A y) const { return is_max ? x > y : x < y; }
  __device__ void step(S& s, V x, int64_t k) const {
    if (s.i < 0) { s = S{x, k}; return; }
    if (is_nan(s.v)) return;
    if (is_nan(x) || better(x, s.v)) s = S{x, k};
  }
  __device__ S combine(S a, S b) const {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) {
      if (an && bn) return a.i < b.i ? a : b;
      return an ? a : b;
    }
    if (better(b.v, a.v)) return b;
    if (b.v == a.v && b.i < a.i) return b;
    return a;
  }
  __device__ static S shfl_s(S s, int off, int w) { return S{shfl(s.v, off, w), shfl(s.i, off, w)}; }
  __device__ void finish(S s, int64_t r, int64_t base) const {
    values[r] = in[base + s.i * g.inner];  // the element itself: -0.0 and NaN payloads survive
    indices[r] = s.i;
  }
  __device__ P prepare(S s) const { return s; }
  __device__ void apply(P, int64_t) const {}
};

template <typename A> struct SoftmaxPrep {
  A shift, t;  // t: log(s) for log_softmax, 1/s for softmax
};
template <typename A> __device__ __forceinline__ A shift_of(A m) { return (isinf(m) && m < A(0)) ? A(0) : m; }
template <typename A> __device__ __forceinline__ A max_nan(A a, A b) {
  if (is_nan(a)) return a;
  return (is_nan(b) || b > a) ? b : a;
}
template <typename A> __device__ __forceinline__ A rescale(A s, A m_old, A m_new) {
  // s == 0 stays 0 (exp of a huge difference would make 0 * inf = NaN).
  if (s == A(0) || m_old == m_new) return s;
  return s * exp_a(shift_of(m_old) - shift_of(m_new));
}

// Online softmax statistics: m = running max (NaN-propagating), s = sum exp(x - shift(m)),
// where shift(-inf) = 0 as in the CPU kernel (an all -inf lane keeps its inputs).
template <typename A> struct SoftmaxState {
  A m, s;
  __device__ static SoftmaxState init() { return SoftmaxState{-INFINITY, A(0)}; }
  __device__ void add(A x) {
    const A mn = max_nan(m, x);
    s = rescale(s, m, mn);
    m = mn;
    s += exp_a(x - shift_of(mn));
  }
  __device__ static SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
    const A mn = max_nan(a.m, b.m);
    return SoftmaxState{mn, rescale(a.s, a.m, mn) + rescale(b.s, b.m, mn)};
  }
  __device__ SoftmaxState shfl_s(int off, int w) const { return SoftmaxState{shfl(m, off, w), shfl(s, off, w)}; }
  __device__ A lse() const { return shift_of(m) + log_a(s); }
};

template <typename T> struct SoftmaxOp {
  using A = acc_t<T>;
  using S = SoftmaxState<A>;
  using V = A;
  using P = SoftmaxPrep<A>;
  static constexpr bool kApply = true;
  Geom g;
  const T* in;
  T* out;
  bool log;
  __device__ static S init() { return S::init(); }
  __device__ V load(int64_t off) const { return load_as<A>(in, off); }
  __device__ void step(S& st, V x, int64_t) const { st.add(x); }
  __device__ S combine(S a, S b) const { return S::merge(a, b); }
  __device__ static S shfl_s(S s, int off, int w) { return s.shfl_s(off, w); }
  __device__ void finish(S, int64_t, int64_t) const {}
  __device__ P prepare(S s) const { return P{shift_of(s.m), log ? log_a(s.s) : A(1) / s.s}; }
  __device__ void apply(P p, int64_t off) const {
    const A x = load_as<A>(in, off);
    out[off] = from_acc<T>(log ? (x - p.shift) - p.t : exp_a(x - p.shift) * p.t);
  }
};

// Cross-entropy of a row: the softmax statistics plus the row's sum (label smoothing), then the loss at its target.
template <typename A> struct CrossEntropyState {
  SoftmaxState<A> st;
  A sx;
};
template <typename T> struct CrossEntropyOp {
  using A = acc_t<T>;
  using S = CrossEntropyState<A>;
  using V = A;
  using P = S;
  static constexpr bool kApply = false;
  Geom g;
  const T* in;
  const int64_t* target;
  A* loss;
  A* lse;
  int64_t ignore_index;
  A eps;
  __device__ static S init() { return S{SoftmaxState<A>::init(), A(0)}; }
  __device__ V load(int64_t off) const { return load_as<A>(in, off); }
  __device__ void step(S& s, V x, int64_t) const {
    s.st.add(x);
    s.sx += x;
  }
  __device__ S combine(S a, S b) const { return S{SoftmaxState<A>::merge(a.st, b.st), a.sx + b.sx}; }
  __device__ static S shfl_s(S s, int off, int w) { return S{s.st.shfl_s(off, w), shfl(s.sx, off, w)}; }
  __device__ void finish(S s, int64_t r, int64_t base) const {
    const A l = s.st.lse();
    lse[r] = l;
    const int64_t c = target[r];
    if (c == ignore_index) loss[r] = A(0);
    else if (c < 0 || c >= g.n) loss[r] = A(NAN);  // guarded; the op layer reports it
    else loss[r] = formulas::cross_entropy_row_loss(l, load_as<A>(in, base + c * g.inner), s.sx, eps, A(1) / A(g.n));
  }
  __device__ P prepare(S s) const { return s; }
  __device__ void apply(P, int64_t) const {}
};

template <typename A> struct Pair {
  A g, y;
};
// softmax: gin = y * (g - sum(g * y)); log_softmax: gin = g - exp(y) * sum(g).
template <typename T> struct SoftmaxBackwardOp {
  using A = acc_t<T>;
  using S = A;
  using V = Pair<A>;
  using P = A;
  static constexpr bool kApply = true;
  Geom g;
  const T* gp;
  const T* y;
  T* gin;
  bool log;
  __device__ static S init() { return A(0); }
  __device__ V load(int64_t off) const { return V{load_as<A>(gp, off), log ? A(0) : load_as<A>(y, off)}; }
  __device__ void step(S& s, V v, int64_t) const { s += log ? v.g : v.g * v.y; }
  __device__ S combine(S a, S b) const { return a + b; }
  __device__ static S shfl_s(S s, int off, int w) { return shfl(s, off, w); }
  __device__ void finish(S, int64_t, int64_t) const {}
  __device__ P prepare(S s) const { return s; }
  __device__ void apply(P s, int64_t off) const {
    const A gv = load_as<A>(gp, off), yv = load_as<A>(y, off);
    gin[off] = from_acc<T>(log ? gv - exp_a(yv) * s : yv * (gv - s));
  }
};

// ---- the three row drivers ----

template <class Op>
__device__ __forceinline__ void accumulate(const Op& op, typename Op::S& s, int64_t base, int64_t k, int64_t end,
                                           int64_t step) {
  const int64_t st = op.g.inner;
  // Four independent loads in flight per thread before they are folded in.
  for (; k + 3 * step < end; k += 4 * step) {
    const auto v0 = op.load(base + k * st);
    const auto v1 = op.load(base + (k + step) * st);
    const auto v2 = op.load(base + (k + 2 * step) * st);
    const auto v3 = op.load(base + (k + 3 * step) * st);
    op.step(s, v0, k);
    op.step(s, v1, k + step);
    op.step(s, v2, k + 2 * step);
    op.step(s, v3, k + 3 * step);
  }
  for (; k < end; k += step) op.step(s, op.load(base + k * st), k);
}

// Writes the row's result, or (softmax) rewrites its elements with this thread's share.
template <class Op>
__device__ __forceinline__ void finish_row(const Op& op, const typename Op::S& s, int64_t r, int64_t base, int lane,
                                           int width) {
  if constexpr (Op::kApply) {
    const typename Op::P p = op.prepare(s);
    for (int64_t k = lane; k < op.g.n; k += width) op.apply(p, base + k * op.g.inner);
  } else {
    if (lane == 0) op.finish(s, r, base);
  }
}

// Block-wide combine; every thread gets the result. `sh` holds 32 states.
template <class Op>
__device__ typename Op::S block_reduce(const Op& op, typename Op::S s, typename Op::S* sh) {
  for (int off = 16; off > 0; off >>= 1) s = op.combine(s, Op::shfl_s(s, off, 32));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
  __syncthreads();  // sh[0] may still be read from the previous row
  if (lane == 0) sh[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < nw ? sh[lane] : Op::init();
    for (int off = 16; off > 0; off >>= 1) s = op.combine(s, Op::shfl_s(s, off, 32));
    if (lane == 0) sh[0] = s;
  }
  __syncthreads();
  return sh[0];
}

// Short rows: a group of G lanes (a power of two <= 32) per row, several rows per warp.
// The loop bound is uniform over the warp, so the shuffles always see all 32 lanes.
template <class Op>
__global__ void __launch_bounds__(kThreads) rows_group_kernel(Op op, int64_t rows, int G) {
  const int gpw = 32 / G;
  const int wl = threadIdx.x & 31;
  const int lane = wl & (G - 1);
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t w = warp; w * gpw < rows; w += nwarps) {
    const int64_t r = w * gpw + wl / G;
    const bool active = r < rows;
    typename Op::S s = Op::init();
    const int64_t base = active ? op.g.base(r) : 0;
    if (active) accumulate(op, s, base, lane, op.g.n, G);
    for (int off = G / 2; off > 0; off >>= 1) s = op.combine(s, Op::shfl_s(s, off, G));
    if (active) finish_row(op, s, r, base, lane, G);
  }
}

// Medium rows: one block per row.
template <class Op>
__global__ void __launch_bounds__(kThreads) rows_block_kernel(Op op, int64_t rows) {
  __shared__ typename Op::S sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    typename Op::S s = Op::init();
    const int64_t base = op.g.base(r);
    accumulate(op, s, base, threadIdx.x, op.g.n, blockDim.x);
    s = block_reduce(op, s, sh);
    finish_row(op, s, r, base, threadIdx.x, blockDim.x);
  }
}

// Long rows, few of them: each block reduces one chunk of a row into ws[row * chunks + c] ...
template <class Op>
__global__ void __launch_bounds__(kThreads) split_partial_kernel(Op op, int64_t rows, int64_t chunks,
                                                                 int64_t chunk_len, typename Op::S* ws) {
  __shared__ typename Op::S sh[32];
  for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const int64_t r = b / chunks, c = b % chunks;
    const int64_t k0 = c * chunk_len, k1 = k0 + chunk_len < op.g.n ? k0 + chunk_len : op.g.n;
    typename Op::S s = Op::init();
    accumulate(op, s, op.g.base(r), k0 + threadIdx.x, k1, blockDim.x);
    s = block_reduce(op, s, sh);
    if (threadIdx.x == 0) ws[b] = s;
  }
}

// ... then one block per row combines the chunks (in any order: every combine is order-free
// up to rounding) and writes the result, or leaves it in the row's first slot for the apply.
template <class Op>
__global__ void __launch_bounds__(kThreads) split_combine_kernel(Op op, int64_t rows, int64_t chunks,
                                                                 typename Op::S* ws) {
  __shared__ typename Op::S sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    typename Op::S s = Op::init();
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) s = op.combine(s, ws[r * chunks + c]);
    s = block_reduce(op, s, sh);
    if (threadIdx.x == 0) {
      if constexpr (Op::kApply) ws[r * chunks] = s;
      else op.finish(s, r, op.g.base(r));
    }
  }
}

template <class Op>
__global__ void __launch_bounds__(kThreads) split_apply_kernel(Op op, int64_t rows, int64_t chunks,
                                                               int64_t chunk_len, const typename Op::S* ws) {
  for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const int64_t r = b / chunks, c = b % chunks;
    const int64_t k0 = c * chunk_len, k1 = k0 + chunk_len < op.g.n ? k0 + chunk_len : op.g.n;
    const typename Op::P p = op.prepare(ws[r * chunks]);
    const int64_t base = op.g.base(r);
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) op.apply(p, base + k * op.g.inner);
  }
}

// ---- launch plan by shape ----

int sm_count() {
  static int cache[64] = {};
  int dev = 0;
  MPX_CUDA_CHECK(cudaGetDevice(&dev), "cuda reduction");
  if (dev < 0 || dev >= 64) return 108;
  if (!cache[dev]) MPX_CUDA_CHECK(cudaDeviceGetAttribute(&cache[dev], cudaDevAttrMultiProcessorCount, dev), "cuda reduction");
  return cache[dev] > 0 ? cache[dev] : 108;
}

int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v && p < 32) p <<= 1;
  return p;
}

enum class Kind { kGroup, kBlock, kSplit };
struct Plan {
  Kind kind = Kind::kGroup;
  int group = 32;           // lanes per row (kGroup)
  int64_t chunks = 1, chunk_len = 0;  // kSplit
};

// Contiguous rows: short ones share a warp, medium ones get a block, long ones (or a few of
// them) are split across blocks so the whole GPU works on them. Chunks are capped so no
// thread folds more than ~128 elements sequentially (f32 accumulation error stays small).
Plan plan_rows(int64_t rows, int64_t cols, int64_t inner) {
  const int64_t sms = sm_count();
  Plan p;
  if (inner == 1) {
    if (cols <= 1024) {
      // About four elements per lane: fewer shuffle levels and more loads in flight per
      // warp than one lane per element (rows of 10 get 4 lanes, 8 rows per warp).
      p.group = pow2_ceil((cols + 3) / 4);
      return p;
    }
    if (cols <= 32768) {
      p.kind = Kind::kBlock;
      return p;
    }
  } else {
    // Lanes `inner` apart: neighbouring rows are neighbours in memory, so few lanes per
    // row keep the loads coalesced; more lanes per row only when rows are scarce.
    int64_t g = rows >= sms * 1024 ? 1 : (sms * 1024) / (rows > 0 ? rows : 1);
    p.group = pow2_ceil(g < cols ? g : cols);
    if (g > 32 && p.group == 32 && cols > 4096) {
      // Too few lanes even at a warp each: split below.
    } else {
      return p;
    }
  }
  p.kind = Kind::kSplit;
  const int64_t target = sms * 8;  // blocks wanted in flight
  int64_t len = (rows * cols + target - 1) / target;
  if (len < 4096) len = 4096;
  if (len > 32768) len = 32768;
  len = (len + 1023) / 1024 * 1024;
  p.chunk_len = len;
  p.chunks = (cols + len - 1) / len;
  return p;
}

template <class Op>
void run_rows(const Op& op, int64_t rows, void* ws, cudaStream_t s, const char* what) {
  static_assert(sizeof(typename Op::S) <= kStateBytes, "partial state larger than its workspace slot");
  if (rows == 0 || op.g.n == 0) return;
  const Plan p = plan_rows(rows, op.g.n, op.g.inner);
  switch (p.kind) {
    case Kind::kGroup: {
      const int64_t groups_per_block = kThreads / p.group;
      int64_t blocks = (rows + groups_per_block - 1) / groups_per_block;
      if (blocks > kMaxBlocks) blocks = kMaxBlocks;
      rows_group_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(op, rows, p.group);
      MPX_CUDA_LAUNCH_CHECK(what);
      break;
    }
    case Kind::kBlock: {
      const int64_t blocks = rows < kMaxBlocks ? rows : kMaxBlocks;
      rows_block_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(op, rows);
      MPX_CUDA_LAUNCH_CHECK(what);
      break;
    }
    case Kind::kSplit: {
      auto* st = static_cast<typename Op::S*>(ws);
      const int64_t total = rows * p.chunks;
      const unsigned pb = static_cast<unsigned>(total < kMaxBlocks ? total : kMaxBlocks);
      const unsigned rb = static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
      split_partial_kernel<<<pb, kThreads, 0, s>>>(op, rows, p.chunks, p.chunk_len, st);
      MPX_CUDA_LAUNCH_CHECK(what);
      split_combine_kernel<<<rb, kThreads, 0, s>>>(op, rows, p.chunks, st);
      MPX_CUDA_LAUNCH_CHECK(what);
      if constexpr (Op::kApply) {
        split_apply_kernel<<<pb, kThreads, 0, s>>>(op, rows, p.chunks, p.chunk_len, st);
        MPX_CUDA_LAUNCH_CHECK(what);
      }
      break;
    }
  }
}

}  // namespace

int64_t rows_workspace_bytes(int64_t rows, int64_t cols, int64_t inner) {
  if (rows == 0 || cols == 0) return 0;
  const Plan p = plan_rows(rows, cols, inner);
  return p.kind == Kind::kSplit ? rows * p.chunks * kStateBytes : 0;
}

void launch_sum(DType dt, void* out, const void* in, int64_t rows, int64_t cols, int mode, void* ws, cudaStream_t s) {
  auto go = [&](auto tag) {
    using T = decltype(tag);
    run_rows(SumOp<T>{Geom{cols, 1}, static_cast<const T*>(in), static_cast<T*>(out), mode == 1, mode == 2}, rows, ws, s,
             "sum");
  };
  if (dt == DType::kInt64) go(int64_t{});
  else float_switch(dt, go);
}

void launch_var(DType dt, void* out, const void* in, int64_t rows, int64_t cols, double correction, void* ws,
                cudaStream_t s) {
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    run_rows(VarOp<T>{Geom{cols, 1}, static_cast<const T*>(in), static_cast<T*>(out), correction}, rows, ws, s, "var");
  });
}

void launch_arg_reduce(DType dt, bool is_max, void* values, int64_t* indices, const void* in, int64_t rows,
                       int64_t cols, void* ws, cudaStream_t s) {
  auto go = [&](auto tag) {
    using T = decltype(tag);
    run_rows(ArgOp<T>{Geom{cols, 1}, static_cast<const T*>(in), static_cast<T*>(values), indices, is_max}, rows, ws,
             s, is_max ? "max" : "min");
  };
  switch (dt) {
    case DType::kInt64: go(int64_t{}); break;
    case DType::kInt32: go(int32_t{}); break;
    case DType::kUInt8: go(uint8_t{}); break;
    default: float_switch(dt, go);
  }
}

void launch_softmax(DType dt, void* out, const void* in, int64_t outer, int64_t n, int64_t inner, bool log, void* ws,
                    cudaStream_t s) {
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    run_rows(SoftmaxOp<T>{Geom{n, inner}, static_cast<const T*>(in), static_cast<T*>(out), log}, outer * inner, ws, s,
             log ? "log_softmax" : "softmax");
  });
}

void launch_softmax_backward(DType dt, void* gin, const void* g, const void* y, int64_t outer, int64_t n,
                             int64_t inner, bool log, void* ws, cudaStream_t s) {
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    run_rows(SoftmaxBackwardOp<T>{Geom{n, inner}, static_cast<const T*>(g), static_cast<const T*>(y),
                                  static_cast<T*>(gin), log},
             outer * inner, ws, s, log ? "log_softmax backward" : "softmax backward");
  });
}

void launch_cross_entropy_rows(DType dt, void* loss, void* lse, const void* x, const int64_t* target, int64_t N,
                               int64_t C, int64_t ignore_index, double smoothing, void* ws, cudaStream_t s) {
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    run_rows(CrossEntropyOp<T>{Geom{C, 1}, static_cast<const T*>(x), target, static_cast<A*>(loss),
                               static_cast<A*>(lse), ignore_index, static_cast<A>(smoothing)},
             N, ws, s, "cross_entropy");
  });
}

}  // namespace mpx::cuda
