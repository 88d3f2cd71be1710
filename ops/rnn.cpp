// LSTM, GRU and Elman RNNs: the fused pointwise cells (kernel forward and backward, a differentiable
// backward formula when the backward is recorded), the cells with their GEMMs, and the sequence ops
// that loop over directions and layers (each layer's steps are one node, ops/rnn_layer.cpp).
#include "ops/rnn.h"

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/op_utils.h"
#include "ops/rnn_internal.h"
#include "ops/shape.h"

namespace mpx {
namespace rnn_detail {
namespace {
DType compute_dtype(DType dt) { return dt == kFloat64 ? kFloat64 : kFloat32; }
}  // namespace

Tensor dense_grad(const Tensor& g, const Tensor& like) {
  if (!g.defined()) return zeros(like.sizes(), like.options());
  return (g.dtype() == like.dtype() ? g : g.to(like.dtype())).contiguous();
}

tensor_list lstm_cell_backward_composite(const Tensor& dh0, const Tensor& dc0, const Tensor& gates, const Tensor& c) {
  const DType cd = compute_dtype(gates.dtype());
  tensor_list q = chunk(gates.to(cd), 4, 1);
  Tensor cp = c.to(cd);
  Tensor i = sigmoid(q[0]), f = sigmoid(q[1]), g = tanh(q[2]), o = sigmoid(q[3]);
  Tensor tc = tanh(f * cp + i * g);
  Tensor dh = dh0.defined() ? dh0.to(cd) : zeros(cp.sizes(), cp.options());
  Tensor dct = dh * o * (1.0 - tc * tc);
  if (dc0.defined()) dct = dct + dc0.to(cd);
  Tensor dgates = cat({dct * g * i * (1.0 - i), dct * cp * f * (1.0 - f), dct * i * (1.0 - g * g),
                       dh * tc * o * (1.0 - o)},
                      1);
  return {dgates.to(gates.dtype()), (dct * f).to(c.dtype())};
}

tensor_list gru_cell_backward_composite(const Tensor& dh0, const Tensor& gi0, const Tensor& gh0, const Tensor& h0) {
  const DType cd = compute_dtype(gi0.dtype());
  tensor_list gi = chunk(gi0.to(cd), 3, 1), gh = chunk(gh0.to(cd), 3, 1);
  Tensor h = h0.to(cd), dh = dh0.to(cd);
  Tensor r = sigmoid(gi[0] + gh[0]), z = sigmoid(gi[1] + gh[1]), n = tanh(gi[2] + r * gh[2]);
  Tensor dnp = dh * (1.0 - z) * (1.0 - n * n);
  Tensor drp = dnp * gh[2] * r * (1.0 - r), dzp = dh * (h - n) * z * (1.0 - z);
  return {cat({drp, dzp, dnp}, 1).to(gi0.dtype()), cat({drp, dzp, dnp * r}, 1).to(gh0.dtype()),
          (dh * z).to(h0.dtype())};
}
int64_t check_rnn_params(const char* op, int64_t G, const Tensor& input, const tensor_list& params, const RnnArgs& a) {
  const int64_t P = a.proj_size;
  MPX_CHECK(P >= 0, op, ": proj_size must be non-negative, got ", P);
  MPX_CHECK(P == 0 || G == 4, op, ": proj_size is an LSTM option (got ", P, ")");
  const int64_t dirs = a.bidirectional ? 2 : 1, per = (a.has_biases ? 4 : 2) + (P > 0 ? 1 : 0);
  MPX_CHECK(static_cast<int64_t>(params.size()) == a.num_layers * dirs * per, op, ": expected ",
            a.num_layers * dirs * per, " parameter tensors (", a.num_layers, " layers x ", dirs, " directions x ", per,
            "), got ", params.size());
  const Tensor& w_hh0 = params[1];
  MPX_CHECK(w_hh0.defined() && w_hh0.dim() == 2 && w_hh0.size(0) % G == 0 &&
                (P > 0 ? w_hh0.size(1) == P : w_hh0.size(0) == G * w_hh0.size(1)),
            op, ": weight_hh_l0 ", ops::describe(w_hh0), " must be [", G, "*hidden_size, ",
            P > 0 ? "proj_size " + std::to_string(P) : std::string("hidden_size"), "]");
  const int64_t H = w_hh0.size(0) / G, R = P > 0 ? P : H;  // R: the width of h and of each direction's output
  MPX_CHECK(P < H, op, ": proj_size ", P, " must be smaller than hidden_size ", H);
  for (int64_t l = 0; l < a.num_layers; ++l)
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t in = l == 0 ? input.size(-1) : dirs * R;
      std::vector<std::pair<const char*, IntList>> want = {{"weight_ih", {G * H, in}}, {"weight_hh", {G * H, R}}};
      if (a.has_biases) {
        want.push_back({"bias_ih", {G * H}});
        want.push_back({"bias_hh", {G * H}});
      }
      if (P > 0) want.push_back({"weight_hr", {P, H}});
      for (size_t j = 0; j < want.size(); ++j) {
        const Tensor& t = params[static_cast<size_t>((l * dirs + d) * per) + j];
        const char* name = want[j].first;
        MPX_CHECK(t.defined() && t.sizes() == want[j].second, op, ": ", name, "_l", l, d ? "_reverse" : "", " ",
                  ops::describe(t), " must be ", shape_str(want[j].second), " (input ", ops::describe(input),
                  ", hidden_size ", H, P > 0 ? ", proj_size " + std::to_string(P) : std::string(), ")");
        MPX_CHECK(t.dtype() == input.dtype(), op, ": ", name, "_l", l, " ", ops::describe(t),
                  " must have the input's dtype ", dtype_name(input.dtype()), "; convert it or use autocast");
      }
    }
  return H;
}
}  // namespace rnn_detail

