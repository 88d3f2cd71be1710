// CUDA's thread model on the host for the emulated kernel tests: each CUDA thread of a block is a fiber (ucontext)
// on the calling thread, switched at __syncthreads/__syncwarp (runs are deterministic); blocks run in turn.
#pragma once
#include <ucontext.h>
#include <vector_functions.h>
#include <vector_types.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cuda_emu {
inline uint3 thread_idx, block_idx;
inline dim3 block_dim, grid_dim;

/// One block's fibers and what each waits for.
class Block {
 public:
  enum Wait { kRunnable, kBlockBarrier, kWarpBarrier, kDone };
  std::vector<uint64_t> slots;  // shuffle exchange: 32 per warp
  int vote = 0;                 // __syncthreads_or
  unsigned char* smem = nullptr;

  /// Runs body on n fibers until all return; throws what one threw, or when the barriers cannot all be met.
  void run(unsigned n, dim3 threads, const std::function<void()>& body);
  /// Called by a fiber: wait until every live thread of the block (w = kBlockBarrier) or of the warp has arrived.
  void arrive(Wait w);
  unsigned current() const { return current_; }

 private:
  static constexpr size_t kStack = 256 * 1024;
  struct Fiber {
    ucontext_t ctx;
    std::unique_ptr<char[]> stack;
    Wait wait = kRunnable;
  };
  static void entry();
  // Frees threads [first, end) waiting at w when all of them have arrived (or returned); false otherwise.
  bool release(unsigned first, unsigned end, Wait w);
  std::vector<Fiber> fibers_;
  ucontext_t scheduler_;
  unsigned current_ = 0, n_ = 0;
  const std::function<void()>* body_ = nullptr;
  std::exception_ptr error_;
};
inline Block* block = nullptr;

inline unsigned linear_thread() { return block->current(); }
inline int lane() { return static_cast<int>(linear_thread() % 32); }
inline unsigned char* dynamic_smem() { return block->smem; }

inline void Block::entry() {
  Block* b = block;
  try {
    (*b->body_)();
  } catch (...) {
    if (!b->error_) b->error_ = std::current_exception();
  }
  b->fibers_[b->current_].wait = kDone;
  swapcontext(&b->fibers_[b->current_].ctx, &b->scheduler_);
}

inline void Block::arrive(Wait w) {
  fibers_[current_].wait = w;
  swapcontext(&fibers_[current_].ctx, &scheduler_);
}

inline bool Block::release(unsigned first, unsigned end, Wait w) {
  // A thread that has returned counts as arrived, as on the hardware.
  bool all = true, any = false;
  for (unsigned t = first; t < end; ++t) {
    all = all && (fibers_[t].wait == w || fibers_[t].wait == kDone);
    any = any || fibers_[t].wait == w;
  }
  if (!(all && any)) return false;
  for (unsigned t = first; t < end; ++t)
    if (fibers_[t].wait == w) fibers_[t].wait = kRunnable;
  return true;
}

inline void Block::run(unsigned n, dim3 threads, const std::function<void()>& body) {
  n_ = n;
  body_ = &body;
  error_ = nullptr;
  if (fibers_.size() < n) fibers_.resize(n);
  slots.assign(((n + 31) / 32) * 32, 0);
  vote = 0;
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = fibers_[t];
    if (!f.stack) f.stack.reset(new char[kStack]);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = &scheduler_;
    makecontext(&f.ctx, &Block::entry, 0);
    f.wait = kRunnable;
  }
  // Between two __syncthreads each warp runs as far as it can before the next one starts, warps and lanes in
  // ascending or descending order, drawn per phase and block: a read that a missing barrier leaves racing with
  // another warp's (or lane's) write sees the written value in one order and not in the other.
  const unsigned warps = (n + 31) / 32;
  const uint32_t key = (block_idx.x + 7919u * (block_idx.y + 7919u * block_idx.z)) * 0x85EBCA6Bu;
  for (uint32_t phase = 0;; ++phase) {
    const bool down = (((phase + 1) * 0x9E3779B9u ^ key) >> 16) & 1;
    for (unsigned i = 0; i < warps; ++i) {
      const unsigned w = down ? warps - 1 - i : i, first = w * 32, end = std::min(n, first + 32);
      do {
        for (unsigned j = 0; j < end - first; ++j) {
          const unsigned t = down ? end - 1 - j : first + j;
          if (fibers_[t].wait != kRunnable) continue;
          current_ = t;
          thread_idx = make_uint3(t % threads.x, (t / threads.x) % threads.y, t / (threads.x * threads.y));
          swapcontext(&scheduler_, &fibers_[t].ctx);
        }
      } while (release(first, end, kWarpBarrier));
    }
    bool done = true;
    for (unsigned t = 0; t < n; ++t) done = done && fibers_[t].wait == kDone;
    if (done) break;
    if (!release(0, n, kBlockBarrier))
      throw std::logic_error("emulated block: threads wait at barriers that the others never reach");
  }
  if (error_) std::rethrow_exception(error_);
}

