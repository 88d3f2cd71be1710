// scaled_dot_product_attention: checks, autocast, the fused kernels with their autograd node, and the math path.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "autograd/grad_mode.h"
#include "core/random.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace {
using autograd::FunctionNode;

constexpr double kInf = std::numeric_limits<double>::infinity();
// The widest head the CUDA kernels take (ops/cuda/attention_launch.h); wider ones run the math path.
constexpr int64_t kCudaMaxHeadDim = 256;

// The op's inputs as the kernels see them: 4-d [B, H, L, E] / [B, Hk, S, E] / [B, Hk, S, Ev]
// views (differentiable, so gradients reach the caller's tensors), the mask as an additive
// [B, H, L, S] view in the compute dtype, and the result's shape.
struct Prepared {
  Tensor q, k, v, mask;
  IntList out_shape;
  DType cdt = kFloat32;  // softmax statistics and the mask: f64 for f64 inputs, f32 otherwise
  double scale = 1.0, dropout_p = 0.0;
  bool causal = false;
  int64_t B = 1, H = 1, Hk = 1, L = 0, S = 0, E = 0, Ev = 0;
};

std::string shape_of(const Tensor& t) { return shape_str(t.sizes()); }

Prepared prepare(const char* op, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& mask0,
                 double dropout_p, bool is_causal, std::optional<double> scale, bool enable_gqa) {
  MPX_CHECK(q0.defined() && k0.defined() && v0.defined(), op, ": query, key and value must all be defined");
  ops::common_device(op, {q0, k0, v0, mask0});
  auto in = ops::autocast(OpId::scaled_dot_product_attention, {q0, k0, v0});
  Prepared p;
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  MPX_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), op,
            ": query, key and value must share one floating dtype, got query ", ops::describe(q), ", key ",
            ops::describe(k), ", value ", ops::describe(v), "; convert them with .to(dtype)");
  const int64_t nd = q.dim();
  MPX_CHECK(nd >= 2 && k.dim() == nd && v.dim() == nd, op, ": query [..., L, E], key [..., S, E] and value [..., S, Ev] "
            "must have the same number (>= 2) of dims, got query ", shape_of(q), ", key ", shape_of(k), ", value ",
            shape_of(v));
  p.L = q.size(-2), p.E = q.size(-1), p.S = k.size(-2), p.Ev = v.size(-1);
  MPX_CHECK(k.size(-1) == p.E, op, ": key's last dim (", k.size(-1), ") must equal query's (", p.E, "), got query ",
            shape_of(q), " and key ", shape_of(k));
  MPX_CHECK(v.size(-2) == p.S, op, ": value must have as many rows as key (", p.S, "), got key ", shape_of(k),
            " and value ", shape_of(v));
  for (int64_t d = 0; d + 2 < nd; ++d) {
    const bool head_dim = d == nd - 3;
    MPX_CHECK(k.size(d) == v.size(d), op, ": key ", shape_of(k), " and value ", shape_of(v),
              " must have the same batch and head dims");
    if (head_dim && q.size(d) != k.size(d)) {
      MPX_CHECK(enable_gqa, op, ": query has ", q.size(d), " heads (dim -3) but key and value have ", k.size(d),
                "; pass enable_gqa = true for grouped-query attention, or give them the same head count");
      MPX_CHECK(k.size(d) > 0 && q.size(d) % k.size(d) == 0, op, ": grouped-query attention needs query's head count (",
                q.size(d), ") to be a multiple of key's and value's (", k.size(d), ")");
      continue;
    }
    MPX_CHECK(q.size(d) == k.size(d), op, ": query ", shape_of(q), " and key ", shape_of(k),
              " must have the same batch dims (only the head dim -3 may differ, with enable_gqa)");
  }
  MPX_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, op, ": dropout_p must be in [0, 1], got ", dropout_p);
  MPX_CHECK(!(is_causal && mask0.defined()), op, ": attn_mask and is_causal = true cannot be combined (as in PyTorch); "
            "fold the causal mask into attn_mask or drop one of them");
  p.cdt = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  MPX_CHECK(!scale || std::isfinite(*scale), op, ": scale must be a finite number, got ", scale ? *scale : 0.0,
            "; leave it unset for 1/sqrt(head dim)");
  p.scale = scale ? *scale : (p.E > 0 ? 1.0 / std::sqrt(static_cast<double>(p.E)) : 1.0);
  p.dropout_p = dropout_p;
  p.causal = is_causal;

  // Every dim before the last two is batch; the last of them (if any) is the head dim.
  IntList batch(q.sizes().begin(), q.sizes().end() - 2);
  p.H = nd >= 3 ? q.size(-3) : 1;
  p.Hk = nd >= 3 ? k.size(-3) : 1;
  p.B = 1;
  for (int64_t d = 0; d + 3 < nd; ++d) p.B *= q.size(d);
  auto four_d = [&](const Tensor& t, int64_t heads, int64_t rows, int64_t cols) {
    Tensor r = t.reshape({p.B, heads, rows, cols});
    return r.stride(3) == 1 || cols <= 1 ? r : r.contiguous();
  };
  p.q = four_d(q, p.H, p.L, p.E);
  p.k = four_d(k, p.Hk, p.S, p.E);
  p.v = four_d(v, p.Hk, p.S, p.Ev);
  p.out_shape = batch;
  p.out_shape.push_back(p.L);
  p.out_shape.push_back(p.Ev);

  if (mask0.defined()) {
    MPX_CHECK(mask0.dtype() == kBool || is_floating(mask0.dtype()), op,
              ": attn_mask must be bool (true = take part) or floating (added to the scores), got ",
              ops::describe(mask0));
    IntList wshape = batch;
    wshape.push_back(p.L);
    wshape.push_back(p.S);
    bool ok = mask0.dim() <= static_cast<int64_t>(wshape.size());
    for (int64_t d = 1; ok && d <= mask0.dim(); ++d) {
      const int64_t m = mask0.size(-d), f = wshape[wshape.size() - d];
      ok = m == f || m == 1;
    }
    MPX_CHECK(ok, op, ": attn_mask ", ops::describe(mask0), " does not broadcast to the attention weights' shape ",
              shape_str(wshape), " ([..., L, S] for query ", shape_of(q), " and key ", shape_of(k), ")");
    Tensor additive;
    if (mask0.dtype() == kBool) {
      NoGradGuard ng;
      const TensorOptions o = TensorOptions(p.cdt).device(mask0.device());
      additive = where(mask0, zeros({}, o), full({}, -kInf, o));
    } else {
      additive = mask0.to(p.cdt);
    }
    p.mask = additive.expand(wshape).reshape({p.B, p.H, p.L, p.S});
  }
  return p;
}

