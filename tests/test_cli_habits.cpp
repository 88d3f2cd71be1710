// CLI tests of apex main_amp.py habits, error messages and the top-k rule (torch.topk's order of NaN and ties).
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "tests/cli_util.h"
#include "tools/topk.h"

#if __has_include(<stb/stb_image_write.h>)
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#define MPX_TEST_HAVE_STB_WRITE 1
#endif

namespace fs = std::filesystem;

namespace {

using mpx::testing::mpx_err;
using mpx::testing::run_mpx;
using mpx::testing::q;
using mpx::testing::has;
using mpx::testing::have_fashion;
using Run = mpx::testing::CliRun;

fs::path temp_dir(const std::string& name) { return mpx::testing::cli_temp_dir("mpx_cli_habits_", name); }
size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

const std::string kTiny = "--limit-train 512 --limit-test 256 -b 64 --deterministic ";

#ifdef MPX_TEST_HAVE_STB_WRITE
void make_image_folder(const fs::path& root, int classes, int n, int m) {
  std::vector<unsigned char> px(28 * 28 * 3);
  for (const char* split : {"train", "val"})
    for (int c = 0; c < classes; ++c) {
      const fs::path dir = root / split / ("class" + std::to_string(c));
      fs::create_directories(dir);
      for (int i = 0; i < (std::string(split) == "train" ? n : m); ++i) {
        for (size_t k = 0; k < px.size(); ++k) px[k] = static_cast<unsigned char>((c * 120 + i * 7 + k % 13) & 0xff);
        REQUIRE(stbi_write_png((dir / ("img" + std::to_string(i) + ".png")).c_str(), 28, 28, 3, px.data(), 28 * 3));
      }
    }
}
#endif

// Hits of one row [C] with target t, as (top-1, top-5).
std::pair<double, double> hits(const std::vector<float>& row, int64_t t) {
  const int64_t c = static_cast<int64_t>(row.size());
  mpx::Tensor l = mpx::empty({1, c}, mpx::kFloat32);
  for (int64_t i = 0; i < c; ++i) l.data_ptr<float>()[i] = row[static_cast<size_t>(i)];
  mpx::Tensor y = mpx::empty({1}, mpx::kInt64);
  y.data_ptr<int64_t>()[0] = t;
  const mpx::cli::TopkHits h = mpx::cli::topk_hits(l, y);
  return {h.top1.item<double>(), h.top5.item<double>()};
}

}  // namespace

// ---------------------------------------------------------------- 1. top-k as torch.topk ranks

TEST_CASE("cli 1: top-k counts a hit exactly where torch.topk's indices hold the target", "[cli][cli_habits]") {
  const float nan = NAN, inf = INFINITY;
  using P = std::pair<double, double>;
  // Plain ranking.
  CHECK(hits({0, 1, 2, 3, 4, 5, 6}, 6) == P{1, 1});
  CHECK(hits({0, 1, 2, 3, 4, 5, 6}, 2) == P{0, 1});
  CHECK(hits({0, 1, 2, 3, 4, 5, 6}, 1) == P{0, 0});
  // Ties go by class index: with all logits equal topk(1) is [0] and topk(5) is [0..4].
  CHECK(hits({1, 1, 1, 1, 1, 1, 1}, 0) == P{1, 1});
  CHECK(hits({1, 1, 1, 1, 1, 1, 1}, 3) == P{0, 1});
  CHECK(hits({1, 1, 1, 1, 1, 1, 1}, 5) == P{0, 0});
  CHECK(hits({2, 5, 5, 0}, 2) == P{0, 1});  // class 1 ties it and comes first
  // NaN ranks above every number: a NaN elsewhere pushes the target down...
  CHECK(hits({nan, 0, 9}, 2) == P{0, 1});
  CHECK(hits({0, 9, nan, nan, nan, nan, nan}, 1) == P{0, 0});
  // ...and a NaN target is ranked among the NaNs by index, like a tie.
  CHECK(hits({nan, nan, 3}, 0) == P{1, 1});
  CHECK(hits({nan, nan, 3}, 1) == P{0, 1});
  CHECK(hits({nan, nan, nan, nan, nan, nan, nan}, 6) == P{0, 0});
  // Infinities are ordinary large numbers that can tie.
  CHECK(hits({inf, inf, 0}, 1) == P{0, 1});
  CHECK(hits({inf, 1, 0}, 0) == P{1, 1});
  CHECK(hits({-inf, -inf, -inf}, 0) == P{1, 1});
  // Rows with a NaN or infinite logit are counted.
  mpx::Tensor l = mpx::zeros({3, 4});
  l.data_ptr<float>()[5] = nan;
  l.data_ptr<float>()[11] = inf;
  CHECK(mpx::cli::topk_hits(l, mpx::zeros({3}, mpx::kInt64)).nonfinite.item<double>() == 2);
}

