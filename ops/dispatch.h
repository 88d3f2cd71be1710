// The op registry: policies and kernel signatures generated from ops.def, and the dense kernel table.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/amp.h"
#include "ops/attention_kernels.h"
#include "ops/conv.h"
#include "ops/ctc.h"
#include "ops/elementwise.h"
#include "ops/index_kernels.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/op_id.h"
#include "ops/optim_kernels.h"
#include "ops/pad.h"
#include "ops/pooling.h"
#include "ops/reduction.h"
#include "ops/resize.h"
#include "ops/rnn_kernels.h"

namespace mpx {

namespace kernels {
/// The signature column of an ops.def row whose op is built from other ops: no kernel can have it.
struct CompositeTag;
using Composite = void (*)(CompositeTag*);
}  // namespace kernels

/// OpSig<OpId::x>::type is the function-pointer type of op x's kernels (its ops.def row).
template <OpId Op> struct OpSig;
#define MPX_OP(name, policy, sig, cpu, cuda) \
  template <> struct OpSig<OpId::name> { using type = kernels::sig; };
#include "ops/ops.def"
#undef MPX_OP
template <OpId Op> using op_fn_t = typename OpSig<Op>::type;
/// True when Fn is the kernel type of op's row (for lookups whose op is a run-time value).
template <typename Fn> inline constexpr bool kSigMatches[kNumOps] = {
#define MPX_OP(name, policy, sig, cpu, cuda) std::is_same_v<Fn, kernels::sig>,
#include "ops/ops.def"
#undef MPX_OP
};
/// True when the op's row names no kernel signature (built from other ops).
inline constexpr bool is_composite(OpId op) { return kSigMatches<kernels::Composite>[static_cast<int>(op)]; }

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
/// The kernel for (op, device, dtype), untyped; throws mpx::Error naming all three when missing.
void* find_kernel(OpId op, DeviceType dev, DType dt);
bool has_kernel(OpId op, DeviceType dev, DType dt);

namespace detail {
void register_raw(OpId op, DeviceType dev, DType dt, void* fn);
[[noreturn]] void wrong_signature(OpId op);
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

/// Registers a kernel of op `Op`; later registrations replace earlier ones. A function whose
/// type is not the op's ops.def signature does not compile (the parameter takes no other type).
/// A composite row takes no kernel at all.
template <OpId Op>
  requires(!std::is_same_v<op_fn_t<Op>, kernels::Composite>)
void register_kernel(DeviceType dev, DType dt, std::type_identity_t<op_fn_t<Op>> fn) {
  detail::register_raw(Op, dev, dt, reinterpret_cast<void*>(fn));
}

/// Registers `K<T>::run` for each T in Ts (one kernel template, many dtypes).
template <OpId Op, template <typename> class K, typename... Ts>
void register_types(DeviceType dev) {
  (register_kernel<Op>(dev, dtype_v<Ts>, &K<Ts>::run), ...);
}

/// Registers `K<T>::run` for each dtype in `Mask` (a dtypes:: set of ops/op_id.h, usually the
/// op's ops.def column), so the table and the registrations cannot drift apart.
template <OpId Op, template <typename> class K, uint32_t Mask>
void register_mask(DeviceType dev) {
  if constexpr ((Mask & (1u << 0)) != 0) register_kernel<Op>(dev, kFloat32, &K<float>::run);
  if constexpr ((Mask & (1u << 1)) != 0) register_kernel<Op>(dev, kFloat16, &K<Half>::run);
  if constexpr ((Mask & (1u << 2)) != 0) register_kernel<Op>(dev, kBFloat16, &K<BFloat16>::run);
  if constexpr ((Mask & (1u << 3)) != 0) register_kernel<Op>(dev, kFloat64, &K<double>::run);
  if constexpr ((Mask & (1u << 4)) != 0) register_kernel<Op>(dev, kInt64, &K<int64_t>::run);
  if constexpr ((Mask & (1u << 5)) != 0) register_kernel<Op>(dev, kInt32, &K<int32_t>::run);
  if constexpr ((Mask & (1u << 6)) != 0) register_kernel<Op>(dev, kUInt8, &K<uint8_t>::run);
  if constexpr ((Mask & (1u << 7)) != 0) register_kernel<Op>(dev, kBool, &K<bool>::run);
}

/// Typed lookup of a kernel of op `Op` (the type comes from its ops.def row).
template <OpId Op>
KernelRef<op_fn_t<Op>> kernel(Device dev, DType dt) {
  using Fn = op_fn_t<Op>;
  return KernelRef<Fn>(reinterpret_cast<Fn>(find_kernel(Op, dev.type, dt)), Op, dev, dt);
}
/// Lookup for an op known only at run time: Fn must be the op's ops.def signature (checked,
/// one table load), so a kernel is never called through the wrong type.
template <typename Fn>
KernelRef<Fn> kernel(OpId op, Device dev, DType dt) {
  if (!kSigMatches<Fn>[static_cast<int>(op)]) detail::wrong_signature(op);
  return KernelRef<Fn>(reinterpret_cast<Fn>(find_kernel(op, dev.type, dt)), op, dev, dt);
}
}  // namespace dispatch

/// Static registrar for kernel files: `MPX_REGISTER_KERNELS(cpu_elementwise) { ... }`.
#define MPX_REGISTER_KERNELS(tag)                                  \
  static void mpx_register_##tag();                                \
  static const bool mpx_registered_##tag = (mpx_register_##tag(), true); \
  static void mpx_register_##tag()

}  // namespace mpx