namespace {
using autograd::FunctionNode;
using namespace rnn_detail;

// The fused cells' checks: gates a [N, ka*H] (and `like_a`, of a's shape) beside a state s [N, H],
// all of one floating dtype on one device.
void check_cell_inputs(const char* op, const Tensor& a, int64_t ka, const Tensor& s, const tensor_list& like_a) {
  MPX_CHECK(a.defined() && s.defined(), op, ": inputs must be defined");
  MPX_CHECK(a.dim() == 2 && s.dim() == 2 && a.size(0) == s.size(0) && a.size(1) == ka * s.size(1), op,
            ": expected gates [N, ", ka, "H] and state [N, H], got ", ops::describe(a), " and ", ops::describe(s));
  MPX_CHECK(is_floating(a.dtype()), op, ": inputs must be floating point, got ", ops::describe(a));
  tensor_list all = like_a;
  all.push_back(a);
  all.push_back(s);
  for (const Tensor& t : like_a)
    MPX_CHECK(t.defined() && t.sizes() == a.sizes(), op, ": ", ops::describe(t), " must have the shape of ",
              ops::describe(a));
  for (const Tensor& t : all)
    MPX_CHECK(t.dtype() == a.dtype(), op, ": inputs must share one dtype, got ", ops::describe(t), " beside ",
              ops::describe(a));
  ops::common_device(op, all);
}
}  // namespace

