// Packed variable-length batches: pack/pad round trips, and LSTM/GRU/RNN over a packed batch against each sequence alone.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "gradcheck.h"
#include "test_util.h"

using namespace mpx;
namespace R = mpx::nn::utils::rnn;

using testing::max_abs_diff;

TEST_CASE("pack_padded_sequence and pad_packed_sequence: layout, round trip, unsorted lengths, errors", "[rnn]") {
  manual_seed(1);
  const Tensor x = randn({5, 3, 2});  // [T, N, *]
  const R::PackedSequence p = R::pack_padded_sequence(x, tensor(std::vector<int64_t>{5, 3, 2}, {3}));
  CHECK(p.batch_size_vector() == std::vector<int64_t>{3, 3, 2, 1, 1});
  CHECK(p.data().sizes() == IntList{10, 2});
  CHECK(max_abs_diff(p.data().narrow(0, 6, 2), x.select(0, 2).narrow(0, 0, 2)) == 0.0);  // step 2: the two longest
  CHECK(!p.sorted_indices().defined());
  auto [back, lengths] = R::pad_packed_sequence(p);
  CHECK(back.sizes() == IntList{5, 3, 2});
  CHECK(max_abs_diff(back.narrow(0, 0, 2), x.narrow(0, 0, 2)) == 0.0);
  CHECK(max(abs(back.select(1, 2).narrow(0, 2, 3))).item<double>() == 0.0);  // past length 2: padding
  CHECK(max_abs_diff(lengths, tensor(std::vector<int64_t>{5, 3, 2}, {3})) == 0.0);

  // Unsorted, batch_first: the original order comes back, with padding_value and total_length.
  const Tensor xb = randn({3, 4, 2});  // [N, T, *]
  const Tensor len = tensor(std::vector<int64_t>{2, 4, 1}, {3});
  const R::PackedSequence q = R::pack_padded_sequence(xb, len, true, false);
  CHECK(q.batch_size_vector() == std::vector<int64_t>{3, 2, 1, 1});
  CHECK(q.sorted_indices().defined());
  auto [padded, l2] = R::pad_packed_sequence(q, true, -1.0, 6);
  CHECK(padded.sizes() == IntList{3, 6, 2});
  CHECK(max_abs_diff(l2, len) == 0.0);
  CHECK(max_abs_diff(padded.select(0, 0).narrow(0, 0, 2), xb.select(0, 0).narrow(0, 0, 2)) == 0.0);
  CHECK(max_abs_diff(padded.select(0, 1).narrow(0, 0, 4), xb.select(0, 1)) == 0.0);
  CHECK(padded.select(0, 2).select(0, 1).select(0, 0).item<double>() == -1.0);
  // pack_sequence of a list.
  const R::PackedSequence s = R::pack_sequence({randn({2, 3}), randn({4, 3})}, false);
  CHECK(s.batch_size_vector() == std::vector<int64_t>{2, 2, 1, 1});

  CHECK_THROWS_WITH(R::pack_padded_sequence(x, tensor(std::vector<int64_t>{2, 3, 1}, {3})),
                    Catch::Contains("enforce_sorted = false"));
  CHECK_THROWS_WITH(R::pack_padded_sequence(x, tensor(std::vector<int64_t>{6, 3, 1}, {3})), Catch::Contains("[1, 5]"));
  CHECK_THROWS_WITH(R::pack_padded_sequence(x, tensor(std::vector<int64_t>{3, 0, 0}, {3})), Catch::Contains("[1, 5]"));
  CHECK_THROWS_WITH(R::pack_padded_sequence(x, tensor(std::vector<int64_t>{3, 2}, {2})), Catch::Contains("one per sequence"));
  CHECK_THROWS_WITH(R::pad_packed_sequence(p, false, 0.0, 3), Catch::Contains("shorter than the longest"));
}

