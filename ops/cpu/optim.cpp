// CPU kernels for the fused optimizer steps: one pass reads the gradient, updates master and state, writes the model copy.
#include <algorithm>
#include <cmath>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/optim_kernels.h"

namespace mpx::cpu {
namespace {

// Runs f.template operator()<T>() for the floating dtypes a gradient or model copy can have.
template <typename F>
void visit_floating(DType dt, F&& f) {
  switch (dt) {
    case kFloat32: f.template operator()<float>(); return;
    case kFloat16: f.template operator()<Half>(); return;
    case kBFloat16: f.template operator()<BFloat16>(); return;
    case kFloat64: f.template operator()<double>(); return;
    default: MPX_ERROR("optimizer step: expected a floating tensor, got ", dtype_name(dt));
  }
}

template <typename A, typename S> inline A load_as(S v) {
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) return static_cast<A>(static_cast<float>(v));
  else return static_cast<A>(v);
}
template <typename D, typename A> inline D store_as(A v) {
  if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) return D(static_cast<float>(v));
  else return static_cast<D>(v);
}

// The element type of an optional model copy; `void` selects the variant with no copy.
template <typename F>
void visit_model(const Tensor& model, F&& f) {
  if (!model.defined()) { f.template operator()<void>(); return; }
  visit_floating(model.dtype(), f);
}

template <typename T> T* ptr(const Tensor& t) { return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr; }

// Runs f.template operator()<P>() with P the storage type of a parameter and its state: the
// kernel's type A, or f16/bf16 for a parameter without master under an f32 kernel.
template <typename A, typename F>
void visit_param(const Tensor& p, F&& f) {
  if (p.dtype() == dtype_v<A>) return f.template operator()<A>();
  if constexpr (std::is_same_v<A, float>) {
    if (p.dtype() == kFloat16) return f.template operator()<Half>();
    if (p.dtype() == kBFloat16) return f.template operator()<BFloat16>();
  }
  MPX_ERROR("optimizer step: a ", dtype_name(dtype_v<A>), " step can't update a ", dtype_name(p.dtype()),
            " parameter");
}
// Stores v as P and returns what was stored, read back as A: a low-precision state feeds its
// rounded value to the rest of the step, as torch.optim's in-place updates of f16 state do.
template <typename P, typename A> inline A store_rounded(P* dst, A v) {
  *dst = store_as<P>(v);
  if constexpr (std::is_same_v<P, A>) return v;
  else return load_as<A>(*dst);
}

// The shared pass over parameter i: dispatches once per tensor on the gradient's dtype and the
// optional low-precision model copy, then calls `update(j, grad_j)`, which updates the master and
// state and returns the new parameter value; that value is rounded into the model copy.
template <typename A, typename Update>
void for_each_element(const kernels::StepTensors& ts, size_t i, Update&& update) {
  const int64_t n = ts.params[i].numel();
  const bool unscale = ts.inv_scale.defined();
  const A inv = unscale ? static_cast<A>(*static_cast<const float*>(ts.inv_scale.raw_data())) : A(1);
  visit_floating(ts.grads[i].dtype(), [&]<typename G>() {
    const G* g = ptr<const G>(ts.grads[i]);
    visit_model(ts.models[i], [&]<typename M>() {
      M* model = nullptr;
      if constexpr (!std::is_void_v<M>) model = ptr<M>(ts.models[i]);
      parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
          const A gv = load_as<A>(g[j]);
          const A pv = update(j, unscale ? static_cast<A>(gv * inv) : gv);
          if constexpr (!std::is_void_v<M>) model[j] = store_as<M>(pv);
        }
      });
    });
  });
}

// The amp skip: true when found_inf says the gradients overflowed. Then nothing is updated and
// each parameter's skip count grows, so later steps know their true step number.
bool skip_step(const kernels::StepTensors& ts) {
  if (!ts.found_inf.defined() || *static_cast<const float*>(ts.found_inf.raw_data()) == 0.0f) return false;
  for (const Tensor& k : ts.skips) *static_cast<float*>(k.raw_data()) += 1.0f;
  return true;
}
// Parameter i's true step number and whether its state starts now (see StepTensors::skips).
std::pair<int64_t, bool> true_step(const kernels::StepTensors& ts, size_t i) {
  if (ts.skips.empty()) return {ts.steps[i], ts.fresh[i] != 0};
  const int64_t step = ts.steps[i] - static_cast<int64_t>(*static_cast<const float*>(ts.skips[i].raw_data()));
  return {step, ts.fresh[i] != 0 || step == 1};
}

