// Containers: AnyModule (type-erased unary module), Sequential, ModuleList, ModuleDict, ParameterList and
// ParameterDict.
#pragma once
#include <concepts>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace mpx::nn {

/// Any module with a `forward(Tensor) -> Tensor`, held by shared_ptr and called with its hooks;
/// what Sequential stores. Constructible from holders and shared_ptrs.
class AnyModule {
 public:
  AnyModule() = default;
  template <typename M>
    requires std::is_base_of_v<Module, M>
  AnyModule(std::shared_ptr<M> module) : module_(module) {  // NOLINT
    MPX_CHECK(module != nullptr, "AnyModule: the module is empty (a holder made with nullptr)");
    if constexpr (requires(M& m, const Tensor& x) {
                    { m.forward(x) } -> std::convertible_to<Tensor>;
                  }) {
      forward_ = [m = module.get()](const Tensor& x) -> Tensor { return detail::call_forward(*m, x); };
    } else {
      forward_ = [m = module.get()](const Tensor&) -> Tensor {
        MPX_ERROR("Sequential: ", m->name(), " has no forward(Tensor) -> Tensor, so it cannot be chained");
      };
    }
  }
  template <typename H>
    requires requires { typename std::decay_t<H>::ContainedType; }
  AnyModule(H&& holder) : AnyModule(holder.ptr()) {}  // NOLINT

  /// Runs the module's forward with its hooks. LibTorch's spellings `m.forward<>(x)` and
  /// `m.forward<Tensor>(x)` name the return type, which is always a Tensor here.
  template <typename Return = Tensor>
  Tensor forward(const Tensor& x) const {
    static_assert(std::is_same_v<Return, Tensor>, "AnyModule::forward<R>: mpx's AnyModule returns a Tensor");
    MPX_CHECK(forward_ != nullptr, "AnyModule: calling an empty AnyModule");
    return forward_(x);
  }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  const std::shared_ptr<Module>& ptr() const { return module_; }
  /// The module as its concrete type (an impl type or a holder type); throws on mismatch.
  template <typename T>
  auto& get() const {
    auto* p = module_ ? module_->as<T>() : nullptr;
    MPX_CHECK(p != nullptr, "AnyModule::get: the module is ", module_ ? module_->name() : std::string("empty"),
              ", not the requested type");
    return *p;
  }
  bool is_empty() const { return module_ == nullptr; }

 private:
  std::shared_ptr<Module> module_;
  std::function<Tensor(const Tensor&)> forward_;
};

/// Chains modules: forward(x) feeds each child's output to the next. Children are named
/// "0", "1", ... unless given names.
class SequentialImpl : public Module {
 public:
  SequentialImpl() = default;
  SequentialImpl(std::initializer_list<AnyModule> modules) {
    for (const auto& m : modules) push_back(m);
  }
  SequentialImpl(std::initializer_list<std::pair<std::string, AnyModule>> named) {
    for (const auto& [n, m] : named) push_back(n, m);
  }
  template <typename... Ms>
    requires(sizeof...(Ms) >= 1 && (std::is_constructible_v<AnyModule, Ms&&> && ...))
  explicit SequentialImpl(Ms&&... modules) {
    (push_back(AnyModule(std::forward<Ms>(modules))), ...);
  }

  /// Appends a module named after its position.
  void push_back(AnyModule module) { push_back(std::to_string(modules_.size()), std::move(module)); }
  void push_back(std::string name, AnyModule module) {
    register_module(std::move(name), module.ptr());
    modules_.push_back(std::move(module));
  }
  /// Appends every module of another Sequential.
  void extend(const SequentialImpl& other) {
    for (const auto& m : other.modules_) push_back(m);
  }

  Tensor forward(Tensor x) {
    for (const auto& m : modules_) x = m.forward(x);
    return x;
  }

  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  std::shared_ptr<Module> operator[](size_t i) const { return ptr(i); }
  std::shared_ptr<Module> ptr(size_t i) const {
    MPX_CHECK(i < modules_.size(), "Sequential: index ", i, " is out of range for a Sequential of size ",
              modules_.size());
    return modules_[i].ptr();
  }
  /// The i-th module as an impl type (`at<LinearImpl>(0)`) or holder type (`at<Linear>(0)`).
  template <typename T>
  auto& at(size_t i) const {
    (void)ptr(i);
    return modules_[i].get<T>();
  }
  std::vector<AnyModule>::const_iterator begin() const { return modules_.begin(); }
  std::vector<AnyModule>::const_iterator end() const { return modules_.end(); }
  std::string name() const override { return "Sequential"; }

 private:
  std::vector<AnyModule> modules_;
};

/// Holder for SequentialImpl; also constructible from a braced list of modules:
/// `Sequential({Linear(2, 3), ReLU()})` or `Sequential({{"fc", Linear(2, 3)}, {"act", ReLU()}})`.
class Sequential : public ModuleHolder<SequentialImpl> {
 public:
  using ModuleHolder<SequentialImpl>::ModuleHolder;
  using Impl = SequentialImpl;
  Sequential() : ModuleHolder<SequentialImpl>() {}
  Sequential(std::initializer_list<AnyModule> modules)  // NOLINT
      : ModuleHolder<SequentialImpl>(std::make_shared<SequentialImpl>(modules)) {}
  Sequential(std::initializer_list<std::pair<std::string, AnyModule>> named)  // NOLINT
      : ModuleHolder<SequentialImpl>(std::make_shared<SequentialImpl>(named)) {}
};

