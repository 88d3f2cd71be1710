// CUDA kernels of the fused LSTM/GRU cells: one thread per (row, hidden unit), f32 math for
// f16/bf16 (f64 for f64), one rounding per stored value, as the CPU kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/convert.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/rnn_launch.h"

namespace mpx::cuda {
namespace {

constexpr int kThreads = 256;

template <typename A> __device__ __forceinline__ A sigm(A v) { return A(1) / (A(1) + exp(-v)); }
template <typename A, typename T> __device__ __forceinline__ A opt(const T* p, int64_t i) {
  return p ? load_as<A>(p, i) : A(0);
}

template <typename T>
__global__ void lstm_cell_kernel(T* __restrict__ h_out, T* __restrict__ c_out, T* __restrict__ act,
                                 const T* __restrict__ gates, const T* __restrict__ c_prev, int64_t N, int64_t H) {
  using A = acc_t<T>;
  const int64_t total = N * H, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const int64_t n = k / H, j = k % H, g0 = n * 4 * H + j;
    const A i = sigm(load_as<A>(gates, g0)), f = sigm(load_as<A>(gates, g0 + H));
    const A g = tanh(load_as<A>(gates, g0 + 2 * H)), o = sigm(load_as<A>(gates, g0 + 3 * H));
    const A c = f * load_as<A>(c_prev, k) + i * g;
    c_out[k] = from_acc<T>(c);
    h_out[k] = from_acc<T>(o * tanh(c));
    act[g0] = from_acc<T>(i);
    act[g0 + H] = from_acc<T>(f);
    act[g0 + 2 * H] = from_acc<T>(g);
    act[g0 + 3 * H] = from_acc<T>(o);
  }
}

template <typename T>
__global__ void lstm_cell_backward_kernel(T* __restrict__ dgates, T* __restrict__ dc_prev, const T* __restrict__ dh,
                                          const T* __restrict__ dc, const T* __restrict__ act,
                                          const T* __restrict__ c_prev, const T* __restrict__ c_out, int64_t N,
                                          int64_t H) {
  using A = acc_t<T>;
  const int64_t total = N * H, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const int64_t n = k / H, j = k % H, g0 = n * 4 * H + j;
    const A i = load_as<A>(act, g0), f = load_as<A>(act, g0 + H), g = load_as<A>(act, g0 + 2 * H),
            o = load_as<A>(act, g0 + 3 * H);
    const A tc = tanh(load_as<A>(c_out, k));
    const A gh = opt<A>(dh, k);
    const A dct = opt<A>(dc, k) + gh * o * (A(1) - tc * tc);
    dgates[g0] = from_acc<T>(dct * g * i * (A(1) - i));
    dgates[g0 + H] = from_acc<T>(dct * load_as<A>(c_prev, k) * f * (A(1) - f));
    dgates[g0 + 2 * H] = from_acc<T>(dct * i * (A(1) - g * g));
    dgates[g0 + 3 * H] = from_acc<T>(gh * tc * o * (A(1) - o));
    if (dc_prev) dc_prev[k] = from_acc<T>(dct * f);
  }
}

template <typename T>
__global__ void gru_cell_kernel(T* __restrict__ h_out, T* __restrict__ ws, const T* __restrict__ gi,
                                const T* __restrict__ gh, const T* __restrict__ h_prev, int64_t N, int64_t H) {
  using A = acc_t<T>;
  const int64_t total = N * H, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const int64_t n = k / H, j = k % H, g0 = n * 3 * H + j, w0 = n * 4 * H + j;
    const A r = sigm(load_as<A>(gi, g0) + load_as<A>(gh, g0));
    const A z = sigm(load_as<A>(gi, g0 + H) + load_as<A>(gh, g0 + H));
    const A hn = load_as<A>(gh, g0 + 2 * H);
    const A nn = tanh(load_as<A>(gi, g0 + 2 * H) + r * hn);
    h_out[k] = from_acc<T>((A(1) - z) * nn + z * load_as<A>(h_prev, k));
    ws[w0] = from_acc<T>(r);
    ws[w0 + H] = from_acc<T>(z);
    ws[w0 + 2 * H] = from_acc<T>(nn);
    ws[w0 + 3 * H] = gh[g0 + 2 * H];
  }
}

