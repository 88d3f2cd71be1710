// The recurrent layers: parameters registered under PyTorch's names, forward through ops/rnn.
#include "nn/rnn.h"

#include <cmath>
#include <ostream>
#include <string>

#include "nn/init.h"
#include "ops/index.h"
#include "ops/op_utils.h"
#include "ops/rnn.h"

namespace mpx::nn {
namespace {

std::string bool_text(bool b) { return b ? "true" : "false"; }

void check_sizes(const char* op, int64_t input_size, int64_t hidden_size) {
  MPX_CHECK(input_size > 0 && hidden_size > 0, op, ": input_size and hidden_size must be positive, got ", input_size,
            " and ", hidden_size);
}

// Registers the flat parameters of a G-gate multi-layer RNN in PyTorch's order and names; P > 0 adds the LSTM's
// projection weight_hr after the biases.
template <typename Opts>
std::vector<Tensor> register_rnn(Module& m, const char* op, const Opts& o, int64_t G, int64_t P = 0) {
  check_sizes(op, o.input_size(), o.hidden_size());
  MPX_CHECK(P >= 0 && P < o.hidden_size(), op, ": proj_size must be at least 0 and smaller than hidden_size ",
            o.hidden_size(), ", got ", P);
  MPX_CHECK(o.num_layers() >= 1, op, ": num_layers must be at least 1, got ", o.num_layers());
  MPX_CHECK(o.dropout() >= 0.0 && o.dropout() <= 1.0, op, ": dropout must be in [0, 1], got ", o.dropout());
  const int64_t H = o.hidden_size(), dirs = o.bidirectional() ? 2 : 1, R = P > 0 ? P : H;
  std::vector<Tensor> flat;
  for (int64_t l = 0; l < o.num_layers(); ++l)
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const int64_t in = l == 0 ? o.input_size() : dirs * R;
      flat.push_back(m.register_parameter("weight_ih" + sfx, empty({G * H, in})));
      flat.push_back(m.register_parameter("weight_hh" + sfx, empty({G * H, R})));
      if (o.bias()) {
        flat.push_back(m.register_parameter("bias_ih" + sfx, empty({G * H})));
        flat.push_back(m.register_parameter("bias_hh" + sfx, empty({G * H})));
      }
      if (P > 0) flat.push_back(m.register_parameter("weight_hr" + sfx, empty({P, H})));
    }
  return flat;
}

// PyTorch's RNN initialization: every parameter uniform(-1/sqrt(H), 1/sqrt(H)).
void init_uniform(const std::vector<Tensor>& ps, int64_t hidden_size) {
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (const Tensor& p : ps)
    if (p.defined()) init::uniform_(p, -k, k);
}

template <typename Opts>
RnnArgs args_of(const Opts& o, bool training) {
  RnnArgs a;
  a.has_biases = o.bias();
  a.num_layers = o.num_layers();
  a.dropout = o.dropout();
  a.train = training;
  a.bidirectional = o.bidirectional();
  a.batch_first = o.batch_first();
  return a;
}

RnnArgs lstm_args(const LSTMOptions& o, bool training) {
  RnnArgs a = args_of(o, training);
  a.proj_size = o.proj_size();
  return a;
}

// A packed batch through rnn_packed: the initial states into the sorted order and the final ones back (PyTorch's
// permute_hidden).
tensor_list run_packed(RnnMode mode, const utils::rnn::PackedSequence& in, tensor_list states,
                       const std::vector<Tensor>& flat, const RnnArgs& a) {
  if (const Tensor& order = in.sorted_indices(); order.defined())
    for (Tensor& s : states)
      if (s.defined()) s = index_select(s, 1, order.to(s.device()));
  tensor_list r = rnn_packed(mode, in.data(), in.batch_size_vector(), states, flat, a);
  if (const Tensor& back = in.unsorted_indices(); back.defined())
    for (size_t i = 1; i < r.size(); ++i) r[i] = index_select(r[i], 1, back.to(r[i].device()));
  return r;
}

template <typename Opts>
void print_rnn(std::ostream& os, const char* name, const Opts& o, const std::string& extra = {}) {
  os << name << "(" << o.input_size() << ", " << o.hidden_size() << ", num_layers=" << o.num_layers()
     << ", bias=" << bool_text(o.bias()) << ", batch_first=" << bool_text(o.batch_first())
     << ", dropout=" << o.dropout() << ", bidirectional=" << bool_text(o.bidirectional()) << extra << ")";
}
}  // namespace

