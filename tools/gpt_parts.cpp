// `mpx gpt`'s pieces: language models by name, token data (text, shards, the default corpus), lr schedule, sampling, device peaks.
#include "tools/gpt_parts.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "tools/cli_args.h"
#include "tools/common.h"

namespace mpx::cli {

namespace fs = std::filesystem;

std::vector<std::string> lm_archs() {
  std::vector<std::string> a = models::GPTConfig::presets();
  a.push_back("lstm-lm");
  return a;
}

LanguageModel make_language_model(const std::string& arch, int64_t vocab, int64_t context, double dropout) {
  LanguageModel lm;
  lm.arch = arch;
  if (arch == "lstm-lm") {
    models::LSTMLMConfig c;
    c.vocab_size = vocab;
    c.dropout = dropout;
    lm.lstm = std::make_shared<models::LSTMLMImpl>(c);
    lm.net = nn::AnyModule(lm.lstm);
    lm.n_ctx = context > 0 ? context : 256;  // a recurrent model takes any length; this is the window
  } else {
    const std::vector<std::string> known = lm_archs();
    if (std::find(known.begin(), known.end(), arch) == known.end()) {
      const std::string near = closest(arch, known);
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw UsageError("--arch " + arch + " is not a language model" + (near.empty() ? "" : " (did you mean " + near + "?)") +
                       "; known: " + list);
    }
    models::GPTConfig c = models::GPTConfig::preset(arch, vocab);
    c.dropout = dropout;
    if (context > c.n_ctx)
      throw UsageError("--context " + std::to_string(context) + " is longer than " + arch + "'s " +
                       std::to_string(c.n_ctx) + " learned positions; use --context " + std::to_string(c.n_ctx) +
                       " or less");
    lm.gpt = std::make_shared<models::GPTImpl>(c);
    lm.net = nn::AnyModule(lm.gpt);
    lm.n_ctx = context > 0 ? context : c.n_ctx;
  }
  std::set<const void*> seen;
  int64_t n = 0, positions = 0;
  for (const auto& [name, p] : lm.net.ptr()->named_parameters()) {
    if (!seen.insert(p.raw_data()).second) continue;
    n += p.numel();
    if (name == "wpe.weight") positions = p.numel();
  }
  lm.params = n;
  // PaLM's estimate (nanoGPT's estimate_mfu): 6 FLOPs per weight and token, positions excluded,
  // plus the attention products, 12 L C T per token.
  lm.flops_per_token = 6.0 * static_cast<double>(n - positions);
  if (lm.gpt)
    lm.flops_per_token += 12.0 * static_cast<double>(lm.gpt->config.n_layer * lm.gpt->config.n_embd * lm.n_ctx);
  return lm;
}

std::string default_corpus_path() { return "/usr/share/common-licenses"; }

namespace {

// The texts of a folder's regular files, in name order, each once (links to a file already read are skipped).
std::string read_folder_texts(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    MPX_ERROR("mpx gpt: no data given and the default corpus ", dir,
              " is missing; give a text file with --text FILE or token shards with --tokens GLOB");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::set<fs::path> seen;
  std::string text;
  for (const auto& f : files) {
    if (!fs::is_regular_file(f, ec) || !seen.insert(fs::canonical(f, ec)).second) continue;
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    text += ss.str();
  }
  MPX_CHECK(!text.empty(), "mpx gpt: the default corpus ", dir, " holds no text; give --text FILE or --tokens GLOB");
  return text;
}

}  // namespace

TokenData open_token_data(const std::string& text, const std::string& tokens, const std::string& val_tokens,
                          double val_fraction, const std::string& stored_chars) {
  if (!text.empty() && !tokens.empty()) throw UsageError("give --text FILE or --tokens GLOB, not both");
  if (!val_tokens.empty() && tokens.empty()) throw UsageError("--val-tokens needs --tokens (a text file holds out its tail)");
  TokenData d;
  std::shared_ptr<const data::TokenStream> all;
  if (!tokens.empty()) {
    all = data::open_token_shards(tokens);
    d.vocab_size = all->vocab_size();
    d.source = all->describe();
  } else {
    d.chars = true;
    if (!stored_chars.empty()) d.vocab = data::CharVocab::from_chars(stored_chars);
    if (!text.empty()) {
      all = data::open_text(text, d.vocab);
      d.source = "text " + text;
    } else {
      const std::string dir = default_corpus_path();
      all = data::text_tokens(read_folder_texts(dir), d.vocab, "the texts of " + dir);
      d.source = "the license texts of " + dir + " (no --text or --tokens given)";
    }
    d.vocab_size = d.vocab.size();
  }
  if (!val_tokens.empty()) {
    d.train = all;
    d.val = data::open_token_shards(val_tokens, d.vocab_size);
  } else {
    const int64_t n = all->size(), held = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
    d.train = held > 0 ? data::slice(all, 0, n - held) : all;
    if (held > 0) d.val = data::slice(all, n - held, n);
  }
  return d;
}

double gpt_lr_at(int64_t step, double lr, double min_lr, int64_t warmup, int64_t steps) {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= steps) return min_lr;
  const double t = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, steps - warmup));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * t)) * (lr - min_lr);
}

