// One direction of one LSTM/GRU/Elman layer over a whole sequence, padded or packed, as a single autograd node: the
// steps run on the device's GEMM and cell kernels into whole-sequence buffers, and the backward forms the recurrent
// weight's gradient in one GEMM over every step's rows.
#include <algorithm>
#include <optional>
#include <vector>

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

// The steps of one direction of a layer, in the order they run (s = 0 first; reversed, time runs T-1 .. 0), over
// flat [rows, *] buffers: time t holds batch_sizes[t] rows (the sequences still running, longest first) after the
// earlier times' rows. A padded [T, N, *] sequence is the case where every time has all N rows.
class Steps {
 public:
  Steps(const Tensor& gi, const std::vector<int64_t>& batch_sizes, bool reverse)
      : bs_(batch_sizes.empty() ? std::vector<int64_t>(static_cast<size_t>(gi.size(0)), gi.size(1)) : batch_sizes),
        off_(bs_.size() + 1, 0),
        reverse_(reverse),
        padded_(batch_sizes.empty()) {
    for (size_t t = 0; t < bs_.size(); ++t) off_[t + 1] = off_[t] + bs_[t];
  }
  int64_t count() const { return static_cast<int64_t>(bs_.size()); }
  int64_t total() const { return off_.back(); }
  bool padded() const { return padded_; }
  int64_t time(int64_t s) const { return reverse_ ? count() - 1 - s : s; }
  int64_t rows(int64_t s) const { return bs_[static_cast<size_t>(time(s))]; }
  // Rows of step s whose state is step s-1's output; the rest, up to rows(s), start from the initial state.
  int64_t carried(int64_t s) const { return s == 0 ? 0 : std::min(rows(s), rows(s - 1)); }
  // Rows of step s that step s+1 goes on with; the rest end at s (their final state is s's output).
  int64_t continued(int64_t s) const { return s + 1 == count() ? 0 : std::min(rows(s), rows(s + 1)); }
  // Step s's rows of a flat buffer.
  Tensor block(const Tensor& flat, int64_t s) const {
    return flat.narrow(0, off_[static_cast<size_t>(time(s))], rows(s));
  }
  // Per-step tensors (indexed by s) concatenated in time order: a flat buffer's layout.
  Tensor in_time_order(std::vector<Tensor> by_step) const {
    if (reverse_) std::reverse(by_step.begin(), by_step.end());
    return cat(by_step, 0);
  }

 private:
  std::vector<int64_t> bs_, off_;
  bool reverse_, padded_;
};

// A [T, N, *] or [rows, *] tensor as the flat [rows, *] the steps index.
Tensor flat(const Tensor& t) { return t.dim() == 3 ? t.reshape({t.size(0) * t.size(1), t.size(2)}) : t; }

// The state step s reads (its rows(s) rows): step s-1's rows of `outs` where carried, the initial state `first`'s
// for the rest; a view where one of them holds it all, else assembled in `scratch` (allocated on first use).
Tensor read_state(const Steps& st, int64_t s, const Tensor& outs, const Tensor& first, Tensor& scratch) {
  const int64_t b = st.rows(s), c = st.carried(s);
  if (c == 0) return first.narrow(0, 0, b);
  const Tensor prev = st.block(outs, s - 1).narrow(0, 0, c);
  if (c == b) return prev;
  if (!scratch.defined()) scratch = empty(first.sizes(), first.options());
  Tensor buf = scratch.narrow(0, 0, b);
  buf.narrow(0, 0, c).copy_(prev);
  buf.narrow(0, c, b - c).copy_(first.narrow(0, c, b - c));
  return buf;
}

// The same as a differentiable graph (create_graph): outs holds each step's output.
Tensor graph_state(const Steps& st, int64_t s, const std::vector<Tensor>& outs, const Tensor& first) {
  const int64_t b = st.rows(s), c = st.carried(s);
  if (c == 0) return first.narrow(0, 0, b);
  const Tensor prev = outs[static_cast<size_t>(s - 1)].narrow(0, 0, c);
  return c == b ? prev : cat({prev, first.narrow(0, c, b - c)}, 0);
}

