// The CUDA runtime layer: device discovery, current streams, the stream-ordered allocator,
// host<->device copies, pinned host memory, events and the public mpx::cuda functions.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "ops/cuda/cuda_common.h"

namespace mpx::detail {
extern int (*g_cuda_device_count)();
}

namespace mpx::cuda {

[[noreturn]] void throw_error(int code, const char* what, const char* call) {
  const auto e = static_cast<cudaError_t>(code);
  // Clear the runtime's last error: a caller that catches this (an out-of-memory retry) must not
  // see it again at the next launch check, blamed on an unrelated kernel.
  (void)cudaGetLastError();
  std::string hint;
  if (e == cudaErrorMemoryAllocation)
    hint = "; the GPU is out of memory: reduce the batch size, or free tensors you no longer need";
  else if (e == cudaErrorNoKernelImageForDevice)
    hint = "; mpx was not compiled for this GPU: rebuild with -DCMAKE_CUDA_ARCHITECTURES=<its compute capability>";
  else if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
    hint = "; check the NVIDIA driver and that a GPU is visible (nvidia-smi)";
  throw Error(detail::str_cat(what, ": ", call, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")",
                              hint));
}

namespace {

constexpr int kMaxDevices = 64;

int device_count_raw() {
  static const int n = [] {
    int c = 0;
    // No driver or no device is not an error for a CPU-only run: report zero devices.
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return c;
  }();
  return n;
}

int resolve(int device) {
  MPX_CHECK(device_count_raw() > 0, "cuda: no CUDA device is visible; use Device::cpu() (check nvidia-smi and "
            "CUDA_VISIBLE_DEVICES)");
  if (device < 0) return current_device();
  MPX_CHECK(device < device_count_raw(), "cuda: device ", device, " does not exist (", device_count_raw(),
            " visible); use an index below that");
  return device;
}

// One default stream per device, created on first use. Non-blocking, so it never
// synchronizes with the legacy default stream that other libraries may use.
cudaStream_t default_stream(int device) {
  static std::array<std::atomic<cudaStream_t>, kMaxDevices> streams{};
  static std::mutex m;
  cudaStream_t s = streams[device].load();
  if (s) return s;
  std::lock_guard<std::mutex> l(m);
  if (!streams[device].load()) {
    DeviceGuard g(device);
    cudaStream_t ns = nullptr;
    MPX_CUDA_CHECK(cudaStreamCreateWithFlags(&ns, cudaStreamNonBlocking), "cuda stream");
    streams[device].store(ns);
  }
  return streams[device].load();
}

// The current stream is per thread (as in PyTorch); null means the device's default stream.
thread_local std::array<cudaStream_t, kMaxDevices> t_current{};

cudaMemPool_t pool_of(int device) {
  static std::array<std::atomic<cudaMemPool_t>, kMaxDevices> pools{};
  static std::mutex m;
  cudaMemPool_t p = pools[device].load();
  if (p) return p;
  std::lock_guard<std::mutex> l(m);
  if (!pools[device].load()) {
    cudaMemPool_t np = nullptr;
    MPX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&np, device), "cuda allocator");
    // Keep freed memory in the pool instead of returning it to the driver at every
    // synchronization: that is what makes the pool a cache.
    uint64_t threshold = UINT64_MAX;
    MPX_CUDA_CHECK(cudaMemPoolSetAttribute(np, cudaMemPoolAttrReleaseThreshold, &threshold), "cuda allocator");
    pools[device].store(np);
  }
  return pools[device].load();
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

std::atomic<bool> g_poison{[] {
  const char* e = std::getenv("MPX_CUDA_POISON");
  return e && e[0] == '1';
}()};

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
      const MemoryStats st = memory_stats(dev);
      MPX_ERROR("cuda allocator: out of memory allocating ", nbytes, " bytes on cuda:", dev, " (", st.allocated,
                " bytes in use, ", st.reserved, " reserved; ", cudaGetErrorString(e),
                "); reduce the batch size or free tensors you no longer need");
    }
    if (g_poison.load()) MPX_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, nbytes, s), "cuda allocator");
    // Freed on the stream that allocated it: the stream-ordered pool may then hand the
    // block to the next allocation on that stream without waiting for the device.
    const unsigned long long born_in = g_active_captures.load() > 0 ? capture_id(s) : 0;
    return std::shared_ptr<void>(p, [dev, s, born_in](void* q) {
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
    mpx::detail::g_cuda_device_count = [] { return device_count_raw(); };
    static CudaAllocator alloc;
    set_allocator(DeviceType::kCUDA, &alloc);
  }
} register_cuda;

