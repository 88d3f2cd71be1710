// Optimizer base: group bookkeeping, master weights, stochastic rounding, batching of the fused steps.
#include "optim/optimizer.h"
#include "optim/optimizer_internal.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "core/cuda.h"
#include "core/random.h"
#include "core/serialize.h"
#include "ops/op_utils.h"

namespace mpx::optim {

// ---- ParamGroup ----
ParamGroup::ParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}
ParamGroup::ParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
    : params_(std::move(params)), options_(std::move(options)) {}
ParamGroup::ParamGroup(const ParamGroup& o)
    : params_(o.params_), options_(o.options_ ? o.options_->clone() : nullptr), initial_lr_(o.initial_lr_) {}
ParamGroup& ParamGroup::operator=(const ParamGroup& o) {
  if (this != &o) {
    params_ = o.params_;
    options_ = o.options_ ? o.options_->clone() : nullptr;
    initial_lr_ = o.initial_lr_;
  }
  return *this;
}
OptimizerOptions& ParamGroup::options() {
  MPX_CHECK(options_, "ParamGroup::options(): the group has no options yet; add it to an optimizer first");
  return *options_;
}
const OptimizerOptions& ParamGroup::options() const {
  MPX_CHECK(options_, "ParamGroup::options(): the group has no options yet; add it to an optimizer first");
  return *options_;
}

namespace {

// How a dense tensor's elements are ordered in memory: 0 row-major, 1 channels-last, -1 not dense.
int layout_kind(const Tensor& t) {
  if (t.is_contiguous()) return 0;
  if (t.dim() == 4 && t.is_contiguous(MemoryFormat::ChannelsLast)) return 1;
  return -1;
}
bool same_layout(const Tensor& a, const Tensor& b) {
  const int k = layout_kind(a);
  return k >= 0 && k == layout_kind(b) && a.sizes() == b.sizes();
}
// A new dense tensor laid out like `like` (row-major when `like` is not dense).
Tensor empty_like_layout(const Tensor& like, DType dt) {
  TensorOptions o = TensorOptions().dtype(dt).device(like.device());
  if (layout_kind(like) == 1) o.memory_format(MemoryFormat::ChannelsLast);
  return empty(like.sizes(), o);
}
DType compute_dtype_for(const Tensor& p) { return p.dtype() == kFloat64 ? kFloat64 : kFloat32; }

// State made inside a CUDA graph capture would be the graph's own memory, made anew (its values
// lost) at every replay, and a capture freezes the host's view of it: it must exist before.
constexpr const char* capture_hint =
    "optimizer state (a step count, state buffer or master weight) would be created inside a CUDA graph "
    "capture, where it would not keep its values across replays; run one eager step before capturing";

}  // namespace

namespace detail {
Tensor copy_like(const Tensor& src, const Tensor& like, DType dt) {
  NoGradGuard ng;
  Tensor out = empty_like_layout(like, dt);
  Tensor s = src.detach();
  if (s.device() != out.device()) s = s.to(out.device());
  out.copy_(s);
  return out;
}
Tensor make_master(const Tensor& param) {
  MPX_CHECK(!cuda::is_capturing(), capture_hint);
  Tensor m = copy_like(param, param, kFloat32);
  m.set_requires_grad(true);
  return m;
}
Tensor master_in_line(const ParamState& st, const Tensor& param) {
  if (!st.master.defined() || st.model_version == param.version() || cuda::is_capturing()) return st.master;
  NoGradGuard ng;
  const Tensor moved = st.master.to(param.dtype()).ne(param);
  if (!moved.any().item<bool>()) return st.master;
  return where(moved, param.to(kFloat32), st.master.detach());
}
}  // namespace detail

using detail::copy_like;
using detail::make_master;
using detail::master_in_line;

namespace {
// Writes master_in_line into the master and notes the parameter's version it now agrees with.
void bring_in_line(ParamState& st, const Tensor& param) {
  const Tensor m = master_in_line(st, param);  // the master itself when it already agrees
  if (m.impl() != st.master.impl()) {
    NoGradGuard ng;
    st.master.copy_(m);
  }
  if (st.master.defined() && !cuda::is_capturing()) st.model_version = param.version();
}
}  // namespace