// Copies step s's rows that end there from `outs` into the final state `last`.
void keep_final(const Steps& st, int64_t s, const Tensor& outs, const Tensor& last) {
  const int64_t b = st.rows(s), k = st.continued(s);
  if (k < b) last.narrow(0, k, b - k).copy_(st.block(outs, s).narrow(0, k, b - k));
}

// The states every step read, in the flat layout ([rows, R]): what a recurrent weight's gradient multiplies.
Tensor previous_states(const Steps& st, const Tensor& outs, const Tensor& first) {
  const Tensor prev = empty({st.total(), first.size(1)}, first.options());
  Tensor unused;
  for (int64_t s = 0; s < st.count(); ++s) st.block(prev, s).copy_(read_state(st, s, outs, first, unused));
  return prev;
}

// The recurrent weight's gradient in one GEMM: every step's gate gradients d [rows, G] against the states the
// steps read (zeros for an empty sequence).
Tensor recurrent_weight_grad(const Steps& st, const Tensor& d, const Tensor& outs, const Tensor& first,
                             const Tensor& w_hh) {
  if (d.numel() == 0) return zeros(w_hh.sizes(), w_hh.options());
  return mm(d.t(), previous_states(st, outs, first));
}

// The kernel backward's state gradients, in place: `now` [N, *] holds the gradient of the state each row's latest
// step (in the backward's order) produced, starting at the final state's; `initial` collects the initial state's
// rows as the steps that start them are passed (the whole of `now` when the first step starts every row).
struct StateGrad {
  Tensor now, initial;
  StateGrad(const tensor_list& g, size_t k, const Tensor& like) : now(dense_grad(g[k], like).clone()) {}
  Tensor rows(const Steps& st, int64_t s) const { return now.narrow(0, 0, st.rows(s)); }
  // After step s wrote the gradient of the state it read into rows(s) rows of `now`.
  void passed(const Steps& st, int64_t s) {
    const int64_t b = st.rows(s), c = st.carried(s);
    if (c == b || (c == 0 && b == now.size(0) && !initial.defined())) return;
    if (!initial.defined()) initial = empty(now.sizes(), now.options());
    initial.narrow(0, c, b - c).copy_(now.narrow(0, c, b - c));
  }
  Tensor result() const { return initial.defined() ? initial : now; }
};

// The same for graphs (create_graph): `now` is replaced rather than written, and the initial state's rows are
// gathered as pieces (they arrive last rows first).
struct GraphStateGrad {
  Tensor now;
  std::vector<Tensor> pieces;
  Tensor rows(const Steps& st, int64_t s) const { return now.narrow(0, 0, st.rows(s)); }
  void passed(const Steps& st, int64_t s, const Tensor& d) {
    const int64_t b = st.rows(s), c = st.carried(s), n = now.size(0);
    if (c < b) pieces.push_back(d.narrow(0, c, b - c));
    if (c > 0) now = c == n ? d : cat({d.narrow(0, 0, c), now.narrow(0, c, n - c)}, 0);
  }
  Tensor result() const {
    std::vector<Tensor> p(pieces.rbegin(), pieces.rend());
    return p.size() == 1 ? p[0] : cat(p, 0);
  }
};

// The outputs' gradient as the flat [rows, R] buffer (undefined when none came).
Tensor output_grad(const tensor_list& g, const Tensor& out) { return g[0].defined() ? flat(dense_grad(g[0], out)) : Tensor(); }

// Drops the gradients of inputs that need none.
tensor_list only_wanted(FunctionNode& self, tensor_list r) {
  for (size_t i = 0; i < r.size(); ++i)
    if (i >= self.next_edges.size() || !self.next_edges[i].valid()) r[i] = Tensor();
  return r;
}

