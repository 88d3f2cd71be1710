// CUDA kernels of the index family (gathers/scatters, masked fill, triangles, embedding, topk, sort, multinomial) and their POD launchers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/random.h"
#include "ops/cuda/convert.cuh"
#include "ops/cuda/index_launch.h"
#include "ops/cuda/launch.h"

// Gathers and scatters copy elements as words of the element's size; the embedding backward sums
// by atomics or, deterministic, over runs of radix-sorted indices; topk selects with a block per
// lane and sort runs a bitonic network per lane; multinomial repeats the CPU kernel's f64 arithmetic, so both devices draw the same samples.
namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t grid_start() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t grid_step() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Arithmetic kernels: the device type of a numeric dtype (the .cpp registers numeric dtypes only).
template <typename F> void num_switch(DType dt, F&& f) {
  switch (dt) {
    case DType::kInt64: f(int64_t{}); break;
    case DType::kInt32: f(int32_t{}); break;
    case DType::kUInt8: f(uint8_t{}); break;
    default: float_switch(dt, f);
  }
}

// ---- gathers: one thread per output element ----

// Offset into a strided tensor whose `sizes` are the output's: coordinate `dim` is replaced by
// the index value (per output row for index_select, per element for gather). ok = in range.
template <bool PerElement>
__device__ __forceinline__ int64_t gathered_offset(const TensorDesc& d, int dim, int64_t e, const int64_t* idx,
                                                   int64_t V, bool& ok) {
  int64_t rem = e, off = 0;
  ok = true;
  for (int k = d.ndim - 1; k >= 0; --k) {
    const int64_t c = rem % d.sizes[k];
    rem /= d.sizes[k];
    if (k == dim) {
      const int64_t v = PerElement ? idx[e] : idx[c];
      ok = v >= 0 && v < V;
      off += (ok ? v : 0) * d.strides[k];
    } else {
      off += c * d.strides[k];
    }
  }
  return off;
}

template <typename E, bool PerElement>
__global__ void gather_kernel(E* __restrict__ out, TensorDesc in, int dim, const int64_t* __restrict__ idx, int64_t V,
                              int64_t total) {
  const E* x = static_cast<const E*>(in.data);
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    bool ok;
    const int64_t off = gathered_offset<PerElement>(in, dim, e, idx, V, ok);
    out[e] = ok ? x[off] : E(0);
  }
}

// ---- atomic accumulation for every numeric type ----
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  // Two's complement: an unsigned add wraps to the signed sum.
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void atomic_add(uint8_t* p, uint8_t v) {
  // No byte atomics: compare-and-swap the aligned 32-bit word holding the byte.
  unsigned int* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(3));
  const unsigned int shift = (reinterpret_cast<uintptr_t>(p) & 3u) * 8u;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const unsigned int byte = ((assumed >> shift) + v) & 0xFFu;
    old = atomicCAS(word, assumed, (assumed & ~(0xFFu << shift)) | (byte << shift));
  } while (old != assumed);
}

// alpha * v in T (integers: whole alpha, as the op layer requires).
template <typename T> __device__ __forceinline__ T scaled(T v, double alpha) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<int64_t>(alpha) * static_cast<int64_t>(v));
  else return from_acc<T>(static_cast<acc_t<T>>(alpha) * load_as<acc_t<T>>(&v, 0));
}

template <typename T>
__global__ void index_add_kernel(T* __restrict__ out, const T* __restrict__ src, const int64_t* __restrict__ idx,
                                 int64_t V, int64_t n, int64_t inner, double alpha, int64_t total) {
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t i = e % inner, j = (e / inner) % n, oo = e / (inner * n);
    const int64_t v = idx[j];
    if (v < 0 || v >= V) continue;
    atomic_add(out + (oo * V + v) * inner + i, alpha == 1.0 ? src[e] : scaled(src[e], alpha));
  }
}

template <typename T, bool Add>
__global__ void scatter_kernel(TensorDesc out, int dim, const int64_t* __restrict__ idx, const T* __restrict__ src,
                               int64_t V, int64_t total) {
  T* o = static_cast<T*>(out.data);
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    bool ok;
    const int64_t off = gathered_offset<true>(out, dim, e, idx, V, ok);
    if (!ok) continue;
    if constexpr (Add) atomic_add(o + off, src[e]);
    else o[off] = src[e];  // duplicates: one of the writes wins, as in PyTorch
  }
}

