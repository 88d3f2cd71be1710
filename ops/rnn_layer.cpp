// One direction of one LSTM/GRU/Elman layer over a whole sequence as a single autograd node: the steps run on
// the device's GEMM and cell kernels into whole-sequence buffers, and the backward forms the recurrent
// weight's gradient in one GEMM over every step's rows.
#include <optional>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/rnn.h"
#include "ops/rnn_internal.h"
#include "ops/shape.h"

namespace mpx::rnn_detail {
namespace {
using autograd::FunctionNode;

// out = a @ b + beta * out for every step of one pass with one weight b: b packed once into the device library's
// layout where the device has that kernel (mm_packed: oneDNN on the CPU, 20-30 % off each step's product), the
// plain GEMM kernel otherwise.
class StepGemm {
 public:
  StepGemm(const Tensor& b, double beta)
      : b_(b), beta_(beta), plain_(dispatch::kernel<OpId::mm>(b.device(), b.dtype())) {
    if (dispatch::has_kernel(OpId::mm_packed, b.device().type, b.dtype()))
      packed_ = dispatch::kernel<OpId::mm_packed>(b.device(), b.dtype());
  }
  void operator()(const Tensor& out, const Tensor& a) {
    if (packed_ && packed_(out, a, b_, beta_, plan_)) return;
    packed_ = {};
    plain_(out, a, b_, 1.0, beta_);
  }