std::atomic<bool> g_tf32{false};

}  // namespace

// ---- internal helpers (cuda_common.h) ----
cudaStream_t stream_of(int device) {
  const int dev = device < 0 ? current_device() : device;
  MPX_CHECK(dev < kMaxDevices, "cuda: device index ", dev, " is beyond the ", kMaxDevices, " mpx supports");
  cudaStream_t s = t_current[dev];
  return s ? s : default_stream(dev);
}

TensorDesc desc(const Tensor& t, const char* op) { return desc(t, t.sizes(), op); }

TensorDesc desc(const Tensor& t, const IntList& shape, const char* op) {
  MPX_CHECK(static_cast<int>(shape.size()) <= kMaxDims, op, ": CUDA kernels take at most ", kMaxDims,
            " dimensions, got ", shape_str(shape), "; reshape the tensor first");
  MPX_CHECK(shape.size() >= t.sizes().size(), op, ": cannot broadcast ", shape_str(t.sizes()), " to ", shape_str(shape));
  TensorDesc d;
  d.data = t.numel() ? t.raw_data() : nullptr;
  d.dtype = t.dtype();
  d.ndim = static_cast<int>(shape.size());
  const size_t lead = shape.size() - t.sizes().size();
  for (size_t i = 0; i < shape.size(); ++i) {
    d.sizes[i] = shape[i];
    if (i < lead) {
      d.strides[i] = 0;
    } else {
      const int64_t own = t.sizes()[i - lead];
      MPX_CHECK(own == shape[i] || own == 1, op, ": cannot broadcast ", shape_str(t.sizes()), " to ", shape_str(shape));
      d.strides[i] = own == shape[i] ? t.strides()[i - lead] : 0;
    }
  }
  return d;
}

TensorDeviceGuard::TensorDeviceGuard(const Tensor& t) {
  if (!t.device().is_cuda()) return;
  int cur = 0;
  MPX_CUDA_CHECK(cudaGetDevice(&cur), "cuda device");
  if (cur != t.device().index) {
    MPX_CUDA_CHECK(cudaSetDevice(t.device().index), "cuda device");
    prev_ = cur;
  }
}
TensorDeviceGuard::~TensorDeviceGuard() {
  if (prev_ >= 0) cudaSetDevice(prev_);
}

// ---- public API (core/cuda.h) ----
int current_device() {
  MPX_CHECK(device_count_raw() > 0, "cuda: no CUDA device is visible; use Device::cpu() (check nvidia-smi and "
            "CUDA_VISIBLE_DEVICES)");
  int d = 0;
  MPX_CUDA_CHECK(cudaGetDevice(&d), "cuda current_device");
  return d;
}
void set_device(int device) { MPX_CUDA_CHECK(cudaSetDevice(resolve(device)), "cuda set_device"); }
void synchronize(int device) {
  DeviceGuard g(resolve(device));
  MPX_CUDA_CHECK(cudaDeviceSynchronize(), "cuda synchronize");
}