std::pair<Tensor, Tensor> lstm_cell_fused(const Tensor& gates0, const Tensor& c0) {
  check_cell_inputs("lstm_cell_fused", gates0, 4, c0, {});
  const Tensor gates = gates0.contiguous(), c = c0.contiguous();
  const int64_t N = c.size(0), H = c.size(1);
  Tensor h = empty({N, H}, c.options()), cn = empty({N, H}, c.options()), act = empty({N, 4 * H}, c.options());
  if (c.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<OpId::lstm_cell_fused>(c.device(), c.dtype())(h, cn, act, gates, c);
  }
  auto backward = [](FunctionNode& self, const tensor_list& g) -> tensor_list {
    Tensor gates = self.saved(0), c = self.saved(1), cn = self.saved(2), act = self.saved(3);
    if (GradMode::is_enabled()) {
      tensor_list r = lstm_cell_backward_composite(g[0], g[1], gates, c);
      for (size_t i = 0; i < r.size(); ++i)
        if (!self.next_edges[i].valid()) r[i] = Tensor();
      return r;
    }
    Tensor dgates = empty(gates.sizes(), gates.options());
    Tensor dc = self.next_edges[1].valid() ? empty(c.sizes(), c.options()) : Tensor();
    if (c.numel() > 0) {
      // An undefined gradient is zero to the kernel.
      const Tensor dh = g[0].defined() ? dense_grad(g[0], c) : Tensor(), dcn = g[1].defined() ? dense_grad(g[1], c) : Tensor();
      dispatch::kernel<OpId::lstm_cell_fused_backward>(c.device(), c.dtype())(dgates, dc, dh, dcn, act, c, cn);
    }
    return {self.next_edges[0].valid() ? dgates : Tensor(), dc};
  };
  if (auto n = autograd::record("LstmCellBackward", {gates, c}, {h, cn}, backward)) {
    n->save(gates);
    n->save(c);
    n->save(cn, true);
    n->save(act);
  }
  return {h, cn};
}

Tensor gru_cell_fused(const Tensor& gi0, const Tensor& gh0, const Tensor& h0) {
  check_cell_inputs("gru_cell_fused", gi0, 3, h0, {gh0});
  const Tensor gi = gi0.contiguous(), gh = gh0.contiguous(), hp = h0.contiguous();
  const int64_t N = hp.size(0), H = hp.size(1);
  Tensor h = empty({N, H}, hp.options()), ws = empty({N, 4 * H}, hp.options());
  if (hp.numel() > 0) {
    NoGradGuard ng;
    dispatch::kernel<OpId::gru_cell_fused>(hp.device(), hp.dtype())(h, ws, gi, gh, hp);
  }
  auto backward = [](FunctionNode& self, const tensor_list& g) -> tensor_list {
    Tensor gi = self.saved(0), gh = self.saved(1), hp = self.saved(2), ws = self.saved(3);
    const Tensor dh = dense_grad(g[0], hp);
    tensor_list r;
    if (GradMode::is_enabled()) {
      r = gru_cell_backward_composite(dh, gi, gh, hp);
    } else {
      r = {empty(gi.sizes(), gi.options()), empty(gh.sizes(), gh.options()), empty(hp.sizes(), hp.options())};
      if (hp.numel() > 0)
        dispatch::kernel<OpId::gru_cell_fused_backward>(hp.device(), hp.dtype())(r[0], r[1], r[2], dh, ws, hp);
    }
    for (size_t i = 0; i < r.size(); ++i)
      if (!self.next_edges[i].valid()) r[i] = Tensor();
    return r;
  };
  if (auto n = autograd::record("GruCellBackward", {gi, gh, hp}, {h}, backward))
    for (const Tensor& t : {gi, gh, hp, ws}) n->save(t);
  return h;
}

