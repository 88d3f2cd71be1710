// `mpx train`: classification training with apex's main_amp.py flags; flags and the set-up steps (the loop is in train_loop.cpp).

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numbers>

#include "tools/commands.h"
#include "tools/progress.h"
#include "tools/run_dir.h"
#include "tools/train_run.h"

namespace mpx::cli {

namespace fs = std::filesystem;

namespace {

// Flags whose values define the run: stored in every checkpoint, adopted on --resume when not
// given again, so `mpx train --resume FILE` alone continues the same run.
const std::vector<std::string> kRunFlags = {
    "--arch", "--dataset", "--data", "--batch-size", "--epochs", "--lr", "--momentum", "--weight-decay",
    "--schedule", "--opt-level", "--dtype", "--keep-batchnorm-fp32", "--loss-scale", "--master-weights",
    "--stochastic-rounding", "--low-precision-state", "--seed", "--limit-train", "--limit-test", "--image-size",
    "--synthetic", "--deterministic", "--sync-bn"};

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
      .option({"-b", "--batch-size"}, "N", "images per step and rank (apex: per process)", "128")
      .option({"-j", "--workers"}, "N",
              "data loader threads (never changes the batches); default: 0 for the in-memory data sets, where "
              "extra threads only compete with the compute threads, 4 for imagefolder")
      .option({"--epochs"}, "N", "epochs to train (in total, counting resumed ones)", "8")
      .option({"--lr"}, "X", "base learning rate, scaled by the global batch (batch-size x ranks)/256 as apex does", "0.1")
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
              "CPU threads (OpenMP) per rank, fixed; default: OMP_NUM_THREADS, else this rank's share of the cores "
              "less the loader workers, re-chosen while training by measured step time when one rank runs (see docs/cli.md)")
      .flag({"--sync-bn", "--sync_bn"}, "synchronized batch norm: statistics over every rank's batch (apex's --sync_bn; "
            "needs the distributed build)")
      .option({"--nproc-per-node", "--nproc_per_node"}, "N",
              "start N ranks on this machine by re-running this command under mpirun (as torchrun's flag)")
      .option({"--limit-train"}, "N", "use only the first N training images (quick runs, tests); 0 = all", "0")
      .option({"--limit-test"}, "N", "use only the first N test images; 0 = all", "0")
      .option({"--image-size"}, "N", "image side for imagefolder and synthetic data", "224")
      .flag({"--gpu-decode", "--gpu_decode"},
            "imagefolder on --device cuda: decode the JPEGs on the GPU (nvJPEG) and resample the crops there, for "
            "when the CPU cannot decode fast enough; other images are loaded on the CPU");
  return a;
}

}  // namespace

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

int run_train(int argc, char** argv) {
  join_ranks();
  return train_main(argc, argv, nullptr);
}

int train_main(int argc, char** argv, TrainSummary* summary) {
  TrainRun run(summary);
  if (!run.parse(argc, argv)) return 0;
  run.open_data();
  run.build_model();
  run.announce();
  return run.evaluate_only_requested() ? run.evaluate_only() : run.train();
}

