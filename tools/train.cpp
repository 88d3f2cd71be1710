// `mpx train`: classification training with apex's main_amp.py flags, progress, metrics, checkpoints and exact resume.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numbers>

#include "tools/commands.h"
#include "tools/common.h"
#include "tools/metrics.h"
#include "tools/progress.h"
#include "tools/train.h"

namespace mpx::cli {

namespace fs = std::filesystem;
namespace F = nn::functional;

namespace {

// Flags whose values define the run: stored in every checkpoint, adopted on --resume when not
// given again, so `mpx train --resume FILE` alone continues the same run.
const std::vector<std::string> kRunFlags = {
    "--arch", "--dataset", "--data", "--batch-size", "--epochs", "--lr", "--momentum", "--weight-decay",
    "--schedule", "--opt-level", "--dtype", "--keep-batchnorm-fp32", "--loss-scale", "--seed",
    "--limit-train", "--limit-test", "--image-size", "--synthetic"};

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
  a.option({"--resume"}, "PATH", "continue from a checkpoint.safetensors (run flags default to the checkpoint's)")
      .flag({"-e", "--evaluate"}, "only evaluate the (resumed) model on the test split")
      .flag({"--deterministic"}, "bit-identical runs: fixed threads, seeded everything, deterministic cuDNN")
      .option({"--print-freq", "-p"}, "N", "log a line every N steps when stdout is not a terminal", "50")
      .option({"--prof"}, "N", "stop after N training steps (checkpointing the position), -1 = off", "-1")
      .option({"--device"}, "cpu|cuda[:i]", "where to train", "cpu")
      .option({"--seed"}, "N", "seed of the weights, the shuffle order and the augmentations", "0")
      .option({"--out"}, "DIR", "where metrics.csv/.jsonl, curves.svg and checkpoint.safetensors go", "out/train")
      .flag({"--synthetic"}, "random images of the data set's shape instead of the real ones (speed tests)")
      .flag({"--channels-last"}, "model and batches in channels-last (NHWC) layout, as Tensor Cores want (apex's flag)")
      .option({"--threads"}, "N", "CPU threads (OpenMP); default: OMP_NUM_THREADS or all cores")
      .option({"--limit-train"}, "N", "use only the first N training images (quick runs, tests); 0 = all", "0")
      .option({"--limit-test"}, "N", "use only the first N test images; 0 = all", "0")
      .option({"--image-size"}, "N", "image side for imagefolder and synthetic data", "224");
  return a;
}

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
  int64_t n = 0;
  double seconds = 0;
};

