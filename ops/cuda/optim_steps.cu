// Fused multi-tensor RMSprop, Adagrad and LAMB steps: the CPU kernels' formulas (ops/cpu/optim.cpp),
// skipped on the device's found_inf flag, gradients unscaled as they are read, f16/bf16 stores rounded once.
#include "ops/cuda/multi_tensor.cuh"

namespace mpx::cuda {
namespace {
using namespace multi_tensor;

// A, G, M, P, S as in sgd_kernel (amp_optim.cu). States: square_avg, then momentum_buffer (momentum > 0)
// and grad_avg (centered), each only when used.
template <typename A, typename G, typename M, typename P, typename S>
__global__ void __launch_bounds__(kThreads) rmsprop_kernel(Meta<StepItem> meta, RmspropArgs h,
                                                          const float* found_inf, const float* inv_scale) {
  if (found_inf && *found_inf != 0.0f) return;
  int64_t start, end;
  const StepItem& it = block_item(meta, &start, &end);
  const StepCtx c = step_ctx(it);
  const A alpha = static_cast<A>(h.alpha), oma = static_cast<A>(1.0 - h.alpha);
  const A wd = static_cast<A>(h.weight_decay), eps = static_cast<A>(h.eps), mom = static_cast<A>(h.momentum);
  const A neg_lr = static_cast<A>(-h.lr);
  const bool use_wd = h.weight_decay != 0, use_mom = h.momentum > 0;
  P* __restrict__ p = static_cast<P*>(it.param);
  const G* __restrict__ g = static_cast<const G*>(it.grad);
  S* __restrict__ sq = static_cast<S*>(it.state[0]);
  S* __restrict__ buf = static_cast<S*>(it.state[1]);
  S* __restrict__ gavg = static_cast<S*>(it.state[use_mom ? 2 : 1]);
  const A inv = inv_scale ? static_cast<A>(*inv_scale) : A(1);
  for_each_pack(start, end, it.aligned != 0, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    A gv[kVec], pv[kVec], v[kVec], b[kVec], ga[kVec];
    load_w<W>(g, j, gv);
    load_w<W>(p, j, pv);
    load_w<W>(sq, j, v);
    if (use_mom) load_w<W>(buf, j, b);
    if (h.centered) load_w<W>(gavg, j, ga);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const random::Philox4 r = draw_if<P, A>(h.sround, h.seed, it.id, c.step, j + k);
      if (inv_scale) gv[k] = gv[k] * inv;
      if (h.maximize) gv[k] = -gv[k];
      if (use_wd) gv[k] = gv[k] + wd * pv[k];
      v[k] = rounded<S>(static_cast<A>(v[k] * alpha) + static_cast<A>(oma * gv[k]) * gv[k], h.sround, r.v[1]);
      A var = v[k];
      if (h.centered) {
        ga[k] = rounded<S>(static_cast<A>(ga[k] * alpha) + oma * gv[k], h.sround, r.v[3]);
        var = v[k] - ga[k] * ga[k];
      }
      A d = gv[k] / (static_cast<A>(sqrt(var)) + eps);
      if (use_mom) {
        b[k] = rounded<S>(static_cast<A>(b[k] * mom) + d, h.sround, r.v[2]);
        d = b[k];
      }
      pv[k] = pv[k] + neg_lr * d;
      if (h.sround) pv[k] = rounded<P>(pv[k], true, r.v[0]);
    }
    store_w<W>(sq, j, v);
    if (use_mom) store_w<W>(buf, j, b);
    if (h.centered) store_w<W>(gavg, j, ga);
    store_w<W>(p, j, pv);
    if constexpr (!std::is_void_v<M>) store_w<W>(static_cast<M*>(it.model), j, pv);
  });
}

