// Core implementations: dtype names and promotion, devices, the CPU allocator, tensor metadata.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "core/allocator.h"
#include "core/cuda_backend.h"
#include "core/cuda.h"
#include "core/random.h"
#include "core/tensor.h"

namespace mpx {

IntList IntList::slice(size_t n, size_t m) const {
  MPX_CHECK(n <= size() && m <= size() - n, "IntList::slice(", n, ", ", m, "): out of range for a list of ", size(),
            " elements");
  return IntList(begin() + static_cast<std::ptrdiff_t>(n), begin() + static_cast<std::ptrdiff_t>(n + m));
}

// ---- dtype ----
const char* dtype_name(DType t) {
  switch (t) {
    case kFloat32: return "f32";
    case kFloat16: return "f16";
    case kBFloat16: return "bf16";
    case kFloat64: return "f64";
    case kInt64: return "i64";
    case kInt32: return "i32";
    case kUInt8: return "u8";
    case kBool: return "bool";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  if (n == "f32" || n == "float32" || n == "float" || n == "fp32") return kFloat32;
  if (n == "f16" || n == "float16" || n == "half" || n == "fp16") return kFloat16;
  if (n == "bf16" || n == "bfloat16") return kBFloat16;
  if (n == "f64" || n == "float64" || n == "double") return kFloat64;
  if (n == "i64" || n == "int64" || n == "long") return kInt64;
  if (n == "i32" || n == "int32" || n == "int") return kInt32;
  if (n == "u8" || n == "uint8") return kUInt8;
  if (n == "bool") return kBool;
  MPX_ERROR("unknown dtype '", n, "'; use one of f32, f16, bf16, f64, i64, i32, u8, bool");
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case kBool: return 0;
      case kUInt8: return 1;
      case kInt32: return 2;
      case kInt64: return 3;
      case kFloat16: case kBFloat16: return 4;
      case kFloat32: return 5;
      case kFloat64: return 6;
    }
    return 0;
  };
  if (is_reduced_float(a) && is_reduced_float(b)) return kFloat32;
  return rank(a) >= rank(b) ? a : b;
}

// ---- device ----
Device::Device(const std::string& spec) {
  if (spec == "cpu") { *this = cpu(); return; }
  if (spec.rfind("cuda", 0) == 0) {
    int idx = 0;
    if (spec.size() > 4) {
      MPX_CHECK(spec[4] == ':' && spec.size() > 5, "bad device '", spec, "'; use cpu, cuda or cuda:N");
      try { idx = std::stoi(spec.substr(5)); } catch (...) { MPX_ERROR("bad device '", spec, "'; use cpu, cuda or cuda:N"); }
    }
    *this = cuda(idx);
    return;
  }
  MPX_ERROR("bad device '", spec, "'; use cpu, cuda or cuda:N");
}
std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

// cuda_device_count() and cuda_is_available(): core/cuda_api.cpp, which loads the CUDA module.

