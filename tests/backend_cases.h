// The backend sweep's cases (shared by tests/test_backend_ops.cpp and the emulated CUDA kernels' test): inputs, a
// run of every formula kernel and one public-op case per kernel op, tolerances against the f64 or CPU kernel.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/cuda.h"
#include "core/random.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/formulas.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pooling.h"
#include "ops/reduction.h"
#include "ops/rnn.h"
#include "ops/shape.h"
#include "test_util.h"

namespace mpx::backend_sweep {
using formulas::Formula;

constexpr DType kDTypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8, kBool};

inline bool promises(uint32_t mask, DType dt) { return (mask & (1u << static_cast<int>(dt))) != 0; }

inline bool cudnn_built() { return cuda::cudnn_version().rfind("cuDNN", 0) == 0; }

/// The CUDA dtypes a row promises in this build (cuDNN rows promise nothing without cuDNN).
inline uint32_t cuda_mask(OpId op) {
  const uint32_t m = kCudaDTypes[static_cast<int>(op)];
  if ((m & dtypes::cudnn) == dtypes::cudnn && !cudnn_built()) return 0;
  return m & 0xFFu;
}

// Tolerance of a kernel in dt against the f64 kernel on the same (already rounded) inputs, per
// element |got - ref| <= tol * (1 + |ref|). Low-precision kernels compute in f32 and round once at
// the store, so the error is half an ulp of the output (2^-11 for f16, 2^-8 for bf16) plus the f32
// computation; twice (f16) and four times (bf16) that leaves room for results that pass through
// an intermediate store (a backward that rounds its upstream gradient). f32 is bounded by f32
// libm (a few ulp) and f32 accumulation over the short rows used here: 1e-5 is about 80 ulp, far
// below any wrong formula. Integer and bool kernels are exact.
inline double tolerance(DType dt) {
  switch (dt) {
    case kFloat32: return 1e-5;
    case kFloat16: return 2e-3;
    case kBFloat16: return 1.6e-2;
    // CUDA's libdevice and the C library round transcendental functions differently in the last
    // bit, and cuDNN and the CPU kernels sum in different orders.
    case kFloat64: return 1e-12;
    default: return 0.0;
  }
}

inline bool close_to(const Tensor& got, const Tensor& ref, double tol, std::string* why) {
  if (got.sizes() != ref.sizes()) {
    *why = "shape " + shape_str(got.sizes()) + " vs " + shape_str(ref.sizes());
    return false;
  }
  NoGradGuard ng;
  const Tensor g = got.cpu().to(kFloat64).contiguous(), r = ref.cpu().to(kFloat64).contiguous();
  const double* pg = g.data_ptr<double>();
  const double* pr = r.data_ptr<double>();
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (std::isnan(pg[i]) && std::isnan(pr[i])) continue;
    if (!(std::abs(pg[i] - pr[i]) <= tol * (1.0 + std::abs(pr[i])))) {
      *why = "element " + std::to_string(i) + ": " + std::to_string(pg[i]) + " vs " + std::to_string(pr[i]);
      return false;
    }
  }
  return true;
}

// ---- formula ops: sampled domain and parameters (ops/formulas.h) ----
template <typename F> constexpr double lo_of() {
  if constexpr (requires { F::kLo; }) return F::kLo;
  else return -3.0;
}
template <typename F> constexpr double hi_of() {
  if constexpr (requires { F::kHi; }) return F::kHi;
  else return 3.0;
}
template <typename F> constexpr double p0_of() {
  if constexpr (requires { F::kP0; }) return F::kP0;
  else return 0.0;
}
template <typename F> constexpr double p1_of() {
  if constexpr (requires { F::kP1; }) return F::kP1;
  else return 0.0;
}

/// Inputs of dt on dev: f64 values in [lo, hi) (integers: small ones), rounded to `round` first,
/// so a kernel in `round` and the f64 kernel see the same values.
inline Tensor sample_input(const IntList& shape, double lo, double hi, DType round, DType dt, Device dev,
                           uint64_t seed) {
  NoGradGuard ng;
  manual_seed(seed);
  Tensor x;
  if (round == kBool) x = gt(rand(shape, TensorOptions(kFloat64)), 0.5).to(kFloat64);
  else if (round == kUInt8) x = randint(0, 8, shape, TensorOptions(kInt64)).to(kFloat64);
  else if (!is_floating(round)) x = randint(-6, 7, shape, TensorOptions(kInt64)).to(kFloat64);
  else x = rand(shape, TensorOptions(kFloat64)) * (hi - lo) + lo;
  return x.to(round).to(dt).to(dev);
}

