// Gradient hooks on tensors: Tensor::register_hook and register_post_accumulate_grad_hook.
#include <algorithm>
#include <atomic>

#include "autograd/node.h"

namespace mpx {
namespace {
std::atomic<uint64_t> g_next_hook_id{1};

template <typename List>
bool erase_id(List& list, uint64_t id) {
  auto it = std::find_if(list.begin(), list.end(), [id](const auto& e) { return std::get<0>(e) == id; });
  if (it == list.end()) return false;
  list.erase(it);
  return true;
}
}  // namespace

uint64_t Tensor::register_grad_hook(std::function<Tensor(const Tensor&)> hook) const {
  MPX_CHECK(defined(), "register_hook: the tensor is undefined");
  MPX_CHECK(requires_grad(), "register_hook: the tensor (", dtype_name(dtype()), shape_str(sizes()),
            ") does not require grad, so no gradient will ever reach the hook; call set_requires_grad(true) "
            "on it (a leaf) or register the hook on a tensor computed from one");
  MPX_CHECK(hook != nullptr, "register_hook: the hook is empty");
  const uint64_t id = g_next_hook_id.fetch_add(1);
  auto& m = autograd::meta(*this);
  if (m.grad_fn)  // a non-leaf: the hook belongs to the node that produces this gradient
    m.grad_fn->pre_hooks.emplace_back(id, m.output_nr, std::move(hook));
  else
    m.grad_hooks.emplace_back(id, std::move(hook));
  return id;
}

uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  MPX_CHECK(defined(), "register_post_accumulate_grad_hook: the tensor is undefined");
  MPX_CHECK(is_leaf() && requires_grad(), "register_post_accumulate_grad_hook: only leaves that require grad "
            "accumulate a gradient, and this tensor (", dtype_name(dtype()), shape_str(sizes()), ") is ",
            is_leaf() ? "a leaf that does not require grad" : "not a leaf",
            "; use register_hook to see a non-leaf's gradient");
  MPX_CHECK(hook != nullptr, "register_post_accumulate_grad_hook: the hook is empty");
  const uint64_t id = g_next_hook_id.fetch_add(1);
  autograd::meta(*this).post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

bool Tensor::remove_hook(uint64_t id) const {
  auto* m = autograd::meta_if(*this);
  if (!m) return false;
  if (erase_id(m->grad_hooks, id) || erase_id(m->post_accumulate_hooks, id)) return true;
  return m->grad_fn && erase_id(m->grad_fn->pre_hooks, id);
}

}  // namespace mpx
