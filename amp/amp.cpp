// amp front end: initialize, scale_loss with per-loss scalers (GradScaler's state machine), overflow skips, state dicts.
#include "amp/amp.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <sstream>
#include <unordered_map>

#include "amp/amp_internal.h"
#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "core/cuda.h"
#include "core/json.h"
#include "ops/amp.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "amp/autocast.h"
#include "amp/cast_cache.h"
#include "nn/modules.h"

namespace mpx::amp {
namespace {
using detail::level_brief;
using detail::num;
using detail::overrides_str;
using detail::check_finite;
using detail::diagnose_overflow;


bool is_rank0() {
  for (const char* k : {"RANK", "LOCAL_RANK"})
    if (const char* v = std::getenv(k); v && std::string(v) != "0") return false;
  return true;
}

// One loss's scaler. Its state machine is GradScaler's, set to apex's LossScaler (growth 2 after
// 2000 clean steps, backoff 0.5, a min_loss_scale floor that clamps); amp adds the overflow
// messages and, on a GPU, the flags that carry them to the host a step late.
struct LossScaler {
  bool dynamic = true;
  double static_scale = 1.0;  // a static scaler's value (the GradScaler is kept at it)
  double min_scale = 0.0, max_scale = 16777216.0;
  int64_t messages = 0;
  std::unique_ptr<GradScaler> scaler;
  // `pending` carries each device-path iteration's overflow flag and new scale to the host without
  // stalling the step that produced them, with the number of optimizer steps that flag skips
  // (one message each, as the host path prints).
  struct Pending {
    std::unique_ptr<cuda::HostReadback> flag_and_scale;
    int steps = 1;
  };
  std::deque<Pending> pending;