// ---------------------------------------------------------------- 4. apex habits

#ifdef MPX_TEST_HAVE_STB_WRITE
TEST_CASE("cli 4: mpx train DIR detects an image folder, prints classes, counts ignored files, keeps model_best", "[cli][cli_habits]") {
  const fs::path data = temp_dir("folder"), out = temp_dir("folder_out");
  make_image_folder(data, 2, 8, 2);
  std::ofstream(data / "train" / "class0" / "notes.txt") << "not an image";
  Run r = run_mpx("train " + q(data) + " --image-size 28 -b4 -j0 --epochs 2 --out " + q(out));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "on imagefolder (detected)"));
  CHECK(has(r.out, "batch 4"));
  CHECK(has(r.out, "2 classes, 8 train / 2 test images each: class0, class1"));
  CHECK(has(r.out, "ignored 1 file without an image extension"));
  CHECK(fs::exists(out / "model_best.safetensors"));
  mpx::Metadata best;
  mpx::load_tensors((out / "model_best.safetensors").string(), &best);
  CHECK(best.at("mpx.checkpoint") == "train");

  // --pretrained from that run into a 3-class folder: all but the head are taken.
  const fs::path data3 = temp_dir("folder3"), out3 = temp_dir("folder3_out");
  make_image_folder(data3, 3, 4, 1);
  r = run_mpx("train " + q(data3) + " --image-size 28 -b 4 -j 0 --epochs 1 --pretrained " +
              q(out / "model_best.safetensors") + " --out " + q(out3));
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "pretrained "));
  CHECK(has(r.out, "have another shape (fc.bias [2] vs [3], fc.weight [2, 1568] vs [3, 1568])"));
  CHECK(has(r.out, "keep their initialization"));
}
#endif

TEST_CASE("cli 4: --pretrained takes a plain weights file with DataParallel's module. names", "[cli][cli_habits]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("pretrained_src"), out2 = temp_dir("pretrained_dst");
  REQUIRE(run_mpx("train " + kTiny + "--epochs 1 --out " + q(out)).rc == 0);
  // What torch.save(model.state_dict()) of a DataParallel model would hold, as safetensors.
  mpx::TensorDict plain;
  for (const auto& [k, v] : mpx::load_tensors((out / "checkpoint.safetensors").string()))
    if (k.rfind("model.", 0) == 0) plain["module." + k.substr(6)] = v;
  mpx::save_tensors(plain, (out / "weights.safetensors").string());
  Run r = run_mpx("train " + kTiny + "--epochs 1 --pretrained " + q(out / "weights.safetensors") + " --out " + q(out2));
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "14 of the model's 14 tensors match"));
  r = mpx_err("train --pretrained " + q(out / "weights.safetensors") + " --resume " + q(out / "checkpoint.safetensors"));
  CHECK(r.rc == 2);
  CHECK(has(r.out, "not both"));
  // Another architecture: what fits by name and shape (a few batch-norm tensors) is taken, and said.
  r = run_mpx("train " + kTiny + "-a resnet20 --prof 0 --pretrained " + q(out / "weights.safetensors") + " --out " +
              q(out2 / "x"));
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "are missing"));
  CHECK(has(r.out, "--verbose lists all"));
}

TEST_CASE("cli 4: attached short values, --start-epoch and --version", "[cli][cli_habits]") {
  Run r = run_mpx("--version");
  CHECK(r.rc == 0);
  CHECK(r.out == "mpx 0.1.0\n");
  if (!have_fashion()) return;
  const fs::path out = temp_dir("start_epoch");
  r = run_mpx("train --limit-train 512 --limit-test 256 -b64 -j0 --epochs 3 --start-epoch 2 --out " + q(out));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "batch 64"));
  CHECK(has(r.out, "epoch 3/3: train loss"));
  CHECK_FALSE(has(r.out, "epoch 2/3"));
  r = mpx_err("train --epochs 3 --start-epoch 3");
  CHECK(r.rc == 2);
  CHECK(has(r.out, "--start-epoch 3 is not below --epochs 3"));
}

// ---------------------------------------------------------------- 5. messages

