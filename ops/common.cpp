// Op plumbing shared by every family: the autocast stage, promotion, conversions, factories, autograd-facing methods.
#include <cmath>

#include "autograd/engine.h"
#include "core/allocator.h"
#include "core/random.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "ops/cpu/loops.h"

namespace mpx {

AutocastState& autocast_state() {
  thread_local AutocastState s;
  return s;
}

namespace ops {

TensorOptions elementwise_options(DType dt, Device dev, const IntList& shape, const tensor_list& inputs) {
  TensorOptions o = TensorOptions().dtype(dt).device(dev);
  if (!dev.is_cuda() || shape.size() != 4) return o;
  // The first dense input decides (broadcast views such as a sum's expanded gradient do not).
  for (const Tensor& t : inputs) {
    if (!t.defined() || t.sizes() != shape) continue;
    if (t.is_contiguous()) break;
    if (t.is_contiguous(MemoryFormat::ChannelsLast)) {
      o.memory_format(MemoryFormat::ChannelsLast);
      break;
    }
  }
  return o;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(dtype_name(t.dtype())) + shape_str(t.sizes()) + " on " + t.device().str();
}

Device common_device(const char* op, const tensor_list& ts) {
  Device d;
  bool first = true;
  for (const auto& t : ts) {
    if (!t.defined()) continue;
    if (first) { d = t.device(); first = false; continue; }
    MPX_CHECK(t.device() == d, op, ": expected all tensors on one device, got ", d.str(), " and ", t.device().str(),
              "; move them with .to(device)");
  }
  return d;
}

DType result_type(const tensor_list& ts) {
  // PyTorch's rule: 0-dim tensors only decide the dtype when they are of a higher category
  // (bool < integral < floating) than every dimensioned operand, so `f16 * scalar_tensor(f32)`
  // stays f16.
  auto category = [](DType t) { return t == kBool ? 0 : is_floating(t) ? 2 : 1; };
  bool any_dim = false, any_zero = false;
  DType dim_t = kBool, zero_t = kBool;
  for (const auto& t : ts) {
    if (!t.defined()) continue;
    if (t.dim() > 0) {
      dim_t = any_dim ? promote_types(dim_t, t.dtype()) : t.dtype();
      any_dim = true;
    } else {
      zero_t = any_zero ? promote_types(zero_t, t.dtype()) : t.dtype();
      any_zero = true;
    }
  }
  if (!any_dim) return zero_t;
  if (any_zero && category(zero_t) > category(dim_t)) return zero_t;
  return dim_t;
}

tensor_list autocast(OpId op, tensor_list in) {
  const AutocastState& st = autocast_state();
  if (!st.enabled) return in;
  const CastPolicy p = op_policy(op);
  auto cast = [&](Tensor& t, DType to) {
    if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == kFloat64 || t.dtype() == to) return;
    t = st.cast ? st.cast(t, to) : t.to(to);
  };
  switch (p) {
    case CastPolicy::none: break;
    case CastPolicy::lower: for (auto& t : in) cast(t, st.dtype); break;
    case CastPolicy::fp32: for (auto& t : in) cast(t, kFloat32); break;
    case CastPolicy::promote: {
      bool f16 = false, bf16 = false;
      DType widest = kBool;
      bool any = false;
      for (auto& t : in) {
        if (!t.defined() || !is_floating(t.dtype())) continue;
        f16 |= t.dtype() == kFloat16;
        bf16 |= t.dtype() == kBFloat16;
        widest = any ? promote_types(widest, t.dtype()) : t.dtype();
        any = true;
      }
      MPX_CHECK(!(f16 && bf16), op_name(op), ": inputs mix f16 and bf16 under autocast; cast them to one dtype first");
      if (any) for (auto& t : in) cast(t, widest);
      break;
    }
    case CastPolicy::banned:
      MPX_ERROR(op_name(op), " is unsafe under autocast (f16/bf16 may overflow or lose the result); ",
                op == OpId::binary_cross_entropy ? "use bce_with_logits (BCEWithLogitsLoss), which fuses the sigmoid"
                                                  : "run it outside the autocast region in f32");
  }
  return in;
}

Tensor reduce_grad(const Tensor& g, const IntList& shape, DType dtype) {
  if (!g.defined()) return g;
  Tensor r = g.sizes() == shape ? g : sum_to(g, shape);
  return r.dtype() == dtype ? r : r.to(dtype);
}

}  // namespace ops

