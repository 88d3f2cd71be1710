// Checks and reductions shared by the loss families (ops/loss.cpp, ops/margin_loss.cpp).
#pragma once
#include "ops/loss.h"
#include "ops/op_utils.h"

namespace mpx::loss_detail {

/// Losses accumulate in f32 whatever the input precision; f64 stays f64.
DType compute_dtype(const tensor_list& ts);
Tensor reduce_loss(const Tensor& l, Reduction r);
void check_floating(const char* op, const char* what, const Tensor& t);
void check_same_shape(const char* op, const Tensor& input, const Tensor& target);

/// A loss of same-shaped floating input and target: checked, cast by the op's autocast policy, f(x, t) per element
/// in the compute dtype, then reduced.
template <typename F>
Tensor pointwise_loss(const char* op, OpId id, const Tensor& input0, const Tensor& target0, Reduction r, F f) {
  check_floating(op, "input", input0);
  check_floating(op, "target", target0);
  check_same_shape(op, input0, target0);
  auto in = ops::autocast(id, {input0, target0});
  const DType cdt = compute_dtype(in);
  return reduce_loss(f(in[0].to(cdt), in[1].to(cdt)), r);
}

}  // namespace mpx::loss_detail
