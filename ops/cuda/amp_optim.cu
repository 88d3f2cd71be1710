// Fused multi-tensor kernels: unscale + inf/NaN check, SGD and Adam/AdamW steps that skip on the
// device's found_inf flag (f16/bf16 stores rounded to nearest or stochastically), and the
// loss-scale update. One launch covers up to kMtTensors tensors.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "ops/cuda/amp_optim_launch.h"
#include "ops/cuda/convert.cuh"
#include "ops/stochastic_round.h"

namespace mpx::cuda {
namespace {

// A launch covers up to kMtTensors tensors, passed by value (kernel parameters may take 32 KB
// since CUDA 12.1, far more than the 4 KB apex's multi_tensor_apply packs for). Each block
// takes one chunk of one tensor and finds which by a binary search over the running chunk
// counts, so a launch has no block limit: ResNet-50's 161 gradients take two launches.
constexpr int kMtTensors = 96;
constexpr int kThreads = 512;
constexpr int64_t kChunk = 16384;  // elements per block: 32 per thread

template <typename Item>
struct Meta {
  Item items[kMtTensors];
  int first_chunk[kMtTensors + 1];  // running chunk counts; first_chunk[count] = blocks
  int count;
};

// The block's tensor and the element range of its chunk.
template <typename Item>
__device__ __forceinline__ const Item& block_item(const Meta<Item>& meta, int64_t* start, int64_t* end) {
  const int b = static_cast<int>(blockIdx.x);
  int lo = 0, hi = meta.count - 1;
  while (lo < hi) {  // the last t with first_chunk[t] <= b
    const int mid = (lo + hi + 1) / 2;
    if (meta.first_chunk[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  const Item& it = meta.items[lo];
  *start = static_cast<int64_t>(b - meta.first_chunk[lo]) * kChunk;
  *end = *start + kChunk < it.n ? *start + kChunk : it.n;
  return it;
}

template <typename M, typename A> __device__ __forceinline__ void store_as(M* p, int64_t i, A v) {
  p[i] = from_acc<M>(v);
}
// v as it reads back after a store as T: a low-precision state feeds its rounded value to the
// rest of the step, as torch.optim's in-place updates of f16 state do. sr rounds stochastically
// with the random word r (the CPU kernels' formula, ops/stochastic_round.h), to nearest otherwise.
template <typename T, typename A> __device__ __forceinline__ A rounded(A v, bool sr = false, uint32_t r = 0) {
  if constexpr (std::is_same_v<T, A>) return v;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (sr) return static_cast<A>(__bfloat162float(__ushort_as_bfloat16(sround::bf16_bits(static_cast<float>(v), r))));
    return static_cast<A>(__bfloat162float(from_acc<T>(v)));
  } else {
    if (sr) return static_cast<A>(__half2float(__ushort_as_half(sround::f16_bits(static_cast<float>(v), r))));
    return static_cast<A>(__half2float(from_acc<T>(v)));
  }
}
// The step's random words for element j: drawn only for a f16/bf16 parameter (P not the
// arithmetic type A) under stochastic rounding.
template <typename P, typename A>
__device__ __forceinline__ random::Philox4 draw_if(bool sr, uint64_t seed, uint32_t id, double step, int64_t j) {
  if constexpr (!std::is_same_v<P, A>) {
    if (sr) return sround::draw(seed, id, static_cast<uint64_t>(step), static_cast<uint64_t>(j));
  }
  return random::Philox4{{0, 0, 0, 0}};
}
template <typename A> __device__ __forceinline__ bool finite(A v) { return isfinite(v); }

// Four consecutive elements moved as one aligned access (16 bytes for f32, 8 for f16/bf16):
// memory-bound kernels need wide accesses and several loads in flight per thread.
constexpr int kVec = 4;
template <typename T>
struct alignas(kVec * sizeof(T)) Pack {
  T v[kVec];
};
template <typename T> __device__ __forceinline__ Pack<T> ld(const T* p, int64_t j) {
  return *reinterpret_cast<const Pack<T>*>(p + j);
}
template <typename T> __device__ __forceinline__ void st(T* p, int64_t j, const Pack<T>& v) {
  *reinterpret_cast<Pack<T>*>(p + j) = v;
}

// Calls f(j, width) over [start, end): width kVec on aligned packs, 1 for the tail and for
// tensors whose pointers are not all 16-byte aligned.
template <typename F>
__device__ __forceinline__ void for_each_pack(int64_t start, int64_t end, bool aligned, F&& f) {
  if (aligned) {
    for (int64_t j = start + kVec * threadIdx.x; j < end; j += kVec * kThreads) {
      if (j + kVec <= end) {
        f(j, std::integral_constant<int, kVec>());
      } else {
        for (int64_t k = j; k < end; ++k) f(k, std::integral_constant<int, 1>());
      }
    }
  } else {
    for (int64_t j = start + threadIdx.x; j < end; j += kThreads) f(j, std::integral_constant<int, 1>());
  }
}

// Loads W elements of p at j (W = kVec: one aligned pack) as A.
template <int W, typename A, typename T> __device__ __forceinline__ void load_w(const T* p, int64_t j, A (&r)[kVec]) {
  if constexpr (W == kVec) {
    const Pack<T> v = ld(p, j);
#pragma unroll
    for (int k = 0; k < kVec; ++k) r[k] = load_as<A>(v.v, k);
  } else {
    r[0] = load_as<A>(p, j);
  }
}
template <int W, typename T, typename A> __device__ __forceinline__ void store_w(T* p, int64_t j, const A (&r)[kVec]) {
  if constexpr (W == kVec) {
    Pack<T> v;
#pragma unroll
    for (int k = 0; k < kVec; ++k) store_as(v.v, k, r[k]);
    st(p, j, v);
  } else {
    store_as(p, j, r[0]);
  }
}

// Packs items into launches of at most kMtTensors tensors; `launch(meta, blocks)` runs one.
// Items are expected pre-grouped so that one launch sees one type combination.
template <typename Item, typename Launch>
void for_each_launch(const Item* items, int count, Launch&& launch) {
  Meta<Item> meta;
  meta.count = 0;
  int blocks = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t chunks = (items[i].n + kChunk - 1) / kChunk;
    if (chunks == 0) continue;
    meta.items[meta.count] = items[i];
    meta.first_chunk[meta.count] = blocks;
    blocks += static_cast<int>(chunks);
    if (++meta.count == kMtTensors) {
      meta.first_chunk[meta.count] = blocks;
      launch(meta, blocks);
      meta.count = 0;
      blocks = 0;
    }
  }
  if (meta.count > 0) {
    meta.first_chunk[meta.count] = blocks;
    launch(meta, blocks);
  }
}

// ---- unscale + check ----
template <typename G, typename O>
__global__ void __launch_bounds__(kThreads) unscale_kernel(Meta<UnscaleItem> meta, const float* inv_scale,
                                                          float* found_inf) {
  using A = std::conditional_t<std::is_same_v<G, double>, double, float>;
  int64_t start, end;
  const UnscaleItem& it = block_item(meta, &start, &end);
  const G* __restrict__ in = static_cast<const G*>(it.in);
  const A s = static_cast<A>(*inv_scale);
  bool bad = false;
  for_each_pack(start, end, it.aligned != 0, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    A v[kVec];
    load_w<W>(in, j, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      bad |= !finite(v[k]);
      v[k] = v[k] * s;
    }
    if constexpr (!std::is_void_v<O>) store_w<W>(static_cast<O*>(it.out), j, v);
  });
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

template <typename G, typename O>
void unscale_group(const UnscaleItem* items, int count, const float* inv, float* found, cudaStream_t s) {
  for_each_launch(items, count, [&](const Meta<UnscaleItem>& meta, int blocks) {
    unscale_kernel<G, O><<<blocks, kThreads, 0, s>>>(meta, inv, found);
    MPX_CUDA_LAUNCH_CHECK("unscale_check_inf");
  });
}

// ---- optimizer steps ----
struct StepCtx {
  bool fresh;
  double step;  // the step number being taken
};
__device__ __forceinline__ StepCtx step_ctx(const StepItem& it) {
  if (!it.count) return StepCtx{it.fresh != 0, static_cast<double>(it.step)};
  // Numbered on the device: a buffer created in a step that was then skipped is still fresh at
  // the first step actually taken.
  const double taken = *it.count;
  return StepCtx{it.fresh != 0 || taken == 0.0, taken + 1.0};
}

// A: arithmetic type; G: gradient; M: model copy to write (void: none); P: the parameter as
// stored, A or (a parameter without master) f16/bf16, rounded once per store; S: its state, P
// or (stochastic rounding) f32.
template <typename A, typename G, typename M, typename P, typename S>
__global__ void __launch_bounds__(kThreads) sgd_kernel(Meta<StepItem> meta, SgdArgs h, const float* found_inf,
                                                      const float* inv_scale) {
  if (found_inf && *found_inf != 0.0f) return;  // the overflow skip, decided on the device
  int64_t start, end;
  const StepItem& it = block_item(meta, &start, &end);
  const StepCtx c = step_ctx(it);
  P* __restrict__ p = static_cast<P*>(it.param);
  const G* __restrict__ g = static_cast<const G*>(it.grad);
  S* __restrict__ buf = static_cast<S*>(it.state[0]);
  const A inv = inv_scale ? static_cast<A>(*inv_scale) : A(1);
  const A wd = static_cast<A>(h.weight_decay), mom = static_cast<A>(h.momentum);
  const A damp1 = static_cast<A>(1.0 - h.dampening), neg_lr = static_cast<A>(-h.lr);
  const bool use_wd = h.weight_decay != 0, use_mom = h.momentum != 0;
  for_each_pack(start, end, it.aligned != 0, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    A d[kVec], pv[kVec], b[kVec];
    load_w<W>(g, j, d);
    load_w<W>(p, j, pv);
    if (use_mom && !c.fresh) load_w<W>(buf, j, b);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const random::Philox4 r = draw_if<P, A>(h.sround, h.seed, it.id, c.step, j + k);
      if (inv_scale) d[k] = d[k] * inv;
      if (h.maximize) d[k] = -d[k];
      if (use_wd) d[k] = d[k] + wd * pv[k];
      if (use_mom) {
        b[k] = rounded<S>(c.fresh ? d[k] : static_cast<A>(b[k] * mom) + damp1 * d[k], h.sround, r.v[1]);
        d[k] = h.nesterov ? d[k] + mom * b[k] : b[k];
      }
      pv[k] = pv[k] + neg_lr * d[k];
      // Rounded here, so the store's round-to-nearest conversion is exact.
      if (h.sround) pv[k] = rounded<P>(pv[k], true, r.v[0]);
    }
    if (use_mom) store_w<W>(buf, j, b);
    store_w<W>(p, j, pv);
    if constexpr (!std::is_void_v<M>) store_w<W>(static_cast<M*>(it.model), j, pv);
  });
}

template <typename A, typename G, typename M, typename P, typename S>
__global__ void __launch_bounds__(kThreads) adam_kernel(Meta<StepItem> meta, AdamArgs h, const float* found_inf,
                                                       const float* inv_scale) {
  if (found_inf && *found_inf != 0.0f) return;
  int64_t start, end;
  const StepItem& it = block_item(meta, &start, &end);
  const StepCtx c = step_ctx(it);
  // Bias corrections in double, as the CPU kernel (torch's Python scalars).
  const double bc1 = 1.0 - pow(h.beta1, c.step), bc2 = 1.0 - pow(h.beta2, c.step);
  const A neg_step_size = static_cast<A>(-(h.lr / bc1));
  const A bc2_sqrt = static_cast<A>(sqrt(bc2));
  const A b1 = static_cast<A>(h.beta1), b2 = static_cast<A>(h.beta2);
  const A omb1 = static_cast<A>(1.0 - h.beta1), omb2 = static_cast<A>(1.0 - h.beta2);
  const A wd = static_cast<A>(h.weight_decay), eps = static_cast<A>(h.eps);
  const A decay = static_cast<A>(1.0 - h.lr * h.weight_decay);
  const bool l2 = !h.decoupled && h.weight_decay != 0, decoupled = h.decoupled && h.weight_decay != 0;
  P* __restrict__ p = static_cast<P*>(it.param);
  const G* __restrict__ g = static_cast<const G*>(it.grad);
  S* __restrict__ m1 = static_cast<S*>(it.state[0]);
  S* __restrict__ m2 = static_cast<S*>(it.state[1]);
  S* __restrict__ vmax = static_cast<S*>(it.state[2]);
  const A inv = inv_scale ? static_cast<A>(*inv_scale) : A(1);
  for_each_pack(start, end, it.aligned != 0, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    A gv[kVec], pv[kVec], m[kVec], v[kVec], vm[kVec];
    load_w<W>(g, j, gv);
    load_w<W>(p, j, pv);
    load_w<W>(m1, j, m);
    load_w<W>(m2, j, v);
    if (h.amsgrad) load_w<W>(vmax, j, vm);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const random::Philox4 r = draw_if<P, A>(h.sround, h.seed, it.id, c.step, j + k);
      if (inv_scale) gv[k] = gv[k] * inv;
      if (h.maximize) gv[k] = -gv[k];
      if (decoupled) pv[k] = pv[k] * decay;
      if (l2) gv[k] = gv[k] + wd * pv[k];
      m[k] = rounded<S>(static_cast<A>(m[k] * b1) + omb1 * gv[k], h.sround, r.v[1]);
      v[k] = rounded<S>(static_cast<A>(v[k] * b2) + static_cast<A>(omb2 * gv[k]) * gv[k], h.sround, r.v[2]);
      A vd = v[k];
      if (h.amsgrad) {
        vd = isnan(vm[k]) || vm[k] > v[k] ? vm[k] : v[k];
        vm[k] = vd;
      }
      const A denom = static_cast<A>(sqrt(vd) / bc2_sqrt) + eps;
      pv[k] = pv[k] + static_cast<A>(neg_step_size * m[k]) / denom;
      if (h.sround) pv[k] = rounded<P>(pv[k], true, r.v[0]);
    }
    store_w<W>(m1, j, m);
    store_w<W>(m2, j, v);
    if (h.amsgrad) store_w<W>(vmax, j, vm);
    store_w<W>(p, j, pv);
    if constexpr (!std::is_void_v<M>) store_w<W>(static_cast<M*>(it.model), j, pv);
  });
}

