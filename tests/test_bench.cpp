// End-to-end tests of `mpx bench` (speed and accuracy modes) on tiny configurations: files, columns, finite positive numbers, errors.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "tests/cli_util.h"

namespace fs = std::filesystem;

namespace {

using mpx::testing::mpx_err;
using mpx::testing::run_mpx;
using Run = mpx::testing::CliRun;
std::string read(const fs::path& p) { return mpx::testing::read_file(p); }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

fs::path temp_dir(const std::string& name) { return mpx::testing::cli_temp_dir("mpx_bench_", name); }

// A CSV as header + rows of cells.
struct Csv {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  size_t col(const std::string& name) const {
    for (size_t i = 0; i < head.size(); ++i)
      if (head[i] == name) return i;
    FAIL("column " << name << " missing");
    return 0;
  }
};
Csv parse_csv(const std::string& text) {
  Csv c;
  std::stringstream in(text);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) cells.push_back(cell);
    if (first) c.head = cells, first = false;
    else c.rows.push_back(cells);
  }
  return c;
}

double number(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && !s.empty() ? v : NAN;
}

}  // namespace

TEST_CASE("mpx bench speed mode: a tiny run writes the table and csv/json/md/svg with finite positive figures", "[bench][cli]") {
  const fs::path out = temp_dir("speed");
  const Run r = run_mpx("bench --models resnet18 --opt-levels O0,O1,O3-bnf32 --small-input --batch 4 --steps 2 --warmup 1 "
                        "--windows 2 --threads 2 --out '" + out.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("images/s") != std::string::npos);
  CHECK(r.out.find("vs O0") != std::string::npos);
  for (const char* f : {"bench.csv", "bench.json", "bench.md", "bench.svg"}) CHECK(fs::file_size(out / f) > 0);

  const Csv csv = parse_csv(read(out / "bench.csv"));
  REQUIRE(csv.rows.size() == 3);  // O0 f32, O1 f16 and O3 f16 with f32 batch norm
  CHECK(csv.rows[0][csv.col("level")] == "O0");
  CHECK(csv.rows[0][csv.col("dtype")] == "f32");
  CHECK(csv.rows[1][csv.col("level")] == "O1");
  CHECK(csv.rows[1][csv.col("dtype")] == "f16");
  CHECK(csv.rows[2][csv.col("level")] == "O3-bnf32");
  for (const auto& row : csv.rows) {
    CHECK(row[csv.col("model")] == "resnet18");
    for (const char* c : {"images_per_s", "images_per_s_min", "images_per_s_max", "step_ms", "loss_scale",
                          "speedup_vs_O0", "params", "final_loss"}) {
      INFO(c);
      const double v = number(row[csv.col(c)]);
      CHECK(std::isfinite(v));
      CHECK(v > 0);
    }
    const double peak = number(row[csv.col("peak_mem_mib")]), skipped = number(row[csv.col("skipped_steps")]);
    CHECK(std::isfinite(peak));
    CHECK(peak >= 0);
    CHECK(std::isfinite(skipped));
    CHECK(skipped >= 0);
    CHECK(number(row[csv.col("images_per_s_min")]) <= number(row[csv.col("images_per_s")]));
    CHECK(number(row[csv.col("images_per_s")]) <= number(row[csv.col("images_per_s_max")]));
  }
  CHECK(number(csv.rows[0][csv.col("speedup_vs_O0")]) == 1.0);

  const std::string json = read(out / "bench.json");
  CHECK(json.find("\"rows\": [") != std::string::npos);
  CHECK(count(json, "\"images_per_s\": ") == 3);
  const std::string md = read(out / "bench.md");
  CHECK(md.find("| model | level | dtype |") != std::string::npos);
  const std::string svg = read(out / "bench.svg");
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(count(svg, "class=\"bar\"") == 3);
  CHECK(svg.find("resnet18") != std::string::npos);
}

