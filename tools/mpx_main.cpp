// The mpx command line's entry point: dispatches to train, dcgan, gpt, bench and info and turns every failure into a one-line error.
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/ranks.h"
#include "tools/threads.h"

namespace {

int usage(FILE* to) {
  std::fprintf(to,
               "usage: mpx <command> [flags]   (mpx <command> --help for its flags; mpx --version; docs/cli.md)\n"
               "  train   train a classifier (apex's imagenet main_amp.py flags); default: small CNN on Fashion-MNIST\n"
               "  dcgan   train a DCGAN with three loss scalers; writes sample grids as PNG\n"
               "  gpt     train a GPT-2 or LSTM language model on text or token shards; sample and generate text\n"
               "  info    version, build options, CPU features, CUDA devices\n"
               "  bench   O0-O3 speed/memory table (with a PyTorch peer) or accuracy table; CSV, JSON, Markdown, SVG\n");
  return to == stderr ? 2 : 0;
}

// Usage errors carry their command's prefix ("mpx train: ...") or none; either way one is printed.
std::string usage_line(const std::string& cmd, const std::string& msg) {
  const std::string prefix = "mpx " + cmd + ":";
  if (msg.rfind("mpx ", 0) == 0) return msg;
  return prefix + " " + msg;
}

// Library messages may span lines (e.g. a list of names); the CLI promises one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// An allocator's out-of-memory names bytes, not the flags that asked for them: the command's flags that size memory.
std::string with_memory_hint(const std::string& cmd, std::string msg) {
  if (msg.find("out of memory") == std::string::npos || msg.find("; lower --") != std::string::npos) return msg;
  if (cmd == "gpt")
    return msg + "; lower --batch-size or --context (--grad-accum keeps the tokens per step), add "
                 "--checkpoint-activations, or choose a smaller --arch";
  if (cmd == "train") return msg + "; lower --batch-size or --image-size, or choose a smaller --arch";
  if (cmd == "dcgan") return msg + "; lower --batch-size, --image-size, --ngf or --ndf";
  if (cmd == "bench") return msg + "; lower --batch or --image-size, or bench fewer --models at once";
  return msg;
}

// With several ranks every one may fail, each for its own reason: the line says which it was.
std::string rank_tag() {
  const mpx::cli::Ranks& r = mpx::cli::ranks();
  return r.distributed() ? "[rank " + std::to_string(r.rank) + "/" + std::to_string(r.world) + "] " : "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string cmd = argv[1];
  // Training shares machines; bench times a machine it has to itself (and its PyTorch peer
  // would inherit the policy), so it keeps OpenMP's default.
  if (cmd == "train" || cmd == "dcgan" || cmd == "gpt") mpx::cli::prefer_passive_openmp(argv);
  if (cmd == "--version" || cmd == "version") {
    std::printf("mpx %s\n", MPX_VERSION_STRING);
    return 0;
  }
  try {
    // `--nproc-per-node N` re-runs this very command line under mpirun (torchrun's convenience).
    if (cmd == "train" || cmd == "dcgan" || cmd == "gpt") mpx::cli::relaunch_under_mpirun(cmd, argc, argv);
    if (cmd == "train" && mpx::cli::names_language_model(argc - 2, argv + 2))
      return mpx::cli::run_train_language_model(argc - 2, argv + 2);
    if (cmd == "train") return mpx::cli::run_train(argc - 2, argv + 2);
    if (cmd == "dcgan") return mpx::cli::run_dcgan(argc - 2, argv + 2);
    if (cmd == "gpt") return mpx::cli::run_gpt(argc - 2, argv + 2);
    if (cmd == "info") return mpx::cli::run_info(argc - 2, argv + 2);
    if (cmd == "-h" || cmd == "--help" || cmd == "help") return usage(stdout);
    if (cmd == "bench") return mpx::cli::run_bench(argc - 2, argv + 2);
    const std::string near = mpx::cli::closest(cmd, {"train", "dcgan", "gpt", "info", "bench", "help"});
    std::fprintf(stderr, "mpx: unknown command '%s'%s; run mpx --help\n", cmd.c_str(),
                 near.empty() ? "" : (" (did you mean " + near + "?)").c_str());
    return 2;
  } catch (const mpx::cli::UsageError& e) {
    std::fflush(stdout);  // what the run printed comes before its error, also when both go to one file
    std::fprintf(stderr, "%s%s\n", rank_tag().c_str(), one_line(usage_line(cmd, e.what())).c_str());
    return mpx::cli::end_failed_rank(2);
  } catch (const std::filesystem::filesystem_error& e) {
    std::fflush(stdout);
    // The library names most paths itself; this is the net under whatever a folder walk still throws.
    std::string path = e.path1().string();
    const bool denied = e.code() == std::errc::permission_denied;
    std::fprintf(stderr, "%smpx: error: cannot access %s: %s%s\n", rank_tag().c_str(), path.empty() ? "a file" : path.c_str(),
                 e.code().message().c_str(), denied ? "; check its permissions and those of the folders above it" : "");
    return mpx::cli::end_failed_rank(1);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%smpx: error: %s\n", rank_tag().c_str(), one_line(with_memory_hint(cmd, e.what())).c_str());
    return mpx::cli::end_failed_rank(1);
  } catch (...) {
    std::fflush(stdout);
    std::fprintf(stderr, "%smpx: error: unknown failure\n", rank_tag().c_str());
    return mpx::cli::end_failed_rank(1);
  }
}
