// Shared by the amp tests (test_amp.cpp: the front end; test_amp_scaling.cpp: loss scaling): a small net with batch norm and a sink that captures amp's messages.
#pragma once
#include <string>
#include <vector>

#include <mpx/mpx.h>

namespace mpx::testing {

struct NetImpl : nn::Module {
  explicit NetImpl(bool bn = true) {
    fc1 = register_module("fc1", nn::Linear(8, 16));
    if (bn) norm = register_module("norm", nn::BatchNorm1d(16));
    fc2 = register_module("fc2", nn::Linear(16, 4));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = fc1(x);
    if (!norm.is_empty()) h = norm(h);
    return fc2(nn::functional::relu(h));
  }
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::BatchNorm1d norm{nullptr};
};
MPX_MODULE(Net);

/// amp's messages since the latest sink_to_captured().
inline std::vector<std::string>& captured() {
  static std::vector<std::string> lines;
  return lines;
}
inline void sink_to_captured() {
  captured().clear();
  amp::set_message_sink([](const std::string& s) { captured().push_back(s); });
}
inline bool any_contains(const std::string& needle) {
  for (const auto& l : captured())
    if (l.find(needle) != std::string::npos) return true;
  return false;
}
/// A detached copy of t's current values.
inline Tensor snapshot(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().clone();
}

}  // namespace mpx::testing
