// For code ported from LibTorch: `torch::` names mpx, and LibTorch's check macros. Opt-in; <mpx/mpx.h> alone
// defines neither.
#pragma once

#include <cassert>
#include <optional>
#include <string>

#include <mpx/mpx.h>

/// `torch::nn::Linear`, `torch::data::make_data_loader`, `torch::kCPU`, ...: LibTorch code compiles unchanged.
namespace torch = mpx;

/// LibTorch's TORCH_CHECK(cond, message...): throws mpx::Error naming the condition and the message.
#define TORCH_CHECK(cond, ...) MPX_CHECK(cond, "TORCH_CHECK(" #cond ") failed" __VA_OPT__(": ", ) __VA_ARGS__)
/// LibTorch's AT_ASSERT(cond): as TORCH_CHECK.
#define AT_ASSERT(cond, ...) MPX_CHECK(cond, "AT_ASSERT(" #cond ") failed" __VA_OPT__(": ", ) __VA_ARGS__)

/// LibTorch's TORCH_MODULE(Name): `class Name` holding a std::shared_ptr<NameImpl> (mpx's MPX_MODULE).
#define TORCH_MODULE(Name) MPX_MODULE(Name)

namespace mpx {
/// LibTorch's name for a list of sizes, and its c10::optional (std::optional).
using IntArrayRef = IntList;
using std::nullopt;
using std::optional;
/// LibTorch's c10::str: its arguments streamed into one string (`torch::str("sample-", n, ".pt")`).
template <typename... Args>
std::string str(const Args&... args) {
  return detail::str_cat(args...);
}

/// LibTorch's torch::InferenceMode: no graph is recorded in its scope (mpx has no separate inference tensors).
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true) : mode_(!enabled) {}

 private:
  AutoGradMode mode_;
};

// LibTorch's option constants at torch:: level (`.reduction(torch::kSum)`, `kaiming_normal_(w, 0, torch::kFanOut,
// torch::kReLU)`, `.mode(torch::kBilinear)`).
using nn::kCircular;
using nn::kMean;
using nn::kNone;
using nn::kReflect;
using nn::kReplicate;
using nn::kSum;
using nn::init::kFanIn;
using nn::init::kFanOut;
using nn::init::kGELU;
using nn::init::kLeakyReLU;
using nn::init::kLinear;
using nn::init::kReLU;
using nn::init::kSELU;
using nn::init::kSigmoid;
using nn::init::kTanh;
inline constexpr const char* kNearest = "nearest";
inline constexpr const char* kNearestExact = "nearest-exact";
inline constexpr const char* kBilinear = "bilinear";
inline constexpr const char* kTrilinear = "trilinear";

namespace autograd {
using mpx::AutoGradMode;
using mpx::GradMode;
}  // namespace autograd
}  // namespace mpx

/// LibTorch's ATen and c10 namespaces, which its users spell as often as torch:: (`at::Tensor`, `c10::optional`).
namespace at = mpx;
namespace c10 = mpx;
