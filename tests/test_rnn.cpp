// LSTM/GRU: the modules against an f64 reference written here from the same parameters (layers,
// directions, batch_first, initial states), PyTorch's parameter names and shapes, gradchecks of the
// cells and small sequences, dropout, autocast and error cases.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <mpx/mpx.h>

#include "gradcheck.h"
#include "test_util.h"

using namespace mpx;
using testing::gradcheck;
using testing::gradgradcheck;
using testing::leaf;

namespace {
using Vec = std::vector<double>;

Vec values_of(const Tensor& t) {
  if (!t.defined()) return {};
  NoGradGuard ng;
  const Tensor c = t.to(kFloat64).contiguous();
  return Vec(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// One step for one sample: x [I], h and c [H] updated in place (c unused for GRU).
void ref_step(bool lstm, const Vec& wih, const Vec& whh, const Vec& bih, const Vec& bhh, const double* x, int64_t I,
              double* h, double* c, int64_t H) {
  const int64_t G = lstm ? 4 : 3;
  Vec gi(static_cast<size_t>(G * H)), gh(static_cast<size_t>(G * H));
  for (int64_t k = 0; k < G * H; ++k) {
    double a = bih.empty() ? 0.0 : bih[k], b = bhh.empty() ? 0.0 : bhh[k];
    for (int64_t i = 0; i < I; ++i) a += wih[k * I + i] * x[i];
    for (int64_t j = 0; j < H; ++j) b += whh[k * H + j] * h[j];
    gi[k] = a;
    gh[k] = b;
  }
  for (int64_t j = 0; j < H; ++j) {
    if (lstm) {
      const double i = sig(gi[j] + gh[j]), f = sig(gi[H + j] + gh[H + j]), g = std::tanh(gi[2 * H + j] + gh[2 * H + j]),
                   o = sig(gi[3 * H + j] + gh[3 * H + j]);
      c[j] = f * c[j] + i * g;
      h[j] = o * std::tanh(c[j]);
    } else {
      const double r = sig(gi[j] + gh[j]), z = sig(gi[H + j] + gh[H + j]);
      const double n = std::tanh(gi[2 * H + j] + r * gh[2 * H + j]);
      h[j] = (1 - z) * n + z * h[j];
    }
  }
}

struct RefOut {
  Vec out, hn, cn;
};
// The sequence in f64: x [T, N, I] time-major; params in PyTorch's flat order.
RefOut ref_rnn(bool lstm, const Vec& x, int64_t T, int64_t N, int64_t I, int64_t H, int64_t L, int64_t dirs, bool bias,
               const std::vector<Vec>& p, const Vec& h0, const Vec& c0) {
  const int64_t per = bias ? 4 : 2;
  Vec in = x, hn(static_cast<size_t>(L * dirs * N * H)), cn(hn.size());
  int64_t in_sz = I;
  for (int64_t l = 0; l < L; ++l) {
    Vec out(static_cast<size_t>(T * N * dirs * H));
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t idx = l * dirs + d;
      const Vec& wih = p[idx * per];
      const Vec& whh = p[idx * per + 1];
      const Vec bih = bias ? p[idx * per + 2] : Vec(), bhh = bias ? p[idx * per + 3] : Vec();
      Vec h(static_cast<size_t>(N * H), 0.0), c(h.size(), 0.0);
      for (int64_t k = 0; k < N * H; ++k) {
        if (!h0.empty()) h[k] = h0[idx * N * H + k];
        if (!c0.empty()) c[k] = c0[idx * N * H + k];
      }
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = d ? T - 1 - s : s;
        for (int64_t n = 0; n < N; ++n) {
          ref_step(lstm, wih, whh, bih, bhh, &in[(t * N + n) * in_sz], in_sz, &h[n * H], &c[n * H], H);
          for (int64_t j = 0; j < H; ++j) out[(t * N + n) * dirs * H + d * H + j] = h[n * H + j];
        }
      }
      for (int64_t k = 0; k < N * H; ++k) {
        hn[idx * N * H + k] = h[k];
        cn[idx * N * H + k] = c[k];
      }
    }
    in = out;
    in_sz = dirs * H;
  }
  return {in, hn, cn};
}

double max_diff(const Tensor& t, const Vec& ref) {
  const Vec v = values_of(t);
  REQUIRE(v.size() == ref.size());
  double m = 0;
  for (size_t i = 0; i < v.size(); ++i) m = std::max(m, std::abs(v[i] - ref[i]));
  return m;
}

Tensor seeded(const IntList& shape, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64));
}

