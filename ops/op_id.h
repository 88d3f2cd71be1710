// OpId, the op names and the dtype-set tokens, generated from ops/ops.def; plain C++17 so CUDA kernel files can use them.
#pragma once
#include <cstdint>

namespace mpx {

/// One id per row of ops/ops.def.
enum class OpId : uint16_t {
#define MPX_OP(name, policy, sig, cpu, cuda) name,
#include "ops/ops.def"
#undef MPX_OP
  kCount
};
inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

/// The op's ops.def name (the name in error messages, the profiler and amp's registration calls).
inline constexpr const char* kOpNames[] = {
#define MPX_OP(name, policy, sig, cpu, cuda) #name,
#include "ops/ops.def"
#undef MPX_OP
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kNumOps, "ops.def rows and OpId disagree");

/// The dtype sets an ops.def row promises kernels for, one bit per DType in DType's order
/// (f32, f16, bf16, f64, i64, i32, u8, bool; checked in ops/dispatch.cpp).
namespace dtypes {
inline constexpr uint32_t no = 0;                 // no kernel: the op is composite (or this device has none)
inline constexpr uint32_t f32 = 1u << 0;
inline constexpr uint32_t f32_f64 = f32 | 1u << 3;
inline constexpr uint32_t floats = 0xFu;          // f32, f16, bf16, f64
inline constexpr uint32_t floats_i64 = floats | 1u << 4;
inline constexpr uint32_t sints = floats | 1u << 4 | 1u << 5;  // floats, i64, i32
inline constexpr uint32_t numeric = sints | 1u << 6;            // and u8
inline constexpr uint32_t all = numeric | 1u << 7;              // and bool
inline constexpr uint32_t cudnn = floats | 1u << 31;            // floats, where mpx was built with cuDNN
}  // namespace dtypes

/// The kernels each row promises on the CPU and on CUDA (dtypes:: masks).
inline constexpr uint32_t kCpuDTypes[] = {
#define MPX_OP(name, policy, sig, cpu, cuda) dtypes::cpu,
#include "ops/ops.def"
#undef MPX_OP
};
inline constexpr uint32_t kCudaDTypes[] = {
#define MPX_OP(name, policy, sig, cpu, cuda) dtypes::cuda,
#include "ops/ops.def"
#undef MPX_OP
};

}  // namespace mpx