MemoryStats memory_stats(int device) {
  const int dev = resolve(device);
  // CUDA graphs allocate from the device's graph memory, not the pool: both count (the peak is
  // the sum of the two high-water marks, an upper bound when they were reached apart).
  auto graph_attr = [dev](cudaGraphMemAttributeType a) {
    uint64_t v = 0;
    MPX_CUDA_CHECK(cudaDeviceGetGraphMemAttribute(dev, a, &v), "cuda memory_stats");
    return static_cast<int64_t>(v);
  };
  MemoryStats s;
  s.allocated = static_cast<int64_t>(pool_attr(dev, cudaMemPoolAttrUsedMemCurrent)) +
                graph_attr(cudaGraphMemAttrUsedMemCurrent);
  s.reserved = static_cast<int64_t>(pool_attr(dev, cudaMemPoolAttrReservedMemCurrent)) +
               graph_attr(cudaGraphMemAttrReservedMemCurrent);
  s.peak_allocated = static_cast<int64_t>(pool_attr(dev, cudaMemPoolAttrUsedMemHigh)) +
                     graph_attr(cudaGraphMemAttrUsedMemHigh);
  return s;
}
void reset_peak_memory_stats(int device) {
  const int dev = resolve(device);
  uint64_t zero = 0;  // the only value the driver accepts: restarts the high-water mark
  MPX_CUDA_CHECK(cudaMemPoolSetAttribute(pool_of(dev), cudaMemPoolAttrUsedMemHigh, &zero),
                 "cuda reset_peak_memory_stats");
  MPX_CUDA_CHECK(cudaDeviceSetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemHigh, &zero),
                 "cuda reset_peak_memory_stats");
}
void empty_cache(int device) {
  const int dev = resolve(device);
  synchronize(dev);
  MPX_CUDA_CHECK(cudaMemPoolTrimTo(pool_of(dev), 0), "cuda empty_cache");
  MPX_CUDA_CHECK(cudaDeviceGraphMemTrim(dev), "cuda empty_cache");
}

void poison_allocations(bool on) { g_poison.store(on); }
namespace {
std::atomic<int64_t> g_layout_conversions{0};
}  // namespace
void count_layout_conversion() { g_layout_conversions.fetch_add(1, std::memory_order_relaxed); }
int64_t layout_conversions() { return g_layout_conversions.load(); }
void allow_tf32(bool allow) { g_tf32.store(allow); }
bool tf32_allowed() { return g_tf32.load(); }

DeviceGuard::DeviceGuard(int device) : prev_(-1) {
  int cur = 0;
  MPX_CUDA_CHECK(cudaGetDevice(&cur), "cuda DeviceGuard");
  if (cur != device) {
    MPX_CUDA_CHECK(cudaSetDevice(device), "cuda DeviceGuard");
    prev_ = cur;
  }
}
DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) cudaSetDevice(prev_);
}

void Stream::synchronize() const {
  MPX_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle)), "cuda Stream::synchronize");
}
Stream current_stream(int device) {
  const int dev = resolve(device);
  return Stream{stream_of(dev), dev};
}
Stream new_stream(int device) {
  const int dev = resolve(device);
  DeviceGuard g(dev);
  cudaStream_t s = nullptr;
  MPX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cuda new_stream");
  return Stream{s, dev};
}
void set_current_stream(const Stream& s) {
  MPX_CHECK(s.device >= 0 && s.device < kMaxDevices, "cuda set_current_stream: bad device ", s.device);
  t_current[s.device] = static_cast<cudaStream_t>(s.handle);
}
StreamGuard::StreamGuard(const Stream& s) : prev_(current_stream(s.device)) { set_current_stream(s); }
StreamGuard::~StreamGuard() { t_current[prev_.device] = static_cast<cudaStream_t>(prev_.handle); }

Event::Event(bool enable_timing) {
  device_ = current_device();
  cudaEvent_t e = nullptr;
  MPX_CUDA_CHECK(cudaEventCreateWithFlags(&e, enable_timing ? cudaEventDefault : cudaEventDisableTiming), "cuda Event");
  ev_ = e;
}
Event::~Event() {
  if (ev_) cudaEventDestroy(static_cast<cudaEvent_t>(ev_));
}
void Event::record(const Stream& s) {
  MPX_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ev_), static_cast<cudaStream_t>(s.handle)), "cuda Event::record");
}
void Event::record() { record(current_stream(device_)); }
void Event::wait(const Stream& s) const {
  MPX_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle), static_cast<cudaEvent_t>(ev_), 0),
                 "cuda Event::wait");
}
void Event::synchronize() const {
  MPX_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(ev_)), "cuda Event::synchronize");
}
bool Event::query() const {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(ev_));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  MPX_CUDA_CHECK(e, "cuda Event::query");
  return true;
}
float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  MPX_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(ev_), static_cast<cudaEvent_t>(end.ev_)),
                 "cuda Event::elapsed_ms");
  return ms;
}

