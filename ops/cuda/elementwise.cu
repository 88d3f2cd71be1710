// CUDA kernels for elementwise ops, casts, fills and counter-based random numbers (same
// numerics as ops/cpu/elementwise.cpp: the formulas of ops/formulas.h, f16/bf16 computed in f32
// and rounded once at the store).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/random.h"
#include "ops/cuda/elementwise_launch.h"
#include "ops/formulas.h"

namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;

// ---- device storage types: one per dtype, all trivially copyable PODs ----
struct F16 { uint16_t x; };
struct BF16 { uint16_t x; };
struct Bool { uint8_t x; };
/// An unused operand slot (kernels take up to three inputs).
struct None { uint8_t x; };

template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<F16> { using type = float; };
template <> struct AccOf<BF16> { using type = float; };
template <> struct AccOf<Bool> { using type = bool; };
template <typename T> using acc_t = typename AccOf<T>::type;

template <typename T> __device__ __forceinline__ T to_acc(T v) { return v; }
__device__ __forceinline__ float to_acc(F16 v) { return __half2float(__ushort_as_half(v.x)); }
__device__ __forceinline__ float to_acc(BF16 v) { return __bfloat162float(__ushort_as_bfloat16(v.x)); }
__device__ __forceinline__ bool to_acc(Bool v) { return v.x != 0; }

template <typename T> __device__ __forceinline__ T from_acc(acc_t<T> v) {
  if constexpr (std::is_same<T, F16>::value) return F16{__half_as_ushort(__float2half_rn(v))};
  else if constexpr (std::is_same<T, BF16>::value) return BF16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
  else if constexpr (std::is_same<T, Bool>::value) return Bool{static_cast<uint8_t>(v ? 1 : 0)};
  else return v;
}

/// convert<D>(S) of the CPU kernels: to bool via `float(v) != 0`, to f16/bf16 via f32 (so
/// f64 -> f16 rounds twice, like the CPU), from f16/bf16 via f32, otherwise static_cast.
template <typename D, typename S> __device__ __forceinline__ D convert(S s) {
  const auto v = to_acc(s);
  using V = decltype(v);
  if constexpr (std::is_same<D, S>::value) return s;
  else if constexpr (std::is_same<D, Bool>::value) return Bool{static_cast<uint8_t>(static_cast<float>(v) != 0.0f)};
  else if constexpr (std::is_same<D, F16>::value || std::is_same<D, BF16>::value) return from_acc<D>(static_cast<float>(v));
  else if constexpr (std::is_same<D, uint8_t>::value && std::is_floating_point<V>::value)
    return static_cast<uint8_t>(static_cast<int32_t>(v));
  else return static_cast<D>(v);
}

// ---- op functors: every functor takes three operands (unused ones are None) ----
// Unary and binary ops run their ops/formulas.h formula; the op is a run-time argument so each
// dtype compiles one kernel, not one per op.
template <typename A> __device__ __forceinline__ A unary_op(OpId op, A x, double p0, double p1) {
  switch (op) {
#define MPX_CASE(name)                                                                         \
  case OpId::name:                                                                             \
    if constexpr (formulas::has_dtype<A>(kCudaDTypes[static_cast<int>(OpId::name)]))           \
      return formulas::Formula<OpId::name>::fwd(x, p0, p1);                                    \
    break;
    MPX_UNARY_OPS(MPX_CASE)
    MPX_PARAM_UNARY_OPS(MPX_CASE)
#undef MPX_CASE
    default: break;
  }
  return x;
}

template <typename T> struct UnaryF {
  OpId op;
  double p0, p1;
  __device__ __forceinline__ T operator()(T x, None, None) const {
    return from_acc<T>(unary_op<acc_t<T>>(op, to_acc(x), p0, p1));
  }
};

