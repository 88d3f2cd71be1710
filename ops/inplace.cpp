// In-place Tensor methods (add_, mul_, copy_, fill_, ...) and PyTorch's rule for them under autograd.
#include <cmath>

#include "autograd/engine.h"
#include "core/random.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/op_utils.h"
#include "ops/shape.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

// PyTorch's rule: a destination whose elements share memory (an expanded dim) has no defined
// result, and kernels writing it in parallel would race.
void check_no_internal_overlap(const Tensor& t, const char* op) {
  for (int64_t d = 0; d < t.dim(); ++d)
    MPX_CHECK(t.size(d) <= 1 || t.stride(d) != 0, op, ": dim ", d, " of the destination ", ops::describe(t),
              " is expanded (stride 0), so several of its elements are one memory location; write into a "
              ".clone() of it, or into the tensor it was expanded from");
}

// The bytes [first, last) of its storage a tensor's elements can touch.
std::pair<int64_t, int64_t> byte_span(const Tensor& t) {
  int64_t lo = t.storage_offset(), hi = lo;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t es = static_cast<int64_t>(t.element_size());
  return {lo * es, (hi + 1) * es};
}

// Whether two tensors are one view of the same elements (x.copy_(x)).
bool same_elements(const Tensor& a, const Tensor& b) {
  return a.impl()->storage == b.impl()->storage && a.storage_offset() == b.storage_offset() &&
         a.sizes() == b.sizes() && a.strides() == b.strides() && a.dtype() == b.dtype();
}

// Whether src shares memory with dst (other than as the same view: x.narrow(0, 0, n-1).copy_(x.narrow(0, 1,
// n-1)), a.copy_(a.t())): kernels that read and write in parallel, or memcpy, would see half-written values.
bool overlaps(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0 || src.numel() == 0 || dst.impl()->storage != src.impl()->storage) return false;
  const auto [a0, a1] = byte_span(dst);
  const auto [b0, b1] = byte_span(src);
  return a0 < b1 && b0 < a1;
}

// Whether autograd must record an in-place op on `self` with these other inputs (PyTorch's rule).
bool recording(const Tensor& self, std::initializer_list<Tensor> others = {}) {
  return autograd::any_requires_grad({self}) || autograd::any_requires_grad(others);
}

// The cases PyTorch refuses too, or that it handles through views' bases, which mpx does not track.
void check_recordable(const Tensor& self, const char* op) {
  MPX_CHECK(!(self.is_leaf() && self.requires_grad()), op, ": in-place modification of a leaf tensor that requires "
            "grad (", ops::describe(self), ") while autograd records: its gradient would describe values it no longer "
            "holds. Update parameters under mpx::NoGradGuard (as optimizers do), or use the out-of-place form");
  MPX_CHECK(self.impl()->view == TensorImpl::View::none, op, ": in-place modification of a ",
            self.impl()->view == TensorImpl::View::detached ? "detach()ed tensor" : "view", " (", ops::describe(self),
            ") while autograd records: the tensor whose memory it shares would keep a gradient history that no longer "
            "matches its values. Apply the op out of place, or to a clone() of it");
}

// Writes `value` into self's memory without recording: the kernel part of every in-place op.
Tensor& write_into(Tensor& self, const Tensor& value, const char* op) {
  check_no_internal_overlap(self, op);
  MPX_CHECK(broadcast_shapes(self.sizes(), value.sizes(), op) == self.sizes(), op, ": result of shape ",
            shape_str(value.sizes()), " cannot be written into a tensor of shape ", shape_str(self.sizes()));
  NoGradGuard ng;
  Tensor v = value.sizes() == self.sizes() ? value : value.expand(self.sizes());
  dispatch::kernel<OpId::copy>(self.device(), self.dtype())(self, v);
  self.bump_version();
  return self;
}

