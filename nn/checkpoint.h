// Activation checkpointing (PyTorch's torch.utils.checkpoint, reentrant form): a region's activations are dropped
// after the forward and recomputed in the backward.
#pragma once
#include <functional>

#include "core/tensor.h"

namespace mpx::nn::utils {

/// Runs fn(inputs) without recording its graph, so none of its intermediate activations stay alive, and records
/// one node whose backward runs fn again (with grad, under the autocast state and, with preserve_rng_state, the
/// random state the forward saw, so dropout draws the same mask) and backpropagates through that recomputation:
/// parameters used inside fn get their gradients accumulated into .grad, as in a plain backward. Memory: a
/// transformer block's saved tensors become its input alone, for one extra forward per block.
///
/// As PyTorch's reentrant checkpoint: at least one input must require grad (else nothing would reach fn's
/// parameters, which is an error here), the outer pass must be backward() (autograd::grad would need fn's
/// parameters' gradients returned, not accumulated: an error names it), there are no second derivatives through
/// the region (also an error), and fn must compute the same thing both times. The forward runs without a graph,
/// so ops that fuse more when not recorded (linear_gelu's epilogue) may round differently from the recomputation.
/// With grad mode off it simply calls fn.
tensor_list checkpoint(const std::function<tensor_list(const tensor_list&)>& fn, const tensor_list& inputs,
                       bool preserve_rng_state = true);
/// One tensor in, one out.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, bool preserve_rng_state = true);

}  // namespace mpx::nn::utils