Tensor pin_memory(const Tensor& t) {
  MPX_CHECK(t.device().is_cpu(), "pin_memory: tensor ", shape_str(t.sizes()), " is on ", t.device().str(),
            "; only CPU tensors can be pinned");
  MPX_CHECK(device_count_raw() > 0, "pin_memory: no CUDA device is visible; pinned memory needs the CUDA driver");
  const Tensor src = t.contiguous();
  const size_t nbytes = std::max<size_t>(1, static_cast<size_t>(src.numel()) * src.element_size());
  void* p = pinned_cache().get(nbytes);
  auto storage = std::make_shared<StorageImpl>();
  storage->data = std::shared_ptr<void>(p, [nbytes](void* q) { pinned_cache().put(q, nbytes); });
  storage->nbytes = nbytes;
  storage->device = Device::cpu();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = src.sizes();
  impl->strides = contiguous_strides(src.sizes());
  impl->dtype = src.dtype();
  Tensor out(std::move(impl));
  if (src.numel()) std::memcpy(out.raw_data(), src.raw_data(), static_cast<size_t>(src.numel()) * src.element_size());
  return out;
}
bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || device_count_raw() == 0 || t.numel() == 0) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, t.raw_data()) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

struct Graph::Impl {
  int device = 0;
  cudaStream_t side = nullptr;
  Stream prev;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool capturing = false;
};