  void make_scaler(double scale, int64_t unskipped = 0) {
    if (!dynamic) static_scale = scale;
    scaler = std::make_unique<GradScaler>(GradScalerOptions()
                                              .init_scale(scale)
                                              .growth_factor(2.0)
                                              .backoff_factor(0.5)
                                              .growth_interval(2000)
                                              .min_scale(dynamic ? min_scale : 0.0)
                                              .clamp_at_min_scale(true)
                                              .max_scale(std::max(scale, max_scale)));
    if (unskipped > 0) {
      auto sd = scaler->state_dict();
      sd["_growth_tracker"] = static_cast<double>(unskipped);
      scaler->load_state_dict(sd);
    }
    pending.clear();
  }
  // Reading a dynamic scale synchronizes with the device that holds it.
  double scale() const { return dynamic ? scaler->get_scale() : static_scale; }
  int64_t unskipped() const { return static_cast<int64_t>(scaler->state_dict().at("_growth_tracker")); }
};

// What amp keeps per optimizer; hooks hold it by shared_ptr so a reset() leaves them inert.
struct OptState {
  bool active = true;
  bool skip_next = false;
  // Device path: the overflow flag(s) of this iteration's losses, read by the step's kernels,
  // and the count of steps skipped that way (read on demand).
  Tensor skip_flag;
  Tensor skipped_on_device;
  bool params_have_scaled_grads = false;
  int skip_loss_id = 0;
  double skip_scale = 0;
  std::string diagnosis;
  int64_t skipped = 0;
  std::unordered_map<const TensorImpl*, Tensor> stash;
};

struct State {
  bool initialized = false;
  Properties props;
  DType low = kFloat16;
  int verbosity = 1;
  bool diagnose = false;
  std::vector<LossScaler> scalers;
  std::vector<std::shared_ptr<nn::Module>> models;
  std::unordered_map<const optim::Optimizer*, std::shared_ptr<OptState>> optimizers;
  std::string last_diagnosis;
  std::function<void(const std::string&)> sink;
};

State& state() {
  static State s;
  return s;
}

void say(const std::string& msg) {
  State& g = state();
  if (g.sink) {
    g.sink(msg);
  } else if (is_rank0()) {
    std::cout << msg << std::endl;
  }
}

void clear_cache() { clear_cast_cache(); }

// apex's overflow message, rate-limited: the first 10 skips of a scaler, then the 16th, 32nd, ...
void overflow_message(LossScaler& ls, int loss_id, double new_scale) {
  State& g = state();
  if (g.verbosity < 1) return;
  const int64_t n = ++ls.messages;
  if (n <= 10 || (n & (n - 1)) == 0) {
    if (ls.dynamic)
      say("Gradient overflow.  Skipping step, loss scaler " + std::to_string(loss_id) + " reducing loss scale to " +
          num(new_scale));
    else  // apex would step with the non-finite gradient; mpx never lets one reach the weights
      say("Gradient overflow.  Skipping step, loss scaler " + std::to_string(loss_id) + " keeps its static loss scale " +
          num(new_scale) + "; if this repeats, lower the loss scale or make it dynamic");
  }
  if (n == 11) say("amp: further overflow messages are rate-limited (printed at the 16th, 32nd, 64th, ... skip)");
}

// The device path's messages, one step late: flags whose copy to the host has landed (all of
// them with `wait`, when amp is reset or its scale state replaced).
void report_lagging_overflows(LossScaler& ls, int loss_id, bool wait = false) {
  while (!ls.pending.empty() && (wait || ls.pending.front().flag_and_scale->ready())) {
    const LossScaler::Pending& p = ls.pending.front();
    if (p.flag_and_scale->value(0) != 0.0)
      for (int i = 0; i < p.steps; ++i) overflow_message(ls, loss_id, p.flag_and_scale->value(1));
    ls.pending.pop_front();
  }
}

// End of an O1 model forward: like the outermost AutocastGuard, drop the cached casts, unless
// the caller's own guard is still live (then its exit clears them).
void forward_region_exit() {
  if (autocast_nesting() == 0) clear_cast_cache();
}


}  // namespace

void reset() {
  State& g = state();
  for (size_t i = 0; i < g.scalers.size(); ++i) report_lagging_overflows(g.scalers[i], static_cast<int>(i), true);
  for (auto& [opt, st] : g.optimizers) st->active = false;
  for (auto& m : g.models) m->set_forward_cast({});
  auto sink = std::move(g.sink);
  g = State();
  g.sink = std::move(sink);
}

bool is_initialized() { return state().initialized; }
const Properties& properties() { return state().props; }
void set_message_sink(std::function<void(const std::string&)> sink) { state().sink = std::move(sink); }

void initialize(const std::vector<ModelRef>& models, const std::vector<OptimizerRef>& optimizers,
                const Options& options) {
  State& g = state();
  g.verbosity = options.verbosity_;
  if (!options.enabled_) {
    g.props = Properties();
    g.props.enabled = false;
    g.initialized = true;
    return;
  }
  const Properties defaults = opt_level_defaults(options.opt_level_, options.dtype_);
  const Properties p = options.resolve();
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const optim::Optimizer* o = &optimizers[i].get();
    MPX_CHECK(!g.optimizers.count(o), "amp::initialize: optimizer ", i, " (", o->name(),
              ") was already initialized by amp; a given optimizer should only be passed through amp::initialize "
              "once (call amp::reset() first to start over)");
    for (size_t j = 0; j < i; ++j)
      MPX_CHECK(&optimizers[j].get() != o, "amp::initialize: optimizers ", j, " and ", i, " are the same ", o->name(),
                "; pass each optimizer once");
  }
  for (size_t i = 0; i < models.size(); ++i) {
    MPX_CHECK(models[i].module != nullptr, "amp::initialize: model ", i, " is an empty holder");
    if (options.keep_model_dtypes_) continue;
    for (const auto& [name, t] : models[i].module->named_parameters())
      MPX_CHECK(!is_reduced_float(t.dtype()), "amp::initialize: parameter \"", name, "\" of model ", i, " is ",
                ops::describe(t), "; pass the model in f32: amp::initialize casts it itself at every opt level "
                "(do not call to(kFloat16) before), or set keep_model_dtypes() to train it in the dtypes it has");
  }
  if (g.verbosity >= 1 && is_rank0()) {
    std::ostringstream os;
    os << "Selected optimization level " << p.opt_level << ":  " << level_brief(p.opt_level) << "\n\n"
       << "Defaults for this optimization level are:\n"
       << defaults.str() << "Processing user overrides (additional kwargs that are not None)...\n"
       << overrides_str(options)
       << "After processing overrides, optimization options are:\n"
       << p.str();
    if (options.dtype_ != kFloat16) os << "low precision dtype    : " << dtype_name(options.dtype_) << "\n";
    say(os.str());
  }

  g.props = p;
  g.low = options.dtype_;
  g.diagnose = options.diagnose_;
  if (const char* v = std::getenv("MPX_AMP_DIAGNOSE"); v && std::string(v) == "1") g.diagnose = true;