bool TrainRun::parse(int argc, char** argv) {
  args_ = make_args();
  ranks_ = ranks();
  // A resumed run adopts the checkpoint's run flags unless given again.
  if (!parse_resumable(args_, argc, argv, "train", kRunFlags, {"--epochs", "--limit-test", "--deterministic"},
                       ck_meta_, ck_))
    return false;
  set_verbose(args_.on("--verbose"));
  resume_ = args_.str("--resume"), pretrained_ = args_.str("--pretrained");
  if (!resume_.empty() && !pretrained_.empty())
    throw UsageError("mpx train: give --resume (continue a run) or --pretrained (start one from weights), not both");
  if (args_.given("--nproc-per-node"))  // mpx_main re-launches before this; here only under mpirun
    throw UsageError("mpx train: --nproc-per-node starts mpirun itself; under mpirun drop it");
  // apex's `main_amp.py DIR`: a folder with train/ and val/ class folders is an image folder.
  if (!args_.given("--dataset") && meta_str(ck_meta_, "flag.--dataset").empty() && !args_.str("--data").empty()) {
    detected_ = detect_dataset(args_.str("--data"));
    if (!detected_.empty()) args_.set_default("--dataset", detected_);
  }
  if (!args_.str("--arch").empty()) check_classifier_arch("mpx train", args_.str("--arch"));

  dataset_ = args_.choice("--dataset", {"fashion-mnist", "mnist", "cifar10", "imagefolder", "synthetic"});
  batch_ = args_.integer("--batch-size", 1);
  workers_ = args_.str("--workers").empty() ? (dataset_ == "imagefolder" ? 4 : 0) : args_.integer("--workers", 0, kMaxWorkers);
  epochs_ = args_.integer("--epochs", 1);
  base_lr_flag_ = args_.number("--lr", 0.0);
  momentum_ = args_.number("--momentum", 0.0);
  wd_ = args_.number("--weight-decay", 0.0);
  schedule_ = args_.choice("--schedule", {"cosine", "apex", "constant"});
  print_freq_ = args_.integer("--print-freq", 1);
  prof_ = args_.on("--evaluate") ? -1 : prof_steps(args_, "train");  // -e trains no step
  seed_ = static_cast<uint64_t>(args_.integer("--seed", 0));
  limit_train_ = args_.integer("--limit-train", 0), limit_test_ = args_.integer("--limit-test", 0);
  image_size_ = args_.integer("--image-size", 8);
  evaluate_only_ = args_.on("--evaluate"), deterministic_ = args_.on("--deterministic");
  synthetic_ = args_.on("--synthetic"), skip_bad_ = args_.on("--skip-bad-images");
  sync_bn_ = args_.on("--sync-bn");
  if (sync_bn_ && !distributed::mpi_available())
    throw UsageError("mpx train: --sync-bn needs the distributed build (" + distributed::backend_info() +
                     "); install Open MPI (libopenmpi-dev), rebuild with -DMPX_DISTRIBUTED=ON and start the ranks "
                     "with mpirun, or drop --sync-bn");
  start_epoch_flag_ = args_.given("--start-epoch") ? args_.integer("--start-epoch", 0) : -1;
  if (start_epoch_flag_ >= epochs_)
    throw UsageError("mpx train: --start-epoch " + std::to_string(start_epoch_flag_) + " is not below --epochs " +
                     std::to_string(epochs_) + "; raise --epochs");
  layout_ = args_.on("--channels-last") ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  amp_opts_ = amp_options(args_, 1);
  check_gpu_decode();  // before parse_device: these are flag errors whatever this machine has
  device_ = parse_device(args_.str("--device"));
  if (ranks_.distributed() && device_.is_cuda() && args_.str("--device") == "cuda")
    device_ = Device::cuda(ranks_.local_rank);  // one GPU per rank on a machine
  out_ = args_.str("--out");
  run_id_ = meta_str(ck_meta_, "run.id").empty() ? new_run_id() : meta_str(ck_meta_, "run.id");
  if (!resume_.empty()) check_finite(ck_, "model.", resume_);
  // Ranks given different run flags would train different things or wait on each other forever.
  std::string canonical;
  for (const auto& f : kRunFlags) canonical += f + "=" + args_.str(f) + " ";
  for (const char* f : {"--prof", "--resume", "--start-epoch", "--evaluate", "--channels-last"})
    canonical += std::string(f) + "=" + args_.str(f) + " ";
  check_same_flags("mpx train", canonical);
  // The output folder is settled before any data is read, so a bad --out costs nothing. Rank 0
  // alone writes; the other ranks only need the path for messages.
  if (evaluate_only_) ck_path_.clear();
  else if (ranks_.leader()) ck_path_ = claim_out(out_, kTrainFiles, run_id_, resume_, args_.on("--overwrite"));
  else ck_path_ = (fs::path(out_) / "checkpoint.safetensors").string();

  if (args_.given("--threads")) {
    mpx::set_num_threads(static_cast<int>(args_.integer("--threads", 1, kMaxThreads)));
  } else if (deterministic_ && !meta_str(ck_meta_, "threads").empty()) {
    // Some CPU kernels (oneDNN convolutions, GEMM blocking) split their reductions by thread
    // count, so a bit-identical continuation needs the thread count the checkpoint was made with.
    mpx::set_num_threads(static_cast<int>(meta_int(ck_meta_, "threads", resume_, 1, kMaxThreads)));
  }
  // Without an explicit count the default fits a shared machine: this rank's share of the cores
  // less loader workers, and (one rank) the tuner drops to fewer threads while another process
  // holds a core. With several ranks the count stays fixed: a step's time then includes waiting
  // for the slowest rank, which says nothing about this rank's thread count.
  const bool threads_fixed = args_.given("--threads") || std::getenv("OMP_NUM_THREADS") != nullptr ||
                             (deterministic_ && !meta_str(ck_meta_, "threads").empty());
  if (!threads_fixed) mpx::set_num_threads(default_threads(workers_, ranks_.local_world));
  threads_ = mpx::get_num_threads();
  tuner_ = std::make_unique<ThreadTuner>(
      threads_, !threads_fixed && !deterministic_ && !device_.is_cuda() && !ranks_.distributed());
  if (deterministic_) {
    // The loader's order depends only on (seed, epoch) and every random draw is seeded; what
    // is left is the thread count (fixed above) and cuDNN's algorithm choice.
    cuda::cudnn_deterministic(true);
    cuda::cudnn_benchmark(false);
  } else if (device_.is_cuda()) {
    cuda::cudnn_benchmark(true);  // apex's main_amp.py: cudnn.benchmark = True
  }
  return true;
}

