// `mpx dcgan`: apex's DCGAN example — two Adam optimizers, three losses on separate loss scalers, PNG sample grids; data-parallel under mpirun.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "tools/commands.h"
#include "tools/common.h"
#include "tools/metrics.h"
#include "tools/png.h"
#include "tools/progress.h"
#include "tools/ranks.h"
#include "tools/run_dir.h"
#include "tools/threads.h"

namespace mpx::cli {

namespace fs = std::filesystem;
namespace F = nn::functional;

namespace {

const std::vector<std::string> kRunFlags = {"--dataset", "--data", "--batch-size", "--epochs", "--lr", "--beta1",
                                            "--nz", "--ngf", "--ndf", "--opt-level", "--dtype", "--keep-batchnorm-fp32",
                                            "--loss-scale", "--master-weights", "--stochastic-rounding",
                                            "--low-precision-state", "--seed", "--limit-train", "--image-size",
                                            "--synthetic"};

Args make_args() {
  Args a("mpx dcgan", "mpx dcgan [flags] [DATA_DIR]");
  a.positional("DATA_DIR", "the data set's folder (same as --data)");
  a.option({"--dataset"}, "NAME", "fashion-mnist, mnist, cifar10, imagefolder or synthetic", "fashion-mnist")
      .option({"--data", "--dataroot"}, "DIR", "the data set's folder (fashion-mnist: /usr/share/datasets/fashion-mnist)")
      .option({"-b", "--batch-size"}, "N", "images per step and rank", "64")
      .option({"-j", "--workers"}, "N",
              "data loader threads; default: 0 for the in-memory data sets, 4 for imagefolder")
      .option({"--epochs", "--niter"}, "N", "epochs to train (in total, counting resumed ones)", "5")
      .option({"--lr"}, "X", "Adam learning rate of both networks (not scaled by the rank count, as in apex's example)",
              "0.0002")
      .option({"--beta1"}, "X", "Adam beta1", "0.5")
      .option({"--nz"}, "N", "latent vector size", "100")
      .option({"--ngf"}, "N", "generator width", "32")
      .option({"--ndf"}, "N", "discriminator width", "32")
      .option({"--image-size"}, "N", "image side for imagefolder (64 or 32) and synthetic", "64");
  add_amp_flags(a, "O1");
  a.option({"--resume"}, "PATH", "continue from a checkpoint.safetensors of mpx dcgan")
      .flag({"--deterministic"}, "bit-identical runs: fixed threads, seeded everything, deterministic cuDNN")
      .option({"--print-freq", "-p"}, "N", "log a line every N steps when stdout is not a terminal", "50")
      .option({"--prof"}, "N", "stop after N steps (writing samples and a checkpoint), -1 = off", "-1")
      .option({"--device"}, "cpu|cuda[:i]", "where to train", "cpu")
      .option({"--seed", "--manualSeed"}, "N", "seed of the weights, the noise and the shuffle order", "0")
      .option({"--out", "--outf"}, "DIR", "where samples_epochN.png, losses.csv/.jsonl/.svg and the checkpoint go",
              "out/dcgan")
      .flag({"--synthetic"}, "random images instead of the data set (speed tests)")
      .flag({"--overwrite"}, "replace another run's files in --out instead of refusing to start")
      .option({"--threads"}, "N", "CPU threads (OpenMP) per rank; default: OMP_NUM_THREADS, else this rank's share of the cores")
      .option({"--nproc-per-node", "--nproc_per_node"}, "N", "start N ranks on this machine by re-running this command under mpirun")
      .option({"--limit-train"}, "N", "use only the first N training images; 0 = all", "0");
  return a;
}

// An 8-column grid of images in [-1, 1] ([N, C, H, W]) as 8-bit pixels with 2-pixel gaps
// (torchvision's save_image(normalize=True) layout for the tanh range).
void save_grid(const Tensor& images, const std::string& path) {
  Tensor x = images.detach().to(Device::cpu(), kFloat32).contiguous();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), cols = std::min<int64_t>(8, n);
  const int64_t rows = (n + cols - 1) / cols, pad = 2;
  const int64_t W = cols * (w + pad) + pad, H = rows * (h + pad) + pad, oc = c == 1 ? 1 : 3;
  std::vector<uint8_t> px(static_cast<size_t>(W * H * oc), 0);
  const float* p = x.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t gy = pad + (i / cols) * (h + pad), gx = pad + (i % cols) * (w + pad);
    for (int64_t ch = 0; ch < oc; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t xx = 0; xx < w; ++xx) {
          const float v = p[((i * c + std::min(ch, c - 1)) * h + y) * w + xx];
          const float u = std::clamp((v + 1.0f) * 127.5f, 0.0f, 255.0f);
          px[static_cast<size_t>(((gy + y) * W + gx + xx) * oc + ch)] = static_cast<uint8_t>(std::lround(u));
        }
  }
  write_png(path, px, static_cast<int>(W), static_cast<int>(H), static_cast<int>(oc));
}

}  // namespace

