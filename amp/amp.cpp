// amp front end: initialize, scale_loss with per-loss scalers, overflow skips and diagnosis, state dicts.
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
#include "ops/amp.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "amp/autocast.h"
#include "amp/cast_cache.h"

namespace mpx::amp {
namespace {
using detail::level_brief;
using detail::num;
using detail::overrides_str;


bool is_rank0() {
  for (const char* k : {"RANK", "LOCAL_RANK"})
    if (const char* v = std::getenv(k); v && std::string(v) != "0") return false;
  return true;
}

// apex's LossScaler: the scale and clean-step count, plus the GradScaler that does the fused unscale.
struct LossScaler {
  bool dynamic = true;
  double scale = 65536.0;
  int64_t unskipped = 0;
  double min_scale = 0.0, max_scale = 16777216.0;
  int64_t messages = 0;
  std::unique_ptr<GradScaler> scaler;
  // On a GPU the scale lives in `scaler` (updated by a kernel) and `scale`/`unskipped` are host
  // mirrors refreshed on demand; `pending` carries the last overflow flag and new scale to the
  // host without stalling the step that produced them, with the number of optimizer steps that
  // flag skips (one message each, as the host path prints).
  bool on_device = false;
  struct Pending {
    std::unique_ptr<cuda::HostReadback> flag_and_scale;
    int steps = 1;
  };
  std::deque<Pending> pending;

