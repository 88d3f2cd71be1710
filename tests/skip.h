// How a test that cannot run on this machine (no GPU, no MPI, a missing package) says so: skipped, never passed.
#pragma once
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mpx::testing {

/// Ends the running test case as skipped, naming why. Under CTest (tests/CMakeLists.txt sets
/// MPX_TEST_SKIP_EXIT and takes that exit code as "skipped"; each case runs in its own process)
/// the process exits with that code; run by hand it warns and returns, and the caller returns.
inline void skip_test(const std::string& why) {
  if (const char* code = std::getenv("MPX_TEST_SKIP_EXIT")) {
    std::fprintf(stderr, "skipped: %s\n", why.c_str());
    std::exit(std::atoi(code));
  }
  WARN("skipped: " << why);
}

}  // namespace mpx::testing
