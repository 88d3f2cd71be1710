// CPU training step of models written the way a user ports them from PyTorch (peer:
// bench/peer_seq_modules_cpu.py): a pre-norm nn::TransformerEncoder (GELU, batch_first) and a two-layer
// nn::LSTM, nn::GRU or nn::RNN (tanh), each under an nn::Linear head; the same initial weights and inputs on both sides (--write).
// --packed feeds the recurrent models sequences of different lengths through pack_padded_sequence, as NLP code does.
#include <mpx/mpx.h>

#include "ops/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {
struct EncoderNet : nn::Module {
  nn::TransformerEncoder enc{nullptr};
  nn::Linear head{nullptr};
  EncoderNet(int64_t d, int64_t heads, int64_t layers) {
    auto layer = nn::TransformerEncoderLayer(
        nn::TransformerEncoderLayerOptions(d, heads).dim_feedforward(4 * d).activation("gelu").batch_first(true).norm_first(true));
    enc = register_module("enc", nn::TransformerEncoder(layer, layers));
    head = register_module("head", nn::Linear(d, d));
  }
  Tensor forward(const Tensor& x) { return head(enc(x)); }
};
// The two-layer LSTM or GRU (Rnn) under a linear head.
template <typename Rnn, typename Options> struct RnnNet : nn::Module {
  Rnn rnn{nullptr};
  nn::Linear head{nullptr};
  RnnNet(const char* name, int64_t in, int64_t hidden) {
    rnn = register_module(name, Rnn(Options(in, hidden).num_layers(2).batch_first(true)));
    head = register_module("head", nn::Linear(hidden, in));
  }
  Tensor forward(const Tensor& x) { return head(std::get<0>(rnn(x))); }
  // Unsorted lengths [N], padded back to x's length (zeros past each sequence's end, as PyTorch's pad_packed_sequence).
  Tensor forward_packed(const Tensor& x, const Tensor& lengths) {
    namespace R = nn::utils::rnn;
    const auto packed = R::pack_padded_sequence(x, lengths, true, false);
    return head(std::get<0>(R::pad_packed_sequence(std::get<0>(rnn->forward_with_packed_input(packed)), true, 0.0, x.size(1))));
  }
};
using LstmNet = RnnNet<nn::LSTM, nn::LSTMOptions>;
using GruNet = RnnNet<nn::GRU, nn::GRUOptions>;
using ElmanNet = RnnNet<nn::RNN, nn::RNNOptions>;
// The two-layer LSTM with proj_size (its h projected to `proj` features each step) under a linear head.
struct LstmProjNet : nn::Module {
  nn::LSTM rnn{nullptr};
  nn::Linear head{nullptr};
  LstmProjNet(int64_t in, int64_t hidden, int64_t proj) {
    rnn = register_module("lstm", nn::LSTM(nn::LSTMOptions(in, hidden).num_layers(2).batch_first(true).proj_size(proj)));
    head = register_module("head", nn::Linear(proj, in));
  }
  Tensor forward(const Tensor& x) { return head(std::get<0>(rnn(x))); }
};
}  // namespace

int main(int argc, char** argv) {
  std::string model = "encoder", dtype = "f32", dir = "out/bench_seq";
  int64_t steps = 12, warmup = 2;
  bool write = false, profile = false, packed = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--write") write = true;
    else if (a == "--profile") profile = true;
    else if (a == "--packed") packed = true;
    else if (i + 1 < argc && a == "--model") model = argv[++i];
    else if (i + 1 < argc && a == "--dtype") dtype = argv[++i];
    else if (i + 1 < argc && a == "--dir") dir = argv[++i];
    else if (i + 1 < argc && a == "--steps") steps = std::stoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--model encoder|lstm|lstmp|gru|rnn] [--dtype f32|bf16] [--steps N] [--dir DIR] [--write] [--profile] [--packed]\n", argv[0]);
      return 2;
    }
  }
  manual_seed(0);
  if (model != "encoder" && model != "lstm" && model != "lstmp" && model != "gru" && model != "rnn") {
    std::fprintf(stderr, "--model: expected encoder, lstm, lstmp, gru or rnn, got '%s'\n", model.c_str());
    return 2;
  }
  const bool enc = model == "encoder";
  if (packed && (enc || model == "lstmp")) {
    std::fprintf(stderr, "--packed: for --model lstm, gru or rnn\n");
    return 2;
  }
  // encoder: 4 layers of width 256, 4 heads, 16 x 128 tokens; lstm/gru/rnn: 2 layers of 512 over 256 inputs, 16 x 64
  // steps (lstmp: the LSTM's h projected to 256).
  const int64_t B = 16, T = enc ? 128 : 64, D = 256;
  std::shared_ptr<nn::Module> net;
  std::function<Tensor(const Tensor&)> forward;
  auto use = [&](auto m) {
    net = m;
    forward = [m](const Tensor& x) { return m->forward(x); };
  };
  if (enc)
    use(std::make_shared<EncoderNet>(D, 4, 4));
  else if (model == "lstmp")
    use(std::make_shared<LstmProjNet>(D, 512, 256));
  // --packed: lengths from T/2 + 1 to T, unsorted.
  std::vector<int64_t> lens;
  for (int64_t i = 0; i < B; ++i) lens.push_back(T - (i * 7) % (T / 2));
  const Tensor lengths = tensor(lens, {B});
  auto rnn_net = [&](auto m) {
    net = m;
    if (packed)
      forward = [m, lengths](const Tensor& v) { return m->forward_packed(v, lengths); };
    else
      forward = [m](const Tensor& v) { return m->forward(v); };
  };
  if (model == "lstm")
    rnn_net(std::make_shared<LstmNet>("lstm", D, 512));
  else if (model == "gru")
    rnn_net(std::make_shared<GruNet>("gru", D, 512));
  else if (model == "rnn")
    rnn_net(std::make_shared<ElmanNet>("rnn", D, 512));
  const Tensor x = randn({B, T, D}), target = randn({B, T, D});
  if (write) {
    std::system(("mkdir -p '" + dir + "'").c_str());
    TensorDict init;
    for (const auto& [name, p] : net->named_parameters()) init[name] = p.detach();
    init["bench.x"] = x;
    init["bench.target"] = target;
    init["bench.lengths"] = lengths;
    save_tensors(init, dir + "/" + model + ".safetensors");
  }
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-3));
  std::vector<double> times;
  double first = 0, last = 0;
  steps = std::max<int64_t>(steps, warmup + 1);
  for (int64_t s = 0; s < steps; ++s) {
    if (profile && s == warmup) profiler::start();
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard ac(kBFloat16, dtype == "bf16");
      loss = F::mse_loss(forward(x), target);
    }
    loss.backward();
    opt.step();
    last = loss.item<double>();
    if (s == 0) first = last;
    if (s >= warmup) times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (profile) {
    profiler::stop();
    std::fputs(profiler::report(25).c_str(), stderr);
  }
  std::sort(times.begin(), times.end());
  std::printf("mpx   %-7s %-4s%s step %7.1f ms (median of %zu; min %.1f)  loss %.6f -> %.6f\n", model.c_str(), dtype.c_str(),
              packed ? " packed" : "", times[times.size() / 2], times.size(), times[0], first, last);
  return 0;
}
