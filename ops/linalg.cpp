// Linear algebra ops on the GEMM kernels (plain, batched, fused-epilogue); backward formulas are matmuls themselves.
#include "ops/linalg.h"

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

void check_float_pair(const char* op, const Tensor& a, const Tensor& b) {
  MPX_CHECK(is_floating(a.dtype()) && a.dtype() == b.dtype(), op, ": operands must share one floating dtype, got ",
            ops::describe(a), " and ", ops::describe(b), "; cast one with .to(dtype)");
  ops::common_device(op, {a, b});
}

// The fused-epilogue GEMM for a tensor's device and dtype, or null where there is none (the CPU).
dispatch::KernelRef<kernels::GemmEpilogueFn> epilogue_kernel(const Tensor& t) {
  if (!dispatch::has_kernel(OpId::linear, t.device().type, t.dtype())) return {};
  return dispatch::kernel<OpId::linear>(t.device(), t.dtype());
}

// out = beta * c + alpha * a @ b without autograd.
Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta) {
  // A bias row (c [m], beta = alpha = 1) is added in the GEMM's epilogue where the device has
  // one: no expanded copy of c, no second pass over out.
  if (c.defined() && c.dim() == 1 && c.size(0) == b.size(1) && c.dtype() == a.dtype() && alpha == 1.0 && beta == 1.0) {
    if (auto k = epilogue_kernel(a)) {
      Tensor out = empty({a.size(0), b.size(1)}, a.options());
      if (k(out, a, b, c.contiguous(), kernels::GemmEpilogue::kBias)) return out;
    }
  }
  Tensor out;
  if (c.defined() && beta != 0.0) {
    // Always a fresh buffer: an expanded view can itself be contiguous (c [m] with n = 1, or a
    // contiguous [n, m] c), and the GEMM would then write into c's storage.
    out = c.expand({a.size(0), b.size(1)}).clone(MemoryFormat::Contiguous);
  } else {
    out = empty({a.size(0), b.size(1)}, a.options());
    beta = 0.0;
  }
  dispatch::kernel<OpId::mm>(a.device(), a.dtype())(out, a, b, alpha, beta);
  return out;
}

// Gradients {gx, gw, gb} of y = x @ w^T + b for a 2-d x, given g = dL/dy [N, out].
tensor_list linear_grads(const Tensor& g, const Tensor& x, const Tensor& w, bool need_x, bool need_w, bool need_b) {
  Tensor gx = need_x ? mm(g, w) : Tensor();
  Tensor gw, gb;
  // The bias gradient (column sums of g) can come out of the weight-gradient GEMM's epilogue,
  // but only without create_graph: that raw kernel call records no graph.
  if (need_w && need_b && !GradMode::is_enabled() && g.dtype() == x.dtype() && g.dtype() == w.dtype() &&
      g.device() == x.device()) {
    if (auto k = epilogue_kernel(g)) {
      Tensor gw_f = empty(w.sizes(), g.options()), gb_f = empty({w.size(0)}, g.options());
      if (k(gw_f, g.t(), x, gb_f, kernels::GemmEpilogue::kBiasGrad)) {
        gw = gw_f;
        gb = gb_f;
      }
    }
  }
  if (need_w && !gw.defined()) gw = mm(g.t(), x);
  if (need_b && !gb.defined()) gb = sum(g, {0});
  return {gx, gw, gb};
}

