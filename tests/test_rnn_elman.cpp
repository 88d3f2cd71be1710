// The Elman RNN (nn::RNN, nn::RNNCell, rnn_tanh/rnn_relu): an f64 reference, PyTorch's names, gradchecks, errors, CUDA.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "gradcheck.h"
#include "test_util.h"

using namespace mpx;

namespace {
using Vec = std::vector<double>;

Vec values_of(const Tensor& t) {
  NoGradGuard ng;
  const Tensor c = t.to(kFloat64).contiguous();
  return Vec(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

Tensor seeded(const IntList& shape, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64));
}

// The sequence in f64 loops: x [T, N, I] time-major, params in PyTorch's flat order; returns (out, h_n) flat.
std::pair<Vec, Vec> reference(const Vec& x, int64_t T, int64_t N, int64_t I, int64_t H, int64_t L, int64_t dirs,
                              bool bias, bool relu, const std::vector<Vec>& p, const Vec& h0) {
  const int64_t per = bias ? 4 : 2;
  Vec in = x, hn(static_cast<size_t>(L * dirs * N * H));
  int64_t width = I;
  for (int64_t l = 0; l < L; ++l) {
    Vec out(static_cast<size_t>(T * N * dirs * H));
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t idx = l * dirs + d;
      const Vec &wih = p[idx * per], &whh = p[idx * per + 1];
      Vec h(static_cast<size_t>(N * H), 0.0);
      if (!h0.empty())
        for (int64_t k = 0; k < N * H; ++k) h[k] = h0[idx * N * H + k];
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = d ? T - 1 - s : s;
        Vec next(h.size());
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < H; ++j) {
            double z = bias ? p[idx * per + 2][j] + p[idx * per + 3][j] : 0.0;
            for (int64_t i = 0; i < width; ++i) z += wih[j * width + i] * in[(t * N + n) * width + i];
            for (int64_t k = 0; k < H; ++k) z += whh[j * H + k] * h[n * H + k];
            next[n * H + j] = relu ? std::max(z, 0.0) : std::tanh(z);
            out[(t * N + n) * dirs * H + d * H + j] = next[n * H + j];
          }
        h = next;
      }
      for (int64_t k = 0; k < N * H; ++k) hn[idx * N * H + k] = h[k];
    }
    in = out;
    width = dirs * H;
  }
  return {in, hn};
}

// |t - ref| at most, ref flat in t's (logical, row-major) order.
double max_diff(const Tensor& t, const Vec& ref) { return testing::max_abs_diff(t, tensor(ref, t.sizes())); }
}  // namespace

TEST_CASE("nn::RNN (tanh and relu) matches an f64 reference: layers, directions, batch_first, initial states, no bias",
          "[rnn]") {
  const int64_t T = 5, N = 3, I = 4, H = 6;
  struct Config {
    int64_t layers;
    bool bidirectional, batch_first, init, bias;
  };
  for (const std::string nl : {"tanh", "relu"})
    for (const Config& c : {Config{1, false, false, false, true}, Config{2, true, false, true, true},
                            Config{2, false, true, true, true}, Config{2, true, true, true, false}}) {
      INFO(nl << " layers " << c.layers << " bidirectional " << c.bidirectional << " batch_first " << c.batch_first
              << " init " << c.init << " bias " << c.bias);
      manual_seed(1);
      const int64_t dirs = c.bidirectional ? 2 : 1;
      nn::RNN rnn(nn::RNNOptions(I, H).num_layers(c.layers).nonlinearity(nl).bidirectional(c.bidirectional)
                      .batch_first(c.batch_first).bias(c.bias));
      rnn->to(kFloat64);
      std::vector<Vec> p;
      for (const Tensor& t : rnn->flat_weights()) p.push_back(values_of(t));
      const Tensor x = seeded({T, N, I}, 2), h0 = c.init ? seeded({c.layers * dirs, N, H}, 3) : Tensor();
      const auto [ref_out, ref_hn] =
          reference(values_of(x), T, N, I, H, c.layers, dirs, c.bias, nl == "relu", p, c.init ? values_of(h0) : Vec());
      auto [out, hn] = rnn(c.batch_first ? x.transpose(0, 1).contiguous() : x, h0);
      if (c.batch_first) out = out.transpose(0, 1);
      CHECK(out.sizes() == IntList{T, N, dirs * H});
      CHECK(hn.sizes() == IntList{c.layers * dirs, N, H});
      CHECK(max_diff(out, ref_out) < 1e-12);
      CHECK(max_diff(hn, ref_hn) < 1e-12);
    }
}

