// The CUDA module's runtime behind core/cuda.h (through core/cuda_backend.h): errors, devices, current streams, events, graphs, host read-backs.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "core/cuda_backend.h"
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
  throw Error(mpx::detail::str_cat(what, ": ", call, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")",
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
  if (device < 0) return current_device_raw();
  MPX_CHECK(device < device_count_raw(), "cuda: device ", device, " does not exist (", device_count_raw(),
            " visible); use an index below that");
  return device;
}

cudaStream_t stream_of(int device) {
  const int dev = device < 0 ? current_device_raw() : device;
  MPX_CHECK(dev < kMaxDevices, "cuda: device index ", dev, " is beyond the ", kMaxDevices, " mpx supports");
  cudaStream_t s = t_current[dev];
  return s ? s : default_stream(dev);
}

int current_device_raw() {
  MPX_CHECK(device_count_raw() > 0, "cuda: no CUDA device is visible; use Device::cpu() (check nvidia-smi and "
            "CUDA_VISIBLE_DEVICES)");
  int d = 0;
  MPX_CUDA_CHECK(cudaGetDevice(&d), "cuda current_device");
  return d;
}

namespace {

cudaEvent_t ev_of(void* e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t st_of(const Stream& s) { return static_cast<cudaStream_t>(s.handle); }

struct GraphState {
  int device = 0;
  cudaStream_t side = nullptr;
  Stream prev;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool capturing = false;
};

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

void set_current(const Stream& s) {
  MPX_CHECK(s.device >= 0 && s.device < kMaxDevices, "cuda set_current_stream: bad device ", s.device);
  t_current[s.device] = st_of(s);
}

struct Runtime final : detail::Backend {
  int device_count() override { return device_count_raw(); }
  int current_device() override { return current_device_raw(); }
  void set_device(int device) override { MPX_CUDA_CHECK(cudaSetDevice(resolve(device)), "cuda set_device"); }
  void synchronize(int device) override {
    DeviceGuard g(resolve(device));
    MPX_CUDA_CHECK(cudaDeviceSynchronize(), "cuda synchronize");
  }
  int get_device_raw() override {
    int cur = 0;
    MPX_CUDA_CHECK(cudaGetDevice(&cur), "cuda DeviceGuard");
    return cur;
  }
  void set_device_raw(int device) override { MPX_CUDA_CHECK(cudaSetDevice(device), "cuda DeviceGuard"); }

  MemoryStats memory_stats(int device) override { return pool_memory_stats(device); }
  void reset_peak_memory_stats(int device) override { pool_reset_peak(device); }
  void empty_cache(int device) override { pool_empty_cache(device); }
  std::shared_ptr<void> allocate_pinned(size_t nbytes) override { return pinned_allocate(nbytes); }
  bool is_pinned(const Tensor& t) override { return pinned_query(t); }

  Stream current_stream(int device) override {
    const int dev = resolve(device);
    return Stream{stream_of(dev), dev};
  }
  Stream new_stream(int device) override {
    const int dev = resolve(device);
    DeviceGuard g(dev);
    cudaStream_t s = nullptr;
    MPX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cuda new_stream");
    return Stream{s, dev};
  }
  void set_current_stream(const Stream& s) override { set_current(s); }
  void stream_synchronize(const Stream& s) override {
    MPX_CUDA_CHECK(cudaStreamSynchronize(st_of(s)), "cuda Stream::synchronize");
  }

  void* event_create(bool timing) override {
    cudaEvent_t e = nullptr;
    MPX_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cuda Event");
    return e;
  }
  void event_destroy(void* ev) override { cudaEventDestroy(ev_of(ev)); }
  void event_record(void* ev, const Stream& s) override {
    MPX_CUDA_CHECK(cudaEventRecord(ev_of(ev), st_of(s)), "cuda Event::record");
  }
  void event_wait(void* ev, const Stream& s) override {
    MPX_CUDA_CHECK(cudaStreamWaitEvent(st_of(s), ev_of(ev), 0), "cuda Event::wait");
  }
  void event_synchronize(void* ev) override { MPX_CUDA_CHECK(cudaEventSynchronize(ev_of(ev)), "cuda Event::synchronize"); }
  bool event_query(void* ev) override {
    const cudaError_t e = cudaEventQuery(ev_of(ev));
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    MPX_CUDA_CHECK(e, "cuda Event::query");
    return true;
  }
  float event_elapsed_ms(void* start, void* end) override {
    float ms = 0;
    MPX_CUDA_CHECK(cudaEventElapsedTime(&ms, ev_of(start), ev_of(end)), "cuda Event::elapsed_ms");
    return ms;
  }

  void* graph_create() override { return new GraphState; }
  void graph_destroy(void* state) override {
    std::unique_ptr<GraphState> owned(static_cast<GraphState*>(state));
    GraphState& g = *owned;
    if (g.capturing) {  // abandoned mid-capture (an exception): end it and drop what was recorded
      cudaGraph_t partial = nullptr;
      set_current(g.prev);
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
  void graph_capture_begin(void* state) override {
    GraphState& g = *static_cast<GraphState*>(state);
    MPX_CHECK(!g.capturing, "cuda::Graph::capture_begin: already capturing; call capture_end() first");
    MPX_CHECK(!g.exec, "cuda::Graph::capture_begin: this graph already holds a capture; use a new Graph");
    g.device = current_device_raw();
    if (!g.side) g.side = take_capture_stream(g.device);
    g.prev = current_stream(g.device);
    // The captured work starts after everything already queued on the current stream.
    cudaEvent_t ev = nullptr;
    MPX_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cuda::Graph");
    MPX_CUDA_CHECK(cudaEventRecord(ev, st_of(g.prev)), "cuda::Graph");
    MPX_CUDA_CHECK(cudaStreamWaitEvent(g.side, ev, 0), "cuda::Graph");
    MPX_CUDA_CHECK(cudaEventDestroy(ev), "cuda::Graph");
    set_current(Stream{g.side, g.device});
    // Thread-local mode: other threads (data loaders) may keep using CUDA while this one captures.
    const cudaError_t e = cudaStreamBeginCapture(g.side, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
      set_current(g.prev);
      MPX_CUDA_CHECK(e, "cuda::Graph::capture_begin");
    }
    g.capturing = true;
    capture_started();
  }
  void graph_capture_end(void* state) override {
    GraphState& g = *static_cast<GraphState*>(state);
    MPX_CHECK(g.capturing, "cuda::Graph::capture_end: capture_begin() was not called");
    g.capturing = false;
    set_current(g.prev);
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
  void graph_replay(void* state) override {
    GraphState& g = *static_cast<GraphState*>(state);
    MPX_CHECK(g.exec, "cuda::Graph::replay: nothing was captured; call capture_begin() / capture_end() first");
    DeviceGuard dg(g.device);
    MPX_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_of(g.device)), "cuda::Graph::replay");
  }
  bool graph_captured(void* state) override { return static_cast<GraphState*>(state)->exec != nullptr; }
  bool is_capturing() override {
    if (device_count_raw() == 0) return false;
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    MPX_CUDA_CHECK(cudaStreamIsCapturing(stream_of(current_device_raw()), &st), "cuda::is_capturing");
    return st == cudaStreamCaptureStatusActive;
  }

  Stream readback_start(const tensor_list& tensors, tensor_list& host) override {
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
      Tensor h = empty(t.sizes(), TensorOptions(t.dtype()).pinned_memory());
      if (t.numel())
        MPX_CUDA_CHECK(cudaMemcpyAsync(h.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()) * t.element_size(),
                                       cudaMemcpyDeviceToHost, s),
                       "cuda::HostReadback");
      host.push_back(h);
    }
    return Stream{s, dev.index};
  }

  DeviceProperties device_properties(int device) override {
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
  std::string version_string() override {
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
  std::string cudnn_version() override { return cudnn_version_string(); }
};

}  // namespace
}  // namespace mpx::cuda

/// The module's one entry point: libmpx looks it up by name once the module has loaded.
extern "C" __attribute__((visibility("default"))) mpx::cuda::detail::Backend* mpx_cuda_backend() {
  static mpx::cuda::Runtime runtime;
  return &runtime;
}
