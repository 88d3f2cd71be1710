// The backward engine and autograd::grad.
#pragma once
#include "autograd/node.h"

namespace mpx::autograd {

/// Runs backward from `roots` seeded with `grad_roots` (ones for scalar roots when empty).
/// With `inputs` empty, gradients accumulate into leaves' .grad; otherwise the gradients
/// reaching `inputs` are returned and nothing accumulates.
tensor_list run_backward(const tensor_list& roots, const tensor_list& grad_roots, bool keep_graph,
                         bool create_graph, const tensor_list& inputs = {}, bool allow_unused = false);

/// Gradients of `outputs` w.r.t. `inputs` (LibTorch's torch::autograd::grad).
/// retain_graph defaults to create_graph.
tensor_list grad(const tensor_list& outputs, const tensor_list& inputs, const tensor_list& grad_outputs = {},
                 std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                 bool allow_unused = false);

/// Queues `fn` to run when the current (outermost) backward pass has processed every node,
/// before backward() returns (PyTorch's Engine.queue_callback). Only valid while backward runs,
/// e.g. from a gradient hook; data-parallel training uses it to wait for its reductions.
void queue_callback(std::function<void()> fn);
/// True while this thread runs a backward pass.
bool in_backward();
/// True while this thread runs a backward pass that accumulates into leaves' .grad (backward(), not grad()):
/// what a node that runs its own inner backward (nn::utils::checkpoint) needs to know.
bool backward_accumulates();

/// backward() for several roots at once.
void backward(const tensor_list& tensors, const tensor_list& grad_tensors = {}, bool retain_graph = false,
              bool create_graph = false);

}  // namespace mpx::autograd
