// CUDA memory behind core/cuda.h: the stream-ordered pool allocator and its capture rules, copies, pinned host memory, statistics.
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_backend.h"
#include "core/cuda_runtime.h"
#include "core/tensor.h"

namespace mpx::cuda {
namespace {

cudaMemPool_t pool_of(int device) {
  static std::array<std::atomic<cudaMemPool_t>, kMaxDevices> pools{};
  static std::mutex m;
  return lazy_per_device(pools, m, device, [](int d) {
    cudaMemPool_t np = nullptr;
    MPX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&np, d), "cuda allocator");
    // Keep freed memory in the pool instead of returning it to the driver at every
    // synchronization: that is what makes the pool a cache.
    uint64_t threshold = UINT64_MAX;
    MPX_CUDA_CHECK(cudaMemPoolSetAttribute(np, cudaMemPoolAttrReleaseThreshold, &threshold), "cuda allocator");
    return np;
  });
}

uint64_t pool_attr(int device, cudaMemPoolAttr a) {
  uint64_t v = 0;
  MPX_CUDA_CHECK(cudaMemPoolGetAttribute(pool_of(device), a, &v), "cuda memory_stats");
  return v;
}

// Page-locked host blocks are slow to allocate (a system call that pins pages), so freed
// blocks are kept by exact size and reused: a loader pins the same batch size every step.
class PinnedCache {
 public:
  void* get(size_t nbytes) {
    {
      std::lock_guard<std::mutex> l(m_);
      auto it = free_.find(nbytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    MPX_CUDA_CHECK(cudaHostAlloc(&p, nbytes, cudaHostAllocDefault), "pin_memory");
    return p;
  }
  void put(void* p, size_t nbytes) {
    std::lock_guard<std::mutex> l(m_);
    free_[nbytes].push_back(p);
  }

 private:
  std::mutex m_;
  std::map<size_t, std::vector<void*>> free_;
};
PinnedCache& pinned_cache() {
  static auto* c = new PinnedCache;  // never destroyed: storages may outlive static destruction
  return *c;
}

// Sources of in-flight non-blocking copies, released once their event has completed.
class PendingCopies {
 public:
  void add(cudaEvent_t ev, std::shared_ptr<void> owner) {
    std::lock_guard<std::mutex> l(m_);
    reap_locked();
    pending_.push_back({ev, std::move(owner)});
  }

 private:
  void reap_locked() {
    size_t k = 0;
    for (auto& p : pending_) {
      if (cudaEventQuery(p.first) == cudaSuccess) {
        cudaEventDestroy(p.first);
      } else {
        cudaGetLastError();  // cudaErrorNotReady is not an error to keep
        pending_[k++] = std::move(p);
      }
    }
    pending_.resize(k);
  }
  std::mutex m_;
  std::vector<std::pair<cudaEvent_t, std::shared_ptr<void>>> pending_;
};
PendingCopies& pending_copies() {
  static auto* p = new PendingCopies;
  return *p;
}

// Bytes of live tensors per device, each rounded up to 512 as PyTorch's caching allocator
// counts them: the pool's own "used" figure is in the driver's allocation units, so comparing
// it with torch.cuda.max_memory_allocated() would not compare like with like.
std::array<mpx::detail::ByteCounter, kMaxDevices> g_bytes;
constexpr int64_t kCountedUnit = 512;
int64_t counted_bytes(size_t nbytes) {
  return (static_cast<int64_t>(nbytes) + kCountedUnit - 1) / kCountedUnit * kCountedUnit;
}

// CUDA graph capture and the pool. During capture, cudaFreeAsync may only free memory the
// capture itself allocated (it becomes a free node), so frees of older memory that happen
// while a capture is active are held back and issued when the capture ends.
std::atomic<int> g_active_captures{0};
std::mutex g_deferred_m;
std::vector<std::pair<void*, cudaStream_t>> g_deferred;

unsigned long long capture_id(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(s, &st, &id) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return st == cudaStreamCaptureStatusActive ? id : 0;
}

void free_now(void* q, cudaStream_t s) {
  // Errors here (the runtime shutting down at exit) cannot be reported from a deleter.
  if (cudaFreeAsync(q, s) != cudaSuccess) cudaGetLastError();
}

}  // namespace

void capture_started() { g_active_captures.fetch_add(1); }

// Ends one capture's share of the deferral and issues the held-back frees, except those on a
// stream another thread is still capturing (they wait for that capture's end). The count
// changes under the lock the deleters check it under, so no free is queued after the last flush.
void end_capture_and_flush() {
  std::vector<std::pair<void*, cudaStream_t>> todo;
  {
    std::lock_guard<std::mutex> l(g_deferred_m);
    g_active_captures.fetch_sub(1);
    std::vector<std::pair<void*, cudaStream_t>> keep;
    for (auto& e : g_deferred) (capture_id(e.second) != 0 ? keep : todo).push_back(e);
    g_deferred.swap(keep);
  }
  for (auto& [q, s] : todo) free_now(q, s);
}

namespace {

// Makes `waiter` (on any device) wait for the work queued so far on `done`, a stream of `done_dev`.
void stream_wait(cudaStream_t waiter, cudaStream_t done, int done_dev) {
  DeviceGuard g(done_dev);
  cudaEvent_t ev = nullptr;
  MPX_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "copy");
  MPX_CUDA_CHECK(cudaEventRecord(ev, done), "copy");
  const cudaError_t e = cudaStreamWaitEvent(waiter, ev, 0);
  cudaEventDestroy(ev);  // released once it has completed
  MPX_CUDA_CHECK(e, "copy");
}

// A copy between two devices on the destination's stream `s`. Nothing orders that stream with
// the source device's: the copy waits for the source stream's queued work (the kernel that
// writes src, e.g. an overflow flag), and the source stream's later work (freeing src to the
// stream-ordered pool, overwriting it) waits for the copy.
void peer_copy(void* dst, int dst_dev, cudaStream_t s, const void* src, int src_dev, size_t nbytes) {
  cudaStream_t src_s = stream_of(src_dev);
  stream_wait(s, src_s, src_dev);
  MPX_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, nbytes, s), "copy");
  stream_wait(src_s, s, dst_dev);
}