// ---------------------------------------------------------------- LSTM, GRU

LSTMImpl::LSTMImpl(const LSTMOptions& o) : options(o) {
  flat_weights_ = register_rnn(*this, "LSTM", o, 4, o.proj_size());
  reset_parameters();
}
namespace {
// (h0, c0) given together: one without the other would start that state from zeros unnoticed.
std::tuple<Tensor, Tensor> lstm_state(const char* module, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  if (!hx) return {};
  const auto& [h, c] = *hx;
  MPX_CHECK(h.defined() == c.defined(), module, ": hx holds ", h.defined() ? "h0 but no c0" : "c0 but no h0",
            "; give both, or leave hx out for zero states");
  return *hx;
}
}  // namespace

void LSTMImpl::reset_parameters() { init_uniform(flat_weights_, options.hidden_size()); }
std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTMImpl::forward(const Tensor& input,
                                                                 std::optional<std::tuple<Tensor, Tensor>> hx) {
  const auto [h0, c0] = lstm_state("LSTM", hx);
  auto [out, hn, cn] = mpx::lstm(input, h0, c0, flat_weights_, lstm_args(options, is_training()));
  return {out, {hn, cn}};
}
std::tuple<utils::rnn::PackedSequence, std::tuple<Tensor, Tensor>> LSTMImpl::forward_with_packed_input(
    const utils::rnn::PackedSequence& input, std::optional<std::tuple<Tensor, Tensor>> hx) {
  const auto [h0, c0] = lstm_state("LSTM", hx);
  const tensor_list r = run_packed(RnnMode::kLstm, input, {h0, c0}, flat_weights_, lstm_args(options, is_training()));
  return {input.with_data(r[0]), {r[1], r[2]}};
}
void LSTMImpl::pretty_print(std::ostream& os) const {
  print_rnn(os, "LSTM", options,
            options.proj_size() > 0 ? ", proj_size=" + std::to_string(options.proj_size()) : std::string());
}

GRUImpl::GRUImpl(const GRUOptions& o) : options(o) {
  flat_weights_ = register_rnn(*this, "GRU", o, 3);
  reset_parameters();
}
void GRUImpl::reset_parameters() { init_uniform(flat_weights_, options.hidden_size()); }
std::tuple<Tensor, Tensor> GRUImpl::forward(const Tensor& input, const Tensor& hx) {
  auto [out, hn] = mpx::gru(input, hx, flat_weights_, args_of(options, is_training()));
  return {out, hn};
}
std::tuple<utils::rnn::PackedSequence, Tensor> GRUImpl::forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                                  const Tensor& hx) {
  const tensor_list r = run_packed(RnnMode::kGru, input, {hx}, flat_weights_, args_of(options, is_training()));
  return {input.with_data(r[0]), r[1]};
}
void GRUImpl::pretty_print(std::ostream& os) const { print_rnn(os, "GRU", options); }

namespace {
// The nonlinearity option: true for "relu", false for "tanh", an error naming both otherwise.
bool relu_of(const char* op, const std::string& nonlinearity) {
  MPX_CHECK(nonlinearity == "tanh" || nonlinearity == "relu", op, ": nonlinearity must be \"tanh\" or \"relu\", got \"",
            nonlinearity, "\"");
  return nonlinearity == "relu";
}
}  // namespace

RNNImpl::RNNImpl(const RNNOptions& o) : options(o) {
  relu_of("RNN", o.nonlinearity());
  flat_weights_ = register_rnn(*this, "RNN", o, 1);
  reset_parameters();
}
void RNNImpl::reset_parameters() { init_uniform(flat_weights_, options.hidden_size()); }
std::tuple<Tensor, Tensor> RNNImpl::forward(const Tensor& input, const Tensor& hx) {
  const RnnArgs a = args_of(options, is_training());
  auto [out, hn] = relu_of("RNN", options.nonlinearity()) ? mpx::rnn_relu(input, hx, flat_weights_, a)
                                                          : mpx::rnn_tanh(input, hx, flat_weights_, a);
  return {out, hn};
}
std::tuple<utils::rnn::PackedSequence, Tensor> RNNImpl::forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                                  const Tensor& hx) {
  const RnnMode mode = relu_of("RNN", options.nonlinearity()) ? RnnMode::kRnnRelu : RnnMode::kRnnTanh;
  const tensor_list r = run_packed(mode, input, {hx}, flat_weights_, args_of(options, is_training()));
  return {input.with_data(r[0]), r[1]};
}
void RNNImpl::pretty_print(std::ostream& os) const {
  os << "RNN(" << options.input_size() << ", " << options.hidden_size() << ", num_layers=" << options.num_layers()
     << ", nonlinearity=" << options.nonlinearity() << ", bias=" << bool_text(options.bias())
     << ", batch_first=" << bool_text(options.batch_first()) << ", dropout=" << options.dropout()
     << ", bidirectional=" << bool_text(options.bidirectional()) << ")";
}