template <typename T> struct BinaryF {
  OpId op;
  double alpha;
  __device__ __forceinline__ T operator()(T a, T b, None) const {
    using A = acc_t<T>;
    const A x = to_acc(a), y = to_acc(b);
    switch (op) {
#define MPX_CASE(name)                                                                          \
  case OpId::name:                                                                              \
    if constexpr (!formulas::Formula<OpId::name>::kCompare &&                                   \
                  formulas::has_dtype<A>(kCudaDTypes[static_cast<int>(OpId::name)]))           \
      return from_acc<T>(formulas::Formula<OpId::name>::fwd(x, y, alpha));                      \
    break;
      MPX_BINARY_OPS(MPX_CASE)
#undef MPX_CASE
      default: break;
    }
    return a;
  }
};

template <typename T> struct CompareF {
  OpId op;
  __device__ __forceinline__ Bool operator()(T a, T b, None) const {
    const acc_t<T> x = to_acc(a), y = to_acc(b);
    bool r = false;
    switch (op) {
#define MPX_CASE(name)                                                                          \
  case OpId::name:                                                                              \
    if constexpr (formulas::Formula<OpId::name>::kCompare) r = formulas::Formula<OpId::name>::fwd(x, y, 0.0); \
    break;
      MPX_BINARY_OPS(MPX_CASE)
#undef MPX_CASE
      default: break;
    }
    return Bool{static_cast<uint8_t>(r)};
  }
};

template <typename T> struct WhereF {
  __device__ __forceinline__ T operator()(Bool c, T x, T y) const { return c.x ? x : y; }
};

template <typename T> struct AddcF {
  bool div;
  double value;
  __device__ __forceinline__ T operator()(T z, T x, T y) const {
    using A = acc_t<T>;
    const A v = static_cast<A>(value);
    const A p = v * to_acc(x);
    return from_acc<T>(div ? to_acc(z) + p / to_acc(y) : to_acc(z) + p * to_acc(y));
  }
};

template <typename D, typename S> struct CopyF {
  __device__ __forceinline__ D operator()(S v, None, None) const { return convert<D>(v); }
};

template <typename T> struct FillF {
  double value;
  __device__ __forceinline__ T operator()(None, None, None) const { return convert<T>(value); }
};

// ---- launch geometry ----
struct InArgs {
  const void* p[3];
  bool scalar[3];
};

/// Up to four tensors (out first) over one shape, after collapsing dimensions.
struct Geo {
  int ndim;
  bool small;  // numel < 2^32: index arithmetic in 32 bits
  int64_t sizes[kMaxDims];
  int64_t strides[4][kMaxDims];

  __device__ __forceinline__ void offsets(int64_t i, int64_t (&off)[4]) const {
    off[0] = off[1] = off[2] = off[3] = 0;
    if (small) {
      uint32_t idx = static_cast<uint32_t>(i);
#pragma unroll
      for (int d = kMaxDims - 1; d >= 0; --d) {
        if (d >= ndim) continue;
        const uint32_t s = static_cast<uint32_t>(sizes[d]);
        const uint32_t q = idx / s;
        const int64_t r = idx - q * s;
#pragma unroll
        for (int k = 0; k < 4; ++k) off[k] += r * strides[k][d];
        idx = q;
      }
    } else {
      int64_t idx = i;
#pragma unroll
      for (int d = kMaxDims - 1; d >= 0; --d) {
        if (d >= ndim) continue;
        const int64_t q = idx / sizes[d];
        const int64_t r = idx - q * sizes[d];
#pragma unroll
        for (int k = 0; k < 4; ++k) off[k] += r * strides[k][d];
        idx = q;
      }
    }
  }
};

struct Plan {
  Geo g;
  bool fast;        // out contiguous, every input contiguous or a broadcast scalar
  bool scalar[4];
};

