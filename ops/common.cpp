// Op plumbing shared by every family: the autocast stage, promotion, device and dtype checks, factories.
#include <cmath>

#include "autograd/engine.h"
#include "core/allocator.h"
#include "core/random.h"
#include "ops/elementwise.h"
#include "ops/index.h"
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
  if (shape.size() != 4) return o;
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
  if (!t.defined()) return "an undefined tensor";
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
  if (!autocast_state().enabled) return in;
  if (op_policy(op) == CastPolicy::banned)
    MPX_ERROR(op_name(op), " is unsafe under autocast (f16/bf16 may overflow or lose the result); ",
              op == OpId::binary_cross_entropy ? "use bce_with_logits (BCEWithLogitsLoss), which fuses the sigmoid"
                                                : "run it outside the autocast region in f32");
  return autocast(op_policy(op), op_name(op), std::move(in));
}

tensor_list autocast(CastPolicy p, const char* name, tensor_list in) {
  const AutocastState& st = autocast_state();
  if (!st.enabled) return in;
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
      MPX_CHECK(!(f16 && bf16), name, ": inputs mix f16 and bf16 under autocast; cast them to one dtype first");
      if (any) for (auto& t : in) cast(t, widest);
      break;
    }
    case CastPolicy::banned:
      MPX_ERROR(name, " is unsafe under autocast (f16/bf16 may overflow or lose the result); ",
                "run it outside the autocast region in f32");
  }
  return in;
}

Tensor reduce_grad(const Tensor& g, const IntList& shape, DType dtype) {
  if (!g.defined()) return g;
  Tensor r = g.sizes() == shape ? g : sum_to(g, shape);
  return r.dtype() == dtype ? r : r.to(dtype);
}

}  // namespace ops


