// `mpx bench`: O0-O3 speed table (images/s, memory, loss scale, PyTorch ratio) and accuracy table (via mpx train) with CSV/JSON/Markdown/SVG output.
#include <sys/wait.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>

#include "tools/commands.h"
#include "tools/common.h"
#include "tools/metrics.h"
#include "tools/train.h"

#ifndef MPX_PEER_SCRIPT
#define MPX_PEER_SCRIPT "bench/peer_bench.py"
#endif

namespace mpx::cli {

namespace fs = std::filesystem;
namespace F = nn::functional;

namespace {

// The command line as given, for the output files' provenance.
std::string g_cmdline;

Args make_args() {
  Args a("mpx bench", "mpx bench [--accuracy] [flags]");
  a.option({"--models"}, "LIST",
           "comma-separated models: resnet18/34/50/101/152, resnet20, vgg11..vgg19[_bn], alexnet, small_cnn, dcgan "
           "(default: resnet18,dcgan on the CPU, resnet18,resnet50,vgg16,dcgan on CUDA; accuracy: small_cnn)")
      .option({"--opt-levels"}, "LIST",
              "comma-separated apex opt levels; O3-bnf32 is O3 with keep_batchnorm_fp32=True (apex's fastest recipe) "
              "(default: O0,O1,O2,O3; on CUDA also O3-bnf32)")
      .option({"--dtype"}, "LIST", "low precision(s) of O1-O3: f16, bf16 or f16,bf16 (O0 always runs f32 once)", "f16")
      .option({"--device"}, "cpu|cuda[:i]", "where to run", "cpu")
      .option({"--batch", "-b"}, "N", "images per step (default: 32 on the CPU, 128 on CUDA; accuracy: 128)")
      .option({"--steps"}, "N", "timed steps per window (default: 3 on the CPU, 10 on CUDA)")
      .option({"--warmup"}, "N", "untimed steps before the windows (default: 1 on the CPU, 5 on CUDA)")
      .option({"--windows"}, "N", "timed windows; images/s is their median, the spread their min-max", "3")
      .option({"--image-size"}, "N", "input side (default: 28 with --small-input or on the CPU, else 224 and 64 for dcgan)")
      .flag({"--small-input"}, "28x28 one-channel inputs and the models' small-input variants (default on the CPU)")
      .flag({"--cuda-graph"}, "capture one training step as a CUDA graph and time its replays (CUDA only)")
      .flag({"--profile"}, "after the timed windows, one more window under mpx::profiler: per-op kernel time per row "
                           "(printed and written to profile.md)")
      .option({"--channels-last"}, "on|off",
              "models and inputs in channels-last (NHWC) layout, as Tensor Cores want (default: on for CUDA, off on "
              "the CPU; the peer follows)")
      .option({"--out"}, "DIR", "where bench.csv/.json/.md/.svg (or accuracy.*) go", "out/bench")
      .option({"--seed"}, "N", "seed of the weights and the synthetic data (the same for every level)", "0")
      .option({"--threads"}, "N", "CPU threads (OpenMP; the peer gets the same); default: OMP_NUM_THREADS or all cores")
      .flag({"--peer"}, "also run bench/peer_bench.py (PyTorch) on the same rows: speed mode adds mpx/PyTorch ratios, "
            "accuracy mode PyTorch's top-1 and loss with the same recipe")
      .flag({"--peer-compile"}, "speed mode: with --peer, also time PyTorch through torch.compile (PyTorch 2) and add "
            "its columns")
      .option({"--python"}, "PATH", "the python that runs the peer (it needs torch)", "python3")
      .option({"--peer-script"}, "PATH", "the peer script", MPX_PEER_SCRIPT)
      .flag({"--accuracy"}, "accuracy mode: train each level with mpx train from the same seed and compare")
      .option({"--epochs"}, "N", "accuracy mode: epochs per level", "8")
      .option({"--dataset"}, "NAME", "accuracy mode: fashion-mnist, mnist, cifar10, imagefolder or synthetic",
              "fashion-mnist")
      .option({"--data"}, "DIR", "accuracy mode: the data set's folder (as mpx train --data)")
      .option({"--lr"}, "X", "accuracy mode: base learning rate (as mpx train --lr)", "0.1")
      .option({"--limit-train"}, "N", "accuracy mode: use only the first N training images; 0 = all", "0")
      .option({"--limit-test"}, "N", "accuracy mode: use only the first N test images; 0 = all", "0");
  return a;
}

std::vector<std::string> split_list(const std::string& flag, const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (cur.empty()) throw UsageError(flag + " expects a comma-separated list without empty items, got '" + s + "'");
      out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  return out;
}

// Every item must be one of `known`; a typo gets a suggestion.
void check_items(const std::string& flag, const std::vector<std::string>& items, const std::vector<std::string>& known) {
  for (const auto& it : items) {
    if (std::find(known.begin(), known.end(), it) != known.end()) continue;
    const std::string near = closest(it, known);
    std::string all;
    for (const auto& k : known) all += (all.empty() ? "" : ",") + k;
    throw UsageError(flag + ": unknown item '" + it + "'" + (near.empty() ? "" : " (did you mean " + near + "?)") +
                     "; choose from " + all);
  }
}

// O3 with keep_batchnorm_fp32=True, apex's fastest ImageNet recipe, as a level of its own.
constexpr const char* kO3BnF32 = "O3-bnf32";
const std::vector<std::string> kLevels = {"O0", "O1", "O2", "O3", kO3BnF32};

// One (level, dtype) pair to run: O0 runs once in f32 whatever --dtype says.
struct Variant {
  std::string level, dtype;
};
std::vector<Variant> variants(const std::vector<std::string>& levels, const std::vector<std::string>& dtypes) {
  std::vector<Variant> v;
  for (const auto& l : levels) {
    if (l == "O0") {
      v.push_back({"O0", "f32"});
      continue;
    }
    for (const auto& d : dtypes) v.push_back({l, d});
  }
  return v;
}

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}
// Images/s with a sensible number of digits for tiny CPU and huge GPU figures alike.
std::string rate(double v) { return !std::isfinite(v) ? "n/a" : fixed(v, v < 100 ? 1 : 0); }

std::string today() {
  const std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d", std::localtime(&t));
  return b;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o + "\"";
}

// A text table: a header row and string cells, written aligned (terminal) or as Markdown.
struct Table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  std::string aligned() const {
    std::vector<size_t> w(head.size());
    for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
    std::ostringstream o;
    auto line = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < r.size(); ++i) {
        // Text columns (the first three) left-aligned, numbers right-aligned.
        const std::string pad(w[i] - r[i].size(), ' ');
        o << (i ? "  " : "") << (i < 3 ? r[i] + pad : pad + r[i]);
      }
      o << "\n";
    };
    line(head);
    size_t total = 0;
    for (size_t x : w) total += x + 2;
    o << std::string(total - 2, '-') << "\n";
    for (const auto& r : rows) line(r);
    return o.str();
  }
  std::string markdown() const {
    std::ostringstream o;
    o << "|";
    for (const auto& h : head) o << " " << h << " |";
    o << "\n|";
    for (size_t i = 0; i < head.size(); ++i) o << (i < 3 ? "---|" : "---:|");
    o << "\n";
    for (const auto& r : rows) {
      o << "|";
      for (const auto& c : r) o << " " << c << " |";
      o << "\n";
    }
    return o.str();
  }
};