// Makes self the output `nr` of `fn`. A retained gradient moves along: it is the gradient of the
// values self holds now, not of the ones the write replaced.
void set_history(Tensor& self, std::shared_ptr<autograd::Node> fn, uint32_t nr) {
  auto& m = autograd::meta(self);
  if (m.retains_grad && m.grad_fn)
    std::erase_if(m.grad_fn->retained_grads, [&](const auto& r) { return r.second.lock().get() == self.impl(); });
  m.grad_fn = std::move(fn);
  m.output_nr = nr;
  if (m.retains_grad) self.retain_grad();
  self.impl()->storage->rebases.fetch_add(1, std::memory_order_relaxed);
}

// The recorded form: `value` was computed with autograd from self (and the other inputs); its
// data goes into self's memory and self takes its history, as PyTorch rebases an in-place op's
// output. Views of self taken before now would keep the old history: the storage's rebase
// count makes their next use an error (autograd::check_view_current).
Tensor& rebase_onto(Tensor& self, Tensor value, const char* op) {
  if (value.dtype() != self.dtype()) value = value.to(self.dtype());  // in place keeps self's dtype
  if (value.sizes() != self.sizes()) {
    MPX_CHECK(broadcast_shapes(self.sizes(), value.sizes(), op) == self.sizes(), op, ": result of shape ",
              shape_str(value.sizes()), " cannot be written into a tensor of shape ", shape_str(self.sizes()));
    value = value.expand(self.sizes());
  }
  write_into(self, value, op);
  set_history(self, value.grad_fn(), value.grad_fn() ? autograd::meta(value).output_nr : 0);
  return self;
}

// PyTorch's rule for an in-place arithmetic op's result: it may be narrowed (f32 into f16) but not change
// kind (a floating result into an integer tensor, anything but bool into a bool one), which
// would silently truncate.
const Tensor& castable_result(const Tensor& self, const Tensor& r, const char* op) {
  const bool to_int = is_floating(r.dtype()) && !is_floating(self.dtype());
  const bool to_bool = self.dtype() == kBool && r.dtype() != kBool;
  MPX_CHECK(!to_int && !to_bool, op, ": the result is ", dtype_name(r.dtype()), " and cannot be written into ",
            ops::describe(self), " without truncating it; convert the tensor to a floating dtype first, or use the "
            "out-of-place form");
  return r;
}
// An in-place op given by its out-of-place form. `reads_self`: the recorded op keeps self for its
// backward (all but add/sub), so it runs on a copy of self, which the write cannot change.
template <typename F>
Tensor& apply_inplace(Tensor& self, const char* op, std::initializer_list<Tensor> others, bool reads_self, F&& fn) {
  if (!recording(self, others)) {
    NoGradGuard ng;
    return write_into(self, fn(self), op);
  }
  check_recordable(self, op);
  return rebase_onto(self, fn(reads_self ? self.clone() : self), op);
}
// The same for arithmetic (add_, mul_, div_), whose result must keep self's kind.
template <typename F>
Tensor& arith_inplace(Tensor& self, const char* op, std::initializer_list<Tensor> others, bool reads_self, F&& fn) {
  return apply_inplace(self, op, others, reads_self, [&](const Tensor& s) { return castable_result(self, fn(s), op); });
}