template <typename T>
__global__ void gru_cell_backward_kernel(T* __restrict__ dgi, T* __restrict__ dgh, T* __restrict__ dh_prev,
                                         const T* __restrict__ dh, const T* __restrict__ ws,
                                         const T* __restrict__ h_prev, int64_t N, int64_t H) {
  using A = acc_t<T>;
  const int64_t total = N * H, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const int64_t n = k / H, j = k % H, g0 = n * 3 * H + j, w0 = n * 4 * H + j;
    const A r = load_as<A>(ws, w0), z = load_as<A>(ws, w0 + H), nn = load_as<A>(ws, w0 + 2 * H),
            hn = load_as<A>(ws, w0 + 3 * H);
    const A g = load_as<A>(dh, k);
    const A dnp = g * (A(1) - z) * (A(1) - nn * nn);
    const A drp = dnp * hn * r * (A(1) - r);
    const A dzp = g * (load_as<A>(h_prev, k) - nn) * z * (A(1) - z);
    dgi[g0] = from_acc<T>(drp);
    dgi[g0 + H] = from_acc<T>(dzp);
    dgi[g0 + 2 * H] = from_acc<T>(dnp);
    dgh[g0] = from_acc<T>(drp);
    dgh[g0 + H] = from_acc<T>(dzp);
    dgh[g0 + 2 * H] = from_acc<T>(dnp * r);
    if (dh_prev) dh_prev[k] = from_acc<T>(g * z);
  }
}

}  // namespace

void launch_lstm_cell(DType dt, void* h_out, void* c_out, void* act, const void* gates, const void* c_prev, int64_t N,
                      int64_t H, cudaStream_t s) {
  if (N * H == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    lstm_cell_kernel<T><<<blocks_for(N * H), kThreads, 0, s>>>(
        static_cast<T*>(h_out), static_cast<T*>(c_out), static_cast<T*>(act), static_cast<const T*>(gates),
        static_cast<const T*>(c_prev), N, H);
    MPX_CUDA_LAUNCH_CHECK("lstm_cell_fused");
  });
}

void launch_lstm_cell_backward(DType dt, void* dgates, void* dc_prev, const void* dh, const void* dc,
                               const void* act, const void* c_prev, const void* c_out, int64_t N, int64_t H,
                               cudaStream_t s) {
  if (N * H == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    lstm_cell_backward_kernel<T><<<blocks_for(N * H), kThreads, 0, s>>>(
        static_cast<T*>(dgates), static_cast<T*>(dc_prev), static_cast<const T*>(dh), static_cast<const T*>(dc),
        static_cast<const T*>(act), static_cast<const T*>(c_prev), static_cast<const T*>(c_out), N, H);
    MPX_CUDA_LAUNCH_CHECK("lstm_cell_fused_backward");
  });
}

void launch_gru_cell(DType dt, void* h_out, void* ws, const void* gi, const void* gh, const void* h_prev, int64_t N,
                     int64_t H, cudaStream_t s) {
  if (N * H == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    gru_cell_kernel<T><<<blocks_for(N * H), kThreads, 0, s>>>(
        static_cast<T*>(h_out), static_cast<T*>(ws), static_cast<const T*>(gi), static_cast<const T*>(gh),
        static_cast<const T*>(h_prev), N, H);
    MPX_CUDA_LAUNCH_CHECK("gru_cell_fused");
  });
}

void launch_gru_cell_backward(DType dt, void* dgi, void* dgh, void* dh_prev, const void* dh, const void* ws,
                              const void* h_prev, int64_t N, int64_t H, cudaStream_t s) {
  if (N * H == 0) return;
  float_switch(dt, [&](auto tag) {
    using T = decltype(tag);
    gru_cell_backward_kernel<T><<<blocks_for(N * H), kThreads, 0, s>>>(
        static_cast<T*>(dgi), static_cast<T*>(dgh), static_cast<T*>(dh_prev), static_cast<const T*>(dh),
        static_cast<const T*>(ws), static_cast<const T*>(h_prev), N, H);
    MPX_CUDA_LAUNCH_CHECK("gru_cell_fused_backward");
  });
}

}  // namespace mpx::cuda