namespace {
// The cell ops' checks of x, the states and the weights (G gates); returns whether x is unbatched.
bool check_cell(const char* op, int64_t G, const Tensor& x, const tensor_list& states, const Tensor& w_ih,
                const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  MPX_CHECK(x.defined() && w_ih.defined() && w_hh.defined(), op, ": input and weights must be defined");
  MPX_CHECK(x.dim() == 1 || x.dim() == 2, op, ": expected input [N, input_size] or [input_size], got ",
            ops::describe(x));
  MPX_CHECK(w_hh.dim() == 2 && w_hh.size(0) == G * w_hh.size(1), op, ": weight_hh ", ops::describe(w_hh),
            " must be [", G, "*hidden_size, hidden_size]");
  const int64_t H = w_hh.size(1);
  MPX_CHECK(w_ih.dim() == 2 && w_ih.size(0) == G * H && w_ih.size(1) == x.size(x.dim() - 1), op, ": weight_ih ",
            ops::describe(w_ih), " must be [", G * H, ", ", x.size(x.dim() - 1), "] for input ", ops::describe(x));
  for (const Tensor* b : {&b_ih, &b_hh})
    MPX_CHECK(!b->defined() || (b->dim() == 1 && b->size(0) == G * H), op, ": bias ", ops::describe(*b),
              " must be [", G * H, "]");
  IntList sshape = x.dim() == 2 ? IntList{x.size(0), H} : IntList{H};
  for (const Tensor& s : states)
    MPX_CHECK(s.defined() && s.sizes() == sshape, op, ": state ", ops::describe(s), " must be ", shape_str(sshape),
              " for input ", ops::describe(x), " and hidden_size ", H);
  tensor_list all = {x, w_ih, w_hh, b_ih, b_hh};
  for (const Tensor& s : states) all.push_back(s);
  for (const Tensor& t : all)
    MPX_CHECK(!t.defined() || t.dtype() == x.dtype(), op, ": every input must have the input's dtype (",
              dtype_name(x.dtype()), "), got ", ops::describe(t), "; convert them or use autocast");
  MPX_CHECK(is_floating(x.dtype()), op, ": input must be floating point, got ", ops::describe(x));
  ops::common_device(op, all);
  return x.dim() == 1;
}
}  // namespace

std::pair<Tensor, Tensor> lstm_cell(const Tensor& x0, const Tensor& h0, const Tensor& c0, const Tensor& w_ih0,
                                    const Tensor& w_hh0, const Tensor& b_ih0, const Tensor& b_hh0) {
  auto in = ops::autocast(OpId::lstm, {x0, h0, c0, w_ih0, w_hh0, b_ih0, b_hh0});
  const bool unbatched = check_cell("lstm_cell", 4, in[0], {in[1], in[2]}, in[3], in[4], in[5], in[6]);
  auto batch = [&](const Tensor& t) { return unbatched ? t.unsqueeze(0) : t; };
  Tensor gates = add(linear(batch(in[0]), in[3], in[5]), linear(batch(in[1]), in[4], in[6]));
  auto [h, c] = lstm_cell_fused(gates, batch(in[2]));
  if (unbatched) return {h.squeeze(0), c.squeeze(0)};
  return {h, c};
}

Tensor gru_cell(const Tensor& x0, const Tensor& h0, const Tensor& w_ih0, const Tensor& w_hh0, const Tensor& b_ih0,
                const Tensor& b_hh0) {
  auto in = ops::autocast(OpId::gru, {x0, h0, w_ih0, w_hh0, b_ih0, b_hh0});
  const bool unbatched = check_cell("gru_cell", 3, in[0], {in[1]}, in[2], in[3], in[4], in[5]);
  auto batch = [&](const Tensor& t) { return unbatched ? t.unsqueeze(0) : t; };
  Tensor h = gru_cell_fused(linear(batch(in[0]), in[2], in[4]), linear(batch(in[1]), in[3], in[5]), batch(in[1]));
  return unbatched ? h.squeeze(0) : h;
}

namespace {
Tensor elman_cell(bool relu, const Tensor& x0, const Tensor& h0, const Tensor& w_ih0, const Tensor& w_hh0,
                  const Tensor& b_ih0, const Tensor& b_hh0) {
  auto in = ops::autocast(relu ? OpId::rnn_relu : OpId::rnn_tanh, {x0, h0, w_ih0, w_hh0, b_ih0, b_hh0});
  const bool unbatched = check_cell(relu ? "rnn_relu_cell" : "rnn_tanh_cell", 1, in[0], {in[1]}, in[2], in[3], in[4], in[5]);
  auto batch = [&](const Tensor& t) { return unbatched ? t.unsqueeze(0) : t; };
  const Tensor z = add(linear(batch(in[0]), in[2], in[4]), linear(batch(in[1]), in[3], in[5]));
  const Tensor h = relu ? mpx::relu(z) : mpx::tanh(z);
  return unbatched ? h.squeeze(0) : h;
}
}  // namespace

Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  return elman_cell(false, x, h, w_ih, w_hh, b_ih, b_hh);
}
Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  return elman_cell(true, x, h, w_ih, w_hh, b_ih, b_hh);
}