TEST_CASE("mpx bench speed mode: language-model rows (a GPT preset, lstm-lm) report tokens/s next to sequences/s",
          "[bench][cli]") {
  struct Row {
    const char* model;
    double context;  // gpt-tiny's learned positions; lstm-lm's windows
    const char* second_level;
  };
  for (const Row& m : {Row{"gpt-tiny", 128, "O1"}, Row{"lstm-lm", 256, "O2"}}) {
    INFO(m.model);
    const fs::path out = temp_dir(std::string("speed_") + m.model);
    const Run r = run_mpx(std::string("bench --models ") + m.model + " --opt-levels O0," + m.second_level +
                          " --dtype bf16 --batch 2 --steps 1 --windows 1 --warmup 0 --threads 2 --out '" + out.string() + "'");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("tokens/s") != std::string::npos);
    CHECK(r.out.find("samples/s") != std::string::npos);
    CHECK_FALSE(fs::exists(out / (std::string(m.model) + "_init.safetensors")));  // only --peer needs the initial weights
    const Csv csv = parse_csv(read(out / "bench.csv"));
    REQUIRE(csv.rows.size() == 2);
    CHECK(csv.rows[1][csv.col("level")] == m.second_level);
    CHECK(csv.rows[1][csv.col("dtype")] == "bf16");
    for (const auto& row : csv.rows) {
      CHECK(row[csv.col("model")] == m.model);
      CHECK(number(row[csv.col("batch")]) == 2);
      CHECK(number(row[csv.col("seq_len")]) == m.context);
      CHECK(row[csv.col("image_size")] == "nan");
      const double tps = number(row[csv.col("tokens_per_s")]), sps = number(row[csv.col("images_per_s")]);
      CHECK(std::isfinite(tps));
      CHECK(tps > 0);
      CHECK(tps == Approx(m.context * sps));
      const double loss = number(row[csv.col("final_loss")]);
      CHECK(loss > 4);
      CHECK(loss < 7);  // about ln(256) = 5.5 on random bytes
    }
  }
}

