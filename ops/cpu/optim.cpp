// CPU kernels for the fused optimizer steps (SGD, Adam/AdamW, RMSprop, Adagrad, LAMB): one pass reads the gradient, updates master and state, writes the model copy.
// Without masters, f16/bf16 stores round to nearest or stochastically (ops/stochastic_round.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/optim_kernels.h"
#include "ops/stochastic_round.h"

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

// Runs f.template operator()<P, S, kSR>() with P the storage type of parameter i, S that of its
// state and kSR whether f16/bf16 stores round stochastically: P = S = the kernel's type A, or,
// for a parameter without master under an f32 kernel, P f16/bf16 with S = P (rounded to
// nearest, or stochastically) or S = f32 (stochastic rounding with f32 state).
template <typename A, typename F>
void visit_storage(const kernels::StepTensors& ts, size_t i, F&& f) {
  const Tensor& p = ts.params[i];
  if (p.dtype() == dtype_v<A>) return f.template operator()<A, A, false>();
  if constexpr (std::is_same_v<A, float>) {
    DType sd = p.dtype();  // no state buffers (SGD without momentum): any S will do
    for (const auto& st : ts.states)
      if (st[i].defined()) sd = st[i].dtype();
    const bool sr = ts.stochastic_rounding;
    auto with_p = [&]<typename P>() {
      if (sd == p.dtype()) {
        if (sr) return f.template operator()<P, P, true>();
        return f.template operator()<P, P, false>();
      }
      MPX_CHECK(sd == kFloat32 && sr, "optimizer step: ", dtype_name(sd), " state for a ", dtype_name(p.dtype()),
                " parameter needs stochastic rounding (f32 state) or the parameter's dtype");
      return f.template operator()<P, float, true>();
    };
    if (p.dtype() == kFloat16) return with_p.template operator()<Half>();
    if (p.dtype() == kBFloat16) return with_p.template operator()<BFloat16>();
  }
  MPX_ERROR("optimizer step: a ", dtype_name(dtype_v<A>), " step can't update a ", dtype_name(p.dtype()),
            " parameter");
}
// Stores v as P and returns what was stored, read back as A: a low-precision state feeds its
// rounded value to the rest of the step, as torch.optim's in-place updates of f16 state do.
// kSR rounds a f16/bf16 store stochastically with the random word r.
template <bool kSR, typename P, typename A> inline A store_rounded(P* dst, A v, uint32_t r = 0) {
  if constexpr (std::is_same_v<P, A>) {
    *dst = v;
    return v;
  } else {
    // Through the bits: a copied struct is a second memory reference GCC will not vectorize.
    uint16_t bits;
    if constexpr (!kSR) bits = store_as<P>(v).x;
    else if constexpr (std::is_same_v<P, BFloat16>) bits = sround::bf16_bits(static_cast<float>(v), r);
    else bits = sround::f16_bits(static_cast<float>(v), r);
    dst->x = bits;
    return load_as<A>(P::from_bits(bits));
  }
}
// The step's random words for element j (all zero, and never computed, without kSR).
template <bool kSR> inline random::Philox4 draw_if(uint64_t seed, uint32_t id, uint64_t step, int64_t j) {
  if constexpr (kSR) return sround::draw(seed, id, step, static_cast<uint64_t>(j));
  else return random::Philox4{{0, 0, 0, 0}};
}

// Loop-invariant choices as bit masks: GCC does not vectorize `flag ? a : b` on a bool it
// cannot hoist out of the element loop, but does vectorize this integer blend, which is exact.
template <typename A> using BitsOf = std::conditional_t<sizeof(A) == 8, uint64_t, uint32_t>;
template <typename A> BitsOf<A> mask_of(bool c) { return c ? ~BitsOf<A>(0) : BitsOf<A>(0); }
template <typename A> inline A pick(BitsOf<A> m, A yes, A no) {
  return std::bit_cast<A>((std::bit_cast<BitsOf<A>>(yes) & m) | (std::bit_cast<BitsOf<A>>(no) & ~m));
}

// Calls f.template operator()<b>(): a state buffer read and written under a runtime condition
// would be control flow in the element loop, which keeps it from vectorizing.
template <typename F> void with_bool(bool b, F&& f) {
  if (b) f.template operator()<true>();
  else f.template operator()<false>();
}

