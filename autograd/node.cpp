// Nodes, saved tensors, leaf accumulation and graph recording.
#include "autograd/node.h"

#include "ops/elementwise.h"

namespace mpx {
namespace {
thread_local bool g_grad_enabled = true;
std::atomic<uint64_t> g_next_sequence{0};
}  // namespace
bool GradMode::is_enabled() { return g_grad_enabled; }
void GradMode::set_enabled(bool enabled) { g_grad_enabled = enabled; }
}  // namespace mpx

namespace mpx::autograd {

Node::Node() : sequence_nr(g_next_sequence.fetch_add(1)) {}

AutogradMeta& meta(const Tensor& t) {
  MPX_CHECK(t.defined(), "autograd: tensor is undefined");
  auto& m = t.impl()->autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}
AutogradMeta* meta_if(const Tensor& t) { return t.defined() ? t.impl()->autograd.get() : nullptr; }

void check_view_current(const Tensor& t) {
  const TensorImpl* i = t.impl();
  if (i->view != TensorImpl::View::view || i->view_rebases == i->storage->rebases.load(std::memory_order_relaxed)) return;
  MPX_ERROR("autograd: a view (", dtype_name(t.dtype()), shape_str(t.sizes()), ") is used after an in-place op that "
            "autograd recorded on the tensor it views, so its gradient history no longer matches its values; take "
            "the view again after the in-place op, or apply the op out of place");
}

Edge gradient_edge(const Tensor& t) {
  check_view_current(t);
  AutogradMeta* m = meta_if(t);
  if (!m) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (!m->requires_grad) return {};
  auto acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m->grad_accumulator = acc;
  }
  return {acc, 0};
}

// ---- saved tensors ----
namespace {
Tensor alias_without_grad(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>(*t.impl());
  impl->autograd.reset();
  return Tensor(impl);
}
}  // namespace

SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  version_ = t.version();
  if (is_output) {
    data_ = alias_without_grad(t);
    if (auto* m = meta_if(t)) {
      grad_fn_ = m->grad_fn;
      output_nr_ = m->output_nr;
    }
  } else {
    data_ = t;
  }
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& saved_for) const {
  const std::string who = saved_for ? saved_for->name() : std::string("backward");
  MPX_CHECK(!released_, who, ": trying to run backward through the graph a second time (its saved tensors "
            "were freed after the first backward); pass retain_graph=true to the first backward call");
  if (!data_.defined()) return {};
  MPX_CHECK(data_.version() == version_, who,
            ": a tensor saved for the backward pass (shape ", shape_str(data_.sizes()), ", dtype ",
            dtype_name(data_.dtype()), ") was modified by an in-place operation after it was saved (version ",
            version_, ", now ", data_.version(), "); use the out-of-place form of that operation or clone() first");
  if (!is_output_) return data_;
  auto fn = grad_fn_.lock();
  if (!fn || !GradMode::is_enabled()) return data_;
  // create_graph: re-attach the output to its node so the backward formula is differentiable.
  Tensor out = alias_without_grad(data_);
  auto& m = meta(out);
  m.grad_fn = fn;
  m.output_nr = output_nr_;
  return out;
}

// ---- FunctionNode ----
int FunctionNode::save(const Tensor& t, bool is_output) {
  saved_.emplace_back(t, is_output);
  return static_cast<int>(saved_.size()) - 1;
}
Tensor FunctionNode::saved(int i) { return saved_.at(i).unpack(shared_from_this()); }
void FunctionNode::release_variables() {
  for (auto& s : saved_) s.reset();
  released_ = true;
}
tensor_list FunctionNode::apply(tensor_list&& grads) { return fn_(*this, grads); }

namespace {
template <typename List>
bool any_requires_grad_in(const List& inputs) {
  if (!GradMode::is_enabled()) return false;
  bool any = false;
  for (const auto& t : inputs) {
    if (!t.defined()) continue;
    check_view_current(t);
    any = any || t.requires_grad();
  }
  return any;
}
}  // namespace
bool any_requires_grad(const tensor_list& inputs) { return any_requires_grad_in(inputs); }
bool any_requires_grad(std::initializer_list<Tensor> inputs) { return any_requires_grad_in(inputs); }

std::shared_ptr<FunctionNode> record(const char* name, const tensor_list& inputs, const tensor_list& outputs,
                                     FunctionNode::BackwardFn backward) {
  if (!any_requires_grad(inputs)) return nullptr;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->next_edges.reserve(inputs.size());
  for (const auto& t : inputs) node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  node->output_meta.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    if (!o.defined()) { node->output_meta.push_back({}); continue; }
    node->output_meta.push_back({o.sizes(), o.dtype(), o.device()});
    if (!is_floating(o.dtype())) continue;  // integer outputs (indices) carry no gradient
    auto& m = meta(o);
    m.grad_fn = node;
    m.output_nr = static_cast<uint32_t>(i);
  }
  return node;
}

// ---- leaves ----
tensor_list AccumulateGrad::apply(tensor_list&& grads) {
  Tensor g = std::move(grads.at(0));
  if (!g.defined()) return {};
  Tensor var(variable_);
  auto& m = meta(var);
  if (g.dtype() != var.dtype()) g = g.to(var.dtype());
  if (!m.grad.defined()) {
    // Own the buffer unless the graph is being recorded (then keep it differentiable).
    // Steal the buffer only when nothing else can see it (a gradient routed to two leaves
    // by the same node must not alias, or accumulating into one would change the other).
    // Dense channels-last gradients (a channels-last convolution's filter gradient) are kept as
    // they are too: cloning them gave the same layout for one more pass per filter per step.
    const bool sole_owner = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1;
    const bool dense = g.is_contiguous() || g.is_contiguous(MemoryFormat::ChannelsLast);
    m.grad = GradMode::is_enabled() ? g : (dense && sole_owner ? g.detach() : g.clone());
  } else if (GradMode::is_enabled()) {
    m.grad = add(m.grad, g);
  } else {
    m.grad.add_(g);
  }
  // Index loop over copies: a hook may register or remove hooks.
  for (size_t i = 0; i < m.post_accumulate_hooks.size(); ++i) {
    auto hook = m.post_accumulate_hooks[i].second;
    hook(var);
  }
  return {};
}

}  // namespace mpx::autograd
