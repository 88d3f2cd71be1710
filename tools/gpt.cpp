// `mpx gpt`: language-model training (GPT-2 family, LSTM) with apex's flags, token data, evaluation, sampling and generation; data-parallel under mpirun.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt_hf.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/gpt_parts.h"
#include "tools/metrics.h"
#include "tools/progress.h"
#include "tools/ranks.h"
#include "tools/run_dir.h"
#include "tools/threads.h"

namespace mpx::cli {

namespace fs = std::filesystem;
namespace F = nn::functional;

namespace {

// The flags that define the run; a checkpoint stores them and a resumed run adopts them.
const std::vector<std::string> kRunFlags = {
    "--arch", "--text", "--tokens", "--val-tokens", "--val-fraction", "--context", "--batch-size", "--grad-accum",
    "--steps", "--lr", "--min-lr", "--warmup", "--weight-decay", "--beta1", "--beta2", "--eps", "--clip-grad",
    "--dropout", "--opt-level", "--dtype", "--keep-batchnorm-fp32", "--loss-scale", "--master-weights",
    "--stochastic-rounding", "--low-precision-state", "--seed", "--eval-interval", "--eval-iters", "--pretrained",
    "--deterministic"};
// Run flags a resumed run may change without a warning (they do not change the steps trained so far).
const std::vector<std::string> kFreeFlags = {"--steps", "--eval-interval", "--eval-iters", "--deterministic"};

Args make_args() {
  Args a("mpx gpt", "mpx gpt [flags]");
  a.option({"-a", "--arch"}, "NAME", "gpt-tiny, gpt-mini, gpt2, gpt2-medium, gpt2-large, gpt2-xl or lstm-lm", "gpt-tiny")
      .option({"--text"}, "FILE", "train on a text file's bytes (character vocabulary from the file)")
      .option({"--tokens"}, "GLOB", "train on llm.c token shards (.bin files, GPT-2 token ids)")
      .option({"--val-tokens"}, "GLOB", "validation shards (default: the tail of the training tokens)")
      .option({"--val-fraction"}, "X", "the tail of the tokens held out for validation without --val-tokens", "0.1")
      .option({"--context"}, "N", "tokens per sequence; 0 = the model's context", "0")
      .option({"-b", "--batch-size"}, "N", "sequences per micro-step and rank", "16")
      .option({"--grad-accum"}, "N", "micro-steps accumulated into one optimizer step", "1")
      .option({"--steps"}, "N", "optimizer steps in total (counting resumed ones)", "300")
      .option({"--lr"}, "X", "peak learning rate (AdamW)", "0.001")
      .option({"--min-lr"}, "X", "the cosine's floor; default: lr / 10")
      .option({"--warmup"}, "N", "linear warmup steps; default: min(100, steps / 10)")
      .option({"--weight-decay", "--wd"}, "X", "AdamW weight decay of matrices and embeddings (not biases, norms)", "0.1")
      .option({"--beta1"}, "X", "AdamW beta1", "0.9")
      .option({"--beta2"}, "X", "AdamW beta2", "0.95")
      .option({"--eps"}, "X", "AdamW epsilon", "1e-8")
      .option({"--clip-grad"}, "X", "clip the gradient norm (of the FP32 masters) to X; 0 = off", "1.0")
      .option({"--dropout"}, "X", "dropout of embeddings, attention and residuals (GPT-2 used 0.1)", "0.0")
      .flag({"--checkpoint-activations"}, "recompute each GPT block in the backward: activation memory of one block "
            "input per layer for about a third more compute");
  add_amp_flags(a, "O1");
  a.set_default("--dtype", "bf16");
  a.option({"--eval-interval"}, "N", "evaluate, sample and checkpoint every N steps (and at the end)", "100")
      .option({"--eval-iters"}, "N", "validation batches per evaluation", "20")
      .option({"--sample"}, "N", "print N sampled tokens at each evaluation (with --generate: tokens generated)", "0")
      .option({"--temperature"}, "X", "sampling temperature; 0 = always the most likely token", "1.0")
      .option({"--top-k"}, "N", "sample among the k most likely tokens; 0 = all", "0")
      .option({"--top-p"}, "X", "sample among the most likely tokens whose probabilities sum to X (nucleus); 1 = all", "1.0")
      .option({"--generate"}, "PROMPT", "with --resume: print --sample tokens (200 when 0) after PROMPT and exit")
      .option({"--pretrained"}, "FILE", "start from Hugging Face GPT-2 weights (model.safetensors); GPT-2 archs only")
      .option({"--export-hf"}, "FILE", "at the end, write the weights in Hugging Face GPT-2 layout (transformers loads it)")
      .option({"--resume"}, "PATH", "continue from a checkpoint.safetensors of mpx gpt")
      .flag({"--deterministic"}, "bit-identical runs: fixed threads, seeded everything, deterministic kernels")
      .option({"--print-freq", "-p"}, "N", "log a line every N steps", "10")
      .option({"--prof"}, "N", "stop after N steps (writing a checkpoint), -1 = off", "-1")
      .option({"--device"}, "cpu|cuda[:i]", "where to train", "cpu")
      .option({"--seed"}, "N", "seed of the weights, the data order, dropout and sampling", "0")
      .option({"--out"}, "DIR", "where checkpoint.safetensors, metrics.csv/.jsonl, eval.csv/.jsonl and loss.svg go",
              "out/gpt")
      .flag({"--overwrite"}, "replace another run's files in --out instead of refusing to start")
      .option({"--threads"}, "N", "CPU threads (OpenMP) per rank; default: OMP_NUM_THREADS, else this rank's share")
      .option({"--nproc-per-node", "--nproc_per_node"}, "N", "start N ranks on this machine under mpirun");
  return a;
}

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += d[c >> 4], h += d[c & 15];
  return h;
}

std::string unhex(const std::string& h, const std::string& path) {
  auto v = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    MPX_ERROR("checkpoint ", path, ": its vocabulary (vocab.chars) is damaged; use the checkpoint the run wrote");
  };
  MPX_CHECK(h.size() % 2 == 0, "checkpoint ", path, ": its vocabulary (vocab.chars) is damaged");
  std::string s;
  for (size_t i = 0; i < h.size(); i += 2) s += static_cast<char>(v(h[i]) * 16 + v(h[i + 1]));
  return s;
}

