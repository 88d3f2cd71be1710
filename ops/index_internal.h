// Shared by the index family's sources (ops/index.cpp, ops/embedding_topk.cpp): index checks and scalar conversion.
#pragma once
#include <string>

#include "core/tensor.h"

namespace mpx::index_detail {

/// "[1, 2]" for flat position 5 of shape [2, 3] (a plain number for 0-d and 1-d shapes).
std::string position_str(const IntList& shape, int64_t flat);
/// index as a contiguous i64 tensor of its shape, after checking its dtype (i64/i32), its device
/// (self's) and every value in [0, bound); `range` says whose bound it is (" for dim 1 of self ...").
/// The first bad value is named with its position. On CUDA the check runs on the device and is
/// read back at once (skipped while a CUDA graph is being captured: the kernels guard memory).
Tensor checked_index(const char* op, const Tensor& index, const Tensor& self, int64_t bound, const std::string& range);
/// value as stored in dtype dt; an error naming op when dt cannot hold it (a fraction or an
/// out-of-range number in an integer dtype, not 0/1 for bool, a finite value that overflows
/// f16/bf16 unless `overflow_to_inf`, where's PyTorch behaviour: where(m, x_f16, -1e9) gives -inf).
double representable(const char* op, double value, DType dt, bool overflow_to_inf = false);

}  // namespace mpx::index_detail
