// Typed, range-checked reads of the string metadata of a safetensors file (what checkpoints keep).
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include "core/serialize.h"

namespace mpx::metadata {

/// The value of `key` as an integer in [lo, hi]. The text must be a plain decimal integer (an
/// optional '-' and digits; "1e300", "nan", "1.5" or " 3" are refused). A missing key, malformed
/// text or a value out of range is an mpx::Error naming the key, the value, the range and `file`.
int64_t get_int(const Metadata& meta, const std::string& key, const std::string& file, int64_t lo, int64_t hi);

/// The value of `key` as an unsigned 64-bit integer (digits only, any value up to 2^64 - 1), e.g.
/// an RNG seed or offset.
uint64_t get_u64(const Metadata& meta, const std::string& key, const std::string& file);

/// The value of `key` as a finite number in [lo, hi] ("nan", "inf" and trailing text are refused).
double get_double(const Metadata& meta, const std::string& key, const std::string& file,
                  double lo = -std::numeric_limits<double>::max(), double hi = std::numeric_limits<double>::max());

/// The text of `key`, or an mpx::Error naming the key and `file` when it is missing.
const std::string& get_string(const Metadata& meta, const std::string& key, const std::string& file);

}  // namespace mpx::metadata