std::vector<optim::ParamGroup> decay_groups(nn::Module& m, const optim::AdamWOptions& options) {
  std::vector<Tensor> decay, none;
  std::set<const void*> seen;
  for (const Tensor& p : m.parameters()) {
    if (!seen.insert(p.raw_data()).second) continue;
    (p.dim() >= 2 ? decay : none).push_back(p);
  }
  std::vector<optim::ParamGroup> g;
  g.emplace_back(decay, std::make_unique<optim::AdamWOptions>(options));
  if (!none.empty()) {
    optim::AdamWOptions o = options;
    o.weight_decay(0.0);
    g.emplace_back(none, std::make_unique<optim::AdamWOptions>(o));
  }
  return g;
}

namespace {
// The logits after the last token of a growing sequence. The model keeps what it has seen (a
// GPT's keys and values, an LSTM's state) while the sequence fits the window, and runs only the
// tokens it has not; past the window it runs the last n_ctx tokens from the start each time.
// MPX_GENERATE_CACHE=0 runs the whole window for every token (what the cache must reproduce).
class NextLogits {
 public:
  NextLogits(const LanguageModel& lm, Device device) : lm_(lm), device_(device) {
    const char* v = std::getenv("MPX_GENERATE_CACHE");
    keep_ = (lm.gpt || lm.lstm) && !(v && std::string(v) == "0");
  }

  Tensor operator()(const std::vector<int64_t>& ids) {
    const int64_t n = static_cast<int64_t>(ids.size());
    const bool incremental = keep_ && n <= lm_.n_ctx;
    if (!incremental) seen_ = 0, cache_.clear(), state_.clear();
    const int64_t from = incremental ? seen_ : n - std::min(n, lm_.n_ctx);
    Tensor x = tensor(std::vector<int64_t>(ids.begin() + from, ids.end()), {1, n - from}).to(device_);
    Tensor logits;  // [V]
    if (lm_.gpt) {
      // amp's autocast for a holder call, around the body that projects the last row only.
      nn::detail::ForwardAutocastScope scope(lm_.gpt->forward_cast());
      Tensor f = lm_.gpt->features(x, incremental ? &cache_ : nullptr);
      logits = nn::functional::linear(f.select(1, f.size(1) - 1), lm_.gpt->wte->weight).select(0, 0);
    } else if (lm_.lstm) {
      logits = models::LSTMLM(lm_.lstm)(x, incremental ? &state_ : nullptr).select(1, n - from - 1).select(0, 0);
    } else {
      logits = lm_.net(x).select(1, n - from - 1).select(0, 0);
    }
    if (incremental) seen_ = n;
    return logits.to(Device::cpu(), kFloat32);
  }

 private:
  const LanguageModel& lm_;
  Device device_;
  bool keep_ = false;
  int64_t seen_ = 0;
  models::GPTKVCache cache_;
  models::LSTMLMState state_;
};
}  // namespace

namespace {
// The smallest logit kept by nucleus sampling: the most likely tokens are kept until their probabilities
// (softmax of `logits`, [V] f32 on the CPU) reach top_p, at least one.
double nucleus_floor(const Tensor& logits, double top_p) {
  const auto [sorted, order] = topk(logits, logits.size(0));
  const Tensor probs = softmax(sorted, 0).contiguous();
  const float* p = probs.data_ptr<float>();
  double sum = 0.0;
  int64_t last = 0;
  while (last + 1 < probs.size(0) && (sum += p[last]) < top_p) ++last;
  return sorted.select(0, last).item<double>();
}
}  // namespace

