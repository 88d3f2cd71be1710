// Custom Function plumbing: saving tensors and wiring a CppNode into the graph.
#include "autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace mpx::autograd {

tensor_list Context::get_saved_variables() const {
  MPX_CHECK(!released_, "custom Function: trying to run backward through the graph a second time (saved tensors were "
            "freed); pass retain_graph=true to the first backward call");
  tensor_list r;
  auto node = node_.lock();
  for (const auto& s : saved_) r.push_back(s.unpack(node));
  return r;
}

namespace detail {
std::string demangled(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

tensor_list CppNodeBase::input_grads(tensor_list r) const {
  const size_t n_in = next_edges.size(), n_args = arg_is_tensor.size();
  if (r.size() != n_in && r.size() >= n_args) {
    tensor_list picked;
    for (size_t i = 0; i < r.size(); ++i) {
      if (i < n_args && arg_is_tensor[i]) {
        picked.push_back(std::move(r[i]));
        continue;
      }
      MPX_CHECK(!r[i].defined(), name_, "::backward returned a defined gradient at position ", i,
                ", which is not a tensor argument of forward; return an undefined Tensor() there");
    }
    r = std::move(picked);
  }
  MPX_CHECK(r.size() == n_in, name_, "::backward returned ", r.size(), " gradients but forward took ", n_in,
            " tensor inputs (", n_args, " arguments); return one (possibly undefined) Tensor per tensor input, or one "
            "per argument as LibTorch does");
  return r;
}

void wire(CppNodeBase& node, const tensor_list& inputs, tensor_list& outputs, const std::shared_ptr<Node>& self) {
  // Outputs aliasing an input get a fresh handle so the input keeps its own history.
  for (auto& o : outputs)
    for (const auto& i : inputs)
      if (o.defined() && i.defined() && o.is_same(i)) o = o.detach();
  if (!self) {
    for (const auto& t : node.ctx.to_save_) node.ctx.saved_.emplace_back(t, false);
    return;
  }
  node.ctx.node_ = self;
  for (const auto& t : inputs) node.next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& o = outputs[k];
    if (!o.defined()) { node.output_meta.push_back({}); continue; }
    node.output_meta.push_back({o.sizes(), o.dtype(), o.device()});
    bool nd = !is_floating(o.dtype());
    for (const auto& n : node.ctx.non_diff_) nd |= n.is_same(o);
    if (nd) continue;
    auto& m = meta(o);
    m.grad_fn = self;
    m.output_nr = static_cast<uint32_t>(k);
  }
  // Saved outputs are held weakly (no cycle through the node).
  for (const auto& t : node.ctx.to_save_) {
    bool is_out = false;
    for (const auto& o : outputs) is_out |= t.defined() && o.defined() && t.is_same(o);
    node.ctx.saved_.emplace_back(t, is_out);
  }
  node.ctx.to_save_.clear();
}
}  // namespace detail

}  // namespace mpx::autograd
