// DType: the element types mpx tensors can hold, their sizes, names and promotion rules.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace mpx {

/// Element type of a tensor. The order is part of the kernel table layout.
enum class DType : uint8_t { kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8, kBool };
inline constexpr int kNumDTypes = 8;

inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kFloat16 = DType::kFloat16;
inline constexpr DType kBFloat16 = DType::kBFloat16;
inline constexpr DType kFloat64 = DType::kFloat64;
inline constexpr DType kInt64 = DType::kInt64;
inline constexpr DType kInt32 = DType::kInt32;
inline constexpr DType kUInt8 = DType::kUInt8;
inline constexpr DType kBool = DType::kBool;
// LibTorch spellings, so code ported from it keeps compiling.
inline constexpr DType kFloat = DType::kFloat32;
inline constexpr DType kHalf = DType::kFloat16;
inline constexpr DType kDouble = DType::kFloat64;
inline constexpr DType kLong = DType::kInt64;
inline constexpr DType kInt = DType::kInt32;

/// Bytes per element.
constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: return 4;
    case DType::kFloat16: case DType::kBFloat16: return 2;
    case DType::kFloat64: case DType::kInt64: return 8;
    case DType::kUInt8: case DType::kBool: return 1;
  }
  return 0;
}

/// True for f32, f16, bf16 and f64.
constexpr bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}
/// True for the 16-bit floating types that mixed precision works with.
constexpr bool is_reduced_float(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

/// Short name used in error messages ("f32", "bf16", ...).
const char* dtype_name(DType t);
/// Prints dtype_name (`std::cout << t.dtype()`).
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
/// Parses "f32"/"float32"/"float", "f16"/"half", "bf16", ...; throws mpx::Error otherwise.
DType dtype_from_name(const std::string& name);

/// PyTorch's type promotion for two tensor operands: floating beats integral, wider beats
/// narrower; f16 with bf16 gives f32 (neither holds the other).
DType promote_types(DType a, DType b);

}  // namespace mpx