  // apex's LossScaler.update_scale is torch.amp's state machine with growth 2, backoff 0.5 and a
  // 2000-step interval, so the device path runs GradScaler's update kernel with these options.
  void make_scaler() {
    scaler = std::make_unique<GradScaler>(GradScalerOptions()
                                              .init_scale(scale)
                                              .growth_factor(2.0)
                                              .backoff_factor(0.5)
                                              .growth_interval(2000)
                                              .max_scale(std::max(scale, max_scale)));
    on_device = false;
    pending.clear();
  }
  // Brings the host mirrors up to date (reads the device).
  void sync_mirror() {
    if (!on_device) return;
    const auto sd = scaler->state_dict();
    scale = sd.at("scale");
    unskipped = static_cast<int64_t>(sd.at("_growth_tracker"));
  }
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

bool finite_all(const Tensor& t) {
  NoGradGuard ng;
  // inf * 0 and NaN * 0 are NaN: one reduction tells whether anything is non-finite.
  return std::isfinite(sum(t.detach().to(kFloat32) * 0.0).item_double());
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
      // apex's convert_network: batch norms stay f32 (bit-exact: restored from their own state).
      std::vector<std::pair<std::shared_ptr<nn::Module>, nn::StateDict>> keep;
      if (p.keep_batchnorm_fp32.value_or(false) && t != kFloat32)
        for (const auto& sub : net.modules())
          if (sub->is_batchnorm()) {
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
    opt.set_master_weights(p.master_weights.value_or(true));  // creates or drops masters to match
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
    s.scale = s.dynamic ? std::min(s.max_scale, 65536.0) : p.loss_scale;
    s.make_scaler();
    g.scalers.push_back(std::move(s));
  }
  g.initialized = true;
}

Tensor ScaledLoss::scaled() const {
  State& g = state();
  if (!g.props.enabled) return loss_;
  LossScaler& ls = g.scalers.at(options_.loss_id_);
  if (ls.on_device) return ls.scaler->scale(loss_.to(kFloat32));
  return loss_.to(kFloat32) * ls.scale;
}

ScaledLoss scale_loss(const Tensor& loss, const std::vector<OptimizerRef>& optimizers, const ScaleLossOptions& options) {
  State& g = state();
  MPX_CHECK(g.initialized, "amp::scale_loss: amp::initialize was not called; call it once before the training loop "
                           "(Options().enabled(false) turns amp off)");
  MPX_CHECK(loss.defined() && loss.is_floating_point(), "amp::scale_loss: expected a floating loss, got ",
            loss.defined() ? ops::describe(loss) : std::string("an undefined tensor"));
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

// The inf/NaN flag of an optimizer's gradients without unscaling them (a static unit scale has
// nothing to unscale): one fused read pass per device, the flag left where the gradients are.
Tensor check_finite(const optim::Optimizer& opt) {
  NoGradGuard ng;
  std::vector<std::pair<Device, tensor_list>> by_device;
  for (const auto& p : opt.parameters()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& d) { return d.first == g.device(); });
    if (it == by_device.end()) by_device.push_back({g.device(), {g}});
    else it->second.push_back(g);
  }
  if (by_device.empty()) return Tensor();
  Tensor found;
  for (auto& [dev, grads] : by_device) {
    Tensor f = zeros({}, TensorOptions(kFloat32).device(dev));
    unscale_check_inf_(grads, {}, ones({}, TensorOptions(kFloat32).device(dev)), f);
    found = found.defined() ? found + f.to(found.device()) : f;
  }
  return found;
}

// Where the first non-finite value of an overflowed iteration is: the loss itself, or the first
// parameter (in model order, then optimizer order) whose gradient is non-finite.
std::string diagnose_overflow(int loss_id, double scale_at_overflow, double new_scale, bool dynamic,
                              const Tensor& loss, const std::vector<optim::Optimizer*>& optimizers) {
  State& g = state();
  std::ostringstream os;
  os << "amp diagnose: loss scaler " << loss_id << " overflowed at " << (dynamic ? "" : "its static ") << "loss scale "
     << num(scale_at_overflow) << ": ";
  if (!finite_all(loss)) {
    os << "the loss itself is non-finite (" << loss.detach().to(kFloat32).item_double()
       << "); the forward pass produced inf/NaN, which no loss scale can fix";
    return os.str();
  }
  auto grad_of = [](optim::Optimizer& o, const Tensor& p) {
    const Tensor& target = o.master(p);
    return target.grad().defined() ? target.grad() : p.grad();
  };
  std::string where;
  for (size_t mi = 0; mi < g.models.size() && where.empty(); ++mi)
    for (const auto& [name, p] : g.models[mi]->named_parameters()) {
      optim::Optimizer* owner = nullptr;
      for (auto* o : optimizers)
        for (const auto& q : o->parameters())
          if (q.impl() == p.impl()) owner = o;
      if (!owner) continue;
      const Tensor gr = grad_of(*owner, p);
      if (gr.defined() && !finite_all(gr)) {
        where = "the first non-finite gradient is that of parameter \"" + name + "\" (" + ops::describe(p) +
                (g.models.size() > 1 ? ", model " + std::to_string(mi) : "") + ")";
        break;
      }
    }
  for (size_t k = 0; k < optimizers.size() && where.empty(); ++k) {
    const auto ps = optimizers[k]->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      const Tensor gr = grad_of(*optimizers[k], ps[i]);
      if (gr.defined() && !finite_all(gr)) {
        where = "the first non-finite gradient is that of parameter " + std::to_string(i) + " of optimizer " +
                std::to_string(k) + " (" + ops::describe(ps[i]) + ")";
        break;
      }
    }
  }
  os << (where.empty() ? std::string("no non-finite gradient found after the fact") : where);
  if (dynamic) os << "; the step is skipped and the scale reduced to " << num(new_scale);
  else os << "; the step is skipped and the static scale kept (lower it, or use a dynamic scale)";
  return os.str();
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
  const bool delay = options_.delay_unscale_;
  // apex: unit static scaling without masters is a plain backward (nothing to unscale). mpx
  // still reads the gradients once for inf/NaN, so that none reaches the weights, except in pure
  // f32 (O0): that is the baseline, whose non-finite gradients are the model's own divergence
  // for the caller to see (mpx train stops such a run), as in apex.
  const bool pure_f32 = g.props.cast_model_type == kFloat32 && !g.props.patch_functions;
  // Whether an overflow skips the step: always with a dynamic scale, with a static one below O0.
  const bool may_skip = ls.dynamic || !pure_f32;
  const bool unit_static = !g.props.master_weights.value_or(false) && !ls.dynamic && ls.scale == 1.0;
  if (unit_static && !may_skip) {
    loss_.to(kFloat32).backward({}, retain_graph);
    clear_cache();
    return;
  }
  Tensor scaled;
  if (unit_static) {
    scaled = loss_.to(kFloat32);
    scaled.backward({}, retain_graph);
  } else {
    if (!delay) {
      // Gradients already unscaled by an earlier loss are set aside, so only the new ones are unscaled.
      for (size_t k = 0; k < optimizers_.size(); ++k) {
        if (sts[k]->params_have_scaled_grads) continue;
        sts[k]->stash.clear();
        for (const auto& p : optimizers_[k]->parameters()) {
          const Tensor& target = optimizers_[k]->master(p);
          if (target.grad().defined()) sts[k]->stash.emplace(p.impl(), target.grad());
          target.mutable_grad() = Tensor();
          p.mutable_grad() = Tensor();
        }
      }
    }
    scaled = ls.scaler->scale(loss_.dtype() == kFloat32 ? loss_ : loss_.to(kFloat32));
    scaled.backward({}, retain_graph);
  }
  if (delay) {
    if (!unit_static)
      for (auto& st : sts) st->params_have_scaled_grads = true;
    clear_cache();
    return;
  }
  // On a GPU the overflow flag is not read: the scale update is a kernel (dynamic scaling), the
  // optimizers' step kernels read the flag, and the overflow message comes a step late. A floor
  // (min_loss_scale) or diagnosis needs the flag on the host: those read it.
  const bool device_path = scaled.is_cuda() && (!ls.dynamic || ls.min_scale <= 0) && !g.diagnose;
  bool overflow = false;
  Tensor found_any;
  for (size_t k = 0; k < optimizers_.size(); ++k) {
    optim::Optimizer& opt = *optimizers_[k];
    Tensor f;
    if (unit_static) {
      f = check_finite(opt);
    } else {
      ls.scaler->unscale_(opt);
      bool any_grad = false;
      for (const auto& p : opt.parameters()) any_grad |= p.grad().defined();
      if (any_grad) f = ls.scaler->found_inf(opt);
    }
    if (f.defined() && may_skip) {
      if (device_path) {
        NoGradGuard ng;
        found_any = found_any.defined() ? found_any + f : f;
      } else {
        overflow |= f.item_double() != 0.0;
      }
    }
    NoGradGuard ng;
    for (const auto& p : opt.parameters()) {
      auto it = sts[k]->stash.find(p.impl());
      if (it == sts[k]->stash.end()) continue;
      const Tensor& target = opt.master(p);
      if (target.grad().defined()) target.mutable_grad().add_(it->second);
      else target.set_grad(it->second);
    }
    sts[k]->stash.clear();
    sts[k]->params_have_scaled_grads = false;
  }
  if (device_path) {
    report_lagging_overflows(ls, options_.loss_id_);
    NoGradGuard ng;
    if (!found_any.defined()) found_any = zeros({}, TensorOptions().device(scaled.device()));
    if (ls.dynamic) ls.scaler->update();  // the kernel: backoff on overflow, growth after 2000 clean steps
    else if (!unit_static) ls.scaler->update(ls.scale);  // a static scale stays; the scaler only starts its next iteration
    ls.on_device = ls.dynamic;
    if (may_skip)
      for (auto& st : sts) st->skip_flag = st->skip_flag.defined() ? st->skip_flag + found_any : found_any;
    const Tensor scale_now = unit_static ? full({}, ls.scale, TensorOptions(kFloat32).device(found_any.device()))
                                         : ls.scaler->scale_tensor();
    ls.pending.push_back({std::make_unique<cuda::HostReadback>(tensor_list{found_any, scale_now}),
                          static_cast<int>(optimizers_.size())});
    clear_cache();
    return;
  }
  const double scale_at_overflow = ls.scale;
  // apex's LossScaler.update_scale; a static scale skips too but keeps its value.
  if (overflow && ls.dynamic) {
    ls.scale = ls.min_scale > 0 ? std::max(ls.min_scale, ls.scale / 2.0) : ls.scale / 2.0;
    ls.unskipped = 0;
  } else if (!overflow) {
    ++ls.unskipped;
  }
  if (ls.unskipped == 2000 && ls.dynamic) {
    ls.scale = std::min(ls.max_scale, ls.scale * 2.0);
    ls.unskipped = 0;
  }
  if (!unit_static) ls.scaler->update(ls.scale);
  if (overflow) {
    std::string diag;
    if (g.diagnose) {
      diag = diagnose_overflow(options_.loss_id_, scale_at_overflow, ls.scale, ls.dynamic, loss_, optimizers_);
      g.last_diagnosis = diag;
    }
    for (auto& st : sts) {
      st->skip_next = true;
      st->skip_loss_id = options_.loss_id_;
      st->skip_scale = ls.scale;
      st->diagnosis = diag;
    }
  }
  clear_cache();
}

std::vector<Tensor> master_params(optim::Optimizer& optimizer) {
  if (!state().props.enabled) return optimizer.parameters();
  return optimizer.master_params();
}

std::map<std::string, double> state_dict() {
  std::map<std::string, double> r;
  auto& sc = state().scalers;
  for (auto& ls : sc) ls.sync_mirror();
  for (size_t i = 0; i < sc.size(); ++i) {
    const std::string k = "loss_scaler" + std::to_string(i);
    r[k + ".loss_scale"] = sc[i].scale;
    r[k + ".unskipped"] = static_cast<double>(sc[i].unskipped);
  }
  return r;
}

void load_state_dict(const std::map<std::string, double>& st) {
  State& g = state();
  MPX_CHECK(g.initialized, "amp::load_state_dict: call amp::initialize first (with the same num_losses as the saved run)");
  size_t n = 0;
  while (st.count("loss_scaler" + std::to_string(n) + ".loss_scale")) ++n;
  MPX_CHECK(n == g.scalers.size(), "amp::load_state_dict: the state has ", n, " loss scaler(s) but amp was initialized "
            "with num_losses(", g.scalers.size(), "); initialize with the num_losses of the saved run");
  for (size_t i = 0; i < n; ++i) {
    const std::string k = "loss_scaler" + std::to_string(i);
    auto it = st.find(k + ".unskipped");
    MPX_CHECK(it != st.end(), "amp::load_state_dict: missing key \"", k, ".unskipped\"");
    const double s = st.at(k + ".loss_scale");
    MPX_CHECK(std::isfinite(s) && s > 0, "amp::load_state_dict: ", k, ".loss_scale must be positive, got ", s);
    const double u = it->second;
    MPX_CHECK(std::isfinite(u) && u >= 0 && u <= 9007199254740992.0 && u == std::floor(u), "amp::load_state_dict: ", k,
              ".unskipped must be a non-negative integer, got ", u);
    g.scalers[i].scale = s;
    g.scalers[i].unskipped = static_cast<int64_t>(u);
    report_lagging_overflows(g.scalers[i], static_cast<int>(i), true);
    g.scalers[i].make_scaler();
  }
}

double loss_scale(int loss_id) {
  auto& sc = state().scalers;
  MPX_CHECK(loss_id >= 0 && loss_id < static_cast<int>(sc.size()), "amp::loss_scale: no loss scaler ", loss_id,
            " (num_losses is ", sc.size(), ")");
  sc[loss_id].sync_mirror();
  return sc[loss_id].scale;
}

int64_t skipped_steps(const optim::Optimizer& optimizer) {
  auto it = state().optimizers.find(&optimizer);
  if (it == state().optimizers.end()) return 0;
  const OptState& st = *it->second;
  return st.skipped + (st.skipped_on_device.defined() ? static_cast<int64_t>(st.skipped_on_device.item_double()) : 0);
}

std::string last_diagnosis() { return state().last_diagnosis; }

}  // namespace mpx::amp