struct Config {
  int64_t layers;
  bool bidirectional, batch_first, init, bias;
};
const std::vector<Config> kConfigs = {{1, false, false, false, true}, {2, true, false, true, true},
                                      {2, false, true, true, true},   {1, true, true, false, true},
                                      {2, true, true, true, false}};
}  // namespace

TEST_CASE("nn::LSTM and nn::GRU match an f64 reference (layers, directions, batch_first, initial states)",
          "[rnn]") {
  const int64_t T = 5, N = 3, I = 4, H = 6;
  for (bool is_lstm : {true, false})
    for (const Config& c : kConfigs) {
      INFO((is_lstm ? "LSTM" : "GRU") << " layers " << c.layers << " bidirectional " << c.bidirectional
                                      << " batch_first " << c.batch_first << " init " << c.init << " bias " << c.bias);
      manual_seed(1);
      const int64_t dirs = c.bidirectional ? 2 : 1;
      nn::LSTM lstm{nullptr};
      nn::GRU gru{nullptr};
      std::vector<Tensor> params;
      if (is_lstm) {
        lstm = nn::LSTM(nn::LSTMOptions(I, H).num_layers(c.layers).bidirectional(c.bidirectional)
                            .batch_first(c.batch_first).bias(c.bias));
        lstm->to(kFloat64);
        params = lstm->flat_weights();
      } else {
        gru = nn::GRU(nn::GRUOptions(I, H).num_layers(c.layers).bidirectional(c.bidirectional)
                          .batch_first(c.batch_first).bias(c.bias));
        gru->to(kFloat64);
        params = gru->flat_weights();
      }
      std::vector<Vec> p;
      for (const Tensor& t : params) p.push_back(values_of(t));
      const Tensor x = seeded({T, N, I}, 2);
      const Tensor h0 = c.init ? seeded({c.layers * dirs, N, H}, 3) : Tensor();
      const Tensor c0 = c.init ? seeded({c.layers * dirs, N, H}, 4) : Tensor();
      const RefOut ref = ref_rnn(is_lstm, values_of(x), T, N, I, H, c.layers, dirs, c.bias, p, values_of(h0), values_of(c0));
      const Tensor in = c.batch_first ? x.transpose(0, 1).contiguous() : x;
      Tensor out, hn, cn;
      if (is_lstm) {
        std::tuple<Tensor, Tensor> hx{h0, c0};
        auto r = c.init ? lstm(in, hx) : lstm(in);
        out = std::get<0>(r);
        std::tie(hn, cn) = std::get<1>(r);
      } else {
        std::tie(out, hn) = gru(in, h0);
      }
      if (c.batch_first) out = out.transpose(0, 1);
      CHECK(out.sizes() == IntList{T, N, dirs * H});
      CHECK(hn.sizes() == IntList{c.layers * dirs, N, H});
      CHECK(max_diff(out, ref.out) < 1e-12);
      CHECK(max_diff(hn, ref.hn) < 1e-12);
      if (is_lstm) CHECK(max_diff(cn, ref.cn) < 1e-12);
    }
}