namespace {
// What lstm, gru and the Elman RNNs share: checks, the time-major batched view of the input, the state per
// (layer, direction), and the layer loop. `step` runs one direction of one layer over x [T, N, In]
// from its initial states and weights, returning (outputs [T, N, H], final states...).
struct SeqPlan {
  int64_t T = 0, N = 0, H = 0, dirs = 1, per = 2;  // per: tensors per (layer, direction)
  int64_t R = 0;                                    // the width of h and of each direction's output (proj_size or H)
  bool unbatched = false;
  Tensor x;  // [T, N, I]
};

SeqPlan check_seq(const char* op, int64_t G, const Tensor& input, const tensor_list& states,
                  const tensor_list& params, const RnnArgs& a) {
  MPX_CHECK(input.defined(), op, ": input is undefined");
  MPX_CHECK(input.dim() == 2 || input.dim() == 3, op, ": expected input [T, N, input_size] (batch_first: [N, T, ",
            "input_size]) or unbatched [T, input_size], got ", ops::describe(input));
  MPX_CHECK(is_floating(input.dtype()), op, ": input must be floating point, got ", ops::describe(input));
  MPX_CHECK(a.num_layers >= 1, op, ": num_layers must be at least 1, got ", a.num_layers);
  MPX_CHECK(a.dropout >= 0.0 && a.dropout <= 1.0, op, ": dropout must be in [0, 1], got ", a.dropout);
  SeqPlan p;
  p.dirs = a.bidirectional ? 2 : 1;
  p.per = (a.has_biases ? 4 : 2) + (a.proj_size > 0 ? 1 : 0);
  p.unbatched = input.dim() == 2;
  p.x = p.unbatched ? input.unsqueeze(1) : a.batch_first ? input.transpose(0, 1) : input;
  p.T = p.x.size(0);
  p.N = p.x.size(1);
  MPX_CHECK(p.T >= 1, op, ": the sequence is empty (input ", ops::describe(input), ")");
  p.H = check_rnn_params(op, G, input, params, a);
  p.R = a.proj_size > 0 ? a.proj_size : p.H;
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& s = states[i];
    const int64_t width = i == 0 ? p.R : p.H;  // h has proj_size features under a projection, c hidden_size
    const IntList sshape = p.unbatched ? IntList{a.num_layers * p.dirs, width} : IntList{a.num_layers * p.dirs, p.N, width};
    MPX_CHECK(!s.defined() || s.sizes() == sshape, op, ": initial state ", ops::describe(s), " must be ",
              shape_str(sshape), " (num_layers * directions, batch, ", i == 0 && a.proj_size > 0 ? "proj_size" : "hidden_size",
              ")");
    MPX_CHECK(!s.defined() || s.dtype() == input.dtype(), op, ": initial state ", ops::describe(s),
              " must have the input's dtype ", dtype_name(input.dtype()));
  }
  tensor_list all = params;
  all.push_back(input);
  for (const Tensor& s : states) all.push_back(s);
  ops::common_device(op, all);
  return p;
}

// State (layer, direction) idx: [N, width], from the given initial states or zeros.
Tensor initial_state(const SeqPlan& p, const Tensor& s, int64_t idx, int64_t width) {
  if (!s.defined()) return zeros({p.N, width}, p.x.options());
  const Tensor t = s.select(0, idx);
  return p.unbatched ? t.unsqueeze(0) : t;
}

// One (layer, direction)'s parameters; the undefined ones absent.
struct LayerWeights {
  Tensor w_ih, w_hh, b_ih, b_hh, w_hr;
};