// ---- copies and conversions ----
namespace {
double cpu_scalar_as_double(const Tensor& t) {
  return cpu::visit_dtype(t.dtype(), [&]<typename T>() -> double {
    const T v = *static_cast<const T*>(t.raw_data());
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return static_cast<float>(v);
    else return static_cast<double>(v);
  });
}
// Differentiable copy into a new tensor of dtype/device/format.
Tensor copy_to(const Tensor& src, DType dt, Device dev, MemoryFormat fmt, bool non_blocking = false) {
  MemoryFormat f = fmt == MemoryFormat::Preserve ? src.suggest_memory_format() : fmt;
  if (f == MemoryFormat::ChannelsLast && src.dim() != 4) f = MemoryFormat::Contiguous;
  Tensor out = empty(src.sizes(), TensorOptions().dtype(dt).device(dev).memory_format(f));
  if (dev == src.device()) {
    dispatch::kernel<kernels::CopyFn>(OpId::copy, dev, dt)(out, src);
  } else {
    // Cross-device: make the source dense in the target layout, then one bulk copy.
    Tensor dense = src.dtype() == dt && src.is_contiguous(f) ? src : copy_to(src.detach(), dt, src.device(), f);
    Device cuda_dev = dev.is_cuda() ? dev : src.device();
    // A non-blocking host-to-device copy keeps the source storage alive until it is done.
    std::shared_ptr<void> owner;
    if (non_blocking && dev.is_cuda() && src.device().is_cpu()) owner = dense.impl()->storage->data;
    allocator_for(cuda_dev.type).copy(out.raw_data(), dev, dense.raw_data(), src.device(),
                                      out.numel() * out.element_size(), owner);
  }
  if (autograd::any_requires_grad({src}) && is_floating(dt)) {
    const DType sdt = src.dtype();
    const Device sdev = src.device();
    autograd::record("ToCopyBackward", {src}, {out}, [sdt, sdev](autograd::FunctionNode&, const tensor_list& g) -> tensor_list {
      return {g[0].to(sdev, sdt)};
    });
  }
  return out;
}
}  // namespace

Tensor Tensor::to(DType t, bool copy) const {
  if (t == dtype() && !copy) return *this;
  return copy_to(*this, t, device(), MemoryFormat::Preserve);
}
Tensor Tensor::to(Device d, bool non_blocking) const {
  if (d == device()) return *this;
  return copy_to(*this, dtype(), d, MemoryFormat::Preserve, non_blocking);
}
Tensor Tensor::to(Device d, DType t) const {
  if (d == device() && t == dtype()) return *this;
  return copy_to(*this, t, d, MemoryFormat::Preserve);
}
Tensor Tensor::to(const TensorOptions& o) const { return to(o.device_, o.dtype_); }
Tensor Tensor::to(MemoryFormat fmt) const { return contiguous(fmt); }
Tensor Tensor::contiguous(MemoryFormat fmt) const {
  if (is_contiguous(fmt)) return *this;
  return copy_to(*this, dtype(), device(), fmt);
}
Tensor Tensor::clone(MemoryFormat fmt) const { return copy_to(*this, dtype(), device(), fmt); }

double Tensor::item_double() const {
  MPX_CHECK(defined() && numel() == 1, "item(): expected a tensor with one element, got ", ops::describe(*this));
  Tensor c = device().is_cpu() ? *this : to(Device::cpu());
  return cpu_scalar_as_double(c);
}

// ---- factories ----
Tensor full(const IntList& shape, double value, const TensorOptions& o) {
  TensorOptions no = o;
  no.requires_grad_ = false;
  Tensor t = empty(shape, no);
  dispatch::kernel<kernels::FillFn>(OpId::fill, t.device(), t.dtype())(t, value);
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}
Tensor zeros(const IntList& shape, const TensorOptions& o) { return full(shape, 0.0, o); }
Tensor ones(const IntList& shape, const TensorOptions& o) { return full(shape, 1.0, o); }
Tensor scalar_tensor(double v, const TensorOptions& o) { return full({}, v, o); }
namespace {
Tensor random_fill(OpId op, const IntList& shape, const TensorOptions& o, double a, double b) {
  TensorOptions no = o;
  no.requires_grad_ = false;
  Tensor t = empty(shape, no);
  auto [seed, off] = random::default_generator().reserve(static_cast<uint64_t>(t.numel()));
  dispatch::kernel<kernels::RandFn>(op, t.device(), t.dtype())(t, seed, off, a, b);
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}
}  // namespace
Tensor rand(const IntList& shape, const TensorOptions& o) { return random_fill(OpId::rand_uniform, shape, o, 0.0, 1.0); }
Tensor randn(const IntList& shape, const TensorOptions& o) { return random_fill(OpId::rand_normal, shape, o, 0.0, 1.0); }
Tensor randint(int64_t low, int64_t high, const IntList& shape, const TensorOptions& o) {
  MPX_CHECK(high > low, "randint: high (", high, ") must be greater than low (", low, ")");
  return random_fill(OpId::rand_uniform, shape, o, static_cast<double>(low), static_cast<double>(high));
}
Tensor arange(double end, const TensorOptions& o) { return arange(0.0, end, 1.0, o); }
Tensor arange(double start, double end, double step, const TensorOptions& o) {
  MPX_CHECK(step != 0.0, "arange: step must be non-zero");
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<double>(i);
  return tensor(v, {n}, TensorOptions(o).dtype(kFloat64).device(Device::cpu())).to(o.device_, o.dtype_);
}
Tensor zeros_like(const Tensor& t, std::optional<DType> d) { return zeros(t.sizes(), t.options().dtype(d.value_or(t.dtype()))); }
Tensor ones_like(const Tensor& t, std::optional<DType> d) { return ones(t.sizes(), t.options().dtype(d.value_or(t.dtype()))); }
Tensor empty_like(const Tensor& t, std::optional<DType> d) { return empty(t.sizes(), t.options().dtype(d.value_or(t.dtype()))); }
Tensor full_like(const Tensor& t, double v, std::optional<DType> d) { return full(t.sizes(), v, t.options().dtype(d.value_or(t.dtype()))); }
Tensor rand_like(const Tensor& t) { return rand(t.sizes(), t.options()); }
Tensor randn_like(const Tensor& t) { return randn(t.sizes(), t.options()); }

