// Internal to amp/: the pieces amp.cpp and opt_levels.cpp share.
#pragma once
#include <string>

#include "amp/amp.h"

namespace mpx::amp::detail {

/// A scale as Python prints a float in apex's messages ("32768.0").
std::string num(double v);
/// apex's one-line description of an opt level.
const char* level_brief(const std::string& level);
/// The overrides set in `o`, one "  name = value" line each (apex's "Processing user overrides").
std::string overrides_str(const Options& o);

}  // namespace mpx::amp::detail
