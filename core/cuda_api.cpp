// The public mpx::cuda API in libmpx: loads the CUDA module (libmpx_cuda) on first use and forwards to it; without it, no devices and a clear error for anything that needs one.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/cuda.h"
#include "core/cuda_backend.h"
#include "core/module.h"

namespace mpx {
namespace cuda {
namespace detail {
namespace {

std::atomic<Backend*> g_backend{nullptr};
std::string g_problem;  // written once, inside the call_once below

void load_cuda_module() {
#ifndef MPX_WITH_CUDA
  g_problem = "mpx was built without CUDA; rebuild with the CUDA Toolkit installed (-DMPX_CUDA=ON), or use Device::cpu()";
#else
  if (const char* off = std::getenv("MPX_DISABLE_CUDA"); off && *off && std::string(off) != "0") {
    g_problem = "the CUDA module is disabled by MPX_DISABLE_CUDA; unset it to use the GPU, or use Device::cpu()";
    return;
  }
  std::string err;
  // Local: the module's symbols serve only the backend it hands over, never another library's
  // lookups. The backend is published only once dlopen has run every static initializer of the
  // module (its allocator, its kernels' registrations): a thread that sees it sees them too.
  if (auto entry = reinterpret_cast<Backend* (*)()>(mpx::detail::load_module("mpx_cuda", "mpx_cuda_backend", false, err)))
    g_backend.store(entry(), std::memory_order_release);
  if (!g_backend.load())
    g_problem = "the CUDA module libmpx_cuda.so did not load (" + err +
                "); install it beside libmpx.so with the CUDA libraries it needs (ldd libmpx_cuda.so), or use Device::cpu()";
#endif
}

std::once_flag g_once;

std::atomic<bool> g_poison{[] {
  const char* e = std::getenv("MPX_CUDA_POISON");
  return e && e[0] == '1';
}()};
std::atomic<bool> g_tf32{false};
std::atomic<bool> g_cudnn_benchmark{false};
std::atomic<bool> g_cudnn_deterministic{false};
// The fused attention kernels: on unless the environment says 0 (to compare paths or rule one out).
bool env_not_zero(const char* name) {
  const char* e = std::getenv(name);
  return !(e && std::strcmp(e, "0") == 0);
}
std::atomic<bool> g_cudnn_sdp{env_not_zero("MPX_SDPA_CUDNN")};
std::atomic<bool> g_flash_sdp{env_not_zero("MPX_SDPA_FLASH")};
std::atomic<int64_t> g_layout_conversions{0};
std::atomic<int64_t> g_cudnn_fallbacks{0};
std::mutex g_fallback_mu;
std::string g_last_fallback;

[[noreturn]] void no_cuda(const char* what) { MPX_ERROR(what, ": ", module_problem()); }

Backend& need(const char* what) {
  Backend* b = backend();
  if (!b) no_cuda(what);
  return *b;
}

}  // namespace

Backend* backend() {
  if (Backend* b = g_backend.load(std::memory_order_acquire)) return b;
  std::call_once(g_once, load_cuda_module);
  return g_backend.load(std::memory_order_acquire);
}
Backend* loaded_backend() { return g_backend.load(std::memory_order_acquire); }
std::string module_problem() {
  backend();
  return g_problem;
}
bool poison_enabled() { return g_poison.load(std::memory_order_relaxed); }
void note_cudnn_fallback(const std::string& what) {
  g_cudnn_fallbacks.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lk(g_fallback_mu);
  g_last_fallback = what;
}
void count_layout_conversion() { g_layout_conversions.fetch_add(1, std::memory_order_relaxed); }

}  // namespace detail

using detail::need;

MemoryStats memory_stats(int device) { return need("cuda::memory_stats").memory_stats(device); }
void reset_peak_memory_stats(int device) { need("cuda::reset_peak_memory_stats").reset_peak_memory_stats(device); }
void empty_cache(int device) { need("cuda::empty_cache").empty_cache(device); }
int current_device() { return need("cuda::current_device").current_device(); }
void set_device(int device) { need("cuda::set_device").set_device(device); }
void synchronize(int device) { need("cuda::synchronize").synchronize(device); }
void poison_allocations(bool on) { detail::g_poison.store(on); }
int64_t layout_conversions() { return detail::g_layout_conversions.load(); }
void allow_tf32(bool allow) { detail::g_tf32.store(allow); }
bool tf32_allowed() { return detail::g_tf32.load(); }
std::string cudnn_version() {
  detail::Backend* b = detail::backend();
  return b ? b->cudnn_version() : "not built";
}
void cudnn_benchmark(bool on) { detail::g_cudnn_benchmark.store(on); }
bool cudnn_benchmark_enabled() { return detail::g_cudnn_benchmark.load(); }
void cudnn_deterministic(bool on) { detail::g_cudnn_deterministic.store(on); }
bool cudnn_deterministic_enabled() { return detail::g_cudnn_deterministic.load(); }
void enable_cudnn_sdp(bool on) { detail::g_cudnn_sdp.store(on); }
bool cudnn_sdp_enabled() { return detail::g_cudnn_sdp.load(); }
void enable_flash_sdp(bool on) { detail::g_flash_sdp.store(on); }
bool flash_sdp_enabled() { return detail::g_flash_sdp.load(); }
int64_t cudnn_fallbacks() { return detail::g_cudnn_fallbacks.load(); }
std::string cudnn_last_fallback() {
  std::lock_guard<std::mutex> lk(detail::g_fallback_mu);
  return detail::g_last_fallback;
}

DeviceGuard::DeviceGuard(int device) : prev_(-1) {
  detail::Backend& b = need("cuda::DeviceGuard");
  const int cur = b.get_device_raw();
  if (cur != device) {
    b.set_device_raw(device);
    prev_ = cur;
  }
}
DeviceGuard::~DeviceGuard() {
  if (prev_ < 0) return;
  try {
    detail::loaded_backend()->set_device_raw(prev_);
  } catch (const std::exception&) {
    // A destructor cannot report it; the device error resurfaces at the next checked call.
  }
}

void Stream::synchronize() const { need("cuda::Stream").stream_synchronize(*this); }
Stream current_stream(int device) { return need("cuda::current_stream").current_stream(device); }
Stream new_stream(int device) { return need("cuda::new_stream").new_stream(device); }
void set_current_stream(const Stream& s) { need("cuda::set_current_stream").set_current_stream(s); }
StreamGuard::StreamGuard(const Stream& s) : prev_(current_stream(s.device)) { set_current_stream(s); }
StreamGuard::~StreamGuard() {
  try {
    set_current_stream(prev_);
  } catch (const std::exception&) {
  }
}

Event::Event(bool enable_timing) {
  detail::Backend& b = need("cuda::Event");
  device_ = b.current_device();
  ev_ = b.event_create(enable_timing);
}
Event::~Event() {
  if (ev_) detail::loaded_backend()->event_destroy(ev_);
}
void Event::record(const Stream& s) { detail::loaded_backend()->event_record(ev_, s); }
void Event::record() { record(current_stream(device_)); }
void Event::wait(const Stream& s) const { detail::loaded_backend()->event_wait(ev_, s); }
void Event::synchronize() const { detail::loaded_backend()->event_synchronize(ev_); }
bool Event::query() const { return detail::loaded_backend()->event_query(ev_); }
float Event::elapsed_ms(const Event& end) const { return detail::loaded_backend()->event_elapsed_ms(ev_, end.ev_); }

Tensor pin_memory(const Tensor& t) {
  MPX_CHECK(t.device().is_cpu(), "pin_memory: tensor ", shape_str(t.sizes()), " is on ", t.device().str(),
            "; only CPU tensors can be pinned");
  const Tensor src = t.contiguous();
  Tensor out = empty(src.sizes(), TensorOptions(src.dtype()).pinned_memory());
  if (src.numel()) std::memcpy(out.raw_data(), src.raw_data(), static_cast<size_t>(src.numel()) * src.element_size());
  return out;
}
std::shared_ptr<void> allocate_pinned(size_t nbytes) {
  return need("pinned memory (TensorOptions::pinned_memory)").allocate_pinned(nbytes);
}
bool is_pinned(const Tensor& t) {
  detail::Backend* b = detail::loaded_backend();  // nothing is pinned before the module loads
  return b && b->is_pinned(t);
}

// The module's graph state, owned through this handle.
struct Graph::Impl {
  void* state = nullptr;
};
Graph::Graph() : impl_(std::make_unique<Impl>()) { impl_->state = need("cuda::Graph").graph_create(); }
Graph::~Graph() {
  if (impl_ && impl_->state) detail::loaded_backend()->graph_destroy(impl_->state);
}
void Graph::capture_begin() { detail::loaded_backend()->graph_capture_begin(impl_->state); }
void Graph::capture_end() { detail::loaded_backend()->graph_capture_end(impl_->state); }
void Graph::replay() { detail::loaded_backend()->graph_replay(impl_->state); }
bool Graph::captured() const { return detail::loaded_backend()->graph_captured(impl_->state); }
bool is_capturing() {
  detail::Backend* b = detail::loaded_backend();  // no capture can have begun before the module loaded
  return b && b->is_capturing();
}

HostReadback::HostReadback(const tensor_list& tensors) {
  MPX_CHECK(!tensors.empty() && tensors[0].is_cuda(), "cuda::HostReadback: expected CUDA tensors");
  const Stream s = need("cuda::HostReadback").readback_start(tensors, host_);
  DeviceGuard on_device(s.device);  // an event belongs to the device current at its creation
  done_ = std::make_shared<Event>(false);
  done_->record(s);
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

DeviceProperties device_properties(int device) { return need("cuda::device_properties").device_properties(device); }
std::string version_string() {
#ifndef MPX_WITH_CUDA
  return "built without CUDA";
#else
  detail::Backend* b = detail::backend();
  return b ? b->version_string() : "off: " + detail::module_problem();
#endif
}

}  // namespace cuda

int cuda_device_count() {
  cuda::detail::Backend* b = cuda::detail::backend();
  return b ? b->device_count() : 0;
}
bool cuda_is_available() { return cuda_device_count() > 0; }

}  // namespace mpx