// ---------------------------------------------------------------- cells

namespace {
// Registers a cell's weight_ih, weight_hh (and biases) for G gates.
template <typename Cell>
void register_cell(Cell& m, const char* op, int64_t G) {
  const auto& o = m.options;
  check_sizes(op, o.input_size(), o.hidden_size());
  const int64_t H = o.hidden_size();
  m.weight_ih = m.register_parameter("weight_ih", empty({G * H, o.input_size()}));
  m.weight_hh = m.register_parameter("weight_hh", empty({G * H, H}));
  if (o.bias()) {
    m.bias_ih = m.register_parameter("bias_ih", empty({G * H}));
    m.bias_hh = m.register_parameter("bias_hh", empty({G * H}));
  }
}
// A zero state for input x ([N, I] or [I]).
Tensor zero_state(const Tensor& x, int64_t H) {
  MPX_CHECK(x.defined(), "RNN cell: input is undefined");
  return x.dim() == 1 ? zeros({H}, x.options()) : zeros({x.size(0), H}, x.options());
}
void print_cell(std::ostream& os, const char* name, const LSTMCellOptions& o) {
  os << name << "(" << o.input_size() << ", " << o.hidden_size() << ", bias=" << bool_text(o.bias()) << ")";
}
}  // namespace

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& o) : options(o) {
  register_cell(*this, "LSTMCell", 4);
  reset_parameters();
}
void LSTMCellImpl::reset_parameters() {
  init_uniform({weight_ih, weight_hh, bias_ih, bias_hh}, options.hidden_size());
}
std::tuple<Tensor, Tensor> LSTMCellImpl::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) {
  auto [h, c] = lstm_state("LSTMCell", hx);
  if (!h.defined()) h = zero_state(input, options.hidden_size());
  if (!c.defined()) c = zero_state(input, options.hidden_size());
  auto [h1, c1] = mpx::lstm_cell(input, h, c, weight_ih, weight_hh, bias_ih, bias_hh);
  return {h1, c1};
}
void LSTMCellImpl::pretty_print(std::ostream& os) const { print_cell(os, "LSTMCell", options); }

GRUCellImpl::GRUCellImpl(const GRUCellOptions& o) : options(o) {
  register_cell(*this, "GRUCell", 3);
  reset_parameters();
}
void GRUCellImpl::reset_parameters() { init_uniform({weight_ih, weight_hh, bias_ih, bias_hh}, options.hidden_size()); }
Tensor GRUCellImpl::forward(const Tensor& input, const Tensor& hx) {
  const Tensor h = hx.defined() ? hx : zero_state(input, options.hidden_size());
  return mpx::gru_cell(input, h, weight_ih, weight_hh, bias_ih, bias_hh);
}
void GRUCellImpl::pretty_print(std::ostream& os) const { print_cell(os, "GRUCell", options); }

RNNCellImpl::RNNCellImpl(const RNNCellOptions& o) : options(o) {
  relu_of("RNNCell", o.nonlinearity());
  register_cell(*this, "RNNCell", 1);
  reset_parameters();
}
void RNNCellImpl::reset_parameters() { init_uniform({weight_ih, weight_hh, bias_ih, bias_hh}, options.hidden_size()); }
Tensor RNNCellImpl::forward(const Tensor& input, const Tensor& hx) {
  const Tensor h = hx.defined() ? hx : zero_state(input, options.hidden_size());
  return relu_of("RNNCell", options.nonlinearity()) ? mpx::rnn_relu_cell(input, h, weight_ih, weight_hh, bias_ih, bias_hh)
                                                    : mpx::rnn_tanh_cell(input, h, weight_ih, weight_hh, bias_ih, bias_hh);
}
void RNNCellImpl::pretty_print(std::ostream& os) const {
  os << "RNNCell(" << options.input_size() << ", " << options.hidden_size() << ", bias=" << bool_text(options.bias())
     << ", nonlinearity=" << options.nonlinearity() << ")";
}

}  // namespace mpx::nn
