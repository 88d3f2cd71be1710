// Shared pieces of the mpx commands: devices, amp flags, data sets by name, subsets, checkpoint metadata helpers.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "tools/cli_args.h"
#include "tools/topk.h"

namespace mpx::cli {

/// The largest --threads (OpenMP's pool; a checkpoint's recorded count is held to it too) and
/// --workers (loader threads) the commands accept: beyond them the OS refuses the threads.
inline constexpr int64_t kMaxThreads = kMaxNumThreads;
inline constexpr int64_t kMaxWorkers = 1024;

/// An Adam beta flag (--beta1, --beta2): a number in [0, 1), else a UsageError.
double beta_flag(const Args& args, const std::string& name);

/// `--device` text ("cpu", "cuda", "cuda:1") to a Device; throws UsageError on a malformed
/// spec and mpx::Error when CUDA is asked for but the build or the machine has none.
Device parse_device(const std::string& spec);

/// Declares the amp flags shared by train and dcgan: --opt-level, --keep-batchnorm-fp32,
/// --loss-scale, --dtype.
void add_amp_flags(Args& args, const std::string& default_level);
/// amp::Options from those flags (validated: bad values are UsageErrors).
amp::Options amp_options(const Args& args, int num_losses);

/// The train and test splits of a data set, ready for a DataLoader, and what a model needs to know.
struct DataSplits {
  std::shared_ptr<const data::Dataset> train, test;
  int64_t channels = 1, image_size = 28, num_classes = 10;
  std::string name;  ///< "fashion-mnist", ...
  std::string root;  ///< where it was read from ("" for synthetic)
  /// The images come as u8 [C,H,W]; a DevicePrefetcher with prefetch_options() scales them to
  /// [0, 1] and normalizes them by these on the training device (empty for synthetic data).
  std::vector<double> mean, std;
  data::PrefetchOptions prefetch_options() const { return data::PrefetchOptions().mean(mean).std(std); }
  /// Class names and every image's class (empty for synthetic data), for the start-up summary.
  std::vector<std::string> classes;
  std::vector<int64_t> train_labels, test_labels;
  /// Image folders only: files passed over for their extension, and the folders themselves
  /// (their unreadable() lists grow while training with --skip-bad-images).
  int64_t ignored_files = 0;
  std::vector<std::shared_ptr<const data::ImageFolder>> folders;
  /// Every unreadable image found so far, as "path: reason" lines.
  std::vector<std::string> unreadable() const;
};

/// How a command wants its images.
enum class DataPurpose {
  Classify,  ///< normalized by the data set's mean/std; train-time augmentation where usual
  Generate,  ///< scaled to [-1, 1] (the DCGAN generator's tanh range), no augmentation
};

/// Opens `name` ("fashion-mnist", "mnist", "cifar10", "imagefolder", "synthetic") at `root`
/// ("" = the default location where there is one). `synthetic` replaces the images with
/// random ones of the same shape. `image_size` is used by imagefolder and synthetic.
/// A missing folder or file is an mpx::Error naming it and saying how to get the data.
/// Image folders are checked up front (every image's header, in parallel); unreadable images are an
/// error naming them unless `skip_bad`, which drops them (and images failing later) with a warning.
/// `gpu_decode`: image folders decode their JPEGs on that CUDA device (nvJPEG), batches arriving there.
DataSplits open_data(const std::string& name, const std::string& root, DataPurpose purpose, bool synthetic,
                     int64_t image_size, uint64_t seed, bool skip_bad = false,
                     std::optional<Device> gpu_decode = std::nullopt);

/// The data set a folder holds, for `mpx train DIR` without --dataset: "imagefolder" for apex's
/// DIR/train + DIR/val class folders, "cifar10" for the binary batches, "mnist"/"fashion-mnist"
/// for IDX files ("" when it cannot tell; the caller keeps its default).
std::string detect_dataset(const std::string& dir);

/// One line naming the classes and how many images each split has of them (the first few
/// classes when there are many), e.g. "10 classes: T-shirt/top 6000/1000, ...".
std::string class_summary(const DataSplits& d, int64_t limit_train, int64_t limit_test);

/// The classifiers among models::model_names() (not DCGAN's networks, not the language models).
std::vector<std::string> classifier_names();
/// Throws UsageError unless `arch` names a classifier of models::create (dcgan's networks and
/// unknown names are refused, with the closest name as a suggestion).
void check_classifier_arch(const std::string& command, const std::string& arch);

/// The first `n` examples of a data set (n <= 0 or >= size: all of it).
std::shared_ptr<const data::Dataset> limit(std::shared_ptr<const data::Dataset> ds, int64_t n);

/// One epoch of `loader`'s batches on `device`, through a DevicePrefetcher with the data set's
/// prefetch_options(). After a mid-epoch resume (first > 0) they are the rest of the very order
/// that epoch had, from batch `first` on. The batches' data come in `layout`.
struct EpochBatches {
  EpochBatches(data::DataLoader& loader, const DataSplits& d, int64_t epoch, int64_t first, Device device,
               MemoryFormat layout = MemoryFormat::Contiguous);
  std::unique_ptr<data::DataLoader> rest;  ///< the loader of the rest of an epoch (first > 0)
  std::unique_ptr<data::DevicePrefetcher> batches;
};

/// Round-trip text of a double for safetensors metadata.
std::string num(double v);
/// A metadata value as a finite number (at least `lo`); throws mpx::Error naming the checkpoint
/// and key when absent, malformed, non-finite or below `lo`.
double meta_num(const Metadata& m, const std::string& key, const std::string& path,
                double lo = -std::numeric_limits<double>::max());
/// A metadata value as an integer in [lo, hi], with the same errors.
int64_t meta_int(const Metadata& m, const std::string& key, const std::string& path, int64_t lo, int64_t hi);
/// The largest epoch, step or count a checkpoint may claim (far beyond any real run).
inline constexpr int64_t kMaxMetaCount = int64_t{1} << 40;
/// A metadata value as text ("" when absent).
std::string meta_str(const Metadata& m, const std::string& key);

/// Optimizer state in/out of a checkpoint: tensors under "<prefix>.<name>", scalars in metadata
/// under "<prefix>.<name>", the optimizer's name under "<prefix>.__name__".
void put_optimizer(const optim::Optimizer& opt, const std::string& prefix, TensorDict& tensors, Metadata& meta);
void get_optimizer(optim::Optimizer& opt, const std::string& prefix, const TensorDict& tensors, const Metadata& meta,
                   const std::string& path);
/// A module's state under "<prefix>.<name>".
void put_module(const nn::Module& m, const std::string& prefix, TensorDict& tensors);
/// Throws mpx::Error with a short summary (StateFit) when the names or shapes do not fit.
void get_module(nn::Module& m, const std::string& prefix, const TensorDict& tensors, const std::string& path);

/// How a state dict fits a module: names in both with equal shapes, in both with other shapes,
/// only in the module, only in the dict.
struct StateFit {
  std::vector<std::string> matched, reshaped, missing, unexpected;
  size_t model_size = 0;
  /// One sentence with the counts and the first three names of each list (all with --verbose).
  std::string summary() const;
};
StateFit fit_state(const nn::Module& m, const std::map<std::string, Tensor>& sd);
/// amp's scaler state and the default generator's (seed, offset) in metadata.
void put_amp_and_rng(Metadata& meta);
void get_amp_and_rng(const Metadata& meta, const std::string& path);

/// Loads a checkpoint, turning every failure into one mpx::Error that names the file and says
/// what to do (the message of a corrupt file, a missing file, or a file of another command).
TensorDict load_checkpoint(const std::string& path, const std::string& kind, Metadata& meta);

/// Where a checkpoint stopped, in steps of `steps_per_epoch` (an epoch that was finished moves
/// on to the next one).
struct ResumePoint {
  int64_t epoch = 0, step = 0, global_step = 0;
};
/// Restores a checkpoint: `load` puts its modules and optimizers back, then the amp state and the
/// RNG follow. Any mismatch becomes one error naming the file and what to do.
/// `keep_finished_epoch`: a checkpoint at the last step of an epoch (trained, not yet evaluated)
/// stays in that epoch instead of moving on.
ResumePoint restore_checkpoint(const Metadata& meta, const std::string& path, int64_t steps_per_epoch,
                               const std::function<void()>& load, bool keep_finished_epoch = false);

/// False, after saying so, when a resumed run's checkpoint already finished every epoch.
bool epochs_left(int64_t start_epoch, int64_t epochs);

/// The start of a command that can resume (train, dcgan): parses the command line, turns a
/// positional DATA_DIR into --data, and with --resume loads the checkpoint (into `ck`/`meta`) and
/// makes its run flags the defaults. A run flag given again with another value is warned about,
/// since the continuation then differs from an uninterrupted run, unless it is in `free_flags`.
/// Returns false when the parse printed help (the command should exit 0).
bool parse_resumable(Args& args, int argc, char** argv, const std::string& command,
                     const std::vector<std::string>& run_flags, const std::vector<std::string>& free_flags,
                     Metadata& meta, TensorDict& ck);

/// Makes the first Ctrl-C (SIGINT) or SIGTERM (what `timeout` and job schedulers send) only set a
/// flag, so the training loop can checkpoint and stop cleanly; a second one ends the process.
void install_interrupt_handler();
/// True once SIGINT or SIGTERM arrived.
bool interrupted();
/// The exit code for the signal that arrived: 130 for SIGINT, 143 for SIGTERM (128 + signal).
int interrupt_exit_code();
/// "Ctrl-C" or "SIGTERM".
std::string interrupt_name();

/// The training-step cap of train, dcgan and gpt: --prof N when given, else the environment's
/// MPX_MAX_STEPS (tests/docs/run_doc_commands.sh sets it so that every documented command trains
/// only a few steps), else -1 (off). A malformed MPX_MAX_STEPS is a UsageError; a cap taken from it
/// is announced on stderr by rank 0, so a run that stops early says why.
int64_t prof_steps(const Args& args, const std::string& command);

/// When set, mismatch summaries list every name (--verbose).
void set_verbose(bool v);
bool verbose();

/// Throws mpx::Error naming `path` and the first offending tensor when a float tensor under
/// `prefix` holds NaN or infinity (a damaged file, or a run that had diverged).
void check_finite(const TensorDict& tensors, const std::string& prefix, const std::string& path);

/// "12.3 MB"-style size of a file, for messages.
std::string human_bytes(double bytes);
/// What an announce line adds after the opt level and dtype when amp runs without master
/// weights at O2 or with stochastic rounding (" (no masters, stochastic rounding)"); "" otherwise.
std::string amp_recipe_note();

}  // namespace mpx::cli
