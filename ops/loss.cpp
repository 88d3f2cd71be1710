// Losses: validation, f32/f64 compute, and differentiable formulas (second derivatives included).
#include "ops/loss.h"
#include "ops/loss_internal.h"

#include <cmath>
#include <deque>
#include <memory>
#include <mutex>
#include <numbers>

#include "autograd/grad_mode.h"
#include "core/cuda.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/logical.h"
#include "ops/formulas.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace loss_detail {

DType compute_dtype(const tensor_list& ts) {
  for (const auto& t : ts)
    if (t.defined() && t.dtype() == kFloat64) return kFloat64;
  return kFloat32;
}

Tensor reduce_loss(const Tensor& l, Reduction r) {
  switch (r) {
    case Reduction::None: return l;
    case Reduction::Mean: return mean(l);
    case Reduction::Sum: return sum(l);
  }
  MPX_ERROR("loss: unknown reduction");
}

void check_floating(const char* op, const char* what, const Tensor& t) {
  MPX_CHECK(t.defined(), op, ": ", what, " is undefined");
  MPX_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating, got ", ops::describe(t),
            "; convert it with .to(mpx::kFloat32)");
}

void check_same_shape(const char* op, const Tensor& input, const Tensor& target) {
  MPX_CHECK(input.sizes() == target.sizes(), op, ": input ", ops::describe(input), " and target ", ops::describe(target),
            " must have the same shape");
}

}  // namespace loss_detail

namespace {
using autograd::FunctionNode;
using namespace loss_detail;


// ---- gather at the target class and its adjoint; each is the other's backward ----
Tensor nll_scatter(const Tensor& g, const Tensor& target, int64_t classes, int64_t ignore_index);

// in: [N, C, inner] (any strides); target: contiguous i64 [N, inner]. Returns [N, inner].
Tensor nll_pick(const Tensor& in, const Tensor& target, int64_t ignore_index) {
  Tensor out = empty({in.size(0), in.size(2)}, in.options());
  if (out.numel() > 0)
    dispatch::kernel<OpId::nll_loss>(in.device(), in.dtype())(out, in.detach(), target, ignore_index);
  const int64_t classes = in.size(1);
  if (auto n = autograd::record("NllLossBackward", {in}, {out}, [classes, ignore_index](FunctionNode& self, const tensor_list& g) -> tensor_list {
        return {nll_scatter(g[0], self.saved(0), classes, ignore_index)};
      }))
    n->save(target);
  return out;
}

// g: [N, inner]; returns [N, C, inner] holding g at each target class and zeros elsewhere.
Tensor nll_scatter(const Tensor& g, const Tensor& target, int64_t classes, int64_t ignore_index) {
  Tensor out = empty({g.size(0), classes, g.size(1)}, g.options());
  if (out.numel() > 0) {
    Tensor gc = g.detach().contiguous();
    dispatch::kernel<OpId::nll_loss_backward>(g.device(), g.dtype())(out, gc, target, ignore_index);
  }
  if (auto n = autograd::record("NllLossBackwardBackward", {g}, {out}, [ignore_index](FunctionNode& self, const tensor_list& gg) -> tensor_list {
        return {nll_pick(gg[0], self.saved(0), ignore_index)};
      }))
    n->save(target);
  return out;
}

// Class-index targets checked against input [C] / [N, C] / [N, C, d1, ...].
struct ClassTarget {
  Tensor flat;       // contiguous i64 [N, inner]
  IntList shape;     // the per-element loss shape (the target's shape)
  int64_t N = 1, C = 1, inner = 1;
};

// Device-side target checks whose results are still on their way to the host.
struct PendingTargetCheck {
  std::unique_ptr<cuda::HostReadback> result;  // bad count, first bad position, its value
  std::string op;
  int64_t classes = 0, ignore_index = 0;
};
std::mutex g_target_checks_m;
std::deque<PendingTargetCheck> g_target_checks;

void queue_target_check(const char* op, const Tensor& flat, int64_t classes, int64_t ignore_index) {
  NoGradGuard ng;
  const Tensor t = flat.reshape({-1});
  const Tensor bad = mul(add(lt(t, 0.0).to(kInt64), ge(t, static_cast<double>(classes)).to(kInt64)),
                         ne(t, static_cast<double>(ignore_index)).to(kInt64));
  const Tensor count = sum(bad);
  const Tensor first = argmax(bad, 0);
  const Tensor value = sum(where(eq(arange(static_cast<double>(t.numel()), TensorOptions(kInt64).device(t.device())),
                                    first),
                                 t, zeros({}, TensorOptions(kInt64).device(t.device()))));
  PendingTargetCheck c;
  c.result = std::make_unique<cuda::HostReadback>(tensor_list{count, first, value});
  c.op = op;
  c.classes = classes;
  c.ignore_index = ignore_index;
  std::lock_guard<std::mutex> l(g_target_checks_m);
  g_target_checks.push_back(std::move(c));
}

}  // namespace