TEST_CASE("pad_sequence, unpad_sequence, unpack_sequence: either side, batch_first, padding_value, gradients, errors",
          "[rnn]") {
  const Tensor a = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2}), b = tensor(std::vector<double>{7, 8}, {1, 2});
  const Tensor right = R::pad_sequence({a, b});
  CHECK(right.sizes() == IntList{3, 2, 2});
  CHECK(testing::same_values(right.select(1, 1), tensor(std::vector<double>{7, 8, 0, 0, 0, 0}, {3, 2})));
  const Tensor left = R::pad_sequence({a, b}, true, -1.0, "left");
  CHECK(left.sizes() == IntList{2, 3, 2});
  CHECK(testing::same_values(left.select(0, 1), tensor(std::vector<double>{-1, -1, -1, -1, 7, 8}, {3, 2})));
  CHECK(testing::same_values(left.select(0, 0), a));
  // pad_sequence then pack_padded_sequence is pack_sequence.
  const R::PackedSequence p = R::pack_padded_sequence(right, tensor(std::vector<int64_t>{3, 1}, {2}));
  CHECK(testing::same_values(p.data(), R::pack_sequence({a, b}).data()));
  CHECK(testing::gradcheck([](const tensor_list& t) { return R::pad_sequence({t[0], t[1]}, true, 0.5, "left"); },
                           {testing::leaf({3, 2}), testing::leaf({1, 2})}) == "");
  CHECK_THROWS_WITH(R::pad_sequence({a, randn({2, 3}, TensorOptions(kFloat64))}), Catch::Contains("sequence 1"));
  // unpad_sequence and unpack_sequence give the list back, in its order.
  const tensor_list back = R::unpad_sequence(right, tensor(std::vector<int64_t>{3, 1}, {2}));
  REQUIRE(back.size() == 2);
  CHECK(testing::same_values(back[0], a));
  CHECK(testing::same_values(back[1], b));
  const tensor_list unpacked = R::unpack_sequence(R::pack_sequence({b, a}, false));
  CHECK(testing::same_values(unpacked[0], b));
  CHECK(testing::same_values(unpacked[1], a));
  CHECK_THROWS_WITH(R::unpad_sequence(right, tensor(std::vector<int64_t>{4, 1}, {2})), Catch::Contains("outside [0, 3]"));
  CHECK_THROWS_WITH(R::pad_sequence({a}, false, 0.0, "top"), Catch::Contains("padding_side"));
  CHECK_THROWS_WITH(R::pad_sequence({}), Catch::Contains("no sequences"));
}

TEST_CASE("LSTM, GRU and RNN over a packed batch equal each sequence run alone (layers, both directions, states)",
          "[rnn]") {
  const int64_t T = 6, N = 4, I = 3, H = 5;
  const std::vector<int64_t> lens = {3, 6, 1, 4};  // unsorted
  for (const std::string kind : {"lstm", "gru", "rnn_tanh", "rnn_relu"})
    for (bool bidirectional : {false, true}) {
      INFO(kind << " bidirectional " << bidirectional);
      manual_seed(2);
      const int64_t D = bidirectional ? 2 : 1;
      nn::LSTM lstm{nullptr};
      nn::GRU gru{nullptr};
      nn::RNN rnn{nullptr};
      if (kind == "lstm") lstm = nn::LSTM(nn::LSTMOptions(I, H).num_layers(2).bidirectional(bidirectional).batch_first(true));
      if (kind == "gru") gru = nn::GRU(nn::GRUOptions(I, H).num_layers(2).bidirectional(bidirectional).batch_first(true));
      if (kind.rfind("rnn", 0) == 0)
        rnn = nn::RNN(nn::RNNOptions(I, H).num_layers(2).bidirectional(bidirectional).batch_first(true)
                          .nonlinearity(kind == "rnn_relu" ? "relu" : "tanh"));
      const Tensor x = randn({N, T, I}), h0 = randn({2 * D, N, H}), c0 = randn({2 * D, N, H});
      const R::PackedSequence packed = R::pack_padded_sequence(x, tensor(lens, {N}), true, false);
      // (packed output, h_n, c_n) and the same for one sequence of batch one.
      auto run_packed = [&](const R::PackedSequence& in, const Tensor& h, const Tensor& c) -> std::vector<Tensor> {
        if (lstm) {
          auto [o, hc] = lstm->forward_with_packed_input(in, std::make_tuple(h, c));
          return {std::get<0>(R::pad_packed_sequence(o, true)), std::get<0>(hc), std::get<1>(hc)};
        }
        auto [o, hn] = gru ? gru->forward_with_packed_input(in, h) : rnn->forward_with_packed_input(in, h);
        return {std::get<0>(R::pad_packed_sequence(o, true)), hn};
      };
      auto run_alone = [&](const Tensor& xs, const Tensor& h, const Tensor& c) -> std::vector<Tensor> {
        if (lstm) {
          auto [o, hc] = lstm(xs, std::make_tuple(h, c));
          return {o, std::get<0>(hc), std::get<1>(hc)};
        }
        auto [o, hn] = gru ? gru(xs, h) : rnn(xs, h);
        return {o, hn};
      };
      const std::vector<Tensor> got = run_packed(packed, h0, c0);
      CHECK(got[0].sizes() == IntList{N, T, D * H});
      for (int64_t n = 0; n < N; ++n) {
        INFO("sequence " << n);
        const int64_t L = lens[static_cast<size_t>(n)];
        const std::vector<Tensor> want = run_alone(x.narrow(0, n, 1).narrow(1, 0, L), h0.narrow(1, n, 1), c0.narrow(1, n, 1));
        CHECK(max_abs_diff(got[0].narrow(0, n, 1).narrow(1, 0, L), want[0]) < 1e-5);
        if (L < T) CHECK(max(abs(got[0].narrow(0, n, 1).narrow(1, L, T - L))).item<double>() == 0.0);
        for (size_t k = 1; k < want.size(); ++k) CHECK(max_abs_diff(got[k].narrow(1, n, 1), want[k]) < 1e-5);
      }
    }
}