void TrainRun::open_data() {
  manual_seed(seed_);
  d_ = open_data_splits();
  arch_ = args_.str("--arch");
  if (arch_.empty()) arch_ = d_.image_size == 28 ? "small_cnn" : "resnet18";
  check_classifier_arch("mpx train", arch_);
  if (arch_ == "small_cnn" && d_.image_size != 28)
    throw UsageError("mpx train: -a small_cnn takes 28x28 images, " + dataset_ + " has " +
                     std::to_string(d_.image_size) + " px; pick another --arch (e.g. resnet18)");
  args_.set_default("--arch", arch_);
  // On a GPU the loaders pin their batches and the prefetchers copy them on a side stream
  // while the previous step computes; scaling and normalization run on the device.
  const bool pin = device_.is_cuda();
  auto train_opts = data::DataLoaderOptions(batch_).shuffle(true).drop_last(true).workers(workers_).seed(seed_).pin_memory(pin);
  auto test_opts = data::DataLoaderOptions(batch_).workers(workers_).seed(seed_).pin_memory(pin);
  if (ranks_.distributed()) {
    // Every rank draws the same permutation and takes every world-th image of it, so global batch
    // k is images [k B W, (k+1) B W) of the order one process would draw: the run sees what one
    // process with batch B W sees. The test split is cut without padding, each image once.
    train_opts.rank(ranks_.rank).world_size(ranks_.world);
    test_opts.sampler(std::make_shared<StrideSampler>(d_.test->size(), ranks_.rank, ranks_.world));
  }
  train_loader_ = std::make_unique<data::DataLoader>(d_.train, train_opts);
  test_loader_ = std::make_unique<data::DataLoader>(d_.test, test_opts);
  test_batches_ =
      std::make_unique<data::DevicePrefetcher>(*test_loader_, device_, d_.prefetch_options().memory_format(layout_));
  steps_per_epoch_ = train_loader_->size();
  if (steps_per_epoch_ == 0 && !evaluate_only_)
    MPX_ERROR("the training set has ", d_.train->size(), " images, fewer than one batch of ", batch_,
              ranks_.distributed() ? " per rank on each of " + std::to_string(ranks_.world) + " ranks" : "",
              "; lower --batch-size or raise --limit-train");
  // apex's main_amp.py: args.lr = args.lr * float(args.batch_size * args.world_size) / 256.
  base_lr_ = base_lr_flag_ * static_cast<double>(batch_ * ranks_.world) / 256.0;
}