// Launches kernel K<A, G, M, P, S> over a run of items sharing their dtypes.
template <template <typename, typename, typename, typename, typename> class K, typename A, typename G, typename M,
          typename P = A, typename S = P, typename Args>
void launch_run(const StepItem* items, int n, const Args& h, const float* found_inf, const float* inv_scale,
                cudaStream_t s) {
  for_each_launch(items, n, [&](const Meta<StepItem>& meta, int blocks) {
    K<A, G, M, P, S>::launch(meta, blocks, h, found_inf, inv_scale, s);
  });
}
// A f16/bf16 parameter P without master: its state in P, or in f32 (stochastic rounding).
template <template <typename, typename, typename, typename, typename> class K, typename G, typename P,
          typename Args>
void launch_lowp(DType sd, const StepItem* items, int n, const Args& h, const float* found_inf,
                 const float* inv_scale, cudaStream_t s) {
  if (sd == DType::kFloat32) launch_run<K, float, G, void, P, float>(items, n, h, found_inf, inv_scale, s);
  else launch_run<K, float, G, void, P, P>(items, n, h, found_inf, inv_scale, s);
}
// An f32 step of items sharing gradient dtype G: f32 parameters (with or without a model copy)
// or f16/bf16 parameters without master (no model copy).
template <template <typename, typename, typename, typename, typename> class K, typename G, typename Args>
void launch_f32(DType pd, DType md, DType sd, const StepItem* items, int n, const Args& h, const float* found_inf,
                const float* inv_scale, cudaStream_t s) {
  if (pd == DType::kFloat16) launch_lowp<K, G, __half>(sd, items, n, h, found_inf, inv_scale, s);
  else if (pd == DType::kBFloat16) launch_lowp<K, G, __nv_bfloat16>(sd, items, n, h, found_inf, inv_scale, s);
  else if (md == DType::kFloat16) launch_run<K, float, G, __half>(items, n, h, found_inf, inv_scale, s);
  else if (md == DType::kBFloat16) launch_run<K, float, G, __nv_bfloat16>(items, n, h, found_inf, inv_scale, s);
  else launch_run<K, float, G, void>(items, n, h, found_inf, inv_scale, s);
}
// Splits the items into runs of one type combination, one kernel instantiation each.
template <template <typename, typename, typename, typename, typename> class K, typename Args>
void launch_step(const StepItem* items, int count, const Args& h, DType a_dtype, const float* found_inf,
                 const float* inv_scale, cudaStream_t s) {
  auto same = [](const StepItem& a, const StepItem& b) {
    return a.param_dtype == b.param_dtype && a.grad_dtype == b.grad_dtype && a.model_dtype == b.model_dtype &&
           a.state_dtype == b.state_dtype;
  };
  int i = 0;
  while (i < count) {
    int j = i;
    while (j < count && same(items[j], items[i])) ++j;
    const DType pd = items[i].param_dtype, gd = items[i].grad_dtype, md = items[i].model_dtype;
    const DType sd = items[i].state_dtype;
    if (a_dtype == DType::kFloat64) launch_run<K, double, double, void>(items + i, j - i, h, found_inf, inv_scale, s);
    else if (gd == DType::kFloat16) launch_f32<K, __half>(pd, md, sd, items + i, j - i, h, found_inf, inv_scale, s);
    else if (gd == DType::kBFloat16)
      launch_f32<K, __nv_bfloat16>(pd, md, sd, items + i, j - i, h, found_inf, inv_scale, s);
    else launch_f32<K, float>(pd, md, sd, items + i, j - i, h, found_inf, inv_scale, s);
    i = j;
  }
}

