// Language models a token at a time: GPT's key/value cache and the LSTM model's carried state against the whole sequence.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "models/gpt.h"
#include "models/lstm_lm.h"
#include "test_util.h"

using namespace mpx;
using testing::max_abs_diff;

namespace {

Tensor random_ids(int64_t vocab, int64_t B, int64_t T, uint64_t seed) {
  std::vector<int64_t> v;
  uint64_t s = seed;
  for (int64_t i = 0; i < B * T; ++i) v.push_back(static_cast<int64_t>((s = s * 6364136223846793005ull + 1) >> 33) % vocab);
  return tensor(v, {B, T});
}

// The logits of `ids` run in pieces of the given lengths through `step(piece)`, concatenated along T.
template <typename Step>
Tensor in_pieces(const Tensor& ids, const std::vector<int64_t>& lengths, Step step) {
  tensor_list parts;
  int64_t at = 0;
  for (int64_t n : lengths) {
    parts.push_back(step(ids.narrow(1, at, n)));
    at += n;
  }
  REQUIRE(at == ids.size(1));
  return cat(parts, 1);
}

models::GPTConfig small_gpt() {
  models::GPTConfig c;
  c.vocab_size = 50, c.n_ctx = 24, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  return c;
}

}  // namespace

TEST_CASE("GPT with a key/value cache gives the logits of the whole sequence", "[gpt][generate]") {
  manual_seed(11);
  models::GPT m(small_gpt());
  m->eval();
  const Tensor ids = random_ids(50, 2, 20, 7);
  // The prompt at once (causal), a piece of five (a mask aligned to its positions), then single tokens.
  const std::vector<int64_t> pieces = {8, 5, 1, 1, 1, 1, 1, 1, 1};
  for (DType dt : {kFloat64, kFloat32}) {
    INFO(dtype_name(dt));
    m->to(dt);
    NoGradGuard ng;
    const Tensor whole = m->forward(ids);
    models::GPTKVCache cache;
    const Tensor stepped = in_pieces(ids, pieces, [&](const Tensor& x) { return m->forward(x, &cache); });
    CHECK(cache.length == 20);
    CHECK(max_abs_diff(stepped, whole) < (dt == kFloat64 ? 1e-12 : 2e-5));
    // Cleared, the same buffers serve a new sequence of another batch size.
    cache.clear();
    const Tensor one = ids.narrow(0, 1, 1);
    const Tensor again = in_pieces(one, {1, 19}, [&](const Tensor& x) { return m->forward(x, &cache); });
    CHECK(max_abs_diff(again, whole.narrow(0, 1, 1)) < (dt == kFloat64 ? 1e-12 : 2e-5));
  }
  SECTION("under bf16 autocast the cache holds bf16 keys and values") {
    m->to(kFloat32);
    NoGradGuard ng;
    amp::AutocastGuard ac(kBFloat16);
    const Tensor whole = m->forward(ids);
    models::GPTKVCache cache;
    const Tensor stepped = in_pieces(ids, pieces, [&](const Tensor& x) { return m->forward(x, &cache); });
    CHECK(cache.keys[0].dtype() == kBFloat16);
    CHECK(max_abs_diff(stepped, whole) < 0.05 * max(abs(whole.to(kFloat32))).item<double>());
  }
}

