// nn::Module: registration, enumeration, modes, in-place to(), state_dict and hooks.
#include "nn/module.h"


#include <algorithm>
#include <atomic>
#include <sstream>

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "ops/op_utils.h"

namespace mpx::nn {

namespace {

std::atomic<int64_t> next_hook_id{1};

/// Makes `dst` (the same handle everyone holds) refer to `src`'s data, keeping dst's
/// autograd identity: what LibTorch's `param.set_data(new)` does.
void set_data(const Tensor& dst, const Tensor& src) {
  TensorImpl* d = dst.impl();
  const TensorImpl* s = src.impl();
  if (d == s) return;
  d->storage = s->storage;
  d->sizes = s->sizes;
  d->strides = s->strides;
  d->offset = s->offset;
  d->dtype = s->dtype;
  d->view = s->view;
  d->view_rebases = s->view_rebases;
}

void check_name(const std::string& name, const char* what) {
  MPX_CHECK(!name.empty(), "Module::register_", what, ": the name must not be empty");
  MPX_CHECK(name.find('.') == std::string::npos, "Module::register_", what, ": the name '", name,
            "' must not contain a dot (dots separate nesting levels in dotted names)");
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string r;
  for (size_t i = 0; i < keys.size(); ++i) r += (i ? ", \"" : "\"") + keys[i] + "\"";
  return r;
}

}  // namespace

Module::Module() = default;
Module::Module(std::string name) : name_(std::move(name)) {}

std::string Module::name() const {
  if (name_) return *name_;
  std::string n = autograd::detail::demangled(typeid(*this).name());
  // Strip namespaces (outside template arguments) and LibTorch's "Impl" suffix.
  const size_t lt = n.find('<');
  const size_t colon = n.rfind("::", lt == std::string::npos ? std::string::npos : lt);
  if (colon != std::string::npos) n = n.substr(colon + 2);
  if (n.size() > 4 && n.compare(n.size() - 4, 4, "Impl") == 0) n.resize(n.size() - 4);
  return n;
}

void Module::pretty_print(std::ostream& os) const { os << name(); }

// ---- registration ----
Tensor& Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  check_name(name, "parameter");
  MPX_CHECK(!buffers_.contains(name) && !children_.contains(name), "Module::register_parameter: '", name,
            "' is already registered as a ", buffers_.contains(name) ? "buffer" : "submodule", " of ", this->name());
  MPX_CHECK(!params_.contains(name), "Module::register_parameter: parameter '", name, "' already exists in ",
            this->name());
  if (tensor.defined()) {
    if (!tensor.is_leaf()) tensor = tensor.detach();
    MPX_CHECK(!requires_grad || tensor.is_floating_point(), "Module::register_parameter: parameter '", name,
              "' is ", ops::describe(tensor), "; only floating tensors can require grad (pass requires_grad=false)");
    tensor.set_requires_grad(requires_grad);
  }
  return params_.insert(name, std::move(tensor));
}

Tensor& Module::replace_parameter(const std::string& name, const Tensor& tensor) {
  Tensor* slot = params_.find(name);
  MPX_CHECK(slot != nullptr, "Module::replace_parameter: ", this->name(), " has no parameter '", name,
            "' (register_parameter adds one)");
  MPX_CHECK(tensor.defined() && tensor.is_leaf(), "Module::replace_parameter: '", name, "' needs a defined leaf "
            "tensor (another module's parameter, or a tensor made without history), got ", ops::describe(tensor));
  return *slot = tensor;
}

Tensor& Module::register_buffer(std::string name, Tensor tensor, bool persistent) {
  check_name(name, "buffer");
  MPX_CHECK(!params_.contains(name) && !children_.contains(name), "Module::register_buffer: '", name,
            "' is already registered as a ", params_.contains(name) ? "parameter" : "submodule", " of ",
            this->name());
  MPX_CHECK(!buffers_.contains(name), "Module::register_buffer: buffer '", name, "' already exists in ",
            this->name());
  if (!persistent) non_persistent_.push_back(name);
  return buffers_.insert(name, std::move(tensor));
}