 private:
  Tensor b_;
  double beta_;
  dispatch::KernelRef<kernels::GemmFn> plain_;
  dispatch::KernelRef<kernels::GemmPackedFn> packed_;
  std::shared_ptr<void> plan_;
};

// The time index of processing step s (0 = first step run).
int64_t time_of(int64_t s, int64_t T, bool reverse) { return reverse ? T - 1 - s : s; }

// The hidden state each step read, in time order: h0 then out[0 .. T-2] forward, out[1 .. T-1] then h0 reversed.
Tensor previous_states(const Tensor& out, const Tensor& h0, bool reverse) {
  const int64_t T = out.size(0);
  const Tensor first = h0.unsqueeze(0);
  if (T == 1) return first;
  return reverse ? cat({out.narrow(0, 1, T - 1), first}, 0) : cat({first, out.narrow(0, 0, T - 1)}, 0);
}

// One GEMM for a whole-sequence weight gradient: d [T, N, G] (the gate gradients) against the states each
// step read, hprev [T, N, H]: d^T @ hprev, [G, H].
Tensor weight_grad(const Tensor& d, const Tensor& hprev) {
  const int64_t rows = d.size(0) * d.size(1);
  return mm(d.reshape({rows, d.size(2)}).t(), hprev.reshape({rows, hprev.size(2)}));
}

// The kernel backward's start: the outputs' gradient (dense; undefined when none came) and dh of the last
// step run (the final state's gradient plus what that step's output got from above).
std::pair<Tensor, Tensor> backward_seed(const tensor_list& g, const Tensor& out, const Tensor& h0, bool reverse) {
  const int64_t T = out.size(0);
  const Tensor dout = g[0].defined() ? dense_grad(g[0], out) : Tensor();
  Tensor dh = dense_grad(g[1], h0).clone();
  if (dout.defined() && out.numel() > 0) dh.add_(dout.select(0, time_of(T - 1, T, reverse)));
  return {dout, dh};
}

// dh of the step run before step s (h0's after the first): what its output got from above, plus the recurrence
// through the gate gradients d of step s (dh += d @ w_hh on `gemm`).
void recurrent_dh(Tensor& dh, const Tensor& dout, int64_t s, int64_t T, bool reverse, StepGemm& gemm, const Tensor& d) {
  if (s > 0 && dout.defined())
    dh.copy_(dout.select(0, time_of(s - 1, T, reverse)));
  else
    dh.zero_();
  gemm(dh, d);
}

// The recurrent weight's gradient from the gate gradients d [T, N, G] of a layer with outputs out (zeros for
// an empty sequence).
Tensor recurrent_weight_grad(const Tensor& d, const Tensor& out, const Tensor& h0, const Tensor& w_hh, bool reverse) {
  if (out.numel() == 0) return zeros(w_hh.sizes(), w_hh.options());
  return weight_grad(d, previous_states(out, h0, reverse));
}

// The LSTM layer's gradients as a differentiable graph (create_graph): the steps recomputed from the saved
// inputs, then the cell formulas (and the projection, when w_hr is defined) run backward.
tensor_list lstm_layer_backward_graph(const tensor_list& g, const Tensor& gi, const Tensor& h0, const Tensor& c0,
                                      const Tensor& w_hh, const Tensor& w_hr, bool reverse) {
  const int64_t T = gi.size(0);
  const size_t n = static_cast<size_t>(T);
  std::vector<Tensor> gates(n), cprev(n), hprev(n), hcell(n);
  Tensor h = h0, c = c0;
  const Tensor w_t = w_hh.t();
  for (int64_t s = 0; s < T; ++s) {
    const size_t t = static_cast<size_t>(time_of(s, T, reverse));
    hprev[t] = h;
    cprev[t] = c;
    gates[t] = addmm(gi.select(0, static_cast<int64_t>(t)), h, w_t);
    std::tie(h, c) = lstm_cell_fused(gates[t], c);
    if (w_hr.defined()) {
      hcell[t] = h;
      h = mm(h, w_hr.t());
    }
  }
  Tensor dh = dense_grad(g[1], h0), dc = dense_grad(g[2], c0);
  tensor_list dgi(n), dproj(n);
  for (int64_t s = T - 1; s >= 0; --s) {
    const int64_t t = time_of(s, T, reverse);
    const size_t k = static_cast<size_t>(t);
    if (g[0].defined()) dh = dh + g[0].select(0, t).to(h0.dtype());
    if (w_hr.defined()) {
      dproj[k] = dh;
      dh = mm(dh, w_hr);
    }
    tensor_list r = lstm_cell_backward_composite(dh, dc, gates[k], cprev[k]);
    dgi[k] = r[0];
    dc = r[1];
    dh = mm(r[0], w_hh);
  }
  const Tensor d = stack(dgi, 0);
  const Tensor dw_hr = w_hr.defined() ? weight_grad(stack(dproj, 0), stack(hcell, 0)) : Tensor();
  return {d, dh, dc, weight_grad(d, stack(hprev, 0)), dw_hr};
}

// The GRU layer's likewise.
tensor_list gru_layer_backward_graph(const tensor_list& g, const Tensor& gi, const Tensor& h0, const Tensor& w_hh,
                                     const Tensor& b_hh, bool reverse) {
  const int64_t T = gi.size(0);
  std::vector<Tensor> gh(static_cast<size_t>(T)), hprev(static_cast<size_t>(T));
  Tensor h = h0;
  for (int64_t s = 0; s < T; ++s) {
    const size_t t = static_cast<size_t>(time_of(s, T, reverse));
    hprev[t] = h;
    gh[t] = linear(h, w_hh, b_hh);
    h = gru_cell_fused(gi.select(0, static_cast<int64_t>(t)), gh[t], h);
  }
  Tensor dh = dense_grad(g[1], h0);
  tensor_list dgi(static_cast<size_t>(T)), dgh(static_cast<size_t>(T));
  for (int64_t s = T - 1; s >= 0; --s) {
    const int64_t t = time_of(s, T, reverse);
    const size_t k = static_cast<size_t>(t);
    if (g[0].defined()) dh = dh + g[0].select(0, t).to(h0.dtype());
    tensor_list r = gru_cell_backward_composite(dh, gi.select(0, t), gh[k], hprev[k]);
    dgi[k] = r[0];
    dgh[k] = r[1];
    dh = r[2] + mm(r[1], w_hh);
  }
  const Tensor d = stack(dgh, 0);
  const Tensor db = b_hh.defined() ? sum(d.reshape({-1, d.size(2)}), {0}) : Tensor();
  return {stack(dgi, 0), dh, weight_grad(d, stack(hprev, 0)), db};
}

// An Elman step's pre-activation gradient from dh and the step's output h: tanh' = 1 - h^2, relu' = (h > 0).
Tensor elman_grad(const Tensor& dh, const Tensor& h, bool relu) {
  return relu ? threshold_backward(dh, h, 0.0) : dh * (1.0 - h * h);
}

// The Elman layer's gradients as a differentiable graph (create_graph).
tensor_list elman_layer_backward_graph(const tensor_list& g, const Tensor& gi, const Tensor& h0, const Tensor& w_hh,
                                       bool relu, bool reverse) {
  const int64_t T = gi.size(0);
  std::vector<Tensor> hs(static_cast<size_t>(T)), hprev(static_cast<size_t>(T));
  Tensor h = h0;
  const Tensor w_t = w_hh.t();
  for (int64_t s = 0; s < T; ++s) {
    const size_t t = static_cast<size_t>(time_of(s, T, reverse));
    hprev[t] = h;
    const Tensor z = addmm(gi.select(0, static_cast<int64_t>(t)), h, w_t);
    h = hs[t] = relu ? mpx::relu(z) : mpx::tanh(z);
  }
  Tensor dh = dense_grad(g[1], h0);
  tensor_list dgi(static_cast<size_t>(T));
  for (int64_t s = T - 1; s >= 0; --s) {
    const int64_t t = time_of(s, T, reverse);
    const size_t k = static_cast<size_t>(t);
    if (g[0].defined()) dh = dh + g[0].select(0, t).to(h0.dtype());
    dgi[k] = elman_grad(dh, hs[k], relu);
    dh = mm(dgi[k], w_hh);
  }
  const Tensor d = stack(dgi, 0);
  return {d, dh, weight_grad(d, stack(hprev, 0))};
}

// Drops the gradients of inputs that need none.
tensor_list only_wanted(FunctionNode& self, tensor_list r) {
  for (size_t i = 0; i < r.size(); ++i)
    if (i >= self.next_edges.size() || !self.next_edges[i].valid()) r[i] = Tensor();
  return r;
}
}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& gi0, const Tensor& h00, const Tensor& c00,
                                              const Tensor& w_hh, const Tensor& w_hr, bool reverse) {
  const Tensor gi = gi0.contiguous(), h0 = h00.contiguous(), c0 = c00.contiguous();
  const int64_t T = gi.size(0), N = gi.size(1), H = c0.size(1), R = h0.size(1);
  const bool proj = w_hr.defined();
  const Device dev = gi.device();
  const DType dt = gi.dtype();
  const TensorOptions o = gi.options();
  // out holds the (projected) h of every step; hc the cell's own h under a projection (w_hr's gradient reads it).
  const Tensor out = empty({T, N, R}, o), cs = empty({T, N, H}, o), acts = empty({T, N, 4 * H}, o);
  const Tensor hc = proj ? empty({T, N, H}, o) : out;
  Tensor hT = h0.clone(), cT = c0.clone();
  if (out.numel() > 0) {
    NoGradGuard ng;
    StepGemm gemm(w_hh.t(), 1.0);
    std::optional<StepGemm> project;
    if (proj) project.emplace(w_hr.t(), 0.0);
    auto cell = dispatch::kernel<OpId::lstm_cell_fused>(dev, dt);
    Tensor gates = empty({N, 4 * H}, o);
    Tensor h = h0, c = c0;
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = time_of(s, T, reverse);
      gates.copy_(gi.select(0, t));
      gemm(gates, h);
      const Tensor ht = out.select(0, t), ct = cs.select(0, t);
      cell(hc.select(0, t), ct, acts.select(0, t), gates, c);
      if (project) (*project)(ht, hc.select(0, t));
      h = ht;
      c = ct;
    }
    hT.copy_(h);
    cT.copy_(c);
  }
  auto backward = [reverse](FunctionNode& self, const tensor_list& g) -> tensor_list {
    const Tensor gi = self.saved(0), h0 = self.saved(1), c0 = self.saved(2), w_hh = self.saved(3), w_hr = self.saved(4);
    if (GradMode::is_enabled())
      return only_wanted(self, lstm_layer_backward_graph(g, gi, h0, c0, w_hh, w_hr, reverse));
    const Tensor out = self.saved(5), cs = self.saved(6), acts = self.saved(7);
    const bool proj = w_hr.defined();
    const Tensor hc = proj ? self.saved(8) : out;
    const int64_t T = out.size(0);
    auto [dout, dh] = backward_seed(g, out, h0, reverse);
    Tensor dc = dense_grad(g[2], c0).clone(), dc_prev = empty(c0.sizes(), c0.options());
    Tensor dgi = empty(gi.sizes(), gi.options());
    // Under a projection: every step's gradient of its projected h (for w_hr's) and of the cell's h.
    const Tensor dproj = proj ? empty(out.sizes(), out.options()) : Tensor();
    const Tensor dhc = proj ? empty(c0.sizes(), c0.options()) : dh;
    Tensor dw_hr;
    if (out.numel() > 0) {
      StepGemm gemm(w_hh, 1.0);
      std::optional<StepGemm> unproject;
      if (proj) unproject.emplace(w_hr, 0.0);
      auto cell = dispatch::kernel<OpId::lstm_cell_fused_backward>(gi.device(), gi.dtype());
      for (int64_t s = T - 1; s >= 0; --s) {
        const int64_t t = time_of(s, T, reverse);
        const Tensor c_prev = s == 0 ? c0 : cs.select(0, time_of(s - 1, T, reverse));
        const Tensor d = dgi.select(0, t);
        if (unproject) {
          dproj.select(0, t).copy_(dh);
          (*unproject)(dhc, dh);
        }
        cell(d, dc_prev, dhc, dc, acts.select(0, t), c_prev, cs.select(0, t));
        std::swap(dc, dc_prev);
        recurrent_dh(dh, dout, s, T, reverse, gemm, d);
      }
      if (proj) dw_hr = weight_grad(dproj, hc);
    } else {
      dgi.zero_();
      if (proj) dw_hr = zeros(w_hr.sizes(), w_hr.options());
    }
    return only_wanted(self, {dgi, dh, dc, recurrent_weight_grad(dgi, out, h0, w_hh, reverse), dw_hr});
  };
  if (auto n = autograd::record(reverse ? "LstmLayerReverseBackward" : "LstmLayerBackward", {gi, h0, c0, w_hh, w_hr},
                                {out, hT, cT}, backward)) {
    for (const Tensor& t : {gi, h0, c0, w_hh, w_hr}) n->save(t);
    n->save(out, true);
    n->save(cs);
    n->save(acts);
    if (proj) n->save(hc);
  }
  return {out, hT, cT};
}

