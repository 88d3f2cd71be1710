// Where a test finds the source tree's test data and the built mpx binary, read at run time from the file that
// tests/CMakeLists.txt writes beside the test executables: no checkout's path is compiled into a test, so its
// object is the same (and ccache's) in every checkout.
#pragma once
#include <unistd.h>

#include <climits>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

namespace mpx::testing {

/// The value of `key` ("data": the source tree's tests/ folder; "cli": the built mpx binary) in
/// mpx_test_paths.txt beside the running executable.
inline const std::string& test_path(const std::string& key) {
  static const std::map<std::string, std::string> paths = [] {
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) throw std::runtime_error("tests: cannot read /proc/self/exe to find mpx_test_paths.txt");
    std::string file(exe, static_cast<size_t>(n));
    file = file.substr(0, file.rfind('/') + 1) + "mpx_test_paths.txt";
    std::ifstream in(file);
    if (!in)
      throw std::runtime_error("tests: " + file + " is missing; it is written by CMake when it configures the " +
                               "tests (run cmake on the build folder again)");
    std::map<std::string, std::string> m;
    for (std::string line; std::getline(in, line);)
      if (const size_t eq = line.find('='); eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
    return m;
  }();
  const auto it = paths.find(key);
  if (it == paths.end() || it->second.empty())
    throw std::runtime_error("tests: mpx_test_paths.txt has no '" + key + "=' line; reconfigure with cmake");
  return it->second;
}
/// The source tree's tests/ folder (golden files under golden/).
inline const std::string& test_data_dir() { return test_path("data"); }
/// The built mpx command line.
inline const std::string& cli_path() { return test_path("cli"); }

}  // namespace mpx::testing