TEST_CASE("a packed batch's gradients equal the sum of each sequence's run alone (LSTM with and without proj_size, "
          "GRU, RNN; two bidirectional layers)", "[rnn]") {
  const int64_t T = 5, N = 4, I = 3, H = 4;
  const std::vector<int64_t> lens = {2, 5, 1, 5};  // unsorted, with a tie
  for (const std::string kind : {"lstm", "lstmp", "gru", "rnn_relu"}) {
    INFO(kind);
    manual_seed(6);
    const int64_t R = kind == "lstmp" ? 2 : H;
    std::shared_ptr<nn::Module> m;
    std::function<std::vector<Tensor>(const R::PackedSequence&, const Tensor&, const Tensor&)> packed;
    std::function<std::vector<Tensor>(const Tensor&, const Tensor&, const Tensor&)> alone;
    if (kind.rfind("lstm", 0) == 0) {
      nn::LSTM lstm(nn::LSTMOptions(I, H).num_layers(2).bidirectional(true).batch_first(true).proj_size(kind == "lstmp" ? R : 0));
      m = lstm.ptr();
      packed = [lstm](const R::PackedSequence& in, const Tensor& h, const Tensor& c) mutable -> std::vector<Tensor> {
        auto [o, hc] = lstm->forward_with_packed_input(in, std::make_tuple(h, c));
        return {o.data(), std::get<0>(hc), std::get<1>(hc)};
      };
      alone = [lstm](const Tensor& x, const Tensor& h, const Tensor& c) mutable -> std::vector<Tensor> {
        auto [o, hc] = lstm(x, std::make_tuple(h, c));
        return {o, std::get<0>(hc), std::get<1>(hc)};
      };
    } else {
      // GRU and RNN: one state.
      auto one_state = [&](auto mod) {
        m = mod.ptr();
        packed = [mod](const R::PackedSequence& in, const Tensor& h, const Tensor&) mutable -> std::vector<Tensor> {
          auto [o, hn] = mod->forward_with_packed_input(in, h);
          return {o.data(), hn};
        };
        alone = [mod](const Tensor& x, const Tensor& h, const Tensor&) mutable -> std::vector<Tensor> {
          auto [o, hn] = mod(x, h);
          return {o, hn};
        };
      };
      if (kind == "gru")
        one_state(nn::GRU(nn::GRUOptions(I, H).num_layers(2).bidirectional(true).batch_first(true)));
      else
        one_state(nn::RNN(nn::RNNOptions(I, H).num_layers(2).bidirectional(true).batch_first(true).nonlinearity("relu")));
    }
    const Tensor x = randn({N, T, I}).set_requires_grad(true), h0 = randn({4, N, R}).set_requires_grad(true);
    const Tensor c0 = randn({4, N, H}).set_requires_grad(true);
    // A loss that weighs every output element and final state differently, so a misrouted row shows.
    auto loss = [](const std::vector<Tensor>& r) {
      Tensor l = sum(r[0] * r[0]) * 0.5;
      for (size_t k = 1; k < r.size(); ++k) l = l + sum(r[k] * (0.3 * static_cast<double>(k)));
      return l;
    };
    loss(packed(R::pack_padded_sequence(x, tensor(lens, {N}), true, false), h0, c0)).backward();
    std::vector<Tensor> want_params;
    for (const Tensor& p : m->parameters()) {
      want_params.push_back(p.grad().clone());
      p.mutable_grad() = Tensor();
    }
    const Tensor gx = x.grad().clone(), gh = h0.grad().clone(), gc = c0.grad().defined() ? c0.grad().clone() : Tensor();
    x.mutable_grad() = h0.mutable_grad() = c0.mutable_grad() = Tensor();
    for (int64_t n = 0; n < N; ++n) {
      const int64_t L = lens[static_cast<size_t>(n)];
      loss(alone(x.narrow(0, n, 1).narrow(1, 0, L), h0.narrow(1, n, 1), c0.narrow(1, n, 1))).backward();
    }
    const tensor_list ps = m->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      INFO("parameter " << i);
      CHECK(max_abs_diff(want_params[i], ps[i].grad()) < 1e-4);
    }
    CHECK(max_abs_diff(gx, x.grad()) < 1e-4);
    CHECK(max_abs_diff(gh, h0.grad()) < 1e-4);
    if (kind.rfind("lstm", 0) == 0) CHECK(max_abs_diff(gc, c0.grad()) < 1e-4);
  }
}

