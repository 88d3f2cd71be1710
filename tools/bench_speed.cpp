// `mpx bench`'s speed mode: each (model, level, dtype) row timed in windows, with memory, loss scale and the PyTorch peer.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>
#include <utility>

#include "tools/bench_internal.h"
#include "tools/gpt_parts.h"
#include "tools/metrics.h"

namespace mpx::cli::bench {

namespace fs = std::filesystem;
namespace F = nn::functional;

MemProbe::MemProbe(Device d) : dev(d) {
  if (!dev.is_cuda()) base = cpu::memory_stats().allocated;
}
void MemProbe::restart() const {
  if (dev.is_cuda()) {
    cuda::synchronize();
    cuda::reset_peak_memory_stats();
  } else {
    cpu::reset_peak_memory_stats();
  }
}
double MemProbe::peak_mib() const {
  const int64_t peak = dev.is_cuda() ? cuda::memory_stats().peak_allocated : cpu::memory_stats().peak_allocated - base;
  return static_cast<double>(peak) / (1024.0 * 1024.0);
}

namespace {

// Input geometry of the classifiers and the DCGAN at an image side.
int64_t channels_for(int64_t side) { return side == 28 ? 1 : 3; }
int64_t classes_for(int64_t side) { return side <= 32 ? 10 : 1000; }
int64_t dcgan_side(int64_t side) { return side == 28 ? 28 : side <= 32 ? 32 : 64; }
int64_t dcgan_width(int64_t side) { return side <= 32 ? 32 : 64; }

void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize();
}

}  // namespace

void time_windows(const SpeedConfig& c, const std::function<void()>& step, const MemProbe& mem, SpeedResult& r) {
  for (int64_t i = 0; i < c.warmup; ++i) step();
  sync(c.device);
  mem.restart();
  std::vector<double> secs;
  for (int64_t w = 0; w < c.windows; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < c.steps; ++i) step();
    sync(c.device);
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  r.peak_mib = mem.peak_mib();
  r.batch = c.batch;
  for (double s : secs) r.window_ips.push_back(static_cast<double>(c.batch * c.steps) / std::max(1e-12, s));
  std::sort(secs.begin(), secs.end());
  r.step_ms = 1000.0 * secs[secs.size() / 2] / static_cast<double>(c.steps);
  if (c.profile) {
    // One more window under the profiler, so its overhead never enters the timed ones; its
    // memory peak restarts so that the profile says which kernel reaches it.
    mem.restart();
    profiler::reset();
    profiler::start();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < c.steps; ++i) step();
    const auto issued = std::chrono::steady_clock::now();
    sync(c.device);
    const auto done = std::chrono::steady_clock::now();
    profiler::stop();
    // A host that issues the steps barely ahead of the device's finish is what limits speed.
    const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    char head[160];
    std::snprintf(head, sizeof head, "host issued %lld steps in %.1f ms, the device finished %.1f ms later\n",
                  static_cast<long long>(c.steps), ms(t0, issued), ms(issued, done));
    r.profile = head + profiler::report(20);
    profiler::reset();
  }
}

amp::Options level_options(const Variant& v, int num_losses) {
  return bench::level_options(v.level, v.dtype == "bf16" ? kBFloat16 : kFloat16, num_losses);
}

// What the optimizers keep per parameter element: the parameter, its f32 master and its state
// buffers (momentum, Adam's moments), in bytes; gradients, which every level has, not counted.
double state_bytes_per_element(const std::vector<optim::Optimizer*>& opts) {
  double bytes = 0, elements = 0;
  for (optim::Optimizer* o : opts)
    for (const Tensor& p : o->parameters()) {
      elements += static_cast<double>(p.numel());
      bytes += static_cast<double>(p.numel() * p.element_size());
      if (!o->has_state(p)) continue;
      const optim::ParamState& st = o->state(p);
      if (st.master.defined()) bytes += static_cast<double>(st.master.numel() * st.master.element_size());
      for (const auto& [name, b] : st.buffers)
        if (b.defined()) bytes += static_cast<double>(b.numel() * b.element_size());
    }
  return elements > 0 ? bytes / elements : NAN;
}