/// Runs body() on every thread of a grid, each block with `smem` bytes of dynamic shared memory filled with NaN
/// bytes; throws what a thread threw, or when a block wrote past its shared memory.
inline void run(dim3 grid, dim3 threads, size_t smem, const std::function<void()>& body) {
  constexpr size_t kGuard = 256;
  const unsigned n = threads.x * threads.y * threads.z;
  if (n == 0 || n > 1024) throw std::invalid_argument("emulated launch: block of " + std::to_string(n) + " threads");
  std::vector<unsigned char> buf(smem + kGuard + 128);
  auto* s = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 127) & ~uintptr_t(127));
  static Block b;  // fibers and their stacks kept between launches
  block = &b;
  block_dim = threads;
  grid_dim = grid;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::memset(s, 0xff, smem + kGuard);
        b.smem = s;
        block_idx = make_uint3(bx, by, bz);
        b.run(n, threads, body);
        for (size_t i = smem; i < smem + kGuard; ++i)
          if (s[i] != 0xff) throw std::logic_error("the kernel wrote past its shared memory");
      }
}

/// A grid of `grid_x` x `grid_y` blocks of `threads` threads running body(shared memory).
inline void launch(unsigned grid_x, unsigned grid_y, unsigned threads, size_t smem,
                   const std::function<void(unsigned char*)>& body) {
  run(dim3(grid_x, grid_y), dim3(threads), smem, [&] { body(dynamic_smem()); });
}
}  // namespace cuda_emu

#define threadIdx (::cuda_emu::thread_idx)
#define blockIdx (::cuda_emu::block_idx)
#define blockDim (::cuda_emu::block_dim)
#define gridDim (::cuda_emu::grid_dim)
inline void __syncthreads() { cuda_emu::block->arrive(cuda_emu::Block::kBlockBarrier); }
inline void __syncwarp(unsigned = 0xffffffffu) { cuda_emu::block->arrive(cuda_emu::Block::kWarpBarrier); }
inline int __syncthreads_or(int predicate) {
  __syncthreads();  // the previous call's readers are done (thread 0 cleared the vote after them)
  if (predicate) cuda_emu::block->vote = 1;
  __syncthreads();
  const int r = cuda_emu::block->vote;
  __syncthreads();
  if (cuda_emu::linear_thread() == 0) cuda_emu::block->vote = 0;
  return r;
}
namespace cuda_emu {
// Every lane posts v and reads the value of lane `src(lane)` (its own where src is out of range).
template <typename T, typename F> T exchange(T v, F src) {
  static_assert(sizeof(T) <= 8, "shuffles move up to 8 bytes");
  uint64_t* slots = &block->slots[(linear_thread() / 32) * 32];
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  slots[lane()] = bits;
  __syncwarp();
  const int from = src(lane());
  T r = v;
  if (from >= 0 && from < 32) std::memcpy(&r, &slots[from], sizeof(T));
  __syncwarp();
  return r;
}
}  // namespace cuda_emu
template <typename T> T __shfl_xor_sync(unsigned, T v, int mask, int = 32) {
  return cuda_emu::exchange(v, [&](int l) { return l ^ mask; });
}
template <typename T> T __shfl_down_sync(unsigned, T v, unsigned delta, int = 32) {
  return cuda_emu::exchange(v, [&](int l) { return l + static_cast<int>(delta); });
}
template <typename T> T __shfl_sync(unsigned, T v, int src, int = 32) {
  return cuda_emu::exchange(v, [&](int) { return src; });
}