// The GPT-2 preset whose depth and width a Hugging Face checkpoint has (--pretrained without --arch).
std::string pretrained_arch(const TensorDict& hf, const std::string& path) {
  const models::GPTConfig c = models::hf_gpt2_config(hf, 1);  // heads do not change the shapes compared here
  std::string list;
  for (const std::string& name : models::GPTConfig::presets()) {
    const models::GPTConfig p = models::GPTConfig::preset(name);
    if (p.n_layer == c.n_layer && p.n_embd == c.n_embd && p.n_ctx == c.n_ctx) return name;
    list += (list.empty() ? "" : ", ") + name;
  }
  throw UsageError("--pretrained " + path + " holds a GPT-2 of " + std::to_string(c.n_layer) + " layers, width " +
                   std::to_string(c.n_embd) + " and context " + std::to_string(c.n_ctx) +
                   ", which is none of the presets (" + list + "); mpx gpt runs those only");
}

}  // namespace

bool names_language_model(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    std::string v;
    if ((a == "-a" || a == "--arch") && i + 1 < argc) v = argv[i + 1];
    else if (a.rfind("--arch=", 0) == 0) v = a.substr(7);
    else if (a.rfind("-a", 0) == 0 && a.size() > 2 && a[2] != '-') v = a.substr(2);
    else continue;
    const auto names = models::GPTConfig::presets();
    return v == "lstm-lm" || std::find(names.begin(), names.end(), v) != names.end();
  }
  return false;
}

int run_train_language_model(int argc, char** argv) {
  std::vector<std::string> words;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    std::string data;
    if (a == "--dataset" && i + 1 < argc) data = argv[++i];
    else if (a.rfind("--dataset=", 0) == 0) data = a.substr(10);
    else {
      words.push_back(a);
      continue;
    }
    const auto colon = data.find(':');
    const std::string kind = data.substr(0, colon);
    if (colon == std::string::npos || (kind != "text" && kind != "tokens") || colon + 1 == data.size())
      throw UsageError("--dataset " + data + ": a language model takes --dataset text:FILE (a text file's bytes) or "
                       "--dataset tokens:GLOB (llm.c token shards)");
    words.push_back("--" + kind);
    words.push_back(data.substr(colon + 1));
  }
  std::vector<char*> ptrs;
  for (std::string& w : words) ptrs.push_back(w.data());
  ptrs.push_back(nullptr);
  return run_gpt(static_cast<int>(words.size()), ptrs.data());
}

