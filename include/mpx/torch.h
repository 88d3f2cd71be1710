// For code ported from LibTorch: `torch::` names mpx, and LibTorch's check macros. Opt-in; <mpx/mpx.h> alone
// defines neither.
#pragma once

#include <mpx/mpx.h>

/// `torch::nn::Linear`, `torch::data::make_data_loader`, `torch::kCPU`, ...: LibTorch code compiles unchanged.
namespace torch = mpx;

/// LibTorch's TORCH_CHECK(cond, message...): throws mpx::Error naming the condition and the message.
#define TORCH_CHECK(cond, ...) MPX_CHECK(cond, "TORCH_CHECK(" #cond ") failed" __VA_OPT__(": ", ) __VA_ARGS__)
/// LibTorch's AT_ASSERT(cond): as TORCH_CHECK.
#define AT_ASSERT(cond, ...) MPX_CHECK(cond, "AT_ASSERT(" #cond ") failed" __VA_OPT__(": ", ) __VA_ARGS__)