TEST_CASE("mpx bench --models small_cnn,gpt-tiny: image rows leave the tokens/s cells empty", "[bench][cli]") {
  const fs::path out = temp_dir("speed_mixed");
  const Run r = run_mpx("bench --models small_cnn,gpt-tiny --opt-levels O0 --batch 2 --steps 1 --windows 1 --warmup 0 "
                        "--threads 2 --out '" + out.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const Csv csv = parse_csv(read(out / "bench.csv"));
  REQUIRE(csv.rows.size() == 2);
  CHECK(csv.rows[0][csv.col("tokens_per_s")] == "nan");
  CHECK(csv.rows[0][csv.col("seq_len")] == "nan");
  CHECK(number(csv.rows[0][csv.col("image_size")]) == 28);
  CHECK(number(csv.rows[1][csv.col("tokens_per_s")]) > 0);
}

TEST_CASE("mpx bench --accuracy: each level trains from the same seed and gets a curve and a row", "[bench][cli]") {
  const std::string fashion = mpx::data::kFashionMnistDir;
  // Fashion-MNIST when installed; otherwise synthetic 28 px images exercise the same path.
  const std::string data = fs::exists(fashion) ? "" : "--dataset synthetic --image-size 28 ";
  const fs::path out = temp_dir("accuracy");
  const Run r = run_mpx("bench --accuracy --models small_cnn --opt-levels O0,O3 --epochs 1 --limit-train 256 "
                        "--limit-test 128 --batch 64 --threads 2 " + data + "--out '" + out.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("final top-1") != std::string::npos);
  const Csv csv = parse_csv(read(out / "accuracy.csv"));
  REQUIRE(csv.rows.size() == 2);
  CHECK(csv.rows[0][csv.col("level")] == "O0");
  CHECK(csv.rows[1][csv.col("level")] == "O3");
  for (const auto& row : csv.rows) {
    for (const char* c : {"final_top1", "best_top1", "final_train_loss", "final_test_loss", "wall_s", "images_per_s"}) {
      INFO(c);
      const double v = number(row[csv.col(c)]);
      CHECK(std::isfinite(v));
      CHECK(v >= 0);
    }
    CHECK(number(row[csv.col("wall_s")]) > 0);
  }
  for (const char* f : {"accuracy.json", "accuracy.md"}) CHECK(fs::file_size(out / f) > 0);
  const std::string svg = read(out / "accuracy.svg");
  CHECK(svg.rfind("<?xml", 0) == 0);
  // Two panels (loss, top-1) with one series per level each.
  CHECK(count(svg, "<polyline") == 4);
  CHECK(count(svg, ">O0 f32</text>") == 2);
  CHECK(count(svg, ">O3 f16</text>") == 2);
  // The per-level mpx train runs keep their own metrics.
  CHECK(fs::exists(out / "small_cnn_O0_f32" / "metrics.csv"));
  CHECK(fs::exists(out / "small_cnn_O3_f16" / "metrics.csv"));
}

TEST_CASE("mpx bench: bad flags give one line and exit code 2, --cuda-graph on the CPU is a clear error", "[bench][cli]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench --modles resnet18", "--models"},
      {"bench --models resnt18", "resnet18"},
      {"bench --models gpt-tinny", "gpt-tiny"},
      {"bench --opt-levels O0,O4", "O4"},
      {"bench --dtype f8", "f8"},
      {"bench --batch 0", "--batch"},
      {"bench --models ,resnet18", "--models"},
      {"bench --opt-levels O0,O1,O0", "'O0' is listed twice"},
      {"bench --epochs 2", "--accuracy"},
      {"bench --accuracy --steps 2", "speed mode"},
      {"bench --cuda-graph --device cpu", "--device cuda"},
      {"bench --peer-compile", "--peer"},
      {"bench --rounds 3", "--peer"},
      {"bench --peer --rounds 0", "--rounds"},
      {"bench --accuracy --rounds 2", "speed mode"},
      {"bench --tf32 --device cpu", "--device cuda"},
      {"bench --accuracy --tf32", "speed mode"},
      {"bench --accuracy --peer --peer-compile", "speed mode"},
      {"bench --gpt-steps 5", "--accuracy"},
      {"bench --accuracy --gpt-steps 5", "GPT presets"},
      {"bench --accuracy --models gpt-tiny,small_cnn", "two mpx bench --accuracy runs"},
      {"bench --accuracy --models gpt-tiny --epochs 2", "--gpt-steps"},
  };
  for (const auto& [args, what] : cases) {
    INFO(args);
    const Run r = mpx_err(args);
    CHECK(r.rc == 2);
    CHECK(count(r.out, "\n") == 1);
    CHECK(r.out.find(what) != std::string::npos);
  }
  const Run graph = mpx_err("bench --cuda-graph");
  CHECK(graph.out.find("CPU") != std::string::npos);
}

TEST_CASE("mpx bench --peer --peer-compile: PyTorch's eager and compiled columns join the speed table", "[bench][cli]") {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    mpx::testing::skip_test("/usr/bin/python3 has no torch (install python3-torch)");
    return;
  }
  const bool has_compile = std::system("/usr/bin/python3 -c 'import torch; torch.compile' >/dev/null 2>&1") == 0;
  const fs::path out = temp_dir("speed_peer");
  const Run r = run_mpx("bench --peer --peer-compile --python /usr/bin/python3 --models resnet18 --opt-levels O0 "
                        "--small-input --batch 4 --steps 1 --warmup 1 --windows 1 --threads 2 --out '" +
                        out.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("mpx/PyTorch") != std::string::npos);
  CHECK(r.out.find("mpx/compiled") != std::string::npos);
  CHECK(r.out.find("parameters resnet18: mpx 11172810, PyTorch 11172810 (match)") != std::string::npos);
  const Csv csv = parse_csv(read(out / "bench.csv"));
  REQUIRE(csv.rows.size() == 1);
  const auto& row = csv.rows[0];
  CHECK(row[csv.col("peer_status")] == "ok");
  CHECK(number(row[csv.col("peer_images_per_s")]) > 0);
  CHECK(number(row[csv.col("mpx_over_peer")]) > 0);
  // PyTorch's peak CPU memory from its profiler: at least its weights, gradients and momentum.
  CHECK(number(row[csv.col("peer_peak_mem_mib")]) > 3 * 11172810 * 4 / 1048576.0);
  if (has_compile) {
    CHECK(row[csv.col("peer_compiled_status")] == "ok");
    CHECK(number(row[csv.col("mpx_over_peer_compiled")]) > 0);
  } else {
    // Older PyTorch: an n/a cell whose note says why.
    CHECK(row[csv.col("peer_compiled_status")].find("torch.compile needs PyTorch 2") != std::string::npos);
    CHECK(r.out.find("PyTorch: unsupported: torch.compile needs PyTorch 2") != std::string::npos);
  }
}

