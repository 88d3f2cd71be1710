// CUDA registrations of the fused multi-tensor kernels: unscale + inf check, SGD/Adam/RMSprop/Adagrad/LAMB steps, scale update.
#include <algorithm>
#include <tuple>
#include <vector>

#include "ops/amp.h"
#include "ops/cuda/amp_optim_launch.h"
#include "ops/cuda/cuda_common.h"
#include "ops/dispatch.h"
#include "ops/optim_kernels.h"

namespace mpx::cuda {
namespace {

const float* f32_ptr(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.raw_data()) : nullptr; }
// Whether every pointer allows the kernels' packed accesses: four elements at once, so 16 bytes
// (32 for f64 data, whose packs are that wide).
bool aligned_for(DType dt, std::initializer_list<const void*> ps) {
  const uintptr_t a = dt == kFloat64 ? 32 : 16;
  for (const void* p : ps)
    if (reinterpret_cast<uintptr_t>(p) % a != 0) return false;
  return true;
}

void unscale_check_inf(const tensor_list& in, const tensor_list& out, const Tensor& inv_scale, const Tensor& found_inf) {
  TensorDeviceGuard g(found_inf);
  std::vector<UnscaleItem> items;
  items.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    UnscaleItem it;
    it.in = in[i].raw_data();
    it.out = out.empty() ? nullptr : out[i].raw_data();
    it.n = in[i].numel();
    it.in_dtype = in[i].dtype();
    it.out_dtype = out.empty() ? it.in_dtype : out[i].dtype();
    it.aligned = aligned_for(it.in_dtype, {it.in, it.out});
    items.push_back(it);
  }
  // Runs of one input dtype share a kernel instantiation: group them to save launches.
  std::stable_sort(items.begin(), items.end(), [](const UnscaleItem& a, const UnscaleItem& b) {
    return std::tie(a.in_dtype, a.out_dtype) < std::tie(b.in_dtype, b.out_dtype);
  });
  launch_unscale_check(items.data(), static_cast<int>(items.size()), f32_ptr(inv_scale),
                       static_cast<float*>(found_inf.raw_data()), stream_of(found_inf));
}

void update_scale(const Tensor& scale, const Tensor& tracker, const Tensor& skipped, const Tensor& found_inf,
                  double growth, double backoff, int64_t interval, double max_scale) {
  TensorDeviceGuard g(scale);
  launch_update_scale(static_cast<float*>(scale.raw_data()), static_cast<float*>(tracker.raw_data()),
                      skipped.defined() ? static_cast<float*>(skipped.raw_data()) : nullptr, f32_ptr(found_inf),
                      growth, backoff, interval, max_scale, stream_of(scale));
}

std::vector<StepItem> step_items(const kernels::StepTensors& ts) {
  std::vector<StepItem> items;
  items.reserve(ts.params.size());
  for (size_t i = 0; i < ts.params.size(); ++i) {
    StepItem it;
    it.param = ts.params[i].raw_data();
    it.grad = ts.grads[i].raw_data();
    it.model = ts.models[i].defined() ? ts.models[i].raw_data() : nullptr;
    for (size_t k = 0; k < ts.states.size() && k < 3; ++k)
      it.state[k] = ts.states[k][i].defined() ? ts.states[k][i].raw_data() : nullptr;
    it.count = ts.counts.empty() ? nullptr : static_cast<double*>(ts.counts[i].raw_data());
    it.n = ts.params[i].numel();
    it.step = ts.steps[i];
    it.fresh = ts.fresh[i];
    it.param_dtype = ts.params[i].dtype();
    it.grad_dtype = ts.grads[i].dtype();
    it.model_dtype = ts.models[i].defined() ? ts.models[i].dtype() : kBool;
    for (size_t k = 0; k < ts.states.size(); ++k)
      if (ts.states[k][i].defined()) it.state_dtype = ts.states[k][i].dtype();
    it.id = ts.ids.empty() ? static_cast<uint32_t>(i) : ts.ids[i];
    it.aligned = aligned_for(it.param_dtype, {it.param, it.grad, it.model, it.state[0], it.state[1], it.state[2]});
    items.push_back(it);
  }
  std::stable_sort(items.begin(), items.end(), [](const StepItem& a, const StepItem& b) {
    return std::tie(a.param_dtype, a.grad_dtype, a.model_dtype, a.state_dtype) <
           std::tie(b.param_dtype, b.grad_dtype, b.model_dtype, b.state_dtype);
  });
  return items;
}

// The kernels read f32/f16/bf16 gradients in f32 steps and f64 ones in f64 steps; any other
// floating gradient (the CPU kernels, like torch.optim, take them all) is converted first. The
// copies are freed on this stream, after the kernels that read them.
kernels::StepTensors with_kernel_grads(const kernels::StepTensors& ts, DType a) {
  auto fits = [a](DType g) { return a == kFloat64 ? g == kFloat64 : g != kFloat64; };
  if (std::all_of(ts.grads.begin(), ts.grads.end(), [&](const Tensor& g) { return fits(g.dtype()); })) return ts;
  kernels::StepTensors r = ts;
  for (Tensor& g : r.grads)
    if (!fits(g.dtype())) g = g.to(a);
  return r;
}

