// Internal to amp/: the pieces amp.cpp, opt_levels.cpp and diagnose.cpp share.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "amp/amp.h"

namespace mpx::amp::detail {

/// A scale as Python prints a float in apex's messages ("32768.0").
std::string num(double v);
/// apex's one-line description of an opt level.
const char* level_brief(const std::string& level);
/// The overrides set in `o`, one "  name = value" line each (apex's "Processing user overrides").
std::string overrides_str(const Options& o);

/// The inf/NaN flag (f32 0-dim, where the gradients are) of an optimizer's gradients, read
/// without unscaling them; undefined when it has no gradient.
Tensor check_finite(const optim::Optimizer& opt);
/// One line saying where loss `loss_id`'s overflow came from: the loss itself, or the first
/// parameter (in model order, then optimizer order) whose gradient is non-finite.
std::string diagnose_overflow(int loss_id, double scale_at_overflow, double new_scale, bool dynamic,
                              const Tensor& loss, const std::vector<optim::Optimizer*>& optimizers,
                              const std::vector<std::shared_ptr<nn::Module>>& models);

}  // namespace mpx::amp::detail