// Runs the layers: `run(x, idx, reverse, weights)` returns one direction's outputs [T, N, R] and
// its final states; outputs of both directions are concatenated, dropout applied between layers.
template <typename Run>
std::pair<Tensor, std::vector<tensor_list>> run_layers(const SeqPlan& p, const tensor_list& params, const RnnArgs& a,
                                                       Run run) {
  Tensor x = p.x;
  std::vector<tensor_list> finals;  // per (layer, direction): the final states
  for (int64_t l = 0; l < a.num_layers; ++l) {
    tensor_list outs;
    for (int64_t d = 0; d < p.dirs; ++d) {
      const int64_t idx = l * p.dirs + d;
      const size_t k = static_cast<size_t>(idx * p.per);
      const Tensor* w = &params[k];
      const LayerWeights lw{w[0], w[1], a.has_biases ? w[2] : Tensor(), a.has_biases ? w[3] : Tensor(),
                            a.proj_size > 0 ? w[a.has_biases ? 4 : 2] : Tensor()};
      auto [out, st] = run(x, idx, d == 1, lw);
      outs.push_back(out);
      finals.push_back(st);
    }
    x = p.dirs == 2 ? cat(outs, 2) : outs[0];
    if (a.train && a.dropout > 0.0 && l + 1 < a.num_layers) x = dropout(x, a.dropout, true);
  }
  Tensor out = p.unbatched ? x.squeeze(1) : a.batch_first ? x.transpose(0, 1).contiguous() : x;
  return {out, finals};
}

// Stacks the k-th final state of every (layer, direction): [L*D, N, H] ([L*D, H] unbatched).
Tensor stack_states(const SeqPlan& p, const std::vector<tensor_list>& finals, size_t k) {
  tensor_list s;
  for (const auto& f : finals) s.push_back(p.unbatched ? f[k].squeeze(0) : f[k]);
  return stack(s, 0);
}

tensor_list no_double_backward(FunctionNode&, const tensor_list&) {
  MPX_ERROR("lstm/gru: the fused (cuDNN) sequence's backward is not differentiable (a second derivative through it "
            "was requested); set MPX_CUDNN_RNN=0 to run cell by cell, whose backward is");
}