namespace {

SpeedResult bench_classifier(const std::string& model, const Variant& v, const SpeedConfig& c) {
  SpeedResult r;
  amp::reset();
  MemProbe mem(c.device);
  {
    manual_seed(c.seed);
    const int64_t side = c.image_size, ch = channels_for(side), classes = classes_for(side);
    MPX_CHECK(model != "small_cnn" || side == 28, "mpx bench: small_cnn takes 28x28 images; use --small-input or "
              "--image-size 28, or drop small_cnn from --models");
    nn::AnyModule net = models::create(
        model, models::ModelOptions().num_classes(classes).in_channels(ch).small_input(side <= 32));
    r.params = count_params(*net.ptr());
    net.ptr()->to(c.device);
    const MemoryFormat fmt = c.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    net.ptr()->to(fmt);
    const Tensor x = randn({c.batch, ch, side, side}).to(c.device).contiguous(fmt);
    const Tensor y = randint(0, classes, {c.batch}).to(c.device);
    Tensor loss;
    if (!c.graph) {
      // apex's recipe, as mpx train runs it.
      optim::SGD opt(net.ptr()->parameters(), optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4));
      amp::initialize(net, opt, level_options(v, 1));
      auto step = [&] {
        opt.zero_grad();
        loss = F::cross_entropy(net(x), y);  // f32 whatever the logits' dtype
        amp::scale_loss(loss, opt).backward();
        opt.step();
      };
      time_windows(c, step, mem, r);
      r.loss_scale = amp::loss_scale(0);
      r.skipped = static_cast<double>(amp::skipped_steps(opt));
      r.state_bytes = state_bytes_per_element({&opt});
    } else {
      // A captured step must not wait for the host. amp::scale_loss's apex path reports overflows
      // through host read-backs (event queries), which a capture forbids, so the graph runs
      // torch.amp's recipe: amp::initialize casts the model (O2/O3, masters in the optimizer),
      // O1 autocasts in the forward, and a GradScaler scales where the level's loss scale is dynamic.
      amp::initialize(net, level_options(v, 1));
      const amp::Properties props = amp::properties();
      optim::SGD opt(net.ptr()->parameters(), optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4));
      opt.set_master_weights(props.master_weights.value_or(false));
      opt.set_stochastic_rounding(props.stochastic_rounding,
                                  optim::StochasticRoundingOptions().low_precision_state(props.low_precision_state));
      amp::GradScaler scaler(amp::GradScalerOptions().enabled(props.dynamic_loss_scale));
      auto step = [&] {
        opt.zero_grad();
        loss = F::cross_entropy(net(x), y);  // f32 whatever the logits' dtype
        scaler.scale(loss).backward();
        scaler.step(opt);
        scaler.update();
      };
      for (int i = 0; i < 3; ++i) step();  // allocations, cuDNN/cuBLASLt plans and workspaces exist before capture
      sync(c.device);
      cuda::Graph g;
      g.capture_begin();
      step();
      g.capture_end();
      time_windows(c, [&] { g.replay(); }, mem, r);
      r.loss_scale = scaler.is_enabled() ? scaler.get_scale() : props.loss_scale;
      r.skipped = static_cast<double>(scaler.skipped_steps());
      r.state_bytes = state_bytes_per_element({&opt});
    }
    r.final_loss = loss.item<double>();
  }
  amp::reset();
  return r;
}

