// The mpx::cuda API in a build without the CUDA backend: no devices, and a clear error for
// anything that needs one.
#include "core/cuda.h"

namespace mpx::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  MPX_ERROR(what, ": mpx was built without CUDA; rebuild with the CUDA Toolkit installed (-DMPX_CUDA=ON), "
            "or use Device::cpu()");
}
}  // namespace

MemoryStats memory_stats(int) { no_cuda("cuda::memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("cuda::reset_peak_memory_stats"); }
void empty_cache(int) { no_cuda("cuda::empty_cache"); }
int current_device() { no_cuda("cuda::current_device"); }
void set_device(int) { no_cuda("cuda::set_device"); }
void synchronize(int) { no_cuda("cuda::synchronize"); }
void poison_allocations(bool) {}
int64_t layout_conversions() { return 0; }
void allow_tf32(bool) {}  // a preference with nothing to apply to
bool tf32_allowed() { return false; }
std::string cudnn_version() { return "not built"; }
void cudnn_benchmark(bool) {}  // preferences with nothing to apply to, like allow_tf32
bool cudnn_benchmark_enabled() { return false; }
void cudnn_deterministic(bool) {}
bool cudnn_deterministic_enabled() { return false; }
int64_t cudnn_fallbacks() { return 0; }
std::string cudnn_last_fallback() { return ""; }
DeviceGuard::DeviceGuard(int) : prev_(-1) { no_cuda("cuda::DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;
void Stream::synchronize() const { no_cuda("cuda::Stream"); }
Stream current_stream(int) { no_cuda("cuda::current_stream"); }
Stream new_stream(int) { no_cuda("cuda::new_stream"); }
void set_current_stream(const Stream&) { no_cuda("cuda::set_current_stream"); }
StreamGuard::StreamGuard(const Stream&) { no_cuda("cuda::StreamGuard"); }
StreamGuard::~StreamGuard() = default;
Event::Event(bool) { no_cuda("cuda::Event"); }
Event::~Event() = default;
void Event::record(const Stream&) { no_cuda("cuda::Event"); }
void Event::record() { no_cuda("cuda::Event"); }
void Event::wait(const Stream&) const { no_cuda("cuda::Event"); }
void Event::synchronize() const { no_cuda("cuda::Event"); }
bool Event::query() const { no_cuda("cuda::Event"); }
float Event::elapsed_ms(const Event&) const { no_cuda("cuda::Event"); }
Tensor pin_memory(const Tensor&) { no_cuda("pin_memory"); }
std::shared_ptr<void> allocate_pinned(size_t) { no_cuda("pinned memory (TensorOptions::pinned_memory)"); }
bool is_pinned(const Tensor&) { return false; }
struct Graph::Impl {};
Graph::Graph() { no_cuda("cuda::Graph"); }
Graph::~Graph() = default;
void Graph::capture_begin() { no_cuda("cuda::Graph"); }
void Graph::capture_end() { no_cuda("cuda::Graph"); }
void Graph::replay() { no_cuda("cuda::Graph"); }
bool Graph::captured() const { return false; }
bool is_capturing() { return false; }
HostReadback::HostReadback(const tensor_list&) { no_cuda("cuda::HostReadback"); }
HostReadback::~HostReadback() = default;
bool HostReadback::ready() const { return true; }
double HostReadback::value(size_t) const { no_cuda("cuda::HostReadback"); }
DeviceProperties device_properties(int) { no_cuda("cuda::device_properties"); }
std::string version_string() { return "built without CUDA"; }
}  // namespace mpx::cuda