std::vector<int64_t> generate(const LanguageModel& lm, std::vector<int64_t> ids, int64_t n, const Sampling& how,
                              Device device) {
  MPX_CHECK(!ids.empty(), "generation needs a prompt of at least one token");
  random::Generator& gen = random::default_generator();
  const uint64_t saved_seed = gen.current_seed(), saved_offset = gen.offset();
  manual_seed(how.seed);
  nn::Module& m = *lm.net.ptr();
  const bool was_training = m.is_training();
  m.eval();
  {
    NoGradGuard ng;
    NextLogits next_logits(lm, device);
    for (int64_t i = 0; i < n && !interrupted(); ++i) {  // a signal ends a long generation with what it has
      Tensor logits = next_logits(ids);
      int64_t next = 0;
      if (how.temperature <= 0) {
        next = std::get<1>(topk(logits, 1)).item<int64_t>();
      } else {
        // The largest logit first: a tiny temperature then sends the rest to -inf instead of every logit to +-inf.
        logits = (logits - logits.max()) / how.temperature;
        if (how.top_k > 0 && how.top_k < logits.size(0)) {
          const double kth = std::get<0>(topk(logits, how.top_k)).select(0, how.top_k - 1).item<double>();
          logits = masked_fill(logits, logits < kth, -INFINITY);
        }
        if (how.top_p < 1.0) logits = masked_fill(logits, logits < nucleus_floor(logits, how.top_p), -INFINITY);
        next = multinomial(softmax(logits, 0), 1).item<int64_t>();
      }
      ids.push_back(next);
    }
  }
  if (was_training) m.train();
  gen.set_state(saved_seed, saved_offset);
  return ids;
}

std::string ids_text(const TokenData& d, const std::vector<int64_t>& ids) {
  if (d.chars) return d.vocab.decode(ids);
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "]";
}

std::vector<int64_t> prompt_ids(const TokenData& d, const std::string& prompt) {
  if (d.chars) {
    // An empty prompt starts a new line (nanoGPT's choice), or the first character without one.
    const bool nl = d.vocab.chars.find('\n') != std::string::npos;
    const std::vector<int32_t> v = d.vocab.encode(prompt.empty() ? std::string(1, nl ? '\n' : d.vocab.chars[0]) : prompt);
    return {v.begin(), v.end()};
  }
  std::vector<int64_t> ids;
  std::string tok;
  std::istringstream in(prompt);
  while (std::getline(in, tok, ' ')) {
    std::istringstream parts(tok);
    std::string p;
    while (std::getline(parts, p, ',')) {
      if (p.empty()) continue;
      char* end = nullptr;
      const long long v = std::strtoll(p.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v >= d.vocab_size)
        throw UsageError("--generate: token data take a prompt of GPT-2 token ids in [0, " + std::to_string(d.vocab_size) +
                         ") separated by spaces or commas; '" + p + "' is not one");
      ids.push_back(v);
    }
  }
  if (ids.empty()) ids.push_back(50256);  // GPT-2's <|endoftext|> starts a text
  return ids;
}

double device_peak_flops(Device device, DType dtype) {
  if (!device.is_cuda() || (dtype != kBFloat16 && dtype != kFloat16)) return 0;
  const std::string name = cuda::device_properties(device.index).name;
  // Dense Tensor Core peaks from NVIDIA's data sheets (no sparsity).
  if (name.find("H100") != std::string::npos) return name.find("PCIe") != std::string::npos ? 756e12 : 989e12;
  if (name.find("H200") != std::string::npos) return 989e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  return 0;
}

void check_export_path(const std::string& path, const LanguageModel& lm, const std::string& arch, const std::string& out) {
  if (!lm.gpt) throw UsageError("--export-hf writes GPT-2 weights; --arch " + arch + " is not a GPT-2 model");
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) throw UsageError("--export-hf " + path + " is a folder; give a file, e.g. " + (p / "model.safetensors").string());
  const fs::path target = fs::weakly_canonical(p, ec);
  for (const std::string& own : kGptRunFiles)
    if (!ec && target == fs::weakly_canonical(fs::path(out) / own, ec))
      throw UsageError("--export-hf " + path + " is the run's own " + own + "; choose another file");
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (fs::weakly_canonical(dir, ec) == fs::weakly_canonical(out, ec)) return;  // the run creates --out
  if (!fs::is_directory(dir, ec)) throw UsageError("--export-hf " + path + ": the folder " + dir.string() + " does not exist");
  // The export writes a temporary file beside the target: make sure the folder takes one now.
  const fs::path probe = dir / (".mpx-export-check-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw UsageError("--export-hf " + path + ": cannot create files in " + dir.string() + " (" + std::strerror(errno) + ")");
  ::close(fd);
  fs::remove(probe, ec);
}

}  // namespace mpx::cli
