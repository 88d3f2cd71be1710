// The consumer's own core/tensor.h: mpx's installed headers must never pick it up instead of theirs.
#pragma once
#define CONSUMER_CORE_TENSOR 1
namespace consumer {
struct Tensor {  // a name mpx also has: the two live side by side
  int rank = 0;
};
}  // namespace consumer
