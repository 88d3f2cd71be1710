// Pieces of `mpx gpt` kept apart from its loop: the language models by name, the token data, the schedule, sampling.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "data/text.h"
#include "models/gpt.h"
#include "models/lstm_lm.h"
#include "tools/ranks.h"

namespace mpx::cli {

/// A language model as the command drives it: `net(idx [B, T])` gives logits [B, T, vocab].
struct LanguageModel {
  std::string arch;                          ///< "gpt-tiny", ..., "lstm-lm"
  nn::AnyModule net;                         ///< the model (amp and DDP wrap this)
  std::shared_ptr<models::GPTImpl> gpt;      ///< set for the GPT-2 family (Hugging Face weights in and out)
  std::shared_ptr<models::LSTMLMImpl> lstm;  ///< set for lstm-lm
  int64_t n_ctx = 0;                         ///< the longest input (GPT: its learned positions)
  int64_t params = 0;                        ///< parameters (tied weights counted once)
  /// Training FLOPs per token (forward + backward), PaLM's 6N + 12 L C T for attention; MFU's numerator.
  double flops_per_token = 0;
};

/// The micro-batches of a run as a pure function of (seed, global micro-step): every rank walks
/// its DistributedSampler shard of the shuffled windows, epoch after epoch, so a resumed run
/// reads exactly what an uninterrupted one would.
class MicroBatches {
 public:
  MicroBatches(std::shared_ptr<const data::TokenStream> s, int64_t context, int64_t batch, const Ranks& rk, uint64_t seed,
               bool shuffle)
      : windows_(std::move(s), context),
        sampler_(windows_.size(), rk.rank, rk.world, shuffle, seed, /*drop_last=*/true),
        batch_(batch) {}
  /// Micro-batches per pass over this rank's shard.
  int64_t per_epoch() const { return sampler_.size() / batch_; }
  int64_t windows() const { return windows_.size(); }
  data::Batch get(int64_t micro) {
    const int64_t epoch = micro / per_epoch(), k = micro % per_epoch();
    if (epoch != epoch_) order_ = sampler_.indices(epoch), epoch_ = epoch;
    std::vector<int64_t> idx(order_.begin() + k * batch_, order_.begin() + (k + 1) * batch_);
    data::Batch b;
    if (!windows_.get_batch(idx, std::vector<uint64_t>(idx.size(), 0), b)) {
      std::vector<data::Example<>> ex;
      for (int64_t i : idx) ex.push_back(windows_.get(i));
      b = data::collate(ex);
    }
    return b;
  }

 private:
  data::TokenWindows windows_;
  data::DistributedSampler sampler_;
  int64_t batch_, epoch_ = -1;
  std::vector<int64_t> order_;
};

/// The architectures `mpx gpt --arch` takes: the GPT-2 presets and "lstm-lm".
std::vector<std::string> lm_archs();

/// Builds `arch` for `vocab` tokens and sequences of `context` (0: the model's own context).
/// GPT-2 presets keep their shape; a context above their positions is an error naming both.
LanguageModel make_language_model(const std::string& arch, int64_t vocab, int64_t context, double dropout);

/// The training and validation token streams of a run and how to turn ids into text.
struct TokenData {
  std::shared_ptr<const data::TokenStream> train, val;
  std::string source;           ///< for the start-up line: "text file input.txt", "3 token shards ..."
  bool chars = false;           ///< character ids of `vocab` (text); otherwise GPT-2 token ids
  data::CharVocab vocab;        ///< the character vocabulary (chars only)
  int64_t vocab_size = 0;       ///< the model's vocabulary
};

/// Opens `--text FILE` or `--tokens GLOB` (with `--val-tokens GLOB`); with neither, the
/// concatenated license texts every Debian machine has, so the command runs with no download.
/// Without a validation set the last `val_fraction` of the tokens is held out. `stored_chars`:
/// a resumed run's vocabulary ("" for a fresh run).
TokenData open_token_data(const std::string& text, const std::string& tokens, const std::string& val_tokens,
                          double val_fraction, const std::string& stored_chars);

/// The default corpus: every regular file of /usr/share/common-licenses, in name order, once each.
std::string default_corpus_path();

/// The learning rate of step `step` (0-based): linear warmup over `warmup` steps to `lr`, then a
/// cosine down to `min_lr` at `steps` (nanoGPT's schedule), in closed form so a resumed run gets
/// exactly what an uninterrupted one would.
double gpt_lr_at(int64_t step, double lr, double min_lr, int64_t warmup, int64_t steps);

/// AdamW parameter groups as GPT-2 recipes use them: `options`' weight decay on matrices and
/// embeddings (dim >= 2), none on biases and norms (dim 1). Tied weights appear once.
std::vector<optim::ParamGroup> decay_groups(nn::Module& m, const optim::AdamWOptions& options);

/// How generate() picks each token.
struct Sampling {
  double temperature = 1.0;  ///< logits divided by it; 0 takes the most likely token
  int64_t top_k = 0;         ///< only the k most likely tokens kept (0: all)
  double top_p = 1.0;        ///< only the most likely tokens whose probabilities sum to top_p kept (1: all)
  uint64_t seed = 0;         ///< the draws' seed, on a generator state of their own
};

/// Samples `n` tokens after `prompt` (ids) from `net`: the last n_ctx tokens in, the last
/// position's logits divided by the temperature, only the top-k, then the top-p (nucleus) most
/// likely kept, then a draw; training's random stream is untouched.
/// While the sequence fits n_ctx, a GPT runs only the new token on its key/value cache and an
/// LSTM on its carried state (the same logits as the whole window, to rounding); past n_ctx each
/// token runs the last n_ctx from the start, as a sliding window must.
std::vector<int64_t> generate(const LanguageModel& lm, std::vector<int64_t> prompt, int64_t n, const Sampling& how,
                              Device device);

/// The text of ids (characters, or GPT-2 ids as "[id id ...]" when no tokenizer is known).
std::string ids_text(const TokenData& d, const std::vector<int64_t>& ids);
/// The ids of a prompt: characters of the vocabulary, or space/comma-separated GPT-2 ids.
std::vector<int64_t> prompt_ids(const TokenData& d, const std::string& prompt);

/// The dense bf16/f16 Tensor Core peak of the device in FLOP/s when known (H100, H200, A100), else 0.
double device_peak_flops(Device device, DType dtype);

/// The files a run of mpx gpt writes into --out.
inline const std::vector<std::string> kGptRunFiles = {"checkpoint.safetensors", "metrics.csv", "metrics.jsonl",
                                                      "eval.csv",               "eval.jsonl",  "loss.svg"};

/// --export-hf's target, checked before training: a GPT-2 model, a file (not a folder) in a folder that takes new
/// files, and not one of the run's own files in `out`. Throws UsageError naming what is wrong.
void check_export_path(const std::string& path, const LanguageModel& lm, const std::string& arch, const std::string& out);

}  // namespace mpx::cli