TEST_CASE("cli 5: bad flag values exit 2 with one mpx train: prefix, --loss-scale has one message", "[cli][cli_habits]") {
  Run r = mpx_err("train -a resnet999");
  CHECK(r.rc == 2);
  CHECK(lines(r.out) == 1);
  CHECK(has(r.out, "did you mean resnet"));
  r = mpx_err("train -a dcgan_generator");
  CHECK(r.rc == 2);
  CHECK(has(r.out, "not a classifier"));
  r = mpx_err("train --epoch 2");
  CHECK(r.out.rfind("mpx train: unknown flag --epoch", 0) == 0);
  CHECK(r.out.find("mpx train:", 5) == std::string::npos);
  r = mpx_err("train --device bogus");
  CHECK(r.rc == 2);
  CHECK(r.out.rfind("mpx train: --device expects", 0) == 0);
  for (const char* v : {"abc", "-1", "0", "nan"}) {
    r = mpx_err(std::string("train --loss-scale ") + v);
    INFO(v);
    CHECK(r.rc == 2);
    CHECK(has(r.out, "mpx train: --loss-scale expects a positive number or \"dynamic\", got '" + std::string(v) + "'"));
  }
}

TEST_CASE("cli 5: permission problems and unreadable folders are named as such", "[cli][cli_habits]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("perm");
  REQUIRE(run_mpx("train " + kTiny + "--prof 1 --out " + q(out)).rc == 0);
  fs::permissions(out / "checkpoint.safetensors", fs::perms::owner_read | fs::perms::owner_write);
  if (geteuid() != 0) fs::permissions(out / "checkpoint.safetensors", fs::perms::none);
  Run r = mpx::testing::mpx_err_unprivileged("train --resume " + q(out / "checkpoint.safetensors") + " -e");
  if (r.rc == -1) {
    WARN("cannot drop root rights here (setpriv missing); skipping");
    return;
  }
  CHECK(r.rc == 1);
  CHECK(has(r.out, "permission denied"));
  CHECK_FALSE(has(r.out, "corrupt"));
  CHECK_FALSE(has(r.out, "unreadable"));
  fs::permissions(out / "checkpoint.safetensors", fs::perms::owner_all);

  // A data file the user may not read (only its name is needed: a labels file will do).
  const fs::path idx = temp_dir("idx");
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                        "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(fs::path(mpx::data::kFashionMnistDir) / f, idx / f);
  fs::permissions(idx / "t10k-labels-idx1-ubyte.gz", geteuid() == 0 ? fs::perms::owner_read : fs::perms::none);
  fs::permissions(idx, fs::perms::all);  // --out inside it is writable for the unprivileged user
  r = mpx::testing::mpx_err_unprivileged("train --data " + q(idx) + " --out " + q(idx / "o"));
  CHECK(r.rc == 1);
  CHECK(has(r.out, "t10k-labels-idx1-ubyte.gz: permission denied"));

  const fs::path locked = temp_dir("locked");
  fs::create_directories(locked / "data" / "train" / "a");
  fs::permissions(locked / "data", geteuid() == 0 ? fs::perms::owner_all : fs::perms::none);  // no access for others
  r = mpx::testing::mpx_err_unprivileged("train --dataset imagefolder --data " + q(locked / "data"));
  CHECK(r.rc == 1);
  CHECK(lines(r.out) == 1);
  CHECK(has(r.out, "permission denied"));
  CHECK_FALSE(has(r.out, "filesystem error"));
}

TEST_CASE("cli 5: another model's checkpoint gets a short summary without library hints", "[cli][cli_habits]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("wrong_model");
  REQUIRE(run_mpx("train " + kTiny + "--prof 1 --out " + q(out)).rc == 0);
  Run r = mpx_err("train --resume " + q(out / "checkpoint.safetensors") + " -a resnet20 -e");
  CHECK(r.rc == 1);
  CHECK(lines(r.out.substr(r.out.find("mpx: error"))) == 1);  // after the warning that -a differs
  CHECK(has(r.out, "holds another model's weights"));
  CHECK(has(r.out, "are missing"));
  CHECK(has(r.out, "--verbose lists all"));
  CHECK_FALSE(has(r.out, "strict"));
  CHECK(r.out.size() < 1200);
  r = mpx_err("train --resume " + q(out / "checkpoint.safetensors") + " -a resnet20 -e --verbose");
  CHECK(r.out.size() > 1200);
}

// ---------------------------------------------------------------- 6. a shared machine

TEST_CASE("cli 6: without a thread count the run picks its own and says so, an explicit one stays fixed", "[cli][cli_habits]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("threads");
  // More steps than one probe round (4 steps at each candidate count), so the tuner switches counts mid-epoch.
  Run r = run_mpx("train --limit-train 2560 --limit-test 128 -b 64 --epochs 1 --out " + q(out), "2>&1",
                  "env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  if (omp_get_num_procs() > 1) CHECK(has(r.out, "threads (auto)"));
  CHECK(has(r.out, "epoch 1/1: train loss"));
  r = run_mpx("train --limit-train 256 --limit-test 128 -b 64 --epochs 1 --threads 1 --overwrite --out " + q(out));
  CHECK(r.rc == 0);
  CHECK(has(r.out, "cpu, 1 thread\n"));
}