struct CudaAllocator final : Allocator {
  std::shared_ptr<void> allocate(size_t nbytes, Device device) override {
    if (nbytes == 0) return std::shared_ptr<void>();
    const int dev = resolve(device.index);
    DeviceGuard g(dev);
    pool_of(dev);
    cudaStream_t s = stream_of(dev);
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, nbytes, s);
    if (e != cudaSuccess) {
      cudaGetLastError();
      const MemoryStats st = pool_memory_stats(dev);
      MPX_ERROR("cuda allocator: out of memory allocating ", nbytes, " bytes on cuda:", dev, " (", st.allocated,
                " bytes in use, ", st.reserved, " reserved; ", cudaGetErrorString(e),
                "); reduce the batch size or free tensors you no longer need");
    }
    if (detail::poison_enabled()) MPX_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, nbytes, s), "cuda allocator");
    // Freed on the stream that allocated it: the stream-ordered pool may then hand the
    // block to the next allocation on that stream without waiting for the device.
    const unsigned long long born_in = g_active_captures.load() > 0 ? capture_id(s) : 0;
    // What a capture allocates is the graph's memory, which memory_stats() reads from the driver.
    const int64_t counted = born_in == 0 ? counted_bytes(nbytes) : 0;
    g_bytes[static_cast<size_t>(dev)].add(counted);
    return std::shared_ptr<void>(p, [dev, s, born_in, counted](void* q) {
      g_bytes[static_cast<size_t>(dev)].sub(counted);
      int prev = 0;
      cudaGetDevice(&prev);
      if (prev != dev) cudaSetDevice(dev);
      bool deferred = false;
      if (g_active_captures.load() > 0) {
        std::lock_guard<std::mutex> l(g_deferred_m);
        if (g_active_captures.load() > 0 && (born_in == 0 || capture_id(s) != born_in)) {
          g_deferred.emplace_back(q, s);
          deferred = true;
        }
      }
      if (!deferred) free_now(q, s);
      if (prev != dev) cudaSetDevice(prev);
    });
  }

  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes,
            const std::shared_ptr<void>& async_owner) override {
    if (nbytes == 0) return;
    const int dev = dst_dev.is_cuda() ? dst_dev.index : src_dev.index;
    DeviceGuard g(dev);
    cudaStream_t s = stream_of(dev);
    if (dst_dev.is_cuda() && src_dev.is_cuda()) {
      if (dst_dev.index == src_dev.index)
        MPX_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s), "copy");
      else
        peer_copy(dst, dst_dev.index, s, src, src_dev.index, nbytes);
      return;  // device-to-device copies stay stream-ordered, like kernels
    }
    const cudaMemcpyKind kind = dst_dev.is_cuda() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    MPX_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, s), "copy");
    if (kind == cudaMemcpyHostToDevice && !async_owner) {
      // From pageable memory the driver has staged the source before returning, so nothing
      // needs to wait; only a page-locked source is still being read by the device.
      cudaPointerAttributes a{};
      const bool pinned = cudaPointerGetAttributes(&a, src) == cudaSuccess && a.type == cudaMemoryTypeHost;
      cudaGetLastError();
      if (!pinned) return;
    }
    if (async_owner && kind == cudaMemcpyHostToDevice) {
      cudaEvent_t ev = nullptr;
      MPX_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "copy");
      MPX_CUDA_CHECK(cudaEventRecord(ev, s), "copy");
      pending_copies().add(ev, async_owner);
      return;
    }
    MPX_CUDA_CHECK(cudaStreamSynchronize(s), "copy");
  }
};