// ---- Optimizer ----
Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  defaults_->validate();
  size_t total = 0;
  for (const auto& g : groups) total += g.params().size();
  MPX_CHECK(total > 0, name_, ": optimizer got an empty parameter list; pass the model's parameters()");
  for (const auto& g : groups) add_param_group(g);
}

void Optimizer::add_param_group(const ParamGroup& group) {
  ParamGroup g(group.params(), group.has_options() ? group.options().clone() : defaults_->clone());
  if (group.has_initial_lr()) g.set_initial_lr(group.initial_lr());
  g.options().validate();
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& pg : param_groups_)
    for (const auto& p : pg.params()) seen.insert(p.impl());
  for (size_t i = 0; i < g.params().size(); ++i) {
    const Tensor& p = g.params()[i];
    MPX_CHECK(p.defined(), name(), ": parameter ", i, " of the new group is undefined");
    MPX_CHECK(p.is_floating_point(), name(), ": can only optimize floating tensors, parameter ", i, " is ",
              ops::describe(p));
    MPX_CHECK(p.is_leaf(), name(), ": can't optimize a non-leaf tensor (parameter ", i, ", ", ops::describe(p),
              "); pass the leaf (e.g. detach().set_requires_grad())");
    MPX_CHECK(seen.insert(p.impl()).second, name(), ": parameter ", i, " (", ops::describe(p),
              ") appears in more than one parameter group or twice in one group");
  }
  param_groups_.push_back(std::move(g));
  // Masters exist from the start so the amp layer can see them before the first step.
  for (const auto& p : param_groups_.back().params())
    if (is_reduced_float(p.dtype()) && master_weights_) state_for(p);
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> r;
  for (const auto& g : param_groups_) r.insert(r.end(), g.params().begin(), g.params().end());
  return r;
}
size_t Optimizer::size() const {
  size_t n = 0;
  for (const auto& g : param_groups_) n += g.params().size();
  return n;
}

const Tensor& Optimizer::find_param(const Tensor& param) const {
  MPX_CHECK(param.defined(), name(), ": undefined tensor passed as a parameter");
  for (const auto& g : param_groups_)
    for (const auto& p : g.params())
      if (p.impl() == param.impl()) return p;
  MPX_ERROR(name(), ": the tensor ", ops::describe(param), " is not a parameter of this optimizer");
}

ParamState& Optimizer::state_for(const Tensor& p) {
  ParamState& st = state_[p.impl()];
  const bool wants = master_weights_ && is_reduced_float(p.dtype());
  if (wants && !st.master.defined()) {
    st.master = make_master(p);
    st.model_version = p.version();
  }
  if (!wants && st.master.defined()) st.master = Tensor();
  return st;
}

DType Optimizer::state_dtype(const Tensor& p) const {
  if (master_weights_ || !is_reduced_float(p.dtype())) return compute_dtype_for(p);
  return stochastic_rounding_ && !low_precision_state_ ? kFloat32 : p.dtype();
}

ParamState& Optimizer::state(const Tensor& param) { return state_for(find_param(param)); }
bool Optimizer::has_state(const Tensor& param) const { return state_.count(param.impl()) > 0; }

const Tensor& Optimizer::master(const Tensor& param) {
  const Tensor& p = find_param(param);
  if (!is_reduced_float(p.dtype()) || !master_weights_) return p;
  ParamState& st = state_for(p);
  bring_in_line(st, p);
  return st.master;
}

void Optimizer::set_master(const Tensor& param, const Tensor& value) {
  const Tensor& p = find_param(param);
  MPX_CHECK(is_reduced_float(p.dtype()), name_, ": set_master: ", ops::describe(p),
            " is not f16/bf16; f32/f64 parameters are their own master");
  MPX_CHECK(master_weights_, name_, ": set_master: master weights are off (set_master_weights(false), apex's O3); "
            "turn them on first");
  MPX_CHECK(value.defined() && value.sizes() == p.sizes() && value.is_floating_point(), name_,
            ": set_master: the value ", ops::describe(value),
            " must be floating with the parameter's shape ", shape_str(p.sizes()));
  Tensor m = copy_like(value, p, kFloat32);
  m.set_requires_grad(true);
  state_for(p).master = m;
}

