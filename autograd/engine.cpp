// The backward engine: dependency counting over the graph, then nodes in reverse creation order.
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "ops/elementwise.h"

namespace mpx::autograd {
namespace {

struct ReadyCmp {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

Tensor zeros_for(const OutputMeta& m) { return zeros(m.sizes, TensorOptions().dtype(m.dtype).device(m.device)); }

void accumulate(Tensor& slot, Tensor g) {
  if (!g.defined()) return;
  slot = slot.defined() ? add(slot, g) : std::move(g);
}

}  // namespace

tensor_list run_backward(const tensor_list& roots, const tensor_list& grad_roots, bool keep_graph,
                         bool create_graph, const tensor_list& inputs, bool allow_unused) {
  MPX_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward: got ", grad_roots.size(),
            " gradients for ", roots.size(), " tensors; pass one gradient per tensor");
  AutoGradMode mode(create_graph);

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
    for (size_t k = 0; k < wanted.size(); ++k)
      if (wanted[k].fn.get() == n && wanted[k].input_nr < in.size()) captured[k] = in[wanted[k].input_nr];

    tensor_list out;
    const bool is_leaf = dynamic_cast<AccumulateGrad*>(n) != nullptr;
    if (is_leaf) {
      if (accumulate_leaves) n->apply(std::move(in));
    } else {
      for (size_t k = 0; k < in.size() && k < n->output_meta.size(); ++k)
        if (!in[k].defined() && is_floating(n->output_meta[k].dtype)) in[k] = zeros_for(n->output_meta[k]);
      for (auto& [idx, w] : n->retained_grads)
        if (auto impl = w.lock(); impl && idx < in.size()) meta(Tensor(impl)).grad = in[idx].detach();
      out = n->apply(std::move(in));
      if (!keep_graph) n->release_variables();
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