template <typename A, typename G, typename M, typename P, typename S>
struct SgdK {
  static void launch(const Meta<StepItem>& meta, int blocks, const SgdArgs& h, const float* f, const float* inv,
                     cudaStream_t s) {
    sgd_kernel<A, G, M, P, S><<<blocks, kThreads, 0, s>>>(meta, h, f, inv);
    MPX_CUDA_LAUNCH_CHECK("sgd_step");
  }
};
template <typename A, typename G, typename M, typename P, typename S>
struct AdamK {
  static void launch(const Meta<StepItem>& meta, int blocks, const AdamArgs& h, const float* f, const float* inv,
                     cudaStream_t s) {
    adam_kernel<A, G, M, P, S><<<blocks, kThreads, 0, s>>>(meta, h, f, inv);
    MPX_CUDA_LAUNCH_CHECK("adam_step");
  }
};

constexpr int kCountPtrs = 512;
struct CountPtrs {
  double* p[kCountPtrs];
};

// One more step taken by every parameter, unless the flag (a sum over losses and optimizers:
// any non-zero value) says this one was skipped.
__global__ void count_steps_kernel(CountPtrs counts, int n, const float* found_inf) {
  const int i = threadIdx.x;
  if (i < n && (found_inf == nullptr || *found_inf == 0.0f)) *counts.p[i] += 1.0;
}