// State: sum, read as initial_accumulator_value while fresh (the buffer was just zeroed).
template <typename A, typename G, typename M, typename P, typename S>
__global__ void __launch_bounds__(kThreads) adagrad_kernel(Meta<StepItem> meta, AdagradArgs h,
                                                          const float* found_inf, const float* inv_scale) {
  if (found_inf && *found_inf != 0.0f) return;
  int64_t start, end;
  const StepItem& it = block_item(meta, &start, &end);
  const StepCtx c = step_ctx(it);
  // As the CPU kernel: the decayed rate in double, then rounded to A once.
  const A neg_clr = static_cast<A>(-(h.lr / (1.0 + (c.step - 1.0) * h.lr_decay)));
  const A wd = static_cast<A>(h.weight_decay), eps = static_cast<A>(h.eps);
  const A init = static_cast<A>(h.initial_accumulator_value);
  const bool use_wd = h.weight_decay != 0;
  P* __restrict__ p = static_cast<P*>(it.param);
  const G* __restrict__ g = static_cast<const G*>(it.grad);
  S* __restrict__ sum = static_cast<S*>(it.state[0]);
  const A inv = inv_scale ? static_cast<A>(*inv_scale) : A(1);
  for_each_pack(start, end, it.aligned != 0, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    A gv[kVec], pv[kVec], sv[kVec];
    load_w<W>(g, j, gv);
    load_w<W>(p, j, pv);
    if (c.fresh) {
#pragma unroll
      for (int k = 0; k < W; ++k) sv[k] = init;
    } else {
      load_w<W>(sum, j, sv);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const random::Philox4 r = draw_if<P, A>(h.sround, h.seed, it.id, c.step, j + k);
      if (inv_scale) gv[k] = gv[k] * inv;
      if (h.maximize) gv[k] = -gv[k];
      if (use_wd) gv[k] = gv[k] + wd * pv[k];
      sv[k] = rounded<S>(sv[k] + gv[k] * gv[k], h.sround, r.v[1]);
      pv[k] = pv[k] + neg_clr * (gv[k] / (static_cast<A>(sqrt(sv[k])) + eps));
      if (h.sround) pv[k] = rounded<P>(pv[k], true, r.v[0]);
    }
    store_w<W>(sum, j, sv);
    store_w<W>(p, j, pv);
    if constexpr (!std::is_void_v<M>) store_w<W>(static_cast<M*>(it.model), j, pv);
  });
}

// The block's sum of v over its threads, in thread 0 (a tree in shared memory: fixed order, so
// the partial norms, and LAMB's trust ratios, are the same on every run).
template <typename A> __device__ __forceinline__ A block_sum(A v, A* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  return sh[0];
}

// What LAMB divides the gradients by: the global norm over max_grad_norm where it exceeds it.
__device__ __forceinline__ double lamb_clip(const LambArgs& h) {
  const double n = *h.grad_norm;
  return h.max_grad_norm > 0 && n > h.max_grad_norm ? n / h.max_grad_norm : 1.0;
}

// 1 / the bias correction (1 without), as the CPU kernel rounds it.
template <typename A> __device__ __forceinline__ A lamb_rbc(bool on, double beta, double step) {
  return static_cast<A>(1.0 / (on ? 1.0 - pow(beta, step) : 1.0));
}
// The update from the moments as stored (the CPU kernel's Update), plus wd * p (0 in L2 mode).
template <typename A> __device__ __forceinline__ A lamb_update(A pv, A m, A v, A rbc1, A rbc2, A eps, A wd) {
  return (m * rbc1) / (static_cast<A>(sqrt(v * rbc2)) + eps) + wd * pv;
}