EvalResult evaluate(const nn::AnyModule& net, data::DevicePrefetcher& batches) {
  const auto t0 = std::chrono::steady_clock::now();
  net.ptr()->eval();
  NoGradGuard ng;
  EvalResult r;
  // Sums stay on the device until the end: no batch waits for the previous one.
  Tensor loss_sum, h1, h5;
  for (auto& batch : batches) {
    const Tensor& y = batch.target;
    Tensor logits = net(batch.data).to(kFloat32);
    const int64_t b = y.size(0);
    Tensor l = F::cross_entropy(logits, y).to(kFloat64) * static_cast<double>(b);
    auto [a1, a5] = topk_hits(logits, y);
    loss_sum = loss_sum.defined() ? loss_sum + l : l;
    h1 = h1.defined() ? h1 + a1 : a1;
    h5 = h5.defined() ? h5 + a5 : a5;
    r.n += b;
  }
  net.ptr()->train();
  if (r.n > 0) {
    const double n = static_cast<double>(r.n);
    r.loss = loss_sum.item<double>() / n;
    r.top1 = 100.0 * h1.item<double>() / n;
    r.top5 = 100.0 * h5.item<double>() / n;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
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
  if (!parse_resumable(args, argc, argv, "train", kRunFlags, {"--epochs", "--limit-test"}, ck_meta, ck)) return 0;
  const std::string resume = args.str("--resume");

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
  const bool synthetic = args.on("--synthetic");
  const MemoryFormat layout = args.on("--channels-last") ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  amp::Options amp_opts = amp_options(args, 1);
  const Device device = parse_device(args.str("--device"));
  const std::string out = args.str("--out");
  if (args.given("--threads")) {
    omp_set_num_threads(static_cast<int>(args.integer("--threads", 1)));
  } else if (deterministic && !meta_str(ck_meta, "threads").empty()) {
    // Some CPU kernels (oneDNN convolutions, GEMM blocking) split their reductions by thread
    // count, so a bit-identical continuation needs the thread count the checkpoint was made with.
    omp_set_num_threads(static_cast<int>(meta_num(ck_meta, "threads", resume)));
  }
  const int threads = omp_get_max_threads();
  if (deterministic) {
    // The loader's order depends only on (seed, epoch) and every random draw is seeded; what
    // is left is the thread count (fixed above) and cuDNN's algorithm choice.
    cuda::cudnn_deterministic(true);
    cuda::cudnn_benchmark(false);
  }

  // ---- data ----
  manual_seed(seed);
  DataSplits d = open_data(dataset, args.str("--data"), DataPurpose::Classify, synthetic, image_size, seed);
  d.train = limit(d.train, limit_train);
  d.test = limit(d.test, limit_test);
  std::string arch = args.str("--arch");
  if (arch.empty()) arch = d.image_size == 28 ? "small_cnn" : "resnet18";
  if (arch == "small_cnn" && d.image_size != 28)
    throw UsageError("-a small_cnn takes 28x28 images, " + dataset + " has " + std::to_string(d.image_size) +
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
  net.ptr()->to(device);
  net.ptr()->to(layout);
  optim::SGD opt(net.ptr()->parameters(), optim::SGDOptions(base_lr).momentum(momentum).weight_decay(wd));
  amp::reset();
  amp_opts.verbosity(0);
  amp::initialize(net, opt, amp_opts);

  int64_t start_epoch = 0, start_step = 0, global_step = 0;
  double carried_loss = 0, carried_hits = 0, carried_seen = 0, carried_seconds = 0;
  if (!resume.empty()) {
    const ResumePoint at = restore_checkpoint(ck_meta, resume, steps_per_epoch, [&] {
      get_module(*net.ptr(), "model", ck, resume);
      get_optimizer(opt, "optimizer", ck, ck_meta, resume);
    });
    start_epoch = at.epoch;
    start_step = at.step;
    global_step = at.global_step;
    carried_loss = meta_num(ck_meta, "partial.loss_sum", resume);
    carried_hits = meta_num(ck_meta, "partial.hits", resume);
    carried_seen = meta_num(ck_meta, "partial.seen", resume);
    carried_seconds = meta_num(ck_meta, "partial.seconds", resume);
    const std::string t = meta_str(ck_meta, "threads");
    if (deterministic && !t.empty() && t != std::to_string(threads))
      std::fprintf(stderr, "mpx train: warning: the checkpoint was written with %s threads, this run has %d; results "
                   "will differ in the last bits\n", t.c_str(), threads);
  }

  const std::string dtype = args.str("--dtype");
  std::printf("mpx train: %s on %s (%lld train / %lld test images%s), batch %lld, lr %g (%g x %lld/256, %s), %s%s, "
              "%s, %d thread%s%s\n",
              arch.c_str(), dataset.c_str(), static_cast<long long>(d.train->size()),
              static_cast<long long>(d.test->size()), synthetic ? ", synthetic" : "", static_cast<long long>(batch),
              base_lr, base_lr_flag, static_cast<long long>(batch), schedule.c_str(),
              amp::properties().opt_level.c_str(), amp::properties().opt_level == "O0" ? "" : (" " + dtype).c_str(),
              device.str().c_str(), threads, threads == 1 ? "" : "s", deterministic ? ", deterministic" : "");

  if (evaluate_only) {
    const EvalResult r = evaluate(net, test_batches);
    std::printf("evaluate: top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%lld images, %.1f s)\n", r.top1, r.top5, r.loss,
                static_cast<long long>(r.n), r.seconds);
    return 0;
  }
  if (!resume.empty()) {
    std::printf("resumed from %s: epoch %lld, step %lld of %lld\n", resume.c_str(), static_cast<long long>(start_epoch + 1),
                static_cast<long long>(start_step), static_cast<long long>(steps_per_epoch));
  }
  if (!epochs_left(start_epoch, epochs)) return 0;

  const std::string ck_path = prepare_out(out);
  MetricsLog log(out, "metrics");
  log.resume("epoch", static_cast<double>(start_epoch));  // keeps earlier epochs' rows, drops any later ones

  auto save_checkpoint = [&](int64_t epoch_done, int64_t step_in_epoch, double loss_sum, double hits, double seen,
                             double seconds) {
    TensorDict t;
    Metadata m;
    put_module(*net.ptr(), "model", t);
    put_optimizer(opt, "optimizer", t, m);
    put_amp_and_rng(m);
    m["mpx.checkpoint"] = "train";
    m["mpx.version"] = MPX_VERSION_STRING;
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
    m["threads"] = std::to_string(threads);
    save_tensors(t, ck_path, m);
  };

  install_interrupt_handler();
  const bool tty = Progress::stdout_is_tty();
  const auto run_start = std::chrono::steady_clock::now();
  int64_t iterations = 0;  // steps run by this process (for --prof)
  double best_top1 = -1;
  int64_t best_epoch = 0;
  for (const auto& [x, y] : log.column("epoch", "test_top1"))
    if (y > best_top1) best_top1 = y, best_epoch = static_cast<int64_t>(x);

  for (int64_t epoch = start_epoch; epoch < epochs; ++epoch) {
    const int64_t first = epoch == start_epoch ? start_step : 0;
    const EpochBatches ep(train_loader, d, epoch, first, device, layout);
    // The epoch's running sums live on the training device and are read only when shown, so
    // the host queues step after step without waiting for the GPU.
    const TensorOptions sum_opts = TensorOptions(kFloat64).device(device);
    Tensor loss_sum = scalar_tensor(first > 0 ? carried_loss : 0, sum_opts);
    Tensor hits = scalar_tensor(first > 0 ? carried_hits : 0, sum_opts);
    double seen = first > 0 ? carried_seen : 0;
    std::vector<std::pair<double, Tensor>> step_losses;  // (epoch position, loss) for the summary
    const double prior_seconds = first > 0 ? carried_seconds : 0;
    Progress bar(epoch + 1, epochs, steps_per_epoch, batch, print_freq, tty, first);
    int64_t step = first;
    bool stopped = false;
    for (auto& b : *ep.batches) {
      if ((prof >= 0 && iterations >= prof) || interrupted()) {
        stopped = true;
        break;
      }
      const double lr = lr_at(schedule, base_lr, global_step, steps_per_epoch, epochs);
      for (auto& g : opt.param_groups()) g.set_lr(lr);
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
      hits = hits + topk_hits(logits, yv).first;
      seen += static_cast<double>(n);
      ++step, ++global_step, ++iterations;
      bar.update_lazy(step, [&] {
        ProgressStats st;
        st.loss = loss_sum.item<double>() / seen;
        st.top1 = 100.0 * hits.item<double>() / seen;
        st.loss_scale = amp::properties().opt_level == "O0" ? 0 : amp::loss_scale(0);
        st.skipped = amp::skipped_steps(opt);
        return st;
      });
    }
    bar.finish();
    for (const auto& [x, l] : step_losses) summary->step_loss.emplace_back(x, l.item<double>());
    if (stopped) {
      const double secs = prior_seconds + bar.seconds();
      save_checkpoint(epoch, step, loss_sum.item<double>(), hits.item<double>(), seen, secs);
      if (interrupted()) {
        std::printf("interrupted at epoch %lld step %lld; checkpoint saved, continue with --resume %s\n",
                    static_cast<long long>(epoch + 1), static_cast<long long>(step), ck_path.c_str());
        return 130;
      }
      std::printf("Profiling ended at iteration %lld (epoch %lld step %lld); checkpoint %s\n",
                  static_cast<long long>(iterations), static_cast<long long>(epoch + 1), static_cast<long long>(step),
                  ck_path.c_str());
      return 0;
    }
    const double train_seconds = prior_seconds + bar.seconds();
    const double ips = static_cast<double>(steps_per_epoch * batch) / std::max(1e-9, train_seconds);
    const EvalResult r = evaluate(net, test_batches);
    const double train_loss = loss_sum.item<double>() / std::max(1.0, seen);
    const double train_top1 = 100.0 * hits.item<double>() / std::max(1.0, seen);
    std::printf("epoch %lld/%lld: train loss %.4f top-1 %.2f%% | test loss %.4f top-1 %.2f%% top-5 %.2f%% | %.0f img/s, "
                "%.1f s + eval %.1f s\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(epochs), train_loss, train_top1, r.loss, r.top1,
                r.top5, ips, train_seconds, r.seconds);
    std::fflush(stdout);
    if (r.top1 > best_top1) best_top1 = r.top1, best_epoch = epoch + 1;
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
                {"skipped_steps", static_cast<double>(amp::skipped_steps(opt))}});
    write_svg((fs::path(out) / "curves.svg").string(),
              "mpx train: " + arch + " on " + dataset + ", " + amp::properties().opt_level,
              {Panel{"loss", "epoch", "cross-entropy",
                     {Series{"train", log.column("epoch", "train_loss")}, Series{"test", log.column("epoch", "test_loss")}}},
               Panel{"accuracy", "epoch", "%",
                     {Series{"train top-1", log.column("epoch", "train_top1")},
                      Series{"test top-1", log.column("epoch", "test_top1")},
                      Series{"test top-5", log.column("epoch", "test_top5")}}}});
    save_checkpoint(epoch + 1, 0, 0, 0, 0, 0);
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (summary) {
    summary->arch = arch;
    summary->seconds = total;
    summary->best_top1 = best_top1;
    summary->skipped = amp::skipped_steps(opt);
    summary->loss_scale = amp::loss_scale(0);
    summary->train_loss = log.column("epoch", "train_loss");
    summary->test_loss = log.column("epoch", "test_loss");
    summary->test_top1 = log.column("epoch", "test_top1");
    summary->images_per_s = log.column("epoch", "images_per_s");
    summary->metrics_csv = log.csv_path();
  }
  std::printf("done in %s: best test top-1 %s%% (epoch %lld); metrics, curves.svg and checkpoint in %s\n",
              format_duration(total).c_str(), one_decimal(best_top1).c_str(), static_cast<long long>(best_epoch),
              out.c_str());
  return 0;
}

}  // namespace mpx::cli