SpeedResult bench_dcgan(const Variant& v, const SpeedConfig& c) {
  MPX_CHECK(!c.graph, "mpx bench --cuda-graph: dcgan is not captured yet (its three loss scalers go through amp's "
            "host-reporting path); run dcgan without --cuda-graph or drop it from --models");
  SpeedResult r;
  amp::reset();
  MemProbe mem(c.device);
  {
    manual_seed(c.seed);
    const int64_t side = dcgan_side(c.image_size), ch = channels_for(side), width = dcgan_width(side), nz = 100;
    const auto mopts = models::ModelOptions().in_channels(ch).nz(nz).ngf(width).ndf(width).image_size(side);
    nn::AnyModule G = models::create("dcgan_generator", mopts), D = models::create("dcgan_discriminator", mopts);
    r.params = count_params(*G.ptr()) + count_params(*D.ptr());
    const MemoryFormat fmt = c.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    G.ptr()->to(c.device);
    D.ptr()->to(c.device);
    G.ptr()->to(fmt);
    D.ptr()->to(fmt);
    const auto adam = optim::AdamOptions(2e-4).betas(optim::Betas(0.5, 0.999));
    optim::Adam optD(D.ptr()->parameters(), adam), optG(G.ptr()->parameters(), adam);
    amp::initialize({D, G}, {optD, optG}, level_options(v, 3));
    const TensorOptions on = TensorOptions().device(c.device);
    const Tensor real = (rand({c.batch, ch, side, side}) * 2.0 - 1.0).to(c.device).contiguous(fmt);
    const Tensor ones_t = ones({c.batch}, on), zeros_t = zeros({c.batch}, on);
    Tensor errG;
    // One G+D step pair exactly as mpx dcgan (apex's DCGAN example) runs it.
    auto step = [&] {
      optD.zero_grad();
      Tensor errD_real = F::binary_cross_entropy_with_logits(D(real).to(kFloat32), ones_t);
      amp::scale_loss(errD_real, optD, amp::ScaleLossOptions().loss_id(0)).backward();
      Tensor fake = G(randn({c.batch, nz}, on));
      Tensor errD_fake = F::binary_cross_entropy_with_logits(D(fake.detach()).to(kFloat32), zeros_t);
      amp::scale_loss(errD_fake, optD, amp::ScaleLossOptions().loss_id(1)).backward();
      optD.step();
      optG.zero_grad();
      errG = F::binary_cross_entropy_with_logits(D(fake).to(kFloat32), ones_t);
      amp::scale_loss(errG, optG, amp::ScaleLossOptions().loss_id(2)).backward();
      optG.step();
    };
    time_windows(c, step, mem, r);
    // The smallest of the three scales: the one closest to overflow trouble.
    r.loss_scale = std::min({amp::loss_scale(0), amp::loss_scale(1), amp::loss_scale(2)});
    r.skipped = static_cast<double>(amp::skipped_steps(optD) + amp::skipped_steps(optG));
    r.state_bytes = state_bytes_per_element({&optD, &optG});
    r.final_loss = errG.item<double>();
  }
  amp::reset();
  return r;
}

}  // namespace