std::pair<Tensor, Tensor> gru_layer(const Tensor& gi0, const Tensor& h00, const Tensor& w_hh, const Tensor& b_hh,
                                    bool reverse) {
  const Tensor gi = gi0.contiguous(), h0 = h00.contiguous();
  const int64_t T = gi.size(0), N = gi.size(1), H = w_hh.size(1);
  const Device dev = gi.device();
  const DType dt = gi.dtype();
  const TensorOptions o = gi.options();
  const Tensor out = empty({T, N, H}, o), ws = empty({T, N, 4 * H}, o);
  Tensor hT = h0.clone();
  if (out.numel() > 0) {
    NoGradGuard ng;
    StepGemm gemm(w_hh.t(), b_hh.defined() ? 1.0 : 0.0);
    auto cell = dispatch::kernel<OpId::gru_cell_fused>(dev, dt);
    Tensor gh = empty({N, 3 * H}, o);
    Tensor h = h0;
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = time_of(s, T, reverse);
      if (b_hh.defined()) gh.copy_(b_hh.expand({N, 3 * H}));
      gemm(gh, h);
      const Tensor ht = out.select(0, t);
      cell(ht, ws.select(0, t), gi.select(0, t), gh, h);
      h = ht;
    }
    hT.copy_(h);
  }
  auto backward = [reverse](FunctionNode& self, const tensor_list& g) -> tensor_list {
    const Tensor gi = self.saved(0), h0 = self.saved(1), w_hh = self.saved(2), b_hh = self.saved(3);
    if (GradMode::is_enabled()) return only_wanted(self, gru_layer_backward_graph(g, gi, h0, w_hh, b_hh, reverse));
    const Tensor out = self.saved(4), ws = self.saved(5);
    const int64_t T = out.size(0);
    auto [dout, dh] = backward_seed(g, out, h0, reverse);
    Tensor dh_prev = empty(h0.sizes(), h0.options());
    Tensor dgi = empty(gi.sizes(), gi.options()), dgh = empty(gi.sizes(), gi.options());
    if (out.numel() > 0) {
      StepGemm gemm(w_hh, 1.0);
      auto cell = dispatch::kernel<OpId::gru_cell_fused_backward>(gi.device(), gi.dtype());
      for (int64_t s = T - 1; s >= 0; --s) {
        const int64_t t = time_of(s, T, reverse);
        const Tensor hp = s == 0 ? h0 : out.select(0, time_of(s - 1, T, reverse));
        cell(dgi.select(0, t), dgh.select(0, t), dh_prev, dh, ws.select(0, t), hp);
        // dh of the step run before: the cell's direct part, the recurrence, and what its output got from above.
        gemm(dh_prev, dgh.select(0, t));
        if (s > 0 && dout.defined()) dh_prev.add_(dout.select(0, time_of(s - 1, T, reverse)));
        std::swap(dh, dh_prev);
      }
    } else {
      dgi.zero_();
      dgh.zero_();
    }
    const Tensor db = b_hh.defined() ? sum(dgh.reshape({-1, dgh.size(2)}), {0}) : Tensor();
    return only_wanted(self, {dgi, dh, recurrent_weight_grad(dgh, out, h0, w_hh, reverse), db});
  };
  if (auto n = autograd::record(reverse ? "GruLayerReverseBackward" : "GruLayerBackward", {gi, h0, w_hh, b_hh},
                                {out, hT}, backward)) {
    for (const Tensor& t : {gi, h0, w_hh, b_hh}) n->save(t);
    n->save(out, true);
    n->save(ws);
  }
  return {out, hT};
}