  // Pre-cast f32 weights: the O2 masters start from these, not from their rounded copies.
  std::unordered_map<const TensorImpl*, Tensor> precast;
  {
    NoGradGuard ng;
    for (const auto& m : models)
      for (const auto& t : m.module->parameters()) precast.emplace(t.impl(), t.detach().clone());
  }
  for (const auto& m : models) {
    nn::Module& net = *m.module;
    if (p.cast_model_type) {
      const DType t = *p.cast_model_type;
      // apex's convert_network: batch norms stay f32 (bit-exact: restored from their own state),
      // and so do the row norms (LayerNorm, RMSNorm), whose statistics run in f32 anyway.
      std::vector<std::pair<std::shared_ptr<nn::Module>, nn::StateDict>> keep;
      if (p.keep_batchnorm_fp32.value_or(false) && t != kFloat32)
        for (const auto& sub : net.modules())
          if (sub->is_batchnorm() || sub->as<nn::LayerNormImpl>() || sub->as<nn::RMSNormImpl>()) {
            nn::StateDict sd;
            for (const auto& [k, v] : sub->state_dict()) sd.insert(k, v.clone());
            keep.emplace_back(sub, std::move(sd));
          }
      net.to(t);
      for (auto& [bn, sd] : keep) {
        bn->to(kFloat32);
        bn->load_state_dict(sd);
      }
    }
    nn::ForwardCast fc;
    if (p.cast_model_type) {
      fc.inputs = *p.cast_model_type;
      fc.outputs = options.cast_model_outputs_.value_or(kFloat32);
    } else if (options.cast_model_outputs_) {
      fc.outputs = *options.cast_model_outputs_;
    }
    if (p.patch_functions) {
      fc.autocast = options.dtype_;
      fc.autocast_cast = &cached_cast;
      fc.autocast_exit = &forward_region_exit;
    }
    net.set_forward_cast(fc);
    g.models.push_back(m.module);
  }
  for (const auto& ref : optimizers) {
    optim::Optimizer& opt = ref.get();
    // Rounding off before masters come back; masters gone before it goes on (each refuses the other).
    if (!p.stochastic_rounding) opt.set_stochastic_rounding(false);
    opt.set_master_weights(p.master_weights.value_or(true));  // creates or drops masters to match
    if (p.stochastic_rounding)
      opt.set_stochastic_rounding(true, optim::StochasticRoundingOptions().low_precision_state(p.low_precision_state));
    if (p.master_weights.value_or(false))
      for (const auto& prm : opt.parameters())
        if (is_reduced_float(prm.dtype())) {
          auto it = precast.find(prm.impl());
          if (it != precast.end()) opt.set_master(prm, it->second);
        }
    auto st = std::make_shared<OptState>();
    g.optimizers[&opt] = st;
    opt.add_step_pre_hook([st](optim::Optimizer& o) {
      if (st->active && st->skip_flag.defined()) {
        // Decided where the flag lives: the step's kernels skip themselves, nothing waits.
        o.set_amp_step_inputs(st->skip_flag);
        NoGradGuard ng;
        if (!st->skipped_on_device.defined()) st->skipped_on_device = zeros({}, TensorOptions().device(st->skip_flag.device()));
        st->skipped_on_device.add_(st->skip_flag.to(st->skipped_on_device.device()).clamp(0.0, 1.0));
        st->skip_flag = Tensor();
        return true;
      }
      if (!st->active || !st->skip_next) return true;
      st->skip_next = false;
      ++st->skipped;
      State& gs = state();
      if (st->skip_loss_id < static_cast<int>(gs.scalers.size()))
        overflow_message(gs.scalers[st->skip_loss_id], st->skip_loss_id, st->skip_scale);
      if (!st->diagnosis.empty()) say(st->diagnosis);
      return false;
    });
  }
  g.scalers.clear();
  for (int i = 0; i < options.num_losses_; ++i) {
    LossScaler s;
    s.dynamic = p.dynamic_loss_scale;
    s.min_scale = options.min_loss_scale_;
    s.max_scale = options.max_loss_scale_;
    s.make_scaler(s.dynamic ? std::min(s.max_scale, 65536.0) : p.loss_scale);
    g.scalers.push_back(std::move(s));
  }
  g.initialized = true;
}

