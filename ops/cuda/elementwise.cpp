// Registers the CUDA elementwise kernels (same ops, dtypes and signatures as ops/cpu/elementwise.cpp).
#include "core/cuda_backend.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/elementwise_launch.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/formulas.h"

namespace mpx::cuda {
namespace {

template <OpId Op>
void unary_fn(const Tensor& out, const Tensor& in, double p0, double p1) {
  if (out.numel() == 0) return;
  TensorDeviceGuard g(out);
  launch_unary(Op, desc(out), desc(in, out.sizes(), "elementwise"), p0, p1, stream_of(out));
}

template <OpId Op>
void binary_fn(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  if (out.numel() == 0) return;
  TensorDeviceGuard g(out);
  launch_binary(Op, desc(out), desc(a, out.sizes(), "elementwise"), desc(b, out.sizes(), "elementwise"), alpha,
                stream_of(out));
}

template <OpId Op>
void ternary_fn(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, double value) {
  if (out.numel() == 0) return;
  TensorDeviceGuard g(out);
  const IntList& shape = out.sizes();
  launch_ternary(Op, desc(out), desc(a, shape, "elementwise"), desc(b, shape, "elementwise"),
                 desc(c, shape, "elementwise"), value, stream_of(out));
}

// A dense tensor as one flat dimension (so fills and draws take any number of dims).
TensorDesc flat_desc(const Tensor& t) {
  TensorDesc d;
  d.data = t.raw_data();
  d.dtype = t.dtype();
  d.ndim = 1;
  d.sizes[0] = t.numel();
  d.strides[0] = 1;
  return d;
}

void copy_fn(const Tensor& out, const Tensor& src) {
  if (out.numel() == 0) return;
  MPX_CHECK(src.device() == out.device(), "copy: the CUDA copy kernel needs both tensors on ", out.device().str(),
            ", got the source on ", src.device().str(), "; use copy_() or .to(device), which move the data first");
  TensorDeviceGuard g(out);
  if (out.dim() == 4 && src.dim() == 4 && out.suggest_memory_format() != src.suggest_memory_format() &&
      (src.is_contiguous() || src.is_contiguous(MemoryFormat::ChannelsLast)))
    detail::count_layout_conversion();
  launch_copy(desc(out, "copy"), desc(src, out.sizes(), "copy"), stream_of(out));
}

void fill_fn(const Tensor& out, double value) {
  if (out.numel() == 0) return;
  TensorDeviceGuard g(out);
  launch_fill(out.is_contiguous() ? flat_desc(out) : desc(out, "fill"), value, stream_of(out));
}

template <bool Normal>
void rand_fn(const Tensor& out, uint64_t seed, uint64_t offset, double a, double b) {
  if (out.numel() == 0) return;
  // Element i takes stream position offset + i in row-major order, as on the CPU.
  MPX_CHECK(out.is_contiguous(), Normal ? "randn" : "rand", ": the CUDA kernel fills contiguous tensors only, got ",
            shape_str(out.sizes()), " with strides ", shape_str(out.strides()), "; fill a contiguous tensor and copy it");
  TensorDeviceGuard g(out);
  launch_rand(Normal, flat_desc(out), seed, offset, a, b, stream_of(out));
}

template <OpId Op>
void reg(op_fn_t<Op> fn, std::initializer_list<DType> dts) {
  for (DType dt : dts) dispatch::register_kernel<Op>(DeviceType::kCUDA, dt, fn);
}
// Registers fn for every dtype of the op's ops.def CUDA column.
template <OpId Op>
void reg_row(op_fn_t<Op> fn) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kCudaDTypes[static_cast<int>(Op)] & (1u << i))
      dispatch::register_kernel<Op>(DeviceType::kCUDA, static_cast<DType>(i), fn);
}

}  // namespace

MPX_REGISTER_KERNELS(cuda_elementwise) {
  const std::initializer_list<DType> floats = {kFloat32, kFloat64, kFloat16, kBFloat16};
  const std::initializer_list<DType> all = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8};
  const std::initializer_list<DType> all_bool = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool};

  // Every formula op of ops/formulas.h, for the dtypes of its ops.def CUDA column.
#define MPX_REG_UNARY(op) reg_row<OpId::op>(&unary_fn<OpId::op>);
#define MPX_REG_BINARY(op) reg_row<OpId::op>(&binary_fn<OpId::op>);
  MPX_UNARY_OPS(MPX_REG_UNARY)
  MPX_PARAM_UNARY_OPS(MPX_REG_UNARY)
  MPX_BINARY_OPS(MPX_REG_BINARY)
#undef MPX_REG_UNARY
#undef MPX_REG_BINARY

  reg<OpId::where>(&ternary_fn<OpId::where>, all_bool);
  reg<OpId::addcmul>(&ternary_fn<OpId::addcmul>, floats);
  reg<OpId::addcdiv>(&ternary_fn<OpId::addcdiv>, floats);

  reg<OpId::copy>(&copy_fn, all_bool);
  reg<OpId::fill>(&fill_fn, all_bool);
  reg<OpId::rand_uniform>(&rand_fn<false>, all);
  reg<OpId::rand_normal>(&rand_fn<true>, floats);
}

}  // namespace mpx::cuda
