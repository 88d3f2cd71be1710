// apex's opt-level table, its override rules, and the tables amp prints at initialize.
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "amp/amp.h"
#include "amp/amp_internal.h"

namespace mpx::amp {
namespace {

const char* kLevels = "'O0', 'O1', 'O2', 'O3'";

std::string dt(std::optional<DType> t) { return t ? dtype_name(*t) : "None"; }
std::string ob(std::optional<bool> b) { return b ? (*b ? "True" : "False") : "None"; }

}  // namespace

namespace detail {

// Scales print as Python floats do in apex's message ("32768.0").
std::string num(double v) {
  std::ostringstream os;
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e16) {
    os.precision(17);
    os << v << ".0";
  } else {
    os << v;
  }
  return os.str();
}

const char* level_brief(const std::string& l) {
  if (l == "O0") return "Pure FP32 training.";
  if (l == "O1") return "Insert automatic casts around mpx ops (autocast in the model's forward).";
  if (l == "O2") return "Low precision training with FP32 batchnorm and FP32 master weights.";
  return "Pure low precision training.";
}

std::string overrides_str(const Options& o) {
  std::ostringstream os;
  if (o.cast_model_type_) os << "  cast_model_type = " << dtype_name(*o.cast_model_type_) << "\n";
  if (o.keep_model_dtypes_) os << "  cast_model_type = False (keep_model_dtypes)\n";
  if (o.patch_functions_) os << "  patch_functions = " << ob(o.patch_functions_) << "\n";
  if (o.keep_batchnorm_fp32_) os << "  keep_batchnorm_fp32 = " << ob(o.keep_batchnorm_fp32_) << "\n";
  if (o.master_weights_) os << "  master_weights = " << ob(o.master_weights_) << "\n";
  if (o.loss_scale_) os << "  loss_scale = " << num(*o.loss_scale_) << "\n";
  if (o.loss_scale_str_) os << "  loss_scale = " << *o.loss_scale_str_ << "\n";
  if (o.cast_model_outputs_) os << "  cast_model_outputs = " << dtype_name(*o.cast_model_outputs_) << "\n";
  if (o.num_losses_ != 1) os << "  num_losses = " << o.num_losses_ << "\n";
  if (o.min_loss_scale_ != 0) os << "  min_loss_scale = " << num(o.min_loss_scale_) << "\n";
  if (o.max_loss_scale_ != 16777216.0) os << "  max_loss_scale = " << num(o.max_loss_scale_) << "\n";
  if (o.dtype_ != kFloat16) os << "  dtype = " << dtype_name(o.dtype_) << "\n";
  if (o.stochastic_rounding_) os << "  stochastic_rounding = True\n";
  if (o.low_precision_state_) os << "  low_precision_state = True\n";
  return os.str();
}

}  // namespace detail

using detail::num;

std::string Properties::str() const {
  std::ostringstream os;
  os << "enabled                : " << (enabled ? "True" : "False") << "\n"
     << "opt_level              : " << opt_level << "\n"
     << "cast_model_type        : " << dt(cast_model_type) << "\n"
     << "patch_functions        : " << (patch_functions ? "True" : "False") << "\n"
     << "keep_batchnorm_fp32    : " << ob(keep_batchnorm_fp32) << "\n"
     << "master_weights         : " << ob(master_weights) << "\n"
     << "loss_scale             : " << (dynamic_loss_scale ? std::string("dynamic") : num(loss_scale)) << "\n";
  // Beyond apex's table: printed only when on, so the table stays apex's otherwise.
  if (stochastic_rounding)
    os << "stochastic_rounding    : True" << (low_precision_state ? " (low-precision optimizer state)" : "") << "\n";
  return os.str();
}

Properties opt_level_defaults(const std::string& level, DType low) {
  MPX_CHECK(is_reduced_float(low), "amp: dtype must be kFloat16 or kBFloat16, got ", dtype_name(low));
  bool zero_typo = !level.empty() && level[0] == '0';
  MPX_CHECK(level == "O0" || level == "O1" || level == "O2" || level == "O3", "amp: unexpected optimization level \"",
            level, "\". Options are ", kLevels, ".",
            zero_typo ? " Note that in \"O0\", \"O1\", etc., the prefix O is the letter O, not the number zero." : "");
  Properties p;
  p.opt_level = level;
  if (level == "O0") {
    p.cast_model_type = kFloat32;
    p.master_weights = false;
    p.loss_scale = 1.0;
  } else if (level == "O1") {
    p.patch_functions = true;
    p.dynamic_loss_scale = true;
    p.loss_scale = 0;
  } else if (level == "O2") {
    p.cast_model_type = low;
    p.keep_batchnorm_fp32 = true;
    p.master_weights = true;
    p.dynamic_loss_scale = true;
    p.loss_scale = 0;
  } else {
    p.cast_model_type = low;
    p.keep_batchnorm_fp32 = false;
    p.master_weights = false;
    p.loss_scale = 1.0;
  }
  if (low == kBFloat16 && p.dynamic_loss_scale) {
    // bf16 has f32's exponent range: gradients that fit f32 fit bf16, so scaling them buys
    // nothing (PyTorch's bf16 autocast recipe has no GradScaler; ROCm apex's bf16 levels use 1).
    // Dynamic scaling stays available on request (loss_scale("dynamic")).
    p.dynamic_loss_scale = false;
    p.loss_scale = 1.0;
  }
  return p;
}

