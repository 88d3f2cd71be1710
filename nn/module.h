// nn::Module: the base of every layer and model (named parameters, buffers, children, hooks,
// train/eval, to(), state_dict) and ModuleHolder / MPX_MODULE, LibTorch's TORCH_MODULE.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/cast_args.h"
#include "nn/ordered_dict.h"

namespace mpx::nn {

class Module;

/// What load_state_dict found besides the keys it loaded (PyTorch's _IncompatibleKeys).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

/// Dotted name -> tensor, in registration order (parameters first, then buffers, per module).
using StateDict = OrderedDict<std::string, Tensor>;

/// The base class of layers and models. Subclasses register their parameters, buffers and
/// submodules in the constructor and define a `forward` of whatever signature they need
/// (it is not virtual, as in LibTorch); wrap them in a holder with MPX_MODULE to call them
/// as `net(x)`, which also runs the forward hooks.
///
/// Modules must be created through a holder or std::make_shared when they are registered
/// as children (the tree holds shared_ptrs).
class Module : public std::enable_shared_from_this<Module> {
 public:
  /// Runs before forward with the (first) tensor input; may replace it.
  using ForwardPreHook = std::function<void(Module&, Tensor& input)>;
  /// Runs after forward with the input it saw and the output; may replace the output.
  using ForwardHook = std::function<void(Module&, const Tensor& input, Tensor& output)>;

  Module();
  /// Gives the module an explicit display name (otherwise derived from its C++ type).
  explicit Module(std::string name);
  virtual ~Module() = default;
  Module(const Module&) = default;
  Module& operator=(const Module&) = default;

  /// The module's type name: "Linear", "BatchNorm2d", or for user types the demangled class
  /// name without namespaces and a trailing "Impl" ("NetImpl" -> "Net").
  virtual std::string name() const;
  /// True for BatchNorm1d/2d (amp keeps these in f32 with keep_batchnorm_fp32).
  virtual bool is_batchnorm() const { return false; }
  /// One-line description of this module alone: "Linear(in_features=3, out_features=4, bias=true)".
  virtual void pretty_print(std::ostream& os) const;

