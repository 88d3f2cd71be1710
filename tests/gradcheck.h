// Finite-difference gradient checks in f64 (first and second derivatives) shared by the tests.
#pragma once
#include <functional>
#include <string>

#include "autograd/engine.h"
#include "core/random.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"

namespace mpx::testing {

using Fn = std::function<Tensor(const tensor_list&)>;

/// Reduces a function's output to a scalar with fixed random weights, so every output
/// element's gradient is exercised.
inline Tensor weighted_sum(const Tensor& y, uint64_t seed = 1234) {
  uint64_t s = random::default_generator().current_seed(), o = random::default_generator().offset();
  manual_seed(seed);
  Tensor w = randn(y.sizes(), TensorOptions(y.dtype()));
  random::default_generator().set_state(s, o);
  return sum(y * w);
}

/// Compares autograd gradients of sum(w * fn(inputs)) with central differences.
/// Inputs must be f64 leaves with requires_grad set. Returns an empty string on success,
/// otherwise a description of the first mismatch.
inline std::string gradcheck(const Fn& fn, const tensor_list& inputs, double eps = 1e-6, double atol = 1e-5,
                             double rtol = 1e-4) {
  Tensor out = weighted_sum(fn(inputs));
  tensor_list diff;
  for (const auto& t : inputs)
    if (t.requires_grad()) diff.push_back(t);
  tensor_list grads = autograd::grad({out}, diff, {}, std::nullopt, false, true);
  size_t gi = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    Tensor g = grads[gi++];
    Tensor gc = g.defined() ? g.contiguous() : zeros_like(x);
    Tensor xd = x.detach();
    double* p = static_cast<double*>(xd.raw_data());
    for (int64_t i = 0; i < x.numel(); ++i) {
      // Walk the storage of a possibly strided input through its linear index.
      int64_t off = 0, rem = i;
      for (int64_t d = x.dim() - 1; d >= 0; --d) {
        off += (rem % x.size(d)) * x.stride(d);
        rem /= x.size(d);
      }
      const double orig = p[off];
      double fp, fm;
      {
        NoGradGuard ng;
        p[off] = orig + eps;
        fp = weighted_sum(fn(inputs)).item<double>();
        p[off] = orig - eps;
        fm = weighted_sum(fn(inputs)).item<double>();
        p[off] = orig;
      }
      const double num = (fp - fm) / (2 * eps);
      const double ana = gc.data_ptr<double>()[i];
      if (std::abs(num - ana) > atol + rtol * std::abs(num))
        return "input " + std::to_string(k) + " element " + std::to_string(i) + ": analytic " + std::to_string(ana) +
               " vs numeric " + std::to_string(num);
    }
  }
  return "";
}

/// Second derivatives: checks the gradient of <grad(fn), v> (built with create_graph)
/// against finite differences, i.e. gradcheck of the first-derivative function.
inline std::string gradgradcheck(const Fn& fn, const tensor_list& inputs, double eps = 1e-6, double atol = 1e-4,
                                 double rtol = 1e-3) {
  Fn first = [&fn](const tensor_list& in) {
    // gradcheck evaluates under NoGradGuard; the first derivative still needs its graph.
    AutoGradMode grad_on(true);
    tensor_list diff;
    for (const auto& t : in)
      if (t.requires_grad()) diff.push_back(t);
    Tensor out = weighted_sum(fn(in));
    tensor_list g = autograd::grad({out}, diff, {}, true, true, true);
    Tensor acc;
    for (auto& t : g) {
      if (!t.defined()) continue;
      Tensor s = weighted_sum(t, 99);
      acc = acc.defined() ? acc + s : s;
    }
    return acc;
  };
  return gradcheck(first, inputs, eps, atol, rtol);
}

/// A random f64 leaf that requires grad.
inline Tensor leaf(const IntList& shape, double scale = 1.0, double shift = 0.0) {
  Tensor t = randn(shape, TensorOptions(kFloat64)) * scale + shift;
  return t.detach().set_requires_grad(true);
}

}  // namespace mpx::testing
