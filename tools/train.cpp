// `mpx train`: classification training with apex's main_amp.py flags, progress, metrics, checkpoints and exact resume.
#include <omp.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numbers>

#include "tools/commands.h"
#include "tools/common.h"
#include "tools/metrics.h"
#include "tools/progress.h"
#include "tools/run_dir.h"
#include "tools/threads.h"
#include "tools/train.h"
#include "tools/train_parts.h"

namespace mpx::cli {

namespace fs = std::filesystem;
namespace F = nn::functional;

namespace {

// Flags whose values define the run: stored in every checkpoint, adopted on --resume when not
// given again, so `mpx train --resume FILE` alone continues the same run.
const std::vector<std::string> kRunFlags = {
    "--arch", "--dataset", "--data", "--batch-size", "--epochs", "--lr", "--momentum", "--weight-decay",
    "--schedule", "--opt-level", "--dtype", "--keep-batchnorm-fp32", "--loss-scale", "--seed",
    "--limit-train", "--limit-test", "--image-size", "--synthetic", "--deterministic"};

// What a train run writes to --out (claim_out tells runs apart by these).
const RunFiles kTrainFiles{"train",
                           {"checkpoint.safetensors", "model_best.safetensors", "metrics.csv", "metrics.jsonl",
                            "curves.svg", "bad_images.txt"},
                           {}};

Args make_args() {
  Args a("mpx train", "mpx train [flags] [DATA_DIR]");
  a.positional("DATA_DIR", "the data set's folder (same as --data)");
  a.option({"-a", "--arch"}, "NAME",
           "model: small_cnn, resnet18/34/50/101/152, vgg11..vgg19[_bn], alexnet (default: small_cnn for 28 px "
           "data (fashion-mnist/mnist), resnet18 otherwise; 28-32 px data gets each model's small-input variant)")
      .option({"--dataset"}, "NAME", "fashion-mnist, mnist, cifar10, imagefolder or synthetic", "fashion-mnist")
      .option({"--data"}, "DIR", "the data set's folder (fashion-mnist: /usr/share/datasets/fashion-mnist)")
      .option({"-b", "--batch-size"}, "N", "images per step", "128")
      .option({"-j", "--workers"}, "N",
              "data loader threads (never changes the batches); default: 0 for the in-memory data sets, where "
              "extra threads only compete with the compute threads, 4 for imagefolder")
      .option({"--epochs"}, "N", "epochs to train (in total, counting resumed ones)", "8")
      .option({"--lr"}, "X", "base learning rate, scaled by batch-size/256 as apex does", "0.1")
      .option({"--momentum"}, "X", "SGD momentum", "0.9")
      .option({"--weight-decay", "--wd"}, "X", "SGD weight decay", "1e-4")
      .option({"--schedule"}, "NAME",
              "learning-rate schedule per step: cosine (to 0 at the end), apex (5-epoch warm-up, /10 at "
              "epochs 30, 60, 80) or constant",
              "cosine");
  add_amp_flags(a, "O1");
  a.option({"--resume"}, "PATH",
           "continue from a checkpoint.safetensors (run flags default to the checkpoint's; files go to its folder "
           "unless --out is given)")
      .option({"--start-epoch"}, "N", "start at epoch N (0-based, as apex's flag): the schedule and the data order "
              "of that epoch, with the resumed or initial weights")
      .option({"--pretrained"}, "PATH",
              "initial weights from a safetensors file (e.g. exported from torchvision); tensors whose name or shape "
              "does not fit (a head for another class count) keep their initialization, with a summary")
      .flag({"-e", "--evaluate"}, "only evaluate the (resumed) model on the test split")
      .flag({"--overwrite"}, "replace another run's files in --out instead of refusing to start")
      .flag({"--skip-bad-images"}, "train without images that cannot be read (listed in --out/bad_images.txt) "
            "instead of stopping")
      .flag({"--verbose"}, "list every name in model/checkpoint mismatch summaries")
      .flag({"--deterministic"}, "bit-identical runs: fixed threads, seeded everything, deterministic cuDNN")
      .option({"--print-freq", "-p"}, "N", "log a line every N steps when stdout is not a terminal", "50")
      .option({"--prof"}, "N", "stop after N training steps (checkpointing the position), -1 = off", "-1")
      .option({"--device"}, "cpu|cuda[:i]", "where to train", "cpu")
      .option({"--seed"}, "N", "seed of the weights, the shuffle order and the augmentations", "0")
      .option({"--out"}, "DIR",
              "where metrics.csv/.jsonl, curves.svg, checkpoint.safetensors and model_best.safetensors go; a folder "
              "holding another run is refused (see --overwrite)", "out/train")
      .flag({"--synthetic"}, "random images of the data set's shape instead of the real ones (speed tests)")
      .flag({"--channels-last"}, "model and batches in channels-last (NHWC) layout, as Tensor Cores want (apex's flag)")
      .option({"--threads"}, "N",
              "CPU threads (OpenMP), fixed; default: OMP_NUM_THREADS, else the cores less the loader workers, "
              "re-chosen while training by measured step time (see docs/cli.md)")
      .option({"--limit-train"}, "N", "use only the first N training images (quick runs, tests); 0 = all", "0")
      .option({"--limit-test"}, "N", "use only the first N test images; 0 = all", "0")
      .option({"--image-size"}, "N", "image side for imagefolder and synthetic data", "224");
  return a;
}

// The learning rate at a global step, in closed form so a resumed run computes exactly what an
// uninterrupted one would (the schedule's whole state is the step counter).
double lr_at(const std::string& schedule, double base, int64_t step, int64_t steps_per_epoch, int64_t epochs) {
  if (schedule == "constant") return base;
  if (schedule == "cosine") {
    const double t = static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, steps_per_epoch * epochs));
    return base * 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(1.0, t)));
  }
  // apex's adjust_learning_rate: /10 every 30 epochs, once more from 80, linear warm-up over 5 epochs.
  const int64_t epoch = step / steps_per_epoch, in_epoch = step % steps_per_epoch;
  int64_t factor = epoch / 30 + (epoch >= 80 ? 1 : 0);
  double lr = base * std::pow(0.1, static_cast<double>(factor));
  if (epoch < 5)
    lr *= static_cast<double>(1 + in_epoch + epoch * steps_per_epoch) / (5.0 * static_cast<double>(steps_per_epoch));
  return lr;
}