TEST_CASE("GPT's key/value cache refuses what it cannot hold, naming it", "[gpt][generate]") {
  manual_seed(12);
  models::GPT m(small_gpt());
  m->eval();
  models::GPTKVCache cache;
  const Tensor ids = random_ids(50, 2, 20, 8);
  auto fails_with = [&](const Tensor& x, const std::string& part) {
    try {
      m->forward(x, &cache);
      FAIL("no error for " << part);
    } catch (const std::exception& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
    }
  };
  fails_with(ids, "NoGradGuard");  // gradients enabled
  NoGradGuard ng;
  m->forward(ids, &cache);
  fails_with(ids.narrow(1, 0, 5), "pass the context n_ctx = 24");                   // 20 + 5 > 24
  fails_with(ids.narrow(0, 0, 1).narrow(1, 0, 1), "clear() the cache");           // another batch size mid-sequence
  CHECK(cache.length == 20);                                                       // refused calls add nothing
  models::GPTConfig other = small_gpt();
  other.n_head = 4;  // the same depth and width, other head shapes
  models::GPT m2(other);
  m2->eval();
  try {
    m2->forward(ids.narrow(1, 0, 1), &cache);
    FAIL("no error for another model's cache");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("another batch size, dtype, device or model") != std::string::npos);
  }
  m->forward(ids.narrow(1, 0, 4), &cache);
  CHECK(cache.length == 24);
}

TEST_CASE("LSTM language model carrying its state gives the logits of the whole sequence", "[lstm_lm][generate]") {
  manual_seed(13);
  models::LSTMLMConfig c;
  c.vocab_size = 30, c.n_embd = 24, c.n_layer = 2;
  models::LSTMLM m(c);
  m->eval();
  const Tensor ids = random_ids(30, 3, 12, 9);
  NoGradGuard ng;
  const Tensor whole = m(ids);
  models::LSTMLMState state;
  const Tensor stepped = in_pieces(ids, {5, 1, 1, 3, 1, 1}, [&](const Tensor& x) { return m(x, &state); });
  CHECK(max_abs_diff(stepped, whole) < 2e-5);
  REQUIRE(state.hc);
  CHECK(std::get<0>(*state.hc).sizes() == IntList{2, 3, 24});
  // Cleared, the next call starts from a zero state again.
  state.clear();
  CHECK(max_abs_diff(m(ids.narrow(1, 0, 4), &state), whole.narrow(1, 0, 4)) < 2e-5);
}

TEST_CASE("LSTM language model's carried state detached cuts backpropagation at the window", "[lstm_lm][generate]") {
  manual_seed(14);
  models::LSTMLMConfig c;
  c.vocab_size = 10, c.n_embd = 8, c.n_layer = 1;
  models::LSTMLM m(c);
  const Tensor ids = random_ids(10, 2, 6, 3);
  models::LSTMLMState state;
  m(ids.narrow(1, 0, 3), &state);
  REQUIRE(std::get<0>(*state.hc).requires_grad());
  state.detach();
  CHECK(!std::get<0>(*state.hc).requires_grad());
  CHECK(!std::get<1>(*state.hc).requires_grad());
  // The second window's loss reaches the weights through its own steps only: it backpropagates without the first.
  m(ids.narrow(1, 3, 3), &state).sum().backward();
  CHECK(m->lstm->named_parameters()["weight_hh_l0"].grad().defined());
}

TEST_CASE("cuda GPT with a key/value cache matches the CPU's whole sequence", "[cuda][gpt][generate]") {
  if (!testing::cuda_ready()) return;
  manual_seed(15);
  models::GPT m(small_gpt());
  m->eval();
  const Tensor ids = random_ids(50, 2, 20, 10);
  NoGradGuard ng;
  const Tensor whole = m->forward(ids);
  m->to(Device::cuda());
  for (bool bf16 : {false, true}) {
    INFO("bf16 autocast " << bf16);
    amp::AutocastGuard ac(kBFloat16, bf16);
    models::GPTKVCache cache;
    const Tensor stepped = in_pieces(ids.to(Device::cuda()), {8, 5, 1, 1, 1, 1, 1, 1, 1},
                                     [&](const Tensor& x) { return m->forward(x, &cache); });
    CHECK(cache.keys[0].device().is_cuda());
    const double tol = bf16 ? 0.05 * max(abs(whole)).item<double>() : 1e-4;
    CHECK(max_abs_diff(stepped.to(Device::cpu()), whole) < tol);
  }
}