TEST_CASE("LSTMCell and GRUCell match the f64 step, and unbatched inputs", "[rnn]") {
  const int64_t N = 3, I = 5, H = 4;
  manual_seed(5);
  nn::LSTMCell lc(I, H);
  nn::GRUCell gc(I, H);
  lc->to(kFloat64);
  gc->to(kFloat64);
  const Tensor x = seeded({N, I}, 6), h = seeded({N, H}, 7), c = seeded({N, H}, 8);
  Vec hr = values_of(h), cr = values_of(c), hg = values_of(h), xv = values_of(x), unused(static_cast<size_t>(N * H));
  for (int64_t n = 0; n < N; ++n) {
    ref_step(true, values_of(lc->weight_ih), values_of(lc->weight_hh), values_of(lc->bias_ih), values_of(lc->bias_hh), &xv[n * I], I,
             &hr[n * H], &cr[n * H], H);
    ref_step(false, values_of(gc->weight_ih), values_of(gc->weight_hh), values_of(gc->bias_ih), values_of(gc->bias_hh), &xv[n * I], I,
             &hg[n * H], &unused[n * H], H);
  }
  auto [h1, c1] = lc(x, std::tuple<Tensor, Tensor>{h, c});
  CHECK(max_diff(h1, hr) < 1e-12);
  CHECK(max_diff(c1, cr) < 1e-12);
  CHECK(max_diff(gc(x, h), hg) < 1e-12);
  // Unbatched: [I] and [H] give the batched result's row.
  auto [hu, cu] = lc(x[1], std::tuple<Tensor, Tensor>{h[1], c[1]});
  CHECK(testing::max_abs_diff(hu, h1[1]) < 1e-14);
  CHECK(testing::max_abs_diff(gc(x[1], h[1]), gc(x, h)[1]) < 1e-14);
  // Zero states when absent.
  auto [hz, cz] = lc(x);
  auto [hz2, cz2] = lc(x, std::tuple<Tensor, Tensor>{zeros({N, H}, kFloat64), zeros({N, H}, kFloat64)});
  CHECK(testing::max_abs_diff(hz, hz2) == 0.0);
  // An unbatched sequence [T, I].
  nn::LSTM seq(nn::LSTMOptions(I, H).bidirectional(true));
  seq->to(kFloat64);
  const Tensor xs = seeded({4, I}, 9);
  auto [o1, s1] = seq(xs);
  auto [o2, s2] = seq(xs.unsqueeze(1));
  CHECK(o1.sizes() == IntList{4, 2 * H});
  CHECK(std::get<0>(s1).sizes() == IntList{2, H});
  CHECK(testing::max_abs_diff(o1, o2.squeeze(1)) < 1e-14);
}