void report_target_checks(bool wait) {
  std::unique_lock<std::mutex> l(g_target_checks_m);
  while (!g_target_checks.empty() && (wait || g_target_checks.front().result->ready())) {
    PendingTargetCheck c = std::move(g_target_checks.front());
    g_target_checks.pop_front();
    if (c.result->value(0) == 0) continue;
    l.unlock();
    MPX_ERROR(c.op, ": target value ", static_cast<int64_t>(c.result->value(2)), " (at flat position ",
              static_cast<int64_t>(c.result->value(1)), ") is out of range for ", c.classes,
              " classes; targets must satisfy 0 <= target < ", c.classes, " or equal ignore_index (", c.ignore_index,
              "). Found on the GPU after the call that used it, whose loss is NaN");
  }
}

namespace {

ClassTarget check_class_target(const char* op, const Tensor& input, const Tensor& target, int64_t ignore_index) {
  MPX_CHECK(target.defined(), op, ": target is undefined");
  MPX_CHECK(input.dim() >= 1, op, ": input must be [C], [N, C] or [N, C, d1, ...], got ", ops::describe(input));
  MPX_CHECK(target.dtype() == kInt64, op, ": target must hold class indices of dtype i64, got ", ops::describe(target),
            "; convert with .to(mpx::kInt64)");
  ClassTarget ct;
  if (input.dim() == 1) {
    ct.C = input.size(0);
  } else {
    ct.N = input.size(0);
    ct.C = input.size(1);
    for (int64_t d = 0; d < input.dim(); ++d)
      if (d != 1) ct.shape.push_back(input.size(d));
    ct.inner = ct.N * ct.C == 0 ? 0 : input.numel() / (ct.N * ct.C);
  }
  MPX_CHECK(ct.C > 0, op, ": input ", ops::describe(input), " has no classes (its class dim ", input.dim() == 1 ? 0 : 1,
            " is 0); it needs one score per class");
  MPX_CHECK(target.sizes() == ct.shape, op, ": target ", ops::describe(target), " does not match input ",
            ops::describe(input), "; expected target of shape ", shape_str(ct.shape),
            " (the input's shape without the class dim 1)");
  ct.flat = target.contiguous().reshape({ct.N, ct.inner});
  // A bad index must never read or write out of bounds: the kernels guard memory (an
  // out-of-range class reads as NaN), and the error names the bad value and its position.
  if (ct.flat.device().is_cuda()) {
    // On a GPU the check runs on the device and reaches the host a call later, so a training
    // step never waits for it (inside a CUDA graph capture it is skipped: validate targets
    // before capturing).
    if (cuda::is_capturing() || ct.flat.numel() == 0) return ct;
    report_target_checks();
    queue_target_check(op, ct.flat, ct.C, ignore_index);
    return ct;
  }
  const int64_t* p = ct.flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < ct.flat.numel(); ++i) {
    const int64_t c = p[i];
    MPX_CHECK(c == ignore_index || (c >= 0 && c < ct.C), op, ": target value ", c, " (at flat position ", i,
              ") is out of range for ", ct.C, " classes; targets must satisfy 0 <= target < ", ct.C,
              " or equal ignore_index (", ignore_index, ")");
  }
  return ct;
}

Tensor check_weight(const char* op, const Tensor& w, int64_t classes, DType cdt) {
  if (!w.defined()) return w;
  check_floating(op, "weight", w);
  MPX_CHECK(w.dim() == 1 && w.size(0) == classes, op, ": weight ", ops::describe(w), " must be 1-d with one entry per class (",
            classes, ")");
  return w.detach().to(cdt);
}

