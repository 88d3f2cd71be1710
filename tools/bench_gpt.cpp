// `mpx bench`'s language-model rows: a GPT-2 preset or the LSTM language model trained on random token ids under each
// opt level, and its initial state for the peer.
#include <algorithm>

#include "tools/bench_internal.h"
#include "tools/gpt_parts.h"

namespace mpx::cli::bench {

namespace F = nn::functional;

namespace {

// gpt2 and its larger siblings keep GPT-2's tokenizer vocabulary, so their output layer costs what
// it costs in real training; the CPU presets and lstm-lm take bytes, which is what they train on in
// practice (mpx gpt's character vocabularies are smaller still).
int64_t gpt_vocab(const std::string& model) { return model.rfind("gpt2", 0) == 0 ? 50257 : 256; }

}  // namespace

bool is_gpt(const std::string& model) {
  const std::vector<std::string> p = lm_archs();
  return std::find(p.begin(), p.end(), model) != p.end();
}

SpeedResult bench_gpt(const std::string& model, const Variant& v, const SpeedConfig& c, const std::string& init_path) {
  MPX_CHECK(!c.graph, "mpx bench --cuda-graph: ", model, " is not captured yet (amp::scale_loss reports overflows "
            "through the host); run GPT rows without --cuda-graph or drop ", model, " from --models");
  SpeedConfig g = c;
  g.batch = c.gpt_batch;
  SpeedResult r;
  amp::reset();
  MemProbe mem(c.device);
  {
    manual_seed(c.seed);
    LanguageModel lm = make_language_model(model, gpt_vocab(model), 0, 0.0);
    const int64_t T = lm.n_ctx, V = gpt_vocab(model);
    r.params = lm.params;
    r.seq_len = T;
    // One token more than the context: the targets are the inputs shifted by one, as in training.
    const Tensor tokens = randint(0, V, {g.batch, T + 1});
    if (!init_path.empty()) {
      // Written before amp::initialize casts anything: the peer starts from the same f32 weights
      // and reads its batch from here, so no random number generator has to match PyTorch's.
      TensorDict d;
      for (const auto& [name, p] : lm.net.ptr()->named_parameters()) d[name] = p.detach();
      d["bench.tokens"] = tokens;
      save_tensors(d, init_path, {{"mpx.bench.model", model}});
    }
    lm.net.ptr()->to(c.device);
    const Tensor x = tokens.narrow(1, 0, T).contiguous().to(c.device);
    const Tensor y = tokens.narrow(1, 1, T).reshape({-1}).to(c.device);
    // mpx gpt's defaults: decay on matrices and embeddings only, GPT-2's betas.
    const auto adamw = optim::AdamWOptions(1e-3).betas(optim::Betas(0.9, 0.95)).eps(1e-8).weight_decay(0.1);
    optim::AdamW opt(decay_groups(*lm.net.ptr(), adamw), adamw);
    nn::AnyModule net = lm.net;
    amp::initialize(net, opt, level_options(v, 1));
    Tensor loss;
    auto step = [&] {
      opt.zero_grad();
      // f32 whatever the logits' dtype (as PyTorch's autocast runs it), without an f32 copy of them.
      loss = F::cross_entropy(net(x).reshape({-1, V}), y);
      amp::scale_loss(loss, opt).backward();
      opt.step();
    };
    time_windows(g, step, mem, r);
    r.loss_scale = amp::loss_scale(0);
    r.skipped = static_cast<double>(amp::skipped_steps(opt));
    r.state_bytes = state_bytes_per_element({&opt});
    r.final_loss = loss.item<double>();
  }
  amp::reset();
  return r;
}

}  // namespace mpx::cli::bench