Tensor ScaledLoss::scaled() const {
  State& g = state();
  if (!g.props.enabled) return loss_;
  return g.scalers.at(options_.loss_id_).scaler->scale(loss_.to(kFloat32));
}

ScaledLoss scale_loss(const Tensor& loss, const std::vector<OptimizerRef>& optimizers, const ScaleLossOptions& options) {
  State& g = state();
  MPX_CHECK(g.initialized, "amp::scale_loss: amp::initialize was not called; call it once before the training loop "
                           "(Options().enabled(false) turns amp off)");
  MPX_CHECK(loss.defined() && loss.is_floating_point(), "amp::scale_loss: expected a floating loss, got ",
            ops::describe(loss));
  ScaledLoss r;
  r.loss_ = loss;
  r.options_ = options;
  if (!g.props.enabled) return r;
  MPX_CHECK(options.loss_id_ >= 0 && options.loss_id_ < static_cast<int>(g.scalers.size()), "amp::scale_loss: loss_id ",
            options.loss_id_, " is out of range: amp::initialize was called with num_losses(", g.scalers.size(),
            "); pass num_losses(", options.loss_id_ + 1, ") or more to initialize");
  for (const auto& o : optimizers) {
    MPX_CHECK(g.optimizers.count(&o.get()), "amp::scale_loss: this ", o.get().name(),
              " optimizer was not passed to amp::initialize; pass every optimizer you step to initialize");
    r.optimizers_.push_back(&o.get());
  }
  return r;
}

namespace {

// How one scale_loss backward treats overflow, from the opt level and the loss's scaler.
struct BackwardPlan {
  // apex: unit static scaling without masters is a plain backward (nothing to unscale). mpx still
  // reads the gradients once for inf/NaN, so that none reaches the weights...
  bool unit_static = false;
  // ...except in pure f32 (O0): that is the baseline, whose non-finite gradients are the model's
  // own divergence for the caller to see (mpx train stops such a run), as in apex. So an overflow
  // skips the step always with a dynamic scale, and with a static one below O0.
  bool may_skip = true;
  // On a GPU the overflow flag is not read: the scale update is a kernel (dynamic scaling), the
  // optimizers' step kernels read the flag, and the overflow message comes a step late. A floor
  // (min_loss_scale) or diagnosis needs the flag on the host: those read it.
  bool device_path = false;
};

BackwardPlan plan_backward(const State& g, const LossScaler& ls, bool on_cuda) {
  BackwardPlan p;
  const bool pure_f32 = g.props.cast_model_type == kFloat32 && !g.props.patch_functions;
  p.may_skip = ls.dynamic || !pure_f32;
  p.unit_static = !g.props.master_weights.value_or(false) && !ls.dynamic && ls.static_scale == 1.0;
  p.device_path = on_cuda && (!ls.dynamic || ls.min_scale <= 0) && !g.diagnose;
  return p;
}

// Gradients already unscaled by an earlier loss of this iteration are set aside, so that only
// the new loss's are unscaled; restore_set_aside adds them back.
void set_aside_unscaled(optim::Optimizer& opt, OptState& st) {
  if (st.params_have_scaled_grads) return;
  st.stash.clear();
  for (const auto& p : opt.parameters()) {
    const Tensor& target = opt.master(p);
    if (target.grad().defined()) st.stash.emplace(p.impl(), target.grad());
    target.mutable_grad() = Tensor();
    p.mutable_grad() = Tensor();
  }
}

void restore_set_aside(optim::Optimizer& opt, OptState& st) {
  NoGradGuard ng;
  for (const auto& p : opt.parameters()) {
    auto it = st.stash.find(p.impl());
    if (it == st.stash.end()) continue;
    const Tensor& target = opt.master(p);
    if (target.grad().defined()) target.mutable_grad().add_(it->second);
    else target.set_grad(it->second);
  }
  st.stash.clear();
  st.params_have_scaled_grads = false;
}

// Unscales the optimizer's gradients (or, at a unit static scale, only checks them) and returns
// the inf/NaN flag where they live; undefined when the optimizer has no gradient.
Tensor unscale_and_check(LossScaler& ls, optim::Optimizer& opt, bool unit_static) {
  if (unit_static) return check_finite(opt);
  ls.scaler->unscale_(opt);
  for (const auto& p : opt.parameters())
    if (p.grad().defined()) return ls.scaler->found_inf(opt);
  return Tensor();
}

// The GPU ending: the scale update and the skip stay on the device; the flag and the new scale
// travel to the host for the message, read a step later.
void finish_on_device(LossScaler& ls, int loss_id, const BackwardPlan& plan, Tensor found,
                      const std::vector<std::shared_ptr<OptState>>& sts, Device device) {
  report_lagging_overflows(ls, loss_id);
  NoGradGuard ng;
  if (!found.defined()) found = zeros({}, TensorOptions().device(device));
  if (ls.dynamic) {
    if (!sts.empty()) ls.scaler->update();  // the kernel: backoff on overflow, growth after 2000 clean steps
  } else if (!plan.unit_static) {
    ls.scaler->update(ls.static_scale);  // the scaler only starts its next iteration
  }
  if (plan.may_skip)
    for (auto& st : sts) st->skip_flag = st->skip_flag.defined() ? st->skip_flag + found : found;
  const Tensor scale_now = plan.unit_static ? full({}, ls.static_scale, TensorOptions(kFloat32).device(found.device()))
                                            : ls.scaler->scale_tensor();
  ls.pending.push_back({std::make_unique<cuda::HostReadback>(tensor_list{found, scale_now}),
                        static_cast<int>(sts.size())});
}

// The host ending: apex's LossScaler.update_scale (the scaler's state machine; a static scale
// skips too but keeps its value), then the skip, message and diagnosis for the next step().
void finish_on_host(LossScaler& ls, int loss_id, const BackwardPlan& plan, bool overflow, const Tensor& loss,
                    const std::vector<optim::Optimizer*>& optimizers, const std::vector<std::shared_ptr<OptState>>& sts) {
  State& g = state();
  const double scale_at_overflow = overflow && g.diagnose ? ls.scale() : 0.0;
  if (ls.dynamic) {
    if (!optimizers.empty()) ls.scaler->update();
  } else if (!plan.unit_static) {
    ls.scaler->update(ls.static_scale);
  }
  if (!overflow) return;
  const double new_scale = ls.scale();
  std::string diag;
  if (g.diagnose) {
    diag = diagnose_overflow(loss_id, scale_at_overflow, new_scale, ls.dynamic, loss, optimizers, g.models);
    g.last_diagnosis = diag;
  }
  for (auto& st : sts) {
    st->skip_next = true;
    st->skip_loss_id = loss_id;
    st->skip_scale = new_scale;
    st->diagnosis = diag;
  }
}

}  // namespace