// Named columns of one result row, in order, each a number or a text.
struct Cell {
  std::string name;
  double num = NAN;
  std::string text;
  bool is_text = false;
};
using Record = std::vector<Cell>;
Cell num_cell(std::string n, double v) { return Cell{std::move(n), v, "", false}; }
Cell text_cell(std::string n, std::string t) { return Cell{std::move(n), NAN, std::move(t), true}; }

void write_csv_json(const fs::path& dir, const std::string& stem, const std::vector<Record>& recs,
                    const std::vector<std::pair<std::string, std::string>>& info) {
  std::ostringstream csv, js;
  for (size_t r = 0; r < recs.size(); ++r) {
    if (r == 0) {
      for (size_t i = 0; i < recs[r].size(); ++i) csv << (i ? "," : "") << recs[r][i].name;
      csv << "\n";
    }
    for (size_t i = 0; i < recs[r].size(); ++i) {
      const Cell& c = recs[r][i];
      std::string t = c.is_text ? c.text : format_number(c.num, false);
      std::replace(t.begin(), t.end(), ',', ';');  // keeps the CSV's columns intact
      csv << (i ? "," : "") << t;
    }
    csv << "\n";
  }
  js << "{";
  for (const auto& [k, v] : info) js << json_str(k) << ": " << json_str(v) << ", ";
  js << "\"rows\": [";
  for (size_t r = 0; r < recs.size(); ++r) {
    js << (r ? ",\n  " : "\n  ") << "{";
    for (size_t i = 0; i < recs[r].size(); ++i) {
      const Cell& c = recs[r][i];
      js << (i ? ", " : "") << json_str(c.name) << ": " << (c.is_text ? json_str(c.text) : format_number(c.num, true));
    }
    js << "}";
  }
  js << "\n]}\n";
  write_file_atomic((dir / (stem + ".csv")).string(), csv.str());
  write_file_atomic((dir / (stem + ".json")).string(), js.str());
}

// ---------------------------------------------------------------- memory

// Peak bytes in live tensors during a row's timed steps (after warm-up, so setup transients
// such as amp::initialize's copies do not count), everything the row keeps included: on CUDA
// the absolute peak (as torch.cuda.max_memory_allocated), on the CPU the peak over what was
// live before the row began.
struct MemProbe {
  Device dev;
  int64_t base = 0;
  explicit MemProbe(Device d) : dev(d) {
    if (!dev.is_cuda()) base = cpu::memory_stats().allocated;
  }
  void restart() const {
    if (dev.is_cuda()) {
      cuda::synchronize();
      cuda::reset_peak_memory_stats();
    } else {
      cpu::reset_peak_memory_stats();
    }
  }
  double peak_mib() const {
    const int64_t peak = dev.is_cuda() ? cuda::memory_stats().peak_allocated : cpu::memory_stats().peak_allocated - base;
    return static_cast<double>(peak) / (1024.0 * 1024.0);
  }
};

// ---------------------------------------------------------------- speed mode

struct SpeedConfig {
  Device device;
  int64_t batch = 32, steps = 3, warmup = 1, windows = 3, image_size = 28;
  bool graph = false, channels_last = false, profile = false;
  uint64_t seed = 0;
};

// Input geometry of the classifiers and the DCGAN at an image side.
int64_t channels_for(int64_t side) { return side == 28 ? 1 : 3; }
int64_t classes_for(int64_t side) { return side <= 32 ? 10 : 1000; }
int64_t dcgan_side(int64_t side) { return side == 28 ? 28 : side <= 32 ? 32 : 64; }
int64_t dcgan_width(int64_t side) { return side <= 32 ? 32 : 64; }

struct SpeedResult {
  std::vector<double> window_ips;
  double step_ms = NAN, peak_mib = NAN, loss_scale = NAN, final_loss = NAN;
  double skipped = NAN;
  int64_t params = 0;
  std::string profile;  // per-op table of one extra window (--profile)
};

int64_t count_params(const nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize();
}

// Warm-up, then `windows` windows of `steps` steps, each timed to the device's completion;
// the peak memory is that of the timed windows.
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
  for (double s : secs) r.window_ips.push_back(static_cast<double>(c.batch * c.steps) / std::max(1e-12, s));
  std::sort(secs.begin(), secs.end());
  r.step_ms = 1000.0 * secs[secs.size() / 2] / static_cast<double>(c.steps);
  if (c.profile) {
    // One more window under the profiler, so its overhead never enters the timed ones.
    profiler::reset();
    profiler::start();
    for (int64_t i = 0; i < c.steps; ++i) step();
    sync(c.device);
    profiler::stop();
    r.profile = profiler::report(20);
    profiler::reset();
  }
}

amp::Options level_options(const Variant& v, int num_losses) {
  auto o = amp::Options()
               .opt_level(v.level == kO3BnF32 ? "O3" : v.level)
               .dtype(v.dtype == "bf16" ? kBFloat16 : kFloat16)
               .num_losses(num_losses)
               .verbosity(0);
  if (v.level == kO3BnF32) o.keep_batchnorm_fp32(true);
  return o;
}

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
        loss = F::cross_entropy(net(x).to(kFloat32), y);
        amp::scale_loss(loss, opt).backward();
        opt.step();
      };
      time_windows(c, step, mem, r);
      r.loss_scale = amp::loss_scale(0);
      r.skipped = static_cast<double>(amp::skipped_steps(opt));
    } else {
      // A captured step must not wait for the host. amp::scale_loss's apex path reports overflows
      // through host read-backs (event queries), which a capture forbids, so the graph runs
      // torch.amp's recipe: amp::initialize casts the model (O2/O3, masters in the optimizer),
      // O1 autocasts in the forward, and a GradScaler scales where the level's loss scale is dynamic.
      amp::initialize(net, level_options(v, 1));
      const amp::Properties props = amp::properties();
      optim::SGD opt(net.ptr()->parameters(), optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4));
      opt.set_master_weights(props.master_weights.value_or(false));
      amp::GradScaler scaler(amp::GradScalerOptions().enabled(props.dynamic_loss_scale));
      auto step = [&] {
        opt.zero_grad();
        loss = F::cross_entropy(net(x).to(kFloat32), y);
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
    r.final_loss = errG.item<double>();
  }
  amp::reset();
  return r;
}