struct Register {
  Register() {
    static CudaAllocator alloc;
    set_allocator(DeviceType::kCUDA, &alloc);
  }
} register_cuda;

}  // namespace

MemoryStats pool_memory_stats(int device) {
  const int dev = resolve(device);
  // CUDA graphs allocate from the device's graph memory, not the pool: both count (the peak is
  // the sum of the two high-water marks, an upper bound when they were reached apart).
  auto graph_attr = [dev](cudaGraphMemAttributeType a) {
    uint64_t v = 0;
    MPX_CUDA_CHECK(cudaDeviceGetGraphMemAttribute(dev, a, &v), "cuda memory_stats");
    return static_cast<int64_t>(v);
  };
  const mpx::detail::ByteCounter& b = g_bytes[static_cast<size_t>(dev)];
  MemoryStats s;
  s.allocated = b.allocated.load(std::memory_order_relaxed) + graph_attr(cudaGraphMemAttrUsedMemCurrent);
  s.reserved = static_cast<int64_t>(pool_attr(dev, cudaMemPoolAttrReservedMemCurrent)) +
               graph_attr(cudaGraphMemAttrReservedMemCurrent);
  s.peak_allocated = b.peak.load(std::memory_order_relaxed) + graph_attr(cudaGraphMemAttrUsedMemHigh);
  return s;
}
void pool_reset_peak(int device) {
  const int dev = resolve(device);
  g_bytes[static_cast<size_t>(dev)].reset_peak();
  uint64_t zero = 0;  // the only value the driver accepts: restarts the high-water mark
  MPX_CUDA_CHECK(cudaDeviceSetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemHigh, &zero),
                 "cuda reset_peak_memory_stats");
}
void pool_empty_cache(int device) {
  const int dev = resolve(device);
  DeviceGuard g(dev);
  MPX_CUDA_CHECK(cudaDeviceSynchronize(), "cuda empty_cache");
  MPX_CUDA_CHECK(cudaMemPoolTrimTo(pool_of(dev), 0), "cuda empty_cache");
  MPX_CUDA_CHECK(cudaDeviceGraphMemTrim(dev), "cuda empty_cache");
}

std::shared_ptr<void> pinned_allocate(size_t nbytes) {
  MPX_CHECK(device_count_raw() > 0, "pinned memory: no CUDA device is visible; page-locked host memory needs the "
            "CUDA driver (drop pin_memory / pinned_memory on a machine without a GPU)");
  void* p = pinned_cache().get(nbytes);
  return std::shared_ptr<void>(p, [nbytes](void* q) { pinned_cache().put(q, nbytes); });
}

bool pinned_query(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || device_count_raw() == 0 || t.numel() == 0) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, t.raw_data()) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

}  // namespace mpx::cuda