TEST_CASE("nn::RNN and nn::RNNCell: PyTorch's names and shapes, init, the cell against the sequence, unbatched",
          "[rnn]") {
  manual_seed(2);
  nn::RNN rnn(nn::RNNOptions(5, 7).num_layers(2).bidirectional(true));
  std::vector<std::string> names;
  for (const auto& item : rnn->named_parameters()) names.push_back(item.key());
  CHECK(names == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                          "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                                          "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1",
                                          "bias_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse",
                                          "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  CHECK(rnn->named_parameters()["weight_ih_l0"].sizes() == IntList{7, 5});
  CHECK(rnn->named_parameters()["weight_ih_l1"].sizes() == IntList{7, 14});
  CHECK(rnn->named_parameters()["weight_hh_l1_reverse"].sizes() == IntList{7, 7});
  const double k = 1.0 / std::sqrt(7.0);
  for (const Tensor& p : rnn->parameters()) CHECK(max(abs(p)).item<double>() <= k);
  std::ostringstream printed;
  printed << *rnn;
  CHECK(printed.str().find("RNN(5, 7, num_layers=2, nonlinearity=tanh") != std::string::npos);

  // One layer's sequence equals its cell run step by step, batched and unbatched.
  for (const std::string nl : {"tanh", "relu"}) {
    INFO(nl);
    nn::RNN one(nn::RNNOptions(3, 4).nonlinearity(nl));
    nn::RNNCell cell(nn::RNNCellOptions(3, 4).nonlinearity(nl));
    NoGradGuard ng;
    cell->weight_ih.copy_(one->named_parameters()["weight_ih_l0"]);
    cell->weight_hh.copy_(one->named_parameters()["weight_hh_l0"]);
    cell->bias_ih.copy_(one->named_parameters()["bias_ih_l0"]);
    cell->bias_hh.copy_(one->named_parameters()["bias_hh_l0"]);
    const Tensor x = randn({6, 2, 3});
    auto [out, hn] = one(x);
    Tensor h;
    for (int64_t t = 0; t < 6; ++t) {
      h = cell(x.select(0, t), h);
      CHECK(max(abs(h - out.select(0, t))).item<double>() < 1e-5);
    }
    CHECK(max(abs(h - hn.select(0, 0))).item<double>() < 1e-5);
    auto [out1, hn1] = one(x.select(1, 1));  // unbatched [T, I]
    CHECK(out1.sizes() == IntList{6, 4});
    CHECK(hn1.sizes() == IntList{1, 4});
    CHECK(max(abs(out1 - out.select(1, 1))).item<double>() < 1e-6);
    CHECK(cell(x.select(0, 0).select(0, 1)).sizes() == IntList{4});
  }
}

TEST_CASE("rnn_tanh, rnn_relu and their cells: f64 gradchecks, second order, only the final state used",
          "[rnn][gradcheck]") {
  using testing::gradcheck;
  using testing::gradgradcheck;
  using testing::leaf;
  manual_seed(3);
  const int64_t T = 4, N = 2, I = 3, H = 3;
  for (bool relu : {false, true}) {
    INFO((relu ? "relu" : "tanh"));
    auto seq = [relu](const Tensor& x, const Tensor& h0, const tensor_list& ps, bool bidirectional) {
      RnnArgs a;
      a.num_layers = 2;
      a.bidirectional = bidirectional;
      return relu ? rnn_relu(x, h0, ps, a) : rnn_tanh(x, h0, ps, a);
    };
    for (bool bidirectional : {false, true}) {
      INFO("bidirectional " << bidirectional);
      const int64_t D = bidirectional ? 2 : 1;
      tensor_list ps;
      for (int64_t l = 0; l < 2; ++l)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t in = l == 0 ? I : D * H;
          for (const IntList& s : {IntList{H, in}, IntList{H, H}, IntList{H}, IntList{H}}) ps.push_back(leaf(s));
        }
      const Tensor x = leaf({T, N, I}), h0 = leaf({2 * D, N, H});
      tensor_list all = {x, h0};
      all.insert(all.end(), ps.begin(), ps.end());
      auto f = [&](const tensor_list& v) {
        auto [out, hn] = seq(v[0], v[1], tensor_list(v.begin() + 2, v.end()), bidirectional);
        return sum(out * out) + sum(hn * 0.5);
      };
      CHECK(gradcheck([&](const tensor_list& v) { return f(v); }, all) == "");
      // Second order in the input, the state and the first layer's weights (the others held).
      CHECK(gradgradcheck([&](const tensor_list& v) {
              tensor_list q = v;
              q.insert(q.end(), ps.begin() + 2, ps.end());
              return f(q);
            }, {x, h0, ps[0], ps[1]}) == "");
      // Only the final state reaches the loss.
      CHECK(gradcheck([&](const tensor_list& v) {
              return std::get<1>(seq(v[0], v[1], tensor_list(v.begin() + 2, v.end()), bidirectional));
            }, all) == "");
    }
    const Tensor x = leaf({N, I}), h = leaf({N, H}), wi = leaf({H, I}), wh = leaf({H, H}), bi = leaf({H}), bh = leaf({H});
    CHECK(gradcheck([relu](const tensor_list& v) {
            return relu ? rnn_relu_cell(v[0], v[1], v[2], v[3], v[4], v[5]) : rnn_tanh_cell(v[0], v[1], v[2], v[3], v[4], v[5]);
          }, {x, h, wi, wh, bi, bh}) == "");
  }
}