// The shared pass over parameter i: dispatches once per tensor on the gradient's dtype and the
// optional low-precision model copy, then calls `update(j, grad_j)`, which updates the master and
// state and returns the new parameter value; that value is rounded into the model copy.
// kModel: whether parameter i can have a model copy (only an f32/f64 master does).
template <typename A, bool kModel, typename Update>
void for_each_element(const kernels::StepTensors& ts, size_t i, Update&& update) {
  const int64_t n = ts.params[i].numel();
  const bool unscale = ts.inv_scale.defined();
  const A inv = unscale ? static_cast<A>(*static_cast<const float*>(ts.inv_scale.raw_data())) : A(1);
  visit_floating(ts.grads[i].dtype(), [&]<typename G>() {
    const G* g = ptr<const G>(ts.grads[i]);
    auto run = [&]<typename M>() {
      M* model = nullptr;
      if constexpr (!std::is_void_v<M>) model = ptr<M>(ts.models[i]);
      // Everything copied into locals of the chunk: values read through the closure could alias
      // the stores, so the compiler would reload them every element and not vectorize.
      // flatten: GCC's inliner otherwise keeps the f16 updates (two roundings and three widenings
      // per element) a call per element, which no loop around it can vectorize.
      parallel_for(n, kGrain, [=](int64_t b, int64_t e) __attribute__((flatten)) {
        const auto u = update;
        const G* const gr = g;
        M* const mo = model;
        const A s = unscale ? inv : A(1);
        for (int64_t j = b; j < e; ++j) {
          const A pv = u(j, load_as<A>(gr[j]) * s);
          if constexpr (!std::is_void_v<M>) mo[j] = store_as<M>(pv);
        }
      });
    };
    if constexpr (kModel) visit_model(ts.models[i], run);
    else run.template operator()<void>();
  });
}

// The amp skip: true when found_inf says the gradients overflowed. Then nothing is updated,
// the step counts included.
bool skip_step(const kernels::StepTensors& ts) {
  return ts.found_inf.defined() && *static_cast<const float*>(ts.found_inf.raw_data()) != 0.0f;
}
// Parameter i's step number and whether its state starts now (see StepTensors::counts).
std::pair<int64_t, bool> true_step(const kernels::StepTensors& ts, size_t i) {
  if (ts.counts.empty()) return {ts.steps[i], ts.fresh[i] != 0};
  const auto taken = static_cast<int64_t>(*static_cast<const double*>(ts.counts[i].raw_data()));
  return {taken + 1, ts.fresh[i] != 0 || taken == 0};
}
// Parameter i's Philox stream (its index in the optimizer; the list position when not given).
uint32_t stream_of(const kernels::StepTensors& ts, size_t i) {
  return ts.ids.empty() ? static_cast<uint32_t>(i) : ts.ids[i];
}
// After an update: each parameter has taken one more step.
void count_steps(const kernels::StepTensors& ts) {
  for (const Tensor& c : ts.counts) *static_cast<double*>(c.raw_data()) += 1.0;
}

