// Fused multi-tensor kernels: unscale + inf/NaN check, SGD and Adam/AdamW steps that skip on the
// device's found_inf flag (f16/bf16 stores rounded to nearest or stochastically), and the
// loss-scale update. One launch covers up to kMtTensors tensors.
#include "ops/cuda/multi_tensor.cuh"

namespace mpx::cuda {
namespace {
using namespace multi_tensor;

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