template <typename E>
__global__ void masked_fill_kernel(E* __restrict__ out, TensorDesc in, TensorDesc mask, E value, int64_t total) {
  const E* x = static_cast<const E*>(in.data);
  const bool* m = static_cast<const bool*>(mask.data);
  for (int64_t e = grid_start(); e < total; e += grid_step()) out[e] = m[mask.offset(e)] ? value : x[in.offset(e)];
}

template <typename E>
__global__ void tri_kernel(E* __restrict__ out, TensorDesc in, bool lower, int64_t diagonal, int64_t total) {
  const E* x = static_cast<const E*>(in.data);
  const int64_t R = in.sizes[in.ndim - 2], C = in.sizes[in.ndim - 1];
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t c = e % C, r = (e / C) % R;
    const bool keep = lower ? c - r <= diagonal : c - r >= diagonal;
    out[e] = keep ? x[in.offset(e)] : E(0);
  }
}

template <typename E>
__global__ void embedding_kernel(E* __restrict__ out, const E* __restrict__ w, const int64_t* __restrict__ idx,
                                 int64_t V, int64_t D, int64_t total) {
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t v = idx[e / D];
    out[e] = (v >= 0 && v < V) ? w[v * D + e % D] : E(0);
  }
}

// ---- embedding backward ----
template <typename T, typename A>
__global__ void embedding_backward_atomic(A* __restrict__ acc, const T* __restrict__ g, const int64_t* __restrict__ idx,
                                          int64_t V, int64_t D, int64_t padding_idx, int64_t total) {
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t v = idx[e / D];
    if (v == padding_idx || v < 0 || v >= V) continue;
    atomicAdd(acc + v * D + e % D, load_as<A>(g, e));
  }
}

template <typename T>
__global__ void convert_kernel(T* __restrict__ out, const float* __restrict__ in, int64_t n) {
  for (int64_t e = grid_start(); e < n; e += grid_step()) out[e] = from_acc<T>(in[e]);
}

// Sort keys: the index, or V for one that is out of range (sorted last, then skipped).
__global__ void sort_prep_kernel(int64_t* __restrict__ keys, int64_t* __restrict__ pos, const int64_t* __restrict__ idx,
                                 int64_t V, int64_t N) {
  for (int64_t e = grid_start(); e < N; e += grid_step()) {
    const int64_t v = idx[e];
    keys[e] = (v >= 0 && v < V) ? v : V;
    pos[e] = e;
  }
}

// One thread per (sorted position, column): the first position of each run of equal indices
// sums the run in sorted (= original, the sort is stable) order and writes its row once.
template <typename T, typename A>
__global__ void embedding_backward_sorted(T* __restrict__ gw, const T* __restrict__ g, const int64_t* __restrict__ keys,
                                          const int64_t* __restrict__ pos, int64_t N, int64_t V, int64_t D,
                                          int64_t padding_idx) {
  const int64_t total = N * D;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t i = e / D, d = e % D;
    const int64_t key = keys[i];
    if ((i > 0 && keys[i - 1] == key) || key == padding_idx || key >= V) continue;
    A acc = A(0);
    for (int64_t j = i; j < N && keys[j] == key; ++j) acc += load_as<A>(g, pos[j] * D + d);
    gw[key * D + d] = from_acc<T>(acc);
  }
}

int key_bits(int64_t V) {
  int b = 1;
  while (b < 63 && (int64_t(1) << b) <= V) ++b;
  return b;
}

size_t sort_temp_bytes(int64_t N, int bits) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
                                  static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
                                  static_cast<int>(N), 0, bits);
  return bytes;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// ---- topk: one block per lane, k rounds of a block-wide selection of the next element ----

// Comparison key: f64 for floating types (exact for all of them; NaN ranks highest), i64 for integers.
template <typename T> struct KeyOf { using type = double; };
template <> struct KeyOf<int64_t> { using type = int64_t; };
template <> struct KeyOf<int32_t> { using type = int64_t; };
template <> struct KeyOf<uint8_t> { using type = int64_t; };

