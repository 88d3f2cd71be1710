// LSTM with proj_size: torch.nn.LSTM's state dict, outputs and gradients (padded and packed), a step-by-step
// reference built from the fused cell, f64 gradchecks of both backward paths, autocast and the errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <sstream>
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
using testing::max_abs_diff;

namespace {
// One direction of one projected layer, step by step from linear, the fused cell and one product: out [T, N, P],
// (h_T, c_T).
std::tuple<Tensor, Tensor, Tensor> reference_layer(const Tensor& x, Tensor h, Tensor c, const Tensor* w, bool reverse) {
  const int64_t T = x.size(0);
  tensor_list outs(static_cast<size_t>(T));
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    Tensor hc;
    std::tie(hc, c) = lstm_cell_fused(linear(x.select(0, t), w[0], w[2]) + linear(h, w[1], w[3]), c);
    h = matmul(hc, w[4].t());
    outs[static_cast<size_t>(t)] = h;
  }
  return {stack(outs, 0), h, c};
}
}  // namespace

TEST_CASE("LSTM proj_size loads torch.nn.LSTM's state dict and gives its outputs and gradients", "[rnn]") {
  for (const std::string name : {"uni", "bi_batch_first"}) {
    INFO(name);
    // tests/golden/make_lstm_proj_reference.py: the weights under PyTorch's names, and under "ref." its f64 run.
    const TensorDict file = load_tensors(mpx::testing::test_data_dir() + "/golden/lstm_proj/" + name + ".safetensors");
    const std::map<std::string, Tensor> weights = testing::model_weights(file);
    const bool bi = name == "bi_batch_first";
    nn::LSTM m(nn::LSTMOptions(4, 6).num_layers(2).proj_size(3).bidirectional(bi).batch_first(bi));
    m->to(kFloat64);
    m->load_state_dict(weights);  // strict: weight_hr_l* and the [4H, P] weight_hh_l* match both ways
    const Tensor x = file.at("ref.x").clone().set_requires_grad(true);
    const std::tuple<Tensor, Tensor> hx{file.at("ref.h0"), file.at("ref.c0")};
    auto [out, state] = m(x, hx);
    auto [hn, cn] = state;
    CHECK(out.sizes() == file.at("ref.out").sizes());
    CHECK(max_abs_diff(out, file.at("ref.out")) < 1e-12);
    CHECK(max_abs_diff(hn, file.at("ref.hn")) < 1e-12);
    CHECK(max_abs_diff(cn, file.at("ref.cn")) < 1e-12);
    (sum(out * file.at("ref.g_out")) + sum(hn) + sum(cn)).backward();
    CHECK(max_abs_diff(x.grad(), file.at("ref.grad.x")) < 1e-12);
    for (const auto& item : m->named_parameters()) {
      INFO(item.key());
      CHECK(max_abs_diff(item.value().grad(), file.at("ref.grad." + item.key())) < 1e-12);
    }

    // Packed, unsorted lengths: each sequence stops at its own length and its states come back in input order.
    namespace rnn = nn::utils::rnn;
    NoGradGuard ng;
    const auto packed = rnn::pack_padded_sequence(file.at("ref.x"), file.at("ref.lengths"), bi, false);
    auto [pout, pstate] = m->forward_with_packed_input(packed, hx);
    const Tensor padded = std::get<0>(rnn::pad_packed_sequence(pout, bi));
    CHECK(max_abs_diff(padded, file.at("ref.packed_out")) < 1e-12);
    CHECK(max_abs_diff(std::get<0>(pstate), file.at("ref.packed_hn")) < 1e-12);
    CHECK(max_abs_diff(std::get<1>(pstate), file.at("ref.packed_cn")) < 1e-12);
  }
}

TEST_CASE("LSTM proj_size: names, shapes, init, printing and a step-by-step reference", "[rnn]") {
  manual_seed(2);
  nn::LSTM m(nn::LSTMOptions(5, 8).num_layers(2).proj_size(3).bidirectional(true));
  const auto sd = m->named_parameters();
  CHECK(sd["weight_ih_l0"].sizes() == IntList{32, 5});
  CHECK(sd["weight_hh_l0"].sizes() == IntList{32, 3});
  CHECK(sd["weight_hr_l0"].sizes() == IntList{3, 8});
  CHECK(sd["weight_ih_l1_reverse"].sizes() == IntList{32, 6});  // two directions of 3 projected features
  CHECK(sd["weight_hr_l1_reverse"].sizes() == IntList{3, 8});
  CHECK(m->flat_weights().size() == 20);
  for (const auto& item : sd) CHECK(max(abs(item.value())).item<double>() <= 1.0 / std::sqrt(8.0));
  std::ostringstream os;
  m->pretty_print(os);
  CHECK(os.str() == "LSTM(5, 8, num_layers=2, bias=true, batch_first=false, dropout=0, bidirectional=true, proj_size=3)");

  m->to(kFloat64);
  const Tensor x = randn({7, 2, 5}, TensorOptions(kFloat64));
  auto [out, state] = m(x);
  CHECK(out.sizes() == IntList{7, 2, 6});
  CHECK(std::get<0>(state).sizes() == IntList{4, 2, 3});
  CHECK(std::get<1>(state).sizes() == IntList{4, 2, 8});
  // The reference: each layer and direction step by step.
  const auto& w = m->flat_weights();
  Tensor in = x;
  for (int64_t l = 0; l < 2; ++l) {
    tensor_list dirs;
    for (int d = 0; d < 2; ++d) {
      const int64_t idx = l * 2 + d;
      auto [o, h, c] = reference_layer(in, zeros({2, 3}, x.options()), zeros({2, 8}, x.options()), &w[idx * 5], d == 1);
      dirs.push_back(o);
      CHECK(max_abs_diff(std::get<0>(state).select(0, idx), h) < 1e-12);
      CHECK(max_abs_diff(std::get<1>(state).select(0, idx), c) < 1e-12);
    }
    in = cat(dirs, 2);
  }
  CHECK(max_abs_diff(out, in) < 1e-12);
}