TEST_CASE("rnn_packed: f64 gradchecks (LSTM and GRU, bidirectional) and clear errors", "[rnn][gradcheck]") {
  using testing::gradcheck;
  using testing::leaf;
  manual_seed(3);
  const std::vector<int64_t> bs = {3, 2, 2, 1};  // lengths 4, 3, 1
  const int64_t I = 2, H = 3;
  for (RnnMode mode : {RnnMode::kLstm, RnnMode::kGru}) {
    const int64_t G = mode == RnnMode::kLstm ? 4 : 3;
    tensor_list ps;
    for (int64_t d = 0; d < 2; ++d)
      for (const IntList& s : {IntList{G * H, I}, IntList{G * H, H}, IntList{G * H}, IntList{G * H}}) ps.push_back(leaf(s));
    const Tensor data = leaf({8, I}), h0 = leaf({2, 3, H});
    RnnArgs a;
    a.bidirectional = true;
    tensor_list all = {data, h0};
    all.insert(all.end(), ps.begin(), ps.end());
    CHECK(gradcheck([&](const tensor_list& v) {
            const tensor_list states = mode == RnnMode::kLstm ? tensor_list{v[1], v[1] * 0.5} : tensor_list{v[1]};
            const tensor_list r = rnn_packed(mode, v[0], bs, states, tensor_list(v.begin() + 2, v.end()), a);
            return sum(r[0] * r[0]) + sum(r[1]);
          }, all) == "");
  }
  RnnArgs a;
  const tensor_list ps = {randn({4, 2}), randn({4, 4})};
  a.has_biases = false;
  CHECK_THROWS_WITH(rnn_packed(RnnMode::kRnnTanh, randn({0, 2}), {}, {Tensor()}, ps, a), Catch::Contains("at least one step"));
  CHECK_THROWS_WITH(rnn_packed(RnnMode::kRnnTanh, randn({5, 2}), {2, 3}, {Tensor()}, ps, a),
                    Catch::Contains("non-increasing"));
  CHECK_THROWS_WITH(rnn_packed(RnnMode::kRnnTanh, randn({6, 2}), {3, 2}, {Tensor()}, ps, a), Catch::Contains("sum to 5"));
  CHECK_THROWS_WITH(rnn_packed(RnnMode::kRnnTanh, randn({5, 2}), {3, 2}, {randn({1, 2, 4})}, ps, a),
                    Catch::Contains("initial state"));
}