// A stand-in for the peer script, in sh so the test needs no torch: it counts its calls in a file
// beside itself and reports every row it is asked for at 1,000 x the call's number images/s.
fs::path stand_in_peer(const fs::path& dir, bool fail) {
  const fs::path script = dir / "peer.sh";
  std::ofstream(script) << "n=$(cat \"$(dirname \"$0\")/calls\" 2>/dev/null || echo 0); n=$((n + 1))\n"
                           "echo $n > \"$(dirname \"$0\")/calls\"\n"
                        << (fail ? "echo 'no torch in this python'; exit 3\n" : "")
                        << "while [ $# -gt 0 ]; do case $1 in --models) m=$2;; --opt-levels) l=$2;; --dtype) d=$2;; "
                           "esac; shift; done\n"
                           "[ \"$l\" = O0 ] && d=f32\n"
                           "echo 'torch 2.99.0, cpu, 2 threads'\n"
                           "echo \"row,$m,$l,$d,1,$((n * 1000)),$((n * 1000)),$((n * 1000)),1.0,1.0,2.3,ok\"\n";
  return script;
}

int calls(const fs::path& dir) { return std::atoi(read(dir / "calls").c_str()); }

// Two small_cnn rows (O0 f32, O1 bf16) for `rounds` rounds against the stand-in peer in `out`.
Run bench_with_stand_in(const fs::path& out, bool peer_fails, int rounds) {
  const fs::path peer = stand_in_peer(out, peer_fails);
  return run_mpx("bench --peer --python /bin/sh --peer-script '" + peer.string() + "' --models small_cnn "
                 "--opt-levels O0,O1 --dtype bf16 --batch 2 --steps 1 --warmup 0 --windows 1 --rounds " +
                 std::to_string(rounds) + " --threads 2 --out '" + out.string() + "'");
}

TEST_CASE("mpx bench --peer --rounds: each row alternates with the peer, figures are medians over the rounds",
          "[bench][cli]") {
  const fs::path out = temp_dir("rounds");
  const Run r = bench_with_stand_in(out, false, 3);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(calls(out) == 6);  // two rows, three rounds, one peer call after each mpx row
  CHECK(count(r.out, "peer| torch 2.99.0") == 1);  // the peer's own output once, not per call
  CHECK(r.out.find("round 3 of 3") != std::string::npos);
  const Csv csv = parse_csv(read(out / "bench.csv"));
  REQUIRE(csv.rows.size() == 2);
  // Row 1 met the peer at calls 1, 3, 5 and row 2 at 2, 4, 6: medians 3,000 and 4,000 images/s.
  CHECK(number(csv.rows[0][csv.col("peer_images_per_s")]) == 3000);
  CHECK(number(csv.rows[1][csv.col("peer_images_per_s")]) == 4000);
  for (const auto& row : csv.rows) {
    CHECK(number(row[csv.col("rounds")]) == 3);
    const double lo = number(row[csv.col("mpx_over_peer_min")]), hi = number(row[csv.col("mpx_over_peer_max")]);
    const double mid = number(row[csv.col("mpx_over_peer")]);
    CHECK(lo < mid);
    CHECK(mid < hi);
    CHECK(number(row[csv.col("images_per_s_min")]) <= number(row[csv.col("images_per_s")]));
    // The peer's fastest window was its last call's: 5,000 and 6,000 images/s.
    CHECK(number(row[csv.col("mpx_over_peer_best")]) ==
          Approx(number(row[csv.col("images_per_s_max")]) / number(row[csv.col("peer_images_per_s_max")])));
  }
  CHECK(number(csv.rows[0][csv.col("peer_images_per_s_max")]) == 5000);
  CHECK(number(csv.rows[1][csv.col("peer_images_per_s_max")]) == 6000);
  CHECK(read(out / "bench.md").find("3 rounds") != std::string::npos);
  CHECK(r.out.find("best windows") != std::string::npos);
}