Properties Options::resolve() const {
  Properties p = opt_level_defaults(opt_level_, dtype_);
  p.enabled = enabled_;
  const bool o1 = opt_level_ == "O1";
  if (cast_model_type_) {
    const DType t = *cast_model_type_;
    MPX_CHECK(t == kFloat32 || is_reduced_float(t), "amp: cast_model_type must be kFloat32, kFloat16 or kBFloat16, got ",
              dtype_name(t));
    MPX_CHECK(!o1 || t == kFloat32,
              "amp: O1 inserts casts around ops rather than casting the model weights, so with O1 the model weights "
              "themselves should remain FP32. If you wish to cast the model to a different type, use opt_level "
              "\"O2\" or \"O3\". cast_model_type was ",
              dtype_name(t));
    MPX_CHECK(!is_reduced_float(t) || t == dtype_, "amp: cast_model_type ", dtype_name(t), " differs from dtype ",
              dtype_name(dtype_), "; mixing f16 and bf16 is not supported: set dtype(", dtype_name(t),
              ") to choose the low precision type for every level");
    p.cast_model_type = t;
  }
  if (keep_model_dtypes_) {
    MPX_CHECK(!cast_model_type_, "amp: keep_model_dtypes() and cast_model_type(", dtype_name(*cast_model_type_),
              ") contradict each other; set one of them");
    p.cast_model_type.reset();
  }
  if (patch_functions_) {
    MPX_CHECK(!*patch_functions_ || o1,
              "amp: patch_functions(true) should only be set by selecting opt_level \"O1\" (it is O1's autocast); "
              "with ", opt_level_, " the model itself is cast. Drop the override or use O1");
    p.patch_functions = *patch_functions_;
  }
  if (keep_batchnorm_fp32_) {
    MPX_CHECK(!o1, "amp: with opt_level O1, batch norm runs in FP32 automatically (its ops are fp32 in autocast), so "
                   "keep_batchnorm_fp32 should not be set. keep_batchnorm_fp32 was ",
              *keep_batchnorm_fp32_ ? "true" : "false", "; drop the override or use O2/O3");
    p.keep_batchnorm_fp32 = *keep_batchnorm_fp32_;
  }
  if (master_weights_) {
    MPX_CHECK(!o1, "amp: it doesn't make sense to use master_weights with O1: with O1 the model weights themselves "
                   "are FP32. Drop the master_weights override or use O2");
    p.master_weights = *master_weights_;
  }
  if (loss_scale_str_) {
    if (*loss_scale_str_ == "dynamic") {
      p.dynamic_loss_scale = true;
      p.loss_scale = 0;
    } else {
      char* end = nullptr;
      const double v = std::strtod(loss_scale_str_->c_str(), &end);
      MPX_CHECK(!loss_scale_str_->empty() && end && *end == '\0', "amp: loss_scale must be \"dynamic\" or a number, got \"",
                *loss_scale_str_, "\"");
      p.dynamic_loss_scale = false;
      p.loss_scale = v;
    }
  } else if (loss_scale_) {
    p.dynamic_loss_scale = false;
    p.loss_scale = *loss_scale_;
  }
  if (!p.dynamic_loss_scale) {
    MPX_CHECK(std::isfinite(p.loss_scale) && p.loss_scale > 0, "amp: a static loss_scale must be positive and finite, got ",
              p.loss_scale, "; use loss_scale(\"dynamic\") to let amp choose");
    // The scaled loss's gradient enters the model in the model's dtype: a scale that dtype cannot
    // hold makes every gradient inf, so every step would be skipped.
    const DType model_dtype = p.cast_model_type.value_or(kFloat32);
    const double limit = model_dtype == kFloat16 ? 65504.0 : model_dtype == kBFloat16 ? 3.3895313892515355e38 : 3.4028234663852886e38;
    MPX_CHECK(p.loss_scale <= limit, "amp: the static loss_scale ", num(p.loss_scale), " is larger than ",
              dtype_name(model_dtype), " can represent (", num(limit), "), the dtype of the model at ", opt_level_,
              ", so every gradient would overflow; use a smaller scale or loss_scale(\"dynamic\")");
  }
  MPX_CHECK(num_losses_ >= 1, "amp: num_losses must be at least 1, got ", num_losses_);
  MPX_CHECK(min_loss_scale_ >= 0 && std::isfinite(min_loss_scale_), "amp: min_loss_scale must be >= 0 (0: no floor), got ",
            min_loss_scale_);
  MPX_CHECK(max_loss_scale_ > 0 && max_loss_scale_ >= min_loss_scale_, "amp: max_loss_scale (", max_loss_scale_,
            ") must be positive and at least min_loss_scale (", min_loss_scale_, ")");
  if (cast_model_outputs_)
    MPX_CHECK(is_floating(*cast_model_outputs_), "amp: cast_model_outputs must be a floating dtype, got ",
              dtype_name(*cast_model_outputs_));
  MPX_CHECK(!low_precision_state_ || stochastic_rounding_, "amp: low_precision_state(true) keeps the optimizer state "
            "of f16/bf16 parameters in their dtype under stochastic rounding; add stochastic_rounding(true) (without "
            "it and without masters the state is in the parameters' dtype anyway)");
  if (stochastic_rounding_) {
    MPX_CHECK(opt_level_ == "O2" || opt_level_ == "O3", "amp: stochastic_rounding rounds the f16/bf16 parameters of a "
              "model without FP32 master weights, and at ", opt_level_, " the model weights stay f32; use O3, or O2 "
              "with master_weights(false)");
    MPX_CHECK(!p.master_weights.value_or(false), "amp: stochastic_rounding replaces FP32 master weights, which ",
              opt_level_, " keeps", master_weights_ ? " (master_weights(true) was set)" : " by default",
              "; with masters every update is kept exactly and the rounding would be moot. Add master_weights(false) "
              "(the bf16 recipe: O2's f32 batch norms, no masters) or drop stochastic_rounding");
    p.stochastic_rounding = true;
    p.low_precision_state = low_precision_state_;
  }
  return p;
}

}  // namespace mpx::amp