// Stage 1: moments (state[0], state[1]), with each chunk's squared norms of the parameter and of
// the update in `partials`; stage 2 recomputes the update from the stored moments, so nothing
// the size of the parameters is written in between.
template <typename A, typename G, typename M, typename P, typename S>
__global__ void __launch_bounds__(kThreads) lamb_stage1_kernel(Meta<StepItem> meta, LambArgs h,
                                                              const float* found_inf, const float* inv_scale) {
  __shared__ A sh[kThreads];
  if (found_inf && *found_inf != 0.0f) return;
  int64_t start, end;
  const StepItem& it = block_item(meta, &start, &end);
  const StepCtx c = step_ctx(it);
  // As the CPU kernel: rounded to A once, the bias corrections in double.
  const A inv = inv_scale ? static_cast<A>(*inv_scale) : A(1);
  const A gscale = static_cast<A>(static_cast<double>(inv) / lamb_clip(h));
  const A rbc1 = lamb_rbc<A>(h.bias_correction, h.beta1, c.step), rbc2 = lamb_rbc<A>(h.bias_correction, h.beta2, c.step);
  const A b1 = static_cast<A>(h.beta1), b2 = static_cast<A>(h.beta2), omb2 = static_cast<A>(1.0 - h.beta2);
  const A b3 = static_cast<A>(h.grad_averaging ? 1.0 - h.beta1 : 1.0);
  const A wd = static_cast<A>(h.weight_decay), eps = static_cast<A>(h.eps);
  const bool l2 = !h.adam_w_mode && h.weight_decay != 0, decoupled = h.adam_w_mode && h.weight_decay != 0;
  P* __restrict__ p = static_cast<P*>(it.param);
  const G* __restrict__ g = static_cast<const G*>(it.grad);
  S* __restrict__ m1 = static_cast<S*>(it.state[0]);
  S* __restrict__ m2 = static_cast<S*>(it.state[1]);
  A ps = 0, us = 0;
  for_each_pack(start, end, it.aligned != 0, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    A gv[kVec], pv[kVec], m[kVec], v[kVec];
    load_w<W>(g, j, gv);
    load_w<W>(p, j, pv);
    load_w<W>(m1, j, m);
    load_w<W>(m2, j, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const random::Philox4 r = draw_if<P, A>(h.sround, h.seed, it.id, c.step, j + k);
      gv[k] = gv[k] * gscale;
      if (l2) gv[k] = gv[k] + wd * pv[k];
      m[k] = rounded<S>(static_cast<A>(m[k] * b1) + b3 * gv[k], h.sround, r.v[1]);
      v[k] = rounded<S>(static_cast<A>(v[k] * b2) + static_cast<A>(omb2 * gv[k]) * gv[k], h.sround, r.v[2]);
      const A uv = lamb_update(pv[k], m[k], v[k], rbc1, rbc2, eps, decoupled ? wd : A(0));
      ps += pv[k] * pv[k];
      us += uv * uv;
    }
    store_w<W>(m1, j, m);
    store_w<W>(m2, j, v);
  });
  ps = block_sum(ps, sh);
  __syncthreads();
  us = block_sum(us, sh);
  if (threadIdx.x == 0) {
    A* part = static_cast<A*>(it.partials) + 2 * (start / kChunk);
    part[0] = ps;
    part[1] = us;
  }
}