// What the PyTorch peer reported for one row.
struct PeerRow {
  double ips = NAN, ips_min = NAN, ips_max = NAN, step_ms = NAN, peak_mib = NAN;
  int64_t params = 0;
  std::string status = "not run";
};

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

double peer_num(const std::string& s) { return s == "nan" ? NAN : std::atof(s.c_str()); }

// Runs the peer's command line and hands every line starting with `tag` (split at commas, at least
// `min_fields` of them) to `on_row`; everything else it prints is passed through, indented, so the
// user sees its versions, parameter counts and progress. Sets `failure` when no row came back.
void stream_peer(const Args& args, const std::string& cmd, const std::string& tag, size_t min_fields,
                 std::string& failure, const std::function<void(const std::vector<std::string>&)>& on_row) {
  std::printf("\npeer: %s\n", cmd.c_str());
  std::fflush(stdout);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    failure = "could not start " + args.str("--python") + "; check --python";
    return;
  }
  char buf[4096];
  std::string line;
  size_t rows = 0;
  while (std::fgets(buf, sizeof buf, p)) {
    line = buf;
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (line.rfind(tag, 0) != 0) {
      std::printf("  peer| %s\n", line.c_str());
      std::fflush(stdout);
      continue;
    }
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string item;
    while (std::getline(ss, item, ',')) f.push_back(item);
    if (f.size() < min_fields) continue;
    on_row(f);
    ++rows;
  }
  const int status = pclose(p);
  if (status != 0 && rows == 0)
    failure = "the peer exited with code " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : status) +
              " before reporting any row (see its output above); check --python (it needs torch)";
}

// The start of a peer command line ("OMP_NUM_THREADS=n python script") and the comma lists of
// models, levels and dtypes; empty, with `failure` set, when the script is missing.
std::string peer_prefix(const Args& args, int threads, const std::vector<std::string>& models,
                        const std::vector<std::string>& levels, const std::vector<std::string>& dtypes,
                        std::string& ml, std::string& ll, std::string& dl, std::string& failure) {
  const std::string script = args.str("--peer-script");
  if (!fs::exists(script)) {
    failure = "peer script " + script + " not found; pass --peer-script PATH (it is bench/peer_bench.py in the sources)";
    return "";
  }
  for (const auto& m : models) ml += (ml.empty() ? "" : ",") + m;
  for (const auto& l : levels) ll += (ll.empty() ? "" : ",") + l;
  for (const auto& d : dtypes) dl += (dl.empty() ? "" : ",") + d;
  return "OMP_NUM_THREADS=" + std::to_string(threads) + " " + shell_quote(args.str("--python")) + " " +
         shell_quote(script);
}

// Runs the peer script once for every row (eager, or through torch.compile) and parses its
// "row,..." lines.
std::map<std::string, PeerRow> run_peer(const Args& args, const std::vector<std::string>& models,
                                        const std::vector<std::string>& levels, const std::vector<std::string>& dtypes,
                                        const SpeedConfig& c, int threads, bool compiled, std::string& failure) {
  std::map<std::string, PeerRow> out;
  std::string ml, ll, dl;
  const std::string prefix = peer_prefix(args, threads, models, levels, dtypes, ml, ll, dl, failure);
  if (prefix.empty()) return out;
  std::ostringstream cmd;
  cmd << prefix << " --models " << ml << " --opt-levels " << ll << " --dtype " << dl << " --batch " << c.batch << " --steps "
      << c.steps << " --warmup " << c.warmup << " --windows " << c.windows << " --image-size " << c.image_size
      << " --device " << (c.device.is_cuda() ? "cuda" : "cpu") << " --threads " << threads << " --seed " << c.seed
      << (c.channels_last ? " --channels-last" : "") << (compiled ? " --compile" : "") << " 2>&1";
  // row,model,level,dtype,params,ips,ips_min,ips_max,step_ms,peak_mib,status
  stream_peer(args, cmd.str(), "row,", 11, failure, [&](const std::vector<std::string>& f) {
    PeerRow r;
    r.params = std::atoll(f[4].c_str());
    r.ips = peer_num(f[5]), r.ips_min = peer_num(f[6]), r.ips_max = peer_num(f[7]), r.step_ms = peer_num(f[8]),
    r.peak_mib = peer_num(f[9]);
    r.status = f[10];
    for (size_t i = 11; i < f.size(); ++i) r.status += ";" + f[i];
    out[f[1] + "/" + f[2] + "/" + f[3]] = r;
  });
  return out;
}