  // ---- registration ----
  /// Registers `tensor` as a parameter (a leaf; a non-leaf is detached first) and sets its
  /// requires_grad. An undefined tensor registers an absent parameter (e.g. bias=false) that
  /// enumeration skips. Returns the stored handle.
  Tensor& register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  /// Puts another tensor under a registered parameter's name, in its place, and returns it. Ties weights as
  /// PyTorch's `decoder.weight = embedding.weight` does: `decoder->weight = decoder->replace_parameter("weight",
  /// embedding->weight)` (assigning the member alone would leave the old tensor registered, trained and saved).
  Tensor& replace_parameter(const std::string& name, const Tensor& tensor);
  /// Registers a buffer: state that is saved and moved by to() but is not trained. A buffer
  /// that is not `persistent` (PyTorch's persistent=False: a causal mask, a cached table) is
  /// moved and enumerated as any other but left out of state_dict(), so load_state_dict
  /// neither expects it nor accepts it.
  Tensor& register_buffer(std::string name, Tensor tensor, bool persistent = true);
  /// Whether this module's own buffer `name` goes into state_dict().
  bool is_persistent_buffer(const std::string& name) const;
  /// Registers a child module; accepts holders (Linear(...)) and std::shared_ptr<M>.
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: the type must derive from mpx::nn::Module");
    register_module_impl(std::move(name), module);
    return module;
  }
  template <typename Holder, typename = typename std::decay_t<Holder>::ContainedType>
  std::shared_ptr<typename std::decay_t<Holder>::ContainedType> register_module(std::string name, Holder&& holder) {
    return register_module(std::move(name), holder.ptr());
  }
  /// Replaces an already registered child (LibTorch's replace_module).
  template <typename M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    replace_module_impl(name, module);
    return module;
  }
  template <typename Holder, typename = typename std::decay_t<Holder>::ContainedType>
  std::shared_ptr<typename std::decay_t<Holder>::ContainedType> replace_module(const std::string& name,
                                                                               Holder&& holder) {
    return replace_module(name, holder.ptr());
  }
  /// Removes a child, parameter or buffer by (undotted) name.
  void unregister_module(const std::string& name);

  // ---- enumeration (registration order; parameters appearing twice are listed once) ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  OrderedDict<std::string, Tensor> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  OrderedDict<std::string, Tensor> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  OrderedDict<std::string, std::shared_ptr<Module>> named_children() const;
  /// This module (first, when include_self) and all descendants, depth first. When this
  /// module is not owned by a shared_ptr, its entry is a non-owning pointer.
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true) const;
  /// As modules(), keyed by dotted path ("" for this module).
  OrderedDict<std::string, std::shared_ptr<Module>> named_modules(const std::string& prefix = "",
                                                                  bool include_self = true) const;
  /// Calls fn on this module and then every descendant, depth first (the order of modules()).
  void apply(const std::function<void(Module&)>& fn);
  void apply(const std::function<void(const std::string&, Module&)>& fn, const std::string& prefix = "");

  /// Direct (non-recursive) access to this module's own entries, e.g. for custom to() logic.
  const OrderedDict<std::string, Tensor>& own_parameters() const { return params_; }
  const OrderedDict<std::string, Tensor>& own_buffers() const { return buffers_; }

  /// Typed access: `module.as<Linear>()` / `as<LinearImpl>()` is the impl pointer or null.
  template <typename T>
  auto* as() {
    if constexpr (requires { typename T::ContainedType; }) return dynamic_cast<typename T::ContainedType*>(this);
    else return dynamic_cast<T*>(this);
  }
  template <typename T>
  const auto* as() const {
    if constexpr (requires { typename T::ContainedType; }) return dynamic_cast<const typename T::ContainedType*>(this);
    else return dynamic_cast<const T*>(this);
  }

  // ---- modes ----
  /// Sets training mode on this module and all descendants.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return is_training_; }

  // ---- moving and casting ----
  /// Moves every parameter and buffer to `device`, in place: the parameter handles stay
  /// the same leaf tensors (their data is replaced), so references and requires_grad
  /// survive. Create optimizers after to() (an optimizer made before keeps working on the
  /// same handles, but any state it built — momenta, f32 masters — stays on the old
  /// device/dtype). Gradients are moved too.
  virtual void to(Device device, bool non_blocking = false);
  /// Casts floating parameters and buffers to `dtype` in place (integer buffers such as
  /// num_batches_tracked are left alone); same leaf semantics as to(Device).
  virtual void to(DType dtype, bool non_blocking = false);
  virtual void to(Device device, DType dtype, bool non_blocking = false);
  /// Re-lays 4-d parameters and buffers out in `fmt` (ChannelsLast: NHWC) in place.
  virtual void to(MemoryFormat fmt);

  // ---- state ----
  /// Parameters and buffers under dotted names, detached (sharing data with the module).
  StateDict state_dict() const;
  /// Copies values into the module's existing tensors (converting dtype and device to the
  /// module's) under NoGradGuard. Throws listing every missing key, unexpected key and shape
  /// mismatch (name and both shapes); with strict=false, missing/unexpected keys are only
  /// reported in the result, shape mismatches still throw.
  LoadStateDictResult load_state_dict(const StateDict& dict, bool strict = true);
  LoadStateDictResult load_state_dict(const std::map<std::string, Tensor>& dict, bool strict = true);

  /// Clears gradients: drops them (set_to_none) or zeroes them in place.
  virtual void zero_grad(bool set_to_none = true);

  // ---- hooks (run by holder calls `net(x)` and by Sequential, not by forward()) ----
  /// Registers fn(Module&, const Tensor& input) or fn(Module&, Tensor& input) to run before
  /// forward; a callable returning a Tensor (or std::optional<Tensor>) replaces the input
  /// with a defined result. Returns an id for remove_hook.
  template <typename Fn>
  int64_t register_forward_pre_hook(Fn fn) {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&, Module&, Tensor&>>) {
      return add_pre_hook(ForwardPreHook(std::move(fn)));
    } else {
      return add_pre_hook([fn = std::move(fn)](Module& m, Tensor& in) mutable {
        std::optional<Tensor> r = fn(m, in);
        if (r && r->defined()) in = *r;
      });
    }
  }
  /// Registers fn(Module&, const Tensor& input, Tensor& output) to run after forward; a
  /// callable returning a Tensor replaces the output with a defined result.
  template <typename Fn>
  int64_t register_forward_hook(Fn fn) {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&, Module&, const Tensor&, Tensor&>>) {
      return add_hook(ForwardHook(std::move(fn)));
    } else {
      return add_hook([fn = std::move(fn)](Module& m, const Tensor& in, Tensor& out) mutable {
        std::optional<Tensor> r = fn(m, in, out);
        if (r && r->defined()) out = *r;
      });
    }
  }
  /// Removes a hook by the id its register call returned; false when there is none.
  bool remove_hook(int64_t id);
  bool has_forward_hooks() const { return !pre_hooks_.empty() || !hooks_.empty(); }
  void run_forward_pre_hooks(Tensor& input);
  void run_forward_hooks(const Tensor& input, Tensor& output);

  // ---- casting around holder calls (amp::initialize sets it; see nn/cast_args.h) ----
  /// Sets what a holder call `net(args...)` casts: floating inputs, floating outputs, and
  /// whether forward runs under autocast. Direct `net->forward(...)` calls are not affected.
  void set_forward_cast(ForwardCast cast) { forward_cast_ = cast; }
  const ForwardCast& forward_cast() const { return forward_cast_; }

 protected:
  /// Applies fn to every parameter, buffer and gradient of this module tree in place.
  void apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn, bool floating_only);

  bool is_training_ = true;

 private:
  void register_module_impl(std::string name, std::shared_ptr<Module> module);
  void replace_module_impl(const std::string& name, std::shared_ptr<Module> module);
  int64_t add_pre_hook(ForwardPreHook h);
  int64_t add_hook(ForwardHook h);
  void collect_named(const std::string& prefix, bool params, bool recurse, OrderedDict<std::string, Tensor>& out,
                     std::vector<const TensorImpl*>& seen) const;
  void collect_state(const std::string& prefix, StateDict& out) const;

  std::optional<std::string> name_;
  OrderedDict<std::string, Tensor> params_{"parameter"};
  OrderedDict<std::string, Tensor> buffers_{"buffer"};
  std::vector<std::string> non_persistent_;  // buffers left out of state_dict
  OrderedDict<std::string, std::shared_ptr<Module>> children_{"submodule"};
  std::vector<std::pair<int64_t, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<int64_t, ForwardHook>> hooks_;
  ForwardCast forward_cast_;
};