template <typename K> __device__ __forceinline__ bool key_greater(K a, K b) {
  if constexpr (std::is_floating_point_v<K>) {
    if (isnan(a)) return !isnan(b);
    if (isnan(b)) return false;
  }
  return a > b;
}
// (a, ia) comes before (b, ib) in the output order.
template <typename K> __device__ __forceinline__ bool ranks_before(K a, int64_t ia, K b, int64_t ib, bool largest) {
  const bool gt = largest ? key_greater(a, b) : key_greater(b, a);
  const bool lt = largest ? key_greater(b, a) : key_greater(a, b);
  return gt || (!lt && ia < ib);
}

template <typename T>
__global__ void topk_kernel(T* __restrict__ values, int64_t* __restrict__ indices, const T* __restrict__ in,
                            int64_t n, int64_t inner, int64_t k, bool largest) {
  using K = typename KeyOf<T>::type;
  __shared__ K s_key[kThreads];
  __shared__ int64_t s_idx[kThreads];
  const int64_t lane = blockIdx.x, oo = lane / inner, i = lane % inner;
  const T* x = in + oo * n * inner + i;
  K prev_key = K(0);
  int64_t prev_idx = -1;  // nothing chosen yet
  for (int64_t r = 0; r < k; ++r) {
    // This thread's best element ranking after the previous choice.
    K best_key = K(0);
    int64_t best_idx = -1;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const K v = static_cast<K>(load_as<acc_t<T>>(x, j * inner));
      if (prev_idx >= 0 && !ranks_before(prev_key, prev_idx, v, j, largest)) continue;
      if (best_idx < 0 || ranks_before(v, j, best_key, best_idx, largest)) {
        best_key = v;
        best_idx = j;
      }
    }
    s_key[threadIdx.x] = best_key;
    s_idx[threadIdx.x] = best_idx;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (threadIdx.x < w) {
        const int o = threadIdx.x + w;
        if (s_idx[o] >= 0 && (s_idx[threadIdx.x] < 0 || ranks_before(s_key[o], s_idx[o], s_key[threadIdx.x], s_idx[threadIdx.x], largest))) {
          s_key[threadIdx.x] = s_key[o];
          s_idx[threadIdx.x] = s_idx[o];
        }
      }
      __syncthreads();
    }
    prev_key = s_key[0];
    prev_idx = s_idx[0];
    if (threadIdx.x == 0) {
      const int64_t at = (oo * k + r) * inner + i;
      values[at] = x[prev_idx * inner];
      indices[at] = prev_idx;
    }
    __syncthreads();
  }
}

// ---- multinomial: the CPU kernel's arithmetic (f64 sums in index order), so both draw alike ----
template <typename T>
__device__ int64_t draw_one(const double* w, const T* p, int64_t C, double u) {
  double total = 0.0;
  for (int64_t c = 0; c < C; ++c) total += w ? w[c] : load_as<double>(p, c);
  const double threshold = __dmul_rn(u, total);
  double cum = 0.0;
  int64_t last = 0;
  for (int64_t c = 0; c < C; ++c) {
    const double v = w ? w[c] : load_as<double>(p, c);
    if (v <= 0.0) continue;
    last = c;
    cum = __dadd_rn(cum, v);
    if (threshold < cum) return c;
  }
  return last;
}

template <typename T>
__global__ void multinomial_replacement_kernel(int64_t* __restrict__ out, const T* __restrict__ probs, int64_t R,
                                               int64_t C, int64_t S, uint64_t seed, uint64_t offset) {
  for (int64_t e = grid_start(); e < R * S; e += grid_step()) {
    const double u = random::uniform(seed, offset + static_cast<uint64_t>(e));
    out[e] = draw_one<T>(nullptr, probs + (e / S) * C, C, u);
  }
}

template <typename T>
__global__ void multinomial_no_replacement_kernel(int64_t* __restrict__ out, const T* __restrict__ probs, int64_t R,
                                                  int64_t C, int64_t S, uint64_t seed, uint64_t offset, double* ws) {
  for (int64_t r = grid_start(); r < R; r += grid_step()) {
    double* w = ws + r * C;
    for (int64_t c = 0; c < C; ++c) w[c] = load_as<double>(probs, r * C + c);
    for (int64_t s = 0; s < S; ++s) {
      const double u = random::uniform(seed, offset + static_cast<uint64_t>(r * S + s));
      const int64_t pick = draw_one<T>(w, probs, C, u);
      out[r * S + s] = pick;
      w[pick] = 0.0;
    }
  }
}