// After the step kernels have read them, the step counts advance (unless the flag skipped it).
void count_steps(const kernels::StepTensors& ts, cudaStream_t s) {
  if (ts.counts.empty()) return;
  std::vector<double*> p;
  for (const Tensor& c : ts.counts) p.push_back(static_cast<double*>(c.raw_data()));
  launch_count_steps(p.data(), static_cast<int>(p.size()), f32_ptr(ts.found_inf), s);
}

// The shared shape of every step: items, the launch, then the step counts.
template <typename A, typename Args, typename Launch>
void run_step(const kernels::StepTensors& ts, const Args& a, Launch launch) {
  if (ts.params.empty()) return;
  TensorDeviceGuard g(ts.params[0]);
  const cudaStream_t s = stream_of(ts.params[0]);
  const kernels::StepTensors kts = with_kernel_grads(ts, dtype_v<A>);
  const auto items = step_items(kts);
  launch(items.data(), static_cast<int>(items.size()), a, dtype_v<A>, f32_ptr(ts.found_inf), f32_ptr(ts.inv_scale), s);
  count_steps(kts, s);
}

template <typename A>
struct Sgd {
  static void run(const kernels::StepTensors& ts, const kernels::SgdHyper& h) {
    const SgdArgs a{h.lr, h.momentum, h.dampening, h.weight_decay, h.nesterov, h.maximize, ts.stochastic_rounding, ts.seed};
    run_step<A>(ts, a, &launch_sgd_step);
  }
};

template <typename A>
struct Adam {
  static void run(const kernels::StepTensors& ts, const kernels::AdamHyper& h) {
    const AdamArgs a{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.decoupled_weight_decay, h.amsgrad, h.maximize,
                     ts.stochastic_rounding, ts.seed};
    run_step<A>(ts, a, &launch_adam_step);
  }
};

template <typename A>
struct Rmsprop {
  static void run(const kernels::StepTensors& ts, const kernels::RmspropHyper& h) {
    const RmspropArgs a{h.lr, h.alpha, h.eps, h.weight_decay, h.momentum, h.centered, h.maximize,
                        ts.stochastic_rounding, ts.seed};
    run_step<A>(ts, a, &launch_rmsprop_step);
  }
};

template <typename A>
struct Adagrad {
  static void run(const kernels::StepTensors& ts, const kernels::AdagradHyper& h) {
    const AdagradArgs a{h.lr, h.lr_decay, h.weight_decay, h.eps, h.initial_accumulator_value, h.maximize,
                        ts.stochastic_rounding, ts.seed};
    run_step<A>(ts, a, &launch_adagrad_step);
  }
};

template <typename A>
struct Lamb {
  static void run(const kernels::StepTensors& ts, const kernels::LambHyper& h) {
    if (ts.params.empty()) return;
    MPX_CHECK(h.global_grad_norm.defined() && h.global_grad_norm.dtype() == kFloat64,
              "LAMB step: the global gradient norm must be an f64 0-dim tensor");
    TensorDeviceGuard g(ts.params[0]);
    const cudaStream_t s = stream_of(ts.params[0]);
    const kernels::StepTensors kts = with_kernel_grads(ts, dtype_v<A>);
    std::vector<StepItem> items = step_items(kts);
    // Scratch on this stream, freed after the kernels: the chunks' partial norms.
    int64_t chunks = 0;
    for (const StepItem& it : items) chunks += (it.n + kStepChunk - 1) / kStepChunk;
    const Tensor part = empty({std::max<int64_t>(2 * chunks, 2)}, TensorOptions(dtype_v<A>).device(ts.params[0].device()));
    A* pp = static_cast<A*>(part.raw_data());
    for (StepItem& it : items) {
      it.partials = pp;
      pp += 2 * ((it.n + kStepChunk - 1) / kStepChunk);
    }
    const LambArgs a{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.max_grad_norm, h.bias_correction,
                     h.grad_averaging, h.adam_w_mode, h.use_nvlamb, ts.stochastic_rounding, ts.seed,
                     static_cast<const double*>(h.global_grad_norm.raw_data())};
    launch_lamb_step(items.data(), static_cast<int>(items.size()), a, dtype_v<A>, f32_ptr(ts.found_inf),
                     f32_ptr(ts.inv_scale), s);
    count_steps(kts, s);
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cuda_amp_optim) {
  using D = DeviceType;
  dispatch::register_kernel<OpId::unscale_check_inf>(D::kCUDA, kFloat32, &unscale_check_inf);
  dispatch::register_kernel<OpId::update_scale>(D::kCUDA, kFloat32, &update_scale);
  dispatch::register_types<OpId::sgd_step, Sgd, float, double>(D::kCUDA);
  dispatch::register_types<OpId::adam_step, Adam, float, double>(D::kCUDA);
  dispatch::register_types<OpId::rmsprop_step, Rmsprop, float, double>(D::kCUDA);
  dispatch::register_types<OpId::adagrad_step, Adagrad, float, double>(D::kCUDA);
  dispatch::register_types<OpId::lamb_step, Lamb, float, double>(D::kCUDA);
}

}  // namespace mpx::cuda