// Hyper-parameters are rounded to the compute type once, like PyTorch's scalar arguments.
template <typename A>
struct Sgd {
  static void run(const kernels::StepTensors& ts, const kernels::SgdHyper& h) {
    const A wd = static_cast<A>(h.weight_decay), mom = static_cast<A>(h.momentum);
    const A damp1 = static_cast<A>(1.0 - h.dampening), neg_lr = static_cast<A>(-h.lr);
    const bool use_wd = h.weight_decay != 0, use_mom = h.momentum != 0;
    if (skip_step(ts)) return;
    for (size_t i = 0; i < ts.params.size(); ++i) {
      const bool fresh = true_step(ts, i).second;
      visit_param<A>(ts.params[i], [&]<typename P>() {
        P* p = ptr<P>(ts.params[i]);
        P* buf = use_mom ? ptr<P>(ts.states[0][i]) : nullptr;
        for_each_element<A>(ts, i, [&](int64_t j, A d) {
          const A pv = load_as<A>(p[j]);
          if (h.maximize) d = -d;
          if (use_wd) d = d + wd * pv;
          if (use_mom) {
            const A nb = store_rounded(&buf[j], fresh ? d : static_cast<A>(load_as<A>(buf[j]) * mom) + damp1 * d);
            d = h.nesterov ? d + mom * nb : nb;
          }
          return store_rounded(&p[j], pv + neg_lr * d);
        });
      });
    }
  }
};

template <typename A>
struct Adam {
  static void run(const kernels::StepTensors& ts, const kernels::AdamHyper& h) {
    const A b1 = static_cast<A>(h.beta1), b2 = static_cast<A>(h.beta2);
    const A omb1 = static_cast<A>(1.0 - h.beta1), omb2 = static_cast<A>(1.0 - h.beta2);
    const A wd = static_cast<A>(h.weight_decay), eps = static_cast<A>(h.eps);
    const A decay = static_cast<A>(1.0 - h.lr * h.weight_decay);
    const bool l2 = !h.decoupled_weight_decay && h.weight_decay != 0;
    const bool decoupled = h.decoupled_weight_decay && h.weight_decay != 0;
    if (skip_step(ts)) return;
    for (size_t i = 0; i < ts.params.size(); ++i) {
      // Bias corrections in double, as the Python scalars of torch's single-tensor path.
      const double step = static_cast<double>(true_step(ts, i).first);
      const double bc1 = 1.0 - std::pow(h.beta1, step), bc2 = 1.0 - std::pow(h.beta2, step);
      const A neg_step_size = static_cast<A>(-(h.lr / bc1));
      const A bc2_sqrt = static_cast<A>(std::sqrt(bc2));
      visit_param<A>(ts.params[i], [&]<typename P>() {
        P* p = ptr<P>(ts.params[i]);
        P* m1 = ptr<P>(ts.states[0][i]);
        P* m2 = ptr<P>(ts.states[1][i]);
        P* vmax = h.amsgrad ? ptr<P>(ts.states[2][i]) : nullptr;
        for_each_element<A>(ts, i, [&](int64_t j, A gv) {
          if (h.maximize) gv = -gv;
          A pv = load_as<A>(p[j]);
          if (decoupled) pv = pv * decay;
          if (l2) gv = gv + wd * pv;
          const A m = store_rounded(&m1[j], static_cast<A>(load_as<A>(m1[j]) * b1) + omb1 * gv);
          const A v = store_rounded(&m2[j], static_cast<A>(load_as<A>(m2[j]) * b2) + static_cast<A>(omb2 * gv) * gv);
          A vd = v;
          if (vmax) {
            const A old = load_as<A>(vmax[j]);
            vd = store_rounded(&vmax[j], std::isnan(old) || old > v ? old : v);
          }
          const A denom = static_cast<A>(std::sqrt(vd) / bc2_sqrt) + eps;
          return store_rounded(&p[j], pv + static_cast<A>(neg_step_size * m) / denom);
        });
      });
    }
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_optim) {
  dispatch::register_types<Sgd, float, double>(OpId::sgd_step, DeviceType::kCPU);
  dispatch::register_types<Adam, float, double>(OpId::adam_step, DeviceType::kCPU);
}

}  // namespace mpx::cpu
