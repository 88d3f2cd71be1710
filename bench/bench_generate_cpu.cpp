// CPU text generation speed of a GPT-2 (the peer of bench/peer_generate_cpu.py): Hugging Face weights, a prompt of
// P token ids, N greedy tokens with the key/value cache (or without, for comparison); tokens/s and the ids.
#include <mpx/mpx.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "models/gpt_hf.h"

using namespace mpx;
namespace F = mpx::nn::functional;

int main(int argc, char** argv) {
  int64_t prompt_len = 64, new_tokens = 64;
  std::string dtype = "f32", weights, preset = "gpt2";
  bool cache = true, profile = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", flag); std::exit(2); }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--prompt")) prompt_len = std::stoll(next("--prompt"));
    else if (!std::strcmp(argv[i], "--new")) new_tokens = std::stoll(next("--new"));
    else if (!std::strcmp(argv[i], "--dtype")) dtype = next("--dtype");
    else if (!std::strcmp(argv[i], "--weights")) weights = next("--weights");
    else if (!std::strcmp(argv[i], "--model")) preset = next("--model");
    else if (!std::strcmp(argv[i], "--no-cache")) cache = false;
    else if (!std::strcmp(argv[i], "--profile")) profile = true;
    else {
      std::fprintf(stderr, "usage: %s --weights MODEL.safetensors [--model gpt2|gpt-mini|...] [--prompt P] [--new N] "
                   "[--dtype f32|bf16] [--no-cache] [--profile]\n  --profile prints the per-op kernel time after the first token\n  the weights are Hugging Face GPT-2's layout "
                   "(peer_generate_cpu.py --write makes them)\n", argv[0]);
      return 2;
    }
  }
  if (weights.empty() || (dtype != "f32" && dtype != "bf16") || prompt_len < 1 || new_tokens < 1) {
    std::fprintf(stderr, "--weights is required, --dtype is f32 or bf16, --prompt and --new at least 1\n");
    return 2;
  }
  const TensorDict hf = load_tensors(weights);
  models::GPTConfig config = models::GPTConfig::preset(preset);
  config.vocab_size = models::hf_gpt2_config(hf).vocab_size;
  models::GPT model(config);
  models::load_hf_gpt2(*model, hf);
  model->eval();
  MPX_CHECK(prompt_len + new_tokens <= config.n_ctx, "prompt + new tokens must fit n_ctx = ", config.n_ctx);

  // The prompt the peer uses: ids spread over the vocabulary.
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < prompt_len; ++i) ids.push_back((i * 7919 + 13) % config.vocab_size);

  NoGradGuard ng;
  amp::AutocastGuard ac(kBFloat16, dtype == "bf16");
  models::GPTKVCache kv;
  double first_s = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < new_tokens; ++i) {
    // With the cache the model sees only the tokens it has not; without, the whole sequence.
    const int64_t from = cache ? kv.length : 0, n = static_cast<int64_t>(ids.size());
    Tensor x = tensor(std::vector<int64_t>(ids.begin() + from, ids.end()), {1, n - from});
    // Only the last position's logits are needed: ln_f's last row onto the (tied) vocabulary.
    Tensor last = model->features(x, cache ? &kv : nullptr).select(1, n - from - 1);
    ids.push_back(F::linear(last, model->wte->weight).argmax(-1).item<int64_t>());
    if (i == 0) {
      first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (profile) profiler::start();
    }
  }
  if (profile) {
    profiler::stop();
    std::fputs(profiler::report(20).c_str(), stderr);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const char* threads = std::getenv("OMP_NUM_THREADS");
  std::printf("{\"framework\": \"mpx\", \"model\": \"%s\", \"dtype\": \"%s\", \"threads\": \"%s\", \"cache\": %s, "
              "\"prompt\": %lld, \"new\": %lld, \"first_token_s\": %.4f, \"tokens_per_s\": %.2f, \"ids\": [",
              preset.c_str(), dtype.c_str(), threads ? threads : "all", cache ? "true" : "false",
              static_cast<long long>(prompt_len), static_cast<long long>(new_tokens), first_s,
              static_cast<double>(new_tokens - 1) / (s - first_s));
  for (size_t i = static_cast<size_t>(prompt_len); i < ids.size(); ++i)
    std::printf("%s%lld", i > static_cast<size_t>(prompt_len) ? ", " : "", static_cast<long long>(ids[i]));
  std::printf("]}\n");
  return 0;
}