// Bars of images/s per row, one panel per model (each with its own axis, since a GAN step and a
// ResNet-50 step differ by orders of magnitude), min-max whiskers, PyTorch's median as a black tick.
std::string bar_svg(const std::string& title, const std::vector<std::string>& models,
                    const std::vector<std::tuple<std::string, std::string, double, double, double, double>>& bars) {
  // bars: (model, "O1 f16", median, min, max, peer median)
  const double pw = 360, ph = 320, ml = 65, mr = 15, mt = 50, mb = 70;
  const double W = pw * static_cast<double>(std::max<size_t>(1, models.size())), H = ph + 40;
  const char* colors[] = {"#7f7f7f", "#1f77b4", "#2ca02c", "#d62728"};  // O0..O3
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" << title << "</text>\n";
  for (size_t m = 0; m < models.size(); ++m) {
    std::vector<size_t> idx;
    double top = 0;
    for (size_t i = 0; i < bars.size(); ++i)
      if (std::get<0>(bars[i]) == models[m]) {
        idx.push_back(i);
        for (double v : {std::get<2>(bars[i]), std::get<4>(bars[i]), std::get<5>(bars[i])})
          if (std::isfinite(v)) top = std::max(top, v);
      }
    if (!(top > 0)) top = 1;
    const double p10 = std::pow(10.0, std::floor(std::log10(top))), step = top / p10 > 5 ? 2 * p10 : top / p10 > 2 ? p10 : p10 / 2;
    top = std::ceil(top / step) * step;
    const double ox = pw * static_cast<double>(m), x0 = ox + ml, x1 = ox + pw - mr, y0 = 30 + ph - mb, y1 = 30 + mt;
    auto Y = [&](double v) { return y0 - v / top * (y0 - y1); };
    o << "<g>\n<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << y1 - 14 << "\" text-anchor=\"middle\" font-size=\"13\">"
      << models[m] << "</text>\n";
    for (double v = 0; v <= top + step * 1e-6; v += step)
      o << "<line x1=\"" << x0 << "\" y1=\"" << Y(v) << "\" x2=\"" << x1 << "\" y2=\"" << Y(v)
        << "\" stroke=\"#ddd\"/><text x=\"" << x0 - 5 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">" << v
        << "</text>\n";
    o << "<line x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x1 << "\" y2=\"" << y0 << "\" stroke=\"black\"/>\n"
      << "<text transform=\"translate(" << ox + 14 << "," << (y0 + y1) / 2
      << ") rotate(-90)\" text-anchor=\"middle\">images/s</text>\n";
    const double slot = (x1 - x0) / static_cast<double>(std::max<size_t>(1, idx.size())), bw = slot * 0.6;
    for (size_t k = 0; k < idx.size(); ++k) {
      const auto& [model, label, med, lo, hi, peer] = bars[idx[k]];
      const double cx = x0 + slot * (static_cast<double>(k) + 0.5);
      const int lvl = std::clamp(label.size() > 1 ? label[1] - '0' : 0, 0, 3);
      if (std::isfinite(med))
        o << "<rect class=\"bar\" x=\"" << cx - bw / 2 << "\" y=\"" << Y(med) << "\" width=\"" << bw << "\" height=\""
          << y0 - Y(med) << "\" fill=\"" << colors[lvl] << "\"><title>" << label << ": " << rate(med)
          << " images/s</title></rect>\n";
      if (std::isfinite(lo) && std::isfinite(hi))
        o << "<line x1=\"" << cx << "\" y1=\"" << Y(lo) << "\" x2=\"" << cx << "\" y2=\"" << Y(hi)
          << "\" stroke=\"black\"/>\n";
      if (std::isfinite(peer))
        o << "<line class=\"peer\" x1=\"" << cx - bw / 2 - 3 << "\" y1=\"" << Y(peer) << "\" x2=\"" << cx + bw / 2 + 3
          << "\" y2=\"" << Y(peer) << "\" stroke=\"black\" stroke-width=\"2.5\"><title>PyTorch " << label << ": "
          << rate(peer) << " images/s</title></line>\n";
      o << "<text transform=\"translate(" << cx + 4 << "," << y0 + 8 << ") rotate(45)\">" << label << "</text>\n";
    }
    o << "</g>\n";
  }
  o << "<text x=\"10\" y=\"" << H - 8 << "\">bars: mpx median images/s (whiskers: min-max over windows); "
    << "black ticks: PyTorch's median (--peer)</text>\n</svg>\n";
  return o.str();
}