// linear, linear_relu and linear_gelu: y = x @ w^T + b, then the activation when asked (fused into the GEMM where
// the device has that epilogue, a separate op otherwise). `act`: kBias (none), kBiasRelu or a GELU epilogue.
Tensor linear_impl(const char* op, const Tensor& x0, const Tensor& w0, const Tensor& b0, kernels::GemmEpilogue act) {
  using kernels::GemmEpilogue;
  const bool with_relu = act == GemmEpilogue::kBiasRelu, with_gelu = act != GemmEpilogue::kBias && !with_relu;
  auto in = ops::autocast(OpId::linear, {x0, w0, b0});
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  MPX_CHECK(x.defined() && w.defined(), op, ": input and weight must be defined");
  MPX_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), op, ": input ", ops::describe(x),
            " does not match weight ", ops::describe(w), " (expected input [..., ", w.dim() == 2 ? w.size(1) : -1, "])");
  MPX_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)), op, ": bias ", ops::describe(b),
            " does not match weight ", ops::describe(w));
  check_float_pair(op, x, w);
  if (b.defined()) check_float_pair(op, x, b);
  Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
  Tensor y;
  bool relu_done = false, gelu_done = false;
  // GELU's backward needs the pre-activation, which its epilogue does not keep: fused only where nothing records.
  const bool recorded = GradMode::is_enabled() && (x2.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad()));
  {
    NoGradGuard ng;
    if ((with_relu || (with_gelu && !recorded)) && b.defined()) {
      if (auto k = epilogue_kernel(x2)) {
        Tensor out = empty({x2.size(0), w.size(0)}, x.options());
        if (k(out, x2, w.t(), b.contiguous(), act)) {
          y = out;
          (with_relu ? relu_done : gelu_done) = true;
        }
      }
    }
    if (!y.defined()) y = b.defined() ? gemm(x2, w.t(), b, 1.0, 1.0) : gemm(x2, w.t(), {}, 1.0, 0.0);
  }
  if (relu_done) {
    // relu'(z) = (y > 0) for y = relu(z): the output is its own mask.
    if (auto n = autograd::record("LinearReluBackward", {x2, w, b}, {y},
                                  [](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                    Tensor gz = threshold_backward(g[0], self.saved(2), 0.0);
                                    return linear_grads(gz, self.saved(0), self.saved(1), self.next_edges[0].valid(),
                                                        self.next_edges[1].valid(), self.next_edges[2].valid());
                                  })) {
      n->save(x2);
      n->save(w);
      n->save(y, true);
    }
  } else {
    if (auto n = autograd::record("LinearBackward", {x2, w, b}, {y},
                                  [](FunctionNode& self, const tensor_list& g) -> tensor_list {
                                    return linear_grads(g[0], self.saved(0), self.saved(1), self.next_edges[0].valid(),
                                                        self.next_edges[1].valid(), self.next_edges[2].valid());
                                  })) {
      n->save(x2);
      n->save(w);
    }
    if (with_relu) y = relu(y);
    if (with_gelu && !gelu_done) y = gelu(y, act == GemmEpilogue::kBiasGeluTanh ? "tanh" : "none");
  }
  if (x.dim() == 2) return y;
  IntList shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(w.size(0));
  return y.reshape(shape);
}
}  // namespace

Tensor mm(const Tensor& a0, const Tensor& b0) {
  auto in = ops::autocast(OpId::mm, {a0, b0});
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  MPX_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "mm: cannot multiply ", ops::describe(a), " by ",
            ops::describe(b), "; expected [n, k] @ [k, m]");
  check_float_pair("mm", a, b);
  Tensor out;
  {
    NoGradGuard ng;
    out = gemm(a, b, {}, 1.0, 0.0);
  }
  if (auto n = autograd::record("MmBackward", {a, b}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor a = self.saved(0), b = self.saved(1);
        Tensor ga = self.next_edges[0].valid() ? mm(g[0], b.t()) : Tensor();
        Tensor gb = self.next_edges[1].valid() ? mm(a.t(), g[0]) : Tensor();
        return {ga, gb};
      })) {
    n->save(a);
    n->save(b);
  }
  return out;
}