std::vector<Tensor> Optimizer::master_params() {
  std::vector<Tensor> r;
  for (const auto& g : param_groups_)
    for (const auto& p : g.params()) r.push_back(master(p));
  return r;
}

void Optimizer::set_master_weights(bool on) {
  MPX_CHECK(!on || !stochastic_rounding_, name_, ": set_master_weights(true): stochastic rounding is on, which "
            "replaces master weights; call set_stochastic_rounding(false) first (or keep master weights off)");
  master_weights_ = on;
  sync_masters();
}

void Optimizer::set_stochastic_rounding(bool on, const StochasticRoundingOptions& options) {
  MPX_CHECK(!on || !master_weights_, name_, ": stochastic rounding is for f16/bf16 parameters without FP32 master "
            "weights, and this optimizer keeps masters (which hold every update exactly, making the rounding moot); "
            "call set_master_weights(false) first, or with amp use master_weights(false) at O2, or O3");
  stochastic_rounding_ = on;
  low_precision_state_ = on && options.low_precision_state();
  rounding_seed_ = options.seed().value_or(random::default_generator().current_seed());
}

void Optimizer::sync_masters() {
  for (const auto& g : param_groups_)
    for (const auto& p : g.params()) {
      auto it = state_.find(p.impl());
      if ((is_reduced_float(p.dtype()) && master_weights_) || it != state_.end()) state_for(p);
    }
}

int Optimizer::add_step_pre_hook(StepPreHook hook) {
  hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}
void Optimizer::remove_step_pre_hook(int id) {
  std::erase_if(hooks_, [id](const auto& h) { return h.first == id; });
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  auto clear = [set_to_none](const Tensor& t) {
    Tensor& g = t.mutable_grad();
    if (!g.defined()) return;
    if (set_to_none) {
      g = Tensor();
    } else {
      if (g.grad_fn()) g = g.detach();
      g.zero_();
    }
  };
  for (const auto& grp : param_groups_)
    for (const auto& p : grp.params()) {
      clear(p);
      auto it = state_.find(p.impl());
      if (it != state_.end() && it->second.master.defined()) clear(it->second.master);
    }
}

Tensor Optimizer::step(const LossClosure& closure) {
  Tensor loss;
  if (closure) {
    AutoGradMode enable(true);
    loss = closure();
  }
  // The amp inputs belong to this step whatever happens to it.
  struct Consume {
    Optimizer& o;
    ~Consume() { o.amp_found_inf_ = o.amp_inv_scale_ = Tensor(); }
  } consume{*this};
  // A master's gradient is the unscaled copy of one iteration's gradients, written for this step:
  // it goes once the step has used or skipped it (apex clears it after every step), or a later
  // iteration would add it back or step a parameter that got no gradient with it.
  struct ClearMasterGrads {
    Optimizer& o;
    ~ClearMasterGrads() {
      for (auto& [impl, st] : o.state_)
        if (st.master.defined()) st.master.mutable_grad() = Tensor();
    }
  } clear_master_grads{*this};
  for (auto& [id, hook] : hooks_)
    if (!hook(*this)) return loss;
  // A learning rate set after construction (a scheduler, set_lr) bypassed the options' checks; a non-finite one
  // would turn every parameter to NaN.
  for (size_t g = 0; g < param_groups_.size(); ++g)
    MPX_CHECK(std::isfinite(param_groups_[g].lr()), "optimizer step: param group ", g, " has learning rate ",
              param_groups_[g].lr(), "; set a finite one (a scheduler or set_lr gave it)");
  NoGradGuard ng;
  begin_step();
  uint32_t first_id = 0;
  for (auto& g : param_groups_) {
    step_group(g, first_id);
    first_id += static_cast<uint32_t>(g.params().size());
  }
  return loss;
}