// The math path on prepared inputs: [B, H, L, Ev].
Tensor math_attention(const Prepared& p) {
  Tensor k = p.k, v = p.v;
  if (p.Hk != p.H) {  // repeat_interleave over heads: query head h reads kv head h / (H / Hk)
    const int64_t g = p.H / p.Hk;
    k = k.unsqueeze(2).expand({p.B, p.Hk, g, p.S, p.E}).reshape({p.B, p.H, p.S, p.E});
    v = v.unsqueeze(2).expand({p.B, p.Hk, g, p.S, p.Ev}).reshape({p.B, p.H, p.S, p.Ev});
  }
  Tensor s = matmul(p.q, k.transpose(-2, -1)).to(p.cdt) * p.scale;
  const TensorOptions o = TensorOptions(p.cdt).device(p.q.device());
  if (p.mask.defined()) s = s + p.mask;
  if (p.causal) {
    Tensor upper;
    {
      NoGradGuard ng;
      const Tensor i = arange(static_cast<double>(p.L), TensorOptions(kInt64).device(p.q.device())).reshape({p.L, 1});
      const Tensor j = arange(static_cast<double>(p.S), TensorOptions(kInt64).device(p.q.device())).reshape({1, p.S});
      upper = where(gt(j, i), full({}, -kInf, o), zeros({}, o));
    }
    s = s + upper;
  }
  Tensor attn;
  if (p.mask.defined() && p.S > 0) {
    // Rows whose keys are all masked: a uniform softmax over zeros (finite gradients), then 0.
    Tensor dead;
    {
      NoGradGuard ng;
      dead = eq(amax(s.detach(), {-1}, true), -kInf);
    }
    const Tensor zero = zeros({}, o);
    attn = where(dead, zero, softmax(where(dead, zero, s), -1));
  } else {
    attn = softmax(s, -1);
  }
  if (p.dropout_p > 0.0) attn = dropout(attn, p.dropout_p, true);
  return matmul(attn.to(p.q.dtype()), v);
}