// The whole sequence on the device's fused kernel (cuDNN's RNN on CUDA) when there is one and it takes the call,
// as one autograd node: (output, final states...) as lstm/gru return them; nullopt otherwise (the caller runs cell
// by cell). Dropout between layers stays on the cell path, which draws it from mpx's generator as the CPU does.
std::optional<tensor_list> fused_sequence(bool is_lstm, const SeqPlan& p, const tensor_list& states,
                                          const tensor_list& params, const RnnArgs& a) {
  const Device dev = p.x.device();
  const DType dt = p.x.dtype();
  if (dev.is_cpu() || !dispatch::has_kernel(OpId::rnn_fused, dev.type, dt)) return std::nullopt;
  if (a.train && a.dropout > 0.0 && a.num_layers > 1) return std::nullopt;
  if (a.proj_size > 0) return std::nullopt;  // the step path projects; cuDNN's projection is not wired
  const size_t ns = states.size();
  // The node's inputs: x [T, N, I], the states as [L*D, N, H] (undefined: zeros), the parameters.
  tensor_list inputs = {p.x};
  for (const Tensor& s : states) inputs.push_back(s.defined() && p.unbatched ? s.unsqueeze(1) : s);
  inputs.insert(inputs.end(), params.begin(), params.end());
  kernels::RnnParams prm;
  prm.lstm = is_lstm;
  prm.num_layers = a.num_layers;
  prm.hidden = p.H;
  prm.bidirectional = a.bidirectional;
  prm.has_biases = a.has_biases;
  prm.training = autograd::any_requires_grad(inputs);
  tensor_list dense;  // contiguous, detached: what the kernel reads
  for (const Tensor& t : inputs) dense.push_back(t.defined() ? t.detach().contiguous() : Tensor());
  const Tensor& x = dense[0];
  const tensor_list ps(dense.begin() + 1 + static_cast<std::ptrdiff_t>(ns), dense.end());
  const TensorOptions o = x.options();
  const int64_t LD = a.num_layers * p.dirs;
  const Tensor y = empty({p.T, p.N, p.dirs * p.H}, o), hy = empty({LD, p.N, p.H}, o);
  const Tensor cy = is_lstm ? empty({LD, p.N, p.H}, o) : Tensor();
  Tensor weights, reserve;
  {
    NoGradGuard ng;
    if (!dispatch::kernel<OpId::rnn_fused>(dev, dt)(y, hy, cy, weights, reserve, x, dense[1],
                                                    is_lstm ? dense[2] : Tensor(), ps, prm))
      return std::nullopt;
  }
  tensor_list outs = {y, hy};
  if (is_lstm) outs.push_back(cy);
  auto backward = [prm, ns, np = params.size()](FunctionNode& self, const tensor_list& g) -> tensor_list {
    const Tensor x = self.saved(0), y = self.saved(1), weights = self.saved(2), reserve = self.saved(3);
    const Tensor hx = self.saved(4), cx = ns > 1 ? self.saved(5) : Tensor();
    tensor_list ps;
    for (size_t i = 0; i < np; ++i) ps.push_back(self.saved(static_cast<int>(4 + ns + i)));
    auto dense_or_none = [&](size_t i) {
      return i < g.size() && g[i].defined() ? g[i].to(x.dtype()).contiguous() : Tensor();
    };
    const Tensor dy = dense_grad(g[0], y);
    const Tensor dx = empty(x.sizes(), x.options());
    const Tensor dhx = hx.defined() ? empty(hx.sizes(), hx.options()) : Tensor();
    const Tensor dcx = cx.defined() ? empty(cx.sizes(), cx.options()) : Tensor();
    tensor_list dps;
    for (const Tensor& w : ps) dps.push_back(empty(w.sizes(), w.options()));
    {
      NoGradGuard ng;
      dispatch::kernel<OpId::rnn_fused_backward>(x.device(), x.dtype())(
          dx, dhx, dcx, dps, x, hx, cx, y, dy, dense_or_none(1), dense_or_none(2), weights, reserve, prm);
    }
    tensor_list grads = {dx, dhx};
    if (ns > 1) grads.push_back(dcx);
    grads.insert(grads.end(), dps.begin(), dps.end());
    tensor_list from = g;
    from.push_back(x);
    autograd::record("CudnnRnnBackwardBackward", from, grads, no_double_backward);
    return grads;
  };
  if (auto n = autograd::record(is_lstm ? "CudnnLstmBackward" : "CudnnGruBackward", inputs, outs, backward)) {
    n->save(x);
    n->save(y, true);
    n->save(weights);
    n->save(reserve);
    for (size_t i = 0; i < ns; ++i) n->save(dense[1 + i]);
    for (const Tensor& w : ps) n->save(w);
  }
  tensor_list r = {p.unbatched ? y.squeeze(1) : a.batch_first ? y.transpose(0, 1).contiguous() : y};
  for (size_t i = 1; i < outs.size(); ++i) r.push_back(p.unbatched ? outs[i].squeeze(1) : outs[i]);
  return r;
}
}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input0, const Tensor& h00, const Tensor& c00,
                                        const tensor_list& params0, const RnnArgs& a) {
  tensor_list all = {input0, h00, c00};
  all.insert(all.end(), params0.begin(), params0.end());
  all = ops::autocast(OpId::lstm, all);
  const Tensor &input = all[0], &h0 = all[1], &c0 = all[2];
  const tensor_list params(all.begin() + 3, all.end());
  const SeqPlan p = check_seq("lstm", 4, input, {h0, c0}, params, a);
  if (auto f = fused_sequence(true, p, {h0, c0}, params, a)) return {(*f)[0], (*f)[1], (*f)[2]};
  auto run = [&](const Tensor& x, int64_t idx, bool reverse, const LayerWeights& w) -> std::pair<Tensor, tensor_list> {
    // The input projections of every step in one GEMM, both biases folded in; the steps as one node.
    const Tensor bias = w.b_ih.defined() ? add(w.b_ih, w.b_hh) : Tensor();
    const Tensor gi = linear(x.reshape({p.T * p.N, x.size(2)}), w.w_ih, bias).view({p.T, p.N, w.w_ih.size(0)});
    auto [out, h, c] = rnn_detail::lstm_layer(gi, initial_state(p, h0, idx, p.R), initial_state(p, c0, idx, p.H),
                                              w.w_hh, w.w_hr, reverse);
    return {out, {h, c}};
  };
  auto [out, finals] = run_layers(p, params, a, run);
  return {out, stack_states(p, finals, 0), stack_states(p, finals, 1)};
}

