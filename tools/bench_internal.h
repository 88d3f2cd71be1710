// Declarations shared by the files of `mpx bench`: levels and variants, the PyTorch peer runner, the two modes.
#pragma once
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tools/common.h"
#include "tools/metrics.h"

namespace mpx::cli::bench {

/// O3 with keep_batchnorm_fp32=True, apex's fastest ImageNet recipe, as a level of its own.
inline constexpr const char* kO3BnF32 = "O3-bnf32";
/// Beyond apex, without master weights: O2 rounding the updates to nearest or stochastically,
/// O3 stochastically (amp::Options::stochastic_rounding).
inline const std::vector<std::string> kLevels = {"O0", "O1", "O2", "O3", kO3BnF32, "O2-nomasters", "O2-sr", "O3-sr"};
/// The amp options of a level of kLevels in the low precision `low`.
amp::Options level_options(const std::string& level, DType low, int num_losses);
/// `mpx train`'s amp flags for a level of kLevels (the accuracy mode).
std::vector<std::string> level_train_flags(const std::string& level);
/// Whether the PyTorch peer has a recipe for the level (it has none without masters).
bool peer_level(const std::string& level);
/// The peer status of rows of a level it has no recipe for.
inline constexpr const char* kNoPeerRecipe = "no recipe in the peer: torch.optim has no stochastic rounding";

/// One (level, dtype) pair to run: O0 runs once in f32 whatever --dtype says.
struct Variant {
  std::string level, dtype;
};
std::vector<Variant> variants(const std::vector<std::string>& levels, const std::vector<std::string>& dtypes);

/// A comma-separated flag value; an empty item is a UsageError.
std::vector<std::string> split_list(const std::string& flag, const std::string& s);
/// Every item must be one of `known`; a typo gets a suggestion.
void check_items(const std::string& flag, const std::vector<std::string>& items, const std::vector<std::string>& known);
/// The models a flag may name: every architecture, less the DCGAN halves (speed mode adds "dcgan").
int64_t count_params(const nn::Module& m);
/// The command line as given, for the output files' provenance.
const std::string& command_line();

/// What one speed row runs: device, batch, timing windows, input side, graph/layout/profile.
struct SpeedConfig {
  Device device;
  int64_t batch = 32, steps = 3, warmup = 1, windows = 3, image_size = 28;
  /// Sequences per step of the GPT rows (a sequence is far more work than a small image).
  int64_t gpt_batch = 16;
  bool graph = false, channels_last = false, profile = false, tf32 = false;
  uint64_t seed = 0;
};

/// What one speed row measured. Rates are samples/s: images (classifiers, DCGAN) or sequences of
/// `seq_len` tokens (GPT rows).
struct SpeedResult {
  std::vector<double> window_ips;
  double step_ms = NAN, peak_mib = NAN, loss_scale = NAN, final_loss = NAN;
  double state_bytes = NAN;  ///< weights, f32 masters and optimizer state per parameter element
  double skipped = NAN;
  int64_t params = 0;
  int64_t batch = 0;    ///< samples per step (set by time_windows)
  int64_t seq_len = 0;  ///< tokens per sample; 0 for images
  std::string profile;  // per-op table of one extra window (--profile)
};

/// Peak bytes in live tensors during a row's timed steps (after warm-up, so setup transients
/// such as amp::initialize's copies do not count), everything the row keeps included: on CUDA
/// the absolute peak (as torch.cuda.max_memory_allocated), on the CPU the peak over what was
/// live before the row began. Create it before the row builds anything.
struct MemProbe {
  Device dev;
  int64_t base = 0;
  explicit MemProbe(Device d);
  void restart() const;
  double peak_mib() const;
};

/// Warm-up, then `c.windows` windows of `c.steps` steps, each timed to the device's completion;
/// fills `r`'s rates (c.batch samples per step), step time, batch and the timed windows' peak memory.
void time_windows(const SpeedConfig& c, const std::function<void()>& step, const MemProbe& mem, SpeedResult& r);
/// amp's options for a row's level and dtype (O3-bnf32: O3 with keep_batchnorm_fp32).
amp::Options level_options(const Variant& v, int num_losses);
/// Bytes per parameter element of the weights, their f32 masters and the optimizers' state
/// (gradients, which every level has, not counted).
double state_bytes_per_element(const std::vector<optim::Optimizer*>& opts);

/// Whether `model` names a GPT-2 preset (models::GPTConfig::presets()), which speed mode runs as a GPT row.
bool is_gpt(const std::string& model);
/// One GPT row: `model` on random token ids from c.seed, AdamW as mpx gpt, cross-entropy in f32,
/// c.gpt_batch sequences of n_ctx tokens per step. With `init_path` set, first writes the initial
/// f32 weights and the token batch ("bench.tokens", [batch, n_ctx + 1]) there for the peer.
SpeedResult bench_gpt(const std::string& model, const Variant& v, const SpeedConfig& c, const std::string& init_path);

/// What the PyTorch peer reported for one speed row.
struct PeerRow {
  double ips = NAN, ips_min = NAN, ips_max = NAN, step_ms = NAN, peak_mib = NAN, final_loss = NAN;
  int64_t params = 0;
  std::string status = "not run";
};
/// What the PyTorch peer reported for one accuracy row (the same recipe, PyTorch's own random numbers).
struct PeerAccuracy {
  double top1 = NAN, best = NAN, train_loss = NAN, test_loss = NAN, wall_s = NAN, ips = NAN;
  int64_t params = 0;
  std::string status = "not run";
};

std::string shell_quote(const std::string& s);
/// Runs the peer script once for the given speed rows (eager, or through torch.compile), keyed
/// model/level/dtype; sets `failure` when the peer could not run or reported nothing. Without
/// `echo` the script's own output is shown only when it fails.
std::map<std::string, PeerRow> run_peer(const Args& args, const std::vector<std::string>& models,
                                        const std::vector<std::string>& levels, const std::vector<std::string>& dtypes,
                                        const SpeedConfig& c, int threads, bool compiled, std::string& failure,
                                        bool echo = true);
/// Runs the peer script's accuracy mode once for all rows with mpx train's hyper-parameters.
std::map<std::string, PeerAccuracy> run_peer_accuracy(const Args& args, const std::vector<std::string>& models,
                                                      const std::vector<std::string>& levels,
                                                      const std::vector<std::string>& dtypes, int64_t epochs,
                                                      int64_t batch, int threads, std::string& failure);

/// Runs the peer script's accuracy mode for GPT presets on the MODEL_accuracy.safetensors files
/// in --out (weights, windows and recipe written by run_gpt_accuracy).
std::map<std::string, PeerAccuracy> run_peer_gpt_accuracy(const Args& args, const std::vector<std::string>& models,
                                                          const std::vector<std::string>& levels,
                                                          const std::vector<std::string>& dtypes, int threads,
                                                          std::string& failure);
/// The peer's accuracy row for model/level/dtype, or one whose status says why there is none.
PeerAccuracy peer_accuracy_row(const std::map<std::string, PeerAccuracy>& rows, const std::string& model,
                               const Variant& v, const std::string& failure);
/// "n/a [k]" for a peer cell, numbering each distinct reason once in `notes` (printed under the table).
std::string na_note(std::vector<std::string>& notes, const std::string& why);
/// accuracy.md (`head`, the table, the numbered peer notes) and accuracy.svg in `out`, then the closing line.
void write_accuracy_files(const std::filesystem::path& out, const std::string& head, const Table& t,
                          const std::vector<std::string>& notes, const std::string& title,
                          const std::vector<Panel>& panels);
/// The speed table (images/s or, for GPT rows, tokens/s; memory, loss scale, ratios to O0 and PyTorch).
int run_speed(const Args& args);
/// The accuracy table: each level trained by mpx train from the same seed.
int run_accuracy(const Args& args);
/// The accuracy table of GPT presets: each level trained by mpx gpt on the same text, weights and
/// windows (--gpt-steps steps), validation loss against O0's and the peer's.
int run_gpt_accuracy(const Args& args, const std::vector<std::string>& models, const std::vector<std::string>& levels,
                     const std::vector<std::string>& dtypes);

}  // namespace mpx::cli::bench
