// Typed, range-checked reads of safetensors metadata: every field a checkpoint gives back is checked.
#include "core/metadata.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace mpx::metadata {
namespace {
// Metadata values are arbitrary text from a file: quote them safely in messages.
std::string shown(const std::string& v) {
  std::string r;
  for (char c : v.substr(0, 40)) r += (c >= 0x20 && c < 0x7f) ? c : '?';
  return "\"" + r + (v.size() > 40 ? "...\"" : "\"");
}

[[noreturn]] void bad(const std::string& key, const std::string& file, const std::string& value, const std::string& want) {
  MPX_ERROR("checkpoint ", file, ": field \"", key, "\" is ", shown(value), ", expected ", want,
            "; the file is damaged or was not written by mpx (start without it, or use a good copy)");
}

bool all_digits(const std::string& s, size_t from) {
  if (s.size() <= from || s.size() - from > 20) return false;
  for (size_t i = from; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}
}  // namespace

const std::string& get_string(const Metadata& meta, const std::string& key, const std::string& file) {
  auto it = meta.find(key);
  MPX_CHECK(it != meta.end(), "checkpoint ", file, " lacks the field \"", key,
            "\": it was not written by this mpx version's checkpointing; start without it");
  return it->second;
}

int64_t get_int(const Metadata& meta, const std::string& key, const std::string& file, int64_t lo, int64_t hi) {
  const std::string& v = get_string(meta, key, file);
  const std::string want = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (!all_digits(v, v.size() && v[0] == '-' ? 1 : 0)) bad(key, file, v, want);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0' || x < lo || x > hi) bad(key, file, v, want);
  return x;
}

uint64_t get_u64(const Metadata& meta, const std::string& key, const std::string& file) {
  const std::string& v = get_string(meta, key, file);
  const char* want = "an unsigned 64-bit integer";
  if (!all_digits(v, 0)) bad(key, file, v, want);
  errno = 0;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') bad(key, file, v, want);
  return x;
}

double get_double(const Metadata& meta, const std::string& key, const std::string& file, double lo, double hi) {
  const std::string& v = get_string(meta, key, file);
  auto g = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return std::string(buf);
  };
  const std::string want = std::string("a finite number") +
                           (lo > -std::numeric_limits<double>::max() ? " >= " + g(lo) : std::string()) +
                           (hi < std::numeric_limits<double>::max() ? " <= " + g(hi) : std::string());
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0]))) bad(key, file, v, want);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || !std::isfinite(x) || x < lo || x > hi) bad(key, file, v, want);
  return x;
}

}  // namespace mpx::metadata