// Drops size-1 dims, orders dims by out's strides (so a channels-last out walks its memory
// in order) and merges dims that are contiguous in every tensor. Dense tensors of one
// layout end up one-dimensional.
Plan make_plan(const TensorDesc* ds, int nt) {
  Plan p{};
  Geo g{};
  const TensorDesc& o = ds[0];
  for (int d = 0; d < o.ndim; ++d) {
    if (o.sizes[d] == 1) continue;
    g.sizes[g.ndim] = o.sizes[d];
    for (int k = 0; k < nt; ++k) g.strides[k][g.ndim] = ds[k].strides[d];
    ++g.ndim;
  }
  auto swap_dims = [&](int a, int b) {
    const int64_t s = g.sizes[a]; g.sizes[a] = g.sizes[b]; g.sizes[b] = s;
    for (int k = 0; k < nt; ++k) { const int64_t t = g.strides[k][a]; g.strides[k][a] = g.strides[k][b]; g.strides[k][b] = t; }
  };
  for (int i = 1; i < g.ndim; ++i)
    for (int j = i; j > 0 && g.strides[0][j - 1] < g.strides[0][j]; --j) swap_dims(j - 1, j);
  Geo r{};
  for (int d = g.ndim - 1; d >= 0; --d) {
    if (r.ndim > 0) {
      bool merge = true;
      for (int k = 0; k < nt; ++k) merge = merge && g.strides[k][d] == r.strides[k][r.ndim - 1] * r.sizes[r.ndim - 1];
      if (merge) { r.sizes[r.ndim - 1] *= g.sizes[d]; continue; }
    }
    r.sizes[r.ndim] = g.sizes[d];
    for (int k = 0; k < nt; ++k) r.strides[k][r.ndim] = g.strides[k][d];
    ++r.ndim;
  }
  p.g.ndim = r.ndim;
  for (int d = 0; d < r.ndim; ++d) {  // r holds the innermost dim first
    p.g.sizes[d] = r.sizes[r.ndim - 1 - d];
    for (int k = 0; k < nt; ++k) p.g.strides[k][d] = r.strides[k][r.ndim - 1 - d];
  }
  const int64_t n = o.numel();
  p.g.small = n < (int64_t{1} << 32);
  auto contiguous = [&](int k) { return p.g.ndim == 0 || (p.g.ndim == 1 && p.g.strides[k][0] == 1); };
  p.fast = contiguous(0);
  for (int k = 1; k < nt; ++k) {
    bool zero = p.g.ndim > 0;
    for (int d = 0; d < p.g.ndim; ++d) zero = zero && p.g.strides[k][d] == 0;
    p.scalar[k] = zero;
    p.fast = p.fast && (zero || contiguous(k));
  }
  return p;
}

template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };

template <typename T, typename... R> struct MaxSize {
  static constexpr size_t value = sizeof(T) > MaxSize<R...>::value ? sizeof(T) : MaxSize<R...>::value;
};
template <typename T> struct MaxSize<T> { static constexpr size_t value = sizeof(T); };

/// Elements per thread in the vectorized path: 16 bytes of the widest operand.
template <typename O, typename I0, typename I1, typename I2> struct VecWidth {
  static constexpr int value = static_cast<int>(16 / MaxSize<O, I0, I1, I2>::value);
};

template <typename T, int N> __device__ __forceinline__ void load_pack(Pack<T, N>& pk, const void* p, bool scalar, int64_t base) {
  if constexpr (!std::is_same<T, None>::value) {
    if (scalar) {
      const T v = *static_cast<const T*>(p);
#pragma unroll
      for (int j = 0; j < N; ++j) pk.v[j] = v;
    } else {
      pk = *reinterpret_cast<const Pack<T, N>*>(static_cast<const T*>(p) + base);
    }
  }
}
template <typename T> __device__ __forceinline__ T load_one(const void* p, int64_t off) {
  if constexpr (std::is_same<T, None>::value) return None{};
  else return static_cast<const T*>(p)[off];
}

// Contiguous out, inputs contiguous or scalar: 16-byte vectors when `vec` (all pointers
// aligned), then a scalar tail; grid-stride loops.
template <typename O, typename I0, typename I1, typename I2, typename F>
__global__ void __launch_bounds__(kThreads) ew_contig(O* __restrict__ out, InArgs in, int64_t n, bool vec, F f) {
  constexpr int N = VecWidth<O, I0, I1, I2>::value;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / N;
    for (int64_t v = tid; v < nv; v += step) {
      const int64_t base = v * N;
      Pack<I0, N> a;
      Pack<I1, N> b;
      Pack<I2, N> c;
      load_pack(a, in.p[0], in.scalar[0], base);
      load_pack(b, in.p[1], in.scalar[1], base);
      load_pack(c, in.p[2], in.scalar[2], base);
      Pack<O, N> r;
#pragma unroll
      for (int j = 0; j < N; ++j) r.v[j] = f(a.v[j], b.v[j], c.v[j]);
      *reinterpret_cast<Pack<O, N>*>(out + base) = r;
    }
    done = nv * N;
  }
  for (int64_t i = done + tid; i < n; i += step) {
    out[i] = f(load_one<I0>(in.p[0], in.scalar[0] ? 0 : i), load_one<I1>(in.p[1], in.scalar[1] ? 0 : i),
               load_one<I2>(in.p[2], in.scalar[2] ? 0 : i));
  }
}

