// Registers the CUDA elementwise kernels (same ops, dtypes and signatures as ops/cpu/elementwise.cpp).
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/elementwise_launch.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"

namespace mpx::cuda {
namespace {

template <UnaryOp Op>
void unary_fn(const Tensor& out, const Tensor& in, double p0, double p1) {
  if (out.numel() == 0) return;
  TensorDeviceGuard g(out);
  launch_unary(Op, desc(out), desc(in, out.sizes(), "elementwise"), p0, p1, stream_of(out));
}

template <BinaryOp Op>
void binary_fn(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  if (out.numel() == 0) return;
  TensorDeviceGuard g(out);
  launch_binary(Op, desc(out), desc(a, out.sizes(), "elementwise"), desc(b, out.sizes(), "elementwise"), alpha,
                stream_of(out));
}

template <TernaryOp Op>
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
    count_layout_conversion();
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

void reg(OpId op, void* fn, std::initializer_list<DType> dts) {
  for (DType dt : dts) dispatch::register_kernel(op, DeviceType::kCUDA, dt, fn);
}
template <UnaryOp Op> void* unary_ptr() { return reinterpret_cast<void*>(&unary_fn<Op>); }
template <BinaryOp Op> void* binary_ptr() { return reinterpret_cast<void*>(&binary_fn<Op>); }
template <TernaryOp Op> void* ternary_ptr() { return reinterpret_cast<void*>(&ternary_fn<Op>); }

}  // namespace

MPX_REGISTER_KERNELS(cuda_elementwise) {
  const std::initializer_list<DType> floats = {kFloat32, kFloat64, kFloat16, kBFloat16};
  const std::initializer_list<DType> ints = {kInt64, kInt32};
  const std::initializer_list<DType> all = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8};
  const std::initializer_list<DType> all_bool = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool};

  reg(OpId::neg, unary_ptr<UnaryOp::neg>(), floats);
  reg(OpId::neg, unary_ptr<UnaryOp::neg>(), ints);
  reg(OpId::abs, unary_ptr<UnaryOp::abs>(), floats);
  reg(OpId::abs, unary_ptr<UnaryOp::abs>(), ints);
  reg(OpId::sign, unary_ptr<UnaryOp::sign>(), floats);
  reg(OpId::sqrt, unary_ptr<UnaryOp::sqrt>(), floats);
  reg(OpId::rsqrt, unary_ptr<UnaryOp::rsqrt>(), floats);
  reg(OpId::reciprocal, unary_ptr<UnaryOp::reciprocal>(), floats);
  reg(OpId::exp, unary_ptr<UnaryOp::exp>(), floats);
  reg(OpId::log, unary_ptr<UnaryOp::log>(), floats);
  reg(OpId::sin, unary_ptr<UnaryOp::sin>(), floats);
  reg(OpId::cos, unary_ptr<UnaryOp::cos>(), floats);
  reg(OpId::erf, unary_ptr<UnaryOp::erf>(), floats);
  reg(OpId::tanh, unary_ptr<UnaryOp::tanh>(), floats);
  reg(OpId::sigmoid, unary_ptr<UnaryOp::sigmoid>(), floats);
  reg(OpId::relu, unary_ptr<UnaryOp::relu>(), floats);
  reg(OpId::leaky_relu, unary_ptr<UnaryOp::leaky_relu>(), floats);
  reg(OpId::gelu, unary_ptr<UnaryOp::gelu>(), floats);
  reg(OpId::silu, unary_ptr<UnaryOp::silu>(), floats);
  reg(OpId::softplus, unary_ptr<UnaryOp::softplus>(), floats);
  reg(OpId::pow_scalar, unary_ptr<UnaryOp::pow_scalar>(), floats);
  reg(OpId::clamp, unary_ptr<UnaryOp::clamp>(), floats);
  reg(OpId::clamp, unary_ptr<UnaryOp::clamp>(), {kInt64, kInt32, kUInt8});

  reg(OpId::add, binary_ptr<BinaryOp::add>(), all);
  reg(OpId::sub, binary_ptr<BinaryOp::sub>(), all);
  reg(OpId::mul, binary_ptr<BinaryOp::mul>(), all);
  reg(OpId::div, binary_ptr<BinaryOp::div>(), floats);
  reg(OpId::pow, binary_ptr<BinaryOp::pow>(), floats);
  reg(OpId::maximum, binary_ptr<BinaryOp::maximum>(), all);
  reg(OpId::minimum, binary_ptr<BinaryOp::minimum>(), all);
  reg(OpId::eq, binary_ptr<BinaryOp::eq>(), all_bool);
  reg(OpId::ne, binary_ptr<BinaryOp::ne>(), all_bool);
  reg(OpId::lt, binary_ptr<BinaryOp::lt>(), all);
  reg(OpId::le, binary_ptr<BinaryOp::le>(), all);
  reg(OpId::gt, binary_ptr<BinaryOp::gt>(), all);
  reg(OpId::ge, binary_ptr<BinaryOp::ge>(), all);
  reg(OpId::threshold_backward, binary_ptr<BinaryOp::threshold_backward>(), floats);

  reg(OpId::where, ternary_ptr<TernaryOp::where>(), all_bool);
  reg(OpId::addcmul, ternary_ptr<TernaryOp::addcmul>(), floats);
  reg(OpId::addcdiv, ternary_ptr<TernaryOp::addcdiv>(), floats);

  reg(OpId::copy, reinterpret_cast<void*>(&copy_fn), all_bool);
  reg(OpId::fill, reinterpret_cast<void*>(&fill_fn), all_bool);
  reg(OpId::rand_uniform, reinterpret_cast<void*>(&rand_fn<false>), all);
  reg(OpId::rand_normal, reinterpret_cast<void*>(&rand_fn<true>), floats);
}

}  // namespace mpx::cuda