int run_speed(const Args& args) {
  const Device device = parse_device(args.str("--device"));
  const bool cpu = !device.is_cuda();
  if (args.on("--cuda-graph") && cpu)
    throw UsageError("--cuda-graph captures a CUDA training step; it needs --device cuda (this run is on the CPU)");
  const bool small = args.on("--small-input") || cpu;
  std::vector<std::string> known = models::model_names();
  known.erase(std::remove_if(known.begin(), known.end(), [](const std::string& n) { return n.rfind("dcgan", 0) == 0; }),
              known.end());
  known.push_back("dcgan");
  const auto models =
      split_list("--models", args.given("--models") ? args.str("--models") : cpu ? "resnet18,dcgan" : "resnet18,resnet50,vgg16,dcgan");
  check_items("--models", models, known);
  const auto levels = split_list(
      "--opt-levels", args.given("--opt-levels") ? args.str("--opt-levels") : cpu ? "O0,O1,O2,O3" : "O0,O1,O2,O3,O3-bnf32");
  check_items("--opt-levels", levels, kLevels);
  const auto dtypes = split_list("--dtype", args.str("--dtype"));
  check_items("--dtype", dtypes, {"f16", "bf16"});

  SpeedConfig c;
  c.device = device;
  c.graph = args.on("--cuda-graph");
  c.profile = args.on("--profile");
  if (c.profile && c.graph)
    throw UsageError("--profile times the kernels of eager steps; a CUDA graph replays them as one, drop one of the two");
  c.channels_last = args.given("--channels-last") ? args.choice("--channels-last", {"on", "off"}) == "on" : !cpu;
  c.batch = args.given("--batch") ? args.integer("--batch", 1) : cpu ? 32 : 128;
  c.steps = args.given("--steps") ? args.integer("--steps", 1) : cpu ? 3 : 10;
  c.warmup = args.given("--warmup") ? args.integer("--warmup", 0) : cpu ? 1 : 5;
  c.windows = args.integer("--windows", 1);
  c.image_size = args.given("--image-size") ? args.integer("--image-size", 8) : small ? 28 : 224;
  c.seed = static_cast<uint64_t>(args.integer("--seed", 0));
  const int threads = omp_get_max_threads();
  const std::string mem_kind = cpu ? "CPU tensor bytes, peak of the timed steps" : "CUDA peak allocated in the timed steps";
  const fs::path out = args.str("--out");
  std::error_code ec;
  fs::create_directories(out, ec);
  MPX_CHECK(fs::is_directory(out), "--out ", out.string(), ": cannot create the folder (", ec.message(), ")");

  std::printf("mpx bench: %s, %s, batch %lld, %lld px (dcgan %lld px), %lld warm-up + %lld windows x %lld steps%s, "
              "%d thread%s, synthetic data\n",
              device.str().c_str(), small ? "small-input models" : "full-size models", static_cast<long long>(c.batch),
              static_cast<long long>(c.image_size), static_cast<long long>(dcgan_side(c.image_size)),
              static_cast<long long>(c.warmup), static_cast<long long>(c.windows), static_cast<long long>(c.steps),
              c.graph ? ", CUDA graph replay" : "", threads, threads == 1 ? "" : "s");
  std::fflush(stdout);

  struct Row {
    std::string model;
    Variant v;
    SpeedResult r;
    double median = NAN, lo = NAN, hi = NAN, speedup = NAN;
    PeerRow peer, compiled;  // PyTorch eager, and through torch.compile (--peer-compile)
  };
  std::vector<Row> rows;
  std::ostringstream profile_log;
  // Rows in which cuDNN refused a fast kernel (same results, slower): said under the table.
  std::string fallback_notes;
  const auto vars = variants(levels, dtypes);
  for (const auto& m : models) {
    for (const auto& v : vars) {
      std::printf("  %-10s %s %-4s ... ", m.c_str(), v.level.c_str(), v.dtype.c_str());
      std::fflush(stdout);
      Row row{m, v, {}, NAN, NAN, NAN, NAN, {}, {}};
      const int64_t fallbacks = cuda::cudnn_fallbacks();
      try {
        row.r = m == "dcgan" ? bench_dcgan(v, c) : bench_classifier(m, v, c);
      } catch (const mpx::Error& e) {
        amp::reset();
        MPX_ERROR("mpx bench ", m, " ", v.level, " ", v.dtype, ": ", e.what());
      }
      auto w = row.r.window_ips;
      std::sort(w.begin(), w.end());
      row.median = w[w.size() / 2], row.lo = w.front(), row.hi = w.back();
      std::printf("%s images/s\n", rate(row.median).c_str());
      if (const int64_t n = cuda::cudnn_fallbacks() - fallbacks; n > 0)
        fallback_notes += m + " " + v.level + " " + v.dtype + ": " + std::to_string(n) +
                          " cuDNN fallbacks to slower kernels; the last: " + cuda::cudnn_last_fallback() + "\n";
      if (c.profile) {
        std::printf("\n  kernels of %s %s %s, %lld steps (wall time on the CPU, event time on CUDA):\n%s\n", m.c_str(),
                    v.level.c_str(), v.dtype.c_str(), static_cast<long long>(c.steps), row.r.profile.c_str());
        profile_log << "## " << m << " " << v.level << " " << v.dtype << ", " << c.steps << " steps\n\n```\n"
                    << row.r.profile << "```\n\n";
      }
      std::fflush(stdout);
      rows.push_back(std::move(row));
    }
    // Speed-up over O0 of the same model (only when O0 ran).
    for (auto& r : rows)
      if (r.model == m)
        for (const auto& o : rows)
          if (o.model == m && o.v.level == "O0") r.speedup = r.median / o.median;
  }

  const bool peer = args.on("--peer"), peer_compile = args.on("--peer-compile");
  if (peer_compile && !peer) throw UsageError("--peer-compile adds columns to --peer's: pass both");
  if (peer) {
    for (bool compiled : {false, true}) {
      if (compiled && !peer_compile) break;
      std::string failure;
      const auto pr = run_peer(args, models, levels, dtypes, c, threads, compiled, failure);
      for (auto& r : rows) {
        PeerRow& slot = compiled ? r.compiled : r.peer;
        auto it = pr.find(r.model + "/" + r.v.level + "/" + r.v.dtype);
        if (it != pr.end()) slot = it->second;
        else if (!failure.empty()) slot.status = "peer failed";
      }
      if (!failure.empty()) std::fprintf(stderr, "mpx bench: warning: %s\n", failure.c_str());
    }
    std::map<std::string, std::pair<int64_t, int64_t>> params;
    for (const auto& r : rows)
      if (r.peer.params > 0) params[r.model] = {r.r.params, r.peer.params};
    for (const auto& [m, pp] : params)
      std::printf("parameters %s: mpx %lld, PyTorch %lld%s\n", m.c_str(), static_cast<long long>(pp.first),
                  static_cast<long long>(pp.second), pp.first == pp.second ? " (match)" : " (MISMATCH: the models differ)");
  }

  Table t;
  t.head = {"model", "level", "dtype", "batch", "images/s", "min-max", "step ms", "peak MiB", "loss scale", "skipped",
            "vs O0"};
  if (peer) t.head.insert(t.head.end(), {"PyTorch img/s", "mpx/PyTorch"});
  if (peer) t.head.push_back("PyTorch MiB");
  if (peer_compile) t.head.insert(t.head.end(), {"compiled img/s", "mpx/compiled"});
  std::vector<Record> recs;
  std::vector<std::string> peer_notes;
  std::vector<std::tuple<std::string, std::string, double, double, double, double>> bars;
  // PyTorch's images/s, or n/a with a numbered note underneath (the reasons are long).
  auto peer_cell = [&](const PeerRow& p) {
    if (std::isfinite(p.ips)) return rate(p.ips);
    auto it = std::find(peer_notes.begin(), peer_notes.end(), p.status);
    if (it == peer_notes.end()) it = peer_notes.insert(peer_notes.end(), p.status);
    return "n/a [" + std::to_string(it - peer_notes.begin() + 1) + "]";
  };
  for (const auto& r : rows) {
    const double ratio = r.median / r.peer.ips, cratio = r.median / r.compiled.ips;
    std::vector<std::string> cells = {r.model, r.v.level, r.v.dtype, std::to_string(c.batch), rate(r.median),
                                      rate(r.lo) + "-" + rate(r.hi), fixed(r.r.step_ms, 1), fixed(r.r.peak_mib, 0),
                                      fixed(r.r.loss_scale, 0), fixed(r.r.skipped, 0),
                                      std::isfinite(r.speedup) ? fixed(r.speedup, 2) + "x" : "n/a"};
    if (peer) {
      cells.push_back(peer_cell(r.peer));
      cells.push_back(fixed(ratio, 2));
      cells.push_back(std::isfinite(r.peer.peak_mib) ? fixed(r.peer.peak_mib, 0) : "n/a");
    }
    if (peer_compile) {
      cells.push_back(peer_cell(r.compiled));
      cells.push_back(fixed(cratio, 2));
    }
    t.rows.push_back(cells);
    recs.push_back({text_cell("model", r.model), text_cell("level", r.v.level), text_cell("dtype", r.v.dtype),
                    num_cell("batch", static_cast<double>(c.batch)),
                    num_cell("image_size", static_cast<double>(r.model == "dcgan" ? dcgan_side(c.image_size) : c.image_size)),
                    num_cell("images_per_s", r.median), num_cell("images_per_s_min", r.lo),
                    num_cell("images_per_s_max", r.hi), num_cell("step_ms", r.r.step_ms),
                    num_cell("peak_mem_mib", r.r.peak_mib), num_cell("loss_scale", r.r.loss_scale),
                    num_cell("skipped_steps", r.r.skipped), num_cell("speedup_vs_O0", r.speedup),
                    num_cell("final_loss", r.r.final_loss), num_cell("params", static_cast<double>(r.r.params)),
                    num_cell("peer_images_per_s", r.peer.ips), num_cell("peer_images_per_s_min", r.peer.ips_min),
                    num_cell("peer_images_per_s_max", r.peer.ips_max), num_cell("peer_peak_mem_mib", r.peer.peak_mib),
                    num_cell("peer_params", static_cast<double>(r.peer.params)), num_cell("mpx_over_peer", ratio),
                    text_cell("peer_status", peer ? r.peer.status : "not run"),
                    num_cell("peer_compiled_images_per_s", r.compiled.ips),
                    num_cell("peer_compiled_peak_mem_mib", r.compiled.peak_mib),
                    num_cell("mpx_over_peer_compiled", cratio), text_cell("peer_compiled_status", r.compiled.status)});
    bars.emplace_back(r.model, r.v.level + " " + r.v.dtype, r.median, r.lo, r.hi, r.peer.ips);
  }
  const std::string table = t.aligned();
  std::printf("\n%s", table.c_str());
  std::string notes;
  for (size_t i = 0; i < peer_notes.size(); ++i) notes += "[" + std::to_string(i + 1) + "] PyTorch: " + peer_notes[i] + "\n";
  std::printf("%s%s", notes.c_str(), fallback_notes.c_str());
  if (peer && cpu)
    std::printf("PyTorch MiB: what lives between steps plus the step's largest growth in the allocations torch's "
                "profiler records op by op (a lower bound; torch has no CPU allocator statistics)\n");
  std::printf("peak MiB: %s; loss scale: amp's at the end (dcgan: the smallest of its three); vs O0: images/s over "
              "O0's of the same model\n", mem_kind.c_str());

  const std::string& cmdline = g_cmdline;
  const std::vector<std::pair<std::string, std::string>> info = {
      {"mpx_version", MPX_VERSION_STRING}, {"date", today()}, {"device", device.str()},
      {"threads", std::to_string(threads)}, {"memory", mem_kind}, {"command", cmdline}};
  write_csv_json(out, "bench", recs, info);
  std::ostringstream md;
  md << "# mpx bench\n\n" << today() << ", `" << cmdline << "`, " << device.str() << ", " << threads
     << " thread(s), batch " << c.batch << ", synthetic data, " << c.warmup << " warm-up steps then " << c.windows
     << " windows of " << c.steps << " steps (images/s: median, min-max over the windows). Peak memory: " << mem_kind
     << ".\n\n"
     << t.markdown() << "\n";
  for (size_t i = 0; i < peer_notes.size(); ++i) md << "[" << i + 1 << "] PyTorch: " << peer_notes[i] << "  \n";
  if (!fallback_notes.empty()) md << "\n" << fallback_notes;
  write_file_atomic((out / "bench.md").string(), md.str());
  write_file_atomic((out / "bench.svg").string(),
                    bar_svg("mpx bench: images/s per opt level (" + device.str() + ", batch " + std::to_string(c.batch) + ")",
                            models, bars));
  if (c.profile) write_file_atomic((out / "profile.md").string(), "# mpx bench --profile\n\n" + profile_log.str());
  std::printf("wrote bench.csv, bench.json, bench.md%s and bench.svg in %s\n", c.profile ? ", profile.md" : "",
              out.string().c_str());
  return 0;
}