// Stage 2: the tensor's norms from its chunks' partials (in order), then p -= ratio * update.
template <typename A, typename G, typename M, typename P, typename S>
__global__ void __launch_bounds__(kThreads) lamb_stage2_kernel(Meta<StepItem> meta, LambArgs h,
                                                              const float* found_inf, const float* inv_scale) {
  __shared__ A ratio_sh;
  if (found_inf && *found_inf != 0.0f) return;
  int64_t start, end;
  const StepItem& it = block_item(meta, &start, &end);
  const StepCtx c = step_ctx(it);
  if (threadIdx.x == 0) {
    const A* part = static_cast<const A*>(it.partials);
    double pn = 0, un = 0;
    for (int64_t q = 0; q < (it.n + kChunk - 1) / kChunk; ++q) {
      pn += static_cast<double>(part[2 * q]);
      un += static_cast<double>(part[2 * q + 1]);
    }
    pn = sqrt(pn);
    un = sqrt(un);
    const bool trust = h.use_nvlamb || h.weight_decay != 0;
    ratio_sh = static_cast<A>(-(trust && pn != 0 && un != 0 ? h.lr * (pn / un) : h.lr));
  }
  __syncthreads();
  const A neg_ratio = ratio_sh;
  const A rbc1 = lamb_rbc<A>(h.bias_correction, h.beta1, c.step), rbc2 = lamb_rbc<A>(h.bias_correction, h.beta2, c.step);
  const A eps = static_cast<A>(h.eps);
  const A wd = static_cast<A>(h.adam_w_mode ? h.weight_decay : 0.0);
  P* __restrict__ p = static_cast<P*>(it.param);
  const S* __restrict__ m1 = static_cast<const S*>(it.state[0]);
  const S* __restrict__ m2 = static_cast<const S*>(it.state[1]);
  for_each_pack(start, end, it.aligned != 0, [&](int64_t j, auto w) {
    constexpr int W = decltype(w)::value;
    A pv[kVec], m[kVec], v[kVec];
    load_w<W>(p, j, pv);
    load_w<W>(m1, j, m);
    load_w<W>(m2, j, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const random::Philox4 r = draw_if<P, A>(h.sround, h.seed, it.id, c.step, j + k);
      pv[k] = pv[k] + neg_ratio * lamb_update(pv[k], m[k], v[k], rbc1, rbc2, eps, wd);
      if (h.sround) pv[k] = rounded<P>(pv[k], true, r.v[0]);
    }
    store_w<W>(p, j, pv);
    if constexpr (!std::is_void_v<M>) store_w<W>(static_cast<M*>(it.model), j, pv);
  });
}

template <typename A, typename G, typename M, typename P, typename S>
struct RmspropK {
  static void launch(const Meta<StepItem>& meta, int blocks, const RmspropArgs& h, const float* f, const float* inv,
                     cudaStream_t s) {
    rmsprop_kernel<A, G, M, P, S><<<blocks, kThreads, 0, s>>>(meta, h, f, inv);
    MPX_CUDA_LAUNCH_CHECK("rmsprop_step");
  }
};
template <typename A, typename G, typename M, typename P, typename S>
struct AdagradK {
  static void launch(const Meta<StepItem>& meta, int blocks, const AdagradArgs& h, const float* f, const float* inv,
                     cudaStream_t s) {
    adagrad_kernel<A, G, M, P, S><<<blocks, kThreads, 0, s>>>(meta, h, f, inv);
    MPX_CUDA_LAUNCH_CHECK("adagrad_step");
  }
};

template <typename A, typename G, typename M, typename P, typename S>
struct LambK {
  static void launch(const Meta<StepItem>& meta, int blocks, const LambArgs& h, const float* f, const float* inv,
                     cudaStream_t s) {
    lamb_stage1_kernel<A, G, M, P, S><<<blocks, kThreads, 0, s>>>(meta, h, f, inv);
    MPX_CUDA_LAUNCH_CHECK("lamb_step stage 1");
    lamb_stage2_kernel<A, G, M, P, S><<<blocks, kThreads, 0, s>>>(meta, h, f, inv);
    MPX_CUDA_LAUNCH_CHECK("lamb_step stage 2");
  }
};

}  // namespace

void launch_rmsprop_step(const StepItem* items, int count, const RmspropArgs& h, DType a_dtype, const float* found_inf,
                         const float* inv_scale, cudaStream_t s) {
  launch_step<RmspropK>(items, count, h, a_dtype, found_inf, inv_scale, s);
}

void launch_adagrad_step(const StepItem* items, int count, const AdagradArgs& h, DType a_dtype, const float* found_inf,
                         const float* inv_scale, cudaStream_t s) {
  launch_step<AdagradK>(items, count, h, a_dtype, found_inf, inv_scale, s);
}

void launch_lamb_step(const StepItem* items, int count, const LambArgs& h, DType a_dtype, const float* found_inf,
                      const float* inv_scale, cudaStream_t s) {
  launch_step<LambK>(items, count, h, a_dtype, found_inf, inv_scale, s);
}

}  // namespace mpx::cuda