__global__ void update_scale_kernel(float* scale, float* tracker, float* skipped, const float* found_inf,
                                    float growth, float backoff, float interval, float max_scale) {
  const float cur = *scale;
  if (*found_inf != 0.0f) {
    *scale = cur * backoff;
    *tracker = 0.0f;
    if (skipped) *skipped += 1.0f;
    return;
  }
  const float successful = *tracker + 1.0f;
  if (successful >= interval) {
    const float grown = cur * growth;
    float next = cur;
    if (isfinite(grown)) next = grown < max_scale ? grown : max_scale;
    *scale = next < cur ? cur : next;  // never shrink on a clean step
    *tracker = 0.0f;
  } else {
    *tracker = successful;
  }
}

}  // namespace

void launch_unscale_check(const UnscaleItem* items, int count, const float* inv_scale, float* found_inf,
                          cudaStream_t s) {
  int i = 0;
  while (i < count) {
    int j = i;
    while (j < count && items[j].in_dtype == items[i].in_dtype && items[j].out_dtype == items[i].out_dtype &&
           (items[j].out == nullptr) == (items[i].out == nullptr))
      ++j;
    const bool check_only = items[i].out == nullptr;
    // f16/bf16 unscaled in their own dtype (no f32 master to take them: apex's O3).
    const bool narrow = !check_only && items[i].out_dtype == items[i].in_dtype;
    switch (items[i].in_dtype) {
      case DType::kFloat32:
        check_only ? unscale_group<float, void>(items + i, j - i, inv_scale, found_inf, s)
                   : unscale_group<float, float>(items + i, j - i, inv_scale, found_inf, s);
        break;
      case DType::kFloat16:
        check_only ? unscale_group<__half, void>(items + i, j - i, inv_scale, found_inf, s)
        : narrow   ? unscale_group<__half, __half>(items + i, j - i, inv_scale, found_inf, s)
                   : unscale_group<__half, float>(items + i, j - i, inv_scale, found_inf, s);
        break;
      case DType::kBFloat16:
        check_only ? unscale_group<__nv_bfloat16, void>(items + i, j - i, inv_scale, found_inf, s)
        : narrow   ? unscale_group<__nv_bfloat16, __nv_bfloat16>(items + i, j - i, inv_scale, found_inf, s)
                   : unscale_group<__nv_bfloat16, float>(items + i, j - i, inv_scale, found_inf, s);
        break;
      default:
        check_only ? unscale_group<double, void>(items + i, j - i, inv_scale, found_inf, s)
                   : unscale_group<double, double>(items + i, j - i, inv_scale, found_inf, s);
        break;
    }
    i = j;
  }
}