/// Prints the module tree: "Net(\n  (conv): Conv2d(...)\n  ...\n)".
std::ostream& operator<<(std::ostream& os, const Module& m);

namespace detail {
template <typename T>
inline constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, Tensor>;

/// Calls m.forward(args...) with the module's hooks around it. Hooks see the first argument
/// when it is a Tensor, and the output when forward returns a Tensor.
template <typename M, typename First, typename... Rest>
auto call_forward_hooked(M& m, First&& first, Rest&&... rest) {
  if constexpr (is_tensor_v<First>) {
    if (!m.has_forward_hooks()) return m.forward(std::forward<First>(first), std::forward<Rest>(rest)...);
    Tensor in = first;
    m.run_forward_pre_hooks(in);
    auto out = m.forward(in, std::forward<Rest>(rest)...);
    if constexpr (std::is_same_v<decltype(out), Tensor>) m.run_forward_hooks(in, out);
    return out;
  } else {
    return m.forward(std::forward<First>(first), std::forward<Rest>(rest)...);
  }
}
template <typename M>
auto call_forward_hooked(M& m) {
  return m.forward();
}

/// call_forward_hooked with the module's ForwardCast applied: inputs cast (when forward can
/// take the cast copies), forward under autocast, outputs cast.
template <typename M, typename... Args>
auto call_forward(M& m, Args&&... args) {
  using R = decltype(call_forward_hooked(m, std::forward<Args>(args)...));
  const ForwardCast& fc = m.forward_cast();
  if (!fc.active()) return call_forward_hooked(m, std::forward<Args>(args)...);
  ForwardAutocastScope scope(fc);
  auto run = [&]() -> R {
    if constexpr (sizeof...(Args) > 0 &&
                  requires { call_forward_hooked(m, std::declval<std::decay_t<Args>>()...); }) {
      if (fc.inputs) return call_forward_hooked(m, cast_floating<std::decay_t<Args>>(args, *fc.inputs)...);
    } else if constexpr (sizeof...(Args) > 0) {
      MPX_CHECK(!fc.inputs, m.name(),
                ": amp casts the inputs of a holder call, but this forward takes an argument by non-const "
                "reference; take it by value or const reference, or call forward directly and cast yourself");
    }
    return call_forward_hooked(m, std::forward<Args>(args)...);
  };
  if constexpr (std::is_void_v<R>) {
    run();
  } else {
    R out = run();
    if (fc.outputs) return cast_floating<R>(out, *fc.outputs);
    return out;
  }
}
}  // namespace detail

