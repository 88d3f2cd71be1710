// `mpx bench`: its flags, shared helpers and the choice between the speed and accuracy modes.

#include <algorithm>

#include "tools/bench_internal.h"
#include "tools/commands.h"

namespace mpx::cli {
namespace bench {
namespace {

std::string g_cmdline;

Args make_args() {
  Args a("mpx bench", "mpx bench [--accuracy] [flags]");
  a.option({"--models"}, "LIST",
           "comma-separated models: resnet18/34/50/101/152, resnet20, vgg11..vgg19[_bn], alexnet, small_cnn, dcgan, "
           "the GPT presets gpt-tiny, gpt-mini, gpt2[-medium|-large|-xl] and the LSTM language model lstm-lm (speed: "
           "tokens/s; accuracy: validation loss after --gpt-steps, in a run of their own) "
           "(default: resnet18,dcgan on the CPU, resnet18,resnet50,vgg16,dcgan on CUDA; accuracy: small_cnn)")
      .option({"--opt-levels"}, "LIST",
              "comma-separated apex opt levels; O3-bnf32 is O3 with keep_batchnorm_fp32=True (apex's fastest recipe); "
              "without master weights: O2-nomasters (rounded to nearest), O2-sr and O3-sr (stochastic rounding) "
              "(default: O0,O1,O2,O3; on CUDA also O3-bnf32)")
      .option({"--dtype"}, "LIST", "low precision(s) of O1-O3: f16, bf16 or f16,bf16 (O0 always runs f32 once)", "f16")
      .option({"--device"}, "cpu|cuda[:i]", "where to run", "cpu")
      .option({"--batch", "-b"}, "N", "images (GPT rows: sequences) per step (default: 32 on the CPU, 128 on CUDA; GPT rows 16 "
                                      "on the CPU, 8 on CUDA; accuracy: 128)")
      .option({"--steps"}, "N", "timed steps per window (default: 3 on the CPU, 10 on CUDA)")
      .option({"--warmup"}, "N", "untimed steps before the windows (default: 1 on the CPU, 5 on CUDA)")
      .option({"--windows"}, "N", "timed windows; images/s is their median, the spread their min-max", "3")
      .option({"--rounds"}, "N", "with --peer: run every row N times, each time mpx then PyTorch, and report medians "
                                 "over the rounds (mpx/PyTorch: the median of the rounds' ratios and their range)", "1")
      .option({"--image-size"}, "N", "input side (default: 28 with --small-input or on the CPU, else 224 and 64 for dcgan)")
      .flag({"--small-input"}, "28x28 one-channel inputs and the models' small-input variants (default on the CPU)")
      .flag({"--cuda-graph"}, "capture one training step as a CUDA graph and time its replays (CUDA only)")
      .flag({"--tf32"}, "CUDA: f32 convolutions and matrix products on TF32 Tensor Cores (O0 and f32 layers; mpx keeps "
                        "f32 exact by default, PyTorch's convolutions use TF32 by default); the peer follows")
      .flag({"--profile"}, "after the timed windows, one more window under mpx::profiler: per-op kernel time per row "
                           "(printed and written to profile.md)")
      .option({"--channels-last"}, "on|off",
              "models and inputs in channels-last (NHWC) layout, as Tensor Cores want (default: on for CUDA, off on "
              "the CPU; the peer follows)")
      .option({"--out"}, "DIR", "where bench.csv/.json/.md/.svg (or accuracy.*) go; with --peer also each GPT's "
                                  "MODEL_init.safetensors (its initial weights and batch, which the peer loads)", "out/bench")
      .option({"--seed"}, "N", "seed of the weights and the synthetic data (the same for every level)", "0")
      .option({"--threads"}, "N", "CPU threads (OpenMP; the peer gets the same); default: OMP_NUM_THREADS or all cores")
      .flag({"--peer"}, "also run bench/peer_bench.py (PyTorch) on the same rows: speed mode adds mpx/PyTorch ratios, "
            "accuracy mode PyTorch's top-1 and loss with the same recipe")
      .flag({"--peer-compile"}, "speed mode: with --peer, also time PyTorch through torch.compile (PyTorch 2) and add "
            "its columns")
      .option({"--python"}, "PATH", "the python that runs the peer (it needs torch)", "python3")
      .option({"--peer-script"}, "PATH", "the peer script", MPX_PEER_SCRIPT)
      .flag({"--accuracy"}, "accuracy mode: train each level with mpx train from the same seed and compare")
      .option({"--epochs"}, "N", "accuracy mode: epochs per level", "8")
      .option({"--gpt-steps"}, "N", "accuracy mode, GPT presets: mpx gpt steps per level (validation every third)",
              "300")
      .option({"--dataset"}, "NAME", "accuracy mode: fashion-mnist, mnist, cifar10, imagefolder or synthetic",
              "fashion-mnist")
      .option({"--data"}, "DIR", "accuracy mode: the data set's folder (as mpx train --data); GPT presets: a text file "
                                 "(as mpx gpt --text; default: its corpus)")
      .option({"--lr"}, "X", "accuracy mode: base learning rate (as mpx train --lr; GPT presets: mpx gpt's peak lr, "
                             "default 0.001)", "0.1")
      .option({"--limit-train"}, "N", "accuracy mode: use only the first N training images; 0 = all", "0")
      .option({"--limit-test"}, "N", "accuracy mode: use only the first N test images; 0 = all", "0");
  return a;
}

}  // namespace

const std::string& command_line() { return g_cmdline; }

std::vector<std::string> split_list(const std::string& flag, const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (cur.empty()) throw UsageError(flag + " expects a comma-separated list without empty items, got '" + s + "'");
      out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  return out;
}

void check_items(const std::string& flag, const std::vector<std::string>& items, const std::vector<std::string>& known) {
  for (auto it0 = items.begin(); it0 != items.end(); ++it0) {
    const std::string& it = *it0;
    if (std::find(items.begin(), it0, it) != it0) throw UsageError(flag + ": '" + it + "' is listed twice");
    if (std::find(known.begin(), known.end(), it) != known.end()) continue;
    const std::string near = closest(it, known);
    std::string all;
    for (const auto& k : known) all += (all.empty() ? "" : ",") + k;
    throw UsageError(flag + ": unknown item '" + it + "'" + (near.empty() ? "" : " (did you mean " + near + "?)") +
                     "; choose from " + all);
  }
}

amp::Options level_options(const std::string& level, DType low, int num_losses) {
  const std::string apex = level.substr(0, 2);  // O0..O3
  auto o = amp::Options().opt_level(apex).dtype(low).num_losses(num_losses).verbosity(0);
  if (level == kO3BnF32) o.keep_batchnorm_fp32(true);
  if (level == "O2-nomasters" || level == "O2-sr") o.master_weights(false);
  if (level == "O2-sr" || level == "O3-sr") o.stochastic_rounding(true);
  return o;
}

std::vector<std::string> level_train_flags(const std::string& level) {
  std::vector<std::string> f = {"--opt-level", level.substr(0, 2)};
  if (level == kO3BnF32) f.insert(f.end(), {"--keep-batchnorm-fp32", "True"});
  if (level == "O2-nomasters" || level == "O2-sr") f.insert(f.end(), {"--master-weights", "False"});
  if (level == "O2-sr" || level == "O3-sr") f.push_back("--stochastic-rounding");
  return f;
}

bool peer_level(const std::string& level) { return level.size() == 2 || level == kO3BnF32; }

std::vector<Variant> variants(const std::vector<std::string>& levels, const std::vector<std::string>& dtypes) {
  std::vector<Variant> v;
  for (const auto& l : levels) {
    if (l == "O0") {
      v.push_back({"O0", "f32"});
      continue;
    }
    for (const auto& d : dtypes) v.push_back({l, d});
  }
  return v;
}


int64_t count_params(const nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace bench

int run_bench(int argc, char** argv) {
  using namespace bench;
  Args args = bench::make_args();
  if (!args.parse(argc, argv)) return 0;
  bench::g_cmdline = "mpx bench";
  for (int i = 0; i < argc; ++i) bench::g_cmdline += std::string(" ") + argv[i];
  if (args.given("--threads")) mpx::set_num_threads(static_cast<int>(args.integer("--threads", 1, kMaxThreads)));
  const bool accuracy = args.on("--accuracy");
  if (!accuracy) {
    for (const char* f : {"--epochs", "--gpt-steps", "--dataset", "--data", "--lr", "--limit-train", "--limit-test"})
      if (args.given(f)) throw UsageError(std::string(f) + " belongs to the accuracy mode; add --accuracy or drop it");
    return run_speed(args);
  }
  for (const char* f : {"--steps", "--warmup", "--windows", "--rounds", "--small-input", "--profile", "--channels-last", "--tf32"})
    if (args.given(f)) throw UsageError(std::string(f) + " belongs to the speed mode; drop it with --accuracy");
  return run_accuracy(args);
}

}  // namespace mpx::cli