// ---- factories ----
Tensor full(const IntList& shape, double value, const TensorOptions& o) {
  TensorOptions no = o;
  no.requires_grad_ = false;
  Tensor t = empty(shape, no);
  dispatch::kernel<OpId::fill>(t.device(), t.dtype())(t, value);
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
Tensor rand(const IntList& shape, const TensorOptions& o) {
  MPX_CHECK(is_floating(o.dtype_), "rand: draws floating-point values, but the options ask for ", dtype_name(o.dtype_),
            "; use randint for integers");
  return random_fill(OpId::rand_uniform, shape, o, 0.0, 1.0);
}
Tensor randn(const IntList& shape, const TensorOptions& o) { return random_fill(OpId::rand_normal, shape, o, 0.0, 1.0); }
Tensor randint(int64_t low, int64_t high, const IntList& shape, const TensorOptions& o) {
  MPX_CHECK(high > low, "randint: high (", high, ") must be greater than low (", low, ")");
  return random_fill(OpId::rand_uniform, shape, TensorOptions(o).dtype(o.dtype_or(kInt64)), static_cast<double>(low),
                     static_cast<double>(high));
}
Tensor arange_impl(double start, double end, double step, bool integral, const TensorOptions& o) {
  MPX_CHECK(step != 0.0, op_name(OpId::arange), ": step must be non-zero");
  MPX_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), op_name(OpId::arange),
            ": unsupported range ", start, " -> ", end, " with step ", step, "; start, end and step must be finite");
  MPX_CHECK(end == start || (end > start) == (step > 0.0), op_name(OpId::arange), ": the range ", start, " -> ", end,
            " runs against the step ", step, "; give a step of the range's sign (PyTorch refuses this too)");
  const double count = std::ceil((end - start) / step);
  // 2^53: beyond it consecutive values are no longer distinct doubles (and no memory holds the tensor anyway).
  MPX_CHECK(count < 9007199254740992.0, op_name(OpId::arange), ": ", start, " -> ", end, " with step ", step,
            " has ", count, " elements, too many for one tensor");
  const int64_t n = count > 0.0 ? static_cast<int64_t>(count) : 0;
  Tensor t = empty({n}, TensorOptions(kFloat64));
  double* v = t.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<double>(i);
  Tensor r = t.to(o.device_, o.dtype_or(integral ? kInt64 : kFloat32));
  if (o.requires_grad_) r.set_requires_grad(true);
  return r;
}
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& o) {
  MPX_CHECK(steps >= 0, op_name(OpId::linspace), ": steps must be non-negative, got ", steps);
  Tensor t = empty({steps}, TensorOptions(kFloat64));  // a size no memory holds is the allocator's clear error
  double* v = t.data_ptr<double>();
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  for (int64_t i = 0; i < steps; ++i)
    v[i] = i < steps / 2 || steps == 1 ? start + step * static_cast<double>(i)
                                       : end - step * static_cast<double>(steps - 1 - i);
  Tensor r = t.to(o.device_, o.dtype_);
  if (o.requires_grad_) r.set_requires_grad(true);
  return r;
}
Tensor logspace(double start, double end, int64_t steps, double base, const TensorOptions& o) {
  NoGradGuard ng;
  return pow(full({}, base, TensorOptions(kFloat64)), linspace(start, end, steps, TensorOptions(kFloat64)))
      .to(o.device_, o.dtype_);
}
Tensor eye(int64_t n, std::optional<int64_t> m, const TensorOptions& o) {
  const int64_t cols = m.value_or(n);
  MPX_CHECK(n >= 0 && cols >= 0, op_name(OpId::eye), ": sizes must be non-negative, got ", n, " x ", cols);
  Tensor t = zeros({n, cols}, TensorOptions(o).requires_grad(false));
  {
    NoGradGuard ng;
    t.diagonal().fill_(1.0);
  }
  if (o.requires_grad_) t.set_requires_grad(true);
  return t;
}
Tensor randperm(int64_t n, const TensorOptions& o) {
  MPX_CHECK(n >= 0, op_name(OpId::randperm), ": n must be non-negative, got ", n);
  NoGradGuard ng;
  // The order of n uniform f64 keys, drawn on the CPU from the default generator (53-bit keys: ties are rare,
  // and a stable sort breaks them by position).
  return argsort(rand({n}, TensorOptions(kFloat64)), 0, false, true).to(o.device_, o.dtype_or(kInt64));
}
namespace {
// t's dtype and device where `o` sets none (LibTorch merges a tensor's options so).
TensorOptions merged(const Tensor& t, const TensorOptions& o) {
  TensorOptions r = o;
  return r.dtype(o.dtype_or(t.dtype())).device(o.device_or(t.device()));
}
// PyTorch's preserve_format: the *_like of a channels-last tensor is channels-last (so a
// gradient made with ones_like(y) needs no layout copy on its way back), of others row-major.
TensorOptions like(const Tensor& t, const TensorOptions& o) {
  return merged(t, o).memory_format(t.suggest_memory_format());
}
}  // namespace
Tensor zeros_like(const Tensor& t, const TensorOptions& o) { return zeros(t.sizes(), like(t, o)); }
Tensor ones_like(const Tensor& t, const TensorOptions& o) { return ones(t.sizes(), like(t, o)); }
Tensor empty_like(const Tensor& t, const TensorOptions& o) { return empty(t.sizes(), like(t, o)); }
Tensor full_like(const Tensor& t, double v, const TensorOptions& o) { return full(t.sizes(), v, like(t, o)); }
Tensor rand_like(const Tensor& t, const TensorOptions& o) { return rand(t.sizes(), like(t, o)); }
Tensor randn_like(const Tensor& t, const TensorOptions& o) { return randn(t.sizes(), like(t, o)); }
Tensor Tensor::new_zeros(const IntList& shape, const TensorOptions& o) const { return zeros(shape, merged(*this, o)); }
Tensor Tensor::new_ones(const IntList& shape, const TensorOptions& o) const { return ones(shape, merged(*this, o)); }
Tensor Tensor::new_empty(const IntList& shape, const TensorOptions& o) const { return empty(shape, merged(*this, o)); }
Tensor Tensor::new_full(const IntList& shape, double v, const TensorOptions& o) const {
  return full(shape, v, merged(*this, o));
}

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
  Tensor r = src.to(o.device_, o.dtype_or(dtype_v<T>));
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

}  // namespace mpx