TEST_CASE("mpx bench --peer: a peer that cannot run is reported once with its output, and not retried per row",
          "[bench][cli]") {
  const fs::path out = temp_dir("peer_fails");
  const Run r = bench_with_stand_in(out, true, 2);
  INFO(r.out);
  REQUIRE(r.rc == 0);  // mpx's rows stand; the peer's cells say why they are empty
  CHECK(calls(out) == 1);
  CHECK(r.out.find("no torch in this python") != std::string::npos);
  CHECK(r.out.find("exited with code 3") != std::string::npos);
  const Csv csv = parse_csv(read(out / "bench.csv"));
  REQUIRE(csv.rows.size() == 2);
  for (const auto& row : csv.rows) {
    CHECK(row[csv.col("peer_status")] == "peer failed");
    CHECK(number(row[csv.col("images_per_s")]) > 0);
  }
}

TEST_CASE("mpx bench --accuracy --peer: PyTorch's top-1 and loss with the same recipe join the table", "[bench][cli]") {
  // The peer needs Debian's python3-torch and the real IDX files (it does not read synthetic data).
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    mpx::testing::skip_test("/usr/bin/python3 has no torch (install python3-torch)");
    return;
  }
  if (!fs::exists(mpx::data::kFashionMnistDir)) {
    mpx::testing::skip_test(std::string("no Fashion-MNIST in ") + mpx::data::kFashionMnistDir + " (install dataset-fashion-mnist)");
    return;
  }
  const fs::path out = temp_dir("accuracy_peer");
  const Run r = run_mpx("bench --accuracy --peer --python /usr/bin/python3 --models small_cnn --opt-levels O0 "
                        "--epochs 1 --limit-train 256 --limit-test 128 --batch 64 --threads 2 --out '" +
                        out.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("PyTorch top-1 %") != std::string::npos);
  CHECK(r.out.find("parameters small_cnn: mpx 20538, PyTorch 20538 (match)") != std::string::npos);
  const Csv csv = parse_csv(read(out / "accuracy.csv"));
  REQUIRE(csv.rows.size() == 1);
  const auto& row = csv.rows[0];
  CHECK(row[csv.col("peer_status")] == "ok");
  CHECK(number(row[csv.col("peer_params")]) == 20538);
  for (const char* c : {"peer_final_top1", "peer_best_top1", "peer_final_train_loss", "peer_final_test_loss"}) {
    INFO(c);
    const double v = number(row[csv.col(c)]);
    CHECK(std::isfinite(v));
    CHECK(v > 0);
  }
  CHECK(std::isfinite(number(row[csv.col("top1_minus_peer")])));
  CHECK(read(out / "accuracy.md").find("| PyTorch top-1 % |") != std::string::npos);
  // Debian 12's PyTorch is 1.13: the run says its figures are not a current PyTorch's.
  if (r.out.find("peer| torch 1.") != std::string::npos) CHECK(r.out.find("older than 2.x") != std::string::npos);
}