// -w[t] * lp[t] per element and the mean's denominator (sum of the weights of non-ignored targets).
Tensor nll_reduced(const Tensor& lp, const ClassTarget& ct, Reduction r, int64_t ignore_index, const Tensor& w,
                   Tensor* denom) {
  Tensor lp3 = lp.reshape({ct.N, ct.C, ct.inner});
  Tensor picked = nll_pick(lp3, ct.flat, ignore_index);
  Tensor wt;
  {
    NoGradGuard ng;
    wt = w.defined() ? nll_pick(w.view({1, ct.C, 1}).expand({ct.N, ct.C, ct.inner}), ct.flat, ignore_index)
                     : ne(ct.flat, static_cast<double>(ignore_index)).to(lp.dtype());
  }
  Tensor loss = w.defined() ? -(picked * wt) : -picked;
  Tensor d;
  {
    NoGradGuard ng;
    d = sum(wt);
  }
  if (denom) *denom = d;
  switch (r) {
    case Reduction::None: return loss.reshape(ct.shape);
    case Reduction::Sum: return sum(loss);
    case Reduction::Mean: return sum(loss) / d;
  }
  MPX_ERROR("loss: unknown reduction");
}

// ---- cross-entropy on the fused row kernels ----
// Logits [C] or [N, C] with class indices and no class weights are read in their own dtype and reduced in f32 (f64
// for f64): the same arithmetic as log_softmax + nll after autocast's f32 cast, without the f32 copy of the logits
// or the log-probabilities in memory (for GPT-2's 50,257 classes, two f32 tensors of 200 KB a token). The backward
// recomputes the softmax from the saved logits and each row's log-sum-exp.
bool takes_rows_path(const Tensor& x, const Tensor& target, const Tensor& weight) {
  return !weight.defined() && x.dim() <= 2 && x.numel() > 0 && target.defined() && target.dtype() == kInt64 &&
         dispatch::has_kernel(OpId::cross_entropy_rows, x.device().type, x.dtype());
}

// dL/dx for the rows' incoming gradient g [N] (compute dtype): one kernel pass, or under create_graph the same
// formula on differentiable ops so that second derivatives exist.
Tensor cross_entropy_rows_grad(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& lse,
                               int64_t ignore_index, double eps) {
  const int64_t N = x.size(0), C = x.size(1);
  if (GradMode::is_enabled()) {
    const DType cdt = lse.dtype();
    Tensor onehot, keep;
    {
      NoGradGuard ng;
      onehot = nll_scatter(ones({N, 1}, lse.options()), t.reshape({N, 1}), C, ignore_index).reshape({N, C});
      keep = ne(t, static_cast<double>(ignore_index)).to(cdt).reshape({N, 1});
    }
    return formulas::cross_entropy_row_grad(g.reshape({N, 1}) * keep, softmax(x.to(cdt), 1), onehot, eps,
                                            1.0 / static_cast<double>(C))
        .to(x.dtype());
  }
  Tensor dx = empty(x.sizes(), x.options());
  dispatch::kernel<OpId::cross_entropy_rows_backward>(x.device(), x.dtype())(dx, g.contiguous(), x.detach(), t, lse,
                                                                              ignore_index, eps);
  return dx;
}

Tensor cross_entropy_rows(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                          double eps) {
  const ClassTarget ct = check_class_target("cross_entropy", logits, target, ignore_index);
  const Tensor x = logits.reshape({ct.N, ct.C}).contiguous();
  const Tensor t = ct.flat.reshape({ct.N});
  const TensorOptions copt = x.options().dtype(compute_dtype({x}));
  Tensor rows = empty({ct.N}, copt), lse = empty({ct.N}, copt);
  dispatch::kernel<OpId::cross_entropy_rows>(x.device(), x.dtype())(rows, lse, x.detach(), t, ignore_index, eps);
  if (auto n = autograd::record("CrossEntropyBackward", {x}, {rows},
                                [ignore_index, eps](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                  return {cross_entropy_rows_grad(g[0], self.saved(0), self.saved(1), self.saved(2),
                                                                  ignore_index, eps)};
                                })) {
    n->save(x);
    n->save(t);
    n->save(lse);
  }
  switch (reduction) {
    case Reduction::None: return rows.reshape(ct.shape);
    case Reduction::Sum: return sum(rows);
    case Reduction::Mean: {
      Tensor count;
      {
        NoGradGuard ng;
        count = sum(ne(t, static_cast<double>(ignore_index)).to(rows.dtype()));
      }
      return sum(rows) / count;
    }
  }
  MPX_ERROR("loss: unknown reduction");
}

}  // namespace