bool Module::is_persistent_buffer(const std::string& name) const {
  MPX_CHECK(buffers_.contains(name), "Module::is_persistent_buffer: ", this->name(), " has no buffer '", name, "'");
  return std::find(non_persistent_.begin(), non_persistent_.end(), name) == non_persistent_.end();
}

void Module::register_module_impl(std::string name, std::shared_ptr<Module> module) {
  check_name(name, "module");
  MPX_CHECK(module != nullptr, "Module::register_module: submodule '", name,
            "' is empty (a holder made with nullptr); construct it before registering");
  MPX_CHECK(module.get() != this, "Module::register_module: a module cannot be its own child ('", name, "')");
  MPX_CHECK(!params_.contains(name) && !buffers_.contains(name), "Module::register_module: '", name,
            "' is already registered as a ", params_.contains(name) ? "parameter" : "buffer", " of ", this->name());
  MPX_CHECK(!children_.contains(name), "Module::register_module: submodule '", name, "' already exists in ",
            this->name(), "; use replace_module to swap it");
  children_.insert(name, std::move(module));
}

void Module::replace_module_impl(const std::string& name, std::shared_ptr<Module> module) {
  MPX_CHECK(children_.contains(name), "Module::replace_module: ", this->name(), " has no submodule '", name, "'");
  MPX_CHECK(module != nullptr, "Module::replace_module: the replacement for '", name, "' is empty");
  children_[name] = std::move(module);
}

void Module::unregister_module(const std::string& name) {
  if (children_.contains(name)) children_.erase(name);
  else if (params_.contains(name)) params_.erase(name);
  else if (buffers_.contains(name)) {
    buffers_.erase(name);
    non_persistent_.erase(std::remove(non_persistent_.begin(), non_persistent_.end(), name), non_persistent_.end());
  }
  else MPX_ERROR("Module::unregister_module: ", this->name(), " has no submodule, parameter or buffer '", name, "'");
}

// ---- enumeration ----
void Module::collect_named(const std::string& prefix, bool params, bool recurse, OrderedDict<std::string, Tensor>& out,
                           std::vector<const TensorImpl*>& seen) const {
  for (const auto& [n, t] : params ? params_ : buffers_) {
    if (!t.defined()) continue;
    if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
    seen.push_back(t.impl());
    out.insert(prefix + n, t);
  }
  if (!recurse) return;
  for (const auto& [n, c] : children_) c->collect_named(prefix + n + ".", params, true, out, seen);
}

OrderedDict<std::string, Tensor> Module::named_parameters(bool recurse) const {
  OrderedDict<std::string, Tensor> out("parameter");
  std::vector<const TensorImpl*> seen;
  collect_named("", true, recurse, out, seen);
  return out;
}
std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }

OrderedDict<std::string, Tensor> Module::named_buffers(bool recurse) const {
  OrderedDict<std::string, Tensor> out("buffer");
  std::vector<const TensorImpl*> seen;
  collect_named("", false, recurse, out, seen);
  return out;
}
std::vector<Tensor> Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }

std::vector<std::shared_ptr<Module>> Module::children() const { return children_.values(); }
OrderedDict<std::string, std::shared_ptr<Module>> Module::named_children() const { return children_; }

