// Launches the Tensor-Core flash-attention kernels (bodies in flash_attention.cuh) where they apply: f16/bf16, head
// dims up to 128, a device and build of compute capability 8.0 or newer with the shared memory they need.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "ops/cuda/flash_attention.cuh"

namespace mpx::cuda {
namespace {
using flash::Args;

template <typename T, int D> __global__ void __launch_bounds__(flash::kThreads) forward_kernel(Args<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  flash::forward_body<T, D>(a, smem);
#endif
}
template <typename T, int D> __global__ void __launch_bounds__(flash::kThreads) dq_kernel(Args<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  flash::dq_body<T, D>(a, smem);
#endif
}
template <typename T, int D> __global__ void __launch_bounds__(flash::kThreads) dkdv_kernel(Args<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  flash::dkdv_body<T, D>(a, smem);
#endif
}

// Whether `kernel` has sm_80+ code for the current device and may take `smem` bytes of shared memory (raising its
// dynamic shared-memory limit). Decided once per kernel and device: every attention call asks.
bool can_launch(const void* kernel, size_t smem) {
  int dev = 0;
  MPX_CUDA_CHECK(cudaGetDevice(&dev), "sdpa flash");
  static std::mutex m;
  static std::map<std::pair<const void*, int>, bool> known;
  const std::lock_guard<std::mutex> lock(m);
  if (auto it = known.find({kernel, dev}); it != known.end()) return it->second;
  bool ok = false;
  int optin = 0;
  MPX_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "sdpa flash");
  cudaFuncAttributes fa{};
  if (static_cast<size_t>(optin) >= smem) {
    if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
      (void)cudaGetLastError();  // no image for this device: the simple kernels run instead
    } else if (fa.ptxVersion >= 80) {
      MPX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                     "sdpa flash");
      ok = true;
    }
  }
  known[{kernel, dev}] = ok;
  return ok;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Rows of q, k, v (and dout) start on 16 bytes: 16-byte staging loads.
template <typename T>
bool vector_rows(const SdpaGeom& g, const Args<T>& a) {
  bool ok = g.E % 8 == 0 && g.Ev % 8 == 0 && aligned16(a.q) && aligned16(a.k) && aligned16(a.v) &&
            (a.dout == nullptr || aligned16(a.dout));
  for (int d = 0; d < 3; ++d) ok = ok && g.sq[d] % 8 == 0 && g.sk[d] % 8 == 0 && g.sv[d] % 8 == 0;
  return ok;
}

// Calls f(D) with the padded head dim (32, 64 or 128) that holds E and Ev; false when they are wider.
template <typename F>
bool head_dim_switch(const SdpaGeom& g, F&& f) {
  const int64_t hd = g.E > g.Ev ? g.E : g.Ev;
  if (hd <= 32) return f(std::integral_constant<int, 32>{});
  if (hd <= 64) return f(std::integral_constant<int, 64>{});
  if (hd <= 128) return f(std::integral_constant<int, 128>{});
  return false;
}

template <typename F>
bool half_switch(DType dt, F&& f) {
  if (dt == DType::kFloat16) return f(__half{});
  if (dt == DType::kBFloat16) return f(__nv_bfloat16{});
  return false;
}

unsigned tiles(int64_t n, int rows) { return static_cast<unsigned>((n + rows - 1) / rows); }

}  // namespace

bool launch_flash_forward(DType dt, const SdpaGeom& g, void* out, void* lse, const void* q, const void* k,
                          const void* v, const void* mask, cudaStream_t s) {
  if (!g.flash) return false;
  return half_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    return head_dim_switch(g, [&](auto dtag) {
      constexpr int D = decltype(dtag)::value;
      constexpr size_t smem = flash::forward_smem<T, D>();
      if (!can_launch(reinterpret_cast<const void*>(&forward_kernel<T, D>), smem)) return false;
      Args<T> a;
      a.g = g;
      a.q = static_cast<const T*>(q), a.k = static_cast<const T*>(k), a.v = static_cast<const T*>(v);
      a.out = static_cast<T*>(out), a.lse_out = static_cast<float*>(lse), a.mask = static_cast<const float*>(mask);
      a.vec = vector_rows(g, a);
      const dim3 grid(static_cast<unsigned>(g.B * g.H), tiles(g.L, flash::kRows));
      forward_kernel<T, D><<<grid, flash::kThreads, smem, s>>>(a);
      MPX_CUDA_LAUNCH_CHECK("sdpa_fused (flash)");
      return true;
    });
  });
}

bool launch_flash_backward(DType dt, const SdpaGeom& g, void* dq, void* dk, void* dv, void* rowdot, const void* dout,
                           const void* q, const void* k, const void* v, const void* out, const void* lse,
                           const void* mask, cudaStream_t s) {
  if (!g.flash) return false;
  return half_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    return head_dim_switch(g, [&](auto dtag) {
      constexpr int D = decltype(dtag)::value;
      constexpr size_t smem_dq = flash::dq_smem<T, D>(), smem_kv = flash::dkdv_smem<T, D>();
      if (!can_launch(reinterpret_cast<const void*>(&dq_kernel<T, D>), smem_dq) ||
          !can_launch(reinterpret_cast<const void*>(&dkdv_kernel<T, D>), smem_kv))
        return false;
      Args<T> a;
      a.g = g;
      a.q = static_cast<const T*>(q), a.k = static_cast<const T*>(k), a.v = static_cast<const T*>(v);
      a.o = static_cast<const T*>(out), a.dout = static_cast<const T*>(dout);
      a.dq = static_cast<T*>(dq), a.dk = static_cast<T*>(dk), a.dv = static_cast<T*>(dv);
      a.rowdot = static_cast<float*>(rowdot), a.lse = static_cast<const float*>(lse);
      a.mask = static_cast<const float*>(mask);
      a.vec = vector_rows(g, a);
      if (g.B * g.H > 0 && g.L > 0) {  // rowdot first: the dk/dv pass reads it
        dq_kernel<T, D><<<dim3(static_cast<unsigned>(g.B * g.H), tiles(g.L, flash::kRows)), flash::kThreads, smem_dq,
                          s>>>(a);
        MPX_CUDA_LAUNCH_CHECK("sdpa_fused_backward (flash dq)");
      }
      if (g.B * g.Hk > 0 && g.S > 0) {
        dkdv_kernel<T, D><<<dim3(static_cast<unsigned>(g.B * g.Hk), tiles(g.S, flash::kRows)), flash::kThreads,
                            smem_kv, s>>>(a);
        MPX_CUDA_LAUNCH_CHECK("sdpa_fused_backward (flash dk, dv)");
      }
      return true;
    });
  });
}

}  // namespace mpx::cuda