// ---- sort: a bitonic network over each lane padded to a power of two P, one launch per stage ----
// The work buffers hold per lane P (key, index) pairs; an index >= n is padding, which ranks after every element.

template <typename T>
__global__ void sort_load_kernel(typename KeyOf<T>::type* keys, int64_t* idx, const T* __restrict__ in, int64_t n,
                                 int64_t inner, int64_t P, int64_t total) {
  using K = typename KeyOf<T>::type;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t lane = e / P, j = e % P, oo = lane / inner, i = lane % inner;
    keys[e] = j < n ? static_cast<K>(load_as<acc_t<T>>(in + oo * n * inner + i, j * inner)) : K(0);
    idx[e] = j;
  }
}

// One compare-and-exchange stage (block size k, distance j) of every lane: pairs (a, a + j) with bit j of a clear,
// ordered first-to-last where a's k-block runs forward and last-to-first where it runs backward.
template <typename K>
__global__ void sort_stage_kernel(K* keys, int64_t* idx, int64_t n, int64_t P, int64_t k, int64_t j, bool largest,
                                  int64_t pairs) {
  for (int64_t t = grid_start(); t < pairs; t += grid_step()) {
    const int64_t lane = t / (P / 2), r = t % (P / 2);
    const int64_t a = (r / j) * 2 * j + r % j, b = a + j;
    K* kl = keys + lane * P;
    int64_t* il = idx + lane * P;
    const K ka = kl[a], kb = kl[b];
    const int64_t ia = il[a], ib = il[b];
    // Whether b ranks before a: padding last (padding among itself by index), else topk's order (ties by index).
    const bool b_first = (ia >= n || ib >= n) ? (ib < n || (ia >= n && ib < ia)) : ranks_before(kb, ib, ka, ia, largest);
    const bool forward = (a & k) == 0;
    if (forward == b_first) {
      kl[a] = kb;
      kl[b] = ka;
      il[a] = ib;
      il[b] = ia;
    }
  }
}

// The sorted lane back in the input's layout: each value read from the input at its index (exact in every dtype).
template <typename T>
__global__ void sort_store_kernel(T* values, int64_t* indices, const int64_t* idx, const T* __restrict__ in, int64_t n,
                                  int64_t inner, int64_t P, int64_t total) {
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t lane = e / n, j = e % n, oo = lane / inner, i = lane % inner;
    const int64_t src = idx[lane * P + j], base = oo * n * inner + i;
    values[base + j * inner] = in[base + src * inner];
    indices[base + j * inner] = src;
  }
}

}  // namespace

void launch_index_select(int elem_size, void* out, const TensorDesc& src, int dim, const int64_t* idx, int64_t V,
                         cudaStream_t s) {
  const int64_t total = src.numel();
  if (total == 0) return;
  by_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    gather_kernel<E, false><<<blocks_for(total), kThreads, 0, s>>>(static_cast<E*>(out), src, dim, idx, V, total);
    MPX_CUDA_LAUNCH_CHECK("index_select");
  });
}

void launch_index_add(DType dt, void* out, const void* src, const int64_t* idx, int64_t outer, int64_t V, int64_t n,
                      int64_t inner, double alpha, cudaStream_t s) {
  const int64_t total = outer * n * inner;
  if (total == 0) return;
  num_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    index_add_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(src), idx,
                                                               V, n, inner, alpha, total);
    MPX_CUDA_LAUNCH_CHECK("index_add");
  });
}

void launch_gather(int elem_size, void* out, const TensorDesc& in, int dim, const int64_t* idx, int64_t V,
                   cudaStream_t s) {
  const int64_t total = in.numel();
  if (total == 0) return;
  by_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    gather_kernel<E, true><<<blocks_for(total), kThreads, 0, s>>>(static_cast<E*>(out), in, dim, idx, V, total);
    MPX_CUDA_LAUNCH_CHECK("gather");
  });
}

