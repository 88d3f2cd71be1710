// Run-time overrides of an op's autocast policy by its ops/ops.def name (apex's register_*_function).
#pragma once
#include <string>

namespace mpx::amp {

/// Runs the op named `name` (a row of ops/ops.def, e.g. "mm", "softmax") in the autocast dtype
/// (f16/bf16) from now on, in every thread. Throws mpx::Error for an unknown name, suggesting
/// names that contain it. Call before training; reset_function_registrations() undoes it.
void register_half_function(const std::string& name);
/// Runs the op in f32 under autocast.
void register_float_function(const std::string& name);
/// Runs the op in the widest floating dtype of its inputs under autocast.
void register_promote_function(const std::string& name);
/// Restores every op's policy to its ops/ops.def row.
void reset_function_registrations();

}  // namespace mpx::amp