void ScaledLoss::backward(bool retain_graph) {
  State& g = state();
  MPX_CHECK(!done_, "amp: backward() was already called on this scale_loss result; call amp::scale_loss again");
  done_ = true;
  if (!g.props.enabled) {
    loss_.backward({}, retain_graph);
    return;
  }
  LossScaler& ls = g.scalers[options_.loss_id_];
  std::vector<std::shared_ptr<OptState>> sts;
  for (auto* o : optimizers_) sts.push_back(g.optimizers.at(o));
  const BackwardPlan plan = plan_backward(g, ls, loss_.is_cuda());
  const bool delay = options_.delay_unscale_;
  if (plan.unit_static && !plan.may_skip) {
    loss_.to(kFloat32).backward({}, retain_graph);
    clear_cache();
    return;
  }
  // 1. The scaled backward (gradients of earlier losses set aside first).
  if (!plan.unit_static && !delay)
    for (size_t k = 0; k < optimizers_.size(); ++k) set_aside_unscaled(*optimizers_[k], *sts[k]);
  const Tensor loss32 = loss_.dtype() == kFloat32 ? loss_ : loss_.to(kFloat32);
  (plan.unit_static ? loss32 : ls.scaler->scale(loss32)).backward({}, retain_graph);
  if (delay) {
    if (!plan.unit_static)
      for (auto& st : sts) st->params_have_scaled_grads = true;
    clear_cache();
    return;
  }
  // 2. Unscale and check each optimizer's gradients, then add back what was set aside.
  bool overflow = false;
  Tensor found_any;
  for (size_t k = 0; k < optimizers_.size(); ++k) {
    const Tensor f = unscale_and_check(ls, *optimizers_[k], plan.unit_static);
    if (f.defined() && plan.may_skip) {
      if (plan.device_path) {
        NoGradGuard ng;
        found_any = found_any.defined() ? found_any + f : f;
      } else {
        overflow |= f.item_double() != 0.0;
      }
    }
    restore_set_aside(*optimizers_[k], *sts[k]);
  }
  // 3. The scale update and the skip decision, where the flag is.
  if (plan.device_path) finish_on_device(ls, options_.loss_id_, plan, found_any, sts, loss_.device());
  else finish_on_host(ls, options_.loss_id_, plan, overflow, loss_, optimizers_, sts);
  clear_cache();
}