void launch_scatter(DType dt, bool add, const TensorDesc& out, int dim, const int64_t* idx, const void* src,
                    int64_t V, cudaStream_t s) {
  const int64_t total = out.numel();
  if (total == 0) return;
  if (add) {
    num_switch(dt, [&](auto tag) {
      using T = decltype(tag);
      scatter_kernel<T, true><<<blocks_for(total), kThreads, 0, s>>>(out, dim, idx, static_cast<const T*>(src), V, total);
      MPX_CUDA_LAUNCH_CHECK("scatter_add");
    });
  } else {
    by_size(static_cast<int>(element_size(dt)), [&](auto tag) {
      using E = decltype(tag);
      scatter_kernel<E, false><<<blocks_for(total), kThreads, 0, s>>>(out, dim, idx, static_cast<const E*>(src), V, total);
      MPX_CUDA_LAUNCH_CHECK("scatter");
    });
  }
}

void launch_masked_fill(int elem_size, void* out, const TensorDesc& in, const TensorDesc& mask, uint64_t value_bits,
                        cudaStream_t s) {
  const int64_t total = in.numel();
  if (total == 0) return;
  by_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    masked_fill_kernel<E><<<blocks_for(total), kThreads, 0, s>>>(static_cast<E*>(out), in, mask, static_cast<E>(value_bits),
                                                                 total);
    MPX_CUDA_LAUNCH_CHECK("masked_fill");
  });
}

void launch_tri(int elem_size, bool lower, void* out, const TensorDesc& in, int64_t diagonal, cudaStream_t s) {
  const int64_t total = in.numel();
  if (total == 0) return;
  by_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    tri_kernel<E><<<blocks_for(total), kThreads, 0, s>>>(static_cast<E*>(out), in, lower, diagonal, total);
    MPX_CUDA_LAUNCH_CHECK(lower ? "tril" : "triu");
  });
}

void launch_embedding(int elem_size, void* out, const void* weight, const int64_t* idx, int64_t N, int64_t V,
                      int64_t D, cudaStream_t s) {
  const int64_t total = N * D;
  if (total == 0) return;
  by_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    embedding_kernel<E><<<blocks_for(total), kThreads, 0, s>>>(static_cast<E*>(out), static_cast<const E*>(weight), idx,
                                                               V, D, total);
    MPX_CUDA_LAUNCH_CHECK("embedding");
  });
}

size_t embedding_backward_workspace(DType dt, int64_t N, int64_t V, int64_t D, bool deterministic) {
  if (deterministic) return 4 * align256(sizeof(int64_t) * static_cast<size_t>(N)) + align256(sort_temp_bytes(N, key_bits(V)));
  if (dt == DType::kFloat16 || dt == DType::kBFloat16) return sizeof(float) * static_cast<size_t>(V * D);
  return 0;
}

void launch_embedding_backward(DType dt, void* grad_weight, const void* grad, const int64_t* idx, int64_t N,
                               int64_t V, int64_t D, int64_t padding_idx, bool deterministic, void* workspace,
                               size_t workspace_bytes, cudaStream_t s) {
  const size_t elem = element_size(dt);
  MPX_CUDA_CHECK(cudaMemsetAsync(grad_weight, 0, elem * static_cast<size_t>(V * D), s), "embedding backward: zero");
  if (N * D == 0) return;
  if (deterministic) {
    char* ws = static_cast<char*>(workspace);
    const size_t slot = align256(sizeof(int64_t) * static_cast<size_t>(N));
    int64_t* keys_in = reinterpret_cast<int64_t*>(ws);
    int64_t* keys_out = reinterpret_cast<int64_t*>(ws + slot);
    int64_t* pos_in = reinterpret_cast<int64_t*>(ws + 2 * slot);
    int64_t* pos_out = reinterpret_cast<int64_t*>(ws + 3 * slot);
    void* temp = ws + 4 * slot;
    const int bits = key_bits(V);
    size_t temp_bytes = workspace_bytes - 4 * slot;
    sort_prep_kernel<<<blocks_for(N), kThreads, 0, s>>>(keys_in, pos_in, idx, V, N);
    MPX_CUDA_LAUNCH_CHECK("embedding backward: sort keys");
    MPX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                   static_cast<int>(N), 0, bits, s),
                   "embedding backward: radix sort");
    float_switch(dt, [&](auto tag) {
      using T = decltype(tag);
      embedding_backward_sorted<T, acc_t<T>><<<blocks_for(N * D), kThreads, 0, s>>>(
          static_cast<T*>(grad_weight), static_cast<const T*>(grad), keys_out, pos_out, N, V, D, padding_idx);
      MPX_CUDA_LAUNCH_CHECK("embedding backward (deterministic)");
    });
    return;
  }
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    if constexpr (std::is_same_v<A, T>) {
      embedding_backward_atomic<T, A><<<blocks_for(N * D), kThreads, 0, s>>>(
          static_cast<A*>(grad_weight), static_cast<const T*>(grad), idx, V, D, padding_idx, N * D);
      MPX_CUDA_LAUNCH_CHECK("embedding backward");
    } else {
      // f16/bf16: sum in an f32 table, then round once.
      float* acc = static_cast<float*>(workspace);
      MPX_CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(float) * static_cast<size_t>(V * D), s), "embedding backward: zero");
      embedding_backward_atomic<T, float><<<blocks_for(N * D), kThreads, 0, s>>>(
          acc, static_cast<const T*>(grad), idx, V, D, padding_idx, N * D);
      MPX_CUDA_LAUNCH_CHECK("embedding backward");
      convert_kernel<T><<<blocks_for(V * D), kThreads, 0, s>>>(static_cast<T*>(grad_weight), acc, V * D);
      MPX_CUDA_LAUNCH_CHECK("embedding backward: round");
    }
  });
}