/// Owns a module implementation through a shared_ptr (LibTorch's ModuleHolder). `Name(args)`
/// constructs NameImpl(args), `Name(nullptr)` is empty, `holder->` reaches the impl and
/// `holder(x)` calls forward with hooks.
template <typename Impl>
class ModuleHolder {
 public:
  using ContainedType = Impl;

  /// Default-constructs the impl (only for impls with a default constructor).
  ModuleHolder()
    requires std::is_default_constructible_v<Impl>
      : impl_(std::make_shared<Impl>()) {}
  /// An empty holder, to be assigned later (`Linear fc{nullptr};`).
  ModuleHolder(std::nullptr_t) {}  // NOLINT
  /// Wraps an existing impl (what register_module returns).
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}  // NOLINT
  /// Constructs the impl from the arguments.
  template <typename Head, typename... Tail>
    requires(!std::is_same_v<std::decay_t<Head>, std::nullptr_t> &&
             !std::is_base_of_v<ModuleHolder, std::decay_t<Head>> &&
             !std::is_convertible_v<Head &&, std::shared_ptr<Impl>> &&
             std::is_constructible_v<Impl, Head &&, Tail && ...>)
  explicit ModuleHolder(Head&& head, Tail&&... tail)
      : impl_(std::make_shared<Impl>(std::forward<Head>(head), std::forward<Tail>(tail)...)) {}

  Impl* operator->() { return checked(); }
  const Impl* operator->() const { return checked(); }
  Impl& operator*() { return *checked(); }
  const Impl& operator*() const { return *checked(); }
  Impl* get() { return checked(); }
  const Impl* get() const { return checked(); }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const { return impl_ != nullptr; }

  /// Runs forward with the module's hooks.
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    return detail::call_forward(*checked(), std::forward<Args>(args)...);
  }
  /// Forwards indexing to the impl (Sequential, ModuleList).
  template <typename Arg>
  decltype(auto) operator[](Arg&& arg) {
    return (*checked())[std::forward<Arg>(arg)];
  }

 protected:
  Impl* checked() const {
    MPX_CHECK(impl_ != nullptr, "ModuleHolder: accessing an empty holder of ", typeid(Impl).name(),
              "; it was made with nullptr and never assigned a module");
    return impl_.get();
  }
  std::shared_ptr<Impl> impl_;
};

template <typename Impl>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<Impl>& h) {
  if (h.is_empty()) return os << "(empty " << typeid(Impl).name() << " holder)";
  return os << *h;
}

}  // namespace mpx::nn

/// Declares `class Name` holding a std::shared_ptr<NameImpl> (LibTorch's TORCH_MODULE):
/// `Name net(args...)` constructs NameImpl(args...), `net->forward(x)` calls forward
/// directly, `net(x)` runs forward with hooks.
#define MPX_MODULE(Name)                                     \
  class Name : public ::mpx::nn::ModuleHolder<Name##Impl> {  \
   public:                                                   \
    using ::mpx::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
    using Impl = Name##Impl;                                 \
  }
