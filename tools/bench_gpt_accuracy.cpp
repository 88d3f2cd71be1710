// `mpx bench --accuracy` for the GPT presets: each level trained by mpx gpt on the same text, weights and windows; validation loss beside O0 and the PyTorch peer.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "tools/bench_internal.h"
#include "tools/commands.h"
#include "tools/gpt_parts.h"
#include "tools/metrics.h"

namespace mpx::cli::bench {

namespace fs = std::filesystem;

namespace {

// mpx gpt's recipe, which the peer file spells out for PyTorch.
struct GptRecipe {
  int64_t steps = 300, batch = 16, eval_interval = 100, eval_iters = 20, warmup = 30;
  double lr = 1e-3, min_lr = 1e-4;
  std::string text;  // "" = mpx gpt's default corpus
  uint64_t seed = 0;
};

// What the PyTorch twin needs to train exactly what mpx gpt trains: the initial f32 weights
// (mpx gpt seeds them the same way), every step's windows and the validation windows as token
// ids, and the hyper-parameters. Nothing random is left for PyTorch to draw.
void write_peer_file(const std::string& model, const GptRecipe& r, const std::string& path) {
  TokenData d = open_token_data(r.text, "", "", 0.1, "");
  manual_seed(r.seed);
  LanguageModel lm = make_language_model(model, d.vocab_size, 0, 0.0);
  const int64_t T = lm.n_ctx;
  TensorDict out;
  for (const auto& [name, p] : lm.net.ptr()->named_parameters()) out[name] = p.detach();
  // The first `n` batches of a stream's windows (the sequential validation ones: at most one pass).
  auto windows = [&](std::shared_ptr<const data::TokenStream> s, bool shuffle, int64_t n, const char* stem) {
    MicroBatches mb(std::move(s), T, r.batch, Ranks{}, r.seed, shuffle);
    MPX_CHECK(mb.per_epoch() > 0, "mpx bench --accuracy: ", d.source, " holds fewer ", stem, " windows of ", T + 1,
              " tokens than one batch of ", r.batch, " for ", model, "; give a longer --data text or a smaller --batch");
    if (!shuffle) n = std::min(n, mb.per_epoch());
    std::vector<Tensor> xs, ys;
    for (int64_t i = 0; i < n; ++i) {
      data::Batch b = mb.get(i);
      xs.push_back(b.data.to(kInt32));
      ys.push_back(b.target.to(kInt32));
    }
    out[std::string(stem) + ".x"] = stack(xs, 0);
    out[std::string(stem) + ".y"] = stack(ys, 0);
  };
  windows(d.train, true, r.steps, "train");
  MPX_CHECK(d.val && d.val->size() > T, "mpx bench --accuracy: ", d.source, " leaves no validation windows for ", model);
  windows(d.val, false, r.eval_iters, "val");
  auto num = [](double v) { return format_number(v, false); };
  save_tensors(out, path,
               {{"mpx.bench.model", model}, {"steps", num(static_cast<double>(r.steps))}, {"lr", num(r.lr)},
                {"min_lr", num(r.min_lr)}, {"warmup", num(static_cast<double>(r.warmup))}, {"weight_decay", "0.1"},
                {"beta1", "0.9"}, {"beta2", "0.95"}, {"eps", "1e-08"}, {"clip", "1"},
                {"eval_interval", num(static_cast<double>(r.eval_interval))}});
}

// A column of a run's CSV log (`stem`.csv in `dir`) as (step, value) pairs; empty when absent.
std::vector<std::pair<double, double>> logged(const fs::path& dir, const std::string& stem, const std::string& col) {
  MetricsLog log(dir.string(), stem);
  log.resume("step", 1e18);
  return log.column("step", col);
}
double last(const std::vector<std::pair<double, double>>& v) { return v.empty() ? NAN : v.back().second; }

}  // namespace

int run_gpt_accuracy(const Args& args, const std::vector<std::string>& models, const std::vector<std::string>& levels,
                     const std::vector<std::string>& dtypes) {
  GptRecipe rc;
  rc.steps = args.integer("--gpt-steps", 1);
  rc.batch = args.given("--batch") ? args.integer("--batch", 1) : 16;
  rc.eval_interval = std::max<int64_t>(1, rc.steps / 3);
  rc.warmup = std::min<int64_t>(100, rc.steps / 10);
  rc.lr = args.given("--lr") ? args.number("--lr", 0.0) : 1e-3;  // --lr's default is the classifiers'
  rc.min_lr = rc.lr / 10;
  rc.text = args.given("--data") ? args.str("--data") : "";
  rc.seed = static_cast<uint64_t>(args.integer("--seed", 0));
  const fs::path out = args.str("--out");
  const bool peer = args.on("--peer");

  struct Run {
    std::string model;
    Variant v;
    double val = NAN, train = NAN, scale = NAN, skipped = NAN, tps = NAN, seconds = NAN;
    std::vector<std::pair<double, double>> val_curve, loss_curve;
  };
  std::vector<Run> runs;
  for (const auto& m : models)
    for (const auto& v : variants(levels, dtypes)) {
      const fs::path dir = out / (m + "_" + v.level + "_" + v.dtype);
      std::vector<std::string> a = {"--arch", m, "--steps", std::to_string(rc.steps), "--batch-size",
                                    std::to_string(rc.batch), "--lr", format_number(rc.lr, false), "--eval-interval",
                                    std::to_string(rc.eval_interval), "--eval-iters", std::to_string(rc.eval_iters),
                                    "--dtype", v.dtype == "f32" ? "bf16" : v.dtype, "--seed", std::to_string(rc.seed),
                                    "--device", args.str("--device"), "--out", dir.string(), "--overwrite"};
      if (!rc.text.empty()) a.insert(a.end(), {"--text", rc.text});
      const std::vector<std::string> level = level_train_flags(v.level);
      a.insert(a.end(), level.begin(), level.end());
      std::printf("\n== %s %s %s (mpx gpt", m.c_str(), v.level.c_str(), v.dtype.c_str());
      for (const auto& s : a) std::printf(" %s", s.c_str());
      std::printf(")\n");
      std::fflush(stdout);
      std::vector<char*> argv;
      for (auto& s : a) argv.push_back(s.data());
      const auto t0 = std::chrono::steady_clock::now();
      int rc_run = 0;
      try {
        rc_run = run_gpt(static_cast<int>(argv.size()), argv.data());
      } catch (const UsageError& e) {
        throw UsageError(std::string("mpx bench --accuracy: ") + e.what());
      } catch (const mpx::Error& e) {
        MPX_ERROR("mpx bench --accuracy ", m, " ", v.level, " ", v.dtype, ": ", e.what());
      }
      Run r{m, v};
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.val_curve = logged(dir, "eval", "val_loss");
      r.loss_curve = logged(dir, "metrics", "loss");
      r.val = last(r.val_curve), r.train = last(r.loss_curve);
      r.scale = last(logged(dir, "metrics", "loss_scale")), r.skipped = last(logged(dir, "metrics", "skipped"));
      const auto tps = logged(dir, "metrics", "tokens_per_s");
      std::vector<double> rates;
      for (const auto& [s, t] : tps) rates.push_back(t);
      std::sort(rates.begin(), rates.end());
      r.tps = rates.empty() ? NAN : rates[rates.size() / 2];
      if (rc_run != 0 || !std::isfinite(r.val)) {
        std::fprintf(stderr, "mpx bench: %s %s %s did not finish (exit %d); the table stops here\n", m.c_str(),
                     v.level.c_str(), v.dtype.c_str(), rc_run);
        return rc_run != 0 ? rc_run : 1;
      }
      runs.push_back(std::move(r));
    }

  std::string peer_failure;
  std::map<std::string, PeerAccuracy> peer_rows;
  if (peer) {
    for (const auto& m : models) write_peer_file(m, rc, (out / (m + "_accuracy.safetensors")).string());
    peer_rows = run_peer_gpt_accuracy(args, models, levels, dtypes, mpx::get_num_threads(), peer_failure);
    if (!peer_failure.empty()) std::fprintf(stderr, "mpx bench: warning: %s\n", peer_failure.c_str());
  }

  Table t;
  t.head = {"model", "level", "dtype", "steps", "val loss", "vs O0 %", "train loss", "skipped", "loss scale", "wall s",
            "tokens/s"};
  if (peer) t.head.insert(t.head.end(), {"PyTorch val loss", "PyTorch tokens/s", "mpx - PyTorch %"});
  std::vector<std::string> notes;
  std::vector<Record> recs;
  std::vector<Series> loss_series, val_series;
  for (const auto& r : runs) {
    double o0 = NAN;
    for (const auto& o : runs)
      if (o.model == r.model && o.v.level == "O0") o0 = o.val;
    const double vs_o0 = 100.0 * (r.val - o0) / o0;
    auto pct = [](double x) { return std::isfinite(x) ? (x >= 0 ? "+" : "") + fixed(x, 2) : std::string("n/a"); };
    t.rows.push_back({r.model, r.v.level, r.v.dtype, std::to_string(rc.steps), fixed(r.val, 4), pct(vs_o0),
                      fixed(r.train, 4), fixed(r.skipped, 0), fixed(r.scale, 0), fixed(r.seconds, 1), rate(r.tps)});
    const PeerAccuracy pa = peer ? peer_accuracy_row(peer_rows, r.model, r.v, peer_failure) : PeerAccuracy{};
    const double vs_peer = 100.0 * (r.val - pa.test_loss) / pa.test_loss;
    if (peer) {
      if (std::isfinite(pa.test_loss)) {
        t.rows.back().insert(t.rows.back().end(), {fixed(pa.test_loss, 4), rate(pa.ips), pct(vs_peer)});
      } else {
        t.rows.back().insert(t.rows.back().end(), {na_note(notes, pa.status), "n/a", "n/a"});
      }
    }
    recs.push_back({text_cell("model", r.model), text_cell("level", r.v.level), text_cell("dtype", r.v.dtype),
                    num_cell("steps", static_cast<double>(rc.steps)), num_cell("final_val_loss", r.val),
                    num_cell("val_loss_vs_O0_pct", vs_o0), num_cell("final_train_loss", r.train),
                    num_cell("skipped_steps", r.skipped), num_cell("loss_scale", r.scale), num_cell("wall_s", r.seconds),
                    num_cell("tokens_per_s", r.tps), num_cell("peer_final_val_loss", pa.test_loss),
                    num_cell("peer_final_train_loss", pa.train_loss), num_cell("peer_tokens_per_s", pa.ips),
                    num_cell("val_loss_vs_peer_pct", vs_peer), num_cell("peer_params", static_cast<double>(pa.params)),
                    text_cell("peer_status", pa.status)});
    const std::string name = (models.size() > 1 ? r.model + " " : "") + r.v.level + " " + r.v.dtype;
    loss_series.push_back(Series{name, r.loss_curve});
    val_series.push_back(Series{name, r.val_curve});
  }
  const std::string table = t.aligned();
  std::printf("\n%s", table.c_str());
  for (size_t i = 0; i < notes.size(); ++i) std::printf("[%zu] PyTorch: %s\n", i + 1, notes[i].c_str());
  std::printf("vs O0: validation loss relative to O0's (%%)%s\n",
              peer ? "; mpx - PyTorch: relative to PyTorch's with the same weights, windows and recipe (%)" : "");
  const Device device = parse_device(args.str("--device"));
  const std::string source = rc.text.empty() ? default_corpus_path() + " (mpx gpt's default corpus)" : rc.text;
  write_records(out.string(), "accuracy", recs,
                {{"mpx_version", MPX_VERSION_STRING}, {"date", today()}, {"device", device.str()},
                 {"threads", std::to_string(mpx::get_num_threads())}, {"text", source}, {"command", command_line()}});
  std::ostringstream md;
  md << "# mpx bench --accuracy (GPT)\n\n" << today() << ", `" << command_line() << "`, " << device.str() << ", "
     << mpx::get_num_threads() << " thread(s), text " << source << ", batch " << rc.batch << ", " << rc.steps
     << " steps (AdamW lr " << rc.lr << " -> " << rc.min_lr << ", warmup " << rc.warmup
     << ", clip 1.0), validation loss over " << rc.eval_iters << " batches, every level from seed " << rc.seed << ".";
  if (peer)
    md << " PyTorch columns: bench/peer_bench.py --accuracy on the same initial weights and the same windows "
          "(MODEL_accuracy.safetensors), the same schedule and clipping.";
  write_accuracy_files(out, md.str(), t, notes, "mpx bench --accuracy: GPT",
                       {Panel{"training loss", "step", "cross-entropy", loss_series},
                        Panel{"validation loss", "step", "cross-entropy", val_series}});
  return 0;
}

}  // namespace mpx::cli::bench
