// Activation checkpointing: the forward without a graph, and a node that recomputes it and runs an inner backward.
#include "nn/checkpoint.h"

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/random.h"
#include "ops/op_utils.h"

namespace mpx::nn::utils {
namespace {
using autograd::FunctionNode;

// While alive, the default generator is at `state`; the state it had comes back afterwards.
class RngAt {
 public:
  RngAt(bool active, std::pair<uint64_t, uint64_t> state) : active_(active) {
    random::Generator& g = random::default_generator();
    saved_ = {g.current_seed(), g.offset()};
    if (active_) g.set_state(state.first, state.second);
  }
  ~RngAt() {
    if (active_) random::default_generator().set_state(saved_.first, saved_.second);
  }
  RngAt(const RngAt&) = delete;
  RngAt& operator=(const RngAt&) = delete;

 private:
  bool active_;
  std::pair<uint64_t, uint64_t> saved_;
};
}  // namespace

tensor_list checkpoint(const std::function<tensor_list(const tensor_list&)>& fn, const tensor_list& inputs,
                       bool preserve_rng_state) {
  MPX_CHECK(fn, "checkpoint: the function is empty");
  if (!GradMode::is_enabled()) return fn(inputs);
  MPX_CHECK(autograd::any_requires_grad(inputs), "checkpoint: no input requires grad, so the backward would never ",
            "reach the region and its parameters would get no gradient; pass the activations flowing in (they ",
            "require grad in training) or call the function directly");
  const random::Generator& gen = random::default_generator();
  const std::pair<uint64_t, uint64_t> rng{gen.current_seed(), gen.offset()};
  const AutocastState ac = autocast_state();
  tensor_list outs;
  {
    NoGradGuard ng;
    outs = fn(inputs);
  }
  // Fresh handles: an output that is an input (or a view the region returned) must not take the node as its grad_fn.
  for (Tensor& o : outs)
    if (o.defined()) o = o.detach();
  const size_t n_in = inputs.size();
  auto backward = [fn, rng, ac, n_in, preserve_rng_state](FunctionNode& self, const tensor_list& g) -> tensor_list {
    // The recomputed region's parameters take their gradients by accumulation, so the outer pass must be one
    // that accumulates, and the inputs' gradients come from new leaves, so they carry no graph back.
    MPX_CHECK(autograd::backward_accumulates(), "checkpoint: autograd::grad through a checkpointed region is not ",
              "supported (its parameters' gradients go to .grad); call backward() or run the region without checkpoint");
    MPX_CHECK(!GradMode::is_enabled(), "checkpoint: a second derivative (create_graph) through a checkpointed region ",
              "is not supported; run the region without checkpoint");
    tensor_list again;  // the inputs as new leaves, requiring grad where the originals did
    for (size_t i = 0; i < n_in; ++i) {
      const Tensor x = self.saved(static_cast<int>(i));
      if (!x.defined()) {
        again.emplace_back();
        continue;
      }
      Tensor leaf = x.detach();
      if (self.next_edges[i].valid()) leaf.set_requires_grad(true);
      again.push_back(leaf);
    }
    tensor_list re;
    {
      AutoGradMode on(true);
      RngAt at(preserve_rng_state, rng);
      amp::AutocastGuard autocast(ac.dtype, ac.enabled);
      re = fn(again);
    }
    MPX_CHECK(re.size() == g.size(), "checkpoint: the recomputation returned ", re.size(), " tensors, the forward ",
              g.size(), "; the function must compute the same thing both times");
    tensor_list roots, seeds;
    for (size_t i = 0; i < re.size(); ++i) {
      if (!g[i].defined() || !re[i].defined() || !re[i].requires_grad()) continue;
      MPX_CHECK(re[i].sizes() == g[i].sizes(), "checkpoint: output ", i, " was ", shape_str(g[i].sizes()),
                " in the forward and ", shape_str(re[i].sizes()), " when recomputed");
      roots.push_back(re[i]);
      seeds.push_back(g[i]);
    }
    if (!roots.empty()) autograd::run_backward(roots, seeds, false, false);
    tensor_list grads;
    for (size_t i = 0; i < n_in; ++i) grads.push_back(again[i].defined() && again[i].requires_grad() ? again[i].grad() : Tensor());
    return grads;
  };
  if (auto node = autograd::record("CheckpointBackward", inputs, outs, backward))
    for (const Tensor& x : inputs) node->save(x);
  return outs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, bool preserve_rng_state) {
  MPX_CHECK(fn, "checkpoint: the function is empty");
  // By value: the node keeps the function until its backward runs.
  return checkpoint([fn](const tensor_list& in) { return tensor_list{fn(in[0])}; }, {input}, preserve_rng_state)[0];
}

}  // namespace mpx::nn::utils
