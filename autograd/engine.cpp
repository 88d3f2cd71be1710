// The backward engine: dependency counting over the graph, then nodes in reverse creation order.
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"

namespace mpx::autograd {
namespace {

struct ReadyCmp {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

Tensor zeros_for(const OutputMeta& m) { return zeros(m.sizes, TensorOptions().dtype(m.dtype).device(m.device)); }

// A dense gradient buffer that no other handle or view can see.
bool sole_dense(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1 &&
         (t.is_contiguous() || t.is_contiguous(MemoryFormat::ChannelsLast));
}

// Sums a gradient into a slot. Without create_graph the sum is taken in place when either side is
// a dense buffer nothing else sees (as PyTorch's InputBuffer steals one): no new buffer, and the
// write goes to memory that was just written. Addition commutes, so the bits are add()'s.
void accumulate(Tensor& slot, Tensor g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = std::move(g);
    return;
  }
  if (!GradMode::is_enabled() && slot.dtype() == g.dtype() && slot.sizes() == g.sizes() &&
      slot.device() == g.device()) {
    if (sole_dense(slot)) {
      slot.add_(g);
      return;
    }
    if (sole_dense(g)) {
      g.add_(slot);
      slot = std::move(g);
      return;
    }
  }
  slot = add(slot, g);
}

Tensor run_grad_hook(const std::function<Tensor(const Tensor&)>& hook, const Tensor& g) {
  Tensor r = hook(g);
  if (!r.defined()) return g;
  MPX_CHECK(r.sizes() == g.sizes(), "register_hook: a hook returned a gradient of shape ", shape_str(r.sizes()),
            " for a gradient of shape ", shape_str(g.sizes()), "; return a tensor of the same shape, or nothing");
  return r;
}

// Callbacks queued during a backward run once the outermost backward of this thread is done.
thread_local int t_backward_depth = 0;
thread_local std::vector<std::function<void()>> t_final_callbacks;
thread_local bool t_accumulates = false;  // whether the innermost running pass accumulates into .grad

struct DepthGuard {
  explicit DepthGuard(bool accumulates) : outer_accumulates_(t_accumulates) {
    ++t_backward_depth;
    t_accumulates = accumulates;
  }
  ~DepthGuard() {
    t_accumulates = outer_accumulates_;
    if (--t_backward_depth == 0) t_final_callbacks.clear();  // after an exception: drop, never run later
  }
  bool outer_accumulates_;
};

}  // namespace

void queue_callback(std::function<void()> fn) {
  MPX_CHECK(t_backward_depth > 0, "queue_callback: called outside a backward pass; callbacks can only be "
            "queued from gradient hooks or backward functions while backward runs");
  t_final_callbacks.push_back(std::move(fn));
}

bool in_backward() { return t_backward_depth > 0; }
bool backward_accumulates() { return t_backward_depth > 0 && t_accumulates; }

tensor_list run_backward(const tensor_list& roots, const tensor_list& grad_roots, bool keep_graph,
                         bool create_graph, const tensor_list& inputs, bool allow_unused) {
  MPX_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward: got ", grad_roots.size(),
            " gradients for ", roots.size(), " tensors; pass one gradient per tensor");
  AutoGradMode mode(create_graph);
  DepthGuard depth(inputs.empty());

