// Shared by the fuzz targets: a per-process scratch file for parsers that read paths, and the rule
// that a parser may only fail with mpx::Error.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace mpx::fuzz {

/// Writes the input to a file of this process (under TMPDIR) with the given name suffix and
/// returns its path; the same path is reused by every run of the process.
inline std::string scratch_file(const uint8_t* data, size_t size, const std::string& suffix) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/mpx-fuzz-" + std::to_string(::getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();  // the harness itself is broken, not the parser
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

/// Reads every byte a parsed tensor claims, so that a size or offset the parser got wrong shows
/// up under ASan; returns a sum the caller keeps.
inline uint64_t touch(const mpx::Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

/// Runs a parser: mpx::Error is its documented way to refuse input; anything else (another
/// exception type, a crash, a sanitizer report) is a finding.
template <typename F>
void expect_clean_failure(F&& parse) {
  try {
    parse();
  } catch (const mpx::Error&) {
  }
}

}  // namespace mpx::fuzz