std::vector<Tensor> master_params(optim::Optimizer& optimizer) {
  if (!state().props.enabled) return optimizer.parameters();
  return optimizer.master_params();
}

std::map<std::string, double> state_dict() {
  std::map<std::string, double> r;
  const auto& sc = state().scalers;
  for (size_t i = 0; i < sc.size(); ++i) {
    const std::string k = "loss_scaler" + std::to_string(i);
    r[k + ".loss_scale"] = sc[i].scale();
    r[k + ".unskipped"] = static_cast<double>(sc[i].unskipped());
  }
  return r;
}

void load_state_dict(const std::map<std::string, double>& st) {
  State& g = state();
  MPX_CHECK(g.initialized, "amp::load_state_dict: call amp::initialize first (with the same num_losses as the saved run)");
  size_t n = 0;
  while (st.count("loss_scaler" + std::to_string(n) + ".loss_scale")) ++n;
  // A GradScaler's state ("scale", "_growth_tracker", ...) is the likeliest thing passed here by mistake.
  MPX_CHECK(n > 0 || st.empty() || !st.count("scale"), "amp::load_state_dict: this is a GradScaler's state (\"scale\", "
            "\"_growth_tracker\"); load it with GradScaler::load_state_dict. amp's own state has keys "
            "\"loss_scaler<i>.loss_scale\" and \"loss_scaler<i>.unskipped\" (amp::state_dict)");
  MPX_CHECK(n > 0 || st.empty(), "amp::load_state_dict: no \"loss_scaler0.loss_scale\" key among the state's ", st.size(),
            " (first: \"", st.begin()->first, "\"); pass what amp::state_dict returned");
  MPX_CHECK(n == g.scalers.size(), "amp::load_state_dict: the state has ", n, " loss scaler(s) but amp was initialized "
            "with num_losses(", g.scalers.size(), "); initialize with the num_losses of the saved run");
  for (size_t i = 0; i < n; ++i) {
    const std::string k = "loss_scaler" + std::to_string(i);
    auto it = st.find(k + ".unskipped");
    MPX_CHECK(it != st.end(), "amp::load_state_dict: missing key \"", k, ".unskipped\"");
    const double s = st.at(k + ".loss_scale");
    MPX_CHECK(std::isfinite(s) && s > 0, "amp::load_state_dict: ", k, ".loss_scale must be positive, got ", s);
    MPX_CHECK(!g.scalers[i].dynamic || s <= g.scalers[i].max_scale, "amp::load_state_dict: ", k, ".loss_scale ",
              json::number(s), " is above max_loss_scale (", json::number(g.scalers[i].max_scale),
              "); raise amp::Options::max_loss_scale to resume with it");
    const double u = it->second;
    MPX_CHECK(std::isfinite(u) && u >= 0 && u <= 9007199254740992.0 && u == std::floor(u), "amp::load_state_dict: ", k,
              ".unskipped must be a non-negative integer, got ", u);
    report_lagging_overflows(g.scalers[i], static_cast<int>(i), true);
    g.scalers[i].make_scaler(s, static_cast<int64_t>(u));
  }
}

double loss_scale(int loss_id) {
  auto& sc = state().scalers;
  MPX_CHECK(loss_id >= 0 && loss_id < static_cast<int>(sc.size()), "amp::loss_scale: no loss scaler ", loss_id,
            " (num_losses is ", sc.size(), ")");
  return sc[loss_id].scale();
}

int64_t skipped_steps(const optim::Optimizer& optimizer) {
  auto it = state().optimizers.find(&optimizer);
  if (it == state().optimizers.end()) return 0;
  const OptState& st = *it->second;
  return st.skipped + (st.skipped_on_device.defined() ? static_cast<int64_t>(st.skipped_on_device.item_double()) : 0);
}

std::string last_diagnosis() { return state().last_diagnosis; }

}  // namespace mpx::amp
