// Helpers of the command-line tests: run the built mpx binary and read the files it writes.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#ifndef MPX_CLI_PATH
#error "tests/CMakeLists.txt defines MPX_CLI_PATH (the built mpx binary) for this test"
#endif

namespace mpx::testing {

struct CliRun {
  int rc = -1;
  std::string out;  // stdout and stderr together, unless the command redirects
};

/// Runs `mpx <args>` through the shell (plain progress lines) and captures output and exit code.
inline CliRun run_mpx(const std::string& args, const std::string& redirect = "2>&1") {
  const std::string cmd = std::string("MPX_PROGRESS=plain '") + MPX_CLI_PATH + "' " + args + " " + redirect;
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

/// Only stderr (stdout discarded): what a user sees when something is wrong.
inline CliRun mpx_err(const std::string& args) { return run_mpx(args, "2>&1 1>/dev/null"); }

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

}  // namespace mpx::testing
