// Sequence models end to end: a tiny GPT and an LSTM language model learn generated text at O0-O3 (f16, bf16).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "models/gpt.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {

const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyz .";

// Words drawn by a seeded LCG: spelling inside words is learnable, the next word is not.
std::vector<int64_t> make_text(int64_t n) {
  static const char* words[] = {"the", "of", "and", "to", "in", "mixed", "precision", "loss", "scale",
                                "gradient", "tensor", "half", "float", "core", "step"};
  std::vector<int64_t> out;
  uint64_t s = 7;
  auto next = [&] { return (s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  while (static_cast<int64_t>(out.size()) < n) {
    for (const char* c = words[next() % 15]; *c; ++c) out.push_back(static_cast<int64_t>(kAlphabet.find(*c)));
    out.push_back(next() % 8 == 0 ? 27 : 26);
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

struct LstmLMImpl : nn::Module {
  LstmLMImpl(int64_t vocab, int64_t width) {
    emb = register_module("emb", nn::Embedding(vocab, width));
    lstm = register_module("lstm", nn::LSTM(nn::LSTMOptions(width, 2 * width).batch_first(true)));
    head = register_module("head", nn::Linear(2 * width, vocab));
  }
  Tensor forward(const Tensor& idx) { return head(std::get<0>(lstm(emb(idx)))); }
  nn::Embedding emb{nullptr};
  nn::LSTM lstm{nullptr};
  nn::Linear head{nullptr};
};
MPX_MODULE(LstmLM);

struct Run {
  double first = 0, last = 0;  // the mean loss of the first and the last 10 steps
  int64_t skipped = 0;
  bool finite = true;
};

// Trains `net` (a GPT or the LSTM model, through its holder as amp wraps it) for `steps` batches
// of next-token prediction at `level`.
template <typename Net>
Run train(Net& net, const std::string& level, DType low, int64_t steps) {
  const std::vector<int64_t> text = make_text(20000);
  const int64_t batch = 8, T = 32, V = static_cast<int64_t>(kAlphabet.size());
  // O3 keeps Adam's moments in the model's dtype, as PyTorch does for a .half() model: in f16 the
  // second moment of gradients below ~2e-4 underflows to 0 and an update of m / eps explodes, so
  // pure-f16 recipes raise eps (1e-4 is the usual choice); bf16's range needs no such change.
  const double eps = level == "O3" && low == kFloat16 ? 1e-4 : 1e-8;
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(3e-3).weight_decay(0.0).eps(eps));
  amp::initialize(net, opt, amp::Options().opt_level(level).dtype(low).verbosity(0));
  Run r;
  std::vector<int64_t> xb(static_cast<size_t>(batch * T)), yb(xb.size());
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t start = ((s * batch + i) * 997) % (static_cast<int64_t>(text.size()) - T - 1);
      for (int64_t t = 0; t < T; ++t) {
        xb[static_cast<size_t>(i * T + t)] = text[static_cast<size_t>(start + t)];
        yb[static_cast<size_t>(i * T + t)] = text[static_cast<size_t>(start + t + 1)];
      }
    }
    opt.zero_grad();
    Tensor logits = net(tensor(xb, {batch, T}));
    Tensor loss = F::cross_entropy(logits.reshape({batch * T, V}), tensor(yb, {batch * T}));
    amp::scale_loss(loss, opt).backward();
    opt.step();
    const double l = loss.item<double>();
    r.finite = r.finite && std::isfinite(l);
    if (s < 10) r.first += l / 10;
    if (s >= steps - 10) r.last += l / 10;
  }
  r.skipped = amp::skipped_steps(opt);
  amp::reset();
  return r;
}

struct Level {
  const char* level;
  DType low;
};
const Level kLevels[] = {{"O0", kFloat16},  {"O1", kFloat16}, {"O1", kBFloat16}, {"O2", kFloat16},
                         {"O2", kBFloat16}, {"O3", kFloat16}, {"O3", kBFloat16}};

bool pure_f16(const Level& l) { return std::string(l.level) == "O3" && l.low == kFloat16; }

}  // namespace

TEST_CASE("a tiny GPT learns generated text at O0-O3 in f16 and bf16, and O1 bf16 skips no step", "[train][seq]") {
  for (const Level& l : kLevels) {
    amp::reset();
    manual_seed(0);
    models::GPTConfig c;
    c.vocab_size = static_cast<int64_t>(kAlphabet.size());
    c.n_ctx = 32, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
    models::GPT net(c);
    const Run r = train(net, l.level, l.low, 200);
    // O0 runs in f32 whatever the dtype named.
    std::printf("gpt %s %s: loss %.4f -> %.4f, skipped %lld\n", l.level, dtype_name(l.low), r.first, r.last,
                static_cast<long long>(r.skipped));
    INFO(l.level << " " << dtype_name(l.low) << ": loss " << r.first << " -> " << r.last);
    CHECK(r.finite);
    CHECK(r.first > 2.5);  // ln(28) = 3.33 at the start
    // The spelling inside words is learnt; pure f16 with Adam's eps raised learns slower.
    CHECK(r.last < r.first - (pure_f16(l) ? 0.1 : 1.0));
    if (std::string(l.level) == "O1" && l.low == kBFloat16) CHECK(r.skipped == 0);
    if (std::string(l.level) == "O0") CHECK(r.skipped == 0);
  }
}

TEST_CASE("an LSTM language model learns generated text at O0-O3 in f16 and bf16", "[train][seq]") {
  for (const Level& l : kLevels) {
    amp::reset();
    manual_seed(0);
    LstmLM net(static_cast<int64_t>(kAlphabet.size()), int64_t{32});
    const Run r = train(net, l.level, l.low, 200);
    std::printf("lstm %s %s: loss %.4f -> %.4f, skipped %lld\n", l.level, dtype_name(l.low), r.first, r.last,
                static_cast<long long>(r.skipped));
    INFO(l.level << " " << dtype_name(l.low) << ": loss " << r.first << " -> " << r.last);
    CHECK(r.finite);
    CHECK(r.last < r.first - (pure_f16(l) ? 0.1 : 1.0));
    if (std::string(l.level) == "O1" && l.low == kBFloat16) CHECK(r.skipped == 0);
  }
}
