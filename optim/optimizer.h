// Optimizer base: param groups with their own options, per-parameter state, FP32 master weights, state dicts.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/arg.h"
#include "core/tensor.h"
#include "ops/optim_kernels.h"

namespace mpx::optim {

/// Per-group hyper-parameters. Each optimizer has its own options type deriving from this.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  /// The hyper-parameters as named scalars (booleans as 0/1), for state dicts.
  virtual std::map<std::string, double> to_map() const = 0;
  /// Sets the hyper-parameters named in `m`; throws on a name this type does not have.
  virtual void from_map(const std::map<std::string, double>& m) = 0;
  /// Throws mpx::Error naming the first invalid value (negative lr, betas outside [0, 1), ...).
  virtual void validate() const = 0;
};

/// CRTP helper that supplies clone().
template <class Derived>
class OptimizerCloneableOptions : public OptimizerOptions {
 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

/// A set of parameters optimized with the same options (LibTorch's OptimizerParamGroup).
class ParamGroup {
 public:
  /// A group that takes the optimizer's default options when added.
  ParamGroup(std::vector<Tensor> params);  // NOLINT: lets `{params}` read naturally
  ParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options);
  ParamGroup(const ParamGroup& other);
  ParamGroup& operator=(const ParamGroup& other);
  ParamGroup(ParamGroup&&) noexcept = default;
  ParamGroup& operator=(ParamGroup&&) noexcept = default;

  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  bool has_options() const { return options_ != nullptr; }
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }
  /// Shorthands for options().get_lr() / set_lr().
  double lr() const { return options().get_lr(); }
  void set_lr(double lr) { options().set_lr(lr); }
  /// The lr the first scheduler attached to this group started from (PyTorch's "initial_lr").
  double initial_lr() const { return initial_lr_ >= 0 ? initial_lr_ : lr(); }
  bool has_initial_lr() const { return initial_lr_ >= 0; }
  void set_initial_lr(double lr) { initial_lr_ = lr; }

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
  double initial_lr_ = -1;
};

/// What an optimizer keeps per parameter.
struct ParamState {
  /// Steps taken for this parameter (while `count` is undefined).
  int64_t step = 0;
  /// FP32 master copy of a f16/bf16 parameter (undefined for f32/f64 parameters, and for every
  /// parameter while master weights are off). The step updates it and writes the rounded value
  /// into the parameter. A master counts only where it rounds to the parameter's value: where the
  /// parameter was written since (loaded into the model, initialized in place, broadcast), the
  /// parameter's value replaces it before the next step or state_dict.
  Tensor master;
  /// The parameter's storage version when the master was last in line with it (the step's own
  /// write); any other version has the master checked against the parameter.
  uint64_t model_version = ~uint64_t{0};
  /// The count of steps taken where the step kernels run (f64 0-dim on the parameter's device):
  /// used for CUDA parameters and for steps that amp may skip on a flag, which advance it (or
  /// not) without the host; CUDA graph replays advance it too. Undefined otherwise.
  Tensor count;
  /// Named state buffers laid out like the parameter, in the dtype of what the step updates (the
  /// f32 master, or the parameter itself: f16/bf16 ones too without master weights, as apex's O3
  /// and torch.optim keep them; f32 for those under stochastic rounding unless it keeps the
  /// state in low precision): "momentum_buffer"; "exp_avg", "exp_avg_sq", "max_exp_avg_sq".
  std::map<std::string, Tensor> buffers;
};

/// Options of Optimizer::set_stochastic_rounding.
struct StochasticRoundingOptions {
  /// Keep the state buffers of f16/bf16 parameters (SGD's momentum, Adam's m and v) in the
  /// parameter's dtype, rounded stochastically too: 2 bytes per element and buffer instead of
  /// the default f32's 4.
  MPX_ARG(bool, low_precision_state) = false;
  /// The Philox key of the draws; unset, the default generator's seed (manual_seed) at the call.
  MPX_ARG(std::optional<uint64_t>, seed);
};

