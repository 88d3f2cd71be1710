// Internal: the oneDNN engine, per-thread streams and scratch buffers shared by the CPU convolution and matmul paths.
#pragma once
#include <cstddef>

#include <oneapi/dnnl/dnnl.hpp>

namespace mpx::cpu::onednn {
/// The CPU engine (never destroyed, so no exit-time destructor order can leave a cached
/// primitive outliving it).
dnnl::engine& engine();
/// A stream per thread: streams are cheap, and this keeps callers on different threads apart.
dnnl::stream& stream();
/// Per-thread, grow-only, 64-byte-aligned buffers, so steady-state training allocates nothing
/// here. Slots: 0-3 a convolution's reordered operands, 4 its scratchpad, 5 matmul's scratchpad,
/// 6 the flipped weights of an input gradient run as a forward convolution.
void* buffer(int slot, size_t bytes);
}  // namespace mpx::cpu::onednn