std::pair<Tensor, Tensor> gru(const Tensor& input0, const Tensor& h00, const tensor_list& params0, const RnnArgs& a) {
  tensor_list all = {input0, h00};
  all.insert(all.end(), params0.begin(), params0.end());
  all = ops::autocast(OpId::gru, all);
  const Tensor &input = all[0], &h0 = all[1];
  const tensor_list params(all.begin() + 2, all.end());
  const SeqPlan p = check_seq("gru", 3, input, {h0}, params, a);
  if (auto f = fused_sequence(false, p, {h0}, params, a)) return {(*f)[0], (*f)[1]};
  auto run = [&](const Tensor& x, int64_t idx, bool reverse, const LayerWeights& w) -> std::pair<Tensor, tensor_list> {
    const Tensor gi = linear(x.reshape({p.T * p.N, x.size(2)}), w.w_ih, w.b_ih).view({p.T, p.N, w.w_ih.size(0)});
    auto [out, h] = rnn_detail::gru_layer(gi, initial_state(p, h0, idx, p.H), w.w_hh, w.b_hh, reverse);
    return {out, {h}};
  };
  auto [out, finals] = run_layers(p, params, a, run);
  return {out, stack_states(p, finals, 0)};
}


namespace {
std::pair<Tensor, Tensor> elman(bool relu, const Tensor& input0, const Tensor& h00, const tensor_list& params0,
                                const RnnArgs& a) {
  tensor_list all = {input0, h00};
  all.insert(all.end(), params0.begin(), params0.end());
  all = ops::autocast(relu ? OpId::rnn_relu : OpId::rnn_tanh, all);
  const Tensor &input = all[0], &h0 = all[1];
  const tensor_list params(all.begin() + 2, all.end());
  const SeqPlan p = check_seq(relu ? "rnn_relu" : "rnn_tanh", 1, input, {h0}, params, a);
  auto run = [&](const Tensor& x, int64_t idx, bool reverse, const LayerWeights& w) -> std::pair<Tensor, tensor_list> {
    const Tensor bias = w.b_ih.defined() ? add(w.b_ih, w.b_hh) : Tensor();
    const Tensor gi = linear(x.reshape({p.T * p.N, x.size(2)}), w.w_ih, bias).view({p.T, p.N, w.w_ih.size(0)});
    auto [out, h] = rnn_detail::elman_layer(gi, initial_state(p, h0, idx, p.H), w.w_hh, relu, reverse);
    return {out, {h}};
  };
  auto [out, finals] = run_layers(p, params, a, run);
  return {out, stack_states(p, finals, 0)};
}
}  // namespace

std::pair<Tensor, Tensor> rnn_tanh(const Tensor& input, const Tensor& h0, const tensor_list& params, const RnnArgs& a) {
  return elman(false, input, h0, params, a);
}
std::pair<Tensor, Tensor> rnn_relu(const Tensor& input, const Tensor& h0, const tensor_list& params, const RnnArgs& a) {
  return elman(true, input, h0, params, a);
}

}  // namespace mpx