/// A flat, serializable optimizer state (what state_dict returns and save_tensors can write).
/// Names follow PyTorch's layout with parameters numbered in group order:
///   tensors: "state.<i>.<buffer>", "state.<i>.master", "param_groups.<g>.params" (i64 indices)
///   scalars: "state.<i>.step", "param_groups.<g>.<hyper-parameter>" (lr, momentum, ...)
/// and, while stochastic rounding is on, "stochastic_rounding.enabled" (1),
/// "stochastic_rounding.low_precision_state" (0/1) and the seed as tensor
/// "stochastic_rounding.seed" (i64 bits, which a double could not hold).
struct OptimizerState {
  std::string optimizer;  // "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "LAMB"
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
};

/// Base class of the optimizers. Parameters are identified by their TensorImpl: keep the same
/// Tensor objects alive (modules do) and change them in place.
class Optimizer {
 public:
  using LossClosure = std::function<Tensor()>;
  /// Called at the start of step(); returning false skips the update (amp's overflow skip).
  using StepPreHook = std::function<bool(Optimizer&)>;

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Updates every parameter that has a gradient. With a closure, evaluates it first (with grad
  /// mode on) and returns its loss. Runs under NoGradGuard; bumps the parameters' versions.
  Tensor step(const LossClosure& closure = nullptr);
  /// Clears gradients (of masters too): drops them with set_to_none, zeros them otherwise.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return param_groups_; }
  const std::vector<ParamGroup>& param_groups() const { return param_groups_; }
  /// Adds a group; options it lacks come from the optimizer's defaults. A parameter may be in one group only.
  void add_param_group(const ParamGroup& group);
  /// All parameters in group order.
  std::vector<Tensor> parameters() const;
  /// Number of parameters across groups.
  size_t size() const;
  const OptimizerOptions& defaults() const { return *defaults_; }
  OptimizerOptions& defaults() { return *defaults_; }
  /// "SGD", "Adam", "AdamW".
  const std::string& name() const { return name_; }

  /// The flat state (see OptimizerState); includes masters, so resuming loses nothing.
  OptimizerState state_dict() const;
  /// Restores a state from state_dict(): same optimizer type, group count and group sizes, and
  /// state tensors of the parameters' shapes. Validates everything before changing anything.
  /// Master weights and stochastic rounding stay as this optimizer has them (amp's options set
  /// them); a recorded rounding seed is taken, so the draws continue where they left off.
  void load_state_dict(const OptimizerState& state);

  /// The state of one parameter (created on first use); throws if it is not optimized here.
  ParamState& state(const Tensor& param);
  /// True when the parameter has state (it was stepped, or has a master).
  bool has_state(const Tensor& param) const;

  /// The FP32 master of a f16/bf16 parameter (created from the parameter's current value if
  /// missing), or the parameter itself for f32/f64 parameters and while master weights are off. When the master has a gradient
  /// (the amp layer unscales into it), step() uses that instead of the parameter's gradient, and
  /// drops it after the step (taken or skipped), as apex does: it belongs to one iteration.
  const Tensor& master(const Tensor& param);
  /// What the steps update, in group order: masters for f16/bf16 parameters, the parameters
  /// themselves otherwise (apex's amp.master_params).
  std::vector<Tensor> master_params();
  /// Sets the FP32 master of a f16/bf16 parameter to (an f32 copy of) `value`, e.g. the f32
  /// weights from before the model was cast, so the cast's rounding is not baked into the master.
  void set_master(const Tensor& param, const Tensor& value);
  /// Creates masters for parameters that became f16/bf16 since (after the model was cast) and
  /// drops those of parameters that are f32/f64 again. Called by step() too.
  void sync_masters();
  /// With false (apex's O3), f16/bf16 parameters have no masters: the step reads and writes
  /// them and their state buffers in their own dtype (arithmetic in f32, one rounding per
  /// stored value), so updates below the parameter's resolution are lost as in pure f16
  /// training, and the state costs what torch.optim's does. Default true. Creates or drops the
  /// masters at once; state buffers change dtype at the next step.
  /// Refused while stochastic rounding is on.
  void set_master_weights(bool on);
  bool master_weights() const { return master_weights_; }

  /// Stochastic rounding for f16/bf16 parameters without FP32 masters (llm.c's and torchao's
  /// bf16 recipe): each fused step computes the update in f32 from the parameter and rounds the
  /// result to the parameter's dtype stochastically (ops/stochastic_round.h), so an update
  /// below half a unit in the last place survives in expectation instead of being lost. The
  /// random bits are Philox keyed by the seed with counter (element, step number, parameter
  /// index in group order): a step is reproducible, the CPU and CUDA kernels round the same
  /// value to the same bits, and a resumed run draws what the uninterrupted one would have.
  /// The state buffers of such parameters are f32 unless options.low_precision_state(). Needs
  /// master weights off (set_master_weights(false) first; masters keep every update exactly,
  /// which makes the rounding moot). f32/f64 parameters are updated as without it. The state
  /// buffers change dtype at the next step.
  void set_stochastic_rounding(bool on, const StochasticRoundingOptions& options = {});
  bool stochastic_rounding() const { return stochastic_rounding_; }
  /// Whether stochastic rounding keeps the state buffers of f16/bf16 parameters in their dtype
  /// (StochasticRoundingOptions::low_precision_state). Without it and without masters they are
  /// always in the parameter's dtype, rounded to nearest, as apex's O3 keeps them.
  bool low_precision_state() const { return low_precision_state_; }
  /// The Philox key of the rounding draws.
  uint64_t rounding_seed() const { return rounding_seed_; }

  /// amp's synchronization-free overflow skip, for the next step() only: the step kernels read
  /// `found_inf` (an f32 0-dim flag on the parameters' device; non-zero leaves every parameter,
  /// master and state untouched) and, when `inv_scale` is defined, multiply the gradients by it
  /// as they read them (the unscale fused into the step). GradScaler::step calls this.
  void set_amp_step_inputs(const Tensor& found_inf, const Tensor& inv_scale = {});
  /// The steps a parameter has taken (reads the device count where the steps keep one).
  int64_t step_count(const Tensor& param) const;
  /// Registers a pre-step hook; returns an id for remove_step_pre_hook.
  int add_step_pre_hook(StepPreHook hook);
  void remove_step_pre_hook(int id);

 protected:
  Optimizer(std::string name, std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults);

  /// Names of the state buffers a parameter needs under `options` (SGD: momentum_buffer when
  /// momentum != 0).
  virtual std::vector<std::string> buffer_names(const OptimizerOptions& options) const = 0;
  /// Runs the kernel over one batch of parameters sharing a group, device and compute dtype.
  virtual void apply(const OptimizerOptions& options, const kernels::StepTensors& tensors, Device device,
                     DType compute_dtype) = 0;
  /// Called once per step() that is not vetoed by a pre-step hook, before the first group (under
  /// NoGradGuard): for what a step needs over every group, such as LAMB's global gradient norm.
  virtual void begin_step() {}
  /// The gradient the step uses for `p` (its master's where amp wrote one), checked; undefined if none.
  Tensor step_gradient(const Tensor& p) const;
  /// amp's inv_scale for this step: defined when the kernels unscale the gradients as they read them.
  const Tensor& amp_inv_scale() const { return amp_inv_scale_; }

 private:
  // `first_id`: the index of the group's first parameter in the optimizer (stochastic rounding's stream).
  void step_group(ParamGroup& group, uint32_t first_id);
  ParamState& state_for(const Tensor& param);
  /// The dtype of a parameter's state buffers (see ParamState::buffers).
  DType state_dtype(const Tensor& param) const;
  const Tensor& find_param(const Tensor& param) const;

  std::string name_;
  std::unique_ptr<OptimizerOptions> defaults_;
  std::vector<ParamGroup> param_groups_;
  std::unordered_map<const TensorImpl*, ParamState> state_;
  std::vector<std::pair<int, StepPreHook>> hooks_;
  int next_hook_id_ = 0;
  bool master_weights_ = true;
  bool stochastic_rounding_ = false, low_precision_state_ = false;
  uint64_t rounding_seed_ = 0;
  Tensor amp_found_inf_, amp_inv_scale_;  // set_amp_step_inputs, consumed by the next step()
};

}  // namespace mpx::optim

namespace mpx {
/// Writes an optimizer's state_dict() as safetensors: tensors as tensors, scalars (and the
/// optimizer's name) in "__metadata__" with round-trip precision.
void save(const optim::Optimizer& optimizer, const std::string& path);
/// Loads a file written by save(optimizer, path) into an optimizer of the same type and layout.
void load(optim::Optimizer& optimizer, const std::string& path);
}  // namespace mpx