Tensor baddbmm(const Tensor& c0, const Tensor& a0, const Tensor& b0, double beta, double alpha) {
  auto in = ops::autocast(OpId::baddbmm, {c0, a0, b0});
  MPX_CHECK(in[1].dim() == 3 && in[2].dim() == 3 && in[1].size(0) == in[2].size(0) && in[1].size(2) == in[2].size(1),
            "baddbmm: cannot batch-multiply ", ops::describe(in[1]), " by ", ops::describe(in[2]),
            "; expected [B, n, m] and [B, m, p]");
  const IntList shape = {in[1].size(0), in[1].size(1), in[2].size(2)};
  MPX_CHECK(broadcast_shapes(in[0].sizes(), shape, "baddbmm") == shape, "baddbmm: self ", ops::describe(in[0]),
            " does not broadcast to the product's shape ", shape_str(shape));
  const Tensor p = alpha == 1.0 ? bmm(in[1], in[2]) : bmm(in[1], in[2]) * alpha;
  if (beta == 0.0) return p;
  return (beta == 1.0 ? in[0] : in[0] * beta) + p;
}

Tensor outer(const Tensor& a, const Tensor& b) {
  MPX_CHECK(a.defined() && b.defined() && a.dim() == 1 && b.dim() == 1, "outer: expected two 1-d tensors, got ",
            ops::describe(a), " and ", ops::describe(b));
  return a.unsqueeze(1) * b.unsqueeze(0);
}

Tensor trace(const Tensor& x) {
  MPX_CHECK(x.defined() && x.dim() == 2, "trace: expected a matrix, got ", ops::describe(x));
  return sum(x.diagonal());
}

Tensor addmm(const Tensor& c0, const Tensor& a0, const Tensor& b0, double beta, double alpha) {
  auto in = ops::autocast(OpId::addmm, {c0, a0, b0});
  const Tensor &c = in[0], &a = in[1], &b = in[2];
  MPX_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "addmm: cannot multiply ", ops::describe(a), " by ",
            ops::describe(b));
  check_float_pair("addmm", a, b);
  check_float_pair("addmm", a, c);
  broadcast_shapes(c.sizes(), {a.size(0), b.size(1)}, "addmm");
  Tensor out;
  {
    NoGradGuard ng;
    out = gemm(a, b, c, alpha, beta);
  }
  if (auto n = autograd::record("AddmmBackward", {c, a, b}, {out}, [alpha, beta](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor c = self.saved(0), a = self.saved(1), b = self.saved(2);
        Tensor gc = self.next_edges[0].valid() ? ops::reduce_grad(beta == 1.0 ? g[0] : g[0] * beta, c) : Tensor();
        auto scaled = [alpha](const Tensor& t) { return alpha == 1.0 ? t : t * alpha; };
        Tensor ga = self.next_edges[1].valid() ? scaled(mm(g[0], b.t())) : Tensor();
        Tensor gb = self.next_edges[2].valid() ? scaled(mm(a.t(), g[0])) : Tensor();
        return {gc, ga, gb};
      })) {
    n->save(c);
    n->save(a);
    n->save(b);
  }
  return out;
}

Tensor bmm(const Tensor& a0, const Tensor& b0) {
  auto in = ops::autocast(OpId::bmm, {a0, b0});
  const Tensor &a = in[0], &b = in[1];
  MPX_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm: cannot multiply ",
            ops::describe(a), " by ", ops::describe(b), "; expected [B, n, k] @ [B, k, m]");
  check_float_pair("bmm", a, b);
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, a.options());
  {
    NoGradGuard ng;
    if (dispatch::has_kernel(OpId::bmm, a.device().type, a.dtype())) {
      dispatch::kernel<OpId::bmm>(a.device(), a.dtype())(out, a, b, 1.0, 0.0);
    } else {
      auto k = dispatch::kernel<OpId::mm>(a.device(), a.dtype());
      for (int64_t i = 0; i < a.size(0); ++i) k(out.select(0, i), a.select(0, i), b.select(0, i), 1.0, 0.0);
    }
  }
  if (auto n = autograd::record("BmmBackward", {a, b}, {out}, [](FunctionNode& self, const tensor_list& g) -> tensor_list {
        Tensor a = self.saved(0), b = self.saved(1);
        return {self.next_edges[0].valid() ? bmm(g[0], b.transpose(1, 2)) : Tensor(),
                self.next_edges[1].valid() ? bmm(a.transpose(1, 2), g[0]) : Tensor()};
      })) {
    n->save(a);
    n->save(b);
  }
  return out;
}

