// The op registry's tables: names and policies from ops.def, and the kernel table.
#include "ops/dispatch.h"

#include <array>
#include <atomic>
#include <cstring>

#include "core/cuda_backend.h"

namespace mpx {
namespace {
constexpr const auto& kNames = kOpNames;
constexpr CastPolicy kDefaultPolicies[] = {
#define MPX_OP(name, policy, sig, cpu, cuda) CastPolicy::policy,
#include "ops/ops.def"
#undef MPX_OP
};
// The dtypes:: masks of ops/op_id.h index DType by its enumerator value.
static_assert(static_cast<int>(kFloat32) == 0 && static_cast<int>(kFloat16) == 1 && static_cast<int>(kBFloat16) == 2 &&
              static_cast<int>(kFloat64) == 3 && static_cast<int>(kInt64) == 4 && static_cast<int>(kInt32) == 5 &&
              static_cast<int>(kUInt8) == 6 && static_cast<int>(kBool) == 7);

std::array<std::atomic<CastPolicy>, kNumOps>& policies() {
  static std::array<std::atomic<CastPolicy>, kNumOps> p;
  static const bool init = [] {
    for (int i = 0; i < kNumOps; ++i) p[i].store(kDefaultPolicies[i]);
    return true;
  }();
  (void)init;
  return p;
}

// Dense (op, device, dtype) table: a lookup is three multiplies and a load.
void*& slot(OpId op, DeviceType dev, DType dt) {
  static void* table[kNumOps][kNumDeviceTypes][kNumDTypes] = {};
  return table[static_cast<int>(op)][static_cast<int>(dev)][static_cast<int>(dt)];
}
}  // namespace

const char* op_name(OpId op) { return kNames[static_cast<int>(op)]; }
const char* policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::lower: return "lower";
    case CastPolicy::fp32: return "fp32";
    case CastPolicy::promote: return "promote";
    case CastPolicy::none: return "none";
    case CastPolicy::banned: return "banned";
  }
  return "?";
}
CastPolicy op_policy(OpId op) { return policies()[static_cast<int>(op)].load(std::memory_order_relaxed); }
void set_op_policy(OpId op, CastPolicy p) { policies()[static_cast<int>(op)].store(p); }
void reset_op_policies() {
  for (int i = 0; i < kNumOps; ++i) policies()[i].store(kDefaultPolicies[i]);
}
bool find_op(const std::string& name, OpId* out) {
  for (int i = 0; i < kNumOps; ++i)
    if (name == kNames[i]) { *out = static_cast<OpId>(i); return true; }
  return false;
}

namespace dispatch {
namespace detail {
void register_raw(OpId op, DeviceType dev, DType dt, void* fn) { slot(op, dev, dt) = fn; }
void wrong_signature(OpId op) {
  MPX_ERROR(op_name(op), ": kernel looked up with a signature other than its ops.def row's");
}
}  // namespace detail
// CUDA kernels register as the CUDA module loads: a question about them loads it first.
bool has_kernel(OpId op, DeviceType dev, DType dt) {
  if (dev == DeviceType::kCUDA) cuda::detail::backend();
  return slot(op, dev, dt) != nullptr;
}
void* find_kernel(OpId op, DeviceType dev, DType dt) {
  void* fn = slot(op, dev, dt);
  if (fn) return fn;
  if (dev == DeviceType::kCUDA && cuda::detail::backend() && (fn = slot(op, dev, dt))) return fn;
  const char* dev_name = dev == DeviceType::kCPU ? "cpu" : "cuda";
  if (dev == DeviceType::kCUDA && !cuda_is_available())
    MPX_ERROR(op_name(op), ": no kernel for device cuda (mpx was built without CUDA or no GPU is visible); "
              "keep the tensors on the CPU");
  MPX_ERROR(op_name(op), ": no kernel for dtype ", dtype_name(dt), " on ", dev_name,
            "; convert the input with .to(mpx::kFloat32) or use a supported dtype");
}
}  // namespace dispatch
}  // namespace mpx
