// Helpers of the command-line tests: run the built mpx binary and read the files it writes.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/serialize.h"
#include "data/datasets.h"
#include "tests/paths.h"
#include "tests/skip.h"

namespace mpx::testing {

struct CliRun {
  int rc = -1;
  std::string out;  // stdout and stderr together, unless the command redirects
};

/// Runs a whole shell command line and captures what it prints to stdout and its exit code.
inline CliRun run_shell(const std::string& cmd) {
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// Runs `mpx <args>` through the shell (plain progress lines) and captures output and exit code.
/// `prefix` goes before the command (e.g. "cd DIR &&", "timeout -s TERM 3").
inline CliRun run_mpx(const std::string& args, const std::string& redirect = "2>&1", const std::string& prefix = "") {
  return run_shell(prefix + " env MPX_PROGRESS=plain '" + mpx::testing::cli_path() + "' " + args + " " + redirect);
}

/// Only stderr (stdout discarded): what a user sees when something is wrong.
inline CliRun mpx_err(const std::string& args) { return run_mpx(args, "2>&1 1>/dev/null"); }

/// `mpx <args>` run from the folder `cwd` (relative paths, and the default --out, land there).
inline CliRun run_mpx_in(const std::string& cwd, const std::string& args) {
  return run_mpx(args, "2>&1", "cd '" + cwd + "' &&");
}

/// mpx_err() as a user without special rights: root reads and writes anything, so a test of a
/// permission problem runs as "nobody" there (through setpriv). rc -1 when that is impossible.
inline CliRun mpx_err_unprivileged(const std::string& args) {
  if (geteuid() != 0) return mpx_err(args);
  if (std::system("command -v setpriv >/dev/null 2>&1") != 0) return {};
  return run_mpx(args, "2>&1 1>/dev/null", "setpriv --reuid=65534 --regid=65534 --clear-groups");
}

/// `p` in single quotes, for a shell command line.
inline std::string q(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

/// Whether `s` contains `part`.
inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// Whether Fashion-MNIST is installed; otherwise the test is skipped (skip_test; it then returns).
inline bool have_fashion() {
  if (std::filesystem::exists(mpx::data::kFashionMnistDir)) return true;
  skip_test("Fashion-MNIST not installed (Debian package dataset-fashion-mnist)");
  return false;
}

/// A whole file as a string.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A fresh, empty folder `name` under this test program's own temp folder (<tmp>/<prefix><pid>),
/// which is removed when the program exits.
inline std::filesystem::path cli_temp_dir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  static const fs::path root = fs::temp_directory_path() / (prefix + std::to_string(getpid()));
  static const struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(root, ec);
    }
  } cleanup;
  (void)cleanup;
  const fs::path d = root / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// Every "model." tensor of two checkpoints is the same, bit for bit.
inline void require_same_model(const std::filesystem::path& a, const std::filesystem::path& b) {
  const mpx::TensorDict ta = mpx::load_tensors(a.string()), tb = mpx::load_tensors(b.string());
  int compared = 0;
  for (const auto& [name, t] : ta) {
    if (name.rfind("model.", 0) != 0) continue;
    INFO(name);
    REQUIRE(tb.count(name) == 1);
    const mpx::Tensor x = t.contiguous(), y = tb.at(name).contiguous();
    REQUIRE(y.numel() == x.numel());
    REQUIRE(y.dtype() == x.dtype());
    CHECK(std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * x.element_size()) == 0);
    ++compared;
  }
  CHECK(compared > 0);
}

}  // namespace mpx::testing