int run_gpt(int argc, char** argv) {
  const Ranks rk = join_ranks();
  Args args = make_args();
  Metadata ck_meta;
  TensorDict ck;
  if (!parse_resumable(args, argc, argv, "gpt", kRunFlags, kFreeFlags, ck_meta, ck)) return 0;
  const std::string resume = args.str("--resume");
  for (const auto& [given, stored] : {std::pair<std::string, std::string>{"--tokens", "--text"}, {"--text", "--tokens"}})
    if (args.given(given) && !meta_str(ck_meta, "flag." + stored).empty())
      throw UsageError("--resume " + resume + " trained on " + stored + " " + meta_str(ck_meta, "flag." + stored) + "; " +
                       given + " would change the data and its vocabulary under the model: resume without it, or start "
                       "a new run");
  const int64_t batch = args.integer("--batch-size", 1), accum = args.integer("--grad-accum", 1);
  const int64_t steps = args.integer("--steps", 1), context_flag = args.integer("--context", 0);
  const double lr = args.number("--lr", 0.0);
  const double min_lr = args.str("--min-lr").empty() ? lr / 10 : args.number("--min-lr", 0.0);
  const int64_t warmup = args.str("--warmup").empty() ? std::min<int64_t>(100, steps / 10) : args.integer("--warmup", 0);
  const double wd = args.number("--weight-decay", 0.0), clip = args.number("--clip-grad", 0.0);
  const double dropout = args.number("--dropout", 0.0), val_fraction = args.number("--val-fraction", 0.0);
  if (dropout >= 1) throw UsageError("--dropout must be below 1, got " + args.str("--dropout"));
  if (min_lr > lr)
    throw UsageError("--min-lr (the cosine's floor) must not exceed --lr, got " + args.str("--min-lr") + " > " + args.str("--lr"));
  if (val_fraction >= 1) throw UsageError("--val-fraction must be below 1, got " + args.str("--val-fraction"));
  const int64_t eval_interval = args.integer("--eval-interval", 1), eval_iters = args.integer("--eval-iters", 0);
  const int64_t n_sample = args.integer("--sample", 0), top_k = args.integer("--top-k", 0);
  const double temperature = args.number("--temperature", 0.0), top_p = args.number("--top-p", 0.0);
  if (top_p <= 0.0 || top_p > 1.0) throw UsageError("--top-p must be in (0, 1], got " + args.str("--top-p"));
  const int64_t print_freq = args.integer("--print-freq", 1);
  const uint64_t seed = static_cast<uint64_t>(args.integer("--seed", 0));
  const Sampling sampling{temperature, top_k, top_p, seed};
  const bool deterministic = args.on("--deterministic"), generating = args.given("--generate");
  const int64_t prof = generating ? -1 : prof_steps(args, "gpt");  // --generate trains no step
  const Device device = parse_device(args.str("--device"));
  const std::string out = args.str("--out"), pretrained = args.str("--pretrained");
  if (generating && resume.empty() && pretrained.empty())
    throw UsageError("--generate needs a model: --resume CHECKPOINT (of mpx gpt) or --pretrained FILE (GPT-2 weights)");
  if (args.given("--nproc-per-node"))
    throw UsageError("mpx gpt: --nproc-per-node starts mpirun itself; under mpirun drop it");
  amp::Options amp_opts = amp_options(args, 1);

  if (args.given("--threads")) mpx::set_num_threads(static_cast<int>(args.integer("--threads", 1, kMaxThreads)));
  else if (deterministic && !meta_str(ck_meta, "threads").empty())
    mpx::set_num_threads(static_cast<int>(meta_int(ck_meta, "threads", resume, 1, kMaxThreads)));
  else if (rk.distributed()) mpx::set_num_threads(default_threads(0, rk.local_world));
  if (deterministic) {
    cuda::cudnn_deterministic(true);
    cuda::cudnn_benchmark(false);
  }

  // Hugging Face weights first: without --arch they name the preset, and generating from them needs no data.
  TensorDict hf;
  std::string arch = args.str("--arch");
  if (!pretrained.empty()) {
    if (arch == "lstm-lm") throw UsageError("--pretrained loads GPT-2 weights; --arch " + arch + " is not a GPT-2 model");
    hf = load_tensors(pretrained);
    if (!args.given("--arch") && resume.empty()) arch = pretrained_arch(hf, pretrained);
  }
  const bool ids_only = !pretrained.empty() && generating && args.str("--text").empty() && args.str("--tokens").empty();
  if (!pretrained.empty() && !generating && args.str("--text").empty() && args.str("--tokens").empty())
    throw UsageError("--pretrained fine-tunes GPT-2 weights on GPT-2 token ids: give --tokens GLOB (llm.c's shards; "
                     "docs/data.md has a one-line tokenizer script), or add --generate to only generate");

  // Data first: the vocabulary sizes the model.
  const std::string stored = meta_str(ck_meta, "vocab.chars").empty() ? "" : unhex(meta_str(ck_meta, "vocab.chars"), resume);
  TokenData d;
  if (ids_only) {
    d.vocab_size = models::hf_gpt2_config(hf).vocab_size;
    d.source = "no data (GPT-2 ids)";
  } else if (generating && !stored.empty()) {  // the checkpoint's own vocabulary: the training text is not needed
    d.chars = true;
    d.vocab = data::CharVocab::from_chars(stored);
    d.vocab_size = d.vocab.size();
    d.source = "the vocabulary of " + resume;
  } else {
    d = open_token_data(args.str("--text"), args.str("--tokens"), args.str("--val-tokens"), val_fraction, stored);
  }
  manual_seed(seed);
  LanguageModel lm = make_language_model(arch, d.vocab_size, context_flag, dropout);
  const int64_t context = lm.n_ctx;
  if (args.given("--checkpoint-activations")) {
    if (!lm.gpt) throw UsageError("--checkpoint-activations recomputes GPT blocks; --arch " + arch + " has none");
    lm.gpt->gradient_checkpointing = true;
  }
  if (!pretrained.empty()) {
    if (!lm.gpt) throw UsageError("--pretrained loads GPT-2 weights; --arch " + arch + " is not a GPT-2 model");
    try {
      models::load_hf_gpt2(*lm.gpt, hf);
    } catch (const std::exception& e) {
      MPX_ERROR("--pretrained ", pretrained, " does not fit --arch ", arch, " with a vocabulary of ", d.vocab_size,
                " (", e.what(), "); GPT-2 checkpoints need --tokens data (GPT-2 ids) and the arch of their size");
    }
    hf.clear();  // the model holds the weights now
  }
  lm.net.ptr()->to(device);
  const std::string export_hf = args.str("--export-hf");
  if (!export_hf.empty() && !generating) check_export_path(export_hf, lm, arch, out);

  if (generating) {  // inference only: no output folder, no optimizer
    if (!resume.empty()) get_module(*lm.net.ptr(), "model", ck, resume);
    if (amp_opts.opt_level_ != "O0") amp::initialize(lm.net, amp_opts.verbosity(0));
    const int64_t n = n_sample > 0 ? n_sample : 200;
    const std::vector<int64_t> ids =
        generate(lm, prompt_ids(d, args.str("--generate")), n, sampling, device);
    std::printf("%s\n", ids_text(d, ids).c_str());
    return 0;
  }

  MicroBatches train_batches(d.train, context, batch, rk, seed, /*shuffle=*/true);
  MPX_CHECK(train_batches.per_epoch() > 0, "mpx gpt: ", d.source, " gives ", train_batches.windows(),
            " training windows of ", context + 1, " tokens, fewer than one batch of ", batch,
            rk.distributed() ? " per rank" : "", "; lower --batch-size or --context, or give more text");
  std::optional<MicroBatches> val_batches;
  if (d.val && d.val->size() > context) val_batches.emplace(d.val, context, batch, rk, seed, /*shuffle=*/false);
  const bool validating = val_batches && eval_iters > 0 && val_batches->per_epoch() > 0;
  if (rk.leader() && eval_iters > 0 && d.val && !validating)
    std::fprintf(stderr, "mpx gpt: warning: the %lld validation tokens make %lld windows of %lld tokens, fewer than one "
                 "batch of %lld%s: no validation loss will be reported; raise --val-fraction, give longer --val-tokens "
                 "or lower --batch-size\n",
                 static_cast<long long>(d.val->size()), static_cast<long long>(val_batches ? val_batches->windows() : 0),
                 static_cast<long long>(context + 1), static_cast<long long>(batch), rk.distributed() ? " per rank" : "");

  const auto adamw = optim::AdamWOptions(lr).betas(optim::Betas(beta_flag(args, "--beta1"), beta_flag(args, "--beta2")))
                         .eps(args.number("--eps", 0.0)).weight_decay(wd);
  optim::AdamW opt(decay_groups(*lm.net.ptr(), adamw), adamw);
  amp::reset();
  amp_opts.verbosity(0);
  amp::initialize(lm.net, opt, amp_opts);
  if (rk.leader() && amp::properties().opt_level != "O0" && amp_opts.dtype_ == kFloat16 &&
      !amp::properties().master_weights && !args.on("--stochastic-rounding") && adamw.eps() < 1e-4)
    std::fprintf(stderr, "mpx gpt: warning: without master weights AdamW keeps its moments in f16 (as PyTorch does for f16 "
                 "parameters): a second moment below f16's smallest 6e-8 is zero (gradients under about 1e-3), and with "
                 "--eps %s such a step is lr * gradient / eps, which wrecks the model in a step or two; use --dtype bf16, "
                 "O1/O2 with master weights, or --eps 1e-4\n",
                 args.str("--eps").c_str());

  const std::string run_id = meta_str(ck_meta, "run.id").empty() ? new_run_id() : meta_str(ck_meta, "run.id");
  const RunFiles files{"gpt", kGptRunFiles, {}};
  std::string canonical;
  for (const auto& f : kRunFlags) canonical += f + "=" + args.str(f) + " ";
  for (const char* f : {"--prof", "--resume"}) canonical += std::string(f) + "=" + args.str(f) + " ";
  check_same_flags("mpx gpt", canonical);
  const std::string ck_path = rk.leader() ? claim_out(out, files, run_id, resume, args.on("--overwrite"))
                                          : (fs::path(out) / "checkpoint.safetensors").string();

  int64_t start = 0;
  if (!resume.empty()) {
    start = restore_checkpoint(ck_meta, resume, 0, [&] {
              get_module(*lm.net.ptr(), "model", ck, resume);
              get_optimizer(opt, "opt", ck, ck_meta, resume);
            }).global_step;
    const int64_t ck_world = meta_str(ck_meta, "world_size").empty() ? 1 : meta_int(ck_meta, "world_size", resume, 1, 1 << 20);
    if (ck_world != rk.world && rk.leader())
      std::fprintf(stderr, "mpx gpt: warning: --resume %s was written by %lld rank(s), this run has %d: the ranks read "
                   "other windows from here on, so the run will not match an uninterrupted one\n",
                   resume.c_str(), static_cast<long long>(ck_world), rk.world);
  }
  std::shared_ptr<nn::DistributedDataParallelImpl> ddp;
  nn::AnyModule net = lm.net;
  if (rk.data_parallel()) {
    ddp = std::make_shared<nn::DistributedDataParallelImpl>(lm.net);
    net = nn::AnyModule(ddp);
  }

  const int threads = mpx::get_num_threads();
  const int64_t tokens_per_step = batch * context * accum * rk.world;
  const DType low = amp::properties().opt_level == "O0" ? kFloat32 : amp_opts.dtype_;
  const double peak = device_peak_flops(device, low);
  if (rk.leader())
    std::printf("mpx gpt: %s (%.2f M parameters, vocabulary %lld, context %lld) on %s: %lld training and %lld validation "
                "tokens; %lld tokens per step (batch %s x %lld accumulated), AdamW lr %g -> %g (warmup %lld), %s %s%s, "
                "%s, %d thread%s%s\n",
                arch.c_str(), static_cast<double>(lm.params) / 1e6, static_cast<long long>(d.vocab_size),
                static_cast<long long>(context), d.source.c_str(), static_cast<long long>(d.train->size()),
                static_cast<long long>(d.val ? d.val->size() : 0), static_cast<long long>(tokens_per_step),
                batch_per_rank_text(batch, rk).c_str(), static_cast<long long>(accum), lr, min_lr,
                static_cast<long long>(warmup), amp::properties().opt_level.c_str(),
                amp::properties().opt_level == "O0" ? "f32" : (low == kBFloat16 ? "bf16" : "f16"),
                amp_recipe_note().c_str(), device.str().c_str(),
                threads, threads == 1 ? "" : "s", rk.distributed() ? " per rank" : "");
  if (start >= steps) {
    std::printf("nothing to do: the checkpoint already trained %lld of %lld steps (raise --steps to train more)\n",
                static_cast<long long>(start), static_cast<long long>(steps));
    return 0;
  }

  MetricsLog log(out, "metrics"), eval_log(out, "eval");
  if (rk.leader()) {
    const std::string from = resume.empty() ? "" : fs::path(resume).parent_path().string();
    log.resume("step", static_cast<double>(start), from.empty() ? "" : (fs::path(from) / "metrics.csv").string());
    eval_log.resume("step", static_cast<double>(start), from.empty() ? "" : (fs::path(from) / "eval.csv").string());
  }

  auto cross_entropy = [&](const Tensor& logits, const Tensor& y) {
    // f32 whatever the logits' dtype (as PyTorch's autocast runs it), without an f32 copy of them.
    return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
  };
  auto last_checkpoint = [&]() -> std::string {
    return fs::exists(ck_path) ? "; the last checkpoint is " + ck_path : "";
  };
  // Stops the run before a diverged model can replace the last good checkpoint.
  auto diverged = [&](int64_t step_done, const std::string& what) {
    // A loss scale guards the backward only: a non-finite loss comes from the forward pass.
    const bool f16 = amp::properties().opt_level != "O0" && low == kFloat16;
    MPX_ERROR("training diverged: ", what, " at step ", step_done, "; ",
              f16 ? "the f16 forward pass overflowed (f16 ends at 65504): use --dtype bf16, or lower --lr (now " : "lower --lr (now ",
              lr, ") or raise --warmup", last_checkpoint());
  };
  auto nan_or_inf = [](double v) { return std::string(std::isnan(v) ? "nan" : "inf"); };
  auto check_finite_model = [&](int64_t step_done) {
    for (const Tensor& p : lm.net.ptr()->parameters())
      if (!p.all_finite()) diverged(step_done, "the weights hold inf or NaN");
  };
  // Every rank checks (their weights are equal), so all stop together.
  auto save_checkpoint = [&](int64_t step_done) {
    check_finite_model(step_done);
    if (!rk.leader()) return;
    TensorDict t;
    Metadata m;
    put_module(*lm.net.ptr(), "model", t);
    put_optimizer(opt, "opt", t, m);
    put_amp_and_rng(m);
    m["mpx.checkpoint"] = "gpt";
    m["mpx.version"] = MPX_VERSION_STRING;
    for (const auto& f : kRunFlags) m["flag." + f] = args.str(f);
    m["epoch"] = "0";
    m["step_in_epoch"] = std::to_string(step_done);
    m["global_step"] = std::to_string(step_done);
    m["threads"] = std::to_string(mpx::get_num_threads());
    m["run.id"] = run_id;
    m["world_size"] = std::to_string(rk.world);
    if (d.chars) m["vocab.chars"] = hex(d.vocab.chars);
    save_checkpoint_file(t, m, ck_path);
  };
  // A batch, or on a data error (a bad token id, an unreadable shard) the error with the progress saved.
  auto fetch = [&](MicroBatches& from, int64_t micro, const char* what, int64_t step_now) {
    try {
      return from.get(micro);
    } catch (const Error& e) {
      const bool saved = step_now > start && rk.leader();
      if (saved) save_checkpoint(step_now);
      MPX_ERROR(e.what(), " (reading the ", what, " data at step ", step_now, saved ? "; the model after step " : "",
                saved ? std::to_string(step_now) + " is saved in " + ck_path + ": fix the data, then continue with --resume " + ck_path : "",
                ")");
    }
  };
  auto write_chart = [&] {
    if (!rk.leader()) return;
    write_svg((fs::path(out) / "loss.svg").string(), "mpx gpt: " + arch + ", " + amp::properties().opt_level,
              {Panel{"loss", "step", "cross-entropy (nats per token)",
                     {Series{"train", log.column("step", "loss")}, Series{"validation", eval_log.column("step", "val_loss")}}}});
  };
  // Mean validation loss over the first --eval-iters batches of every rank's shard (NaN without validation data).
  auto evaluate = [&](int64_t eval_step) -> double {
    if (!validating) return NAN;
    nn::Module& m = *lm.net.ptr();
    m.eval();
    double sum = 0, n = 0;
    {
      NoGradGuard ng;
      const int64_t k = std::min(eval_iters, val_batches->per_epoch());
      for (int64_t i = 0; i < k; ++i) {
        data::Batch b = fetch(*val_batches, i, "validation", eval_step);
        sum += cross_entropy(lm.net(b.data.to(device)), b.target.to(device)).item<double>();
        n += 1;
      }
    }
    m.train();
    const std::vector<double> v = sum_over_ranks({sum, n});
    return v[1] > 0 ? v[0] / v[1] : NAN;
  };
  // Evaluates, checkpoints (only a model that is still finite), then samples: a failed sample keeps the checkpoint.
  auto eval_checkpoint_sample = [&](int64_t step_done) {
    const double vl = evaluate(step_done);
    if (validating && !std::isfinite(vl))
      diverged(step_done, "the validation loss is " + nan_or_inf(vl));
    if (rk.leader() && std::isfinite(vl)) {
      eval_log.append({{"step", static_cast<double>(step_done)},
                       {"tokens", static_cast<double>(step_done * tokens_per_step)},
                       {"val_loss", vl},
                       {"val_ppl", std::exp(vl)}});
      std::printf("step %lld: validation loss %.4f, perplexity %.2f\n", static_cast<long long>(step_done), vl, std::exp(vl));
    }
    save_checkpoint(step_done);
    if (rk.leader()) {
      if (n_sample > 0) {
        Sampling at_step = sampling;
        at_step.seed = seed + static_cast<uint64_t>(step_done);
        const std::vector<int64_t> ids = generate(lm, prompt_ids(d, ""), n_sample, at_step, device);
        std::printf("--- sample at step %lld ---\n%s\n---\n", static_cast<long long>(step_done), ids_text(d, ids).c_str());
      }
      std::fflush(stdout);
    }
    return vl;
  };

  install_interrupt_handler();
  const auto run_start = std::chrono::steady_clock::now();
  auto window_start = run_start;
  int64_t window_tokens = 0, iterations = 0;
  Tensor loss_sum;  // this print window's summed micro-step losses, on the device until printed
  int64_t loss_n = 0;
  double last_val = NAN, grad_norm = 0;
  int64_t skipped_at_window = amp::skipped_steps(opt), window_first_step = start;
  for (int64_t step = start; step < steps; ++step) {
    if ((prof >= 0 && iterations >= prof) || (rk.distributed() ? any_rank(interrupted()) : interrupted())) {
      save_checkpoint(step);
      write_chart();
      if (interrupted()) {
        std::printf("interrupted by %s at step %lld; checkpoint saved, continue with: mpx gpt --resume %s\n",
                    interrupt_name().c_str(), static_cast<long long>(step), ck_path.c_str());
        return interrupt_exit_code();
      }
      std::printf("Profiling ended at iteration %lld; wrote %s\n", static_cast<long long>(iterations), ck_path.c_str());
      return 0;
    }
    const double step_lr = gpt_lr_at(step, lr, min_lr, warmup, steps);
    for (auto& g : opt.param_groups()) g.set_lr(step_lr);
    opt.zero_grad();
    bool cut = false;
    for (int64_t a = 0; a < accum; ++a) {
      // A long accumulation stops at a signal too (one process: ranks must agree on when to stop).
      if (!rk.distributed() && interrupted()) {
        cut = true;
        break;
      }
      data::Batch b = fetch(train_batches, step * accum + a, "training", step);
      Tensor x = b.data.to(device, true), y = b.target.to(device, true);
      const bool last = a == accum - 1;
      // DDP reduces once per optimizer step: the micro-steps before the last keep their gradients local.
      std::optional<nn::DistributedDataParallelImpl::NoSyncGuard> local;
      if (ddp && !last) local.emplace(*ddp);
      Tensor loss = cross_entropy(net(x), y);
      amp::scale_loss(accum > 1 ? loss / static_cast<double>(accum) : loss, opt,
                      amp::ScaleLossOptions().delay_unscale(!last))
          .backward();
      loss_sum = loss_sum.defined() ? loss_sum + loss.detach() : loss.detach();
      ++loss_n;
    }
    if (cut) {  // back to the loop's head, which saves the state before this step and exits
      opt.zero_grad();
      --step;
      continue;
    }
    if (clip > 0) grad_norm = nn::utils::clip_grad_norm_(amp::master_params(opt), clip);
    opt.step();
    ++iterations;
    window_tokens += tokens_per_step;
    const int64_t done = step + 1;
    if (done % print_freq == 0 || done == steps) {
      const double mean_loss = sum_over_ranks({loss_sum.item<double>() / static_cast<double>(loss_n)})[0] / rk.world;
      const auto now = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(now - window_start).count();
      const double tps = secs > 0 ? static_cast<double>(window_tokens) / secs : 0;
      const double mfu = peak > 0 ? tps * lm.flops_per_token / (peak * rk.world) : NAN;
      if (rk.leader()) {
        char extra[160] = "";
        int off = 0;
        if (amp::properties().opt_level != "O0")
          off += std::snprintf(extra + off, sizeof extra - off, " | scale %g", amp::loss_scale(0));
        off += std::snprintf(extra + off, sizeof extra - off, " | skipped %lld", static_cast<long long>(amp::skipped_steps(opt)));
        if (clip > 0) off += std::snprintf(extra + off, sizeof extra - off, " | grad norm %.3f", grad_norm);
        if (std::isfinite(mfu)) std::snprintf(extra + off, sizeof extra - off, " | MFU %.1f%%", 100 * mfu);
        std::printf("step %lld/%lld | loss %.4f | lr %.3g | %.0f tok/s | %.1f ms/step%s\n", static_cast<long long>(done),
                    static_cast<long long>(steps), mean_loss, step_lr, tps,
                    1e3 * secs / static_cast<double>(window_tokens / tokens_per_step), extra);
        std::fflush(stdout);
        log.append({{"step", static_cast<double>(done)},
                    {"tokens", static_cast<double>(done * tokens_per_step)},
                    {"loss", mean_loss},
                    {"lr", step_lr},
                    {"tokens_per_s", tps},
                    {"loss_scale", amp::properties().opt_level == "O0" ? 1.0 : amp::loss_scale(0)},
                    {"skipped", static_cast<double>(amp::skipped_steps(opt))},
                    {"grad_norm", grad_norm}});
      }
      if (!std::isfinite(mean_loss)) diverged(done, "the loss is " + nan_or_inf(mean_loss));
      const int64_t skipped_now = amp::skipped_steps(opt);
      if (skipped_now - skipped_at_window == done - window_first_step) {
        // Every step of the window overflowed: with a static scale that is the scale's doing.
        const bool fixed = !amp::properties().dynamic_loss_scale;
        MPX_ERROR("training stalled: all ", done - window_first_step, " steps up to step ", done,
                  " were skipped for non-finite gradients at loss scale ", amp::loss_scale(0), "; ",
                  fixed ? "the static --loss-scale " + args.str("--loss-scale") +
                              " overflows the gradients: lower it or use --loss-scale dynamic"
                        : "lower --lr (now " + args.str("--lr") + ")",
                  last_checkpoint());
      }
      skipped_at_window = skipped_now;
      window_first_step = done;
      loss_sum = Tensor();
      loss_n = 0;
      window_tokens = 0;
      window_start = std::chrono::steady_clock::now();
    }
    if (done % eval_interval == 0 || done == steps) {
      last_val = eval_checkpoint_sample(done);
      write_chart();
      window_start = std::chrono::steady_clock::now();  // evaluation is not training time
    }
  }
  if (rk.leader() && !export_hf.empty()) {
    save_tensors(models::hf_gpt2_state(*lm.gpt), export_hf, {{"format", "pt"}});
    std::printf("wrote %s (Hugging Face GPT-2 layout)\n", export_hf.c_str());
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (rk.leader()) {
    if (std::isfinite(last_val))
      std::printf("done in %s: validation loss %.4f (perplexity %.2f); checkpoint, metrics and loss.svg in %s\n",
                  format_duration(total).c_str(), last_val, std::exp(last_val), out.c_str());
    else
      std::printf("done in %s: checkpoint, metrics and loss.svg in %s\n", format_duration(total).c_str(), out.c_str());
  }
  return 0;
}

}  // namespace mpx::cli