// Hyper-parameters are rounded to the compute type once, like PyTorch's scalar arguments.
template <typename A>
struct Sgd {
  static void run(const kernels::StepTensors& ts, const kernels::SgdHyper& h) {
    const A wd = static_cast<A>(h.weight_decay), mom = static_cast<A>(h.momentum);
    const A damp1 = static_cast<A>(1.0 - h.dampening), neg_lr = static_cast<A>(-h.lr);
    const bool use_wd = h.weight_decay != 0, use_mom = h.momentum != 0;
    if (skip_step(ts)) return;
    const BitsOf<A> m_max = mask_of<A>(h.maximize), m_wd = mask_of<A>(use_wd), m_nest = mask_of<A>(h.nesterov);
    const uint64_t seed = ts.seed;
    for (size_t i = 0; i < ts.params.size(); ++i) {
      const std::pair<int64_t, bool> at = true_step(ts, i);
      const int64_t step = at.first;
      const BitsOf<A> m_fresh = mask_of<A>(at.second);
      const uint32_t id = stream_of(ts, i);
      visit_storage<A>(ts, i, [&]<typename P, typename S, bool kSR>() {
        with_bool(use_mom, [&]<bool kMom>() {
          P* p = ptr<P>(ts.params[i]);
          S* buf = kMom ? ptr<S>(ts.states[0][i]) : nullptr;
          for_each_element<A, std::is_same_v<P, A>>(ts, i, [=](int64_t j, A d) {
            const random::Philox4 r = draw_if<kSR>(seed, id, static_cast<uint64_t>(step), j);
            const A pv = load_as<A>(p[j]);
            d = pick(m_max, -d, d);
            d = pick(m_wd, d + wd * pv, d);
            if constexpr (kMom) {
              // A fresh buffer is zeros: read either way, so the choice is a blend.
              const A old = static_cast<A>(load_as<A>(buf[j]) * mom) + damp1 * d;
              const A nb = store_rounded<kSR>(&buf[j], pick(m_fresh, d, old), r.v[1]);
              d = pick(m_nest, d + mom * nb, nb);
            }
            return store_rounded<kSR>(&p[j], pv + neg_lr * d, r.v[0]);
          });
        });
      });
    }
    count_steps(ts);
  }
};

template <typename A>
struct Adam {
  static void run(const kernels::StepTensors& ts, const kernels::AdamHyper& h) {
    const A b1 = static_cast<A>(h.beta1), b2 = static_cast<A>(h.beta2);
    const A omb1 = static_cast<A>(1.0 - h.beta1), omb2 = static_cast<A>(1.0 - h.beta2);
    const A wd = static_cast<A>(h.weight_decay), eps = static_cast<A>(h.eps);
    const A decay = static_cast<A>(1.0 - h.lr * h.weight_decay);
    const BitsOf<A> m_l2 = mask_of<A>(!h.decoupled_weight_decay && h.weight_decay != 0);
    const BitsOf<A> m_decoupled = mask_of<A>(h.decoupled_weight_decay && h.weight_decay != 0);
    const BitsOf<A> m_max = mask_of<A>(h.maximize);
    if (skip_step(ts)) return;
    const uint64_t seed = ts.seed;
    for (size_t i = 0; i < ts.params.size(); ++i) {
      const int64_t taken = true_step(ts, i).first;
      const uint32_t id = stream_of(ts, i);
      // Bias corrections in double, as the Python scalars of torch's single-tensor path.
      const double step = static_cast<double>(taken);
      const double bc1 = 1.0 - std::pow(h.beta1, step), bc2 = 1.0 - std::pow(h.beta2, step);
      const A neg_step_size = static_cast<A>(-(h.lr / bc1));
      const A bc2_sqrt = static_cast<A>(std::sqrt(bc2));
      visit_storage<A>(ts, i, [&]<typename P, typename S, bool kSR>() {
        with_bool(h.amsgrad, [&]<bool kAms>() {
          P* p = ptr<P>(ts.params[i]);
          S* m1 = ptr<S>(ts.states[0][i]);
          S* m2 = ptr<S>(ts.states[1][i]);
          S* vmax = kAms ? ptr<S>(ts.states[2][i]) : nullptr;
          for_each_element<A, std::is_same_v<P, A>>(ts, i, [=](int64_t j, A gv) {
            const random::Philox4 r = draw_if<kSR>(seed, id, static_cast<uint64_t>(taken), j);
            gv = pick(m_max, -gv, gv);
            A pv = load_as<A>(p[j]);
            pv = pick(m_decoupled, pv * decay, pv);
            gv = pick(m_l2, gv + wd * pv, gv);
            const A m = store_rounded<kSR>(&m1[j], static_cast<A>(load_as<A>(m1[j]) * b1) + omb1 * gv, r.v[1]);
            const A v = store_rounded<kSR>(&m2[j], static_cast<A>(load_as<A>(m2[j]) * b2) + static_cast<A>(omb2 * gv) * gv,
                                           r.v[2]);
            A vd = v;
            if constexpr (kAms) {
              const A old = load_as<A>(vmax[j]);
              vd = store_rounded<kSR>(&vmax[j], std::isnan(old) || old > v ? old : v, r.v[3]);
            }
            const A denom = static_cast<A>(std::sqrt(vd) / bc2_sqrt) + eps;
            return store_rounded<kSR>(&p[j], pv + static_cast<A>(neg_step_size * m) / denom, r.v[0]);
          });
        });
      });
    }
    count_steps(ts);
  }
};


