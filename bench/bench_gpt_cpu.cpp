// CPU training throughput of a small character-level GPT (the peer of bench/peer_gpt_cpu.py): same
// weights, data and batches on both sides, tokens/s and losses per step.
#include <mpx/mpx.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/resource.h>
#include <fstream>
#include <string>
#include <vector>

#include "models/gpt.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {
// Deterministic "text": words drawn from a small vocabulary by a seeded LCG, so the loss has
// structure to learn (spelling within words, spaces, sentence ends) and both frameworks read the
// same bytes. Tokens are the byte values, vocabulary 128.
std::vector<int64_t> make_text(int64_t n) {
  static const char* words[] = {"the", "of", "and", "to", "in", "is", "was", "that", "for", "on", "with", "as",
                                "by", "at", "from", "his", "her", "an", "were", "which", "mixed", "precision",
                                "training", "gradient", "scale", "loss", "tensor", "core", "half", "float"};
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n));
  uint64_t s = 12345;
  auto next = [&] { return (s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  while (static_cast<int64_t>(out.size()) < n) {
    const char* w = words[next() % 30];
    for (const char* c = w; *c; ++c) out.push_back(*c);
    out.push_back(next() % 9 == 0 ? '.' : ' ');
  }
  out.resize(static_cast<size_t>(n));
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 16, steps = 300, warmup = 50;
  std::string dtype = "f32", dir = "out/bench_gpt", preset = "gpt-tiny";
  bool write = false, profile = false, checkpoint = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", flag); std::exit(2); }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--batch")) batch = std::stoll(next("--batch"));
    else if (!std::strcmp(argv[i], "--steps")) steps = std::stoll(next("--steps"));
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::stoll(next("--warmup"));
    else if (!std::strcmp(argv[i], "--dtype")) dtype = next("--dtype");
    else if (!std::strcmp(argv[i], "--dir")) dir = next("--dir");
    else if (!std::strcmp(argv[i], "--model")) preset = next("--model");
    else if (!std::strcmp(argv[i], "--write")) write = true;
    else if (!std::strcmp(argv[i], "--profile")) profile = true;
    else if (!std::strcmp(argv[i], "--checkpoint-activations")) checkpoint = true;
    else {
      std::fprintf(stderr, "usage: %s [--model gpt-tiny|gpt-mini] [--batch N] [--steps N] [--warmup N] [--dtype f32|bf16] "
                   "[--dir DIR] [--write] [--profile] [--checkpoint-activations]\n  --profile prints the per-op kernel time of the measured steps\n  --checkpoint-activations recomputes each block in the backward (GPT::gradient_checkpointing)\n  --write saves the initial weights and the token stream to DIR for the peer\n",
                   argv[0]);
      return 2;
    }
  }
  if (dtype != "f32" && dtype != "bf16") { std::fprintf(stderr, "--dtype must be f32 or bf16\n"); return 2; }
  manual_seed(0);
  const models::GPTConfig cfg = models::GPTConfig::preset(preset, 128);
  models::GPT net(cfg);
  net->gradient_checkpointing = checkpoint;
  const int64_t T = cfg.n_ctx;
  const std::vector<int64_t> text = make_text(1 << 20);
  if (write) {
    std::system(("mkdir -p '" + dir + "'").c_str());
    TensorDict init;
    for (const auto& [name, p] : net->named_parameters()) init[name] = p.detach();
    save_tensors(init, dir + "/init.safetensors");
    std::ofstream(dir + "/tokens.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(text.data()), static_cast<std::streamsize>(text.size() * sizeof(int64_t)));
  }
  int64_t nparams = 0;
  for (auto& p : net->parameters()) nparams += p.numel();
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-3));
  std::vector<int64_t> xb(static_cast<size_t>(batch * T)), yb(static_cast<size_t>(batch * T));
  std::vector<double> times;
  cpu::reset_peak_memory_stats();
  std::vector<std::pair<int64_t, double>> losses;
  const int64_t span = static_cast<int64_t>(text.size()) - T - 1;
  for (int64_t s = 0; s < steps; ++s) {
    // The same windows as the peer: start of row i of step s.
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t start = ((s * batch + i) * 9973) % span;
      std::copy_n(text.begin() + start, T, xb.begin() + i * T);
      std::copy_n(text.begin() + start + 1, T, yb.begin() + i * T);
    }
    Tensor x = tensor(xb, {batch, T});
    Tensor y = tensor(yb, {batch * T});
    if (profile && s == warmup) profiler::start();
    auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard ac(kBFloat16, dtype == "bf16");
      Tensor logits = net(x);
      loss = F::cross_entropy(logits.view({batch * T, cfg.vocab_size}), y);
    }
    loss.backward();
    opt.step();
    const double l = loss.item<double>();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) times.push_back(dt);
    if (s == 0 || (s + 1) % 100 == 0) losses.push_back({s + 1, l});
  }
  if (profile) {
    profiler::stop();
    std::fputs(profiler::report(30).c_str(), stderr);
  }
  std::sort(times.begin(), times.end());
  const double med = times.empty() ? 0.0 : times[times.size() / 2];
  const char* th = std::getenv("OMP_NUM_THREADS");
  std::printf("{\"framework\": \"mpx\", \"model\": \"%s\", \"params\": %lld, \"batch\": %lld, \"context\": %lld, "
              "\"dtype\": \"%s\", \"threads\": \"%s\", \"tokens_per_s\": %.1f, \"step_s\": %.5f, \"losses\": {",
              preset.c_str(), static_cast<long long>(nparams), static_cast<long long>(batch), static_cast<long long>(T),
              dtype.c_str(), th ? th : "default", med > 0 ? static_cast<double>(batch * T) / med : 0.0, med);
  for (size_t i = 0; i < losses.size(); ++i)
    std::printf("%s\"%lld\": %.4f", i ? ", " : "", static_cast<long long>(losses[i].first), losses[i].second);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("}, \"tensor_peak_mib\": %.1f, \"max_rss_mib\": %.1f}\n",
              static_cast<double>(cpu::memory_stats().peak_allocated) / (1 << 20), static_cast<double>(ru.ru_maxrss) / 1024);
  return 0;
}
