// `mpx bench --accuracy`: every level trained by mpx train from the same seed, tabled beside O0 and the PyTorch peer.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "tools/bench_internal.h"
#include "tools/metrics.h"
#include "tools/train.h"

namespace mpx::cli::bench {

namespace fs = std::filesystem;

PeerAccuracy peer_accuracy_row(const std::map<std::string, PeerAccuracy>& rows, const std::string& model,
                               const Variant& v, const std::string& failure) {
  PeerAccuracy pa;
  auto it = rows.find(model + "/" + v.level + "/" + v.dtype);
  if (it != rows.end()) pa = it->second;
  else if (!peer_level(v.level)) pa.status = kNoPeerRecipe;
  else if (!failure.empty()) pa.status = "peer failed (" + failure + ")";
  else pa.status = "the peer reported no such row";
  return pa;
}

std::string na_note(std::vector<std::string>& notes, const std::string& why) {
  auto it = std::find(notes.begin(), notes.end(), why);
  if (it == notes.end()) it = notes.insert(notes.end(), why);
  return "n/a [" + std::to_string(it - notes.begin() + 1) + "]";
}

void write_accuracy_files(const fs::path& out, const std::string& head, const Table& t,
                          const std::vector<std::string>& notes, const std::string& title,
                          const std::vector<Panel>& panels) {
  std::ostringstream md;
  md << head << "\n\n" << t.markdown();
  for (size_t i = 0; i < notes.size(); ++i) md << "\n[" << i + 1 << "] PyTorch: " << notes[i] << "  ";
  if (!notes.empty()) md << "\n";
  write_file_atomic((out / "accuracy.md").string(), md.str());
  write_svg((out / "accuracy.svg").string(), title, panels);
  std::printf("wrote accuracy.csv, accuracy.json, accuracy.md and accuracy.svg in %s (per-level runs in its "
              "subfolders)\n", out.string().c_str());
}

int run_accuracy(const Args& args) {
  for (const char* f : {"--cuda-graph", "--peer-compile", "--profile"})
    if (args.on(f)) throw UsageError(std::string(f) + " is for the speed mode; drop it with --accuracy");
  const Device device = parse_device(args.str("--device"));
  const auto models = split_list("--models", args.given("--models") ? args.str("--models") : "small_cnn");
  const auto levels = split_list("--opt-levels", args.given("--opt-levels") ? args.str("--opt-levels") : "O0,O1,O2,O3");
  check_items("--opt-levels", levels, kLevels);
  const auto dtypes = split_list("--dtype", args.str("--dtype"));
  check_items("--dtype", dtypes, {"f16", "bf16"});
  const auto gpts = std::count_if(models.begin(), models.end(), is_gpt);
  if (gpts > 0) {
    if (gpts != static_cast<std::ptrdiff_t>(models.size()))
      throw UsageError("--models mixes language models (GPT presets, lstm-lm) and classifiers; their accuracy tables "
                       "differ (validation loss against top-1), so run them in two mpx bench --accuracy runs");
    for (const char* f : {"--epochs", "--dataset", "--limit-train", "--limit-test", "--image-size"})
      if (args.given(f))
        throw UsageError(std::string(f) + " is for classifiers; GPT rows train --gpt-steps steps on --data FILE "
                         "(a text file; default: mpx gpt's corpus)");
    return run_gpt_accuracy(args, models, levels, dtypes);
  }
  if (args.given("--gpt-steps"))
    throw UsageError("--gpt-steps is for language models (GPT presets, lstm-lm) in --models; use --epochs here");
  check_items("--models", models, classifier_names());
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
                                    "--dtype", v.dtype == "f32" ? "f16" : v.dtype, "--seed",
                                    args.str("--seed"), "--out", dir.string(), "--limit-train", args.str("--limit-train"),
                                    "--limit-test", args.str("--limit-test"), "--device", args.str("--device"),
                                    "--overwrite"};  // a rerun of the table replaces the previous one's runs
      if (args.given("--data")) a.insert(a.end(), {"--data", args.str("--data")});
      const std::vector<std::string> level = level_train_flags(v.level);
      a.insert(a.end(), level.begin(), level.end());
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
    const int threads = mpx::get_num_threads();
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
    const PeerAccuracy pa = peer ? peer_accuracy_row(peer_rows, r.model, r.v, peer_failure) : PeerAccuracy{};
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
        cells.insert(cells.end(), {na_note(peer_notes, pa.status), "n/a", "n/a", "n/a"});
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
  const std::string& cmdline = command_line();
  write_records(out.string(), "accuracy", recs,
                 {{"mpx_version", MPX_VERSION_STRING}, {"date", today()}, {"device", device.str()},
                  {"threads", std::to_string(mpx::get_num_threads())}, {"dataset", args.str("--dataset")},
                  {"command", cmdline}});
  std::ostringstream md;
  md << "# mpx bench --accuracy\n\n" << today() << ", `" << cmdline << "`, " << device.str() << ", "
     << mpx::get_num_threads() << " thread(s), " << args.str("--dataset") << ", batch " << batch << ", " << epochs
     << " epoch(s), every level from seed " << args.str("--seed") << ".";
  if (peer)
    md << " PyTorch columns: bench/peer_bench.py --accuracy, the same recipe (model, data, batch, lr, schedule, "
          "epochs, limits, seed) with PyTorch's own random numbers; mpx - PyTorch: final top-1 difference in points.";
  write_accuracy_files(out, md.str(), t, peer_notes, "mpx bench --accuracy: " + args.str("--dataset"),
                       {Panel{"training loss (per step)", "epoch", "cross-entropy", loss_series},
                        Panel{"test top-1", "epoch", "%", acc_series}});
  return 0;
}


}  // namespace mpx::cli::bench