template <typename A>
struct Rmsprop {
  static void run(const kernels::StepTensors& ts, const kernels::RmspropHyper& h) {
    const A alpha = static_cast<A>(h.alpha), oma = static_cast<A>(1.0 - h.alpha);
    const A wd = static_cast<A>(h.weight_decay), eps = static_cast<A>(h.eps), mom = static_cast<A>(h.momentum);
    const A neg_lr = static_cast<A>(-h.lr);
    const BitsOf<A> m_max = mask_of<A>(h.maximize), m_wd = mask_of<A>(h.weight_decay != 0);
    const bool use_mom = h.momentum > 0;
    if (skip_step(ts)) return;
    const uint64_t seed = ts.seed;
    for (size_t i = 0; i < ts.params.size(); ++i) {
      const int64_t taken = true_step(ts, i).first;
      const uint32_t id = stream_of(ts, i);
      visit_storage<A>(ts, i, [&]<typename P, typename S, bool kSR>() {
        with_bool(use_mom, [&]<bool kMom>() {
          with_bool(h.centered, [&]<bool kCentered>() {
            P* p = ptr<P>(ts.params[i]);
            S* sq = ptr<S>(ts.states[0][i]);
            S* buf = kMom ? ptr<S>(ts.states[1][i]) : nullptr;
            S* gavg = kCentered ? ptr<S>(ts.states[kMom ? 2 : 1][i]) : nullptr;
            for_each_element<A, std::is_same_v<P, A>>(ts, i, [=](int64_t j, A gv) {
              const random::Philox4 r = draw_if<kSR>(seed, id, static_cast<uint64_t>(taken), j);
              const A pv = load_as<A>(p[j]);
              gv = pick(m_max, -gv, gv);
              gv = pick(m_wd, gv + wd * pv, gv);
              const A v = store_rounded<kSR>(&sq[j], static_cast<A>(load_as<A>(sq[j]) * alpha) + static_cast<A>(oma * gv) * gv,
                                             r.v[1]);
              A var = v;
              if constexpr (kCentered) {
                const A ga = store_rounded<kSR>(&gavg[j], static_cast<A>(load_as<A>(gavg[j]) * alpha) + oma * gv, r.v[3]);
                var = v - ga * ga;
              }
              const A avg = std::sqrt(var) + eps;
              A d = gv / avg;
              if constexpr (kMom) d = store_rounded<kSR>(&buf[j], static_cast<A>(load_as<A>(buf[j]) * mom) + d, r.v[2]);
              return store_rounded<kSR>(&p[j], pv + neg_lr * d, r.v[0]);
            });
          });
        });
      });
    }
    count_steps(ts);
  }
};

template <typename A>
struct Adagrad {
  static void run(const kernels::StepTensors& ts, const kernels::AdagradHyper& h) {
    const A wd = static_cast<A>(h.weight_decay), eps = static_cast<A>(h.eps);
    const A init = static_cast<A>(h.initial_accumulator_value);
    const BitsOf<A> m_max = mask_of<A>(h.maximize), m_wd = mask_of<A>(h.weight_decay != 0);
    if (skip_step(ts)) return;
    const uint64_t seed = ts.seed;
    for (size_t i = 0; i < ts.params.size(); ++i) {
      const std::pair<int64_t, bool> at = true_step(ts, i);
      const int64_t taken = at.first;
      // The fresh buffer holds zeros; it starts from initial_accumulator_value.
      const BitsOf<A> m_fresh = mask_of<A>(at.second);
      const uint32_t id = stream_of(ts, i);
      // torch: clr = lr / (1 + (step - 1) * lr_decay), a Python scalar.
      const A neg_clr = static_cast<A>(-(h.lr / (1.0 + static_cast<double>(taken - 1) * h.lr_decay)));
      visit_storage<A>(ts, i, [&]<typename P, typename S, bool kSR>() {
        P* p = ptr<P>(ts.params[i]);
        S* sum = ptr<S>(ts.states[0][i]);
        for_each_element<A, std::is_same_v<P, A>>(ts, i, [=](int64_t j, A gv) {
          const random::Philox4 r = draw_if<kSR>(seed, id, static_cast<uint64_t>(taken), j);
          const A pv = load_as<A>(p[j]);
          gv = pick(m_max, -gv, gv);
          gv = pick(m_wd, gv + wd * pv, gv);
          const A old = pick(m_fresh, init, load_as<A>(sum[j]));
          const A sv = store_rounded<kSR>(&sum[j], old + gv * gv, r.v[1]);
          return store_rounded<kSR>(&p[j], pv + neg_clr * (gv / (std::sqrt(sv) + eps)), r.v[0]);
        });
      });
    }
    count_steps(ts);
  }
};