// ---------------------------------------------------------------- accuracy mode

// What the PyTorch peer reported for one accuracy row (the same recipe, PyTorch's own random numbers).
struct PeerAccuracy {
  double top1 = NAN, best = NAN, train_loss = NAN, test_loss = NAN, wall_s = NAN, ips = NAN;
  int64_t params = 0;
  std::string status = "not run";
};

// Runs the peer script's accuracy mode once for all rows with mpx train's hyper-parameters and
// parses its "acc,..." lines, keyed model/level/dtype.
std::map<std::string, PeerAccuracy> run_peer_accuracy(const Args& args, const std::vector<std::string>& models,
                                                      const std::vector<std::string>& levels,
                                                      const std::vector<std::string>& dtypes, int64_t epochs,
                                                      int64_t batch, int threads, std::string& failure) {
  std::map<std::string, PeerAccuracy> out;
  std::string ml, ll, dl;
  const std::string prefix = peer_prefix(args, threads, models, levels, dtypes, ml, ll, dl, failure);
  if (prefix.empty()) return out;
  // momentum 0.9 and weight decay 1e-4 are mpx train's defaults, which the accuracy mode keeps.
  std::ostringstream cmd;
  cmd << prefix << " --accuracy --models " << ml << " --opt-levels " << ll << " --dtype " << dl << " --batch " << batch
      << " --epochs " << epochs << " --lr " << shell_quote(args.str("--lr")) << " --momentum 0.9 --weight-decay 1e-4"
      << " --limit-train " << args.str("--limit-train") << " --limit-test " << args.str("--limit-test")
      << " --dataset " << shell_quote(args.str("--dataset"))
      << (args.given("--data") ? " --data " + shell_quote(args.str("--data")) : std::string())
      << " --device " << (parse_device(args.str("--device")).is_cuda() ? "cuda" : "cpu") << " --threads " << threads
      << " --seed " << args.str("--seed") << " 2>&1";
  // acc,model,level,dtype,params,top1,best,train_loss,test_loss,wall_s,images_per_s,status
  stream_peer(args, cmd.str(), "acc,", 12, failure, [&](const std::vector<std::string>& f) {
    PeerAccuracy r;
    r.params = std::atoll(f[4].c_str());
    r.top1 = peer_num(f[5]), r.best = peer_num(f[6]), r.train_loss = peer_num(f[7]), r.test_loss = peer_num(f[8]);
    r.wall_s = peer_num(f[9]), r.ips = peer_num(f[10]);
    r.status = f[11];
    for (size_t i = 12; i < f.size(); ++i) r.status += ";" + f[i];
    out[f[1] + "/" + f[2] + "/" + f[3]] = r;
  });
  return out;
}