template <typename O, typename I0, typename I1, typename I2, typename F>
__global__ void __launch_bounds__(kThreads) ew_strided(O* __restrict__ out, InArgs in, Geo g, int64_t n, F f) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[4];
    g.offsets(i, off);
    out[off[0]] = f(load_one<I0>(in.p[0], off[1]), load_one<I1>(in.p[1], off[2]), load_one<I2>(in.p[2], off[3]));
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

[[noreturn]] void bad_dtype(const char* what) {
  throw_error(static_cast<int>(cudaErrorNotSupported), what, "dtype dispatch (no kernel for this dtype)");
}

/// Runs out = f(ins...) for `nin` inputs already broadcast to out's shape.
template <typename O, typename I0, typename I1, typename I2, typename F>
void run(const TensorDesc& out, const TensorDesc* ins, int nin, const F& f, cudaStream_t s, const char* what) {
  const int64_t n = out.numel();
  if (n == 0) return;
  TensorDesc ds[4];
  ds[0] = out;
  for (int k = 0; k < nin; ++k) ds[k + 1] = ins[k];
  const Plan p = make_plan(ds, 1 + nin);
  InArgs a{};
  for (int k = 0; k < nin; ++k) {
    a.p[k] = ins[k].data;
    a.scalar[k] = p.scalar[k + 1];
  }
  if (p.fast) {
    constexpr int N = VecWidth<O, I0, I1, I2>::value;
    const size_t isz[3] = {sizeof(I0), sizeof(I1), sizeof(I2)};
    bool vec = N > 1 && aligned(out.data, sizeof(O) * N);
    for (int k = 0; k < nin; ++k) vec = vec && (a.scalar[k] || aligned(a.p[k], isz[k] * N));
    const int64_t items = vec ? (n + N - 1) / N : n;
    ew_contig<O, I0, I1, I2, F><<<blocks_for(items, kThreads), kThreads, 0, s>>>(static_cast<O*>(out.data), a, n, vec, f);
  } else {
    ew_strided<O, I0, I1, I2, F><<<blocks_for(n, kThreads), kThreads, 0, s>>>(static_cast<O*>(out.data), a, p.g, n, f);
  }
  MPX_CUDA_LAUNCH_CHECK(what);
}

// ---- dtype dispatch: calls f(T{}) with T the device storage type of dt ----
template <typename F> void visit_float(DType dt, const char* what, F&& f) {
  switch (dt) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat64: f(double{}); return;
    case DType::kFloat16: f(F16{}); return;
    case DType::kBFloat16: f(BF16{}); return;
    default: bad_dtype(what);
  }
}
template <typename F> void visit_num(DType dt, const char* what, F&& f) {
  switch (dt) {
    case DType::kInt64: f(int64_t{}); return;
    case DType::kInt32: f(int32_t{}); return;
    case DType::kUInt8: f(uint8_t{}); return;
    default: visit_float(dt, what, f);
  }
}
template <typename F> void visit_all(DType dt, const char* what, F&& f) {
  if (dt == DType::kBool) f(Bool{});
  else visit_num(dt, what, f);
}

template <typename T, bool kNormal>
__global__ void __launch_bounds__(kThreads) rand_kernel(T* __restrict__ out, int64_t n, uint64_t seed, uint64_t offset,
                                                        double a, double b) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint64_t pos = offset + static_cast<uint64_t>(i);
    if constexpr (kNormal) {
      // fma: the CPU build (-march=native / -mfma, GCC's default -ffp-contract=fast)
      // contracts `mean + std * z` and `lo + u * (hi - lo)` the same way.
      out[i] = convert<T>(fma(b, random::normal(seed, pos), a));
    } else {
      double v = fma(random::uniform(seed, pos), b - a, a);
      if constexpr (std::is_integral<T>::value) v = floor(v);
      out[i] = convert<T>(v);
    }
  }
}

}  // namespace

