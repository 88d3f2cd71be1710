// CUDA's thread model on host threads for the emulated kernel tests: one std::thread per CUDA thread, barriers for
// __syncthreads/__syncwarp, shuffles through shared slots, blocks run one after another.
#pragma once
#include <vector_functions.h>
#include <vector_types.h>

#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cuda_emu {
struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 thread_idx, block_idx;
inline constexpr unsigned kMaxWarps = 32;
struct Block {
  std::barrier<>* all = nullptr;
  std::barrier<>* warp[kMaxWarps] = {};
  float slots[kMaxWarps][32] = {};
};
inline Block* block = nullptr;
inline int lane() { return static_cast<int>(thread_idx.x % 32); }

/// Runs body(smem) for every thread of a grid of `grid_x` x `grid_y` blocks of `threads` (a multiple of 32)
/// threads, `smem` bytes of shared memory each, filled with NaN bytes first; throws when the body wrote past them.
inline void launch(unsigned grid_x, unsigned grid_y, unsigned threads, size_t smem,
                   const std::function<void(unsigned char*)>& body) {
  constexpr size_t kGuard = 256;
  std::vector<unsigned char> buf(smem + kGuard + 128);
  auto* s = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 127) & ~uintptr_t(127));
  for (unsigned by = 0; by < grid_y; ++by)
    for (unsigned bx = 0; bx < grid_x; ++bx) {
      std::memset(s, 0xff, smem + kGuard);
      std::barrier<> all(threads);
      std::vector<std::unique_ptr<std::barrier<>>> warps;
      Block b;
      b.all = &all;
      for (unsigned w = 0; w < threads / 32; ++w) {
        warps.push_back(std::make_unique<std::barrier<>>(32));
        b.warp[w] = warps.back().get();
      }
      block = &b;
      std::vector<std::thread> team;
      std::exception_ptr err;
      std::mutex m;
      for (unsigned t = 0; t < threads; ++t)
        team.emplace_back([&, t] {
          thread_idx = {t, 0, 0};
          block_idx = {bx, by, 0};
          try {
            body(s);
          } catch (...) {
            {
              std::lock_guard<std::mutex> l(m);
              err = std::current_exception();
            }
            // Leave the barriers so that the other threads finish instead of waiting for this one.
            b.warp[t / 32]->arrive_and_drop();
            all.arrive_and_drop();
          }
        });
      for (std::thread& x : team) x.join();
      if (err) std::rethrow_exception(err);
      for (size_t i = smem; i < smem + kGuard; ++i)
        if (s[i] != 0xff) throw std::logic_error("the kernel wrote past its shared memory");
    }
}
}  // namespace cuda_emu

#define threadIdx (::cuda_emu::thread_idx)
#define blockIdx (::cuda_emu::block_idx)
inline void __syncthreads() { cuda_emu::block->all->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { cuda_emu::block->warp[threadIdx.x / 32]->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  float* slots = cuda_emu::block->slots[threadIdx.x / 32];
  slots[cuda_emu::lane()] = v;
  __syncwarp();
  const float r = slots[cuda_emu::lane() ^ lane_mask];
  __syncwarp();
  return r;
}
