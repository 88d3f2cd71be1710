// Convolutions through cuDNN's graph (backend) API: one execution plan per shape, built once and
// cached, so a call costs one cudnnBackendExecute instead of the legacy API's per-call planning.
#pragma once
#ifdef MPX_WITH_CUDNN
#include <cudnn.h>

#include <string>

#include "ops/conv.h"
#include "ops/cuda/cudnn_common.h"

namespace mpx::cuda::cudnn {

/// Which convolution routine a plan runs. In every direction x is the conv2d input activation,
/// w the weight and y the conv2d output (so dy for the gradients).
enum class ConvDir { kForward, kBackwardData, kBackwardFilter };

/// One convolution as a plan sees it: x, w and y dense in `layout` and 16-byte aligned (what
/// dense_in and the callers' output buffers guarantee), the output being y, x or w by direction.
struct ConvProblem {
  ConvDir dir = ConvDir::kForward;
  DType dt = kFloat32;
  Layout layout = Layout::kNCHW;
  kernels::Conv2dParams p;
  Tensor x, w, y;
  bool deterministic = false;  ///< only engines cuDNN reports deterministic
};

/// Runs the problem on a cached execution plan, built on first use from cuDNN's heuristic
/// order without engines that would use TF32 for f32 when it is not allowed, convert f32
/// inputs down, reduce in low precision or, when asked, run nondeterministically. The plan is
/// the heuristic's first, or with `benchmark` (cuda::cudnn_benchmark) the fastest of its first
/// few, timed on this call's tensors (a capture reuses what eager calls measured). False, with
/// nothing run, when the graph API has no usable plan (remembered) or its workspace cannot be
/// had now: the caller then runs the legacy API. f64 always returns false (its algorithms are
/// the legacy ones), as does every call when MPX_CUDNN_LEGACY=1 is set.
bool run_conv_plan(cudnnHandle_t h, const ConvProblem& c, const Tensor& out, bool benchmark);

}  // namespace mpx::cuda::cudnn
#endif  // MPX_WITH_CUDNN