int run_accuracy(const Args& args) {
  for (const char* f : {"--cuda-graph", "--peer-compile", "--profile"})
    if (args.on(f)) throw UsageError(std::string(f) + " is for the speed mode; drop it with --accuracy");
  const Device device = parse_device(args.str("--device"));
  const auto models = split_list("--models", args.given("--models") ? args.str("--models") : "small_cnn");
  std::vector<std::string> known = models::model_names();
  known.erase(std::remove_if(known.begin(), known.end(), [](const std::string& n) { return n.rfind("dcgan", 0) == 0; }),
              known.end());
  check_items("--models", models, known);
  const auto levels = split_list("--opt-levels", args.given("--opt-levels") ? args.str("--opt-levels") : "O0,O1,O2,O3");
  check_items("--opt-levels", levels, kLevels);
  const auto dtypes = split_list("--dtype", args.str("--dtype"));
  check_items("--dtype", dtypes, {"f16", "bf16"});
  const int64_t epochs = args.integer("--epochs", 1);
  const int64_t batch = args.given("--batch") ? args.integer("--batch", 1) : 128;
  const fs::path out = args.str("--out");
  std::error_code ec;
  fs::create_directories(out, ec);
  MPX_CHECK(fs::is_directory(out), "--out ", out.string(), ": cannot create the folder (", ec.message(), ")");

  // The peer runs after every mpx level, which can take hours: a python without torch should say
  // so now, not then.
  if (args.on("--peer") &&
      std::system((shell_quote(args.str("--python")) + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0)
    std::fprintf(stderr, "mpx bench: warning: %s cannot import torch, so the PyTorch columns will be n/a; pass "
                 "--python with one that can (Debian: /usr/bin/python3 with python3-torch)\n",
                 args.str("--python").c_str());

  struct Run {
    std::string model;
    Variant v;
    TrainSummary s;
  };
  std::vector<Run> runs;
  for (const auto& m : models)
    for (const auto& v : variants(levels, dtypes)) {
      const fs::path dir = out / (m + "_" + v.level + "_" + v.dtype);
      std::vector<std::string> a = {"--arch", m, "--dataset", args.str("--dataset"), "--batch-size",
                                    std::to_string(batch), "--epochs", std::to_string(epochs), "--lr", args.str("--lr"),
                                    "--opt-level", v.level == kO3BnF32 ? "O3" : v.level, "--dtype", v.dtype == "f32" ? "f16" : v.dtype, "--seed",
                                    args.str("--seed"), "--out", dir.string(), "--limit-train", args.str("--limit-train"),
                                    "--limit-test", args.str("--limit-test"), "--device", args.str("--device"),
                                    "--overwrite"};  // a rerun of the table replaces the previous one's runs
      if (args.given("--data")) a.insert(a.end(), {"--data", args.str("--data")});
      if (v.level == kO3BnF32) a.insert(a.end(), {"--keep-batchnorm-fp32", "True"});
      if (args.given("--image-size")) a.insert(a.end(), {"--image-size", args.str("--image-size")});
      std::printf("\n== %s %s %s (mpx train", m.c_str(), v.level.c_str(), v.dtype.c_str());
      for (const auto& s : a) std::printf(" %s", s.c_str());
      std::printf(")\n");
      std::fflush(stdout);
      std::vector<char*> argv;
      for (auto& s : a) argv.push_back(s.data());
      Run r{m, v, {}};
      int rc = 0;
      try {
        rc = train_main(static_cast<int>(argv.size()), argv.data(), &r.s);
      } catch (const UsageError& e) {
        throw UsageError(std::string("mpx bench --accuracy: ") + e.what());
      } catch (const mpx::Error& e) {
        MPX_ERROR("mpx bench --accuracy ", m, " ", v.level, " ", v.dtype, ": ", e.what());
      }
      if (rc != 0 || r.s.test_top1.empty()) {
        std::fprintf(stderr, "mpx bench: %s %s %s did not finish (exit %d); the table stops here\n", m.c_str(),
                     v.level.c_str(), v.dtype.c_str(), rc);
        return rc != 0 ? rc : 1;
      }
      runs.push_back(std::move(r));
    }

  // ---- the PyTorch peer: the same recipe per row, after all of mpx's rows ----
  const bool peer = args.on("--peer");
  std::string peer_failure;
  std::map<std::string, PeerAccuracy> peer_rows;
  if (peer) {
    const int threads = omp_get_max_threads();
    peer_rows = run_peer_accuracy(args, models, levels, dtypes, epochs, batch, threads, peer_failure);
    if (!peer_failure.empty()) std::fprintf(stderr, "mpx bench: warning: %s\n", peer_failure.c_str());
    // The parameter counts say whether the peer's copy of each model is mpx's (the peer reads
    // only the 28 px one-channel IDX sets, so that is the shape compared).
    const std::string ds = args.str("--dataset");
    for (const auto& m : models) {
      int64_t theirs = 0;
      for (const auto& [k, pr] : peer_rows)
        if (k.rfind(m + "/", 0) == 0 && pr.params > 0) theirs = pr.params;
      if (theirs == 0 || (ds != "fashion-mnist" && ds != "mnist")) continue;
      nn::AnyModule net = models::create(m, models::ModelOptions().num_classes(10).in_channels(1).small_input(true));
      const int64_t ours = count_params(*net.ptr());
      std::printf("parameters %s: mpx %lld, PyTorch %lld%s\n", m.c_str(), static_cast<long long>(ours),
                  static_cast<long long>(theirs), ours == theirs ? " (match)" : " (MISMATCH: the models differ)");
    }
  }

  Table t;
  t.head = {"model", "level", "dtype", "epochs", "final top-1 %", "best top-1 %", "vs O0", "final train loss",
            "final test loss", "skipped", "loss scale", "wall s", "images/s"};
  if (peer) t.head.insert(t.head.end(), {"PyTorch top-1 %", "PyTorch best %", "PyTorch test loss", "mpx - PyTorch"});
  std::vector<std::string> peer_notes;
  std::vector<Record> recs;
  std::vector<Series> loss_series, acc_series;
  for (const auto& r : runs) {
    double o0 = NAN;
    for (const auto& o : runs)
      if (o.model == r.model && o.v.level == "O0") o0 = o.s.test_top1.back().second;
    const double top1 = r.s.test_top1.back().second, tr = r.s.train_loss.back().second,
                 te = r.s.test_loss.back().second, ips = r.s.images_per_s.back().second;
    const double delta = top1 - o0;
    t.rows.push_back({r.model, r.v.level, r.v.dtype, std::to_string(epochs), fixed(top1, 2), fixed(r.s.best_top1, 2),
                      std::isfinite(delta) ? (delta >= 0 ? "+" : "") + fixed(delta, 2) : "n/a", fixed(tr, 4),
                      fixed(te, 4), std::to_string(r.s.skipped), fixed(r.s.loss_scale, 0), fixed(r.s.seconds, 1),
                      rate(ips)});
    PeerAccuracy pa;
    if (peer) {
      auto it = peer_rows.find(r.model + "/" + r.v.level + "/" + r.v.dtype);
      if (it != peer_rows.end()) pa = it->second;
      else if (!peer_failure.empty()) pa.status = "peer failed (" + peer_failure + ")";
      else pa.status = "the peer reported no such row";
    }
    // Final top-1 minus PyTorch's: the two runs share the recipe, not the random numbers, so
    // differences of the order of the run-to-run spread (a few tenths of a point) are noise.
    const double vs_peer = top1 - pa.top1;
    if (peer) {
      std::vector<std::string>& cells = t.rows.back();
      if (std::isfinite(pa.top1)) {
        cells.insert(cells.end(), {fixed(pa.top1, 2), fixed(pa.best, 2), fixed(pa.test_loss, 4),
                                   (vs_peer >= 0 ? "+" : "") + fixed(vs_peer, 2)});
      } else {
        // Reasons are long: the table says n/a with a numbered note underneath (as the speed mode).
        auto it = std::find(peer_notes.begin(), peer_notes.end(), pa.status);
        if (it == peer_notes.end()) it = peer_notes.insert(peer_notes.end(), pa.status);
        const std::string na = "n/a [" + std::to_string(it - peer_notes.begin() + 1) + "]";
        cells.insert(cells.end(), {na, "n/a", "n/a", "n/a"});
      }
    }
    recs.push_back({text_cell("model", r.model), text_cell("level", r.v.level), text_cell("dtype", r.v.dtype),
                    num_cell("epochs", static_cast<double>(epochs)), num_cell("final_top1", top1),
                    num_cell("best_top1", r.s.best_top1), num_cell("top1_vs_O0", delta),
                    num_cell("final_train_loss", tr), num_cell("final_test_loss", te),
                    num_cell("skipped_steps", static_cast<double>(r.s.skipped)), num_cell("loss_scale", r.s.loss_scale),
                    num_cell("wall_s", r.s.seconds), num_cell("images_per_s", ips),
                    text_cell("metrics_csv", r.s.metrics_csv), num_cell("peer_final_top1", pa.top1),
                    num_cell("peer_best_top1", pa.best), num_cell("peer_final_train_loss", pa.train_loss),
                    num_cell("peer_final_test_loss", pa.test_loss), num_cell("top1_minus_peer", vs_peer),
                    num_cell("peer_wall_s", pa.wall_s), num_cell("peer_images_per_s", pa.ips),
                    num_cell("peer_params", static_cast<double>(pa.params)), text_cell("peer_status", pa.status)});
    // The per-step loss, averaged over blocks so a long run's curve stays readable.
    const size_t n = r.s.step_loss.size(), block = std::max<size_t>(1, n / 200);
    Series ls{(models.size() > 1 ? r.model + " " : "") + r.v.level + " " + r.v.dtype, {}};
    for (size_t i = 0; i < n; i += block) {
      double sx = 0, sy = 0;
      size_t k = 0;
      for (; k < block && i + k < n; ++k) sx += r.s.step_loss[i + k].first, sy += r.s.step_loss[i + k].second;
      ls.points.emplace_back(sx / static_cast<double>(k), sy / static_cast<double>(k));
    }
    loss_series.push_back(ls);
    acc_series.push_back(Series{ls.name, r.s.test_top1});
  }
  const std::string table = t.aligned();
  std::printf("\n%s", table.c_str());
  std::string notes;
  for (size_t i = 0; i < peer_notes.size(); ++i) notes += "[" + std::to_string(i + 1) + "] PyTorch: " + peer_notes[i] + "\n";
  std::printf("%s", notes.c_str());
  std::printf("O0 establishes the accuracy baseline; vs O0: final top-1 minus O0's (percentage points)%s\n",
              peer ? "; mpx - PyTorch: final top-1 minus PyTorch's with the same recipe (its own random numbers)" : "");
  const std::string& cmdline = g_cmdline;
  write_csv_json(out, "accuracy", recs,
                 {{"mpx_version", MPX_VERSION_STRING}, {"date", today()}, {"device", device.str()},
                  {"threads", std::to_string(omp_get_max_threads())}, {"dataset", args.str("--dataset")},
                  {"command", cmdline}});
  std::ostringstream md;
  md << "# mpx bench --accuracy\n\n" << today() << ", `" << cmdline << "`, " << device.str() << ", "
     << omp_get_max_threads() << " thread(s), " << args.str("--dataset") << ", batch " << batch << ", " << epochs
     << " epoch(s), every level from seed " << args.str("--seed") << ".";
  if (peer)
    md << " PyTorch columns: bench/peer_bench.py --accuracy, the same recipe (model, data, batch, lr, schedule, "
          "epochs, limits, seed) with PyTorch's own random numbers; mpx - PyTorch: final top-1 difference in points.";
  md << "\n\n" << t.markdown();
  for (size_t i = 0; i < peer_notes.size(); ++i) md << "\n[" << i + 1 << "] PyTorch: " << peer_notes[i] << "  ";
  if (!peer_notes.empty()) md << "\n";
  write_file_atomic((out / "accuracy.md").string(), md.str());
  write_svg((out / "accuracy.svg").string(), "mpx bench --accuracy: " + args.str("--dataset"),
            {Panel{"training loss (per step)", "epoch", "cross-entropy", loss_series},
             Panel{"test top-1", "epoch", "%", acc_series}});
  std::printf("wrote accuracy.csv, accuracy.json, accuracy.md and accuracy.svg in %s (per-level runs in its "
              "subfolders)\n", out.string().c_str());
  return 0;
}

}  // namespace

int run_bench(int argc, char** argv) {
  Args args = make_args();
  if (!args.parse(argc, argv)) return 0;
  g_cmdline = "mpx bench";
  for (int i = 0; i < argc; ++i) g_cmdline += std::string(" ") + argv[i];
  if (args.given("--threads")) omp_set_num_threads(static_cast<int>(args.integer("--threads", 1)));
  const bool accuracy = args.on("--accuracy");
  if (!accuracy) {
    for (const char* f : {"--epochs", "--dataset", "--data", "--lr", "--limit-train", "--limit-test"})
      if (args.given(f)) throw UsageError(std::string(f) + " belongs to the accuracy mode; add --accuracy or drop it");
    return run_speed(args);
  }
  for (const char* f : {"--steps", "--warmup", "--windows", "--small-input", "--profile", "--channels-last"})
    if (args.given(f)) throw UsageError(std::string(f) + " belongs to the speed mode; drop it with --accuracy");
  return run_accuracy(args);
}

}  // namespace mpx::cli