// Runs the op's UnaryFn / BinaryFn kernel on (dev, dt) for inputs rounded to `round`.
template <OpId Op>
tensor_list run_formula_kernel(DType round, DType dt, Device dev) {
  using F = Formula<Op>;
  constexpr double lo = lo_of<F>(), hi = hi_of<F>();
  // A transposed view as well as a contiguous tensor: the strided loops as well as the flat ones.
  Tensor a = sample_input({7, 9}, lo, hi, round, dt, dev, 11);
  tensor_list outs;
  if constexpr (F::kArity == 1) {
    for (const Tensor& x : {a, a.t()}) {
      Tensor out = empty(x.sizes(), TensorOptions(dt).device(dev));
      dispatch::kernel<kernels::UnaryFn>(Op, dev, dt)(out, x, p0_of<F>(), p1_of<F>());
      outs.push_back(out);
    }
  } else {
    Tensor b = sample_input({7, 9}, lo, hi, round, dt, dev, 12);
    Tensor row = sample_input({9}, lo, hi, round, dt, dev, 13);
    if constexpr (requires { F::kDivides; }) {  // divisors of 0 (small integers) made 1
      NoGradGuard ng;
      b = b + eq(b, 0.0).to(dt);
      row = row + eq(row, 0.0).to(dt);
    }
    row = row.expand({7, 9});  // broadcast (stride 0)
    for (const auto& [x, y] : {std::pair{a, b}, std::pair{a, row}}) {
      Tensor out = empty(x.sizes(), TensorOptions(F::kCompare ? kBool : dt).device(dev));
      // alpha (add, sub) is integral for integer tensors, as PyTorch requires.
      const double alpha = Op == OpId::threshold_backward ? 0.25 : Op == OpId::gelu_backward ? 1.0 : is_floating(round) ? 1.5 : 2.0;
      dispatch::kernel<kernels::BinaryFn>(Op, dev, dt)(out, x, y, alpha);
      outs.push_back(out);
    }
  }
  return outs;
}

using FormulaRun = tensor_list (*)(DType round, DType dt, Device dev);
inline std::map<std::string, FormulaRun> formula_runs() {
  std::map<std::string, FormulaRun> m;
#define MPX_ENTRY(op) m[#op] = &run_formula_kernel<OpId::op>;
  MPX_UNARY_OPS(MPX_ENTRY)
  MPX_PARAM_UNARY_OPS(MPX_ENTRY)
  MPX_BINARY_OPS(MPX_ENTRY)
#undef MPX_ENTRY
  return m;
}

// ---- other kernel ops: each case calls the public op (forward and, through autograd, the
// backward kernels) on inputs made by a Sample ----
struct Sample {
  DType round;  // the dtype under test: every input is rounded to it first
  DType dt;     // the dtype the op runs in (round, or f64 for the reference)
  Device dev;
  uint64_t seed = 100;

  TensorOptions opts() const { return TensorOptions(dt).device(dev); }
  Tensor randn(const IntList& shape) {
    NoGradGuard ng;
    manual_seed(seed++);
    return mpx::randn(shape, TensorOptions(kFloat64)).to(round).to(dt).to(dev);
  }
  Tensor positive(const IntList& shape) {
    NoGradGuard ng;
    return (abs(randn(shape)) + 0.5).to(round).to(dt);
  }
  /// A leaf requiring grad (for the backward kernels).
  Tensor leaf(const IntList& shape) { return randn(shape).detach().set_requires_grad(true); }
  /// Batch-norm parameters and statistics: f32 beside f16/bf16 activations, f64 beside f64.
  Tensor param(const IntList& shape, bool grad) {
    NoGradGuard ng;
    manual_seed(seed++);
    const DType keep = round == kFloat64 ? kFloat64 : kFloat32;
    Tensor p = mpx::randn(shape, TensorOptions(kFloat64)).to(keep).to(dt == kFloat64 ? kFloat64 : kFloat32).to(dev);
    return grad ? p.detach().set_requires_grad(true) : p;
  }
  Tensor target(int64_t n, int64_t classes) {
    NoGradGuard ng;
    manual_seed(seed++);
    return randint(0, classes, {n}, TensorOptions(kInt64)).to(dev);
  }
};

