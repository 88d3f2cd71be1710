// Convolution ops: conv2d (stride, padding, dilation, groups), conv_transpose2d, and their 1-d forms over a height of one.
#pragma once
#include <array>
#include <string>

#include "core/tensor.h"

namespace mpx {

using Pair = std::array<int64_t, 2>;

/// "(a, b)", for error messages.
inline std::string pair_str(Pair p) {
  std::string s("(");  // built by appending: GCC 12 warns falsely on "(" + std::string
  s += std::to_string(p[0]);
  s += ", ";
  s += std::to_string(p[1]);
  s += ")";
  return s;
}

/// x [N, C, H, W], w [O, C/groups, kh, kw], b [O] (optional) -> [N, O, H', W'].
/// Works for contiguous and channels-last inputs; the output keeps the input's format.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = {}, Pair stride = {1, 1}, Pair padding = {0, 0},
              Pair dilation = {1, 1}, int64_t groups = 1);
/// x [N, C, L] (or unbatched [C, L]), w [O, C/groups, k], b [O] (optional) -> [N, O, L']: a
/// convolution over a height of one, on conv2d's kernels (and its autocast policy).
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b = {}, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1, int64_t groups = 1);
/// x [N, C, H, W], w [C, O/groups, kh, kw], b [O] -> [N, O, H', W'] with
/// H' = (H-1)*stride - 2*padding + dilation*(kh-1) + output_padding + 1.
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b = {}, Pair stride = {1, 1},
                        Pair padding = {0, 0}, Pair output_padding = {0, 0}, int64_t groups = 1,
                        Pair dilation = {1, 1});

/// x [N, C, L] (or unbatched [C, L]), w [C, O/groups, k], b [O] (optional) -> [N, O, L'] with
/// L' = (L-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1: conv_transpose2d over a height of one.
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& b = {}, int64_t stride = 1, int64_t padding = 0,
                        int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);

/// What runs f32 convolutions on the CPU in this build: "oneDNN 2.6.3 (CPU ISA ...)" when
/// mpx was built with oneDNN, else "im2col + Eigen GEMM".
std::string cpu_conv_backend();
/// Whether CPU convolutions of dtype dt run on kernels of that dtype (f32/f64 always; bf16 on
/// oneDNN where the CPU has AVX-512) rather than on f32 copies rounded back once. Either way
/// they accumulate in f32 and round each output once.
bool cpu_conv_native(DType dt);

}  // namespace mpx

namespace mpx::kernels {
/// Geometry shared by the conv kernels (x/y sizes come from the tensors themselves).
/// Activations (x, y, gx, gy) each arrive NCHW-contiguous or channels-last (NHWC-dense),
/// outputs in the format of the activation they come from; weights and bias are contiguous,
/// except that on CUDA a weight (and its gradient) may be channels-last as well.
struct Conv2dParams {
  Pair stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};
/// y = conv2d(x, w) + b: x [N, C, H, W], w [O, C/groups, kh, kw], b [O] or undefined;
/// y preallocated.
using Conv2dFn = void (*)(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);
/// gx = the input gradient of conv2d for upstream gy (overwrites gx, whose shape fixes
/// H and W), plus b[c] per channel when b is defined; this is conv_transpose2d's forward too.
using Conv2dBackwardInputFn = void (*)(const Tensor& gx, const Tensor& gy, const Tensor& w, const Tensor& b,
                                       const Conv2dParams& p);
/// gw = the weight gradient of conv2d for input x and upstream gy (overwrites gw).
using Conv2dBackwardWeightFn = void (*)(const Tensor& gw, const Tensor& gy, const Tensor& x, const Conv2dParams& p);
}  // namespace mpx::kernels
