// amp front end (apex's amp): Options/opt levels O0-O3, initialize, scale_loss, master_params, state dicts, diagnosis.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace mpx::amp {

/// The resolved properties of an opt level (apex's Properties), after overrides.
/// `cast_model_type` unset is apex's None (O1: no model cast); `keep_batchnorm_fp32` and
/// `master_weights` unset are apex's None.
struct Properties {
  bool enabled = true;
  std::string opt_level = "O1";
  std::optional<DType> cast_model_type;
  bool patch_functions = false;
  std::optional<bool> keep_batchnorm_fp32;
  std::optional<bool> master_weights;
  /// A number, or 0 with `dynamic_loss_scale` true for "dynamic".
  double loss_scale = 1.0;
  bool dynamic_loss_scale = false;
  /// Beyond apex: the optimizers round f16/bf16 parameters stochastically (no masters), and
  /// whether they keep those parameters' state in low precision too.
  bool stochastic_rounding = false;
  bool low_precision_state = false;
  /// Table text: "opt_level: O2\ncast_model_type: kFloat16\n..." (what verbosity(1) prints).
  std::string str() const;
};

/// apex's property table for `opt_level` ("O0".."O3") with f16 replaced by `low` (kFloat16 or
/// kBFloat16), except that O1 and O2 in bf16 use a static loss scale of 1 instead of dynamic
/// scaling (bf16 has f32's range; Options::loss_scale("dynamic") asks for it). Throws for any
/// other level.
Properties opt_level_defaults(const std::string& opt_level, DType low = kFloat16);

/// Options of amp::initialize: an opt level plus apex's overrides (each setter chains). Unset
/// overrides keep the level's value. Overrides are validated by apex's rules when initialize runs.
class Options {
 public:
  Options& opt_level(std::string level) { opt_level_ = std::move(level); return *this; }
  /// The low precision type every level uses (beyond apex): kFloat16 (default) or kBFloat16.
  Options& dtype(DType t) { dtype_ = t; return *this; }
  /// false makes initialize and every later amp call a no-op (apex's enabled=False).
  Options& enabled(bool on) { enabled_ = on; return *this; }
  /// kFloat32, kFloat16 or kBFloat16 (apex's cast_model_type).
  Options& cast_model_type(DType t) { cast_model_type_ = t; return *this; }
  /// apex's cast_model_type=False: the models are not cast and their inputs and outputs pass
  /// untouched, and models that already hold f16/bf16 parameters are accepted (apex's
  /// allow_incoming_model_not_fp32); at O2 those parameters still get f32 masters.
  Options& keep_model_dtypes(bool on = true) { keep_model_dtypes_ = on; return *this; }
  /// apex's patch_torch_functions: autocast inside the model's forward (only O1).
  Options& patch_functions(bool on) { patch_functions_ = on; return *this; }
  Options& keep_batchnorm_fp32(bool on) { keep_batchnorm_fp32_ = on; return *this; }
  Options& master_weights(bool on) { master_weights_ = on; return *this; }
  /// Beyond apex: bf16 (or f16) training without FP32 master weights whose optimizer steps round
  /// the updated parameters stochastically (Optimizer::set_stochastic_rounding), so small
  /// updates are kept in expectation. Needs O2/O3 with master weights off, i.e.
  /// `.opt_level("O2").master_weights(false)` (batch norms stay f32) or O3; with masters it
  /// is refused, as they make it moot. The seed is the default generator's (manual_seed).
  Options& stochastic_rounding(bool on) { stochastic_rounding_ = on; return *this; }
  /// With stochastic_rounding: the optimizers' state of low-precision parameters (momentum,
  /// Adam's m and v) in their dtype, rounded stochastically too, instead of f32.
  Options& low_precision_state(bool on) { low_precision_state_ = on; return *this; }
  /// A static loss scale (a positive finite number).
  Options& loss_scale(double scale) { loss_scale_ = scale; loss_scale_str_.reset(); return *this; }
  /// "dynamic", or a number written as a string ("128.0").
  Options& loss_scale(const std::string& scale) { loss_scale_str_ = scale; loss_scale_.reset(); return *this; }
  Options& loss_scale(const char* scale) { return loss_scale(std::string(scale)); }
  /// How many losses get their own scaler (select one with ScaleLossOptions::loss_id).
  Options& num_losses(int n) { num_losses_ = n; return *this; }
  /// Floor of the dynamic scale (apex: the scale is clamped to it, no error). 0 = none.
  Options& min_loss_scale(double s) { min_loss_scale_ = s; return *this; }
  /// Ceiling of the dynamic scale (default 2^24).
  Options& max_loss_scale(double s) { max_loss_scale_ = s; return *this; }
  /// Cast floating model outputs to this type (default at levels that cast the model: f32).
  Options& cast_model_outputs(DType t) { cast_model_outputs_ = t; return *this; }
  /// 0 silent, 1 (default) prints the defaults, overrides and resolved table, and overflow messages.
  Options& verbosity(int v) { verbosity_ = v; return *this; }
  /// On a skipped step, report where the first non-finite value appeared (also: MPX_AMP_DIAGNOSE=1).
  Options& diagnose(bool on) { diagnose_ = on; return *this; }

  /// The level's table with the overrides applied; throws (apex's rules) on an invalid override.
  Properties resolve() const;