// The LSTM layer's gradients as a differentiable graph (create_graph): the steps recomputed from the saved
// inputs, then the cell formulas (and the projection, when w_hr is defined) run backward.
tensor_list lstm_layer_backward_graph(const tensor_list& g, const Tensor& gi0, const Tensor& h0, const Tensor& c0,
                                      const Tensor& w_hh, const Tensor& w_hr, const Steps& st) {
  const Tensor gi = flat(gi0), w_t = w_hh.t();
  const size_t n = static_cast<size_t>(st.count());
  std::vector<Tensor> gates(n), cprev(n), hprev(n), hcell(n), hs(n), cs(n);
  for (int64_t s = 0; s < st.count(); ++s) {
    const size_t k = static_cast<size_t>(s);
    hprev[k] = graph_state(st, s, hs, h0);
    cprev[k] = graph_state(st, s, cs, c0);
    gates[k] = addmm(st.block(gi, s), hprev[k], w_t);
    std::tie(hs[k], cs[k]) = lstm_cell_fused(gates[k], cprev[k]);
    if (w_hr.defined()) {
      hcell[k] = hs[k];
      hs[k] = mm(hs[k], w_hr.t());
    }
  }
  const Tensor dout = g[0].defined() ? flat(g[0]).to(h0.dtype()) : Tensor();
  GraphStateGrad dh{dense_grad(g[1], h0), {}}, dc{dense_grad(g[2], c0), {}};
  tensor_list dgi(n), dproj(n);
  for (int64_t s = st.count() - 1; s >= 0; --s) {
    const size_t k = static_cast<size_t>(s);
    Tensor d = dh.rows(st, s);
    if (dout.defined()) d = d + st.block(dout, s);
    if (w_hr.defined()) {
      dproj[k] = d;
      d = mm(d, w_hr);
    }
    tensor_list r = lstm_cell_backward_composite(d, dc.rows(st, s), gates[k], cprev[k]);
    dgi[k] = r[0];
    dh.passed(st, s, mm(r[0], w_hh));
    dc.passed(st, s, r[1]);
  }
  const Tensor d = st.in_time_order(dgi);
  const Tensor dw_hr = w_hr.defined() ? mm(st.in_time_order(dproj).t(), st.in_time_order(hcell)) : Tensor();
  return {d.view(gi0.sizes()), dh.result(), dc.result(), mm(d.t(), st.in_time_order(hprev)), dw_hr};
}

// The GRU layer's likewise.
tensor_list gru_layer_backward_graph(const tensor_list& g, const Tensor& gi0, const Tensor& h0, const Tensor& w_hh,
                                     const Tensor& b_hh, const Steps& st) {
  const Tensor gi = flat(gi0);
  const size_t n = static_cast<size_t>(st.count());
  std::vector<Tensor> gh(n), hprev(n), hs(n);
  for (int64_t s = 0; s < st.count(); ++s) {
    const size_t k = static_cast<size_t>(s);
    hprev[k] = graph_state(st, s, hs, h0);
    gh[k] = linear(hprev[k], w_hh, b_hh);
    hs[k] = gru_cell_fused(st.block(gi, s), gh[k], hprev[k]);
  }
  const Tensor dout = g[0].defined() ? flat(g[0]).to(h0.dtype()) : Tensor();
  GraphStateGrad dh{dense_grad(g[1], h0), {}};
  tensor_list dgi(n), dgh(n);
  for (int64_t s = st.count() - 1; s >= 0; --s) {
    const size_t k = static_cast<size_t>(s);
    Tensor d = dh.rows(st, s);
    if (dout.defined()) d = d + st.block(dout, s);
    tensor_list r = gru_cell_backward_composite(d, st.block(gi, s), gh[k], hprev[k]);
    dgi[k] = r[0];
    dgh[k] = r[1];
    dh.passed(st, s, r[2] + mm(r[1], w_hh));
  }
  const Tensor d = st.in_time_order(dgh);
  const Tensor db = b_hh.defined() ? sum(d, {0}) : Tensor();
  return {st.in_time_order(dgi).view(gi0.sizes()), dh.result(), mm(d.t(), st.in_time_order(hprev)), db};
}