// The fused backward's own backward: PyTorch's fused kernels have none either.
tensor_list no_double_backward(FunctionNode&, const tensor_list&) {
  MPX_ERROR("scaled_dot_product_attention: the fused kernel's backward is not differentiable (a second derivative "
            "through it was requested); compute second derivatives with mpx::scaled_dot_product_attention_math, "
            "which takes the same arguments");
}

// An uninitialized [B, H, rows, cols] tensor for a result shaped like `like` (a 4-d q, k or v). On
// the CPU its dims lie in memory in like's order (largest stride first, the last dim last), so a
// head-split view of [B, T, H, D] gets a [B, T, H, D]-ordered result whose transpose back is a
// view: the kernels read and write rows through strides, and no head transpose is copied around
// the call. The CUDA kernels take contiguous tensors.
Tensor empty_in_order(const Tensor& like, const IntList& sizes) {
  if (!like.device().is_cpu()) return empty(sizes, like.options());
  IntList perm = {0, 1, 2};
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  perm.push_back(3);
  IntList base(4), inverse(4);
  for (int64_t i = 0; i < 4; ++i) {
    base[static_cast<size_t>(i)] = sizes[static_cast<size_t>(perm[static_cast<size_t>(i)])];
    inverse[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
  }
  return empty(base, like.options()).permute(inverse);
}

// Gradient buffers for q, k and v. When they are the heads of one [B, T, 3 H D] projection split
// as GPT-2 splits it (c_attn(x).split(C, 2), each piece viewed [B, T, H, D] and transposed), the
// three gradients are the same views of one buffer, so the split's backward takes that buffer
// whole instead of concatenating three copies. CPU only (the CUDA kernels take contiguous
// tensors), and not under create_graph, where the views would need histories of their own.
tensor_list gradient_buffers(const Tensor& q, const Tensor& k, const Tensor& v) {
  const auto& st = q.impl()->storage;
  if (q.device().is_cpu() && !GradMode::is_enabled() && q.dtype() == k.dtype() && q.dtype() == v.dtype() &&
      q.sizes() == k.sizes() && q.sizes() == v.sizes() && q.strides() == k.strides() && q.strides() == v.strides() &&
      k.impl()->storage == st && v.impl()->storage == st) {
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), W = H * D;
    if (q.stride(3) == 1 && q.stride(1) == D && q.stride(2) == 3 * W && q.stride(0) == T * 3 * W &&
        k.storage_offset() - q.storage_offset() == W && v.storage_offset() - k.storage_offset() == W) {
      Tensor g = empty({B, T, 3 * W}, q.options());
      auto heads = [&](int64_t i) { return g.narrow(2, i * W, W).view({B, T, H, D}).transpose(1, 2); };
      return {heads(0), heads(1), heads(2)};
    }
  }
  return {empty_in_order(q, q.sizes()), empty_in_order(k, k.sizes()), empty_in_order(v, v.sizes())};
}

