// The mpx command line's entry point: dispatches to train, dcgan, bench and info and turns every failure into a one-line error.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace {

int usage(FILE* to) {
  std::fprintf(to,
               "usage: mpx <command> [flags]   (mpx <command> --help for its flags; docs/cli.md)\n"
               "  train   train a classifier (apex's imagenet main_amp.py flags); default: small CNN on Fashion-MNIST\n"
               "  dcgan   train a DCGAN with three loss scalers; writes sample grids as PNG\n"
               "  info    version, build options, CPU features, CUDA devices\n"
               "  bench   O0-O3 speed/memory table (with a PyTorch peer) or accuracy table; CSV, JSON, Markdown, SVG\n");
  return to == stderr ? 2 : 0;
}

// Library messages may span lines (e.g. a list of names); the CLI promises one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string cmd = argv[1];
  try {
    if (cmd == "train") return mpx::cli::run_train(argc - 2, argv + 2);
    if (cmd == "dcgan") return mpx::cli::run_dcgan(argc - 2, argv + 2);
    if (cmd == "info") return mpx::cli::run_info(argc - 2, argv + 2);
    if (cmd == "-h" || cmd == "--help" || cmd == "help") return usage(stdout);
    if (cmd == "bench") return mpx::cli::run_bench(argc - 2, argv + 2);
    const std::string near = mpx::cli::closest(cmd, {"train", "dcgan", "info", "bench", "help"});
    std::fprintf(stderr, "mpx: unknown command '%s'%s; run mpx --help\n", cmd.c_str(),
                 near.empty() ? "" : (" (did you mean " + near + "?)").c_str());
    return 2;
  } catch (const mpx::cli::UsageError& e) {
    std::fprintf(stderr, "mpx: %s\n", one_line(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpx: error: %s\n", one_line(e.what()).c_str());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "mpx: error: unknown failure\n");
    return 1;
  }
}