Reduction reduction_from_name(const std::string& name) {
  if (name == "none") return Reduction::None;
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  MPX_ERROR("reduction: unknown reduction \"", name, "\"; expected \"none\", \"mean\" or \"sum\"");
}

Tensor nll_loss(const Tensor& log_probs0, const Tensor& target, Reduction reduction, int64_t ignore_index,
                const Tensor& weight) {
  check_floating("nll_loss", "input", log_probs0);
  // The kernels index the input with the target's values, so all three must share a device.
  ops::common_device("nll_loss", {log_probs0, target, weight});
  auto in = ops::autocast(OpId::nll_loss, {log_probs0, weight});
  const DType cdt = compute_dtype({in[0]});
  Tensor lp = in[0].to(cdt);
  ClassTarget ct = check_class_target("nll_loss", lp, target, ignore_index);
  Tensor w = check_weight("nll_loss", in[1], ct.C, cdt);
  return nll_reduced(lp, ct, reduction, ignore_index, w, nullptr);
}

Tensor cross_entropy(const Tensor& logits0, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing, const Tensor& weight) {
  check_floating("cross_entropy", "input", logits0);
  MPX_CHECK(target.defined(), "cross_entropy: target is undefined");
  MPX_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ",
            label_smoothing);
  MPX_CHECK(logits0.dim() >= 1, "cross_entropy: input must be [C], [N, C] or [N, C, d1, ...], got ", ops::describe(logits0));
  ops::common_device("cross_entropy", {logits0, target, weight});
  if (takes_rows_path(logits0, target, weight))
    return cross_entropy_rows(logits0, target, reduction, ignore_index, label_smoothing);
  auto in = ops::autocast(OpId::cross_entropy, {logits0, weight});
  const DType cdt = compute_dtype({in[0]});
  Tensor x = in[0].to(cdt);
  const int64_t class_dim = x.dim() == 1 ? 0 : 1;
  const int64_t C = x.size(class_dim);
  Tensor w = check_weight("cross_entropy", in[1], C, cdt);
  IntList wshape(x.dim(), 1);
  wshape[class_dim] = C;
  Tensor lp = log_softmax(x, class_dim);

  if (is_floating(target.dtype())) {
    // Class probabilities (PyTorch's soft-target form); the mean is over samples.
    MPX_CHECK(target.sizes() == x.sizes(), "cross_entropy: a floating target holds class probabilities and must have "
              "the input's shape ", shape_str(x.sizes()), ", got ", ops::describe(target),
              "; for class indices convert with .to(mpx::kInt64)");
    Tensor tp = target.to(cdt);
    if (label_smoothing > 0.0) tp = tp * (1.0 - label_smoothing) + label_smoothing / static_cast<double>(C);
    Tensor prod = lp * tp;
    if (w.defined()) prod = prod * w.view(wshape);
    return reduce_loss(-sum(prod, {class_dim}), reduction);
  }

  ClassTarget ct = check_class_target("cross_entropy", x, target, ignore_index);
  Tensor denom;
  Tensor nll = nll_reduced(lp, ct, reduction, ignore_index, w, &denom);
  if (label_smoothing == 0.0) return nll;
  // PyTorch's definition: (1 - eps) * nll + eps / C * sum_c(-w_c * lp_c), ignored
  // targets excluded, the mean normalized like nll's.
  Tensor smooth = -sum(w.defined() ? lp * w.view(wshape) : lp, {class_dim});
  Tensor keep = ne(target, static_cast<double>(ignore_index));
  smooth = where(keep, smooth, zeros({}, smooth.options()));
  Tensor red = reduction == Reduction::None ? smooth : reduction == Reduction::Sum ? sum(smooth) : sum(smooth) / denom;
  return nll * (1.0 - label_smoothing) + red * (label_smoothing / static_cast<double>(C));
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits0, const Tensor& target0, Reduction reduction,
                                        const Tensor& weight0, const Tensor& pos_weight0) {
  const char* op = "binary_cross_entropy_with_logits";
  check_floating(op, "input", logits0);
  check_floating(op, "target", target0);
  check_same_shape(op, logits0, target0);
  auto in = ops::autocast(OpId::bce_with_logits, {logits0, target0, weight0, pos_weight0});
  const DType cdt = compute_dtype({in[0], in[1]});
  Tensor x = in[0].to(cdt), t = in[1].to(cdt);
  for (int k = 2; k < 4; ++k) {
    if (!in[k].defined()) continue;
    check_floating(op, k == 2 ? "weight" : "pos_weight", in[k]);
    MPX_CHECK(broadcast_shapes(in[k].sizes(), x.sizes(), op) == x.sizes(), op, ": ", k == 2 ? "weight " : "pos_weight ",
              ops::describe(in[k]), " does not broadcast to the input ", ops::describe(x));
  }
  // softplus(-x) = max(-x, 0) + log1p(exp(-|x|)): no overflow for large |x|. The threshold
  // where softplus returns its argument is chosen so the cut-off error is below the dtype's epsilon.
  Tensor sp = softplus(-x, 1.0, cdt == kFloat64 ? 40.0 : 20.0);
  Tensor l = in[3].defined() ? (1.0 - t) * x + ((in[3].to(cdt) - 1.0) * t + 1.0) * sp : (1.0 - t) * x + sp;
  if (in[2].defined()) l = l * in[2].to(cdt);
  return reduce_loss(l, reduction);
}