/// Outputs of y and the gradients of sum(y * w) (w random) with respect to xs.
inline tensor_list with_grads(Sample& s, const Tensor& y, const tensor_list& xs) {
  Tensor w = s.randn(y.sizes());
  tensor_list out = {y.detach()};
  for (const Tensor& g : autograd::grad({sum(y * w)}, xs)) out.push_back(g);
  return out;
}

using Case = std::function<tensor_list(Sample&)>;
/// One case per op with kernels of its own (the backward rows share their forward's case).
inline std::map<std::string, Case> kernel_cases() {
  std::map<std::string, Case> m;
  m["copy"] = [](Sample& s) { return tensor_list{s.randn({5, 7}).t().contiguous()}; };
  m["fill"] = [](Sample& s) { return tensor_list{full({9}, 1.25, s.opts())}; };
  m["rand_uniform"] = [](Sample& s) { manual_seed(5); return tensor_list{rand({64}, s.opts())}; };
  m["rand_normal"] = [](Sample& s) { manual_seed(5); return tensor_list{randn({64}, s.opts())}; };
  m["where"] = [](Sample& s) {
    Tensor c = gt(s.randn({4, 6}), 0.0);
    return tensor_list{where(c, s.randn({4, 6}), s.randn({6}))};
  };
  m["addcmul"] = [](Sample& s) { return tensor_list{addcmul(s.randn({4, 6}), s.randn({4, 6}), s.randn({6}), 0.5)}; };
  m["addcdiv"] = [](Sample& s) { return tensor_list{addcdiv(s.randn({4, 6}), s.randn({4, 6}), s.positive({6}), 0.5)}; };
  m["sum"] = [](Sample& s) { return tensor_list{sum(s.randn({5, 33}), {1})}; };
  m["var"] = [](Sample& s) { return tensor_list{var(s.randn({5, 33}), {1})}; };
  m["cumsum"] = [](Sample& s) {
    Tensor x = s.leaf({4, 6, 3});
    return with_grads(s, cumsum(x.transpose(0, 1), 1), {x});
  };
  m["cumprod"] = [](Sample& s) {
    Tensor x = s.leaf({4, 6, 3});
    return with_grads(s, cumprod(x.transpose(0, 1), 1), {x});
  };
  m["max_dim"] = [](Sample& s) { auto [v, i] = max(s.randn({5, 33}), 1); return tensor_list{v, i}; };
  m["min_dim"] = [](Sample& s) { auto [v, i] = min(s.randn({5, 33}), 0); return tensor_list{v, i}; };
  // Two rows take the CPU's few-row f16/bf16 kernel (a token at a time), against both layouts of the right operand.
  m["mm"] = [](Sample& s) {
    return tensor_list{mm(s.randn({5, 7}), s.randn({7, 4})), mm(s.randn({2, 7}), s.randn({7, 4})),
                       mm(s.randn({2, 7}), s.randn({4, 7}).t())};
  };
  // A recurrent layer's steps: two products share one plan (the right operand, a transposed weight, packed once),
  // each adding to out; where the kernel declines (f16, f64, no oneDNN) the plain GEMM runs, as in ops/rnn_layer.cpp.
  m["mm_packed"] = [](Sample& s) {
    const Tensor a1 = s.randn({5, 7}), a2 = s.randn({5, 7}), b = s.randn({4, 7}).t(), out = s.randn({5, 4});
    NoGradGuard ng;
    const Device dev = out.device();
    std::shared_ptr<void> plan;
    tensor_list r;
    for (const Tensor& a : {a1, a2}) {
      const bool packed = dispatch::has_kernel(OpId::mm_packed, dev.type, out.dtype()) &&
                          dispatch::kernel<OpId::mm_packed>(dev, out.dtype())(out, a, b, 1.0, plan);
      if (!packed) dispatch::kernel<OpId::mm>(dev, out.dtype())(out, a, b, 1.0, 1.0);
      r.push_back(out.clone());
    }
    return r;
  };
  m["bmm"] = [](Sample& s) { return tensor_list{bmm(s.randn({2, 5, 7}), s.randn({2, 7, 4}))}; };
  // The epilogues: bias, bias + ReLU, and (nothing recorded) bias + GELU in both forms, on 5 rows and on 2.
  m["linear"] = [](Sample& s) {
    tensor_list r;
    for (int64_t rows : {5, 2}) {
      const Tensor x = s.randn({rows, 7}), w = s.randn({4, 7}), b = s.randn({4});
      NoGradGuard ng;
      r.insert(r.end(), {linear(x, w, b), linear_relu(x, w, b), linear_gelu(x, w, b, "tanh"), linear_gelu(x, w, b)});
    }
    return r;
  };
  const Case conv = [](Sample& s) {
    Tensor x = s.leaf({2, 3, 6, 6}), w = s.leaf({4, 3, 3, 3}), b = s.leaf({4});
    return with_grads(s, conv2d(x, w, b, {1, 1}, {1, 1}), {x, w, b});
  };
  m["conv2d"] = m["conv2d_backward_input"] = m["conv2d_backward_weight"] = conv;
  m["conv_transpose2d"] = [](Sample& s) {
    Tensor x = s.leaf({2, 4, 4, 4}), w = s.leaf({4, 3, 3, 3}), b = s.leaf({3});
    return with_grads(s, conv_transpose2d(x, w, b, {2, 2}, {1, 1}), {x, w, b});
  };
  m["max_pool2d"] = m["max_pool2d_backward"] = [](Sample& s) {
    Tensor x = s.leaf({2, 3, 6, 6});
    return with_grads(s, max_pool2d(x, {2, 2}), {x});
  };
  m["avg_pool2d"] = m["avg_pool2d_backward"] = [](Sample& s) {
    Tensor x = s.leaf({2, 3, 6, 6});
    return with_grads(s, avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}), {x});
  };
  m["adaptive_avg_pool2d"] = m["adaptive_avg_pool2d_backward"] = [](Sample& s) {
    Tensor x = s.leaf({2, 3, 7, 7});
    return with_grads(s, adaptive_avg_pool2d(x, {3, 3}), {x});
  };
  m["batch_norm"] = m["batch_norm_backward"] = [](Sample& s) {
    Tensor x = s.leaf({4, 3, 5, 5}), w = s.param({3}, true), b = s.param({3}, true);
    return with_grads(s, batch_norm(x, Tensor(), Tensor(), w, b, true), {x, w, b});
  };
  m["batch_norm_add_relu"] = m["batch_norm_add_relu_backward"] = [](Sample& s) {
    Tensor x = s.leaf({4, 3, 5, 5}), z = s.leaf({4, 3, 5, 5}), w = s.param({3}, true), b = s.param({3}, true);
    return with_grads(s, batch_norm_add_relu(x, z, Tensor(), Tensor(), w, b, true), {x, z, w, b});
  };
  m["batch_norm_relu"] = m["batch_norm_relu_backward"] = [](Sample& s) {
    Tensor x = s.leaf({4, 3, 5, 5}), w = s.param({3}, true), b = s.param({3}, true);
    return with_grads(s, batch_norm_relu(x, Tensor(), Tensor(), w, b, true), {x, w, b});
  };
  m["dropout"] = [](Sample& s) {
    Tensor x = s.randn({8, 16});
    manual_seed(9);
    return tensor_list{dropout(x, 0.5, true)};
  };
  m["softmax"] = m["softmax_backward"] = [](Sample& s) {
    Tensor x = s.leaf({4, 10});
    return with_grads(s, softmax(x, 1), {x});
  };
  m["log_softmax"] = m["log_softmax_backward"] = [](Sample& s) {
    Tensor x = s.leaf({4, 10});
    return with_grads(s, log_softmax(x, 1), {x});
  };
  m["sdpa_fused"] = m["sdpa_fused_backward"] = [](Sample& s) {
    // Grouped heads, a bool mask (the same for every dtype: drawn from the rounded values) and
    // sizes that are not multiples of the kernels' tiles.
    Tensor q = s.leaf({2, 4, 9, 8}), k = s.leaf({2, 2, 70, 8}), v = s.leaf({2, 2, 70, 6});
    Tensor mask = gt(s.randn({9, 70}), -1.0);
    return with_grads(s, scaled_dot_product_attention(q, k, v, mask, 0.0, false, std::nullopt, true), {q, k, v});
  };
  m["nll_loss"] = m["nll_loss_backward"] = [](Sample& s) {
    Tensor x = s.leaf({6, 5});
    Tensor t = s.target(6, 5);
    return with_grads(s, nll_loss(x, t, Reduction::Sum), {x});
  };
  m["cross_entropy_rows"] = m["cross_entropy_rows_backward"] = [](Sample& s) {
    // Label smoothing, an ignored row, and a class count no vector width divides.
    Tensor x = s.leaf({6, 37});
    Tensor t = s.target(6, 37).cpu();
    t.data_ptr<int64_t>()[2] = -100;
    return with_grads(s, cross_entropy(x, t.to(s.dev), Reduction::None, -100, 0.1), {x});
  };
  // Row norms and recurrent cells (ops/row_norm.cpp, ops/rnn.cpp).
  m["layer_norm_fwd"] = m["layer_norm_bwd"] = [](Sample& s) {
    Tensor x = s.leaf({5, 33}), w = s.param({33}, true), b = s.param({33}, true);
    return with_grads(s, layer_norm(x, {33}, w, b), {x, w, b});
  };
  m["rms_norm_fwd"] = m["rms_norm_bwd"] = [](Sample& s) {
    Tensor x = s.leaf({5, 33}), w = s.param({33}, true);
    return with_grads(s, rms_norm(x, {33}, w, 1e-5), {x, w});
  };
  m["lstm_cell_fused"] = m["lstm_cell_fused_backward"] = [](Sample& s) {
    Tensor gates = s.leaf({3, 8}), c = s.leaf({3, 2});
    auto [h, cn] = lstm_cell_fused(gates, c);
    return with_grads(s, cat({h, cn}, 1), {gates, c});
  };
  m["gru_cell_fused"] = m["gru_cell_fused_backward"] = [](Sample& s) {
    Tensor gi = s.leaf({3, 6}), gh = s.leaf({3, 6}), h = s.leaf({3, 2});
    return with_grads(s, gru_cell_fused(gi, gh, h), {gi, gh, h});
  };
  // Whole sequences (cuDNN's RNN on CUDA; cell by cell on the CPU, the reference): two bidirectional layers.
  m["rnn_fused"] = m["rnn_fused_backward"] = [](Sample& s) {
    const int64_t T = 5, N = 3, I = 4, H = 6;
    tensor_list out, leaves;
    for (int64_t G : {int64_t{4}, int64_t{3}}) {  // LSTM, then GRU
      Tensor x = s.leaf({T, N, I}), h0 = s.leaf({4, N, H}), c0 = s.leaf({4, N, H});
      tensor_list ps;
      for (int64_t l = 0; l < 2; ++l)
        for (int d = 0; d < 2; ++d) {
          const int64_t in = l == 0 ? I : 2 * H;
          for (const IntList& shape : {IntList{G * H, in}, IntList{G * H, H}, IntList{G * H}, IntList{G * H}})
            ps.push_back(s.leaf(shape));
        }
      RnnArgs a;
      a.num_layers = 2;
      a.bidirectional = true;
      leaves.insert(leaves.end(), {x, h0});
      if (G == 4) {
        auto [y, hn, cn] = lstm(x, h0, c0, ps, a);
        out.insert(out.end(), {y.flatten(), hn.flatten(), cn.flatten()});
        leaves.push_back(c0);
      } else {
        auto [y, hn] = gru(x, h0, ps, a);
        out.insert(out.end(), {y.flatten(), hn.flatten()});
      }
      leaves.insert(leaves.end(), ps.begin(), ps.end());
    }
    return with_grads(s, cat(out, 0), leaves);
  };
  // Index family (ops/index.h): duplicate indices, so the accumulating kernels add.
  const auto ix = [](Sample& s, const std::vector<int64_t>& v, const IntList& shape) {
    return tensor<int64_t>(v, shape).to(s.dev);
  };
  m["index_select"] = [ix](Sample& s) {
    Tensor x = s.leaf({4, 5});
    return with_grads(s, index_select(x, 0, ix(s, {3, 0, 3}, {3})), {x});
  };
  m["index_add"] = [ix](Sample& s) {
    Tensor x = s.leaf({4, 5}), src = s.leaf({4, 3});
    return with_grads(s, index_add(x, 1, ix(s, {4, 0, 4}, {3}), src, 1.5), {x, src});
  };
  m["gather"] = [ix](Sample& s) {
    Tensor x = s.leaf({3, 5});
    return with_grads(s, gather(x, 1, ix(s, {4, 0, 4, 1, 2, 2}, {3, 2})), {x});
  };
  m["scatter"] = [ix](Sample& s) {
    Tensor x = s.leaf({3, 5}), src = s.leaf({3, 3});
    return with_grads(s, scatter(x, 1, ix(s, {4, 0, 1, 3, 2, 0}, {3, 2}), src), {x, src});
  };
  m["scatter_add"] = [ix](Sample& s) {
    Tensor x = s.leaf({3, 5}), src = s.leaf({2, 5});
    return with_grads(s, scatter_add(x, 0, ix(s, {2, 0, 2, 2, 1, 2, 2, 0, 0, 0}, {2, 5}), src), {x, src});
  };
  m["masked_fill"] = [](Sample& s) {
    Tensor x = s.leaf({4, 6});
    return with_grads(s, masked_fill(x, gt(s.randn({6}), 0.0), -2.5), {x});
  };
  m["tril"] = [](Sample& s) { Tensor x = s.leaf({2, 4, 5}); return with_grads(s, tril(x, -1), {x}); };
  m["triu"] = [](Sample& s) { Tensor x = s.leaf({2, 4, 5}); return with_grads(s, triu(x.transpose(1, 2), 1), {x}); };
  m["embedding"] = m["embedding_backward"] = [ix](Sample& s) {
    Tensor w = s.leaf({6, 4});
    return with_grads(s, embedding(w, ix(s, {1, 5, 1, 0, 3, 1}, {2, 3}), 3), {w});
  };
  m["topk"] = [](Sample& s) {
    auto [v, i] = topk(s.randn({5, 9}), 3, 1);
    return tensor_list{v, i};
  };
  m["sort"] = [](Sample& s) {
    auto [v, i] = sort(s.randn({4, 11}).transpose(0, 1), 0, true);
    return tensor_list{v, i};
  };
  m["multinomial"] = [](Sample& s) {
    Tensor p = s.positive({3, 6});
    manual_seed(7);
    return tensor_list{multinomial(p, 4, false), multinomial(p, 5, true)};
  };
  return m;
}