// ---- allocators ----
namespace {
struct CpuAllocator final : Allocator {
  CpuAllocator() {
    // Keep freed activation buffers in the heap instead of returning them to the OS on
    // every free: without this, each training step pays mmap/munmap and page faults for
    // every large tensor (measured: batch_norm backward 97 ms -> 6 ms on [128,64,28,28]).
    // glibc caps the mmap threshold at 32 MiB on 64-bit (a larger value is ignored).
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  std::shared_ptr<void> allocate(size_t nbytes, Device) override {
    const size_t rounded = (std::max<size_t>(nbytes, 1) + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    MPX_CHECK(p, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    const auto n = static_cast<int64_t>(rounded);
    bytes.add(n);
    return std::shared_ptr<void>(p, [this, n](void* q) {
      std::free(q);
      bytes.sub(n);
    });
  }
  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes,
            const std::shared_ptr<void>&) override {
    MPX_CHECK(dst_dev.is_cpu() && src_dev.is_cpu(), "cpu allocator: cannot copy between ", src_dev.str(), " and ",
              dst_dev.str());
    std::memcpy(dst, src, nbytes);
  }
  detail::ByteCounter bytes;
};
// Atomic: the CUDA module installs its allocator while other threads may be allocating on the CPU.
std::atomic<Allocator*> g_allocators[kNumDeviceTypes] = {};
// Never destroyed: tensors in static objects may be freed after main returns.
CpuAllocator& cpu_allocator() {
  static auto* a = new CpuAllocator;
  return *a;
}
}  // namespace

namespace cpu {
MemoryStats memory_stats() {
  const CpuAllocator& a = cpu_allocator();
  MemoryStats s;
  s.allocated = s.reserved = a.bytes.allocated.load(std::memory_order_relaxed);
  s.peak_allocated = a.bytes.peak.load(std::memory_order_relaxed);
  return s;
}
void reset_peak_memory_stats() { cpu_allocator().bytes.reset_peak(); }
}  // namespace cpu

Allocator& allocator_for(DeviceType type) {
  if (type == DeviceType::kCPU) {
    Allocator* c = g_allocators[0].load();
    return c ? *c : cpu_allocator();
  }
  Allocator* a = g_allocators[static_cast<int>(type)].load();
  if (!a) {  // the CUDA module installs its allocator as it loads
    MPX_CHECK(cuda::detail::backend(), "no allocator for cuda: ", cuda::detail::module_problem());
    a = g_allocators[static_cast<int>(type)].load();
  }
  MPX_CHECK(a, "no allocator for cuda: no GPU is present; use Device::cpu()");
  return *a;
}
void set_allocator(DeviceType type, Allocator* alloc) { g_allocators[static_cast<int>(type)].store(alloc); }

// ---- random ----
namespace random {
Generator& default_generator() {
  static Generator g;
  return g;
}
}  // namespace random
void manual_seed(uint64_t seed) { random::default_generator().seed(seed); }
Tensor get_rng_state() {
  const random::Generator& g = random::default_generator();
  return tensor<int64_t>({static_cast<int64_t>(g.current_seed()), static_cast<int64_t>(g.offset())});
}
void set_rng_state(const Tensor& state) {
  MPX_CHECK(state.defined() && state.dtype() == kInt64 && state.dim() == 1 && state.numel() == 2,
            "set_rng_state: the state is two i64 values (seed, offset) as get_rng_state returns, got ",
            state.defined() ? dtype_name(state.dtype()) + std::string(" ") + shape_str(state.sizes()) : "an undefined tensor");
  const Tensor s = state.cpu().contiguous();
  random::default_generator().set_state(static_cast<uint64_t>(s.data_ptr<int64_t>()[0]),
                                        static_cast<uint64_t>(s.data_ptr<int64_t>()[1]));
}

// ---- shapes ----
int64_t numel_of(const IntList& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) {
    if (s == 0) return 0;
    overflow |= __builtin_mul_overflow(n, s, &n);
  }
  if (overflow) [[unlikely]]
    MPX_ERROR("shape ", shape_str(shape), " has more elements than an int64 counts (2^63); no tensor can hold it");
  return n;
}
std::string shape_str(const IntList& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}
std::ostream& operator<<(std::ostream& os, const IntList& s) { return os << shape_str(s); }
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  MPX_CHECK(dim >= -n && dim < n, what, " ", dim, " is out of range for a tensor with ", ndim,
            " dimensions; use a value in [", -n, ", ", n - 1, "]");
  return dim < 0 ? dim + n : dim;
}
IntList contiguous_strides(const IntList& shape, MemoryFormat fmt) {
  IntList st(shape.size());
  if (fmt == MemoryFormat::ChannelsLast && shape.size() == 4) {
    // NHWC order in memory for NCHW logical sizes.
    const int64_t C = shape[1], H = shape[2], W = shape[3];
    st[1] = 1;
    st[3] = std::max<int64_t>(C, 1);
    st[2] = st[3] * std::max<int64_t>(W, 1);
    st[0] = st[2] * std::max<int64_t>(H, 1);
    return st;
  }
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}
IntList broadcast_shapes(const IntList& a, const IntList& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  IntList r(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MPX_CHECK(x == y || x == 1 || y == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
              " cannot be broadcast together (dimension ", i, ": ", x, " vs ", y, ")");
    r[i] = x == 1 ? y : x;
  }
  return r;
}

// ---- tensor metadata ----
void Tensor::undefined_error(const char* call) {
  MPX_ERROR(call, "() called on an undefined Tensor (default-constructed, or a gradient that was never computed); "
            "check defined() first");
}
int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim())]; }
int64_t Tensor::numel() const { return numel_of(self("numel").sizes); }
void* Tensor::raw_data() const {
  const TensorImpl& t = self("raw_data");
  return static_cast<char*>(t.storage->data.get()) + t.offset * static_cast<int64_t>(element_size());
}
bool Tensor::is_contiguous(MemoryFormat fmt) const {
  if (fmt == MemoryFormat::Preserve) return true;
  if (fmt == MemoryFormat::ChannelsLast && dim() != 4) return false;
  const IntList expect = contiguous_strides(sizes(), fmt);
  for (int64_t i = 0; i < dim(); ++i)
    if (sizes()[i] != 1 && strides()[i] != expect[i]) return false;
  return true;
}
MemoryFormat Tensor::suggest_memory_format() const {
  if (dim() == 4 && !is_contiguous() && is_contiguous(MemoryFormat::ChannelsLast)) return MemoryFormat::ChannelsLast;
  return MemoryFormat::Contiguous;
}