std::pair<Tensor, Tensor> elman_layer(const Tensor& gi0, const Tensor& h00, const Tensor& w_hh, bool relu,
                                      bool reverse) {
  const Tensor gi = gi0.contiguous(), h0 = h00.contiguous();
  const int64_t T = gi.size(0);
  const Tensor out = empty(gi.sizes(), gi.options());
  Tensor hT = h0.clone();
  if (out.numel() > 0) {
    NoGradGuard ng;
    StepGemm gemm(w_hh.t(), 1.0);
    Tensor z = empty(h0.sizes(), h0.options());
    Tensor h = h0;
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = time_of(s, T, reverse);
      z.copy_(gi.select(0, t));
      gemm(z, h);
      Tensor ht = out.select(0, t);
      ht.copy_(relu ? mpx::relu(z) : mpx::tanh(z));
      h = ht;
    }
    hT.copy_(h);
  }
  auto backward = [relu, reverse](FunctionNode& self, const tensor_list& g) -> tensor_list {
    const Tensor gi = self.saved(0), h0 = self.saved(1), w_hh = self.saved(2);
    if (GradMode::is_enabled()) return only_wanted(self, elman_layer_backward_graph(g, gi, h0, w_hh, relu, reverse));
    const Tensor out = self.saved(3);
    const int64_t T = out.size(0);
    auto [dout, dh] = backward_seed(g, out, h0, reverse);
    Tensor dgi = empty(gi.sizes(), gi.options());
    if (out.numel() > 0) {
      StepGemm gemm(w_hh, 1.0);
      for (int64_t s = T - 1; s >= 0; --s) {
        const int64_t t = time_of(s, T, reverse);
        Tensor d = dgi.select(0, t);
        d.copy_(elman_grad(dh, out.select(0, t), relu));
        recurrent_dh(dh, dout, s, T, reverse, gemm, d);
      }
    } else {
      dgi.zero_();
    }
    return only_wanted(self, {dgi, dh, recurrent_weight_grad(dgi, out, h0, w_hh, reverse)});
  };
  const char* name = relu ? (reverse ? "RnnReluLayerReverseBackward" : "RnnReluLayerBackward")
                          : (reverse ? "RnnTanhLayerReverseBackward" : "RnnTanhLayerBackward");
  if (auto n = autograd::record(name, {gi, h0, w_hh}, {out, hT}, backward)) {
    for (const Tensor& t : {gi, h0, w_hh}) n->save(t);
    n->save(out, true);
  }
  return {out, hT};
}

}  // namespace mpx::rnn_detail
