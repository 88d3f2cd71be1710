// `mpx train`'s training loop: epochs, steps, checks for divergence, evaluation, metrics and checkpoints.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "tools/progress.h"
#include "tools/run_dir.h"
#include "tools/train_run.h"

namespace mpx::cli {

namespace fs = std::filesystem;
namespace F = nn::functional;

namespace {
std::string two_decimals(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}
}  // namespace

int64_t TrainRun::skipped() const { return skipped_before_ + amp::skipped_steps(*opt_); }

// A signal reaches the ranks at slightly different steps; they stop together at the first step
// where any of them has seen it (one tiny all-reduce per step), so their collectives stay paired.
bool TrainRun::stop_requested() const { return ranks_.distributed() ? any_rank(interrupted()) : interrupted(); }

std::string TrainRun::stopped_note() const {
  return last_saved_.empty() ? std::string("no checkpoint of this run was written before")
                             : "the last good checkpoint is kept (" + last_saved_ + ")";
}

void TrainRun::diverged(int64_t epoch, int64_t step, double loss, bool exact) const {
  // The weights went non-finite through a step that was taken: the step was too large.
  MPX_ERROR("training diverged ", exact ? "at" : "by", " epoch ", epoch + 1, " step ", step, ": the loss is ",
            std::isnan(loss) ? std::fabs(loss) : loss,  // a NaN's sign bit is noise: "nan", never "-nan"
            " and the optimizer step was not skipped", level_ == "O0" ? " (O0 has no loss scaler)" : "",
            ", so the weights are no longer valid; ", stopped_note(), "; lower --lr (now ", base_lr_flag_, ")");
}

// A run whose every step is skipped, or whose weights went non-finite through a step that was
// taken, trains nothing any more: it stops the same way instead of reporting chance accuracy.
void TrainRun::check_alive(int64_t epoch, int64_t steps_run, int64_t skipped_run, int64_t nonfinite_losses) const {
  if (steps_run > 0 && skipped_run == steps_run) {
    const amp::Properties& p = amp::properties();
    const double scale = amp::loss_scale(0);
    if (nonfinite_losses < steps_run && !p.dynamic_loss_scale && scale > 1)
      // The losses were finite and the weights never changed (every step was skipped), so
      // neither they nor the learning rate overflowed: the static scale did.
      MPX_ERROR("training stopped in epoch ", epoch + 1, ": all ", steps_run, " of its steps were skipped because "
                "their gradients overflowed under the static loss scale ", scale, " (--loss-scale); ", stopped_note(),
                "; lower --loss-scale (the scaled gradients must stay finite in ", args_.str("--dtype"),
                ") or use --loss-scale dynamic, which finds a scale that fits");
    const bool f16 = args_.str("--dtype") == "f16", loss_finite = nonfinite_losses < steps_run;
    // Steps this run took before the epoch: only they (or a resumed run's) can have spoiled the weights.
    const int64_t taken_before = (iterations_ - steps_run) - (amp::skipped_steps(*opt_) - skipped_run);
    if (taken_before <= 0 && resume_.empty())
      MPX_ERROR("training stopped in epoch ", epoch + 1, ": all ", steps_run, " of its steps were skipped for "
                "non-finite gradients (", p.dynamic_loss_scale ? "the dynamic loss scale fell to " : "loss scale ",
                scale, ") before any step changed the ", pretrained_.empty() ? "initial" : "--pretrained", " weights; ",
                stopped_note(), loss_finite
                    ? (f16 ? "; the gradients overflow f16: train in bf16 (--dtype bf16), whose range is f32's"
                           : "; the gradients overflow even unscaled: use --opt-level O0 (f32)")
                    : "; the loss was never finite, so the data or those weights hold values the model overflows "
                      "on: check them");
    MPX_ERROR("training diverged in epoch ", epoch + 1, ": all ", steps_run, " of its steps were skipped for "
              "non-finite gradients (", p.dynamic_loss_scale ? "the dynamic loss scale fell to " : "loss scale ", scale,
              ") after earlier steps had changed the weights; ", stopped_note(), "; lower --lr (now ", base_lr_flag_,
              ")", f16 && loss_finite ? ", or train in bf16 (--dtype bf16), whose range is f32's" : "");
  }
  for (const auto& [name, prm] : net_.ptr()->named_parameters()) {
    const Tensor f = prm.detach().to(kFloat32);
    if (sum(ge(abs(f), INFINITY).to(kFloat64) + ne(f, f).to(kFloat64)).item<double>() > 0)
      MPX_ERROR("training diverged in epoch ", epoch + 1, ": the parameter ", name, " holds NaN or infinite values; ",
                stopped_note(), "; lower --lr (now ", base_lr_flag_, ")");
  }
}

void TrainRun::save_position(const EpochState& st, int64_t at, double seconds) {
  const std::vector<double> s = sum_over_ranks({st.loss_sum.item<double>(), st.hits.item<double>(), st.seen});
  save_checkpoint(st.epoch, at, s[0], s[1], s[2], seconds);
}

int TrainRun::stop_message(int64_t epoch, int64_t step) const {
  std::printf("interrupted by %s at epoch %lld step %lld; checkpoint saved, continue with: mpx train --resume %s\n",
              interrupt_name().c_str(), static_cast<long long>(epoch + 1), static_cast<long long>(step),
              ck_path_.c_str());
  return interrupt_exit_code();
}

int TrainRun::train() {
  if (!resume_.empty()) {
    std::printf("resumed from %s: epoch %lld, step %lld of %lld%s\n", resume_.c_str(),
                static_cast<long long>(start_epoch_ + 1), static_cast<long long>(start_step_),
                static_cast<long long>(steps_per_epoch_),
                start_step_ == steps_per_epoch_ ? " (trained, evaluation pending)" : "");
  }
  if (!epochs_left(start_epoch_, epochs_)) return 0;
  if (ranks_.leader()) {
    log_ = std::make_unique<MetricsLog>(out_, "metrics");
    // Keeps earlier epochs' rows, drops any later ones; a run resumed into a new folder takes its history along.
    log_->resume("epoch", static_cast<double>(start_epoch_),
                 resume_.empty() ? "" : (fs::path(resume_).parent_path() / "metrics.csv").string());
    for (const auto& [x, y] : log_->column("epoch", "test_top1"))
      if (y > best_top1_) best_top1_ = y, best_epoch_ = static_cast<int64_t>(x);
  }
  last_saved_ = resume_.empty() ? "" : resume_ + ", as resumed";  // for the divergence message
  install_interrupt_handler();
  tty_ = Progress::stdout_is_tty();
  run_start_ = std::chrono::steady_clock::now();
  // A non-finite loss is harmless on a step the loss scaler skipped; on any other step the
  // weights are now garbage. On the CPU each step is checked; on a GPU that would stall the
  // queue, so the count of non-finite losses is read when the progress line is drawn.
  check_each_step_ = !device_.is_cuda();
  level_ = amp::properties().opt_level;
  for (int64_t epoch = start_epoch_; epoch < epochs_; ++epoch)
    if (const std::optional<int> code = train_epoch(epoch)) return *code;
  finish();
  return 0;
}

std::optional<int> TrainRun::train_epoch(int64_t epoch) {
  EpochState st;
  st.epoch = epoch;
  st.first = epoch == start_epoch_ ? start_step_ : 0;
  st.step = st.first;
  // The epoch's running sums live on the training device and are read only when shown, so
  // the host queues step after step without waiting for the GPU.
  const TensorOptions sum_opts = TensorOptions(kFloat64).device(device_);
  st.loss_sum = scalar_tensor(st.first > 0 ? carried_loss_ : 0, sum_opts);
  st.hits = scalar_tensor(st.first > 0 ? carried_hits_ : 0, sum_opts);
  st.nonfinite = scalar_tensor(0, sum_opts);
  st.skipped_at_start = skipped();
  st.seen = st.first > 0 ? carried_seen_ : 0;
  st.prior_seconds = st.first > 0 ? carried_seconds_ : 0;
  Progress bar(epoch + 1, epochs_, steps_per_epoch_, batch_ * ranks_.world, print_freq_, tty_, st.first);
  bool stopped = false;
  // The loader fails between steps (a file that cannot be read): the state is that of the last
  // completed step, which is saved (by one process; with several ranks the failing one cannot
  // ask the others for their sums, so nothing is saved), so fixing the file and resuming loses nothing.
  auto data_failed = [&](const std::exception& e) {
    bar.finish();
    if (!ranks_.distributed()) save_position(st, st.step, st.prior_seconds + bar.seconds());
    // Memory is not a file's fault: the batch the flags ask for is too large.
    const bool oom = std::string(e.what()).find("out of memory") != std::string::npos;
    MPX_ERROR("reading the training data failed in epoch ", epoch + 1, " after step ", st.step, ": ", e.what(),
              oom ? "; lower --batch-size or --image-size (or --workers, each holding batches)"
                  : ranks_.distributed() ? "; fix or remove the file" : "; that step is checkpointed: fix or remove the file",
              oom || skip_bad_ ? "" : " (or pass --skip-bad-images)", oom ? "" : " and continue with mpx train --resume ",
              oom ? "" : ck_path_);
  };
  if (st.first < steps_per_epoch_) {
    const EpochBatches ep(*train_loader_, d_, epoch, st.first, device_, layout_);
    data::DevicePrefetcher::Iterator it;
    try {
      it = ep.batches->begin();
    } catch (const std::exception& e) {
      data_failed(e);
    }
    for (; it != ep.batches->end();) {
      if ((prof_ >= 0 && iterations_ >= prof_) || stop_requested()) {
        stopped = true;
        break;
      }
      const data::Batch& b = *it;
      const double lr = lr_at(schedule_, base_lr_, global_step_, steps_per_epoch_, epochs_);
      for (auto& g : opt_->param_groups()) g.set_lr(lr);
      const int64_t skipped_before_step = check_each_step_ ? skipped() : 0;
      tuner_->before_step();
      const auto step_start = std::chrono::steady_clock::now();
      const Tensor& yv = b.target;
      Tensor logits = model_(b.data).to(kFloat32);
      Tensor loss = F::cross_entropy(logits, yv);
      opt_->zero_grad();
      amp::scale_loss(loss, *opt_).backward();  // with several ranks the gradients are averaged here
      opt_->step();
      const Tensor lv = loss.detach().to(kFloat64);
      const int64_t n = yv.size(0);
      if (summary_)
        st.step_losses.emplace_back(static_cast<double>(global_step_ + 1) / static_cast<double>(steps_per_epoch_), lv);
      st.loss_sum = st.loss_sum + lv * static_cast<double>(n);
      st.hits = st.hits + topk_hits(logits, yv).top1;
      st.seen += static_cast<double>(n);
      ++st.step, ++global_step_, ++iterations_;
      if (check_each_step_) {
        const double l = lv.item<double>();  // also waits for the step, so the tuner times all of it
        tuner_->after_step(std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
        st.nonfinite_host += !std::isfinite(l);
        if (!std::isfinite(l) && skipped() == skipped_before_step) {
          bar.finish();
          diverged(epoch, st.step, l, true);
        }
      } else {
        st.nonfinite = st.nonfinite + (1.0 - lt(abs(lv), INFINITY).to(kFloat64));
      }
      // The line shows rank 0's shard (the ranks would have to meet to show more); the epoch's
      // line and the metrics are over all ranks.
      bar.update_lazy(st.step, [&] {
        if (!check_each_step_ && st.nonfinite.item<double>() > static_cast<double>(skipped() - st.skipped_at_start)) {
          bar.finish();
          diverged(epoch, st.step, NAN, false);
        }
        ProgressStats ps;
        ps.loss = st.loss_sum.item<double>() / st.seen;
        ps.top1 = 100.0 * st.hits.item<double>() / st.seen;
        ps.loss_scale = level_ == "O0" ? 0 : amp::loss_scale(0);
        ps.skipped = skipped();
        return ps;
      });
      try {
        ++it;
      } catch (const std::exception& e) {
        data_failed(e);
      }
    }
    st.loader = (ep.rest ? *ep.rest : *train_loader_).stats();
  }
  bar.finish();
  if (summary_)
    for (const auto& [x, l] : st.step_losses) summary_->step_loss.emplace_back(x, l.item<double>());
  if (stopped) {
    save_position(st, st.step, st.prior_seconds + bar.seconds());
    if (interrupted() || (ranks_.distributed() && !(prof_ >= 0 && iterations_ >= prof_)))
      return stop_message(epoch, st.step);
    std::printf("Profiling ended at iteration %lld (epoch %lld step %lld); checkpoint %s\n",
                static_cast<long long>(iterations_), static_cast<long long>(epoch + 1),
                static_cast<long long>(st.step), ck_path_.c_str());
    return 0;
  }
  check_alive(epoch, st.step - st.first, skipped() - st.skipped_at_start,
              st.nonfinite_host + static_cast<int64_t>(st.nonfinite.item<double>()));
  return end_epoch(st, st.prior_seconds + bar.seconds());
}

std::optional<int> TrainRun::end_epoch(EpochState& st, double train_seconds) {
  const int64_t epoch = st.epoch;
  const double ips = static_cast<double>(steps_per_epoch_ * batch_ * ranks_.world) / std::max(1e-9, train_seconds);
  EvalResult r;
  try {
    r = evaluate_model();
  } catch (const std::exception& e) {
    // The epoch's training is kept: a resume from "trained, evaluation pending" evaluates it.
    if (!ranks_.distributed()) save_position(st, steps_per_epoch_, train_seconds);
    MPX_ERROR("evaluating epoch ", epoch + 1, " failed: ", e.what(),
              ranks_.distributed() ? "; fix or remove the file" : "; the epoch's training is checkpointed: fix or "
              "remove the file", skip_bad_ ? "" : " (or pass --skip-bad-images)",
              ranks_.distributed() ? " and resume from the last checkpoint" : " and mpx train --resume " + ck_path_ +
              " evaluates it and goes on");
  }
  if (r.stopped) {
    save_position(st, steps_per_epoch_, train_seconds);
    return stop_message(epoch, steps_per_epoch_);
  }
  warn_nonfinite(r);
  if (r.n > 0 && r.nonfinite == r.n)
    MPX_ERROR("training diverged in epoch ", epoch + 1, ": every test image got NaN or infinite logits; ",
              stopped_note(), "; lower --lr (now ", base_lr_flag_, ")");
  // The epoch's training numbers are those of the global batch: every rank's sums together.
  const std::vector<double> s = sum_over_ranks({st.loss_sum.item<double>(), st.hits.item<double>(), st.seen});
  const double train_loss = s[0] / std::max(1.0, s[2]);
  const double train_top1 = 100.0 * s[1] / std::max(1.0, s[2]);
  // The loader's part: how long the steps waited for data, and what one loading thread sustains
  // (with several workers the loader can deliver that many times over).
  const data::LoaderStats& ld = st.loader;
  std::printf("epoch %lld/%lld: train loss %.4f top-1 %.2f%% | test loss %.4f top-1 %.2f%% top-5 %.2f%% | %.0f img/s, "
              "%.1f s + eval %.1f s | data stall %.1f s (%.0f%%), %.0f img/s per loading thread\n",
              static_cast<long long>(epoch + 1), static_cast<long long>(epochs_), train_loss, train_top1, r.loss, r.top1,
              r.top5, ips, train_seconds, r.seconds, ld.wait_s, 100.0 * ld.wait_fraction(), ld.images_per_load_s());
  std::fflush(stdout);
  const bool is_best = r.top1 > best_top1_;
  if (is_best) best_top1_ = r.top1, best_epoch_ = epoch + 1;
  if (log_) {
    log_->append({{"epoch", static_cast<double>(epoch + 1)},
                  {"global_step", static_cast<double>(global_step_)},
                  {"lr", lr_at(schedule_, base_lr_, global_step_ - 1, steps_per_epoch_, epochs_)},
                  {"train_loss", train_loss},
                  {"train_top1", train_top1},
                  {"test_loss", r.loss},
                  {"test_top1", r.top1},
                  {"test_top5", r.top5},
                  {"images_per_s", ips},
                  {"epoch_seconds", train_seconds},
                  {"eval_seconds", r.seconds},
                  {"loss_scale", amp::loss_scale(0)},
                  {"skipped_steps", static_cast<double>(skipped())}});
    write_svg((fs::path(out_) / "curves.svg").string(), "mpx train: " + arch_ + " on " + dataset_ + ", " + level_,
              {Panel{"loss", "epoch", "cross-entropy",
                     {Series{"train", log_->column("epoch", "train_loss")},
                      Series{"test", log_->column("epoch", "test_loss")}}},
               Panel{"accuracy", "epoch", "%",
                     {Series{"train top-1", log_->column("epoch", "train_top1")},
                      Series{"test top-1", log_->column("epoch", "test_top1")},
                      Series{"test top-5", log_->column("epoch", "test_top5")}}}});
  }
  save_checkpoint(epoch + 1, 0, 0, 0, 0, 0);
  // main_amp.py's model_best.pth.tar: a copy of the checkpoint of the best test top-1 so far.
  if (is_best && ranks_.leader()) copy_file_atomic(ck_path_, (fs::path(out_) / "model_best.safetensors").string());
  return std::nullopt;
}

void TrainRun::finish() {
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  if (summary_ && log_) {
    summary_->arch = arch_;
    summary_->seconds = total;
    summary_->best_top1 = best_top1_;
    summary_->skipped = skipped();
    summary_->loss_scale = amp::loss_scale(0);
    summary_->train_loss = log_->column("epoch", "train_loss");
    summary_->test_loss = log_->column("epoch", "test_loss");
    summary_->test_top1 = log_->column("epoch", "test_top1");
    summary_->images_per_s = log_->column("epoch", "images_per_s");
    summary_->metrics_csv = log_->csv_path();
  }
  std::printf("done in %s: best test top-1 %s%% (epoch %lld); metrics, curves.svg, checkpoint and model_best in %s\n",
              format_duration(total).c_str(), two_decimals(best_top1_).c_str(), static_cast<long long>(best_epoch_),
              out_.c_str());
}

}  // namespace mpx::cli