// fill_, zero_, copy_, normal_, uniform_ while recording: self's old values get no gradient, the
// source (copy_) gets the incoming gradient, and self stays in the graph as PyTorch's does.
Tensor& overwrite_recorded(Tensor& self, const char* op, const Tensor& src, const Tensor& value) {
  check_recordable(self, op);
  Tensor v = value;
  {
    NoGradGuard ng;
    if (v.sizes() != self.sizes()) v = v.expand(self.sizes());
  }
  write_into(self, v, op);
  Tensor out = self.detach();
  const IntList src_shape = src.defined() ? src.sizes() : IntList{};
  const DType src_dtype = src.defined() ? src.dtype() : self.dtype();
  const Device src_device = src.defined() ? src.device() : self.device();
  auto node = autograd::record(op, {self, src}, {out}, [src_shape, src_dtype, src_device](FunctionNode&, const tensor_list& g) -> tensor_list {
    if (!g[0].defined()) return {};
    return {Tensor(), ops::reduce_grad(g[0].to(src_device), src_shape, src_dtype)};
  });
  set_history(self, node, 0);
  return self;
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_no_internal_overlap(*this, "copy_");
  if (recording(*this, {src})) {
    Tensor s = src.device() == device() ? src.detach() : src.detach().to(device());
    if (overlaps(*this, s)) s = s.clone();
    return overwrite_recorded(*this, "copy_", src, s);
  }
  NoGradGuard ng;
  Tensor s = src.device() == device() ? src : src.to(device());
  if (same_elements(*this, s)) {  // x.copy_(x): nothing to move (and no memcpy onto itself)
    bump_version();
    return *this;
  }
  if (overlaps(*this, s)) s = s.clone();  // read everything before writing anything
  if (s.sizes() != sizes()) s = s.expand(sizes());
  dispatch::kernel<OpId::copy>(device(), dtype())(*this, s);
  bump_version();
  return *this;
}
Tensor& Tensor::fill_(double v) {
  if (recording(*this)) return overwrite_recorded(*this, "fill_", Tensor(), full({}, v, options()));
  if (is_contiguous()) {
    dispatch::kernel<OpId::fill>(device(), dtype())(*this, v);
    bump_version();
    return *this;
  }
  return write_into(*this, full({}, v, options()), "fill_");
}
Tensor& Tensor::zero_() { return fill_(0.0); }
namespace {
// Whether op's kernel may write straight into self's memory: nothing records, self is a dense,
// non-empty, non-bool tensor, and the op has a kernel for its dtype. One pass, and on a GPU one
// launch, where the out-of-place form and the copy back take two.
bool writes_in_place(const Tensor& self, OpId op, std::initializer_list<Tensor> others) {
  return self.defined() && !recording(self, others) && self.dtype() != kBool && self.is_contiguous() &&
         self.numel() > 0 && dispatch::has_kernel(op, self.device().type, self.dtype());
}
// That for a tensor operand of self's dtype, which broadcasts to self's shape, is on its device
// and shares no memory with it unless it is self. False when that does not apply.
bool binary_into(Tensor& self, OpId op, const Tensor& other, double alpha) {
  if (!other.defined() || !writes_in_place(self, op, {other})) return false;
  if (other.dtype() != self.dtype() || other.device() != self.device()) return false;
  if (op == OpId::div && !is_floating(self.dtype())) return false;  // true division makes floats
  if (overlaps(self, other) && !same_elements(self, other)) return false;
  if (broadcast_shapes(self.sizes(), other.sizes(), op_name(op)) != self.sizes()) return false;
  NoGradGuard ng;
  const Tensor b = other.sizes() == self.sizes() ? other : other.expand(self.sizes());
  dispatch::kernel<kernels::BinaryFn>(op, self.device(), self.dtype())(self, self, b, alpha);
  self.bump_version();
  return true;
}
// The same with a number: self * scale + shift by the affine kernel, which takes the number as
// it is (no 0-d operand to fill first) and keeps self's dtype (a fraction would make an integer
// tensor's result a float: that goes the general way, which refuses it).
bool affine_into(Tensor& self, double scale, double shift) {
  if (!writes_in_place(self, OpId::affine, {})) return false;
  if (!is_floating(self.dtype()) && (scale != std::floor(scale) || shift != std::floor(shift))) return false;
  NoGradGuard ng;
  dispatch::kernel<kernels::UnaryFn>(OpId::affine, self.device(), self.dtype())(self, self, scale, shift);
  self.bump_version();
  return true;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& o, double alpha) {
  if (binary_into(*this, OpId::add, o, alpha)) return *this;
  return arith_inplace(*this, "add_", {o}, false, [&](const Tensor& s) { return mpx::add(s, o, alpha); });
}
Tensor& Tensor::add_(double v) {
  if (affine_into(*this, 1.0, v)) return *this;
  return arith_inplace(*this, "add_", {}, false, [&](const Tensor& s) { return mpx::add(s, v); });
}
Tensor& Tensor::mul_(const Tensor& o) {
  if (binary_into(*this, OpId::mul, o, 1.0)) return *this;
  return arith_inplace(*this, "mul_", {o}, true, [&](const Tensor& s) { return mpx::mul(s, o); });
}
Tensor& Tensor::mul_(double v) {
  if (affine_into(*this, v, -0.0)) return *this;  // + (-0) keeps x * v's sign of zero
  return arith_inplace(*this, "mul_", {}, true, [&](const Tensor& s) { return mpx::mul(s, v); });
}
Tensor& Tensor::div_(const Tensor& o) {
  if (binary_into(*this, OpId::div, o, 1.0)) return *this;
  return arith_inplace(*this, "div_", {o}, true, [&](const Tensor& s) { return mpx::div(s, o); });
}
Tensor& Tensor::clamp_(double lo, double hi) {
  return apply_inplace(*this, "clamp_", {}, true, [&](const Tensor& s) { return mpx::clamp(s, lo, hi); });
}
Tensor& Tensor::lerp_(const Tensor& end, double w) {
  return arith_inplace(*this, "lerp_", {end}, true, [&](const Tensor& s) { return mpx::lerp(s, end, w); });
}
Tensor& Tensor::relu_() {
  return apply_inplace(*this, "relu_", {}, true, [&](const Tensor& s) { return mpx::relu(s); });
}
Tensor& Tensor::clamp_min_(double lo) {
  return apply_inplace(*this, "clamp_min_", {}, true, [&](const Tensor& s) { return mpx::clamp_min(s, lo); });
}
Tensor& Tensor::clamp_max_(double hi) {
  return apply_inplace(*this, "clamp_max_", {}, true, [&](const Tensor& s) { return mpx::clamp_max(s, hi); });
}
Tensor& Tensor::pow_(double e) {
  return arith_inplace(*this, "pow_", {}, true, [&](const Tensor& s) { return mpx::pow(s, e); });
}
Tensor& Tensor::pow_(const Tensor& e) {
  return arith_inplace(*this, "pow_", {e}, true, [&](const Tensor& s) { return mpx::pow(s, e); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, double v) {
  return apply_inplace(*this, "masked_fill_", {}, false, [&](const Tensor& s) { return mpx::masked_fill(s, mask, v); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, const Tensor& v) {
  return apply_inplace(*this, "masked_fill_", {v}, false,
                       [&](const Tensor& s) { return mpx::masked_fill(s, mask, v); });
}
// The unary math ops in place: floating results into an integer tensor are refused as for mul_.
#define MPX_DEFINE_INPLACE_UNARY(op)                                                                   \
  Tensor& Tensor::op##_() {                                                                          \
    return arith_inplace(*this, #op "_", {}, true, [](const Tensor& s) { return mpx::op(s); });     \
  }
MPX_TENSOR_INPLACE_UNARY(MPX_DEFINE_INPLACE_UNARY)
#undef MPX_DEFINE_INPLACE_UNARY
// Comparisons in place: the boolean result written as 1/0 in self's dtype (not differentiable).
#define MPX_DEFINE_INPLACE_COMPARE(op)                                                                            \
  Tensor& Tensor::op##_(const Tensor& o) {                                                                      \
    return apply_inplace(*this, #op "_", {o}, false, [&](const Tensor& s) { return mpx::op(s, o).to(dtype()); }); \
  }                                                                                                             \
  Tensor& Tensor::op##_(double o) {                                                                             \
    return apply_inplace(*this, #op "_", {}, false, [&](const Tensor& s) { return mpx::op(s, o).to(dtype()); }); \
  }
MPX_TENSOR_INPLACE_COMPARE(MPX_DEFINE_INPLACE_COMPARE)
#undef MPX_DEFINE_INPLACE_COMPARE
namespace {
// The in-place shape ops: self takes the view's sizes and strides, which every handle to it sees;
// while autograd records, self's history becomes the view's node, as PyTorch rebases it.
Tensor& restride(Tensor& self, const Tensor& v, const char* op) {
  if (v.is_same(self)) return self;
  const bool rec = recording(self);
  if (rec) check_recordable(self, op);
  TensorImpl* impl = self.impl();
  impl->sizes = v.sizes();
  impl->strides = v.strides();
  impl->offset = v.storage_offset();
  if (rec) set_history(self, v.grad_fn(), autograd::meta(v).output_nr);
  return self;
}
}  // namespace
Tensor& Tensor::squeeze_() { return restride(*this, squeeze(), "squeeze_"); }
Tensor& Tensor::squeeze_(int64_t d) { return restride(*this, squeeze(d), "squeeze_"); }
Tensor& Tensor::unsqueeze_(int64_t d) { return restride(*this, unsqueeze(d), "unsqueeze_"); }
Tensor& Tensor::transpose_(int64_t d0, int64_t d1) { return restride(*this, transpose(d0, d1), "transpose_"); }

Tensor& Tensor::detach_() {
  MPX_CHECK(defined(), "detach_: the tensor is undefined");
  autograd::AutogradMeta* m = autograd::meta_if(*this);
  if (!m) return *this;
  MPX_CHECK(!(impl()->view == TensorImpl::View::view && m->grad_fn), "detach_: ", ops::describe(*this),
            " is a view of a tensor with a gradient history, which would keep it; use detach(), which returns a "
            "new tensor");
  if (m->retains_grad && m->grad_fn)
    std::erase_if(m->grad_fn->retained_grads, [&](const auto& r) { return r.second.lock().get() == impl(); });
  m->retains_grad = false;
  m->grad_fn.reset();
  m->output_nr = 0;
  m->requires_grad = false;
  return *this;
}

namespace {
// Draws straight into a contiguous floating tensor (the kernels take the affine parameters),
// skipping three full-size temporaries: nn::init of a 100M-weight layer is ~4x faster. Same
// generator positions as the rand()/randn() path; the affine step is rounded once.
bool random_fill_inplace(Tensor& t, OpId op, double a, double b) {
  if (!t.is_contiguous() || !is_floating(t.dtype())) return false;
  auto [seed, off] = random::default_generator().reserve(static_cast<uint64_t>(t.numel()));
  dispatch::kernel<kernels::RandFn>(op, t.device(), t.dtype())(t, seed, off, a, b);
  t.bump_version();
  return true;
}
}  // namespace
Tensor& Tensor::normal_(double mean, double std) {
  MPX_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0.0, "normal_: needs a finite mean and a finite std >= 0, "
            "got mean ", mean, " and std ", std);
  if (recording(*this)) return overwrite_recorded(*this, "normal_", Tensor(), randn(sizes(), options()) * std + mean);
  NoGradGuard ng;
  if (random_fill_inplace(*this, OpId::rand_normal, mean, std)) return *this;
  return write_into(*this, randn(sizes(), options()) * std + mean, "normal_");
}
Tensor& Tensor::uniform_(double from, double to) {
  MPX_CHECK(defined() && is_floating(dtype()), "uniform_: fills floating-point tensors, got ", ops::describe(*this),
            "; for integers use randint");
  MPX_CHECK(std::isfinite(from) && std::isfinite(to) && from <= to, "uniform_: needs a finite range [from, to) with "
            "from <= to, got from ", from, " and to ", to);
  if (recording(*this)) return overwrite_recorded(*this, "uniform_", Tensor(), rand(sizes(), options()) * (to - from) + from);
  NoGradGuard ng;
  if (random_fill_inplace(*this, OpId::rand_uniform, from, to)) return *this;
  return write_into(*this, rand(sizes(), options()) * (to - from) + from, "uniform_");
}

}  // namespace mpx