namespace {

// One parameter's part of a fused step: what the kernels update (`work`: the master or the
// parameter, or a dense copy of a strided one) and the low-precision copy they round it into.
struct StepItem {
  Tensor param, work, model;
  bool copy_work = false, copy_model = false;
};
// The parameters of one (device, compute dtype): a single fused kernel call.
struct StepBatch {
  Device device;
  DType dtype;
  kernels::StepTensors ts;
  std::vector<StepItem> items;
};

// The tensors the kernels update for `p`, dense and in the layout of the tensor they stand for.
StepItem plan_item(const Tensor& p, const ParamState& st) {
  const bool reduced = st.master.defined();  // the step writes the master, then rounds it into p
  StepItem it;
  it.param = p;
  const Tensor target = reduced ? st.master : p;
  it.work = target;
  if (layout_kind(target) < 0) {  // a strided view: update a dense copy, write it back after
    it.work = copy_like(target, target, target.dtype());
    it.copy_work = true;
  }
  if (reduced) {
    if (same_layout(p, it.work)) {
      it.model = p;
    } else {
      it.model = empty_like_layout(it.work, p.dtype());
      it.copy_model = true;
    }
  }
  return it;
}

// The optimizer's state buffers of one parameter in `work`'s layout and dtype `sdt`, made (zeroed)
// on first use; `fresh` is set when one was made.
tensor_list state_buffers(ParamState& st, const std::vector<std::string>& names, const Tensor& work, DType sdt,
                          bool& fresh) {
  tensor_list bufs;
  for (const auto& n : names) {
    Tensor& b = st.buffers[n];
    const bool fits = b.defined() && same_layout(b, work) && b.dtype() == sdt && b.device() == work.device();
    if (!fits) MPX_CHECK(!cuda::is_capturing(), capture_hint);
    if (!b.defined()) {
      b = empty_like_layout(work, sdt);
      b.zero_();
      fresh = true;
    } else if (!fits) {
      b = copy_like(b, work, sdt);
    }
    bufs.push_back(b);
  }
  return bufs;
}

// Advances the parameter's step number: counted on the host, or where the kernels run (CUDA,
// where a graph may replay this step, or when amp's flag may skip it there), which then count
// it themselves. Switching back reads the count. Returns whether the count is on the device.
bool advance_step(ParamState& st, const Tensor& work, bool amp_flag, bool& fresh) {
  const bool device_count = work.is_cuda() || amp_flag;
  if (device_count && (!st.count.defined() || st.count.device() != work.device())) {
    MPX_CHECK(!cuda::is_capturing(), capture_hint);
    st.count = st.count.defined()
                   ? st.count.to(work.device())
                   : full({}, static_cast<double>(st.step), TensorOptions(kFloat64).device(work.device()));
  } else if (!device_count && st.count.defined()) {
    st.step = static_cast<int64_t>(st.count.item_double());
    st.count = Tensor();
    if (st.step == 0) fresh = true;  // its buffers were made in steps that were all skipped
  }
  if (!device_count) st.step += 1;
  return device_count;
}

StepBatch& batch_for(std::vector<StepBatch>& batches, Device d, DType dt, size_t num_buffers) {
  for (auto& b : batches)
    if (b.device == d && b.dtype == dt) return b;
  batches.push_back(StepBatch{d, dt, {}, {}});
  batches.back().ts.states.resize(num_buffers);
  return batches.back();
}

}  // namespace

Tensor Optimizer::step_gradient(const Tensor& p) const {
  // Master gradients (written by the amp layer's unscale) take precedence, except in a step
  // that unscales as it reads (inv_scale): its overflow check read the parameters' gradients.
  auto it = state_.find(p.impl());
  Tensor grad;
  if (it != state_.end() && it->second.master.defined() && !amp_inv_scale_.defined()) grad = it->second.master.grad();
  if (!grad.defined()) grad = p.grad();
  if (!grad.defined()) return grad;
  MPX_CHECK(grad.sizes() == p.sizes(), name(), ": gradient of shape ", shape_str(grad.sizes()),
            " does not match its parameter ", ops::describe(p));
  MPX_CHECK(grad.device() == p.device(), name(), ": gradient on ", grad.device().str(), " but its parameter is on ",
            p.device().str());
  MPX_CHECK(grad.is_floating_point(), name(), ": gradient of ", ops::describe(p), " is ", ops::describe(grad));
  return grad;
}