  std::string opt_level_ = "O1";
  DType dtype_ = kFloat16;
  bool enabled_ = true;
  std::optional<DType> cast_model_type_;
  bool keep_model_dtypes_ = false;
  std::optional<bool> patch_functions_, keep_batchnorm_fp32_, master_weights_;
  std::optional<double> loss_scale_;
  std::optional<std::string> loss_scale_str_;
  int num_losses_ = 1;
  double min_loss_scale_ = 0.0;
  double max_loss_scale_ = 16777216.0;
  std::optional<DType> cast_model_outputs_;
  int verbosity_ = 1;
  bool diagnose_ = false;
  bool stochastic_rounding_ = false, low_precision_state_ = false;
};

/// A model handed to initialize: any holder (`SmallCnn net`), shared_ptr to a module, or a
/// module owned by a shared_ptr.
struct ModelRef {
  std::shared_ptr<nn::Module> module;
  template <typename H>
    requires requires(const H& h) {
      { h.ptr() } -> std::convertible_to<std::shared_ptr<nn::Module>>;
    }
  ModelRef(const H& holder) : module(holder.ptr()) {}  // NOLINT
  template <typename M>
    requires std::is_base_of_v<nn::Module, M>
  ModelRef(std::shared_ptr<M> m) : module(std::move(m)) {}  // NOLINT
  ModelRef(nn::Module& m) : module(m.shared_from_this()) {}  // NOLINT
};
using OptimizerRef = std::reference_wrapper<optim::Optimizer>;

/// apex's amp.initialize: casts the models (O2: to the low type except batch norms with
/// keep_batchnorm_fp32; O3: everything), sets the optimizers' FP32 masters from the pre-cast
/// weights, makes holder calls cast inputs/outputs (O0/O2/O3) or autocast (O1), and creates
/// num_losses loss scalers. Initializing an optimizer a second time is an error.
void initialize(const std::vector<ModelRef>& models, const std::vector<OptimizerRef>& optimizers,
                const Options& options = Options());
inline void initialize(ModelRef model, optim::Optimizer& optimizer, const Options& options = Options()) {
  initialize(std::vector<ModelRef>{std::move(model)}, std::vector<OptimizerRef>{optimizer}, options);
}
inline void initialize(ModelRef model, const Options& options = Options()) {
  initialize(std::vector<ModelRef>{std::move(model)}, std::vector<OptimizerRef>{}, options);
}
inline void initialize(const std::vector<ModelRef>& models, optim::Optimizer& optimizer,
                       const Options& options = Options()) {
  initialize(models, std::vector<OptimizerRef>{optimizer}, options);
}
inline void initialize(ModelRef model, const std::vector<OptimizerRef>& optimizers,
                       const Options& options = Options()) {
  initialize(std::vector<ModelRef>{std::move(model)}, optimizers, options);
}

/// Forgets every model, optimizer and scaler amp knows (models keep their dtypes; their
/// input/output casting and optimizers' skip hooks are removed). For tests and new runs.
void reset();
/// True after initialize (false again after reset()).
bool is_initialized();
/// The resolved properties of the last initialize.
const Properties& properties();

/// Options of scale_loss.
struct ScaleLossOptions {
  ScaleLossOptions& loss_id(int id) { loss_id_ = id; return *this; }
  /// Leave the gradients scaled (gradient accumulation); the last backward before step() must not delay.
  ScaleLossOptions& delay_unscale(bool on) { delay_unscale_ = on; return *this; }
  int loss_id_ = 0;
  bool delay_unscale_ = false;
};

/// What scale_loss returns: `.backward()` runs the whole amp backward.
class ScaledLoss {
 public:
  /// The loss times the current scale (f32), e.g. for logging.
  Tensor scaled() const;
  /// Scales, back-propagates, unscales into the (master) gradients, updates the scaler and,
  /// on overflow, makes the next step() of each optimizer a skipped step.
  void backward(bool retain_graph = false);

 private:
  friend ScaledLoss scale_loss(const Tensor&, const std::vector<OptimizerRef>&, const ScaleLossOptions&);
  Tensor loss_;
  std::vector<optim::Optimizer*> optimizers_;
  ScaleLossOptions options_;
  bool done_ = false;
};

/// apex's amp.scale_loss(loss, optimizer(s), loss_id, delay_unscale).
ScaledLoss scale_loss(const Tensor& loss, const std::vector<OptimizerRef>& optimizers,
                      const ScaleLossOptions& options = ScaleLossOptions());
inline ScaledLoss scale_loss(const Tensor& loss, optim::Optimizer& optimizer,
                             const ScaleLossOptions& options = ScaleLossOptions()) {
  return scale_loss(loss, std::vector<OptimizerRef>{optimizer}, options);
}

/// What the optimizer's steps update (FP32 masters of f16/bf16 parameters), e.g. for
/// clip_grad_norm_ after scale_loss(...).backward() has unscaled into them.
std::vector<Tensor> master_params(optim::Optimizer& optimizer);

/// Every loss scaler's state: "loss_scaler<i>.loss_scale" and "loss_scaler<i>.unskipped"
/// (apex's amp.state_dict(), flattened so mpx::save can store it; unskipped counts the clean
/// steps towards the next growth, 0 for a static scale).
std::map<std::string, double> state_dict();
/// Restores state_dict(); the number of scalers must match num_losses.
void load_state_dict(const std::map<std::string, double>& state);

/// The current scale of loss scaler `loss_id`.
double loss_scale(int loss_id = 0);
/// Steps of this optimizer skipped because of overflow since initialize.
int64_t skipped_steps(const optim::Optimizer& optimizer);
/// The last overflow diagnosis ("" when diagnosis is off or there was no overflow).
std::string last_diagnosis();
/// Where amp's messages go (default: std::cout, rank 0 only). For tests and loggers.
void set_message_sink(std::function<void(const std::string&)> sink);

}  // namespace mpx::amp
