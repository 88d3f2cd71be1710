// For code ported from LibTorch: `torch::` names mpx, and LibTorch's check macros. Opt-in; <mpx/mpx.h> alone
// defines neither.
#pragma once

#include <algorithm>
#include <cassert>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>
#include <vector>
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
/// LibTorch's names for a dtype (`torch::Dtype`, `at::ScalarType`).
using Dtype = DType;
using ScalarType = DType;
/// LibTorch's short dtype constants (`torch::kF32`, `torch::kByte`).
inline constexpr DType kF16 = kFloat16;
inline constexpr DType kF32 = kFloat32;
inline constexpr DType kF64 = kFloat64;
inline constexpr DType kI32 = kInt32;
inline constexpr DType kI64 = kInt64;
inline constexpr DType kU8 = kUInt8;
inline constexpr DType kByte = kUInt8;
using std::nullopt;
using std::optional;
/// c10::intrusive_ptr and make_intrusive, which LibTorch's c10d returns and builds: std::shared_ptr here.
template <typename T>
using intrusive_ptr = std::shared_ptr<T>;
template <typename T, typename... Args>
std::shared_ptr<T> make_intrusive(Args&&... args) {
  return std::make_shared<T>(std::forward<Args>(args)...);
}
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

/// ATen's constant_pad_nd(x, pad, value): F::pad in constant mode.
inline Tensor constant_pad_nd(const Tensor& x, const IntArrayRef& pad, double value = 0.0) {
  return mpx::pad(x, pad, "constant", value);
}
/// LibTorch's out= forms (`torch::add_out(out, a, b)`): the result written into `out`, which must already have the
/// result's shape (mpx does not resize a tensor in place).
#define MPX_TORCH_OUT_FORM(op)                                                                              \
  inline Tensor& op##_out(Tensor& out, const Tensor& a, const Tensor& b) {                                 \
    Tensor r = mpx::op(a, b);                                                                               \
    MPX_CHECK(out.defined() && out.sizes() == r.sizes(), #op "_out: out is ",                               \
              out.defined() ? shape_str(out.sizes()) : std::string("undefined"), " but the result is ",    \
              shape_str(r.sizes()), "; pass an out of the result's shape (mpx does not resize it)");         \
    out.copy_(r);                                                                                           \
    return out;                                                                                             \
  }
MPX_TORCH_OUT_FORM(add)
MPX_TORCH_OUT_FORM(sub)
MPX_TORCH_OUT_FORM(mul)
MPX_TORCH_OUT_FORM(div)
MPX_TORCH_OUT_FORM(matmul)
#undef MPX_TORCH_OUT_FORM

namespace autograd {
using mpx::AutoGradMode;
using mpx::GradMode;
}  // namespace autograd
}  // namespace mpx

/// LibTorch's ATen and c10 namespaces, which its users spell as often as torch:: (`at::Tensor`, `c10::optional`).
namespace at = mpx;
namespace c10 = mpx;