TEST_CASE("mpx bench --peer: a GPT row starts PyTorch from mpx's weights and batch, and the O0 losses agree", "[bench][cli]") {
  // MPX_TEST_PYTHON picks another python with torch (a virtual environment) than Debian's.
  const char* env = std::getenv("MPX_TEST_PYTHON");
  const std::string python = env && *env ? env : "/usr/bin/python3";
  if (std::system(("'" + python + "' -c 'import torch' >/dev/null 2>&1").c_str()) != 0) {
    mpx::testing::skip_test(python + " has no torch (install python3-torch or set MPX_TEST_PYTHON)");
    return;
  }
  const fs::path out = temp_dir("speed_gpt_peer");
  const Run r = run_mpx("bench --peer --python '" + python + "' --models gpt-tiny,lstm-lm --opt-levels O0 --batch 2 "
                        "--steps 1 --warmup 1 --windows 1 --threads 2 --out '" + out.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(fs::exists(out / "gpt-tiny_init.safetensors"));
  CHECK(r.out.find("parameters gpt-tiny: mpx 842496, PyTorch 842496 (match)") != std::string::npos);
  // The LSTM model's projection is tied to its embedding: counted once on both sides.
  CHECK(r.out.find("parameters lstm-lm: mpx 1118464, PyTorch 1118464 (match)") != std::string::npos);
  CHECK(r.out.find("PyTorch tok/s") != std::string::npos);
  const Csv csv = parse_csv(read(out / "bench.csv"));
  REQUIRE(csv.rows.size() == 2);
  for (const auto& row : csv.rows) {
    INFO(row[csv.col("model")]);
    const double T = row[csv.col("model")] == "gpt-tiny" ? 128 : 256;
    CHECK(row[csv.col("peer_status")] == "ok");
    CHECK(number(row[csv.col("peer_tokens_per_s")]) > 0);
    CHECK(number(row[csv.col("peer_tokens_per_s")]) == Approx(T * number(row[csv.col("peer_images_per_s")])));
    // Two f32 AdamW steps from the same weights on the same batch: only summation order differs.
    CHECK(number(row[csv.col("peer_final_loss")]) == Approx(number(row[csv.col("final_loss")])).epsilon(1e-4));
  }
}

TEST_CASE("mpx bench --accuracy with a GPT preset: PyTorch replays mpx gpt's run, and the O0 validation losses agree",
          "[bench][cli]") {
  const fs::path out = temp_dir("accuracy_gpt");
  // A text of its own, long enough for windows of 129 characters in both the training part and
  // the tenth held out for validation.
  const fs::path text = out / "text.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 400; ++i) f << "line " << i << ": the quick brown fox jumps over the lazy dog " << (i * 7919) % 1000 << ".\n";
  }
  const char* env = std::getenv("MPX_TEST_PYTHON");
  const std::string python = env && *env ? env : "/usr/bin/python3";
  const bool peer = std::system(("'" + python + "' -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  // O2-sr (bf16 without masters, stochastic rounding) has no PyTorch recipe: its peer cells are n/a with a note.
  const Run r = run_mpx("bench --accuracy --models gpt-tiny --opt-levels O0,O2-sr --dtype bf16 --gpt-steps 3 --batch 2 "
                        "--threads 2 --data '" + text.string() + "' --out '" + out.string() + "'" +
                        (peer ? " --peer --python '" + python + "'" : std::string()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const Csv csv = parse_csv(read(out / "accuracy.csv"));
  REQUIRE(csv.rows.size() == 2);
  CHECK(csv.rows[0][csv.col("level")] == "O0");
  CHECK(csv.rows[1][csv.col("level")] == "O2-sr");
  for (const auto& row : csv.rows)
    for (const char* c : {"final_val_loss", "final_train_loss", "tokens_per_s", "wall_s"}) {
      INFO(c);
      CHECK(number(row[csv.col(c)]) > 0);
    }
  CHECK(number(csv.rows[0][csv.col("val_loss_vs_O0_pct")]) == 0);
  CHECK(std::isfinite(number(csv.rows[1][csv.col("val_loss_vs_O0_pct")])));
  CHECK(fs::exists(out / "gpt-tiny_O2-sr_bf16" / "eval.csv"));
  CHECK(count(read(out / "accuracy.svg"), "<polyline") == 4);
  if (!peer) {
    WARN(python << " has no torch: the peer columns were not checked (set MPX_TEST_PYTHON)");
    return;
  }
  CHECK(fs::exists(out / "gpt-tiny_accuracy.safetensors"));
  const auto& o0 = csv.rows[0];
  CHECK(o0[csv.col("peer_status")] == "ok");
  CHECK(csv.rows[1][csv.col("peer_status")].find("no recipe in the peer") != std::string::npos);
  // The same weights, windows and schedule in f32: three AdamW steps differ only in summation order.
  CHECK(number(o0[csv.col("peer_final_val_loss")]) == Approx(number(o0[csv.col("final_val_loss")])).epsilon(1e-4));
  CHECK(number(o0[csv.col("peer_final_train_loss")]) == Approx(number(o0[csv.col("final_train_loss")])).epsilon(1e-4));
  CHECK(read(out / "accuracy.md").find("| PyTorch val loss |") != std::string::npos);
}