void TrainRun::check_gpu_decode() {
  gpu_decode_ = args_.on("--gpu-decode");
  if (!gpu_decode_) return;
  Device d;
  try {
    d = Device(args_.str("--device"));
  } catch (const std::exception&) {
    return;  // parse_device names the malformed --device
  }
  if (!d.is_cuda())
    throw UsageError("mpx train: --gpu-decode decodes on the GPU the run trains on; add --device cuda (this run "
                     "trains on " + d.str() + ")");
  if (dataset_ != "imagefolder")
    throw UsageError("mpx train: --gpu-decode decodes JPEG files, so it needs --dataset imagefolder (this run has " +
                     dataset_ + ", which has no files to decode)");
  if (synthetic_)
    throw UsageError("mpx train: --gpu-decode has nothing to decode with --synthetic (random images); drop one of them");
  if (!data::have_nvjpeg())
    throw UsageError("mpx train: --gpu-decode needs nvJPEG, which this build lacks (see mpx info); run "
                     "tools/install-deps.sh, which fetches it where the CUDA toolkit has none, reconfigure with "
                     "-DMPX_NVJPEG=ON and rebuild, or drop --gpu-decode");
}

DataSplits TrainRun::open_data_splits() {
  DataSplits d = cli::open_data(dataset_, args_.str("--data"), DataPurpose::Classify, synthetic_, image_size_, seed_,
                                skip_bad_, gpu_decode_ ? std::optional<Device>(device_) : std::nullopt);
  d.train = limit(d.train, limit_train_);
  d.test = limit(d.test, limit_test_);
  return d;
}

void TrainRun::build_model() {
  net_ = models::create(arch_, models::ModelOptions()
                                   .num_classes(d_.num_classes)
                                   .in_channels(d_.channels)
                                   .small_input(d_.image_size <= 32));
  if (!pretrained_.empty()) load_pretrained(*net_.ptr(), pretrained_, arch_);
  // apex's main_amp.py converts before amp.initialize; the conversion keeps the modules, so
  // amp's casts and keep_batchnorm_fp32 treat them as the batch norms they are.
  if (sync_bn_) nn::convert_sync_batchnorm(*net_.ptr());
  net_.ptr()->to(device_);
  net_.ptr()->to(layout_);
  opt_ = std::make_unique<optim::SGD>(net_.ptr()->parameters(),
                                      optim::SGDOptions(base_lr_).momentum(momentum_).weight_decay(wd_));
  amp::reset();
  amp_opts_.verbosity(0);
  amp::initialize(net_, *opt_, amp_opts_);
  restore();
  model_ = net_;
  // A process that no launcher started trains the model itself: the wrapper would only add hooks and copies.
  if (ranks_.data_parallel()) model_ = nn::AnyModule(nn::DistributedDataParallel(net_));
}