int run_dcgan(int argc, char** argv) {
  const Ranks rk = join_ranks();
  Args args = make_args();
  Metadata ck_meta;
  TensorDict ck;
  if (!parse_resumable(args, argc, argv, "dcgan", kRunFlags, {"--epochs", "--limit-test"}, ck_meta, ck)) return 0;
  const std::string resume = args.str("--resume");
  const std::string dataset = args.choice("--dataset", {"fashion-mnist", "mnist", "cifar10", "imagefolder", "synthetic"});
  const int64_t batch = args.integer("--batch-size", 1), workers =
      args.str("--workers").empty() ? (dataset == "imagefolder" ? 4 : 0) : args.integer("--workers", 0, kMaxWorkers);
  const int64_t epochs = args.integer("--epochs", 1);
  const double lr = args.number("--lr", 0.0), beta1 = beta_flag(args, "--beta1");
  // Bounds far above DCGAN's 100/64/64 that keep the layers' weights allocatable (--nz 1e9 was a 256 GB request).
  const int64_t nz = args.integer("--nz", 1, 1 << 16), ngf = args.integer("--ngf", 1, 4096), ndf = args.integer("--ndf", 1, 4096);
  const int64_t print_freq = args.integer("--print-freq", 1), prof = prof_steps(args, "dcgan");
  const uint64_t seed = static_cast<uint64_t>(args.integer("--seed", 0));
  const int64_t limit_train = args.integer("--limit-train", 0);
  const bool deterministic = args.on("--deterministic"), synthetic = args.on("--synthetic");
  amp::Options amp_opts = amp_options(args, 3);
  const Device device = parse_device(args.str("--device"));
  const std::string out = args.str("--out");
  const std::string run_id = meta_str(ck_meta, "run.id").empty() ? new_run_id() : meta_str(ck_meta, "run.id");
  const RunFiles files{"dcgan", {"checkpoint.safetensors", "losses.csv", "losses.jsonl", "losses.svg"}, {"samples_epoch"}};
  if (args.given("--nproc-per-node"))  // mpx_main re-launches before this; here only under mpirun
    throw UsageError("mpx dcgan: --nproc-per-node starts mpirun itself; under mpirun drop it");
  std::string canonical;
  for (const auto& f : kRunFlags) canonical += f + "=" + args.str(f) + " ";
  for (const char* f : {"--prof", "--resume"}) canonical += std::string(f) + "=" + args.str(f) + " ";
  check_same_flags("mpx dcgan", canonical);
  // Rank 0 alone writes; the others only need the path for messages.
  const std::string ck_path = rk.leader() ? claim_out(out, files, run_id, resume, args.on("--overwrite"))
                                          : (fs::path(out) / "checkpoint.safetensors").string();
  if (args.given("--threads")) mpx::set_num_threads(static_cast<int>(args.integer("--threads", 1, kMaxThreads)));
  else if (deterministic && !meta_str(ck_meta, "threads").empty())
    mpx::set_num_threads(static_cast<int>(meta_int(ck_meta, "threads", resume, 1, kMaxThreads)));  // see train.cpp
  else if (rk.distributed()) mpx::set_num_threads(default_threads(workers, rk.local_world));
  if (deterministic) {
    cuda::cudnn_deterministic(true);
    cuda::cudnn_benchmark(false);
  }
  int64_t image_size = args.integer("--image-size", 8);

  manual_seed(seed);
  DataSplits d = open_data(dataset, args.str("--data"), DataPurpose::Generate, synthetic, image_size, seed);
  d.train = limit(d.train, limit_train);
  image_size = d.image_size;
  MPX_CHECK(image_size == 28 || image_size == 32 || image_size == 64, "mpx dcgan: the DCGAN models take 28, 32 or 64 px ",
            "images, the data are ", image_size, " px; use --image-size 64, 32 or 28");
  auto loader_opts =
      data::DataLoaderOptions(batch).shuffle(true).drop_last(true).workers(workers).seed(seed).pin_memory(device.is_cuda());
  if (rk.distributed()) loader_opts.rank(rk.rank).world_size(rk.world);  // a DistributedSampler shard per rank
  data::DataLoader loader(d.train, loader_opts);
  const int64_t steps_per_epoch = loader.size();
  MPX_CHECK(steps_per_epoch > 0, "the training set has ", d.train->size(), " images, fewer than one batch of ", batch,
            rk.distributed() ? " per rank on each of " + std::to_string(rk.world) + " ranks" : "",
            "; lower --batch-size or raise --limit-train");

  // The fixed noise comes first from the seeded generator, so a resumed run draws the same one.
  Tensor fixed_noise = randn({64, nz}).to(device);
  const auto mopts = models::ModelOptions().in_channels(d.channels).nz(nz).ngf(ngf).ndf(ndf).image_size(image_size);
  nn::AnyModule G = models::create("dcgan_generator", mopts), D = models::create("dcgan_discriminator", mopts);
  G.ptr()->to(device);
  D.ptr()->to(device);
  const auto adam = optim::AdamOptions(lr).betas(optim::Betas(beta1, 0.999));
  optim::Adam optD(D.ptr()->parameters(), adam), optG(G.ptr()->parameters(), adam);
  amp::reset();
  amp_opts.verbosity(0);
  // apex's DCGAN: amp.initialize([netD, netG], [optimizerD, optimizerG], num_losses=3).
  amp::initialize({D, G}, {optD, optG}, amp_opts);

  int64_t start_epoch = 0, start_step = 0, global_step = 0;
  if (!resume.empty()) {
    const ResumePoint at = restore_checkpoint(ck_meta, resume, steps_per_epoch, [&] {
      get_module(*G.ptr(), "G", ck, resume);
      get_module(*D.ptr(), "D", ck, resume);
      get_optimizer(optG, "optG", ck, ck_meta, resume);
      get_optimizer(optD, "optD", ck, ck_meta, resume);
    });
    start_epoch = at.epoch;
    start_step = at.step;
    global_step = at.global_step;
    const int64_t ck_world =
        meta_str(ck_meta, "world_size").empty() ? 1 : meta_int(ck_meta, "world_size", resume, 1, 1 << 20);
    if (ck_world != rk.world) {
      // As mpx train: every world size draws the same order, so the run goes on from the first
      // global batch not yet begun (rounding down: a few images may be trained on again).
      const int64_t done = start_step * batch * ck_world;
      start_step = std::min(steps_per_epoch, done / (batch * rk.world));
      global_step = start_epoch * steps_per_epoch + start_step;
      if (rk.leader())
        std::fprintf(stderr, "mpx dcgan: warning: --resume %s was written by %lld rank%s, this run has %d: epoch %lld "
                     "goes on at step %lld of %lld with a global batch of %lld; the run will not match an "
                     "uninterrupted one at either world size\n", resume.c_str(), static_cast<long long>(ck_world),
                     ck_world == 1 ? "" : "s", rk.world, static_cast<long long>(start_epoch + 1),
                     static_cast<long long>(start_step), static_cast<long long>(steps_per_epoch),
                     static_cast<long long>(batch * rk.world));
    }
  }
  // Data-parallel: each network is wrapped (after amp, as apex does). Each D loss is averaged in
  // its own backward, so each loss scaler checks gradients that are identical on every rank and
  // all ranks skip together; the gradients G's loss leaves in D are kept local (no_sync), since
  // optD.zero_grad() drops them unused.
  std::shared_ptr<nn::DistributedDataParallelImpl> ddp_g, ddp_d;
  nn::AnyModule Gm = G, Dm = D;
  if (rk.data_parallel()) {
    ddp_g = std::make_shared<nn::DistributedDataParallelImpl>(G);
    ddp_d = std::make_shared<nn::DistributedDataParallelImpl>(D);
    Gm = nn::AnyModule(ddp_g), Dm = nn::AnyModule(ddp_d);
  }
  auto d_local = [&] {
    return ddp_d ? std::optional<nn::DistributedDataParallelImpl::NoSyncGuard>(std::in_place, *ddp_d) : std::nullopt;
  };
  const int threads = mpx::get_num_threads();
  const std::string batch_text = batch_per_rank_text(batch, rk);
  std::printf("mpx dcgan: %s (%lld images, %lld px, %lld channel%s), batch %s, nz %lld ngf %lld ndf %lld, Adam lr %g, "
              "%s%s, 3 loss scalers, %s, %d thread%s%s\n",
              dataset.c_str(), static_cast<long long>(d.train->size()), static_cast<long long>(image_size),
              static_cast<long long>(d.channels), d.channels == 1 ? "" : "s", batch_text.c_str(),
              static_cast<long long>(nz), static_cast<long long>(ngf), static_cast<long long>(ndf), lr,
              amp::properties().opt_level.c_str(), amp_recipe_note().c_str(), device.str().c_str(), threads,
              threads == 1 ? "" : "s",
              rk.distributed() ? " per rank" : "");
  if (!epochs_left(start_epoch, epochs)) return 0;
  // Rank 0 alone keeps the loss log (its rows are averages over the ranks).
  MetricsLog log(out, "losses");
  if (rk.leader())
    log.resume("global_step", static_cast<double>(global_step),
               resume.empty() ? "" : (fs::path(resume).parent_path() / "losses.csv").string());

  auto save_checkpoint = [&](int64_t epoch_done, int64_t step_in_epoch) {
    if (!rk.leader()) return;
    TensorDict t;
    Metadata m;
    put_module(*G.ptr(), "G", t);
    put_module(*D.ptr(), "D", t);
    put_optimizer(optG, "optG", t, m);
    put_optimizer(optD, "optD", t, m);
    put_amp_and_rng(m);
    m["mpx.checkpoint"] = "dcgan";
    m["mpx.version"] = MPX_VERSION_STRING;
    for (const auto& f : kRunFlags) m["flag." + f] = args.str(f);
    m["epoch"] = std::to_string(epoch_done);
    m["step_in_epoch"] = std::to_string(step_in_epoch);
    m["global_step"] = std::to_string(global_step);
    m["threads"] = std::to_string(mpx::get_num_threads());
    m["run.id"] = run_id;
    m["world_size"] = std::to_string(rk.world);
    save_checkpoint_file(t, m, ck_path);
  };
  auto save_samples = [&](int64_t epoch1) {
    if (!rk.leader()) return;
    G.ptr()->eval();
    {
      NoGradGuard ng;
      save_grid(G(fixed_noise), (fs::path(out) / ("samples_epoch" + std::to_string(epoch1) + ".png")).string());
    }
    G.ptr()->train();
    write_svg((fs::path(out) / "losses.svg").string(), "mpx dcgan: " + dataset + ", " + amp::properties().opt_level,
              {Panel{"losses", "step", "BCE with logits",
                     {Series{"D (real + fake)", log.column("global_step", "loss_d")},
                      Series{"G", log.column("global_step", "loss_g")}}}});
  };

  install_interrupt_handler();
  const bool tty = Progress::stdout_is_tty();
  const auto run_start = std::chrono::steady_clock::now();
  int64_t iterations = 0;
  for (int64_t epoch = start_epoch; epoch < epochs; ++epoch) {
    const int64_t first = epoch == start_epoch ? start_step : 0;
    const EpochBatches ep(loader, d, epoch, first, device);
    Progress bar(epoch + 1, epochs, steps_per_epoch, batch * rk.world, print_freq, tty, first);
    int64_t step = first;
    double sum_d = 0, sum_g = 0;
    int64_t n_steps = 0;
    bool stopped = false;
    for (auto& b : *ep.batches) {
      // With several ranks a signal stops all of them at the same step (see mpx train).
      if ((prof >= 0 && iterations >= prof) || (rk.distributed() ? any_rank(interrupted()) : interrupted())) {
        stopped = true;
        break;
      }
      const Tensor& real = b.data;
      const int64_t bs = real.size(0);
      Tensor ones_t = ones({bs}, TensorOptions().device(device)), zeros_t = zeros({bs}, TensorOptions().device(device));
      // (1) D: maximize log D(x) + log(1 - D(G(z))), as two losses on their own scalers.
      optD.zero_grad();
      Tensor out_real = Dm(real).to(kFloat32);
      Tensor errD_real = F::binary_cross_entropy_with_logits(out_real, ones_t);
      amp::scale_loss(errD_real, optD, amp::ScaleLossOptions().loss_id(0)).backward();
      Tensor noise = randn({bs, nz}, TensorOptions().device(device));
      Tensor fake = Gm(noise);
      Tensor out_fake = Dm(fake.detach()).to(kFloat32);
      Tensor errD_fake = F::binary_cross_entropy_with_logits(out_fake, zeros_t);
      amp::scale_loss(errD_fake, optD, amp::ScaleLossOptions().loss_id(1)).backward();
      optD.step();
      // (2) G: maximize log D(G(z)), the third loss.
      optG.zero_grad();
      Tensor out_g = Dm(fake).to(kFloat32);
      Tensor errG = F::binary_cross_entropy_with_logits(out_g, ones_t);
      {
        const auto local = d_local();
        amp::scale_loss(errG, optG, amp::ScaleLossOptions().loss_id(2)).backward();
      }
      optG.step();

      // The logged numbers are means over the ranks (each saw its own images and noise).
      const std::vector<double> v = sum_over_ranks(
          {errD_real.item<double>() + errD_fake.item<double>(), errG.item<double>(), mean(sigmoid(out_real)).item<double>(),
           mean(sigmoid(out_g)).item<double>()});
      const double w = static_cast<double>(rk.world);
      const double ld_v = v[0] / w, lg_v = v[1] / w, d_x = v[2] / w, d_gz = v[3] / w;
      ++step, ++global_step, ++iterations, ++n_steps;
      sum_d += ld_v, sum_g += lg_v;
      if (rk.leader())
        log.append({{"epoch", static_cast<double>(epoch + 1)},
                    {"step", static_cast<double>(step)},
                    {"global_step", static_cast<double>(global_step)},
                    {"loss_d", ld_v},
                    {"loss_g", lg_v},
                    {"d_x", d_x},
                    {"d_g_z", d_gz},
                    {"scale_d_real", amp::loss_scale(0)},
                    {"scale_d_fake", amp::loss_scale(1)},
                    {"scale_g", amp::loss_scale(2)}});
      ProgressStats st;
      st.loss = (sum_d + sum_g) / static_cast<double>(n_steps);
      st.loss_scale = amp::properties().opt_level == "O0" ? 0 : amp::loss_scale(2);
      st.skipped = amp::skipped_steps(optD) + amp::skipped_steps(optG);
      char extra[96];
      std::snprintf(extra, sizeof extra, "D %.3f G %.3f D(x) %.2f D(G(z)) %.2f", sum_d / static_cast<double>(n_steps),
                    sum_g / static_cast<double>(n_steps), d_x, d_gz);
      st.extra = extra;
      bar.update(step, st);
    }
    bar.finish();
    save_samples(epoch + 1);
    if (stopped) {
      save_checkpoint(epoch, step);
      if (interrupted() || !(prof >= 0 && iterations >= prof)) {
        std::printf("interrupted by %s at epoch %lld step %lld; samples and checkpoint saved, continue with: mpx dcgan "
                    "--resume %s\n", interrupt_name().c_str(), static_cast<long long>(epoch + 1),
                    static_cast<long long>(step), ck_path.c_str());
        return interrupt_exit_code();
      }
      std::printf("Profiling ended at iteration %lld; wrote %s/samples_epoch%lld.png and %s\n",
                  static_cast<long long>(iterations), out.c_str(), static_cast<long long>(epoch + 1), ck_path.c_str());
      return 0;
    }
    std::printf("epoch %lld/%lld: loss D %.4f G %.4f, %.0f img/s, %.1f s; wrote samples_epoch%lld.png\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(epochs), sum_d / std::max<int64_t>(1, n_steps),
                sum_g / std::max<int64_t>(1, n_steps), bar.images_per_second(), bar.seconds(),
                static_cast<long long>(epoch + 1));
    std::fflush(stdout);
    save_checkpoint(epoch + 1, 0);
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  std::printf("done in %s: samples, losses.csv/.jsonl/.svg and checkpoint in %s\n", format_duration(total).c_str(),
              out.c_str());
  return 0;
}

}  // namespace mpx::cli
