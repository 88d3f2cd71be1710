// Helpers for op implementations: the autocast stage, output allocation, gradient reduction.
#pragma once
#include "autograd/node.h"
#include "ops/dispatch.h"

namespace mpx {

/// Thread-local autocast state. amp's AutocastGuard sets it; ops read it in the autocast stage.
struct AutocastState {
  bool enabled = false;
  DType dtype = kFloat16;
  /// Optional cast hook (amp installs its weight cache here); null means a plain cast.
  Tensor (*cast)(const Tensor& t, DType to) = nullptr;
};
AutocastState& autocast_state();

namespace ops {

/// The autocast stage: casts the floating inputs of `op` according to its policy when
/// autocast is on (f64 and non-floating inputs are left alone). A no-op otherwise.
tensor_list autocast(OpId op, tensor_list inputs);
/// The same stage for an op outside the table (a custom autograd Function): `policy` decides,
/// `name` names the op in errors.
tensor_list autocast(CastPolicy policy, const char* name, tensor_list inputs);

/// The dtype a set of tensors computes in under PyTorch's promotion rules.
DType result_type(const tensor_list& ts);

/// Checks that all defined tensors share one device; names the op and devices otherwise.
Device common_device(const char* op, const tensor_list& ts);

/// Sums `g` down to `shape` (undoing broadcasting) and casts it to `dtype`.
Tensor reduce_grad(const Tensor& g, const IntList& shape, DType dtype);
inline Tensor reduce_grad(const Tensor& g, const Tensor& like) { return reduce_grad(g, like.sizes(), like.dtype()); }

/// Options for an elementwise result of `shape` on `dev`: the output keeps the channels-last
/// layout of the first input of that shape (as PyTorch's do), so NHWC activations flow through
/// activations and residual adds without layout round trips.
TensorOptions elementwise_options(DType dt, Device dev, const IntList& shape, const tensor_list& inputs);

/// Describes a tensor for error messages: "f32[2, 3] on cpu", or "an undefined tensor".
std::string describe(const Tensor& t);

}  // namespace ops
}  // namespace mpx