  // Seed: gradients flowing into the roots' edges.
  std::unordered_map<Node*, tensor_list> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> owners;
  std::vector<Node*> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    MPX_CHECK(r.defined(), "backward: tensor ", i, " is undefined");
    MPX_CHECK(r.requires_grad(), "backward: tensor ", i, " (shape ", shape_str(r.sizes()),
              ") does not require grad and has no grad_fn; call set_requires_grad(true) on the leaves you "
              "differentiate with respect to before computing it");
    Tensor g = grad_roots.empty() ? Tensor() : grad_roots[i];
    if (!g.defined()) {
      MPX_CHECK(r.numel() == 1, "backward: grad can be implicitly created only for scalar outputs, got shape ",
                shape_str(r.sizes()), "; pass a gradient tensor of that shape");
      g = ones_like(r);
    } else {
      MPX_CHECK(g.sizes() == r.sizes(), "backward: gradient shape ", shape_str(g.sizes()),
                " does not match tensor shape ", shape_str(r.sizes()));
    }
    Edge e = gradient_edge(r);
    Node* n = e.fn.get();
    owners[n] = e.fn;
    auto& buf = buffers[n];
    if (buf.size() <= e.input_nr) buf.resize(std::max<size_t>(e.input_nr + 1, n->output_meta.size()));
    accumulate(buf[e.input_nr], g);
    starts.push_back(n);
  }

  // Dependency counts: how many edges point at each node from the reachable graph.
  std::unordered_map<Node*, int> deps;
  {
    std::vector<Node*> stack;
    std::unordered_set<Node*> seen;
    for (Node* s : starts)
      if (seen.insert(s).second) stack.push_back(s);
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const auto& e : n->next_edges) {
        if (!e.valid()) continue;
        deps[e.fn.get()]++;
        if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
      }
    }
  }

  // Which (node, input_nr) pairs the caller of grad() wants captured.
  std::vector<Edge> wanted;
  for (const auto& t : inputs) {
    MPX_CHECK(t.defined() && t.requires_grad(), "grad: an input does not require grad; only tensors that "
              "require grad can be differentiated with respect to");
    wanted.push_back(gradient_edge(t));
  }
  tensor_list captured(inputs.size());
  const bool accumulate_leaves = inputs.empty();
  // grad(): a node none of whose paths reaches a wanted edge is not run (its gradients would go nowhere), so a
  // gradient taken at an interior tensor stops there, as PyTorch's engine does.
  std::unordered_map<Node*, bool> needed;
  if (!inputs.empty()) {
    std::unordered_set<Node*> wanted_fns;
    for (const Edge& e : wanted) wanted_fns.insert(e.fn.get());
    // Post-order over the reachable graph (iterative: graphs can be deep).
    std::vector<std::pair<Node*, size_t>> stack;
    for (Node* s : starts)
      if (!needed.count(s)) {
        needed[s] = false;
        stack.push_back({s, 0});
      }
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < n->next_edges.size()) {
        Node* child = n->next_edges[next++].fn.get();
        if (child && !needed.count(child)) {
          needed[child] = false;
          stack.push_back({child, 0});
        }
        continue;
      }
      bool reach = wanted_fns.count(n) != 0;
      for (const auto& e : n->next_edges) reach = reach || (e.valid() && needed[e.fn.get()]);
      needed[n] = reach;
      stack.pop_back();
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, ReadyCmp> ready;
  for (Node* s : starts)
    if (deps[s] == 0) { ready.push(s); deps[s] = -1; }

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::shared_ptr<Node> hold = n->shared_from_this();
    tensor_list in = std::move(buffers[n]);
    buffers.erase(n);
    in.resize(std::max(in.size(), n->output_meta.size()));
    const bool is_leaf = dynamic_cast<AccumulateGrad*>(n) != nullptr;
    // Tensor hooks see (and may replace) the gradient before anything else does with it.
    // Index loops over copies: a hook may register or remove hooks.
    for (size_t h = 0; h < n->pre_hooks.size(); ++h) {
      auto [id, nr, hook] = n->pre_hooks[h];
      if (nr < in.size() && in[nr].defined()) in[nr] = run_grad_hook(hook, in[nr]);
    }
    if (is_leaf && !in.empty() && in[0].defined())
      if (auto* m = meta_if(Tensor(static_cast<AccumulateGrad*>(n)->variable_)))
        for (size_t h = 0; h < m->grad_hooks.size(); ++h) {
          auto hook = m->grad_hooks[h].second;
          in[0] = run_grad_hook(hook, in[0]);
        }
    for (size_t k = 0; k < wanted.size(); ++k)
      if (wanted[k].fn.get() == n && wanted[k].input_nr < in.size()) captured[k] = in[wanted[k].input_nr];

    tensor_list out;
    if (is_leaf) {
      if (accumulate_leaves) n->apply(std::move(in));
    } else {
      for (size_t k = 0; k < in.size() && k < n->output_meta.size(); ++k)
        if (!in[k].defined() && is_floating(n->output_meta[k].dtype)) in[k] = zeros_for(n->output_meta[k]);
      for (auto& [idx, w] : n->retained_grads)
        if (auto impl = w.lock(); impl && idx < in.size()) meta(Tensor(impl)).grad = in[idx].detach();
      // Captured above where wanted; a node with no wanted edge below it produces nothing.
      if (inputs.empty() || needed[n]) {
        out = n->apply(std::move(in));
        if (!keep_graph) n->release_variables();
      }
      MPX_CHECK(out.size() <= n->next_edges.size(), n->name(), ": backward returned ", out.size(),
                " gradients for ", n->next_edges.size(), " inputs");
    }
    for (size_t k = 0; k < n->next_edges.size(); ++k) {
      const Edge& e = n->next_edges[k];
      if (!e.valid()) continue;
      Node* next = e.fn.get();
      if (k < out.size() && out[k].defined()) {
        auto& buf = buffers[next];
        if (buf.size() <= e.input_nr) buf.resize(e.input_nr + 1);
        accumulate(buf[e.input_nr], std::move(out[k]));
      }
      if (--deps[next] == 0) ready.push(next);
    }
  }

  for (size_t k = 0; k < inputs.size(); ++k)
    MPX_CHECK(captured[k].defined() || allow_unused, "grad: input ", k,
              " was not used to compute the outputs; pass allow_unused=true if that is expected");
  if (t_backward_depth == 1) {
    // A callback may queue another (index loop: the vector can grow while it runs).
    for (size_t i = 0; i < t_final_callbacks.size(); ++i) {
      auto cb = std::move(t_final_callbacks[i]);
      cb();
    }
    t_final_callbacks.clear();
  }
  return captured;
}

tensor_list grad(const tensor_list& outputs, const tensor_list& inputs, const tensor_list& grad_outputs,
                 std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  MPX_CHECK(!inputs.empty(), "grad: no inputs given");
  return run_backward(outputs, grad_outputs, retain_graph.value_or(create_graph), create_graph, inputs,
                      allow_unused);
}

void backward(const tensor_list& tensors, const tensor_list& grad_tensors, bool retain_graph, bool create_graph) {
  run_backward(tensors, grad_tensors, retain_graph || create_graph, create_graph);
}

}  // namespace mpx::autograd
