// Which engine runs the CPU matrix products in this build and on this CPU (what `mpx info` prints).
#pragma once
#include <string>

#include "core/dtype.h"

namespace mpx {
/// "oneDNN 2.6.3 (CPU ISA avx2)" or "Eigen (built without oneDNN)".
std::string cpu_matmul_backend();
/// Whether mm/bmm/linear in `dt` run on oneDNN here (f32 always with oneDNN; bf16 where the CPU has
/// AVX-512; f16 and f64 never: they keep Eigen's exact f32 accumulation on rounded copies).
bool cpu_matmul_onednn(DType dt);
}  // namespace mpx
