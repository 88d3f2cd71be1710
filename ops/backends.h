// Which engine runs the CPU matrix products in this build and on this CPU (what `mpx info` prints).
#pragma once
#include <string>

namespace mpx {
/// "oneDNN 2.6.3 (CPU ISA avx2), bf16 ..." or "Eigen (built without oneDNN)". With oneDNN, f32
/// products run on it, bf16 where the CPU has AVX-512, f16 and f64 never (they keep Eigen's f32
/// accumulation on exactly rounded copies).
std::string cpu_matmul_backend();
}  // namespace mpx