template <typename T>
Tensor tensor(const std::vector<T>& values, const IntList& shape, TensorOptions o) {
  IntList s = shape.empty() ? IntList{static_cast<int64_t>(values.size())} : shape;
  MPX_CHECK(numel_of(s) == static_cast<int64_t>(values.size()), "tensor: ", values.size(),
            " values do not fill shape ", shape_str(s));
  const bool rg = o.requires_grad_;
  Tensor src = empty(s, TensorOptions().dtype(dtype_v<T>));
  if (!values.empty()) {
    if constexpr (std::is_same_v<T, bool>) {
      bool* p = src.data_ptr<bool>();
      for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
    } else {
      std::memcpy(src.raw_data(), values.data(), values.size() * sizeof(T));
    }
  }
  Tensor r = src.to(o.device_, o.dtype_);
  if (rg) r.set_requires_grad(true);
  return r;
}
template Tensor tensor(const std::vector<float>&, const IntList&, TensorOptions);
template Tensor tensor(const std::vector<double>&, const IntList&, TensorOptions);
template Tensor tensor(const std::vector<int64_t>&, const IntList&, TensorOptions);
template Tensor tensor(const std::vector<int32_t>&, const IntList&, TensorOptions);
template Tensor tensor(const std::vector<uint8_t>&, const IntList&, TensorOptions);
template Tensor tensor(const std::vector<bool>&, const IntList&, TensorOptions);
template Tensor tensor(const std::vector<Half>&, const IntList&, TensorOptions);
template Tensor tensor(const std::vector<BFloat16>&, const IntList&, TensorOptions);

// ---- autograd-facing methods ----
bool Tensor::requires_grad() const {
  auto* m = autograd::meta_if(*this);
  return m && (m->requires_grad || m->grad_fn);
}
Tensor& Tensor::set_requires_grad(bool r) {
  MPX_CHECK(!r || is_floating(dtype()), "set_requires_grad: only floating tensors can require grad, got ",
            ops::describe(*this));
  auto& m = autograd::meta(*this);
  MPX_CHECK(!m.grad_fn || r, "set_requires_grad(false): the tensor is not a leaf; use detach() instead");
  m.requires_grad = r;
  return *this;
}
Tensor Tensor::grad() const {
  auto* m = autograd::meta_if(*this);
  return m ? m->grad : Tensor();
}
Tensor& Tensor::mutable_grad() const { return autograd::meta(*this).grad; }
void Tensor::set_grad(const Tensor& g) const { autograd::meta(*this).grad = g; }
bool Tensor::is_leaf() const {
  auto* m = autograd::meta_if(*this);
  return !m || !m->grad_fn;
}
std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  auto* m = autograd::meta_if(*this);
  return m ? m->grad_fn : nullptr;
}
void Tensor::retain_grad() const {
  auto* m = autograd::meta_if(*this);
  if (!m || !m->grad_fn) return;  // leaves keep their grad anyway
  m->retains_grad = true;
  m->grad_fn->retained_grads.emplace_back(m->output_nr, impl_);
}
Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->autograd.reset();
  impl->view = TensorImpl::View::detached;  // shares this memory: in-place writes through it are never recorded
  return Tensor(impl);
}
void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, gradient.defined() ? tensor_list{gradient} : tensor_list{}, retain_graph, create_graph);
}

bool Tensor::all_finite() const {
  NoGradGuard ng;
  if (!is_floating(dtype())) return true;
  Tensor s = mpx::sum(mpx::abs(to(kFloat32)) * 0.0);  // inf*0 and NaN*0 are NaN
  return !std::isnan(s.item<double>());
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::string r = "Tensor(" + ops::describe(*this);
  Tensor c = contiguous().to(Device::cpu()).to(kFloat64);
  const int64_t n = std::min<int64_t>(c.numel(), 8);
  r += ", [";
  for (int64_t i = 0; i < n; ++i) r += (i ? ", " : "") + std::to_string(c.data_ptr<double>()[i]);
  if (c.numel() > n) r += ", ...";
  return r + "])";
}
std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mpx
