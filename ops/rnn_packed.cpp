// The recurrent ops over packed batches: each layer and direction is one node (ops/rnn_layer.cpp) whose steps run
// the cell on the rows of the sequences still running, so every sequence stops (and, reversed, starts) at its own
// length.
#include <string>

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/op_utils.h"
#include "ops/rnn.h"
#include "ops/rnn_internal.h"
#include "ops/shape.h"

namespace mpx {
namespace {
const char* name_of(RnnMode m) {
  switch (m) {
    case RnnMode::kLstm: return "lstm";
    case RnnMode::kGru: return "gru";
    case RnnMode::kRnnTanh: return "rnn_tanh";
    default: return "rnn_relu";
  }
}
int64_t gates_of(RnnMode m) { return m == RnnMode::kLstm ? 4 : m == RnnMode::kGru ? 3 : 1; }
OpId op_of(RnnMode m) {
  switch (m) {
    case RnnMode::kLstm: return OpId::lstm;
    case RnnMode::kGru: return OpId::gru;
    case RnnMode::kRnnTanh: return OpId::rnn_tanh;
    default: return OpId::rnn_relu;
  }
}
}  // namespace

tensor_list rnn_packed(RnnMode mode, const Tensor& data0, const std::vector<int64_t>& bs, const tensor_list& states0,
                       const tensor_list& params0, const RnnArgs& a) {
  const char* op = name_of(mode);
  const size_t ns = mode == RnnMode::kLstm ? 2 : 1;
  MPX_CHECK(states0.size() == ns, op, ": expected ", ns, " initial state tensors, got ", states0.size());
  tensor_list all = {data0};
  all.insert(all.end(), states0.begin(), states0.end());
  all.insert(all.end(), params0.begin(), params0.end());
  all = ops::autocast(op_of(mode), all);
  const Tensor& data = all[0];
  const tensor_list states(all.begin() + 1, all.begin() + 1 + static_cast<std::ptrdiff_t>(ns));
  const tensor_list params(all.begin() + 1 + static_cast<std::ptrdiff_t>(ns), all.end());

  MPX_CHECK(data.defined() && data.dim() == 2 && is_floating(data.dtype()), op,
            ": a packed sequence's data must be floating [sum of lengths, input_size], got ", ops::describe(data));
  MPX_CHECK(!bs.empty() && bs[0] >= 1, op, ": a packed sequence needs at least one step of one sequence");
  int64_t total = 0;
  for (size_t t = 0; t < bs.size(); ++t) {
    MPX_CHECK(bs[t] >= 1 && (t == 0 || bs[t] <= bs[t - 1]), op, ": batch_sizes must be positive and non-increasing ",
              "(sequences sorted by decreasing length), got ", bs[t], " at step ", t);
    total += bs[t];
  }
  MPX_CHECK(total == data.size(0), op, ": batch_sizes sum to ", total, " rows, the data has ", data.size(0));
  MPX_CHECK(a.num_layers >= 1, op, ": num_layers must be at least 1, got ", a.num_layers);
  const int64_t G = gates_of(mode), D = a.bidirectional ? 2 : 1, N = bs[0];
  const int64_t per = (a.has_biases ? 4 : 2) + (a.proj_size > 0 ? 1 : 0);
  const int64_t H = rnn_detail::check_rnn_params(op, G, data, params, a);
  const int64_t R = a.proj_size > 0 ? a.proj_size : H;  // the width of h
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& s = states[i];
    const int64_t width = i == 0 ? R : H;
    MPX_CHECK(!s.defined() || (s.sizes() == IntList{a.num_layers * D, N, width} && s.dtype() == data.dtype()), op,
              ": initial state ", ops::describe(s), " must be [", a.num_layers * D, ", ", N, ", ", width, "] in ",
              dtype_name(data.dtype()), " (num_layers * directions, the longest step's batch, ",
              i == 0 && a.proj_size > 0 ? "proj_size" : "hidden_size", ")");
  }
  tensor_list devs = params;
  devs.push_back(data);
  for (const Tensor& s : states) devs.push_back(s);
  ops::common_device(op, devs);

  Tensor x = data;
  tensor_list finals_h, finals_c;
  for (int64_t l = 0; l < a.num_layers; ++l) {
    tensor_list outs;
    for (int64_t d = 0; d < D; ++d) {
      const int64_t idx = l * D + d;
      const Tensor* w = &params[static_cast<size_t>(idx * per)];
      const Tensor b_ih = a.has_biases ? w[2] : Tensor(), b_hh = a.has_biases ? w[3] : Tensor();
      // Every step's input projection in one GEMM (both biases, but for the GRU, whose b_hh sits inside r * (.)).
      const Tensor gi = linear(x, w[0], mode == RnnMode::kGru || !b_ih.defined() ? b_ih : add(b_ih, b_hh));
      const Tensor h = states[0].defined() ? states[0].select(0, idx) : zeros({N, R}, data.options());
      const bool reverse = d == 1;
      Tensor out, hn, cn;
      switch (mode) {
        case RnnMode::kLstm: {
          const Tensor c = states[1].defined() ? states[1].select(0, idx) : zeros({N, H}, data.options());
          std::tie(out, hn, cn) = rnn_detail::lstm_layer(gi, h, c, w[1], a.proj_size > 0 ? w[per - 1] : Tensor(),
                                                         reverse, bs);
          finals_c.push_back(cn);
          break;
        }
        case RnnMode::kGru: std::tie(out, hn) = rnn_detail::gru_layer(gi, h, w[1], b_hh, reverse, bs); break;
        default:
          std::tie(out, hn) = rnn_detail::elman_layer(gi, h, w[1], mode == RnnMode::kRnnRelu, reverse, bs);
          break;
      }
      outs.push_back(out);
      finals_h.push_back(hn);
    }
    x = D == 2 ? cat(outs, 1) : outs[0];
    if (a.train && a.dropout > 0.0 && l + 1 < a.num_layers) x = dropout(x, a.dropout, true);
  }
  tensor_list r = {x, stack(finals_h, 0)};
  if (mode == RnnMode::kLstm) r.push_back(stack(finals_c, 0));
  return r;
}

}  // namespace mpx