TEST_CASE("lstm with proj_size: f64 gradcheck and second order, bias and no bias", "[rnn][gradcheck]") {
  manual_seed(11);
  const int64_t T = 3, N = 2, I = 3, H = 3, P = 2, L = 2;
  for (bool bias : {true, false}) {
    INFO("bias " << bias);
    tensor_list in = {leaf({T, N, I}), leaf({L * 2, N, P}), leaf({L * 2, N, H})};
    for (int64_t l = 0; l < L; ++l)
      for (int d = 0; d < 2; ++d) {
        in.push_back(leaf({4 * H, l == 0 ? I : 2 * P}, 0.5));
        in.push_back(leaf({4 * H, P}, 0.5));
        if (bias) {
          in.push_back(leaf({4 * H}, 0.5));
          in.push_back(leaf({4 * H}, 0.5));
        }
        in.push_back(leaf({P, H}, 0.5));
      }
    RnnArgs a;
    a.num_layers = L;
    a.bidirectional = true;
    a.has_biases = bias;
    a.proj_size = P;
    auto f = [&](const tensor_list& t) {
      auto [o, hn, cn] = lstm(t[0], t[1], t[2], tensor_list(t.begin() + 3, t.end()), a);
      return cat({o.reshape({-1}), hn.reshape({-1}), cn.reshape({-1})}, 0);
    };
    CHECK(gradcheck(f, in) == "");
    CHECK(gradgradcheck(f, in) == "");  // the layer's backward recorded step by step
    // Only the cell states: the projected outputs' gradients arrive undefined.
    auto only_c = [&](const tensor_list& t) {
      return std::get<2>(lstm(t[0], t[1], t[2], tensor_list(t.begin() + 3, t.end()), a));
    };
    CHECK(gradcheck(only_c, in) == "");
  }
}

TEST_CASE("LSTM proj_size under bf16 autocast and in training with dropout", "[rnn]") {
  manual_seed(4);
  nn::LSTM m(nn::LSTMOptions(6, 16).num_layers(2).proj_size(8).dropout(0.25));
  const Tensor x = randn({9, 4, 6});
  m->eval();
  const Tensor ref = std::get<0>(m(x));
  Tensor low;
  {
    amp::AutocastGuard ac(kBFloat16);
    low = std::get<0>(m(x));
  }
  CHECK(low.dtype() == kBFloat16);
  CHECK(max_abs_diff(low, ref) < 0.05);
  m->train();
  auto [y, st] = m(x);
  sum(y).backward();
  for (const auto& item : m->named_parameters()) {
    INFO(item.key());
    CHECK(item.value().grad().defined());
  }
}

TEST_CASE("LSTM proj_size errors name what is wrong", "[rnn]") {
  CHECK_THROWS_WITH(nn::LSTM(nn::LSTMOptions(4, 6).proj_size(6)), Catch::Contains("smaller than hidden_size 6"));
  CHECK_THROWS_WITH(nn::LSTM(nn::LSTMOptions(4, 6).proj_size(-1)), Catch::Contains("proj_size"));
  nn::LSTM m(nn::LSTMOptions(4, 6).proj_size(2));
  const Tensor x = randn({3, 2, 4});
  // h0 with hidden_size features instead of proj_size.
  const std::tuple<Tensor, Tensor> bad{zeros({1, 2, 6}), zeros({1, 2, 6})};
  CHECK_THROWS_WITH(m(x, bad), Catch::Contains("must be [1, 2, 2]") && Catch::Contains("proj_size"));
  RnnArgs a;
  a.proj_size = 2;
  const tensor_list gru_params = {randn({18, 4}), randn({18, 6})};
  CHECK_THROWS_WITH(gru(x, Tensor(), gru_params, a), Catch::Contains("proj_size is an LSTM option"));
  // The LSTM's parameters without weight_hr.
  const tensor_list no_hr = {randn({24, 4}), randn({24, 2}), randn({24}), randn({24})};
  CHECK_THROWS_WITH(lstm(x, Tensor(), Tensor(), no_hr, a), Catch::Contains("expected 5 parameter tensors"));
}
