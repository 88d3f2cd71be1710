// The mpx subcommands, each taking the arguments after its name; they return the exit code.
#pragma once

namespace mpx::cli {

/// `mpx train`: classification training (apex's imagenet main_amp.py flags). See docs/cli.md.
int run_train(int argc, char** argv);
/// `mpx dcgan`: DCGAN with two optimizers and three loss scalers (apex's DCGAN example).
int run_dcgan(int argc, char** argv);
/// `mpx gpt`: language-model training (GPT-2 family, LSTM) on text or token shards, sampling and generation.
int run_gpt(int argc, char** argv);
/// Whether `mpx train`'s arguments name a language model (-a/--arch gpt-tiny, gpt2, ..., lstm-lm).
bool names_language_model(int argc, char** argv);
/// `mpx train -a gpt2 ...`: `mpx gpt` with train's spelling of the data (`--dataset text:FILE|tokens:GLOB`).
int run_train_language_model(int argc, char** argv);
/// `mpx bench`: O0-O3 speed (and PyTorch peer) or accuracy tables with CSV/JSON/Markdown/SVG output.
int run_bench(int argc, char** argv);
/// `mpx info`: version, build options, CPU features and CUDA devices.
int run_info(int argc, char** argv);

}  // namespace mpx::cli