namespace {
// Capture streams are never destroyed: tensors allocated during a capture are freed on that
// stream, possibly long after the Graph is gone. A finished Graph returns its stream here.
std::mutex g_capture_streams_m;
std::vector<std::pair<int, cudaStream_t>> g_capture_streams;
cudaStream_t take_capture_stream(int device) {
  {
    std::lock_guard<std::mutex> l(g_capture_streams_m);
    for (auto it = g_capture_streams.begin(); it != g_capture_streams.end(); ++it)
      if (it->first == device) {
        cudaStream_t s = it->second;
        g_capture_streams.erase(it);
        return s;
      }
  }
  cudaStream_t s = nullptr;
  MPX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cuda::Graph");
  return s;
}
}  // namespace

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() {
  Impl& g = *impl_;
  if (g.capturing) {  // abandoned mid-capture (an exception): end it and drop what was recorded
    cudaGraph_t partial = nullptr;
    set_current_stream(g.prev);
    if (cudaStreamEndCapture(g.side, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    end_capture_and_flush();
  }
  if (g.exec) cudaGraphExecDestroy(g.exec);
  if (g.graph) cudaGraphDestroy(g.graph);
  if (g.side) {
    std::lock_guard<std::mutex> l(g_capture_streams_m);
    g_capture_streams.emplace_back(g.device, g.side);
  }
}

void Graph::capture_begin() {
  MPX_CHECK(!impl_->capturing, "cuda::Graph::capture_begin: already capturing; call capture_end() first");
  MPX_CHECK(!impl_->exec, "cuda::Graph::capture_begin: this graph already holds a capture; use a new Graph");
  Impl& g = *impl_;
  g.device = current_device();
  if (!g.side) g.side = take_capture_stream(g.device);
  g.prev = current_stream(g.device);
  // The captured work starts after everything already queued on the current stream.
  cudaEvent_t ev = nullptr;
  MPX_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cuda::Graph");
  MPX_CUDA_CHECK(cudaEventRecord(ev, static_cast<cudaStream_t>(g.prev.handle)), "cuda::Graph");
  MPX_CUDA_CHECK(cudaStreamWaitEvent(g.side, ev, 0), "cuda::Graph");
  MPX_CUDA_CHECK(cudaEventDestroy(ev), "cuda::Graph");
  set_current_stream(Stream{g.side, g.device});
  // Thread-local mode: other threads (data loaders) may keep using CUDA while this one captures.
  const cudaError_t e = cudaStreamBeginCapture(g.side, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    set_current_stream(g.prev);
    MPX_CUDA_CHECK(e, "cuda::Graph::capture_begin");
  }
  g.capturing = true;
  g_active_captures.fetch_add(1);
}

void Graph::capture_end() {
  Impl& g = *impl_;
  MPX_CHECK(g.capturing, "cuda::Graph::capture_end: capture_begin() was not called");
  g.capturing = false;
  set_current_stream(g.prev);
  const cudaError_t e = cudaStreamEndCapture(g.side, &g.graph);
  end_capture_and_flush();
  if (e == cudaErrorStreamCaptureInvalidated || e == cudaErrorStreamCaptureUnsupported) {
    cudaGetLastError();
    MPX_ERROR("cuda::Graph::capture_end: the capture was invalidated (", cudaGetErrorString(e),
              "): something in the captured region waited for the device (item(), a host copy, a "
              "synchronize) or used another stream; keep such calls outside capture");
  }
  MPX_CUDA_CHECK(e, "cuda::Graph::capture_end");
  // Graph-owned allocations still alive at the next launch are freed and re-made at the same
  // addresses, so tensors created during capture keep pointing at the latest replay's values.
  MPX_CUDA_CHECK(cudaGraphInstantiateWithFlags(&g.exec, g.graph, cudaGraphInstantiateFlagAutoFreeOnLaunch),
                 "cuda::Graph::capture_end");
}

void Graph::replay() {
  MPX_CHECK(impl_->exec, "cuda::Graph::replay: nothing was captured; call capture_begin() / capture_end() first");
  DeviceGuard dg(impl_->device);
  MPX_CUDA_CHECK(cudaGraphLaunch(impl_->exec, stream_of(impl_->device)), "cuda::Graph::replay");
}
bool Graph::captured() const { return impl_->exec != nullptr; }

bool is_capturing() {
  if (device_count_raw() == 0) return false;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  MPX_CUDA_CHECK(cudaStreamIsCapturing(stream_of(current_device()), &st), "cuda::is_capturing");
  return st == cudaStreamCaptureStatusActive;
}

HostReadback::HostReadback(const tensor_list& tensors) {
  MPX_CHECK(!tensors.empty() && tensors[0].is_cuda(), "cuda::HostReadback: expected CUDA tensors");
  const Device dev = tensors[0].device();
  DeviceGuard g(dev.index);
  const cudaStream_t s = stream_of(dev.index);
  // Captured, the copies would land in these page-locked buffers at every replay, long after
  // they went back to the shared cache and were reused (and ready() would query a captured event).
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  MPX_CUDA_CHECK(cudaStreamIsCapturing(s, &st), "cuda::HostReadback");
  MPX_CHECK(st == cudaStreamCaptureStatusNone, "cuda::HostReadback: cannot read device values back during a CUDA "
            "graph capture; keep read-backs (amp's overflow reports, target checks) outside the captured region");
  for (const Tensor& t : tensors) {
    MPX_CHECK(t.device() == dev && t.is_contiguous(), "cuda::HostReadback: tensors must be contiguous and on ",
              dev.str(), ", got ", shape_str(t.sizes()), " on ", t.device().str());
    Tensor h = pin_memory(empty(t.sizes(), TensorOptions(t.dtype())));
    if (t.numel())
      MPX_CUDA_CHECK(cudaMemcpyAsync(h.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()) * t.element_size(),
                                     cudaMemcpyDeviceToHost, s),
                     "cuda::HostReadback");
    host_.push_back(h);
  }
  done_ = std::make_shared<Event>(false);
  done_->record(Stream{s, dev.index});
}
HostReadback::~HostReadback() {
  try {
    if (done_) done_->synchronize();
  } catch (const std::exception&) {
    // A destructor cannot report it; the device error resurfaces at the next checked call.
  }
}
bool HostReadback::ready() const { return done_->query(); }
double HostReadback::value(size_t i) const {
  MPX_CHECK(i < host_.size(), "cuda::HostReadback::value: index ", i, " out of range (", host_.size(), " tensors)");
  done_->synchronize();
  return host_[i].item_double();
}

DeviceProperties device_properties(int device) {
  cudaDeviceProp p{};
  MPX_CUDA_CHECK(cudaGetDeviceProperties(&p, resolve(device)), "cuda device_properties");
  DeviceProperties r;
  r.name = p.name;
  r.major = p.major;
  r.minor = p.minor;
  r.multiprocessors = p.multiProcessorCount;
  r.total_memory = static_cast<int64_t>(p.totalGlobalMem);
  r.l2_cache = p.l2CacheSize;
  return r;
}

std::string version_string() {
  auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  std::string s = "CUDA runtime " + ver(rt);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) s += ", driver " + ver(drv);
  else s += ", no driver";
  const size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  s += ", cuBLASLt " + std::to_string(lt / 10000) + "." + std::to_string((lt / 100) % 100) + "." + std::to_string(lt % 100);
  return s;
}

}  // namespace mpx::cuda