Tensor binary_cross_entropy(const Tensor& probs0, const Tensor& target0, Reduction reduction, const Tensor& weight0) {
  const char* op = "binary_cross_entropy";
  check_floating(op, "input", probs0);
  check_floating(op, "target", target0);
  // Banned under autocast: this throws there, naming bce_with_logits.
  auto in = ops::autocast(OpId::binary_cross_entropy, {probs0, target0, weight0});
  check_same_shape(op, in[0], in[1]);
  const DType cdt = compute_dtype({in[0], in[1]});
  Tensor p = in[0].to(cdt), t = in[1].to(cdt);
  Tensor w;
  if (in[2].defined()) {
    check_floating(op, "weight", in[2]);
    MPX_CHECK(broadcast_shapes(in[2].sizes(), p.sizes(), op) == p.sizes(), op, ": weight ", ops::describe(in[2]),
              " does not broadcast to the input ", ops::describe(p));
    w = in[2].to(cdt);
  }
  if (p.numel() > 0) {
    NoGradGuard ng;
    const double lo = min(p).item<double>(), hi = max(p).item<double>();
    MPX_CHECK(lo >= 0.0 && hi <= 1.0, op, ": all elements of input should be probabilities in [0, 1], got values in [",
              lo, ", ", hi, "]; pass logits to binary_cross_entropy_with_logits instead");
  }
  // Logs clamped at -100 as PyTorch does, so p = 0 or 1 gives a finite loss.
  auto clog = [](const Tensor& v) { return clamp_min(log(v), -100.0); };
  Tensor l;
  {
    NoGradGuard ng;
    l = -(t * clog(p) + (1.0 - t) * clog(1.0 - p));
    if (w.defined()) l = l * w;
  }
  // PyTorch's backward (finite at p = 0 and 1, unlike differentiating the clamped logs),
  // written in differentiable ops for create_graph.
  if (auto n = autograd::record("BinaryCrossEntropyBackward", {p, t}, {l}, [clog](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor p = self.saved(0), t = self.saved(1), w = self.saved(2);
        Tensor gw = w.defined() ? g[0] * w : g[0];
        Tensor gp = self.next_edges[0].valid() ? gw * (p - t) / clamp_min(p * (1.0 - p), 1e-12) : Tensor();
        Tensor gt = self.next_edges[1].valid() ? gw * (clog(1.0 - p) - clog(p)) : Tensor();
        return {gp, gt};
      })) {
    n->save(p);
    n->save(t);
    n->save(w);
  }
  return reduce_loss(l, reduction);
}


Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss("mse_loss", OpId::mse_loss, input, target, reduction, [](const Tensor& x, const Tensor& t) {
    Tensor d = x - t;
    return d * d;
  });
}
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss("l1_loss", OpId::l1_loss, input, target, reduction,
                        [](const Tensor& x, const Tensor& t) { return abs(x - t); });
}
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  MPX_CHECK(beta >= 0.0, "smooth_l1_loss: beta must be non-negative, got ", beta);
  return pointwise_loss("smooth_l1_loss", OpId::smooth_l1_loss, input, target, reduction,
                        [beta](const Tensor& x, const Tensor& t) {
                          Tensor d = x - t;
                          Tensor ad = abs(d);
                          if (beta == 0.0) return ad;  // the quadratic zone vanishes: plain L1
                          return where(lt(ad, beta), d * d * (0.5 / beta), ad - 0.5 * beta);
                        });
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  MPX_CHECK(delta > 0.0, "huber_loss: delta must be positive, got ", delta);
  return pointwise_loss("huber_loss", OpId::huber_loss, input, target, reduction,
                        [delta](const Tensor& x, const Tensor& t) {
                          const Tensor d = x - t, ad = abs(d);
                          return where(lt(ad, delta), d * d * 0.5, (ad - 0.5 * delta) * delta);
                        });
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input, bool full, double eps,
                        Reduction reduction) {
  return pointwise_loss("poisson_nll_loss", OpId::poisson_nll_loss, input, target, reduction,
                        [=](const Tensor& x, const Tensor& t) {
                          Tensor l = log_input ? exp(x) - t * x : x - t * log(x + eps);
                          if (!full) return l;
                          // Stirling's approximation of log(t!), added where t > 1 (PyTorch's full=True).
                          const Tensor safe = where(gt(t, 1.0), t, 2.0);
                          const Tensor stirling = safe * log(safe) - safe + log(safe * (2.0 * std::numbers::pi)) * 0.5;
                          return l + where(gt(t, 1.0), stirling, 0.0);
                        });
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var0, bool full, double eps,
                         Reduction reduction) {
  check_floating("gaussian_nll_loss", "input", input);
  check_floating("gaussian_nll_loss", "target", target);
  check_same_shape("gaussian_nll_loss", input, target);
  check_floating("gaussian_nll_loss", "var", var0);
  MPX_CHECK(eps >= 0.0, "gaussian_nll_loss: eps must be non-negative, got ", eps);
  // var: input's shape, or one dim less (a variance per row), or broadcastable with a last dim of 1.
  Tensor var = var0;
  if (var.dim() == input.dim() - 1 && input.dim() > 0 &&
      IntList(input.sizes().begin(), input.sizes().end() - 1) == var.sizes())
    var = var.unsqueeze(-1);
  const bool fits = var.dim() == input.dim() && [&] {
    for (int64_t d = 0; d < input.dim(); ++d)
      if (var.size(d) != input.size(d) && !(d == input.dim() - 1 && var.size(d) == 1)) return false;
    return true;
  }();
  MPX_CHECK(fits, "gaussian_nll_loss: var ", ops::describe(var0), " must have input's shape ", shape_str(input.sizes()),
            ", that shape without its last dim, or a last dim of 1");
  MPX_CHECK(any(lt(var0.detach(), 0.0)).to(kFloat64).item<double>() == 0.0, "gaussian_nll_loss: var ",
            ops::describe(var0), " has negative entries; a variance is >= 0");
  const tensor_list in = ops::autocast(OpId::gaussian_nll_loss, {input, target, var});
  const DType cdt = compute_dtype(in);
  const Tensor x = in[0].to(cdt), t = in[1].to(cdt), v = in[2].to(cdt);
  // PyTorch clamps var in place under no_grad: the value is clamped, the gradient passes unchanged.
  const Tensor vc = v + (clamp_min(v, eps) - v).detach();
  Tensor l = (log(vc) + (x - t) * (x - t) / vc) * 0.5;
  if (full) l = l + 0.5 * std::log(2.0 * std::numbers::pi);
  return reduce_loss(l, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction, bool log_target) {
  MPX_CHECK(reduction == "mean" || reduction == "batchmean" || reduction == "sum" || reduction == "none",
            "kl_div: reduction must be \"mean\", \"batchmean\", \"sum\" or \"none\", got \"", reduction, "\"");
  const Tensor l = pointwise_loss("kl_div", OpId::kl_div, input, target, Reduction::None,
                                  [log_target](const Tensor& x, const Tensor& t) {
                                    if (log_target) return exp(t) * (t - x);
                                    // xlogy: 0 where the target is 0 (its log would give 0 * -inf).
                                    const Tensor zero = eq(t, 0.0);
                                    return where(zero, 0.0, t * (log(where(zero, 1.0, t)) - x));
                                  });
  if (reduction == "batchmean") return sum(l) / static_cast<double>(l.dim() == 0 ? 1 : l.size(0));
  return reduce_loss(l, reduction_from_name(reduction));
}

}  // namespace mpx
