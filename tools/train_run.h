// One `mpx train` run as an object: its settings, data, model and position, and the named steps train_main takes.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/common.h"
#include "tools/metrics.h"
#include "tools/ranks.h"
#include "tools/threads.h"
#include "tools/train.h"
#include "tools/train_parts.h"

namespace mpx::cli {

/// The learning rate at a global step, in closed form so a resumed run computes exactly what an
/// uninterrupted one would (the schedule's whole state is the step counter).
double lr_at(const std::string& schedule, double base, int64_t step, int64_t steps_per_epoch, int64_t epochs);

/// `mpx train` from flags to the final summary. train_main calls the steps in order; each reads
/// what the ones before it set. The members are the run's state.
class TrainRun {
 public:
  explicit TrainRun(TrainSummary* summary) : summary_(summary) {}
  /// Parses the flags (adopting a resumed checkpoint's run flags), claims --out and fixes the
  /// thread count. False when --help was printed.
  bool parse(int argc, char** argv);
  /// Opens the data set and makes this rank's loaders (a DistributedSampler shard when several ranks run).
  void open_data();
  /// Creates the model and optimizer, applies amp (and --sync-bn), restores --resume, and wraps
  /// the model in DistributedDataParallel when several ranks run (after amp, as apex does).
  void build_model();
  /// Prints the run's one-line description (rank 0).
  void announce();
  /// --evaluate: one pass over the test split. Returns the exit code.
  int evaluate_only();
  /// Trains the remaining epochs and prints the summary. Returns the exit code.
  int train();
  bool evaluate_only_requested() const { return evaluate_only_; }

 private:
  // One epoch's running sums (on the training device until shown) and position.
  struct EpochState {
    int64_t epoch = 0, first = 0, step = 0, skipped_at_start = 0;
    int64_t nonfinite_host = 0;  // non-finite losses counted on the host (CPU runs check each step)
    Tensor loss_sum, hits, nonfinite;
    double seen = 0, prior_seconds = 0;
    std::vector<std::pair<double, Tensor>> step_losses;  // (epoch position, loss) for the summary
    data::LoaderStats loader;  // how the training loader kept up (this rank's)
  };
  /// --gpu-decode's requirements (--device cuda, imagefolder, nvJPEG in the build); UsageError otherwise.
  void check_gpu_decode();
  DataSplits open_data_splits();
  void restore();
  void resume_other_world(int64_t ck_world, int64_t ck_batch, int64_t ck_spe);
  void report_bad();
  void save_checkpoint(int64_t epoch_done, int64_t step_in_epoch, double loss_sum, double hits, double seen,
                       double seconds);
  /// Checkpoints the position inside an epoch; every rank calls it (the sums are reduced).
  void save_position(const EpochState& st, int64_t at, double seconds);
  /// Trains one epoch; returns an exit code when the run ends inside it.
  std::optional<int> train_epoch(int64_t epoch);
  /// Evaluates, logs and checkpoints a trained epoch; returns an exit code when the run ends there.
  std::optional<int> end_epoch(EpochState& st, double train_seconds);
  int stop_message(int64_t epoch, int64_t step) const;
  EvalResult evaluate_model();
  int64_t skipped() const;
  bool stop_requested() const;
  std::string stopped_note() const;
  [[noreturn]] void diverged(int64_t epoch, int64_t step, double loss, bool exact) const;
  void check_alive(int64_t epoch, int64_t steps_run, int64_t skipped_run, int64_t nonfinite_losses) const;
  void finish();

  TrainSummary* summary_;
  Args args_{"", ""};
  Metadata ck_meta_;
  TensorDict ck_;
  Ranks ranks_;
  // settings
  std::string resume_, pretrained_, detected_, dataset_, schedule_, out_, run_id_, ck_path_, arch_, level_;
  int64_t batch_ = 1, workers_ = 0, epochs_ = 1, print_freq_ = 1, prof_ = -1, limit_train_ = 0, limit_test_ = 0;
  int64_t image_size_ = 0, start_epoch_flag_ = -1;
  double base_lr_flag_ = 0, momentum_ = 0, wd_ = 0, base_lr_ = 0;
  uint64_t seed_ = 0;
  bool evaluate_only_ = false, deterministic_ = false, synthetic_ = false, skip_bad_ = false, sync_bn_ = false;
  bool gpu_decode_ = false;
  MemoryFormat layout_ = MemoryFormat::Contiguous;
  amp::Options amp_opts_;
  Device device_ = Device::cpu();
  int threads_ = 1;
  std::unique_ptr<ThreadTuner> tuner_;
  // data
  DataSplits d_;
  std::unique_ptr<data::DataLoader> train_loader_, test_loader_;
  std::unique_ptr<data::DevicePrefetcher> test_batches_;
  int64_t steps_per_epoch_ = 0;
  // model: `net_` is the model itself (checkpointed, evaluated); `model_` is what training calls,
  // the DistributedDataParallel wrapper when several ranks run.
  nn::AnyModule net_, model_;
  std::unique_ptr<optim::SGD> opt_;
  // position
  int64_t start_epoch_ = 0, start_step_ = 0, global_step_ = 0, skipped_before_ = 0, iterations_ = 0;
  double carried_loss_ = 0, carried_hits_ = 0, carried_seen_ = 0, carried_seconds_ = 0;
  // outputs
  std::string bad_list_, last_saved_;
  size_t bad_reported_ = 0;
  std::unique_ptr<MetricsLog> log_;
  double best_top1_ = -1;
  int64_t best_epoch_ = 0;
  bool tty_ = false, check_each_step_ = true;
  std::chrono::steady_clock::time_point run_start_;
};

}  // namespace mpx::cli