Tensor dot(const Tensor& a0, const Tensor& b0) {
  auto in = ops::autocast(OpId::dot, {a0, b0});
  const Tensor &a = in[0], &b = in[1];
  MPX_CHECK(a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0), "dot: expected two 1-d tensors of one length, got ",
            ops::describe(a), " and ", ops::describe(b));
  return sum(mul(a, b));
}

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  auto in = ops::autocast(OpId::matmul, {a0, b0});
  const Tensor &a = in[0], &b = in[1];
  MPX_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least one dim, got ", ops::describe(a), " and ",
            ops::describe(b));
  if (a.dim() == 1 && b.dim() == 1) return dot(a, b);
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  if (a.dim() == 1 && b.dim() == 2) return mm(a.unsqueeze(0), b).squeeze(0);
  if (a.dim() == 2 && b.dim() == 1) return mm(a, b.unsqueeze(1)).squeeze(1);
  if (b.dim() <= 2) {
    // [..., n, k] @ [k, m]: fold the batch into rows.
    Tensor bb = b.dim() == 1 ? b.unsqueeze(1) : b;
    IntList lead(a.sizes().begin(), a.sizes().end() - 1);
    Tensor r = mm(a.reshape({-1, a.size(-1)}), bb);
    lead.push_back(bb.size(1));
    Tensor out = r.reshape(lead);
    return b.dim() == 1 ? out.squeeze(-1) : out;
  }
  // Batched with broadcasting over the leading dims.
  Tensor aa = a.dim() == 1 ? a.unsqueeze(0) : a;
  IntList ba(aa.sizes().begin(), aa.sizes().end() - 2), bbz(b.sizes().begin(), b.sizes().end() - 2);
  IntList batch = broadcast_shapes(ba, bbz, "matmul");
  IntList ea = batch, eb = batch;
  ea.push_back(aa.size(-2)); ea.push_back(aa.size(-1));
  eb.push_back(b.size(-2)); eb.push_back(b.size(-1));
  const int64_t B = numel_of(batch);
  Tensor r = bmm(aa.expand(ea).reshape({B, aa.size(-2), aa.size(-1)}), b.expand(eb).reshape({B, b.size(-2), b.size(-1)}));
  IntList out_shape = batch;
  out_shape.push_back(aa.size(-2));
  out_shape.push_back(b.size(-1));
  Tensor out = r.reshape(out_shape);
  return a.dim() == 1 ? out.squeeze(-2) : out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return linear_impl("linear", x, w, b, kernels::GemmEpilogue::kBias);
}

Tensor linear_relu(const Tensor& x, const Tensor& w, const Tensor& b) {
  return linear_impl("linear_relu", x, w, b, kernels::GemmEpilogue::kBiasRelu);
}

Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, const std::string& approximate) {
  MPX_CHECK(approximate == "none" || approximate == "tanh", "linear_gelu: approximate must be \"none\" or \"tanh\", got \"",
            approximate, "\"");
  return linear_impl("linear_gelu", x, w, b,
                     approximate == "tanh" ? kernels::GemmEpilogue::kBiasGeluTanh : kernels::GemmEpilogue::kBiasGeluErf);
}

Tensor Tensor::matmul(const Tensor& o) const { return mpx::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return mpx::mm(*this, o); }
Tensor Tensor::bmm(const Tensor& o) const { return mpx::bmm(*this, o); }

}  // namespace mpx