int run_speed(const Args& args) {
  const Device device = parse_device(args.str("--device"));
  const bool cpu = !device.is_cuda();
  if (args.on("--cuda-graph") && cpu)
    throw UsageError("--cuda-graph captures a CUDA training step; it needs --device cuda (this run is on the CPU)");
  if (args.on("--tf32") && cpu)
    throw UsageError("--tf32 chooses CUDA's Tensor Core math for f32; it needs --device cuda (this run is on the CPU)");
  const bool peer = args.on("--peer"), peer_compile = args.on("--peer-compile");
  if (peer_compile && !peer) throw UsageError("--peer-compile adds columns to --peer's: pass both");
  const bool small = args.on("--small-input") || cpu;
  std::vector<std::string> known = classifier_names();
  known.push_back("dcgan");
  for (const auto& g : lm_archs()) known.push_back(g);
  const auto models =
      split_list("--models", args.given("--models") ? args.str("--models") : cpu ? "resnet18,dcgan" : "resnet18,resnet50,vgg16,dcgan");
  check_items("--models", models, known);
  const bool has_gpt = std::any_of(models.begin(), models.end(), is_gpt);
  const auto levels = split_list(
      "--opt-levels", args.given("--opt-levels") ? args.str("--opt-levels") : cpu ? "O0,O1,O2,O3" : "O0,O1,O2,O3,O3-bnf32");
  check_items("--opt-levels", levels, kLevels);
  const auto dtypes = split_list("--dtype", args.str("--dtype"));
  check_items("--dtype", dtypes, {"f16", "bf16"});

  SpeedConfig c;
  c.device = device;
  c.graph = args.on("--cuda-graph");
  c.profile = args.on("--profile");
  c.tf32 = args.on("--tf32");
  if (c.profile && c.graph)
    throw UsageError("--profile times the kernels of eager steps; a CUDA graph replays them as one, drop one of the two");
  c.channels_last = args.given("--channels-last") ? args.choice("--channels-last", {"on", "off"}) == "on" : !cpu;
  c.batch = args.given("--batch") ? args.integer("--batch", 1) : cpu ? 32 : 128;
  c.gpt_batch = args.given("--batch") ? c.batch : cpu ? 16 : 8;
  c.steps = args.given("--steps") ? args.integer("--steps", 1) : cpu ? 3 : 10;
  c.warmup = args.given("--warmup") ? args.integer("--warmup", 0) : cpu ? 1 : 5;
  c.windows = args.integer("--windows", 1);
  const int64_t rounds = args.integer("--rounds", 1);
  if (rounds > 1 && !peer)
    throw UsageError("--rounds repeats each row alternately with the PyTorch peer; pass --peer too (without a peer, "
                     "more --windows measure the same)");
  c.image_size = args.given("--image-size") ? args.integer("--image-size", 8) : small ? 28 : 224;
  c.seed = static_cast<uint64_t>(args.integer("--seed", 0));
  const int threads = mpx::get_num_threads();
  const bool only_gpt = std::all_of(models.begin(), models.end(), is_gpt);
  std::string batch_text = std::to_string(only_gpt ? c.gpt_batch : c.batch);
  if (has_gpt && !only_gpt && c.gpt_batch != c.batch) batch_text += " (GPT: " + std::to_string(c.gpt_batch) + ")";
  const std::string mem_kind = cpu ? "CPU tensor bytes, peak of the timed steps" : "CUDA peak allocated in the timed steps";
  const fs::path out = args.str("--out");
  std::error_code ec;
  fs::create_directories(out, ec);
  MPX_CHECK(fs::is_directory(out), "--out ", out.string(), ": cannot create the folder (", ec.message(), ")");

  char images[96] = "";
  if (!only_gpt)
    std::snprintf(images, sizeof images, ", %s, %lld px (dcgan %lld px)", small ? "small-input models" : "full-size models",
                  static_cast<long long>(c.image_size), static_cast<long long>(dcgan_side(c.image_size)));
  std::printf("mpx bench: %s, batch %s%s, %lld warm-up + %lld windows x %lld steps%s%s, %d thread%s, synthetic data\n",
              device.str().c_str(), batch_text.c_str(), images, static_cast<long long>(c.warmup),
              static_cast<long long>(c.windows), static_cast<long long>(c.steps),
              c.graph ? ", CUDA graph replay" : "", c.tf32 ? ", f32 on TF32" : "", threads, threads == 1 ? "" : "s");
  if (has_gpt)
    std::printf("GPT rows: sequences of n_ctx random token ids, AdamW as mpx gpt, tokens/s = sequences/s x n_ctx\n");
  std::fflush(stdout);
  // Convolution algorithms timed once per shape, as the peer (torch.backends.cudnn.benchmark)
  // and apex's main_amp.py run them.
  if (device.is_cuda()) cuda::cudnn_benchmark(true);
  cuda::allow_tf32(c.tf32);

  struct Row {
    std::string model;
    Variant v;
    SpeedResult r;
    double median = NAN, lo = NAN, hi = NAN, speedup = NAN;
    PeerRow peer, compiled;  // PyTorch eager, and through torch.compile (--peer-compile)
    // Per round: mpx's median rate and its ratios to the peer's (eager, compiled) of that round.
    std::vector<double> ips, peer_ips, compiled_ips, ratio, cratio;
  };
  std::vector<Row> rows;
  std::ostringstream profile_log;
  // Rows in which cuDNN refused a fast kernel (same results, slower): said under the table.
  std::string fallback_notes;
  const auto vars = variants(levels, dtypes);
  // The peer runs right after each mpx row, so both meet the same moment of a machine whose speed
  // drifts (a shared VM's can move by half within minutes); with --rounds the whole sequence
  // repeats and each figure is the median over the rounds. A peer that cannot start is not retried.
  std::string peer_failure[2];
  bool peer_echoed[2] = {false, false};
  for (int64_t k = 0; k < rounds; ++k) {
    if (rounds > 1) std::printf("round %lld of %lld\n", static_cast<long long>(k + 1), static_cast<long long>(rounds));
    SpeedConfig ck = c;
    ck.profile = c.profile && k == 0;
    size_t next = 0;
    for (const auto& m : models) {
      // With the peer, a GPT's first row leaves its initial weights and batch for the peer to load.
      std::string init = peer && is_gpt(m) ? (out / (m + "_init.safetensors")).string() : "";
      for (const auto& v : vars) {
        if (k == 0) rows.push_back(Row{m, v});
        Row& row = rows[next++];
        std::printf("  %-10s %s %-4s ... ", m.c_str(), v.level.c_str(), v.dtype.c_str());
        std::fflush(stdout);
        const int64_t fallbacks = cuda::cudnn_fallbacks();
        SpeedResult res;
        try {
          res = is_gpt(m) ? bench_gpt(m, v, ck, std::exchange(init, "")) : m == "dcgan" ? bench_dcgan(v, ck)
                                                                                    : bench_classifier(m, v, ck);
        } catch (const mpx::Error& e) {
          amp::reset();
          MPX_ERROR("mpx bench ", m, " ", v.level, " ", v.dtype, ": ", e.what());
        }
        auto w = res.window_ips;
        std::sort(w.begin(), w.end());
        const double med = w[w.size() / 2];
        row.ips.push_back(med);
        if (k == 0) row.r = std::move(res);
        else row.r.window_ips.insert(row.r.window_ips.end(), w.begin(), w.end());
        if (row.r.seq_len > 0)
          std::printf("%s tokens/s (%s sequences/s)\n", rate(med * static_cast<double>(row.r.seq_len)).c_str(),
                      rate(med).c_str());
        else
          std::printf("%s images/s\n", rate(med).c_str());
        if (const int64_t n = cuda::cudnn_fallbacks() - fallbacks; n > 0 && k == 0)
          fallback_notes += m + " " + v.level + " " + v.dtype + ": " + std::to_string(n) +
                            " cuDNN fallbacks to slower kernels; the last: " + cuda::cudnn_last_fallback() + "\n";
        if (ck.profile) {
          std::printf("\n  kernels of %s %s %s, %lld steps (wall time on the CPU, event time on CUDA):\n%s\n", m.c_str(),
                      v.level.c_str(), v.dtype.c_str(), static_cast<long long>(c.steps), row.r.profile.c_str());
          profile_log << "## " << m << " " << v.level << " " << v.dtype << ", " << c.steps << " steps\n\n```\n"
                      << row.r.profile << "```\n\n";
        }
        for (bool compiled : {false, true}) {
          if (!peer || (compiled && !peer_compile)) break;
          PeerRow& slot = compiled ? row.compiled : row.peer;
          std::string& failure = peer_failure[compiled];
          if (!peer_level(v.level)) {
            slot.status = kNoPeerRecipe;
            continue;
          }
          if (!failure.empty()) {
            slot.status = "peer failed";
            continue;
          }
          // O0's row is f32 whatever the dtype; the peer derives it from a low dtype as mpx does.
          const auto pr = run_peer(args, {m}, {v.level}, {v.level == "O0" ? dtypes.front() : v.dtype}, ck, threads,
                                   compiled, failure, !std::exchange(peer_echoed[compiled], true) || ck.profile);
          const auto it = pr.find(m + "/" + v.level + "/" + v.dtype);
          if (it == pr.end()) {
            slot.status = failure.empty() ? "the peer reported no such row" : "peer failed";
            if (!failure.empty()) std::fprintf(stderr, "mpx bench: warning: %s\n", failure.c_str());
            continue;
          }
          const PeerRow& p = it->second;
          if (k == 0) {
            slot = p;
          } else {
            slot.ips_min = std::fmin(slot.ips_min, p.ips_min), slot.ips_max = std::fmax(slot.ips_max, p.ips_max);
            slot.peak_mib = std::fmax(slot.peak_mib, p.peak_mib);
          }
          (compiled ? row.compiled_ips : row.peer_ips).push_back(p.ips);
          (compiled ? row.cratio : row.ratio).push_back(med / p.ips);
          std::printf("%22sPyTorch%s %s %s/s: mpx/PyTorch %.2f\n", "", compiled ? " compiled" : "",
                      rate(row.r.seq_len > 0 ? p.ips * static_cast<double>(row.r.seq_len) : p.ips).c_str(),
                      row.r.seq_len > 0 ? "tokens" : "images", med / p.ips);
        }
        std::fflush(stdout);
      }
    }
  }
  const auto median_of = [](std::vector<double> v) -> double {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  for (auto& r : rows) {
    const auto [lo, hi] = std::minmax_element(r.r.window_ips.begin(), r.r.window_ips.end());
    r.median = median_of(r.ips), r.lo = *lo, r.hi = *hi;
    if (rounds > 1) {
      r.r.step_ms = 1000.0 * static_cast<double>(r.r.batch) / r.median;
      r.peer.ips = median_of(r.peer_ips), r.compiled.ips = median_of(r.compiled_ips);
    }
  }
  // Speed-up over O0 of the same model (only when O0 ran).
  for (auto& r : rows)
    for (const auto& o : rows)
      if (o.model == r.model && o.v.level == "O0") r.speedup = r.median / o.median;

  if (peer) {
    std::map<std::string, std::pair<int64_t, int64_t>> params;
    for (const auto& r : rows)
      if (r.peer.params > 0) params[r.model] = {r.r.params, r.peer.params};
    for (const auto& [m, pp] : params)
      std::printf("parameters %s: mpx %lld, PyTorch %lld%s\n", m.c_str(), static_cast<long long>(pp.first),
                  static_cast<long long>(pp.second), pp.first == pp.second ? " (match)" : " (MISMATCH: the models differ)");
    // GPT rows start from the same weights and batch on both sides, so their losses must agree
    // (closely at O0; low precision rounds differently in each framework). --profile's extra
    // window trains mpx's model further than the peer's.
    for (const auto& r : rows)
      if (r.r.seq_len > 0 && std::isfinite(r.peer.final_loss) && !c.profile)
        std::printf("final loss %s %s %s after %lld steps: mpx %.6f, PyTorch %.6f (difference %.2g)\n", r.model.c_str(),
                    r.v.level.c_str(), r.v.dtype.c_str(), static_cast<long long>(c.warmup + c.windows * c.steps),
                    r.r.final_loss, r.peer.final_loss, r.r.final_loss - r.peer.final_loss);
  }

  // A GPT sample is a sequence: with GPT rows the per-sample rate is named samples/s and a
  // tokens/s column (sequences/s x n_ctx, "-" for image rows) comes next to it.
  const std::string unit = has_gpt ? "samples/s" : "images/s", per = has_gpt ? " samples/s" : " img/s";
  const auto tokens = [](const Row& r, double v) {
    return r.r.seq_len > 0 ? v * static_cast<double>(r.r.seq_len) : NAN;
  };
  Table t;
  t.head = {"model", "level", "dtype", "batch", unit, "min-max"};
  if (has_gpt) t.head.push_back("tokens/s");
  t.head.insert(t.head.end(), {"step ms", "peak MiB", "state B/param", "loss scale", "skipped", "vs O0"});
  if (peer) t.head.push_back("PyTorch" + per);
  if (peer && has_gpt) t.head.push_back("PyTorch tok/s");
  if (peer) t.head.insert(t.head.end(), {"mpx/PyTorch", "best windows", "PyTorch MiB"});
  if (peer_compile) t.head.insert(t.head.end(), {"compiled" + per, "mpx/compiled"});
  std::vector<Record> recs;
  std::vector<std::string> peer_notes;
  std::vector<Bar> bars;
  // PyTorch's rate, or n/a with a numbered note underneath (the reasons are long).
  auto peer_cell = [&](const PeerRow& p) {
    if (std::isfinite(p.ips)) return rate(p.ips);
    auto it = std::find(peer_notes.begin(), peer_notes.end(), p.status);
    if (it == peer_notes.end()) it = peer_notes.insert(peer_notes.end(), p.status);
    return "n/a [" + std::to_string(it - peer_notes.begin() + 1) + "]";
  };
  for (const auto& r : rows) {
    const double ratio = median_of(r.ratio), cratio = median_of(r.cratio);
    // A second reading for a machine that only ever slows runs down: mpx's fastest window over
    // the peer's fastest.
    const double best = r.hi / r.peer.ips_max;
    // With rounds, the ratio is the median of the rounds' own ratios and its spread is shown.
    const auto ratio_cell = [&](double x, const std::vector<double>& per_round) {
      if (per_round.size() < 2) return fixed(x, 2);
      const auto [lo, hi] = std::minmax_element(per_round.begin(), per_round.end());
      return fixed(x, 2) + " (" + fixed(*lo, 2) + "-" + fixed(*hi, 2) + ")";
    };
    std::vector<std::string> cells = {r.model, r.v.level, r.v.dtype, std::to_string(r.r.batch), rate(r.median),
                                      rate(r.lo) + "-" + rate(r.hi)};
    if (has_gpt) cells.push_back(r.r.seq_len > 0 ? rate(tokens(r, r.median)) : "-");
    cells.insert(cells.end(), {fixed(r.r.step_ms, 1), fixed(r.r.peak_mib, 0), fixed(r.r.state_bytes, 1), fixed(r.r.loss_scale, 0),
                               fixed(r.r.skipped, 0), std::isfinite(r.speedup) ? fixed(r.speedup, 2) + "x" : "n/a"});
    if (peer) {
      cells.push_back(peer_cell(r.peer));
      if (has_gpt) cells.push_back(r.r.seq_len == 0 ? "-" : rate(tokens(r, r.peer.ips)));
      cells.push_back(ratio_cell(ratio, r.ratio));
      cells.push_back(fixed(best, 2));
      cells.push_back(std::isfinite(r.peer.peak_mib) ? fixed(r.peer.peak_mib, 0) : "n/a");
    }
    if (peer_compile) {
      cells.push_back(peer_cell(r.compiled));
      cells.push_back(ratio_cell(cratio, r.cratio));
    }
    t.rows.push_back(cells);
    recs.push_back({text_cell("model", r.model), text_cell("level", r.v.level), text_cell("dtype", r.v.dtype),
                    num_cell("batch", static_cast<double>(r.r.batch)),
                    num_cell("image_size", r.r.seq_len > 0 ? NAN : static_cast<double>(r.model == "dcgan"
                                                                     ? dcgan_side(c.image_size) : c.image_size)),
                    num_cell("seq_len", r.r.seq_len > 0 ? static_cast<double>(r.r.seq_len) : NAN),
                    num_cell("images_per_s", r.median), num_cell("images_per_s_min", r.lo),
                    num_cell("images_per_s_max", r.hi), num_cell("tokens_per_s", tokens(r, r.median)),
                    num_cell("tokens_per_s_min", tokens(r, r.lo)), num_cell("tokens_per_s_max", tokens(r, r.hi)),
                    num_cell("step_ms", r.r.step_ms),
                    num_cell("peak_mem_mib", r.r.peak_mib), num_cell("state_bytes_per_param", r.r.state_bytes),
                    num_cell("loss_scale", r.r.loss_scale),
                    num_cell("skipped_steps", r.r.skipped), num_cell("speedup_vs_O0", r.speedup),
                    num_cell("final_loss", r.r.final_loss), num_cell("params", static_cast<double>(r.r.params)),
                    num_cell("peer_images_per_s", r.peer.ips), num_cell("peer_images_per_s_min", r.peer.ips_min),
                    num_cell("peer_images_per_s_max", r.peer.ips_max),
                    num_cell("peer_tokens_per_s", tokens(r, r.peer.ips)),
                    num_cell("peer_peak_mem_mib", r.peer.peak_mib), num_cell("peer_final_loss", r.peer.final_loss),
                    num_cell("peer_params", static_cast<double>(r.peer.params)), num_cell("mpx_over_peer", ratio),
                    text_cell("peer_status", peer ? r.peer.status : "not run"),
                    num_cell("peer_compiled_images_per_s", r.compiled.ips),
                    num_cell("peer_compiled_peak_mem_mib", r.compiled.peak_mib),
                    num_cell("mpx_over_peer_compiled", cratio), text_cell("peer_compiled_status", r.compiled.status),
                    num_cell("rounds", static_cast<double>(r.ips.size())),
                    num_cell("mpx_over_peer_min", r.ratio.empty() ? NAN : *std::min_element(r.ratio.begin(), r.ratio.end())),
                    num_cell("mpx_over_peer_max", r.ratio.empty() ? NAN : *std::max_element(r.ratio.begin(), r.ratio.end())),
                    num_cell("mpx_over_peer_best", best)});
    bars.push_back({r.model, r.v.level + " " + r.v.dtype, r.median, r.lo, r.hi, r.peer.ips});
  }
  const std::string table = t.aligned();
  std::printf("\n%s", table.c_str());
  std::string notes;
  for (size_t i = 0; i < peer_notes.size(); ++i) notes += "[" + std::to_string(i + 1) + "] PyTorch: " + peer_notes[i] + "\n";
  std::printf("%s%s", notes.c_str(), fallback_notes.c_str());
  if (peer && cpu)
    std::printf("PyTorch MiB: what lives between steps plus the step's largest growth in the allocations torch's "
                "profiler records, in time order (a lower bound; torch has no CPU allocator statistics)\n");
  std::printf("peak MiB: %s; state B/param: bytes per parameter element of the weights, f32 masters and "
              "optimizer state (not gradients); loss scale: amp's at the end (dcgan: the smallest of its three); vs O0: %s over "
              "O0's of the same model\n", mem_kind.c_str(), unit.c_str());
  if (has_gpt)
    std::printf("samples/s: images/s for image models, sequences/s for GPT rows; tokens/s: sequences/s x n_ctx\n");

  const std::string& cmdline = command_line();
  const std::vector<std::pair<std::string, std::string>> info = {
      {"mpx_version", MPX_VERSION_STRING}, {"date", today()}, {"device", device.str()},
      {"threads", std::to_string(threads)}, {"memory", mem_kind}, {"command", cmdline}};
  write_records(out.string(), "bench", recs, info);
  std::ostringstream md;
  md << "# mpx bench\n\n" << today() << ", `" << cmdline << "`, " << device.str() << ", " << threads
     << " thread(s), batch " << batch_text
     << ", synthetic data, " << c.warmup << " warm-up steps then " << c.windows << " windows of " << c.steps << " steps ("
     << unit << ": median, min-max over the windows" << (has_gpt ? "; tokens/s: sequences/s x n_ctx" : "") << ")"
     << (peer ? "; the peer ran right after each mpx row" : "")
     << (rounds > 1 ? ", in " + std::to_string(rounds) + " rounds: rates are medians over the rounds, mpx/PyTorch the "
                      "median of the rounds' ratios (their range in brackets)" : std::string())
     << (peer ? "; best windows: mpx's fastest window over PyTorch's" : "")
     << (c.tf32 ? "; f32 convolutions and matrix products on TF32, mpx's and the peer's" : "") << ". Peak memory: " << mem_kind
     << ".\n\n"
     << t.markdown() << "\n";
  for (size_t i = 0; i < peer_notes.size(); ++i) md << "[" << i + 1 << "] PyTorch: " << peer_notes[i] << "  \n";
  if (!fallback_notes.empty()) md << "\n" << fallback_notes;
  write_file_atomic((out / "bench.md").string(), md.str());
  write_file_atomic((out / "bench.svg").string(),
                    render_bars("mpx bench: " + unit + " per opt level (" + device.str() + ", batch " + batch_text + ")",
                                unit, "PyTorch", models, bars,
                                "bars: mpx median " + unit + " (whiskers: min-max over the windows); black ticks: "
                                "PyTorch's median (--peer)"));
  if (c.profile) write_file_atomic((out / "profile.md").string(), "# mpx bench --profile\n\n" + profile_log.str());
  std::printf("wrote bench.csv, bench.json, bench.md%s and bench.svg in %s\n", c.profile ? ", profile.md" : "",
              out.string().c_str());
  return 0;
}

}  // namespace mpx::cli::bench
