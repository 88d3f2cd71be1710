// Helpers the optimizer's files share: state tensors laid out like their parameter, masters.
#pragma once
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace mpx::optim::detail {

/// `src` converted to dtype `dt` with `like`'s layout (row-major or channels-last) and device.
Tensor copy_like(const Tensor& src, const Tensor& like, DType dt);
/// A new FP32 master of a f16/bf16 parameter (refused inside a CUDA graph capture).
Tensor make_master(const Tensor& param);
/// `st.master` brought in line with `param` where the parameter no longer holds its rounding (see
/// ParamState::master): the master itself when nothing changed, else a new tensor.
Tensor master_in_line(const ParamState& st, const Tensor& param);

}  // namespace mpx::optim::detail