std::string one_decimal(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

}  // namespace

int run_train(int argc, char** argv) { return train_main(argc, argv, nullptr); }

int train_main(int argc, char** argv, TrainSummary* summary) {
  Args args = make_args();
  Metadata ck_meta;
  TensorDict ck;
  // A resumed run adopts the checkpoint's run flags unless given again.
  if (!parse_resumable(args, argc, argv, "train", kRunFlags, {"--epochs", "--limit-test", "--deterministic"}, ck_meta, ck))
    return 0;
  set_verbose(args.on("--verbose"));
  const std::string resume = args.str("--resume"), pretrained = args.str("--pretrained");
  if (!resume.empty() && !pretrained.empty())
    throw UsageError("mpx train: give --resume (continue a run) or --pretrained (start one from weights), not both");
  // apex's `main_amp.py DIR`: a folder with train/ and val/ class folders is an image folder.
  std::string detected;
  if (!args.given("--dataset") && meta_str(ck_meta, "flag.--dataset").empty() && !args.str("--data").empty()) {
    detected = detect_dataset(args.str("--data"));
    if (!detected.empty()) args.set_default("--dataset", detected);
  }
  if (!args.str("--arch").empty()) check_classifier_arch("mpx train", args.str("--arch"));

  const std::string dataset = args.choice("--dataset", {"fashion-mnist", "mnist", "cifar10", "imagefolder", "synthetic"});
  const int64_t batch = args.integer("--batch-size", 1);
  const int64_t workers =
      args.str("--workers").empty() ? (dataset == "imagefolder" ? 4 : 0) : args.integer("--workers", 0);
  const int64_t epochs = args.integer("--epochs", 1);
  const double base_lr_flag = args.number("--lr", 0.0);
  const double momentum = args.number("--momentum", 0.0);
  const double wd = args.number("--weight-decay", 0.0);
  const std::string schedule = args.choice("--schedule", {"cosine", "apex", "constant"});
  const int64_t print_freq = args.integer("--print-freq", 1);
  const int64_t prof = args.integer("--prof", -1);
  const uint64_t seed = static_cast<uint64_t>(args.integer("--seed", 0));
  const int64_t limit_train = args.integer("--limit-train", 0), limit_test = args.integer("--limit-test", 0);
  const int64_t image_size = args.integer("--image-size", 8);
  const bool evaluate_only = args.on("--evaluate"), deterministic = args.on("--deterministic");
  const bool synthetic = args.on("--synthetic"), skip_bad = args.on("--skip-bad-images");
  const int64_t start_epoch_flag = args.given("--start-epoch") ? args.integer("--start-epoch", 0) : -1;
  if (start_epoch_flag >= epochs)
    throw UsageError("mpx train: --start-epoch " + std::to_string(start_epoch_flag) + " is not below --epochs " +
                     std::to_string(epochs) + "; raise --epochs");
  const MemoryFormat layout = args.on("--channels-last") ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  amp::Options amp_opts = amp_options(args, 1);
  const Device device = parse_device(args.str("--device"));
  const std::string out = args.str("--out");
  const std::string run_id = meta_str(ck_meta, "run.id").empty() ? new_run_id() : meta_str(ck_meta, "run.id");
  if (!resume.empty()) check_finite(ck, "model.", resume);
  // The output folder is settled before any data is read, so a bad --out costs nothing.
  const std::string ck_path =
      evaluate_only ? std::string() : claim_out(out, kTrainFiles, run_id, resume, args.on("--overwrite"));
  if (args.given("--threads")) {
    omp_set_num_threads(static_cast<int>(args.integer("--threads", 1)));
  } else if (deterministic && !meta_str(ck_meta, "threads").empty()) {
    // Some CPU kernels (oneDNN convolutions, GEMM blocking) split their reductions by thread
    // count, so a bit-identical continuation needs the thread count the checkpoint was made with.
    omp_set_num_threads(static_cast<int>(meta_int(ck_meta, "threads", resume, 1, 4096)));
  }
  // Without an explicit count the default fits a shared machine: cores less loader workers, and
  // the tuner below drops to fewer threads while another process holds a core.
  const bool threads_fixed = args.given("--threads") || std::getenv("OMP_NUM_THREADS") != nullptr ||
                             (deterministic && !meta_str(ck_meta, "threads").empty());
  if (!threads_fixed) omp_set_num_threads(default_threads(workers));
  const int threads = omp_get_max_threads();
  ThreadTuner tuner(threads, !threads_fixed && !deterministic && !device.is_cuda());
  if (deterministic) {
    // The loader's order depends only on (seed, epoch) and every random draw is seeded; what
    // is left is the thread count (fixed above) and cuDNN's algorithm choice.
    cuda::cudnn_deterministic(true);
    cuda::cudnn_benchmark(false);
  }

  // ---- data ----
  manual_seed(seed);
  DataSplits d = open_data(dataset, args.str("--data"), DataPurpose::Classify, synthetic, image_size, seed, skip_bad);
  d.train = limit(d.train, limit_train);
  d.test = limit(d.test, limit_test);
  std::string arch = args.str("--arch");
  if (arch.empty()) arch = d.image_size == 28 ? "small_cnn" : "resnet18";
  check_classifier_arch("mpx train", arch);
  if (arch == "small_cnn" && d.image_size != 28)
    throw UsageError("mpx train: -a small_cnn takes 28x28 images, " + dataset + " has " + std::to_string(d.image_size) +
                     " px; pick another --arch (e.g. resnet18)");
  args.set_default("--arch", arch);
  // On a GPU the loaders pin their batches and the prefetchers copy them on a side stream
  // while the previous step computes; scaling and normalization run on the device.
  const bool pin = device.is_cuda();
  data::DataLoader train_loader(
      d.train, data::DataLoaderOptions(batch).shuffle(true).drop_last(true).workers(workers).seed(seed).pin_memory(pin));
  data::DataLoader test_loader(d.test, data::DataLoaderOptions(batch).workers(workers).seed(seed).pin_memory(pin));
  data::DevicePrefetcher test_batches(test_loader, device, d.prefetch_options().memory_format(layout));
  const int64_t steps_per_epoch = train_loader.size();
  if (steps_per_epoch == 0 && !evaluate_only)
    MPX_ERROR("the training set has ", d.train->size(), " images, fewer than one batch of ", batch,
              "; lower --batch-size or raise --limit-train");
  const double base_lr = base_lr_flag * static_cast<double>(batch) / 256.0;  // apex: lr * global batch / 256

  // ---- model, optimizer, amp ----
  nn::AnyModule net = models::create(arch, models::ModelOptions()
                                               .num_classes(d.num_classes)
                                               .in_channels(d.channels)
                                               .small_input(d.image_size <= 32));
  if (!pretrained.empty()) load_pretrained(*net.ptr(), pretrained, arch);
  net.ptr()->to(device);
  net.ptr()->to(layout);
  optim::SGD opt(net.ptr()->parameters(), optim::SGDOptions(base_lr).momentum(momentum).weight_decay(wd));
  amp::reset();
  amp_opts.verbosity(0);
  amp::initialize(net, opt, amp_opts);

  int64_t start_epoch = 0, start_step = 0, global_step = 0, skipped_before = 0;
  double carried_loss = 0, carried_hits = 0, carried_seen = 0, carried_seconds = 0;
  if (!resume.empty()) {
    const ResumePoint at = restore_checkpoint(ck_meta, resume, steps_per_epoch, [&] {
      get_module(*net.ptr(), "model", ck, resume);
      get_optimizer(opt, "optimizer", ck, ck_meta, resume);
    }, /*keep_finished_epoch=*/true);
    start_epoch = at.epoch;
    start_step = at.step;
    global_step = at.global_step;
    carried_loss = meta_num(ck_meta, "partial.loss_sum", resume, 0.0);
    carried_hits = meta_num(ck_meta, "partial.hits", resume, 0.0);
    carried_seen = meta_num(ck_meta, "partial.seen", resume, 0.0);
    carried_seconds = meta_num(ck_meta, "partial.seconds", resume, 0.0);
    // amp counts skips per process; the run's count so far travels in the checkpoint.
    if (!meta_str(ck_meta, "skipped_steps").empty())
      skipped_before = meta_int(ck_meta, "skipped_steps", resume, 0, kMaxMetaCount);
    const std::string t = meta_str(ck_meta, "threads");
    if (deterministic && !t.empty() && t != std::to_string(threads))
      std::fprintf(stderr, "mpx train: warning: the checkpoint was written with %s threads, this run has %d; results "
                   "will differ in the last bits\n", t.c_str(), threads);
  }
  if (start_epoch_flag >= 0) {
    start_epoch = start_epoch_flag, start_step = 0, global_step = start_epoch_flag * steps_per_epoch;
    carried_loss = carried_hits = carried_seen = carried_seconds = 0;
  }
  auto skipped = [&] { return skipped_before + amp::skipped_steps(opt); };

  const std::string dtype = args.str("--dtype");
  std::printf("mpx train: %s on %s%s (%lld train / %lld test images%s), batch %lld, lr %g (%g x %lld/256, %s), %s%s, "
              "%s, %d thread%s%s%s\n",
              arch.c_str(), dataset.c_str(), detected.empty() ? "" : " (detected)",
              static_cast<long long>(d.train->size()), static_cast<long long>(d.test->size()),
              synthetic ? ", synthetic" : "", static_cast<long long>(batch), base_lr, base_lr_flag,
              static_cast<long long>(batch), schedule.c_str(), amp::properties().opt_level.c_str(),
              amp::properties().opt_level == "O0" ? "" : (" " + dtype).c_str(), device.str().c_str(), threads,
              threads == 1 ? "" : "s", tuner.enabled() ? " (auto)" : "", deterministic ? ", deterministic" : "");
  const std::string classes = class_summary(d, limit_train, limit_test);
  if (!classes.empty()) std::printf("%s\n", classes.c_str());
  if (d.ignored_files > 0)
    std::printf("ignored %lld file%s without an image extension (.jpg .jpeg .png .bmp)\n",
                static_cast<long long>(d.ignored_files), d.ignored_files == 1 ? "" : "s");
  const std::string bad_list = ck_path.empty() ? "" : (fs::path(out) / "bad_images.txt").string();
  size_t bad_reported = 0;
  auto report_bad = [&] {
    const std::vector<std::string> bad = d.unreadable();
    if (bad.size() == bad_reported || bad_list.empty()) return;
    std::string text;
    for (const auto& l : bad) text += l + "\n";
    write_file_atomic(bad_list, text);
    std::printf("skipping %zu unreadable image%s (--skip-bad-images); the list is in %s\n", bad.size(),
                bad.size() == 1 ? "" : "s", bad_list.c_str());
    bad_reported = bad.size();
  };
  report_bad();

  if (evaluate_only) {
    const EvalResult r = evaluate(net, test_batches);
    std::printf("evaluate: top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%lld images, %.1f s)\n", r.top1, r.top5, r.loss,
                static_cast<long long>(r.n), r.seconds);
    warn_nonfinite(r);
    return 0;
  }
  if (!resume.empty()) {
    std::printf("resumed from %s: epoch %lld, step %lld of %lld%s\n", resume.c_str(),
                static_cast<long long>(start_epoch + 1), static_cast<long long>(start_step),
                static_cast<long long>(steps_per_epoch),
                start_step == steps_per_epoch ? " (trained, evaluation pending)" : "");
  }
  if (!epochs_left(start_epoch, epochs)) return 0;

  MetricsLog log(out, "metrics");
  // Keeps earlier epochs' rows, drops any later ones; a run resumed into a new folder takes its history along.
  log.resume("epoch", static_cast<double>(start_epoch),
             resume.empty() ? "" : (fs::path(resume).parent_path() / "metrics.csv").string());

  std::string last_saved = resume.empty() ? "" : resume + ", as resumed";  // for the divergence message
  auto save_checkpoint = [&](int64_t epoch_done, int64_t step_in_epoch, double loss_sum, double hits, double seen,
                             double seconds) {
    TensorDict t;
    Metadata m;
    put_module(*net.ptr(), "model", t);
    put_optimizer(opt, "optimizer", t, m);
    put_amp_and_rng(m);
    m["mpx.checkpoint"] = "train";
    m["mpx.version"] = MPX_VERSION_STRING;
    m["run.id"] = run_id;
    for (const auto& f : kRunFlags) m["flag." + f] = args.str(f);
    m["epoch"] = std::to_string(epoch_done);
    m["step_in_epoch"] = std::to_string(step_in_epoch);
    m["global_step"] = std::to_string(global_step);
    m["steps_per_epoch"] = std::to_string(steps_per_epoch);
    m["scheduler.name"] = schedule;
    m["scheduler.step"] = std::to_string(global_step);
    m["partial.loss_sum"] = num(loss_sum);
    m["partial.hits"] = num(hits);
    m["partial.seen"] = num(seen);
    m["partial.seconds"] = num(seconds);
    m["skipped_steps"] = std::to_string(skipped());
    m["threads"] = std::to_string(threads);
    save_checkpoint_file(t, m, ck_path);
    last_saved = ck_path + (step_in_epoch == 0 ? ", end of epoch " + std::to_string(epoch_done)
                                               : ", epoch " + std::to_string(epoch_done + 1) + " step " +
                                                     std::to_string(step_in_epoch));
    report_bad();
  };

  install_interrupt_handler();
  const bool tty = Progress::stdout_is_tty();
  const auto run_start = std::chrono::steady_clock::now();
  int64_t iterations = 0;  // steps run by this process (for --prof)
  double best_top1 = -1;
  int64_t best_epoch = 0;
  for (const auto& [x, y] : log.column("epoch", "test_top1"))
    if (y > best_top1) best_top1 = y, best_epoch = static_cast<int64_t>(x);
  // A non-finite loss is harmless on a step the loss scaler skipped; on any other step the
  // weights are now garbage. On the CPU each step is checked; on a GPU that would stall the
  // queue, so the count of non-finite losses is read when the progress line is drawn.
  const bool check_each_step = !device.is_cuda();
  const std::string level = amp::properties().opt_level;
  auto stopped_note = [&] {
    return last_saved.empty() ? std::string("no checkpoint of this run was written before")
                              : "the last good checkpoint is kept (" + last_saved + ")";
  };
  auto diverged = [&](int64_t epoch, int64_t step, double loss, bool exact) {
    MPX_ERROR("training diverged ", exact ? "at" : "by", " epoch ", epoch + 1, " step ", step, ": the loss is ", loss,
              " and the optimizer step was not skipped", level == "O0" ? " (O0 has no loss scaler)" : "",
              ", so the weights are no longer valid; ", stopped_note(), "; lower --lr (now ", base_lr_flag, ")",
              level == "O0" ? " or use --opt-level O1, whose dynamic loss scaling skips such steps" : "");
  };
  // A run whose every step is skipped, or whose weights went non-finite through a step that was
  // taken, trains nothing any more: it stops the same way instead of reporting chance accuracy.
  auto check_alive = [&](int64_t epoch, int64_t steps_run, int64_t skipped_run) {
    if (steps_run > 0 && skipped_run == steps_run)
      MPX_ERROR("training diverged in epoch ", epoch + 1, ": all ", steps_run, " of its steps were skipped for "
                "non-finite gradients (loss scale now ", amp::loss_scale(0), "); ", stopped_note(), "; lower --lr (now ",
                base_lr_flag, ")");
    for (const auto& [name, p] : net.ptr()->named_parameters()) {
      const Tensor f = p.detach().to(kFloat32);
      if (sum(ge(abs(f), INFINITY).to(kFloat64) + ne(f, f).to(kFloat64)).item<double>() > 0)
        MPX_ERROR("training diverged in epoch ", epoch + 1, ": the parameter ", name, " holds NaN or infinite values; ",
                  stopped_note(), "; lower --lr (now ", base_lr_flag, ")");
    }
  };

  for (int64_t epoch = start_epoch; epoch < epochs; ++epoch) {
    const int64_t first = epoch == start_epoch ? start_step : 0;
    // The epoch's running sums live on the training device and are read only when shown, so
    // the host queues step after step without waiting for the GPU.
    const TensorOptions sum_opts = TensorOptions(kFloat64).device(device);
    Tensor loss_sum = scalar_tensor(first > 0 ? carried_loss : 0, sum_opts);
    Tensor hits = scalar_tensor(first > 0 ? carried_hits : 0, sum_opts);
    Tensor nonfinite = scalar_tensor(0, sum_opts);
    const int64_t skipped_at_start = skipped();
    double seen = first > 0 ? carried_seen : 0;
    std::vector<std::pair<double, Tensor>> step_losses;  // (epoch position, loss) for the summary
    const double prior_seconds = first > 0 ? carried_seconds : 0;
    Progress bar(epoch + 1, epochs, steps_per_epoch, batch, print_freq, tty, first);
    int64_t step = first;
    bool stopped = false;
    auto save_here = [&](int64_t at) {
      save_checkpoint(epoch, at, loss_sum.item<double>(), hits.item<double>(), seen, prior_seconds + bar.seconds());
    };
    // The loader fails between steps (a file that cannot be read): the state is that of the last
    // completed step, which is saved, so fixing the file and resuming loses nothing.
    auto data_failed = [&](const std::exception& e) {
      bar.finish();
      save_here(step);
      MPX_ERROR("reading the training data failed in epoch ", epoch + 1, " after step ", step, ": ", e.what(),
                "; that step is checkpointed: fix or remove the file", skip_bad ? "" : " (or pass --skip-bad-images)",
                " and continue with mpx train --resume ", ck_path);
    };
    if (first < steps_per_epoch) {
      const EpochBatches ep(train_loader, d, epoch, first, device, layout);
      data::DevicePrefetcher::Iterator it;
      try {
        it = ep.batches->begin();
      } catch (const std::exception& e) {
        data_failed(e);
      }
      for (; it != ep.batches->end();) {
        if ((prof >= 0 && iterations >= prof) || interrupted()) {
          stopped = true;
          break;
        }
        const data::Batch& b = *it;
        const double lr = lr_at(schedule, base_lr, global_step, steps_per_epoch, epochs);
        for (auto& g : opt.param_groups()) g.set_lr(lr);
        const int64_t skipped_before_step = check_each_step ? skipped() : 0;
        tuner.before_step();
        const auto step_start = std::chrono::steady_clock::now();
        const Tensor& yv = b.target;
        Tensor logits = net(b.data).to(kFloat32);
        Tensor loss = F::cross_entropy(logits, yv);
        opt.zero_grad();
        amp::scale_loss(loss, opt).backward();
        opt.step();
        const Tensor lv = loss.detach().to(kFloat64);
        const int64_t n = yv.size(0);
        if (summary)
          step_losses.emplace_back(static_cast<double>(global_step + 1) / static_cast<double>(steps_per_epoch), lv);
        loss_sum = loss_sum + lv * static_cast<double>(n);
        hits = hits + topk_hits(logits, yv).top1;
        seen += static_cast<double>(n);
        ++step, ++global_step, ++iterations;
        if (check_each_step) {
          const double l = lv.item<double>();  // also waits for the step, so the tuner times all of it
          tuner.after_step(std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
          if (!std::isfinite(l) && skipped() == skipped_before_step) {
            bar.finish();
            diverged(epoch, step, l, true);
          }
        } else {
          nonfinite = nonfinite + (1.0 - lt(abs(lv), INFINITY).to(kFloat64));
        }
        bar.update_lazy(step, [&] {
          if (!check_each_step && nonfinite.item<double>() > static_cast<double>(skipped() - skipped_at_start)) {
            bar.finish();
            diverged(epoch, step, NAN, false);
          }
          ProgressStats st;
          st.loss = loss_sum.item<double>() / seen;
          st.top1 = 100.0 * hits.item<double>() / seen;
          st.loss_scale = level == "O0" ? 0 : amp::loss_scale(0);
          st.skipped = skipped();
          return st;
        });
        try {
          ++it;
        } catch (const std::exception& e) {
          data_failed(e);
        }
      }
    }
    bar.finish();
    for (const auto& [x, l] : step_losses) summary->step_loss.emplace_back(x, l.item<double>());
    auto stop_message = [&] {
      std::printf("interrupted by %s at epoch %lld step %lld; checkpoint saved, continue with: mpx train --resume %s\n",
                  interrupt_name().c_str(), static_cast<long long>(epoch + 1), static_cast<long long>(step),
                  ck_path.c_str());
      return interrupt_exit_code();
    };
    if (stopped) {
      save_here(step);
      if (interrupted()) return stop_message();
      std::printf("Profiling ended at iteration %lld (epoch %lld step %lld); checkpoint %s\n",
                  static_cast<long long>(iterations), static_cast<long long>(epoch + 1), static_cast<long long>(step),
                  ck_path.c_str());
      return 0;
    }
    check_alive(epoch, step - first, skipped() - skipped_at_start);
    const double train_seconds = prior_seconds + bar.seconds();
    const double ips = static_cast<double>(steps_per_epoch * batch) / std::max(1e-9, train_seconds);
    EvalResult r;
    try {
      r = evaluate(net, test_batches);
    } catch (const std::exception& e) {
      // The epoch's training is kept: a resume from "trained, evaluation pending" evaluates it.
      save_here(steps_per_epoch);
      MPX_ERROR("evaluating epoch ", epoch + 1, " failed: ", e.what(), "; the epoch's training is checkpointed: fix or "
                "remove the file", skip_bad ? "" : " (or pass --skip-bad-images)",
                " and mpx train --resume ", ck_path, " evaluates it and goes on");
    }
    if (r.stopped) {
      save_here(steps_per_epoch);
      return stop_message();
    }
    warn_nonfinite(r);
    if (r.n > 0 && r.nonfinite == r.n)
      MPX_ERROR("training diverged in epoch ", epoch + 1, ": every test image got NaN or infinite logits; ",
                stopped_note(), "; lower --lr (now ", base_lr_flag, ")");
    const double train_loss = loss_sum.item<double>() / std::max(1.0, seen);
    const double train_top1 = 100.0 * hits.item<double>() / std::max(1.0, seen);
    std::printf("epoch %lld/%lld: train loss %.4f top-1 %.2f%% | test loss %.4f top-1 %.2f%% top-5 %.2f%% | %.0f img/s, "
                "%.1f s + eval %.1f s\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(epochs), train_loss, train_top1, r.loss, r.top1,
                r.top5, ips, train_seconds, r.seconds);
    std::fflush(stdout);
    const bool is_best = r.top1 > best_top1;
    if (is_best) best_top1 = r.top1, best_epoch = epoch + 1;
    log.append({{"epoch", static_cast<double>(epoch + 1)},
                {"global_step", static_cast<double>(global_step)},
                {"lr", lr_at(schedule, base_lr, global_step - 1, steps_per_epoch, epochs)},
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
    write_svg((fs::path(out) / "curves.svg").string(),
              "mpx train: " + arch + " on " + dataset + ", " + level,
              {Panel{"loss", "epoch", "cross-entropy",
                     {Series{"train", log.column("epoch", "train_loss")}, Series{"test", log.column("epoch", "test_loss")}}},
               Panel{"accuracy", "epoch", "%",
                     {Series{"train top-1", log.column("epoch", "train_top1")},
                      Series{"test top-1", log.column("epoch", "test_top1")},
                      Series{"test top-5", log.column("epoch", "test_top5")}}}});
    save_checkpoint(epoch + 1, 0, 0, 0, 0, 0);
    // main_amp.py's model_best.pth.tar: a copy of the checkpoint of the best test top-1 so far.
    if (is_best) copy_file_atomic(ck_path, (fs::path(out) / "model_best.safetensors").string());
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (summary) {
    summary->arch = arch;
    summary->seconds = total;
    summary->best_top1 = best_top1;
    summary->skipped = skipped();
    summary->loss_scale = amp::loss_scale(0);
    summary->train_loss = log.column("epoch", "train_loss");
    summary->test_loss = log.column("epoch", "test_loss");
    summary->test_top1 = log.column("epoch", "test_top1");
    summary->images_per_s = log.column("epoch", "images_per_s");
    summary->metrics_csv = log.csv_path();
  }
  std::printf("done in %s: best test top-1 %s%% (epoch %lld); metrics, curves.svg, checkpoint and model_best in %s\n",
              format_duration(total).c_str(), one_decimal(best_top1).c_str(), static_cast<long long>(best_epoch),
              out.c_str());
  return 0;
}

}  // namespace mpx::cli