Tensor fused_attention(const Prepared& p) {
  const Device dev = p.q.device();
  const DType dt = p.q.dtype();
  Tensor out = empty_in_order(p.q, {p.B, p.H, p.L, p.Ev});
  Tensor lse = empty({p.B, p.H, p.L}, TensorOptions(p.cdt).device(dev));
  kernels::SdpaParams prm;
  prm.scale = p.scale;
  prm.causal = p.causal;
  prm.dropout_p = p.dropout_p;
  prm.recorded = GradMode::is_enabled() && (p.q.requires_grad() || p.k.requires_grad() || p.v.requires_grad());
  if (p.dropout_p > 0.0) {
    // The same positions dropout() would reserve for the [B, H, L, S] weights: the math path
    // draws the identical mask from the same generator state.
    auto [seed, offset] = random::default_generator().reserve(static_cast<uint64_t>(p.B * p.H * p.L * p.S));
    prm.seed = seed;
    prm.offset = offset;
  }
  const Tensor mask = p.mask.defined() ? p.mask.detach() : Tensor();
  if (lse.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<OpId::sdpa_fused>(dev, dt)(out, lse, p.q.detach(), p.k.detach(), p.v.detach(), mask, prm);
  }
  auto backward = [prm](FunctionNode& self, const tensor_list& g) -> tensor_list {
    const Tensor q = self.saved(0), k = self.saved(1), v = self.saved(2), o = self.saved(3), lse = self.saved(4),
                 mask = self.saved(5);
    Tensor dout = g[0].to(q.dtype());
    if (!q.device().is_cpu() || (dout.stride(3) != 1 && dout.size(3) > 1)) dout = dout.contiguous();
    const tensor_list d = gradient_buffers(q, k, v);
    const Tensor &dq = d[0], &dk = d[1], &dv = d[2];
    {
      NoGradGuard ng;
      if (dq.numel() + dk.numel() + dv.numel() > 0)
        dispatch::kernel<OpId::sdpa_fused_backward>(q.device(), q.dtype())(
            dq, dk, dv, dout.detach(), q.detach(), k.detach(), v.detach(), o.detach(), lse, mask, prm);
    }
    // With create_graph the gradients join the graph through a node that refuses to be
    // differentiated, so a first-order create_graph pass still works and a second one says why.
    autograd::record("ScaledDotProductAttentionBackwardBackward", {g[0], q, k, v}, {dq, dk, dv}, no_double_backward);
    return {dq, dk, dv};
  };
  if (auto n = autograd::record("ScaledDotProductAttentionBackward", {p.q, p.k, p.v}, {out}, backward)) {
    n->save(p.q);
    n->save(p.k);
    n->save(p.v);
    n->save(out, true);
    n->save(lse);
    n->save(mask);
  }
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa) {
  const char* op = "scaled_dot_product_attention";
  const Prepared p = prepare(op, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  // A mask that needs its own gradient takes the math path: the kernels give none.
  const bool mask_grad = p.mask.defined() && p.mask.requires_grad() && GradMode::is_enabled();
  // The CUDA kernel keeps a row of head dims per thread: up to kCudaMaxHeadDim.
  const bool too_wide = p.q.device().is_cuda() && std::max(p.E, p.Ev) > kCudaMaxHeadDim;
  const bool fused =
      !mask_grad && !too_wide && dispatch::has_kernel(OpId::sdpa_fused, p.q.device().type, p.q.dtype());
  return (fused ? fused_attention(p) : math_attention(p)).reshape(p.out_shape);
}

Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key, const Tensor& value,
                                         const Tensor& attn_mask, double dropout_p, bool is_causal,
                                         std::optional<double> scale, bool enable_gqa) {
  const Prepared p = prepare("scaled_dot_product_attention_math", query, key, value, attn_mask, dropout_p, is_causal,
                             scale, enable_gqa);
  return math_attention(p).reshape(p.out_shape);
}

}  // namespace mpx