void TrainRun::restore() {
  if (!resume_.empty()) {
    const int64_t ck_world =
        meta_str(ck_meta_, "world_size").empty() ? 1 : meta_int(ck_meta_, "world_size", resume_, 1, 1 << 20);
    const int64_t ck_batch =
        meta_str(ck_meta_, "flag.--batch-size").empty() ? batch_ : meta_int(ck_meta_, "flag.--batch-size", resume_, 1, kMaxMetaCount);
    const int64_t ck_spe = ck_world == ranks_.world || meta_str(ck_meta_, "steps_per_epoch").empty()
                               ? steps_per_epoch_
                               : meta_int(ck_meta_, "steps_per_epoch", resume_, 1, kMaxMetaCount);
    const ResumePoint at = restore_checkpoint(ck_meta_, resume_, ck_spe, [&] {
      get_module(*net_.ptr(), "model", ck_, resume_);
      get_optimizer(*opt_, "optimizer", ck_, ck_meta_, resume_);
    }, /*keep_finished_epoch=*/true);
    start_epoch_ = at.epoch;
    start_step_ = at.step;
    global_step_ = at.global_step;
    if (ck_world != ranks_.world) resume_other_world(ck_world, ck_batch, ck_spe);
    // The checkpoint holds the sums over all ranks; rank 0 carries them, the others add theirs.
    const bool carry = ranks_.leader();
    carried_loss_ = carry ? meta_num(ck_meta_, "partial.loss_sum", resume_, 0.0) : 0;
    carried_hits_ = carry ? meta_num(ck_meta_, "partial.hits", resume_, 0.0) : 0;
    carried_seen_ = carry ? meta_num(ck_meta_, "partial.seen", resume_, 0.0) : 0;
    carried_seconds_ = meta_num(ck_meta_, "partial.seconds", resume_, 0.0);
    // amp counts skips per process; the run's count so far travels in the checkpoint.
    if (!meta_str(ck_meta_, "skipped_steps").empty())
      skipped_before_ = meta_int(ck_meta_, "skipped_steps", resume_, 0, kMaxMetaCount);
    const std::string t = meta_str(ck_meta_, "threads");
    if (deterministic_ && !t.empty() && t != std::to_string(threads_))
      std::fprintf(stderr, "mpx train: warning: the checkpoint was written with %s threads, this run has %d; results "
                   "will differ in the last bits\n", t.c_str(), threads_);
  }
  if (start_epoch_flag_ >= 0) {
    start_epoch_ = start_epoch_flag_, start_step_ = 0, global_step_ = start_epoch_flag_ * steps_per_epoch_;
    carried_loss_ = carried_hits_ = carried_seen_ = carried_seconds_ = 0;
  }
}

// A checkpoint of another world size resumes (with a warning) rather than being refused: every
// world size draws the same permutation per epoch, so the images already trained on are a prefix
// of it, and the run goes on from the first global batch not yet begun (rounding down, so a few
// images may be seen twice). The global batch, hence the learning rate, follows the new world size.
void TrainRun::resume_other_world(int64_t ck_world, int64_t ck_batch, int64_t ck_spe) {
  const int64_t new_global = batch_ * ranks_.world;
  const int64_t done = start_step_ * ck_batch * ck_world;  // images of the epoch trained on
  int64_t step = start_step_ >= ck_spe ? steps_per_epoch_ : std::min(steps_per_epoch_, done / new_global);
  start_step_ = step;
  global_step_ = start_epoch_ * steps_per_epoch_ + step;
  const int64_t again = start_step_ >= steps_per_epoch_ ? 0 : done - step * new_global;
  if (ranks_.leader())
    std::fprintf(stderr,
                 "mpx train: warning: --resume %s was written by %lld rank%s, this run has %d: the global batch is now "
                 "%lld (learning rate %g), and epoch %lld goes on at step %lld of %lld%s; the run will not match an "
                 "uninterrupted one at either world size\n",
                 resume_.c_str(), static_cast<long long>(ck_world), ck_world == 1 ? "" : "s", ranks_.world,
                 static_cast<long long>(new_global), base_lr_, static_cast<long long>(start_epoch_ + 1),
                 static_cast<long long>(step), static_cast<long long>(steps_per_epoch_),
                 again > 0 ? (" (" + std::to_string(again) + " images of it are trained on again)").c_str() : "");
}