TEST_CASE("LSTM/GRU parameters: PyTorch's names, shapes and uniform(-1/sqrt(H), 1/sqrt(H)) init", "[rnn]") {
  nn::LSTM lstm(nn::LSTMOptions(10, 20).num_layers(2).bidirectional(true));
  std::vector<std::pair<std::string, IntList>> want;
  for (const char* l : {"0", "1"})
    for (const char* sfx : {"", "_reverse"}) {
      const std::string s = std::string("_l") + l + sfx;
      want.push_back({"weight_ih" + s, {80, l[0] == '0' ? 10 : 40}});
      want.push_back({"weight_hh" + s, {80, 20}});
      want.push_back({"bias_ih" + s, {80}});
      want.push_back({"bias_hh" + s, {80}});
    }
  auto sd = lstm->state_dict();
  REQUIRE(sd.size() == want.size());
  size_t k = 0;
  for (const auto& [name, t] : sd) {
    CHECK(name == want[k].first);
    CHECK(t.sizes() == want[k].second);
    ++k;
  }
  nn::GRU gru(nn::GRUOptions(10, 20).bias(false));
  CHECK(gru->state_dict().keys() == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0"});
  CHECK(gru->named_parameters()["weight_ih_l0"].sizes() == IntList{60, 10});
  nn::LSTMCell lc(10, 20);
  CHECK(lc->state_dict().keys() == std::vector<std::string>{"weight_ih", "weight_hh", "bias_ih", "bias_hh"});
  CHECK(lc->weight_ih.sizes() == IntList{80, 10});
  nn::GRUCell gc(10, 20);
  CHECK(gc->bias_hh.sizes() == IntList{60});
  const double bound = 1.0 / std::sqrt(20.0);
  for (const Tensor& t : lstm->parameters()) {
    CHECK(max(abs(t)).item<double>() <= bound);
    CHECK(max(abs(t)).item<double>() > 0.5 * bound);
  }
  std::ostringstream os;
  os << *gru;
  CHECK(os.str() == "GRU(10, 20, num_layers=1, bias=false, batch_first=false, dropout=0, bidirectional=false)");
}

TEST_CASE("lstm_cell, gru_cell, lstm and gru gradchecks (f64), second order, partial outputs", "[rnn][gradcheck]") {
  manual_seed(10);
  const int64_t N = 2, I = 3, H = 2;
  Tensor x = leaf({N, I}), h = leaf({N, H}), c = leaf({N, H});
  Tensor wl = leaf({4 * H, I}), ul = leaf({4 * H, H}), bl = leaf({4 * H}), cl = leaf({4 * H});
  Tensor wg = leaf({3 * H, I}), ug = leaf({3 * H, H}), bg = leaf({3 * H}), cg = leaf({3 * H});
  auto lcell = [](const tensor_list& t) {
    auto [h1, c1] = lstm_cell(t[0], t[1], t[2], t[3], t[4], t[5], t[6]);
    return cat({h1, c1}, 1);
  };
  auto gcell = [](const tensor_list& t) { return gru_cell(t[0], t[1], t[2], t[3], t[4], t[5]); };
  CHECK(gradcheck(lcell, {x, h, c, wl, ul, bl, cl}) == "");
  CHECK(gradcheck(gcell, {x, h, wg, ug, bg, cg}) == "");
  CHECK(gradgradcheck(lcell, {x, h, c, wl, ul, bl, cl}) == "");
  CHECK(gradgradcheck(gcell, {x, h, wg, ug, bg, cg}) == "");

  // Two layers, bidirectional, initial states: every parameter and input.
  const int64_t T = 3, L = 2;
  for (bool is_lstm : {true, false}) {
    INFO((is_lstm ? "lstm" : "gru"));
    const int64_t G = is_lstm ? 4 : 3;
    tensor_list in = {leaf({T, N, I}), leaf({L * 2, N, H}), leaf({L * 2, N, H})};
    for (int64_t l = 0; l < L; ++l)
      for (int d = 0; d < 2; ++d)
        for (const IntList& s : {IntList{G * H, l == 0 ? I : 2 * H}, IntList{G * H, H}, IntList{G * H}, IntList{G * H}})
          in.push_back(leaf(s, 0.5));
    RnnArgs a;
    a.num_layers = L;
    a.bidirectional = true;
    auto f = [&](const tensor_list& t) {
      const tensor_list params(t.begin() + 3, t.end());
      if (is_lstm) {
        auto [o, hn, cn] = lstm(t[0], t[1], t[2], params, a);
        return cat({o.reshape({-1}), hn.reshape({-1}), cn.reshape({-1})}, 0);
      }
      auto [o, hn] = gru(t[0], t[1], params, a);
      return cat({o.reshape({-1}), hn.reshape({-1})}, 0);
    };
    if (!is_lstm) in[2] = in[2].detach();  // gru has no cell state
    CHECK(gradcheck(f, in) == "");
    // Each layer's steps are one node; under create_graph its backward records them step by step.
    CHECK(gradgradcheck(f, in) == "");
    // Outputs nobody uses reach the node as undefined gradients: only the sequence, only the final states.
    for (int which = 0; which < 2; ++which) {
      INFO("only " << (which == 0 ? "output" : "final states"));
      auto part = [&](const tensor_list& t) {
        const tensor_list params(t.begin() + 3, t.end());
        if (is_lstm) {
          auto [o, hn, cn] = lstm(t[0], t[1], t[2], params, a);
          return which == 0 ? o : cn;
        }
        auto [o, hn] = gru(t[0], t[1], params, a);
        return which == 0 ? o : hn;
      };
      CHECK(gradcheck(part, in) == "");
    }
  }
}

TEST_CASE("LSTM dropout between layers in training only, and autocast runs the LSTM in f16", "[rnn]") {
  manual_seed(12);
  nn::LSTM m(nn::LSTMOptions(4, 5).num_layers(2).dropout(0.5));
  const Tensor x = randn({6, 2, 4});
  m->eval();
  const Tensor ye = std::get<0>(m(x));
  CHECK(testing::max_abs_diff(std::get<0>(m(x)), ye) == 0.0);
  m->train();
  CHECK(testing::max_abs_diff(std::get<0>(m(x)), ye) > 1e-3);
  nn::LSTM m0(nn::LSTMOptions(4, 5).num_layers(2));
  m0->train();
  const Tensor y0 = std::get<0>(m0(x));
  m0->eval();
  CHECK(testing::max_abs_diff(std::get<0>(m0(x)), y0) == 0.0);

  Tensor y16, hn;
  {
    amp::AutocastGuard ac(kFloat16);
    auto [o, s] = m0(x);
    y16 = o;
    hn = std::get<0>(s);
  }
  CHECK(y16.dtype() == kFloat16);
  CHECK(hn.dtype() == kFloat16);
  CHECK(testing::max_abs_diff(y16, y0) < 1e-2);
  // Gradients reach the f32 parameters through the casts.
  sum(y16.to(kFloat32)).backward();
  CHECK(m0->flat_weights()[0].grad().dtype() == kFloat32);
  nn::GRU g(4, 5);
  amp::AutocastGuard ac(kBFloat16);
  CHECK(std::get<0>(g(x)).dtype() == kBFloat16);
}

TEST_CASE("lstm/gru and the cells reject bad shapes, dtypes and options clearly", "[rnn]") {
  nn::LSTM m(nn::LSTMOptions(4, 5).num_layers(2));
  CHECK_THROWS_WITH(m(randn({2, 3, 4, 1})), Catch::Contains("lstm: expected input"));
  CHECK_THROWS_WITH(m(randn({6, 2, 3})), Catch::Contains("weight_ih_l0") && Catch::Contains("must be [20, 3]"));
  CHECK_THROWS_WITH(m(randn({6, 2, 4}), std::tuple<Tensor, Tensor>{randn({1, 2, 5}), randn({2, 2, 5})}),
                    Catch::Contains("initial state") && Catch::Contains("[2, 2, 5]"));
  CHECK_THROWS_WITH(m(randn({6, 2, 4}, TensorOptions(kFloat64))), Catch::Contains("input's dtype"));
  CHECK_THROWS_WITH(m(randn({0, 2, 4})), Catch::Contains("empty"));
  CHECK_THROWS_WITH(nn::LSTM(nn::LSTMOptions(4, 5).num_layers(0)), Catch::Contains("num_layers"));
  CHECK_THROWS_WITH(nn::GRU(nn::GRUOptions(4, 5).dropout(1.5)), Catch::Contains("dropout"));
  CHECK_THROWS_WITH(nn::GRU(nn::GRUOptions(0, 5)), Catch::Contains("input_size"));
  nn::GRU g(4, 5);
  CHECK_THROWS_WITH(g(randn({6, 2, 4}), randn({1, 3, 5})), Catch::Contains("gru: initial state"));
  CHECK_THROWS_WITH(gru(randn({3, 2, 4}), Tensor(), {randn({15, 4})}, RnnArgs{}), Catch::Contains("parameter tensors"));
  const Tensor w = randn({20, 4}), u = randn({20, 5});
  CHECK_THROWS_WITH(lstm_cell(randn({2, 4}), randn({2, 5}), randn({3, 5}), w, u), Catch::Contains("lstm_cell: state"));
  CHECK_THROWS_WITH(lstm_cell(randn({2, 3}), randn({2, 5}), randn({2, 5}), w, u), Catch::Contains("weight_ih"));
  CHECK_THROWS_WITH(gru_cell(randn({2, 4}), randn({2, 5}), randn({15, 4}), randn({16, 5})),
                    Catch::Contains("gru_cell: weight_hh"));
  CHECK_THROWS_WITH(lstm_cell_fused(randn({2, 8}), randn({2, 3})), Catch::Contains("lstm_cell_fused"));
  CHECK_THROWS_WITH(gru_cell_fused(randn({2, 6}), randn({2, 6}, TensorOptions(kFloat64)), randn({2, 2})),
                    Catch::Contains("one dtype"));
}

TEST_CASE("lstm/gru over an empty batch: empty outputs, zero weight gradients", "[rnn]") {
  for (int64_t T : {1, 3}) {
    INFO("T = " << T);
    nn::LSTM l(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true));
    nn::GRU g(nn::GRUOptions(3, 4).num_layers(2));
    const Tensor x = randn({T, 0, 3}).set_requires_grad(true);
    auto [o, s] = l(x);
    auto [o2, h2] = g(x);
    CHECK(o.sizes() == IntList{T, 0, 8});
    CHECK(std::get<0>(s).sizes() == IntList{4, 0, 4});
    CHECK(o2.sizes() == IntList{T, 0, 4});
    (sum(o) + sum(std::get<1>(s)) + sum(o2) + sum(h2)).backward();
    CHECK(x.grad().sizes() == IntList{T, 0, 3});
    for (const Tensor& w : {l->flat_weights()[1], g->flat_weights()[1], l->flat_weights()[0]}) {
      REQUIRE(w.grad().defined());
      CHECK(max_diff(w.grad(), Vec(static_cast<size_t>(w.numel()), 0.0)) == 0.0);
    }
  }
}
