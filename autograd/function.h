// Custom differentiable ops: struct MyOp : Function<MyOp> { forward(Context&, ...); backward(Context&, grads); }.
#pragma once
#include <map>
#include <string>
#include <type_traits>
#include <variant>

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"

namespace mpx::autograd {

/// A value stashed in Context::saved_data (LibTorch's IValue, reduced to what ops need).
class IValue {
 public:
  IValue() = default;
  IValue(double v) : v_(v) {}                               // NOLINT
  IValue(int64_t v) : v_(v) {}                              // NOLINT
  IValue(int v) : v_(static_cast<int64_t>(v)) {}            // NOLINT
  IValue(bool v) : v_(v) {}                                 // NOLINT
  IValue(std::string v) : v_(std::move(v)) {}               // NOLINT
  IValue(const char* v) : v_(std::string(v)) {}             // NOLINT
  IValue(Tensor v) : v_(std::move(v)) {}                    // NOLINT
  IValue(IntList v) : v_(std::move(v)) {}                   // NOLINT
  double toDouble() const { return get<double>("double"); }
  int64_t toInt() const { return get<int64_t>("int"); }
  bool toBool() const { return get<bool>("bool"); }
  const std::string& toStringRef() const { return get<std::string>("string"); }
  const Tensor& toTensor() const { return get<Tensor>("Tensor"); }
  const IntList& toIntList() const { return get<IntList>("IntList"); }

 private:
  template <typename T> const T& get(const char* what) const {
    const T* p = std::get_if<T>(&v_);
    MPX_CHECK(p, "saved_data: value is not a ", what);
    return *p;
  }
  std::variant<std::monostate, double, int64_t, bool, std::string, Tensor, IntList> v_;
};

/// State shared between a custom Function's forward and backward.
class Context {
 public:
  /// Tensors the backward needs; checked for in-place modification when read back.
  void save_for_backward(const tensor_list& ts) { to_save_ = ts; }
  /// The saved tensors (throws if one was modified in place since it was saved).
  tensor_list get_saved_variables() const;
  /// Outputs that carry no gradient (e.g. indices).
  void mark_non_differentiable(const tensor_list& ts) { non_diff_ = ts; }
  /// Free-form values for the backward.
  std::map<std::string, IValue> saved_data;

  // Internal: filled by Function<T>::apply.
  tensor_list to_save_;
  tensor_list non_diff_;
  std::vector<SavedTensor> saved_;
  std::weak_ptr<Node> node_;
  bool released_ = false;
};

namespace detail {
struct CppNodeBase : Node {
  Context ctx;
  std::string name_;
  std::string name() const override { return name_; }
  void release_variables() override {
    for (auto& s : ctx.saved_) s.reset();
    ctx.released_ = true;
  }
};
template <typename T>
struct CppNode : CppNodeBase {
  tensor_list apply(tensor_list&& grads) override {
    tensor_list r = T::backward(ctx, grads);
    MPX_CHECK(r.size() == next_edges.size(), name_, "::backward returned ", r.size(), " gradients but forward took ",
              next_edges.size(), " tensor inputs; return one (possibly undefined) Tensor per tensor input");
    return r;
  }
};

inline void collect(tensor_list& out, const Tensor& t) { out.push_back(t); }
inline void collect(tensor_list& out, const tensor_list& ts) { out.insert(out.end(), ts.begin(), ts.end()); }
template <typename A> void collect(tensor_list&, const A&) {}

// Applies the Function's autocast policy to tensor arguments.
inline Tensor cast_arg(const Tensor& t, CastPolicy p) {
  const AutocastState& st = autocast_state();
  if (!st.enabled || !t.defined() || !is_floating(t.dtype()) || t.dtype() == kFloat64) return t;
  if (p == CastPolicy::lower && t.dtype() != st.dtype) return st.cast ? st.cast(t, st.dtype) : t.to(st.dtype);
  if (p == CastPolicy::fp32 && t.dtype() != kFloat32) return st.cast ? st.cast(t, kFloat32) : t.to(kFloat32);
  return t;
}
// Non-tensor arguments pass through. The constraint matters: unconstrained, this overload is a
// better match than the const Tensor& one for non-const Tensor lvalues, and the policy is skipped.
template <typename A>
  requires(!std::is_same_v<std::decay_t<A>, Tensor>)
decltype(auto) cast_arg(A&& a, CastPolicy) {
  return std::forward<A>(a);
}

void wire(CppNodeBase& node, const tensor_list& inputs, tensor_list& outputs, const std::shared_ptr<Node>& self);
}  // namespace detail

/// CRTP base for custom ops. T provides
///   static Tensor (or tensor_list) forward(Context&, args...);
///   static tensor_list backward(Context&, tensor_list grad_outputs);
/// and may set `static constexpr CastPolicy autocast_policy` (lower / fp32 / none).
template <typename T>
struct Function {
  static constexpr CastPolicy autocast_policy = CastPolicy::none;

  template <typename... Args>
  static auto apply(Args&&... args) {
    constexpr CastPolicy policy = T::autocast_policy;
    return apply_cast(detail::cast_arg(std::forward<Args>(args), policy)...);
  }

 private:
  template <typename... Args>
  static auto apply_cast(Args&&... args) {
    tensor_list inputs;
    (detail::collect(inputs, args), ...);
    auto node = std::make_shared<detail::CppNode<T>>();
    node->name_ = "CustomFunction";
    const bool record = any_requires_grad(inputs);
    using R = decltype(T::forward(node->ctx, std::forward<Args>(args)...));
    R out;
    {
      NoGradGuard ng;
      out = T::forward(node->ctx, std::forward<Args>(args)...);
    }
    tensor_list outs;
    if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) outs = {out};
    else outs = out;
    detail::wire(*node, inputs, outs, record ? node : nullptr);
    if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) return outs[0];
    else return outs;
  }
};

}  // namespace mpx::autograd