/// Kernel ops whose only dtype leaves no f64 reference, or whose inputs are the optimizers' and
/// amp's own state: the tests named here compare them (f32 with f64, or with hand-computed values).
inline const std::map<std::string, std::string> kCoveredElsewhere = {
    {"unscale_check_inf", "test_grad_scaler, test_cuda_amp"},
    {"update_scale", "test_grad_scaler, test_cuda_amp"},
    {"sgd_step", "test_optim, test_cuda_amp"},
    {"adam_step", "test_optim, test_cuda_amp"},
    {"rmsprop_step", "test_optim_more, test_cuda_amp"},
    {"adagrad_step", "test_optim_more, test_cuda_amp"},
    {"lamb_step", "test_optim_more, test_cuda_amp"},
    {"ctc_lattice", "test_ctc (against PyTorch's values, the composite recursion and a brute-force sum)"},
    {"ctc_lattice_backward", "test_ctc (against PyTorch's gradients and the composite's)"},
    {"resample", "test_resize (PyTorch's values, an index_select reference, f16/bf16 against f32), test_cuda_emulated"},
    {"pad", "test_nn_image_layers (PyTorch's values in every mode and dtype, integers), test_cuda_emulated"},
    {"pad_backward", "test_nn_image_layers (PyTorch's gradients, gradcheck, double backward), test_cuda_emulated"},
    {"resample_backward", "test_resize (PyTorch's gradients, the reference's, gradgradcheck), test_cuda_emulated"},
};


// Each output against its reference within `scale` times its dtype's tolerance; integer and bool
// outputs exactly (the reference converted to their dtype).
inline void check_outputs(const tensor_list& got, const tensor_list& ref, double scale) {
  REQUIRE(got.size() == ref.size());
  for (size_t k = 0; k < got.size(); ++k) {
    std::string why;
    INFO("output " << k);
    const Tensor r = is_floating(got[k].dtype()) ? ref[k] : ref[k].to(got[k].dtype());
    CHECK(close_to(got[k], r, scale * tolerance(got[k].dtype()), &why));
    INFO(why);
  }
}


}  // namespace mpx::backend_sweep