void TrainRun::announce() {
  const std::string dtype = args_.str("--dtype");
  const std::string batch_text = batch_per_rank_text(batch_, ranks_);
  std::string lr_batch = std::to_string(batch_);
  if (ranks_.distributed()) lr_batch += " x " + std::to_string(ranks_.world);
  std::printf("mpx train: %s on %s%s (%lld train / %lld test images%s), batch %s, lr %g (%g x %s/256, %s), %s%s%s, "
              "%s, %d thread%s%s%s%s\n",
              arch_.c_str(), dataset_.c_str(), detected_.empty() ? "" : " (detected)",
              static_cast<long long>(d_.train->size()), static_cast<long long>(d_.test->size()),
              synthetic_ ? ", synthetic" : "", batch_text.c_str(), base_lr_, base_lr_flag_, lr_batch.c_str(),
              schedule_.c_str(), amp::properties().opt_level.c_str(),
              amp::properties().opt_level == "O0" ? "" : (" " + dtype).c_str(), amp_recipe_note().c_str(),
              device_.str().c_str(), threads_,
              threads_ == 1 ? "" : "s", ranks_.distributed() ? " per rank" : "", tuner_->enabled() ? " (auto)" : "",
              deterministic_ ? ", deterministic" : "");
  if (sync_bn_) std::printf("synchronized batch norm (--sync-bn): statistics over the global batch\n");
  if (gpu_decode_)
    std::printf("JPEGs decoded on %s with nvJPEG (--gpu-decode); other images on the CPU\n", device_.str().c_str());
  const std::string classes = class_summary(d_, limit_train_, limit_test_);
  if (!classes.empty()) std::printf("%s\n", classes.c_str());
  if (d_.ignored_files > 0)
    std::printf("ignored %lld file%s without an image extension (.jpg .jpeg .png .bmp)\n",
                static_cast<long long>(d_.ignored_files), d_.ignored_files == 1 ? "" : "s");
  bad_list_ = ck_path_.empty() || !ranks_.leader() ? "" : (fs::path(out_) / "bad_images.txt").string();
  report_bad();
}

void TrainRun::report_bad() {
  const std::vector<std::string> bad = d_.unreadable();
  if (bad.size() == bad_reported_ || bad_list_.empty()) return;
  std::string text;
  for (const auto& l : bad) text += l + "\n";
  write_file_atomic(bad_list_, text);
  std::printf("skipping %zu unreadable image%s (--skip-bad-images); the list is in %s\n", bad.size(),
              bad.size() == 1 ? "" : "s", bad_list_.c_str());
  bad_reported_ = bad.size();
}

int TrainRun::evaluate_only() {
  const EvalResult r = evaluate_model();
  std::printf("evaluate: top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%lld images, %.1f s)\n", r.top1, r.top5, r.loss,
              static_cast<long long>(r.n), r.seconds);
  warn_nonfinite(r);
  return 0;
}

EvalResult TrainRun::evaluate_model() {
  // The unwrapped model: evaluation has no gradients to average, and its batch count may differ
  // by one between ranks. Rank 0's batch-norm statistics are the ones checkpointed.
  sync_buffers_from_rank0(*net_.ptr());
  return evaluate(net_, *test_batches_);
}

void TrainRun::save_checkpoint(int64_t epoch_done, int64_t step_in_epoch, double loss_sum, double hits, double seen,
                               double seconds) {
  if (!ranks_.leader()) return;
  TensorDict t;
  Metadata m;
  put_module(*net_.ptr(), "model", t);
  put_optimizer(*opt_, "optimizer", t, m);
  put_amp_and_rng(m);
  m["mpx.checkpoint"] = "train";
  m["mpx.version"] = MPX_VERSION_STRING;
  m["run.id"] = run_id_;
  for (const auto& f : kRunFlags) m["flag." + f] = args_.str(f);
  m["epoch"] = std::to_string(epoch_done);
  m["step_in_epoch"] = std::to_string(step_in_epoch);
  m["global_step"] = std::to_string(global_step_);
  m["steps_per_epoch"] = std::to_string(steps_per_epoch_);
  m["scheduler.name"] = schedule_;
  m["scheduler.step"] = std::to_string(global_step_);
  m["partial.loss_sum"] = num(loss_sum);
  m["partial.hits"] = num(hits);
  m["partial.seen"] = num(seen);
  m["partial.seconds"] = num(seconds);
  m["skipped_steps"] = std::to_string(skipped());
  m["threads"] = std::to_string(threads_);
  m["world_size"] = std::to_string(ranks_.world);
  save_checkpoint_file(t, m, ck_path_);
  last_saved_ = ck_path_ + (step_in_epoch == 0 ? ", end of epoch " + std::to_string(epoch_done)
                                                : ", epoch " + std::to_string(epoch_done + 1) + " step " +
                                                      std::to_string(step_in_epoch));
  report_bad();
}

}  // namespace mpx::cli