void launch_sgd_step(const StepItem* items, int count, const SgdArgs& h, DType a_dtype, const float* found_inf,
                     const float* inv_scale, cudaStream_t s) {
  launch_step<SgdK>(items, count, h, a_dtype, found_inf, inv_scale, s);
}

void launch_adam_step(const StepItem* items, int count, const AdamArgs& h, DType a_dtype, const float* found_inf,
                      const float* inv_scale, cudaStream_t s) {
  launch_step<AdamK>(items, count, h, a_dtype, found_inf, inv_scale, s);
}

void launch_count_steps(double* const* counts, int n, const float* found_inf, cudaStream_t s) {
  for (int i = 0; i < n; i += kCountPtrs) {
    const int m = n - i < kCountPtrs ? n - i : kCountPtrs;
    CountPtrs ptrs{};
    for (int k = 0; k < m; ++k) ptrs.p[k] = counts[i + k];
    count_steps_kernel<<<1, kCountPtrs, 0, s>>>(ptrs, m, found_inf);
    MPX_CUDA_LAUNCH_CHECK("optimizer step count");
  }
}

void launch_update_scale(float* scale, float* tracker, float* skipped, const float* found_inf, double growth,
                         double backoff, int64_t interval, double max_scale, cudaStream_t s) {
  update_scale_kernel<<<1, 1, 0, s>>>(scale, tracker, skipped, found_inf, static_cast<float>(growth),
                                      static_cast<float>(backoff), static_cast<float>(interval),
                                      static_cast<float>(max_scale));
  MPX_CUDA_LAUNCH_CHECK("update_scale");
}

}  // namespace mpx::cuda
