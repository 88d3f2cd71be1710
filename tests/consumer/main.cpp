// Out-of-tree consumer: builds against the installed package and runs a tiny training step.
#include <mpx/mpx.h>

#include <cstdio>

// The consumer's headers of the same paths as mpx's own: each include finds its own file.
#include "core/tensor.h"
#include "data/data.h"

static_assert(CONSUMER_CORE_TENSOR == 1 && CONSUMER_DATA_DATA == 1, "the consumer's own headers");

int main() {
  consumer::Tensor mine;
  mpx::manual_seed(0);
  mpx::Tensor w = mpx::randn({3, 2}).set_requires_grad(true);
  mpx::Tensor x = mpx::ones({4, 3});
  mpx::Tensor loss = mpx::mean(mpx::matmul(x, w) * 2.0);
  loss.backward();
  if (!w.grad().defined() || w.grad().sizes() != mpx::IntList{3, 2} || mine.rank != 0) return 1;
  std::printf("consumer ok: loss %.4f\n", loss.item<double>());
  return 0;
}
