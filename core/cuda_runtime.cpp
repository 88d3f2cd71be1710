// The CUDA runtime behind core/cuda.h: errors, devices, current streams, events, graphs, host read-backs.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/tensor.h"

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

// One default stream per device, created on first use. Non-blocking, so it never
// synchronizes with the legacy default stream that other libraries may use.
cudaStream_t default_stream(int device) {
  static std::array<std::atomic<cudaStream_t>, kMaxDevices> streams{};
  static std::mutex m;
  return lazy_per_device(streams, m, device, [](int d) {
    DeviceGuard g(d);
    cudaStream_t ns = nullptr;
    MPX_CUDA_CHECK(cudaStreamCreateWithFlags(&ns, cudaStreamNonBlocking), "cuda stream");
    return ns;
  });
}

// The current stream is per thread (as in PyTorch); null means the device's default stream.
thread_local std::array<cudaStream_t, kMaxDevices> t_current{};


std::atomic<bool> g_tf32{false};
std::atomic<int64_t> g_layout_conversions{0};

}  // namespace

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

cudaStream_t stream_of(int device) {
  const int dev = device < 0 ? current_device() : device;
  MPX_CHECK(dev < kMaxDevices, "cuda: device index ", dev, " is beyond the ", kMaxDevices, " mpx supports");
  cudaStream_t s = t_current[dev];
  return s ? s : default_stream(dev);
}

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
  capture_started();
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