void launch_unary(OpId op, const TensorDesc& out, const TensorDesc& in, double p0, double p1, cudaStream_t s) {
  const char* what = kOpNames[static_cast<int>(op)];
  visit_num(out.dtype, what, [&](auto tag) {
    using T = decltype(tag);
    run<T, T, None, None>(out, &in, 1, UnaryF<T>{op, p0, p1}, s, what);
  });
}

void launch_binary(OpId op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b, double alpha,
                   cudaStream_t s) {
  const char* what = kOpNames[static_cast<int>(op)];
  const TensorDesc ins[2] = {a, b};
  if (formulas::is_compare(op)) {
    visit_all(a.dtype, what, [&](auto tag) {
      using T = decltype(tag);
      run<Bool, T, T, None>(out, ins, 2, CompareF<T>{op}, s, what);
    });
    return;
  }
  visit_num(out.dtype, what, [&](auto tag) {
    using T = decltype(tag);
    run<T, T, T, None>(out, ins, 2, BinaryF<T>{op, alpha}, s, what);
  });
}

void launch_ternary(OpId op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b, const TensorDesc& c,
                    double value, cudaStream_t s) {
  const TensorDesc ins[3] = {a, b, c};
  if (op == OpId::where) {
    visit_all(out.dtype, "where", [&](auto tag) {
      using T = decltype(tag);
      run<T, Bool, T, T>(out, ins, 3, WhereF<T>{}, s, "where");
    });
    return;
  }
  const char* what = kOpNames[static_cast<int>(op)];
  visit_float(out.dtype, what, [&](auto tag) {
    using T = decltype(tag);
    run<T, T, T, T>(out, ins, 3, AddcF<T>{op == OpId::addcdiv, value}, s, what);
  });
}

void launch_copy(const TensorDesc& out, const TensorDesc& src, cudaStream_t s) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (out.dtype == src.dtype) {
    // A dense copy within one layout is a plain memcpy (the copy engines run at full bandwidth).
    const TensorDesc ds[2] = {out, src};
    const Plan p = make_plan(ds, 2);
    if (p.fast && !p.scalar[1]) {
      MPX_CUDA_CHECK(cudaMemcpyAsync(out.data, src.data, static_cast<size_t>(n) * element_size(out.dtype),
                                     cudaMemcpyDeviceToDevice, s),
                     "copy");
      return;
    }
  }
  visit_all(out.dtype, "copy", [&](auto dtag) {
    using D = decltype(dtag);
    visit_all(src.dtype, "copy", [&](auto stag) {
      using S = decltype(stag);
      run<D, S, None, None>(out, &src, 1, CopyF<D, S>{}, s, "copy");
    });
  });
}

void launch_fill(const TensorDesc& out, double value, cudaStream_t s) {
  visit_all(out.dtype, "fill", [&](auto tag) {
    using T = decltype(tag);
    run<T, None, None, None>(out, nullptr, 0, FillF<T>{value}, s, "fill");
  });
}

void launch_rand(bool normal, const TensorDesc& out, uint64_t seed, uint64_t offset, double a, double b,
                 cudaStream_t s) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const char* what = normal ? "randn" : "rand";
  visit_num(out.dtype, what, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data);
    if (normal) {
      if constexpr (std::is_floating_point<T>::value || std::is_same<T, F16>::value || std::is_same<T, BF16>::value)
        rand_kernel<T, true><<<blocks_for(n, kThreads), kThreads, 0, s>>>(o, n, seed, offset, a, b);
      else
        bad_dtype(what);
    } else {
      rand_kernel<T, false><<<blocks_for(n, kThreads), kThreads, 0, s>>>(o, n, seed, offset, a, b);
    }
    MPX_CUDA_LAUNCH_CHECK(what);
  });
}

}  // namespace mpx::cuda