namespace {
// The bytes a tensor of this shape and these strides spans, its shape and strides checked (`who` names the call).
size_t storage_bytes(const IntList& shape, const IntList& strides, DType dtype, const char* who) {
  for (auto s : shape) MPX_CHECK(s >= 0, who, ": negative size in shape ", shape_str(shape));
  MPX_CHECK(strides.size() == shape.size(), who, ": ", strides.size(), " strides for the ", shape.size(),
            " dims of ", shape_str(shape));
  for (auto s : strides) MPX_CHECK(s >= 0, who, ": strides must be non-negative, got ", shape_str(strides));
  // The storage spans 1 + sum((size - 1) * stride) elements; every step is checked, so a shape or stride near 2^63
  // is refused rather than wrapped into a small buffer that the tensor's elements would run past.
  int64_t span = numel_of(shape) == 0 ? 0 : 1, nbytes = 0;
  bool overflow = false;
  for (size_t i = 0; span > 0 && i < shape.size(); ++i) {
    int64_t reach = 0;
    overflow |= __builtin_mul_overflow(shape[i] - 1, strides[i], &reach);
    overflow |= __builtin_add_overflow(span, reach, &span);
  }
  overflow |= __builtin_mul_overflow(span, static_cast<int64_t>(mpx::element_size(dtype)), &nbytes);
  MPX_CHECK(!overflow, who, ": shape ", shape_str(shape), " with strides ", shape_str(strides),
            " needs more than 2^63 bytes; no tensor can hold it");
  return static_cast<size_t>(nbytes);
}

Tensor over_storage(std::shared_ptr<StorageImpl> st, const IntList& shape, const IntList& strides, const TensorOptions& o) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(st);
  impl->sizes = shape;
  impl->strides = strides;
  impl->dtype = o.dtype_;
  Tensor t(std::move(impl));
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}
}  // namespace

Tensor empty_strided(const IntList& shape, const IntList& strides, const TensorOptions& o) {
  auto st = std::make_shared<StorageImpl>();
  st->nbytes = storage_bytes(shape, strides, o.dtype_, "empty_strided");
  st->device = o.device_;
  if (o.pinned_memory_) {
    MPX_CHECK(o.device_.is_cpu(), "empty: pinned_memory is for CPU tensors (page-locked host memory), but the "
              "options ask for ", o.device_.str(), "; drop pinned_memory or the device");
    st->data = cuda::allocate_pinned(std::max<size_t>(1, st->nbytes));
  } else {
    st->data = allocator_for(o.device_.type).allocate(st->nbytes, o.device_);
  }
  return over_storage(std::move(st), shape, strides, o);
}

Tensor from_blob(void* data, const IntList& shape, const IntList& strides, std::function<void(void*)> deleter,
                 const TensorOptions& o) {
  auto st = std::make_shared<StorageImpl>();
  st->nbytes = storage_bytes(shape, strides, o.dtype_, "from_blob");
  MPX_CHECK(data || st->nbytes == 0, "from_blob: the data pointer is null for a ", shape_str(shape), " tensor");
  MPX_CHECK(!o.pinned_memory_, "from_blob: pinned_memory describes memory mpx allocates; the caller's memory is "
            "used as it is (drop the option)");
  st->device = o.device_;
  if (deleter) st->data = std::shared_ptr<void>(data, std::move(deleter));
  else st->data = std::shared_ptr<void>(data, [](void*) {});
  return over_storage(std::move(st), shape, strides, o);
}
Tensor from_blob(void* data, const IntList& shape, const IntList& strides, const TensorOptions& o) {
  return from_blob(data, shape, strides, nullptr, o);
}
Tensor from_blob(void* data, const IntList& shape, std::function<void(void*)> deleter, const TensorOptions& o) {
  return from_blob(data, shape, contiguous_strides(shape, MemoryFormat::Contiguous), std::move(deleter), o);
}
Tensor from_blob(void* data, const IntList& shape, const TensorOptions& o) {
  return from_blob(data, shape, contiguous_strides(shape, MemoryFormat::Contiguous), nullptr, o);
}
Tensor empty(const IntList& shape, const TensorOptions& o) {
  MemoryFormat fmt = o.memory_format_ == MemoryFormat::Preserve ? MemoryFormat::Contiguous : o.memory_format_;
  return empty_strided(shape, contiguous_strides(shape, fmt), o);
}

}  // namespace mpx
