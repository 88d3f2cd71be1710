// Custom differentiable ops: struct MyOp : Function<MyOp> { forward(Context&, ...); backward(Context&, grads); }.
#pragma once
#include <map>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
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
  /// Whether the i-th tensor input required grad when forward ran: a backward may skip the
  /// gradients nobody asked for (return an undefined Tensor in their place).
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }

  // Internal: filled by Function<T>::apply.
  tensor_list to_save_;
  tensor_list non_diff_;
  std::vector<bool> needs_input_grad_;
  std::vector<SavedTensor> saved_;
  std::weak_ptr<Node> node_;
  bool released_ = false;
};

namespace detail {
struct CppNodeBase : Node {
  Context ctx;
  std::string name_;
  // One entry per forward argument (per element of a tensor_list argument): whether it is a tensor input.
  std::vector<bool> arg_is_tensor;
  std::string name() const override { return name_; }
  // backward's gradients, one per tensor input: as returned, or picked from LibTorch's one-per-argument list
  // (undefined for the non-tensor arguments and for trailing defaulted ones).
  tensor_list input_grads(tensor_list r) const;
  void release_variables() override {
    for (auto& s : ctx.saved_) s.reset();
    ctx.released_ = true;
  }
};
// LibTorch's functions take the context as `AutogradContext* ctx`; mpx's as `Context& ctx`. Both work.
template <typename T, typename... Args>
decltype(auto) call_forward(Context& ctx, Args&&... args) {
  if constexpr (requires { T::forward(&ctx, std::forward<Args>(args)...); }) return T::forward(&ctx, std::forward<Args>(args)...);
  else return T::forward(ctx, std::forward<Args>(args)...);
}
template <typename T>
tensor_list call_backward(Context& ctx, tensor_list& grads) {
  if constexpr (requires { T::backward(&ctx, grads); }) return T::backward(&ctx, grads);
  else return T::backward(ctx, grads);
}
// The class's name, for grad_fn()->name() (LibTorch's too).
std::string demangled(const char* mangled);

template <typename T>
struct CppNode : CppNodeBase {
  tensor_list apply(tensor_list&& grads) override {
    return input_grads(call_backward<T>(ctx, grads));
  }
};

inline void collect(tensor_list& out, const Tensor& t) { out.push_back(t); }
inline void collect(tensor_list& out, const tensor_list& ts) { out.insert(out.end(), ts.begin(), ts.end()); }
template <typename A> void collect(tensor_list&, const A&) {}

// The autocast stage's result for argument I: Tensor arguments are replaced, in order, by the
// stage's outputs; other arguments pass through. The constraint matters: unconstrained, the
// pass-through overload is a better match than the const Tensor& one for non-const Tensor lvalues.
template <typename... Args> constexpr size_t tensor_index(size_t i) {
  constexpr bool is_tensor[] = {std::is_same_v<std::decay_t<Args>, Tensor>..., false};
  size_t n = 0;
  for (size_t j = 0; j < i; ++j) n += is_tensor[j] ? 1 : 0;
  return n;
}
template <size_t K> Tensor cast_arg(const Tensor&, const tensor_list& cast) { return cast[K]; }
template <size_t K, typename A>
  requires(!std::is_same_v<std::decay_t<A>, Tensor>)
decltype(auto) cast_arg(A&& a, const tensor_list&) {
  return std::forward<A>(a);
}
inline void mark_arg(std::vector<bool>& out, const Tensor&) { out.push_back(true); }
inline void mark_arg(std::vector<bool>& out, const tensor_list& ts) { out.insert(out.end(), ts.size(), true); }
template <typename A> void mark_arg(std::vector<bool>& out, const A&) { out.push_back(false); }
inline void collect_tensor(tensor_list& out, const Tensor& t) { out.push_back(t); }
template <typename A>
  requires(!std::is_same_v<std::decay_t<A>, Tensor>)
void collect_tensor(tensor_list&, const A&) {}

void wire(CppNodeBase& node, const tensor_list& inputs, tensor_list& outputs, const std::shared_ptr<Node>& self);
}  // namespace detail

/// CRTP base for custom ops. T provides
///   static Tensor (or tensor_list) forward(Context&, args...);
///   static tensor_list backward(Context&, tensor_list grad_outputs);
/// or LibTorch's spelling of the same, `forward(AutogradContext* ctx, ...)` and `backward(AutogradContext* ctx, ...)`.
/// and may set `static constexpr CastPolicy autocast_policy` (lower / fp32 / promote / none /
/// banned): its Tensor arguments go through the built-in ops' autocast stage (ops::autocast).
template <typename T>
struct Function {
  static constexpr CastPolicy autocast_policy = CastPolicy::none;

  template <typename... Args>
  static auto apply(Args&&... args) {
    tensor_list ts;
    (detail::collect_tensor(ts, args), ...);
    const tensor_list cast = ops::autocast(T::autocast_policy, "CustomFunction", std::move(ts));
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return apply_cast(detail::cast_arg<detail::tensor_index<Args...>(I)>(std::forward<Args>(args), cast)...);
    }(std::index_sequence_for<Args...>{});
  }

 private:
  template <typename... Args>
  static auto apply_cast(Args&&... args) {
    tensor_list inputs;
    (detail::collect(inputs, args), ...);
    auto node = std::make_shared<detail::CppNode<T>>();
    node->name_ = detail::demangled(typeid(T).name());
    (detail::mark_arg(node->arg_is_tensor, args), ...);
    const bool record = any_requires_grad(inputs);
    for (const Tensor& t : inputs) node->ctx.needs_input_grad_.push_back(record && t.defined() && t.requires_grad());
    using R = std::decay_t<decltype(detail::call_forward<T>(node->ctx, std::forward<Args>(args)...))>;
    R out;
    {
      NoGradGuard ng;
      out = detail::call_forward<T>(node->ctx, std::forward<Args>(args)...);
    }
    tensor_list outs;
    if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) outs = {out};
    else outs = out;
    detail::wire(*node, inputs, outs, record ? node : nullptr);
    if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) return outs[0];
    else return outs;
  }
};

/// LibTorch's names of the custom op's context and tensor lists.
using AutogradContext = Context;
using variable_list = tensor_list;
using mpx::tensor_list;

}  // namespace mpx::autograd