TEST_CASE("nn::RNN: dropout between layers in training only, bf16 autocast, an empty batch", "[rnn]") {
  manual_seed(4);
  nn::RNN rnn(nn::RNNOptions(4, 8).num_layers(2).dropout(0.5));
  const Tensor x = randn({5, 3, 4});
  rnn->eval();
  const Tensor a = std::get<0>(rnn(x)), b = std::get<0>(rnn(x));
  CHECK(max(abs(a - b)).item<double>() == 0.0);
  rnn->train();
  manual_seed(9);
  const Tensor c = std::get<0>(rnn(x));
  CHECK(max(abs(c - a)).item<double>() > 1e-3);
  rnn->eval();
  {
    amp::AutocastGuard ac(kBFloat16);
    auto [out, hn] = rnn(x);
    CHECK(out.dtype() == kBFloat16);
    CHECK(max(abs(out.to(kFloat32) - a)).item<double>() < 0.05);
  }
  // An empty batch: empty outputs, zero weight gradients.
  rnn->train();
  rnn->zero_grad();
  const Tensor e = randn({5, 0, 4});
  auto [out, hn] = rnn(e);
  CHECK(out.sizes() == IntList{5, 0, 8});
  (sum(out) + sum(hn)).backward();
  CHECK(max(abs(rnn->named_parameters()["weight_hh_l0"].grad())).item<double>() == 0.0);
}

TEST_CASE("nn::RNN and the Elman ops reject bad options, shapes and dtypes clearly", "[rnn]") {
  CHECK_THROWS_WITH(nn::RNN(nn::RNNOptions(4, 8).nonlinearity("sigmoid")), Catch::Contains("\"tanh\" or \"relu\""));
  CHECK_THROWS_WITH(nn::RNNCell(nn::RNNCellOptions(4, 8).nonlinearity("gelu")), Catch::Contains("\"tanh\" or \"relu\""));
  nn::RNN rnn(4, 8);
  CHECK_THROWS_WITH(rnn(randn({5, 3, 6})), Catch::Contains("weight_ih_l0"));
  CHECK_THROWS_WITH(rnn(randn({5, 3, 4}), randn({2, 3, 8})), Catch::Contains("initial state"));
  CHECK_THROWS_WITH(rnn(randn({5, 3, 4}).to(kFloat64)), Catch::Contains("dtype"));
  nn::RNNCell cell(4, 8);
  CHECK_THROWS_WITH(cell(randn({3, 4}), randn({2, 8})), Catch::Contains("state"));
}

TEST_CASE("cuda nn::RNN (tanh and relu, two layers, bidirectional) matches the CPU, values and gradients",
          "[cuda][rnn]") {
  if (!testing::cuda_ready()) return;
  for (const std::string nl : {"tanh", "relu"}) {
    INFO(nl);
    manual_seed(5);
    nn::RNN cpu(nn::RNNOptions(6, 10).num_layers(2).bidirectional(true).nonlinearity(nl).batch_first(true));
    nn::RNN gpu(nn::RNNOptions(6, 10).num_layers(2).bidirectional(true).nonlinearity(nl).batch_first(true));
    gpu->load_state_dict(cpu->state_dict());
    gpu->to(Device::cuda());
    const Tensor x = randn({3, 7, 6}), h0 = randn({4, 3, 10});
    auto [oc, hc] = cpu(x, h0);
    auto [og, hg] = gpu(x.to(Device::cuda()), h0.to(Device::cuda()));
    CHECK(max(abs(og.to(Device::cpu()) - oc)).item<double>() < 1e-4);
    CHECK(max(abs(hg.to(Device::cpu()) - hc)).item<double>() < 1e-4);
    (sum(oc * oc) + sum(hc)).backward();
    (sum(og * og) + sum(hg)).backward();
    for (const auto& item : cpu->named_parameters()) {
      INFO(item.key());
      const Tensor g = gpu->named_parameters()[item.key()].grad().to(Device::cpu());
      CHECK(max(abs(g - item.value().grad())).item<double>() < 1e-3);
    }
  }
}
