// The op registry: OpId and policies generated from ops.def, and the dense kernel table.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace mpx {

/// One id per row of ops/ops.def.
enum class OpId : uint16_t {
#define MPX_OP(name, policy) name,
#include "ops/ops.def"
#undef MPX_OP
  kCount
};
inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

/// How the autocast stage treats an op's floating inputs (see ops/ops.def).
enum class CastPolicy : uint8_t { lower, fp32, promote, none, banned };

const char* op_name(OpId op);
const char* policy_name(CastPolicy p);
/// The op's current policy: its ops.def row unless overridden at run time.
CastPolicy op_policy(OpId op);
/// Overrides an op's policy at run time (amp::register_*_function uses this).
void set_op_policy(OpId op, CastPolicy p);
/// Restores every op's policy to its ops.def row.
void reset_op_policies();
/// Looks an op up by its ops.def name; returns false when there is none.
bool find_op(const std::string& name, OpId* out);

namespace dispatch {
/// Registers a kernel; later registrations replace earlier ones.
void register_kernel(OpId op, DeviceType dev, DType dt, void* fn);
/// The kernel for (op, device, dtype); throws mpx::Error naming all three when missing.
void* find_kernel(OpId op, DeviceType dev, DType dt);
bool has_kernel(OpId op, DeviceType dev, DType dt);

namespace detail {
extern std::atomic<bool> g_profiling;
// Times one kernel call for mpx::profiler (ops/profiler.h); only made while it records.
class ProfileScope {
 public:
  ProfileScope(OpId op, Device dev, DType dt);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  int slot_ = -1;  // -1: not recorded (nested in another kernel, or a CUDA graph capture)
};
}  // namespace detail

template <typename Fn> class KernelRef;
/// A looked-up kernel: calling it runs the kernel, timed by mpx::profiler while that records
/// (one relaxed atomic load otherwise). Converts to the bare function pointer, which is never timed.
template <typename R, typename... A>
class KernelRef<R (*)(A...)> {
 public:
  using Fn = R (*)(A...);
  KernelRef() = default;
  KernelRef(Fn fn, OpId op, Device dev, DType dt) : fn_(fn), op_(op), dev_(dev), dt_(dt) {}
  R operator()(A... a) const {
    if (!detail::g_profiling.load(std::memory_order_relaxed)) return fn_(std::forward<A>(a)...);
    detail::ProfileScope timed(op_, dev_, dt_);
    return fn_(std::forward<A>(a)...);
  }
  explicit operator bool() const { return fn_ != nullptr; }
  operator Fn() const { return fn_; }  // NOLINT: bare pointers for code that stores kernels

 private:
  Fn fn_ = nullptr;
  OpId op_{};
  Device dev_;
  DType dt_{};
};

/// Typed lookup: Fn is the kernel signature the op's family header declares.
template <typename Fn>
KernelRef<Fn> kernel(OpId op, Device dev, DType dt) {
  return KernelRef<Fn>(reinterpret_cast<Fn>(find_kernel(op, dev.type, dt)), op, dev, dt);
}

/// Registers `K<T>::run` for each T in Ts (one kernel template, many dtypes).
template <template <typename> class K, typename... Ts>
void register_types(OpId op, DeviceType dev) {
  (register_kernel(op, dev, dtype_v<Ts>, reinterpret_cast<void*>(&K<Ts>::run)), ...);
}
}  // namespace dispatch

/// Static registrar for kernel files: `MPX_REGISTER_KERNELS(cpu_elementwise) { ... }`.
#define MPX_REGISTER_KERNELS(tag)                                  \
  static void mpx_register_##tag();                                \
  static const bool mpx_registered_##tag = (mpx_register_##tag(), true); \
  static void mpx_register_##tag()

}  // namespace mpx