OrderedDict<std::string, std::shared_ptr<Module>> Module::named_modules(const std::string& prefix,
                                                                        bool include_self) const {
  OrderedDict<std::string, std::shared_ptr<Module>> out("module");
  std::vector<const Module*> seen;
  std::function<void(const Module&, const std::string&, std::shared_ptr<Module>)> visit =
      [&](const Module& m, const std::string& path, std::shared_ptr<Module> self) {
        if (std::find(seen.begin(), seen.end(), &m) != seen.end()) return;
        seen.push_back(&m);
        if (self) out.insert(path, std::move(self));
        for (const auto& [n, c] : m.children_) visit(*c, path.empty() ? n : path + "." + n, c);
      };
  std::shared_ptr<Module> self;
  if (include_self) {
    self = std::const_pointer_cast<Module>(weak_from_this().lock());
    // Not owned by a shared_ptr (e.g. a stack object): hand out a non-owning pointer.
    if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), const_cast<Module*>(this));
  }
  visit(*this, prefix, self);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) const {
  return named_modules("", include_self).values();
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& [n, c] : children_) c->apply(fn);
}
void Module::apply(const std::function<void(const std::string&, Module&)>& fn, const std::string& prefix) {
  fn(prefix, *this);
  for (auto& [n, c] : children_) c->apply(fn, prefix.empty() ? n : prefix + "." + n);
}

// ---- modes ----
void Module::train(bool on) {
  is_training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

// ---- moving and casting ----
void Module::apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn, bool floating_only) {
  NoGradGuard ng;
  auto convert = [&](Tensor& t) {
    if (!t.defined() || (floating_only && !t.is_floating_point())) return;
    set_data(t, fn(t.detach()));
    if (Tensor& g = t.mutable_grad(); g.defined()) g = fn(g.detach());
  };
  for (auto& [n, t] : params_) convert(t);
  for (auto& [n, t] : buffers_) convert(t);
  for (auto& [n, c] : children_) c->apply_to_tensors(fn, floating_only);
}

void Module::to(Device device, bool non_blocking) {
  apply_to_tensors([&](const Tensor& t) { return t.to(device, non_blocking); }, false);
}
void Module::to(DType dtype, bool) {
  MPX_CHECK(is_floating(dtype), "Module::to: dtype must be floating (f32, f16, bf16, f64), got ", dtype_name(dtype),
            "; modules hold floating parameters");
  apply_to_tensors([&](const Tensor& t) { return t.to(dtype); }, true);
}
void Module::to(Device device, DType dtype, bool non_blocking) {
  to(device, non_blocking);
  to(dtype, non_blocking);
}
void Module::to(MemoryFormat fmt) {
  MPX_CHECK(fmt != MemoryFormat::Preserve, "Module::to: MemoryFormat::Preserve is not a target layout; use "
            "Contiguous or ChannelsLast");
  apply_to_tensors([&](const Tensor& t) { return t.dim() == 4 ? t.contiguous(fmt) : t; }, false);
}

// ---- state ----
void Module::collect_state(const std::string& prefix, StateDict& out) const {
  for (const auto& [n, t] : params_)
    if (t.defined()) out.insert(prefix + n, t.detach());
  for (const auto& [n, t] : buffers_)
    if (t.defined() && is_persistent_buffer(n)) out.insert(prefix + n, t.detach());
  for (const auto& [n, c] : children_) c->collect_state(prefix + n + ".", out);
}

StateDict Module::state_dict() const {
  StateDict out("key");
  collect_state("", out);
  return out;
}

namespace {
bool same_view(const Tensor& a, const Tensor& b) {
  return a.impl()->storage == b.impl()->storage && a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides();
}
}  // namespace