// An Elman step's pre-activation gradient from dh and the step's output h: tanh' = 1 - h^2, relu' = (h > 0).
Tensor elman_grad(const Tensor& dh, const Tensor& h, bool relu) {
  return relu ? threshold_backward(dh, h, 0.0) : dh * (1.0 - h * h);
}

// The Elman layer's gradients as a differentiable graph (create_graph).
tensor_list elman_layer_backward_graph(const tensor_list& g, const Tensor& gi0, const Tensor& h0, const Tensor& w_hh,
                                       bool relu, const Steps& st) {
  const Tensor gi = flat(gi0), w_t = w_hh.t();
  const size_t n = static_cast<size_t>(st.count());
  std::vector<Tensor> hs(n), hprev(n);
  for (int64_t s = 0; s < st.count(); ++s) {
    const size_t k = static_cast<size_t>(s);
    hprev[k] = graph_state(st, s, hs, h0);
    const Tensor z = addmm(st.block(gi, s), hprev[k], w_t);
    hs[k] = relu ? mpx::relu(z) : mpx::tanh(z);
  }
  const Tensor dout = g[0].defined() ? flat(g[0]).to(h0.dtype()) : Tensor();
  GraphStateGrad dh{dense_grad(g[1], h0), {}};
  tensor_list dgi(n);
  for (int64_t s = st.count() - 1; s >= 0; --s) {
    const size_t k = static_cast<size_t>(s);
    Tensor d = dh.rows(st, s);
    if (dout.defined()) d = d + st.block(dout, s);
    dgi[k] = elman_grad(d, hs[k], relu);
    dh.passed(st, s, mm(dgi[k], w_hh));
  }
  const Tensor d = st.in_time_order(dgi);
  return {d.view(gi0.sizes()), dh.result(), mm(d.t(), st.in_time_order(hprev))};
}
}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_layer(const Tensor& gi0, const Tensor& h00, const Tensor& c00,
                                              const Tensor& w_hh, const Tensor& w_hr, bool reverse,
                                              const std::vector<int64_t>& batch_sizes) {
  const Tensor gi = gi0.contiguous(), h0 = h00.contiguous(), c0 = c00.contiguous();
  const Steps st(gi, batch_sizes, reverse);
  const int64_t H = c0.size(1), R = h0.size(1);
  const bool proj = w_hr.defined();
  const TensorOptions o = gi.options();
  auto shaped = [&](int64_t width) { return st.padded() ? IntList{gi.size(0), gi.size(1), width} : IntList{st.total(), width}; };
  // out holds the (projected) h of every step; hc the cell's own h under a projection (w_hr's gradient reads it).
  const Tensor out = empty(shaped(R), o), cs = empty({st.total(), H}, o), acts = empty({st.total(), 4 * H}, o);
  const Tensor outs = flat(out), hc = proj ? empty({st.total(), H}, o) : outs;
  Tensor hT = h0.clone(), cT = c0.clone();
  if (out.numel() > 0) {
    NoGradGuard ng;
    StepGemm gemm(w_hh.t(), 1.0);
    std::optional<StepGemm> project;
    if (proj) project.emplace(w_hr.t(), 0.0);
    auto cell = dispatch::kernel<OpId::lstm_cell_fused>(gi.device(), gi.dtype());
    const Tensor gates = empty({h0.size(0), 4 * H}, o);
    Tensor hbuf, cbuf;
    for (int64_t s = 0; s < st.count(); ++s) {
      Tensor g = gates.narrow(0, 0, st.rows(s)), hcs = st.block(hc, s);
      g.copy_(st.block(flat(gi), s));
      gemm(g, read_state(st, s, outs, h0, hbuf));
      cell(hcs, st.block(cs, s), st.block(acts, s), g, read_state(st, s, cs, c0, cbuf));
      if (project) (*project)(st.block(outs, s), hcs);
      keep_final(st, s, outs, hT);
      keep_final(st, s, cs, cT);
    }
  }
  auto backward = [st](FunctionNode& self, const tensor_list& g) -> tensor_list {
    const Tensor gi = self.saved(0), h0 = self.saved(1), c0 = self.saved(2), w_hh = self.saved(3), w_hr = self.saved(4);
    const Tensor out = self.saved(5), cs = self.saved(6), acts = self.saved(7);
    if (GradMode::is_enabled() && out.numel() > 0)
      return only_wanted(self, lstm_layer_backward_graph(g, gi, h0, c0, w_hh, w_hr, st));
    const bool proj = w_hr.defined();
    const Tensor outs = flat(out), hc = proj ? self.saved(8) : outs, dout = output_grad(g, out);
    StateGrad dh(g, 1, h0), dc(g, 2, c0);
    Tensor dc_prev = st.padded() ? empty(c0.sizes(), c0.options()) : dc.now.clone();
    Tensor dgi = empty(gi.sizes(), gi.options()), d = flat(dgi);
    // Under a projection: every step's gradient of its projected h (for w_hr's) and of the cell's h.
    const Tensor dproj = proj ? empty(outs.sizes(), outs.options()) : Tensor();
    const Tensor dhc = proj ? empty(c0.sizes(), c0.options()) : dh.now;
    Tensor dw_hr;
    if (out.numel() > 0) {
      StepGemm gemm(w_hh, 0.0);
      std::optional<StepGemm> unproject;
      if (proj) unproject.emplace(w_hr, 0.0);
      auto cell = dispatch::kernel<OpId::lstm_cell_fused_backward>(gi.device(), gi.dtype());
      Tensor cbuf;
      for (int64_t s = st.count() - 1; s >= 0; --s) {
        const int64_t b = st.rows(s);
        Tensor dhs = dh.rows(st, s), ds = st.block(d, s);
        if (dout.defined()) dhs.add_(st.block(dout, s));
        if (unproject) {
          st.block(dproj, s).copy_(dhs);
          (*unproject)(dhc.narrow(0, 0, b), dhs);
        }
        cell(ds, dc_prev.narrow(0, 0, b), dhc.narrow(0, 0, b), dc.rows(st, s), st.block(acts, s),
             read_state(st, s, cs, c0, cbuf), st.block(cs, s));
        std::swap(dc.now, dc_prev);
        gemm(dhs, ds);
        dh.passed(st, s);
        dc.passed(st, s);
      }
      if (proj) dw_hr = mm(dproj.t(), hc);
    } else {
      dgi.zero_();
      if (proj) dw_hr = zeros(w_hr.sizes(), w_hr.options());
    }
    return only_wanted(self, {dgi, dh.result(), dc.result(), recurrent_weight_grad(st, d, outs, h0, w_hh), dw_hr});
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
                                    bool reverse, const std::vector<int64_t>& batch_sizes) {
  const Tensor gi = gi0.contiguous(), h0 = h00.contiguous();
  const Steps st(gi, batch_sizes, reverse);
  const int64_t H = w_hh.size(1);
  const TensorOptions o = gi.options();
  const Tensor out = empty(st.padded() ? IntList{gi.size(0), gi.size(1), H} : IntList{st.total(), H}, o);
  const Tensor outs = flat(out), ws = empty({st.total(), 4 * H}, o);
  Tensor hT = h0.clone();
  if (out.numel() > 0) {
    NoGradGuard ng;
    StepGemm gemm(w_hh.t(), b_hh.defined() ? 1.0 : 0.0);
    auto cell = dispatch::kernel<OpId::gru_cell_fused>(gi.device(), gi.dtype());
    const Tensor gh = empty({h0.size(0), 3 * H}, o);
    Tensor hbuf;
    for (int64_t s = 0; s < st.count(); ++s) {
      const int64_t b = st.rows(s);
      Tensor ghs = gh.narrow(0, 0, b), hp = read_state(st, s, outs, h0, hbuf);
      if (b_hh.defined()) ghs.copy_(b_hh.expand({b, 3 * H}));
      gemm(ghs, hp);
      cell(st.block(outs, s), st.block(ws, s), st.block(flat(gi), s), ghs, hp);
      keep_final(st, s, outs, hT);
    }
  }
  auto backward = [st](FunctionNode& self, const tensor_list& g) -> tensor_list {
    const Tensor gi = self.saved(0), h0 = self.saved(1), w_hh = self.saved(2), b_hh = self.saved(3);
    const Tensor out = self.saved(4), ws = self.saved(5);
    if (GradMode::is_enabled() && out.numel() > 0)
      return only_wanted(self, gru_layer_backward_graph(g, gi, h0, w_hh, b_hh, st));
    const Tensor outs = flat(out), dout = output_grad(g, out);
    StateGrad dh(g, 1, h0);
    Tensor dh_prev = st.padded() ? empty(h0.sizes(), h0.options()) : dh.now.clone();
    Tensor dgi = empty(gi.sizes(), gi.options()), dgh = empty({st.total(), gi.size(-1)}, gi.options());
    if (out.numel() > 0) {
      StepGemm gemm(w_hh, 1.0);
      auto cell = dispatch::kernel<OpId::gru_cell_fused_backward>(gi.device(), gi.dtype());
      Tensor hbuf;
      for (int64_t s = st.count() - 1; s >= 0; --s) {
        const int64_t b = st.rows(s);
        Tensor dhs = dh.rows(st, s), dghs = st.block(dgh, s), prev = dh_prev.narrow(0, 0, b);
        if (dout.defined()) dhs.add_(st.block(dout, s));
        cell(st.block(flat(dgi), s), dghs, prev, dhs, st.block(ws, s), read_state(st, s, outs, h0, hbuf));
        gemm(prev, dghs);  // dh of the state step s read: the cell's direct part plus the recurrence
        std::swap(dh.now, dh_prev);
        dh.passed(st, s);
      }
    } else {
      dgi.zero_();
      dgh.zero_();
    }
    const Tensor db = b_hh.defined() ? sum(dgh, {0}) : Tensor();
    return only_wanted(self, {dgi, dh.result(), recurrent_weight_grad(st, dgh, outs, h0, w_hh), db});
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
                                      bool reverse, const std::vector<int64_t>& batch_sizes) {
  const Tensor gi = gi0.contiguous(), h0 = h00.contiguous();
  const Steps st(gi, batch_sizes, reverse);
  const Tensor out = empty(gi.sizes(), gi.options()), outs = flat(out);
  Tensor hT = h0.clone();
  if (out.numel() > 0) {
    NoGradGuard ng;
    StepGemm gemm(w_hh.t(), 1.0);
    const Tensor zs = empty(h0.sizes(), h0.options());
    Tensor hbuf;
    for (int64_t s = 0; s < st.count(); ++s) {
      Tensor z = zs.narrow(0, 0, st.rows(s));
      z.copy_(st.block(flat(gi), s));
      gemm(z, read_state(st, s, outs, h0, hbuf));
      st.block(outs, s).copy_(relu ? mpx::relu(z) : mpx::tanh(z));
      keep_final(st, s, outs, hT);
    }
  }
  auto backward = [relu, st](FunctionNode& self, const tensor_list& g) -> tensor_list {
    const Tensor gi = self.saved(0), h0 = self.saved(1), w_hh = self.saved(2), out = self.saved(3);
    if (GradMode::is_enabled() && out.numel() > 0)
      return only_wanted(self, elman_layer_backward_graph(g, gi, h0, w_hh, relu, st));
    const Tensor outs = flat(out), dout = output_grad(g, out);
    StateGrad dh(g, 1, h0);
    Tensor dgi = empty(gi.sizes(), gi.options()), d = flat(dgi);
    if (out.numel() > 0) {
      StepGemm gemm(w_hh, 0.0);
      for (int64_t s = st.count() - 1; s >= 0; --s) {
        Tensor dhs = dh.rows(st, s), ds = st.block(d, s);
        if (dout.defined()) dhs.add_(st.block(dout, s));
        ds.copy_(elman_grad(dhs, st.block(outs, s), relu));
        gemm(dhs, ds);
        dh.passed(st, s);
      }
    } else {
      dgi.zero_();
    }
    return only_wanted(self, {dgi, dh.result(), recurrent_weight_grad(st, d, outs, h0, w_hh)});
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