void Optimizer::step_group(ParamGroup& group, uint32_t first_id) {
  const OptimizerOptions& opts = group.options();
  const std::vector<std::string> names = buffer_names(opts);
  // Gather every parameter with a gradient into its (device, dtype) batch...
  std::vector<StepBatch> batches;
  for (size_t pi = 0; pi < group.params().size(); ++pi) {
    const Tensor& p = group.params()[pi];
    Tensor grad = step_gradient(p);
    if (!grad.defined()) continue;
    ParamState& st = state_for(p);
    bring_in_line(st, p);
    StepItem item = plan_item(p, st);
    if (!same_layout(grad, item.work)) grad = copy_like(grad, item.work, grad.dtype());
    bool fresh = false;
    const tensor_list bufs = state_buffers(st, names, item.work, state_dtype(p), fresh);
    const bool device_count = advance_step(st, item.work, amp_found_inf_.defined(), fresh);
    StepBatch& b = batch_for(batches, item.work.device(), compute_dtype_for(item.work), names.size());
    b.ts.params.push_back(item.work);
    b.ts.grads.push_back(grad);
    b.ts.models.push_back(item.model);
    for (size_t k = 0; k < names.size(); ++k) b.ts.states[k].push_back(bufs[k]);
    b.ts.steps.push_back(st.step);
    b.ts.fresh.push_back(fresh ? 1 : 0);
    if (device_count) b.ts.counts.push_back(st.count);
    b.ts.ids.push_back(first_id + static_cast<uint32_t>(pi));
    b.items.push_back(std::move(item));
  }
  // ...then one fused step per batch, with amp's skip flag and unscale where they are set.
  for (auto& b : batches) {
    if (amp_found_inf_.defined()) {
      b.ts.found_inf = amp_found_inf_.device() == b.device ? amp_found_inf_ : amp_found_inf_.to(b.device);
      if (amp_inv_scale_.defined())
        b.ts.inv_scale = amp_inv_scale_.device() == b.device ? amp_inv_scale_ : amp_inv_scale_.to(b.device);
    }
    b.ts.stochastic_rounding = stochastic_rounding_;
    b.ts.seed = rounding_seed_;
    apply(opts, b.ts, b.device, b.dtype);
    for (auto& item : b.items) {
      ParamState& st = state_for(item.param);
      const Tensor& master = st.master;
      if (item.copy_work) {
        Tensor target = master.defined() ? master : item.param;
        target.copy_(item.work);
      }
      if (item.copy_model) item.param.copy_(item.model);
      else item.param.bump_version();
      if (master.defined()) master.bump_version();
      st.model_version = item.param.version();
    }
  }
}

void Optimizer::set_amp_step_inputs(const Tensor& found_inf, const Tensor& inv_scale) {
  MPX_CHECK(found_inf.defined() && found_inf.dtype() == kFloat32 && found_inf.numel() == 1, name(),
            ": set_amp_step_inputs needs found_inf as a one-element f32 tensor, got ",
            ops::describe(found_inf));
  MPX_CHECK(!inv_scale.defined() || (inv_scale.dtype() == kFloat32 && inv_scale.numel() == 1), name(),
            ": set_amp_step_inputs needs inv_scale as a one-element f32 tensor, got ", ops::describe(inv_scale));
  amp_found_inf_ = found_inf;
  amp_inv_scale_ = inv_scale;
}

int64_t Optimizer::step_count(const Tensor& param) const {
  auto it = state_.find(param.impl());
  if (it == state_.end()) return 0;
  const ParamState& st = it->second;
  return st.count.defined() ? static_cast<int64_t>(st.count.item_double()) : st.step;
}

}  // namespace mpx::optim