// LAMB (ops/optim_kernels.h's LambHyper), two passes per parameter and no scratch the size of
// it: stage 1 updates the moments and sums the squared norms of p and of the update u; stage 2
// recomputes u from the stored moments (the same values stage 1 summed) and steps p.
template <typename A>
struct Lamb {
  static constexpr int64_t kChunk = 4096;  // the norms' partial sums per fixed chunk: thread-count independent

  // u from the moments as stored: the bias corrections are multiplied by their reciprocals.
  struct Update {
    A rbc1, rbc2, eps, wd;
    BitsOf<A> decoupled;
    A operator()(A pv, A m, A v) const {
      const A uv = (m * rbc1) / (static_cast<A>(std::sqrt(v * rbc2)) + eps);
      return pick(decoupled, uv + wd * pv, uv);
    }
  };

  static void run(const kernels::StepTensors& ts, const kernels::LambHyper& h) {
    if (skip_step(ts)) return;
    MPX_CHECK(h.global_grad_norm.defined(), "LAMB step: the global gradient norm is missing");
    const double gnorm = *static_cast<const double*>(h.global_grad_norm.raw_data());
    // apex: grads are divided by the clipped norm's ratio (1 when within max_grad_norm).
    const double clip = h.max_grad_norm > 0 && gnorm > h.max_grad_norm ? gnorm / h.max_grad_norm : 1.0;
    const A inv = ts.inv_scale.defined() ? static_cast<A>(*static_cast<const float*>(ts.inv_scale.raw_data())) : A(1);
    const A gscale = static_cast<A>(static_cast<double>(inv) / clip);
    const A b1 = static_cast<A>(h.beta1), b2 = static_cast<A>(h.beta2), omb2 = static_cast<A>(1.0 - h.beta2);
    const A b3 = static_cast<A>(h.grad_averaging ? 1.0 - h.beta1 : 1.0);
    const A wd = static_cast<A>(h.weight_decay);
    const BitsOf<A> m_l2 = mask_of<A>(!h.adam_w_mode && h.weight_decay != 0);
    const bool trust = h.use_nvlamb || h.weight_decay != 0;
    const uint64_t seed = ts.seed;
    for (size_t i = 0; i < ts.params.size(); ++i) {
      const int64_t taken = true_step(ts, i).first;
      const uint32_t id = stream_of(ts, i);
      const double t = static_cast<double>(taken);
      const Update upd{static_cast<A>(1.0 / (h.bias_correction ? 1.0 - std::pow(h.beta1, t) : 1.0)),
                       static_cast<A>(1.0 / (h.bias_correction ? 1.0 - std::pow(h.beta2, t) : 1.0)),
                       static_cast<A>(h.eps), wd, mask_of<A>(h.adam_w_mode && h.weight_decay != 0)};
      const int64_t n = ts.params[i].numel();
      visit_storage<A>(ts, i, [&]<typename P, typename S, bool kSR>() {
        P* p = ptr<P>(ts.params[i]);
        S* m1 = ptr<S>(ts.states[0][i]);
        S* m2 = ptr<S>(ts.states[1][i]);
        // Stage 1, per chunk: the moments, and the squared norms of p (before the step) and u
        // summed in the accumulation type, then in double across chunks.
        const int64_t chunks = (n + kChunk - 1) / kChunk;
        std::vector<double> psq(static_cast<size_t>(chunks)), usq(static_cast<size_t>(chunks));
        double* const psq_p = psq.data();
        double* const usq_p = usq.data();
        visit_floating(ts.grads[i].dtype(), [&]<typename G>() {
          const G* const g = ptr<const G>(ts.grads[i]);
          parallel_for(chunks, 1, [=](int64_t cb, int64_t ce) __attribute__((flatten)) {
            // Locals, not the closure's members: the stores could alias those, which keeps the
            // loop scalar (see for_each_element).
            const A gs_ = gscale, wd_ = wd, b1_ = b1, b2_ = b2, b3_ = b3, omb2_ = omb2;
            const BitsOf<A> l2_ = m_l2;
            const Update up = upd;
            P* const pp = p;
            S* const s1 = m1;
            S* const s2 = m2;
            const G* const gg = g;
            for (int64_t c = cb; c < ce; ++c) {
              const int64_t b0 = c * kChunk, e0 = std::min(n, (c + 1) * kChunk);
              A ps = 0, us = 0;
              // omp simd: the sums may be split into vector lanes (a fixed order for a given build).
#pragma omp simd reduction(+ : ps, us)
              for (int64_t j = b0; j < e0; ++j) {
                const random::Philox4 r = draw_if<kSR>(seed, id, static_cast<uint64_t>(taken), j);
                const A pv = load_as<A>(pp[j]);
                A gv = load_as<A>(gg[j]) * gs_;
                gv = pick(l2_, gv + wd_ * pv, gv);
                const A m = store_rounded<kSR>(&s1[j], static_cast<A>(load_as<A>(s1[j]) * b1_) + b3_ * gv, r.v[1]);
                const A v = store_rounded<kSR>(&s2[j], static_cast<A>(load_as<A>(s2[j]) * b2_) + static_cast<A>(omb2_ * gv) * gv,
                                               r.v[2]);
                const A uv = up(pv, m, v);
                ps += pv * pv;
                us += uv * uv;
              }
              psq_p[c] = ps;
              usq_p[c] = us;
            }
          });
        });
        double pn = 0, un = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          pn += psq[static_cast<size_t>(c)];
          un += usq[static_cast<size_t>(c)];
        }
        pn = std::sqrt(pn);
        un = std::sqrt(un);
        // Stage 2: the trust-ratio step along u recomputed, rounded into the model copy.
        const A neg_ratio = static_cast<A>(-(trust && pn != 0 && un != 0 ? h.lr * (pn / un) : h.lr));
        auto apply = [&]<typename M>() {
          M* model = nullptr;
          if constexpr (!std::is_void_v<M>) model = ptr<M>(ts.models[i]);
          parallel_for(n, kGrain, [=](int64_t b, int64_t e) __attribute__((flatten)) {
            const A nr = neg_ratio;
            const Update up = upd;
            P* const pp = p;
            const S* const s1 = m1;
            const S* const s2 = m2;
            M* const mo = model;
            for (int64_t j = b; j < e; ++j) {
              const random::Philox4 r = draw_if<kSR>(seed, id, static_cast<uint64_t>(taken), j);
              const A pv = load_as<A>(pp[j]);
              const A nv = store_rounded<kSR>(&pp[j], pv + nr * up(pv, load_as<A>(s1[j]), load_as<A>(s2[j])), r.v[0]);
              if constexpr (!std::is_void_v<M>) mo[j] = store_as<M>(nv);
            }
          });
        };
        if constexpr (std::is_same_v<P, A>) visit_model(ts.models[i], apply);
        else apply.template operator()<void>();
      });
    }
    count_steps(ts);
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_optim) {
  dispatch::register_types<OpId::sgd_step, Sgd, float, double>(DeviceType::kCPU);
  dispatch::register_types<OpId::adam_step, Adam, float, double>(DeviceType::kCPU);
  dispatch::register_types<OpId::rmsprop_step, Rmsprop, float, double>(DeviceType::kCPU);
  dispatch::register_types<OpId::adagrad_step, Adagrad, float, double>(DeviceType::kCPU);
  dispatch::register_types<OpId::lamb_step, Lamb, float, double>(DeviceType::kCPU);
}

}  // namespace mpx::cpu