/// An indexable list of submodules (no forward), named "0", "1", ...
class ModuleListImpl : public Module {
 public:
  ModuleListImpl() = default;
  template <typename... Ms>
    requires(sizeof...(Ms) >= 1 && (std::is_constructible_v<AnyModule, Ms&&> && ...))
  explicit ModuleListImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  template <typename M>
    requires std::is_base_of_v<Module, M>
  void push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(std::move(module));
  }
  template <typename H>
    requires requires { typename std::decay_t<H>::ContainedType; }
  void push_back(H&& holder) {
    push_back(holder.ptr());
  }
  void extend(const ModuleListImpl& other) {
    for (const auto& m : other.modules_) push_back(m);
  }

  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  std::shared_ptr<Module> operator[](size_t i) const { return ptr(i); }
  std::shared_ptr<Module> ptr(size_t i) const {
    MPX_CHECK(i < modules_.size(), "ModuleList: index ", i, " is out of range for a ModuleList of size ",
              modules_.size());
    return modules_[i];
  }
  /// The i-th module as an impl type or holder type; throws on a type mismatch.
  template <typename T>
  auto& at(size_t i) const {
    auto* p = ptr(i)->template as<T>();
    MPX_CHECK(p != nullptr, "ModuleList::at: module ", i, " is a ", modules_[i]->name(), ", not the requested type");
    return *p;
  }
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }
  std::string name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
MPX_MODULE(ModuleList);

/// Submodules by name in insertion order (LibTorch's ModuleDict; no forward). Inserting an existing key replaces
/// that module, as in LibTorch.
class ModuleDictImpl : public Module {
 public:
  ModuleDictImpl() = default;
  explicit ModuleDictImpl(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules) {
    update(modules);
  }
  template <typename M>
    requires std::is_base_of_v<Module, M>
  std::shared_ptr<M> insert(const std::string& key, std::shared_ptr<M> module) {
    return contains(key) ? replace_module(key, std::move(module)) : register_module(key, std::move(module));
  }
  template <typename H>
    requires requires { typename std::decay_t<H>::ContainedType; }
  auto insert(const std::string& key, H&& holder) {
    return insert(key, holder.ptr());
  }
  void update(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules) {
    for (const auto& [k, m] : modules) insert(k, m);
  }
  bool contains(const std::string& key) const { return named_children().contains(key); }
  size_t size() const { return named_children().size(); }
  bool is_empty() const { return size() == 0; }
  std::shared_ptr<Module> operator[](const std::string& key) const {
    const auto children = named_children();
    MPX_CHECK(children.contains(key), "ModuleDict: no module named '", key, "'");
    return children[key];
  }
  /// The module `key` as an impl or holder type; throws on a type mismatch.
  template <typename T>
  auto& at(const std::string& key) const {
    auto* p = (*this)[key]->template as<T>();
    MPX_CHECK(p != nullptr, "ModuleDict::at: module '", key, "' is a ", (*this)[key]->name(), ", not the requested type");
    return *p;
  }
  std::vector<std::string> keys() const { return named_children().keys(); }
  std::vector<std::shared_ptr<Module>> values() const { return named_children().values(); }
  std::string name() const override { return "ModuleDict"; }
};
MPX_MODULE(ModuleDict);

/// Parameters in a list, named "0", "1", ... (LibTorch's ParameterList): each requires grad and is trained, saved
/// and moved like a layer's own.
class ParameterListImpl : public Module {
 public:
  ParameterListImpl() = default;
  explicit ParameterListImpl(const std::vector<Tensor>& tensors) {
    for (const Tensor& t : tensors) append(t);
  }
  Tensor& append(const Tensor& tensor) { return register_parameter(std::to_string(size()), tensor); }
  size_t size() const { return own_parameters().size(); }
  bool is_empty() const { return size() == 0; }
  Tensor operator[](size_t i) const {
    MPX_CHECK(i < size(), "ParameterList: index ", i, " is out of range for a ParameterList of size ", size());
    return own_parameters()[std::to_string(i)];
  }
  std::string name() const override { return "ParameterList"; }
};
MPX_MODULE(ParameterList);

/// Parameters by name in insertion order (LibTorch's ParameterDict).
class ParameterDictImpl : public Module {
 public:
  ParameterDictImpl() = default;
  explicit ParameterDictImpl(const std::vector<std::pair<std::string, Tensor>>& tensors) {
    for (const auto& [k, t] : tensors) insert(k, t);
  }
  Tensor& insert(const std::string& key, const Tensor& tensor) { return register_parameter(key, tensor); }
  bool contains(const std::string& key) const { return own_parameters().contains(key); }
  size_t size() const { return own_parameters().size(); }
  bool is_empty() const { return size() == 0; }
  Tensor operator[](const std::string& key) const {
    MPX_CHECK(contains(key), "ParameterDict: no parameter named '", key, "'");
    return own_parameters()[key];
  }
  std::vector<std::string> keys() const { return own_parameters().keys(); }
  std::string name() const override { return "ParameterDict"; }
};
MPX_MODULE(ParameterDict);

}  // namespace mpx::nn