void launch_topk(DType dt, void* values, int64_t* indices, const void* in, int64_t outer, int64_t n, int64_t inner,
                 int64_t k, bool largest, cudaStream_t s) {
  const int64_t lanes = outer * inner;
  if (lanes == 0 || k == 0) return;
  num_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    // One block per lane (grid.x holds up to 2^31 - 1 blocks).
    topk_kernel<T><<<static_cast<unsigned>(lanes), kThreads, 0, s>>>(static_cast<T*>(values), indices,
                                                                     static_cast<const T*>(in), n, inner, k, largest);
    MPX_CUDA_LAUNCH_CHECK("topk");
  });
}

void launch_sort(DType dt, void* values, int64_t* indices, const void* in, int64_t outer, int64_t n, int64_t inner,
                 bool largest, void* keys, int64_t* idx, int64_t P, cudaStream_t s) {
  const int64_t lanes = outer * inner;
  if (lanes == 0 || n == 0) return;
  num_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    using K = typename KeyOf<T>::type;
    K* kb = static_cast<K*>(keys);
    const T* x = static_cast<const T*>(in);
    sort_load_kernel<T><<<blocks_for(lanes * P), kThreads, 0, s>>>(kb, idx, x, n, inner, P, lanes * P);
    MPX_CUDA_LAUNCH_CHECK("sort: load");
    const int64_t pairs = lanes * (P / 2);
    for (int64_t k = 2; k <= P; k *= 2)
      for (int64_t j = k / 2; j > 0; j /= 2) {
        sort_stage_kernel<K><<<blocks_for(pairs), kThreads, 0, s>>>(kb, idx, n, P, k, j, largest, pairs);
        MPX_CUDA_LAUNCH_CHECK("sort: stage");
      }
    sort_store_kernel<T><<<blocks_for(lanes * n), kThreads, 0, s>>>(static_cast<T*>(values), indices, idx, x, n, inner,
                                                                     P, lanes * n);
    MPX_CUDA_LAUNCH_CHECK("sort: store");
  });
}

void launch_multinomial(DType dt, int64_t* out, const void* probs, int64_t R, int64_t C, int64_t S, bool replacement,
                        uint64_t seed, uint64_t offset, double* workspace, cudaStream_t s) {
  if (R * S == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    if (replacement)
      multinomial_replacement_kernel<T><<<blocks_for(R * S), kThreads, 0, s>>>(out, static_cast<const T*>(probs), R, C,
                                                                               S, seed, offset);
    else
      multinomial_no_replacement_kernel<T><<<blocks_for(R), kThreads, 0, s>>>(out, static_cast<const T*>(probs), R, C,
                                                                              S, seed, offset, workspace);
    MPX_CUDA_LAUNCH_CHECK("multinomial");
  });
}

}  // namespace mpx::cuda