LoadStateDictResult Module::load_state_dict(const StateDict& dict, bool strict) {
  StateDict own = state_dict();
  LoadStateDictResult result;
  std::vector<std::string> mismatches;
  for (const auto& [k, t] : own) {
    const Tensor* src = dict.find(k);
    if (!src) {
      result.missing_keys.push_back(k);
      continue;
    }
    if (!src->defined()) {
      mismatches.push_back("  " + k + ": the checkpoint's tensor is undefined, module has " + shape_str(t.sizes()));
    } else if (src->sizes() != t.sizes()) {
      mismatches.push_back("  size mismatch for " + k + ": copying a param with shape " + shape_str(src->sizes()) +
                           " from checkpoint, the shape in current model is " + shape_str(t.sizes()));
    }
  }
  for (const auto& [k, t] : dict)
    if (!own.contains(k)) result.unexpected_keys.push_back(k);
  // A tied tensor (an output head sharing the embedding's weight) is filled through any of its names, so a
  // file that names it once is complete, as safetensors' save_model writes one (PyTorch's state_dict lists both).
  std::erase_if(result.missing_keys, [&](const std::string& k) {
    const Tensor& t = *own.find(k);
    for (const auto& [k2, t2] : own)
      if (k2 != k && dict.find(k2) && same_view(t, t2)) return true;
    return false;
  });

  const bool key_errors = strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty());
  if (key_errors || !mismatches.empty()) {
    std::ostringstream os;
    os << "load_state_dict: error(s) in loading state_dict for " << name() << ":";
    if (strict && !result.missing_keys.empty())
      os << "\n  missing key(s) (" << result.missing_keys.size() << "): " << join_keys(result.missing_keys);
    if (strict && !result.unexpected_keys.empty())
      os << "\n  unexpected key(s) (" << result.unexpected_keys.size() << "): " << join_keys(result.unexpected_keys);
    for (const auto& m : mismatches) os << "\n" << m;
    if (key_errors) os << "\n  (pass strict=false to load only the matching keys)";
    throw Error(os.str());
  }

  NoGradGuard ng;
  for (auto& [k, t] : own) {
    const Tensor* src = dict.find(k);
    if (!src) continue;
    Tensor dst = t;  // detached alias of the module's tensor: writes land in the module
    dst.copy_(src->device() == dst.device() ? *src : src->to(dst.device()));
  }
  return result;
}

LoadStateDictResult Module::load_state_dict(const std::map<std::string, Tensor>& dict, bool strict) {
  StateDict d("key");
  for (const auto& [k, v] : dict) d.insert(k, v);
  return load_state_dict(d, strict);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  for (auto& p : parameters()) {
    Tensor& g = p.mutable_grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      g = Tensor();
    } else {
      if (g.grad_fn()) g = g.detach();
      g.zero_();
    }
  }
}

// ---- hooks ----
int64_t Module::add_pre_hook(ForwardPreHook h) {
  const int64_t id = next_hook_id.fetch_add(1);
  pre_hooks_.emplace_back(id, std::move(h));
  return id;
}
int64_t Module::add_hook(ForwardHook h) {
  const int64_t id = next_hook_id.fetch_add(1);
  hooks_.emplace_back(id, std::move(h));
  return id;
}
bool Module::remove_hook(int64_t id) {
  auto pre = std::remove_if(pre_hooks_.begin(), pre_hooks_.end(), [&](const auto& p) { return p.first == id; });
  auto post = std::remove_if(hooks_.begin(), hooks_.end(), [&](const auto& p) { return p.first == id; });
  const bool found = pre != pre_hooks_.end() || post != hooks_.end();
  pre_hooks_.erase(pre, pre_hooks_.end());
  hooks_.erase(post, hooks_.end());
  return found;
}
void Module::run_forward_pre_hooks(Tensor& input) {
  // Copy first: a hook may register or remove hooks.
  auto hooks = pre_hooks_;
  for (auto& [id, h] : hooks) h(*this, input);
}
void Module::run_forward_hooks(const Tensor& input, Tensor& output) {
  auto hooks = hooks_;
  for (auto& [id, h] : hooks) h(*this, input, output);
}

// ---- printing ----
namespace {
void print_tree(std::ostream& os, const Module& m, int indent) {
  m.pretty_print(os);
  auto kids = m.named_children();
  if (kids.is_empty()) return;
  os << "(\n";
  for (const auto& [n, c] : kids) {
    os << std::string(static_cast<size_t>(indent + 2), ' ') << "(" << n << "): ";
    print_tree(os, *c, indent + 2);
    os << "\n";
  }
  os << std::string(static_cast<size_t>(indent), ' ') << ")";
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Module& m) {
  print_tree(os, m, 0);
  return os;
}

}  // namespace mpx::nn
