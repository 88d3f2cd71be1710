// mpx::Error and MPX_CHECK: every user-facing failure names what went wrong and what to do.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace mpx {

/// The one exception type the library throws for bad input or unavailable features.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace mpx

/// Throws mpx::Error with the streamed arguments when `cond` is false.
#define MPX_CHECK(cond, ...)                                           \
  do {                                                                 \
    if (!(cond)) throw ::mpx::Error(::mpx::detail::str_cat(__VA_ARGS__)); \
  } while (0)

/// Throws mpx::Error unconditionally.
#define MPX_ERROR(...) throw ::mpx::Error(::mpx::detail::str_cat(__VA_ARGS__))
