// Tensor's method bodies that run ops: conversions and copies, item(), autograd-facing methods, printing.
#include <cmath>

#include "autograd/engine.h"
#include "core/allocator.h"
#include "ops/cpu/loops.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {

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
    dispatch::kernel<OpId::copy>(dev, dt)(out, src);
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

Tensor Tensor::to(DType t, bool non_blocking, bool copy, std::optional<MemoryFormat> fmt) const {
  return to(device(), t, non_blocking, copy, fmt);
}
Tensor Tensor::to(Device d, DType t, bool non_blocking, bool copy, std::optional<MemoryFormat> fmt) const {
  const MemoryFormat f = fmt.value_or(MemoryFormat::Preserve);
  if (!copy && d == device() && t == dtype() && (f == MemoryFormat::Preserve || is_contiguous(f))) return *this;
  return copy_to(*this, t, d, f, non_blocking);
}
Tensor Tensor::to(const TensorOptions& o, bool non_blocking, bool copy) const {
  return to(o.device_or(device()), o.dtype_or(dtype()), non_blocking, copy);
}
Tensor Tensor::to(MemoryFormat fmt) const { return contiguous(fmt); }
Tensor Tensor::contiguous(MemoryFormat fmt) const {
  if (is_contiguous(fmt)) return *this;
  return copy_to(*this, dtype(), device(), fmt);
}
Tensor Tensor::clone(MemoryFormat fmt) const { return copy_to(*this, dtype(), device(), fmt); }

Scalar Tensor::item() const {
  return is_floating_point() ? Scalar(item_double()) : Scalar(item_int64());
}
double Tensor::item_double() const {
  MPX_CHECK(defined() && numel() == 1, "item(): expected a tensor with one element, got ", ops::describe(*this));
  Tensor c = device().is_cpu() ? *this : to(Device::cpu());
  return cpu_scalar_as_double(c);
}
int64_t Tensor::item_int64() const {
  MPX_CHECK(defined() && numel() == 1, "item(): expected a tensor with one element, got ", ops::describe(*this));
  if (is_floating(dtype())) return static_cast<int64_t>(item_double());
  const Tensor c = device().is_cpu() ? *this : to(Device::cpu());
  return cpu::visit_dtype(c.dtype(), [&]<typename T>() -> int64_t {
    if constexpr (std::is_integral_v<T>) return static_cast<int64_t>(*static_cast<const T*>(c.raw_data()));
    else return 0;  // floating dtypes went through item_double above
  });
}

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
void Tensor::set_grad(const Tensor& g) const {
  MPX_CHECK(defined(), "set_grad: the tensor is undefined");
  MPX_CHECK(!g.defined() || (g.sizes() == sizes() && g.device() == device()), "set_grad: the gradient ",
            ops::describe(g), " must have the shape and device of its tensor ", ops::describe(*this));
  autograd::meta(*this).grad = g;
}
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
