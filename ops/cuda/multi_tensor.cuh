// The multi-tensor launch machinery of the fused amp and optimizer kernels: chunked launches over
// many tensors, packed loads and stores, per-store rounding and the per-type kernel dispatch.
// No launch syntax here, so a .cu file that includes it can still be rewritten for the host (tests/cuda_emu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "ops/cuda/amp_optim_launch.h"
#include "ops/cuda/convert.cuh"
#include "ops/stochastic_round.h"

namespace mpx::cuda::multi_tensor {

// A launch covers up to kMtTensors tensors, passed by value (kernel parameters may take 32 KB
// since CUDA 12.1, far more than the 4 KB apex's multi_tensor_apply packs for). Each block
// takes one chunk of one tensor and finds which by a binary search over the running chunk
// counts, so a launch has no block limit: ResNet-50's 161 gradients take two launches.
constexpr int kMtTensors = 96;
constexpr int kThreads = 512;
constexpr int64_t kChunk = kStepChunk;  // elements per block: 32 per thread

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

}  // namespace mpx::cuda::multi_tensor
