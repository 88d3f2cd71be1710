// Internal: the oneDNN engine, per-thread streams and scratch buffers shared by the CPU convolution and matmul paths.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include <oneapi/dnnl/dnnl.hpp>

namespace mpx::cpu::onednn {
/// The CPU engine (never destroyed, so no exit-time destructor order can leave a cached
/// primitive outliving it).
dnnl::engine& engine();
/// A stream per thread: streams are cheap, and this keeps callers on different threads apart.
dnnl::stream& stream();
/// Per-thread, grow-only, 64-byte-aligned buffers, so steady-state training allocates nothing
/// here. Slots: 0-3 a convolution's reordered operands (on the small-map GEMM path: the column
/// matrix, the f32 product, gy transposed, one tap's weights), 4 its scratchpad, 5 matmul's
/// scratchpad, 6 the flipped weights of an input gradient run as a forward convolution.
void* buffer(int slot, size_t bytes);
/// FNV-1a over the integers of a primitive cache's key.
struct KeyHash {
  template <size_t N> size_t operator()(const std::array<int64_t, N>& k) const {
    size_t h = 0xcbf29ce484222325ull;
    for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 0x100000001b3ull;
    return h;
  }
};
}  // namespace mpx::cpu::onednn