TEST_CASE("rnn_packed: f64 second derivatives (create_graph) and the Elman and projected LSTM's gradients",
          "[rnn][gradcheck]") {
  using testing::gradcheck;
  using testing::gradgradcheck;
  using testing::leaf;
  manual_seed(7);
  const std::vector<int64_t> bs = {3, 3, 2, 1};  // lengths 4, 3, 2
  const int64_t I = 2, H = 3, P = 2;
  for (RnnMode mode : {RnnMode::kLstm, RnnMode::kGru, RnnMode::kRnnTanh, RnnMode::kRnnRelu})
    for (bool proj : {false, true}) {
      if (proj && mode != RnnMode::kLstm) continue;
      INFO("mode " << static_cast<int>(mode) << " proj " << proj);
      const int64_t G = mode == RnnMode::kLstm ? 4 : mode == RnnMode::kGru ? 3 : 1, W = proj ? P : H;
      RnnArgs a;
      a.bidirectional = true;
      a.num_layers = 2;
      if (proj) a.proj_size = P;
      tensor_list all = {leaf({9, I}), leaf({4, 3, W}), leaf({4, 3, H})};
      for (int64_t l = 0; l < 2; ++l)
        for (int64_t d = 0; d < 2; ++d) {
          all.push_back(leaf({G * H, l == 0 ? I : 2 * W}, 0.5));
          all.push_back(leaf({G * H, W}, 0.5));
          all.push_back(leaf({G * H}, 0.5));
          all.push_back(leaf({G * H}, 0.5));
          if (proj) all.push_back(leaf({P, H}, 0.5));
        }
      // ReLU's kink: keep the Elman pre-activations away from 0 by a positive input bias.
      if (mode == RnnMode::kRnnRelu)
        for (size_t i = 5; i < all.size(); i += 4) all[i] = (all[i].detach().abs() + 0.5).set_requires_grad(true);
      auto f = [&](const tensor_list& v) {
        const tensor_list states = mode == RnnMode::kLstm ? tensor_list{v[1], v[2]} : tensor_list{v[1]};
        const tensor_list r = rnn_packed(mode, v[0], bs, states, tensor_list(v.begin() + 3, v.end()), a);
        tensor_list flat;
        for (const Tensor& t : r) flat.push_back(t.reshape({-1}));
        return cat(flat, 0);
      };
      if (mode != RnnMode::kLstm) all[2] = all[2].detach();  // c0: not an input of these
      CHECK(gradcheck(f, all) == "");
      CHECK(gradgradcheck(f, all) == "");
    }
}

TEST_CASE("a packed LSTM under bf16 autocast runs in bf16, close to f32", "[rnn]") {
  manual_seed(4);
  nn::LSTM lstm(nn::LSTMOptions(3, 8).batch_first(true));
  const R::PackedSequence p = R::pack_padded_sequence(randn({3, 5, 3}), tensor(std::vector<int64_t>{2, 5, 4}, {3}), true, false);
  const Tensor f32 = std::get<0>(lstm->forward_with_packed_input(p)).data();
  amp::AutocastGuard ac(kBFloat16);
  const Tensor bf16 = std::get<0>(lstm->forward_with_packed_input(p)).data();
  CHECK(bf16.dtype() == kBFloat16);
  CHECK(max_abs_diff(bf16, f32) < 0.05);
}

TEST_CASE("cuda packed LSTM and GRU match the CPU, values and gradients", "[cuda][rnn]") {
  if (!testing::cuda_ready()) return;
  manual_seed(5);
  nn::LSTM cpu(nn::LSTMOptions(3, 6).num_layers(2).bidirectional(true));
  nn::LSTM gpu(nn::LSTMOptions(3, 6).num_layers(2).bidirectional(true));
  gpu->load_state_dict(cpu->state_dict());
  gpu->to(Device::cuda());
  const Tensor x = randn({5, 4, 3});
  const Tensor lens = tensor(std::vector<int64_t>{5, 2, 4, 1}, {4});
  auto [oc, sc] = cpu->forward_with_packed_input(R::pack_padded_sequence(x, lens, false, false));
  auto [og, sg] = gpu->forward_with_packed_input(R::pack_padded_sequence(x.to(Device::cuda()), lens, false, false));
  CHECK(max_abs_diff(og.data().to(Device::cpu()), oc.data()) < 1e-4);
  CHECK(max_abs_diff(std::get<0>(sg).to(Device::cpu()), std::get<0>(sc)) < 1e-4);
  sum(oc.data() * oc.data()).backward();
  sum(og.data() * og.data()).backward();
  for (const auto& item : cpu->named_parameters()) {
    INFO(item.key());
    CHECK(max_abs_diff(gpu->named_parameters()[item.key()].grad().to(Device::cpu()), item.value().grad()) < 1e-3);
  }
}
