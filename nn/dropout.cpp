// Channel and alpha dropout (nn/dropout.h), composed from dropout's kernel, rand and where.
#include "nn/dropout.h"

#include <cmath>

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/op_utils.h"

namespace mpx::nn::functional {
namespace {

void check(const char* op, const Tensor& x, double p) {
  MPX_CHECK(x.defined(), op, ": input is undefined");
  MPX_CHECK(p >= 0.0 && p <= 1.0, op, ": probability must be in [0, 1], got ", p);
  MPX_CHECK(is_floating(x.dtype()), op, ": input must be floating, got ", ops::describe(x));
}

// The mask shape of channel dropout: x's leading (sample and) channel dims, then ones.
IntList channel_shape(const Tensor& x, bool batched) {
  IntList s(static_cast<size_t>(x.dim()), 1);
  for (int64_t d = 0; d < (batched ? 2 : 1); ++d) s[static_cast<size_t>(d)] = x.size(d);
  return s;
}

Tensor channel_dropout(const char* op, const Tensor& x, const DropoutFuncOptions& o, int64_t spatial) {
  check(op, x, o.p());
  MPX_CHECK(x.dim() == spatial + 1 || x.dim() == spatial + 2, op, ": expected ", spatial + 2, "-d input [N, C, ...] ",
            "or unbatched ", spatial + 1, "-d, got ", ops::describe(x));
  if (!o.training() || o.p() == 0.0) return x;
  // dropout of ones is the mask already scaled by 1/(1-p), in x's dtype (as PyTorch's feature dropout rounds it).
  const Tensor mask = mpx::dropout(ones(channel_shape(x, x.dim() == spatial + 2), x.options()), o.p(), true);
  return x * mask;
}

// SELU's -scale * alpha: the value a dropped element takes before the affine correction.
constexpr double kAlphaPrime = -1.7580993408473766;

Tensor alpha_dropout_impl(const char* op, const Tensor& x, const DropoutFuncOptions& o, bool feature) {
  check(op, x, o.p());
  if (feature)
    MPX_CHECK(x.dim() >= 2, op, ": expected [N, C, *] input, got ", ops::describe(x));
  if (!o.training() || o.p() == 0.0) return x;
  if (o.p() == 1.0) return x * 0.0;
  const double p = o.p();
  const double a = 1.0 / std::sqrt((1.0 - p) * (1.0 + p * kAlphaPrime * kAlphaPrime));
  const double b = -a * kAlphaPrime * p;
  const Tensor keep = ge(rand(feature ? channel_shape(x, true) : x.sizes(), TensorOptions().device(x.device())), p);
  return affine(where(keep, x, kAlphaPrime), a, b);
}

}  // namespace

Tensor dropout1d(const Tensor& x, const DropoutFuncOptions& o) { return channel_dropout("dropout1d", x, o, 1); }
Tensor dropout2d(const Tensor& x, const DropoutFuncOptions& o) { return channel_dropout("dropout2d", x, o, 2); }
Tensor dropout3d(const Tensor& x, const DropoutFuncOptions& o) { return channel_dropout("dropout3d", x, o, 3); }
Tensor alpha_dropout(const Tensor& x, const DropoutFuncOptions& o) {
  return alpha_dropout_impl("alpha_dropout", x, o, false);
}
Tensor feature_alpha_dropout(const Tensor& x, const DropoutFuncOptions& o) {
  return alpha_dropout_impl("feature_alpha_dropout", x, o, true);
}

}  // namespace mpx::nn::functional
