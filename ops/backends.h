// Which engines run the CPU matrix products and attention in this build and on this CPU (what `mpx info` prints).
#pragma once
#include <string>

namespace mpx {
/// "oneDNN 2.6.3 (CPU ISA avx2), bf16 ..." or "Eigen (built without oneDNN)". With oneDNN, f32
/// products run on it, bf16 where the CPU has AVX-512, f16 and f64 never (they keep Eigen's f32
/// accumulation on exactly rounded copies).
std::string cpu_matmul_backend();
/// How the fused CPU attention multiplies: "f32 FMA tiles; bf16 on AMX tiles" where the build and
/// the CPU have AMX-BF16, else bf16 widened to f32 with the reason.
std::string cpu_attention_backend();
}  // namespace mpx
