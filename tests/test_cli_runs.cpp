// CLI tests of real-run failures: diverged models, resume into the same run, bad images, signals and read-only folders.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "tests/cli_util.h"

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

fs::path temp_dir(const std::string& name) { return mpx::testing::cli_temp_dir("mpx_cli_runs_", name); }

const std::string kTiny = "--limit-train 512 --limit-test 256 -b 64 --deterministic ";

mpx::Metadata meta_of(const fs::path& ck) {
  mpx::Metadata m;
  mpx::load_tensors(ck.string(), &m);
  return m;
}

#ifdef MPX_TEST_HAVE_STB_WRITE
// A small RGB PNG whose pixels depend on the class, so the task is learnable.
void write_png(const fs::path& p, int cls, int i) {
  std::vector<unsigned char> px(28 * 28 * 3);
  for (size_t k = 0; k < px.size(); ++k) px[k] = static_cast<unsigned char>((cls * 120 + i * 7 + k % 13) & 0xff);
  REQUIRE(stbi_write_png(p.c_str(), 28, 28, 3, px.data(), 28 * 3) != 0);
}

// apex's layout: root/train/<class>/*.png and root/val/<class>/*.png, `n` and `m` images per class.
void make_image_folder(const fs::path& root, int classes, int n, int m) {
  for (const char* split : {"train", "val"})
    for (int c = 0; c < classes; ++c) {
      const fs::path dir = root / split / ("class" + std::to_string(c));
      fs::create_directories(dir);
      for (int i = 0; i < (std::string(split) == "train" ? n : m); ++i)
        write_png(dir / ("img" + std::to_string(i) + ".png"), c, i);
    }
}

// Keeps the PNG's header and chunk layout (so the up-front check passes) and spoils the
// compressed pixel data, which only a full decode finds.
void corrupt_png_data(const fs::path& p) {
  std::string s = mpx::testing::read_file(p);
  const size_t idat = s.find("IDAT");
  REQUIRE(idat != std::string::npos);
  s[idat + 4] = '\xff';  // the zlib stream header
  s[idat + 5] = '\xff';
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}
#endif

}  // namespace

// ---------------------------------------------------------------- 1. honest metrics on diverged models

TEST_CASE("cli 1: a diverged O0 run stops with an error naming the step and keeps the last good checkpoint", "[cli][cli_runs]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("diverge_o0");
  Run r = run_mpx("train " + kTiny + "--opt-level O0 --lr 1e6 --epochs 2 --out " + q(out));
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK(has(r.out, "training diverged at epoch 1 step "));
  CHECK(has(r.out, "the loss is nan"));
  CHECK(has(r.out, "no checkpoint of this run was written"));
  CHECK_FALSE(has(r.out, "100.00%"));
  CHECK_FALSE(fs::exists(out / "checkpoint.safetensors"));

  // After a good epoch, a run that then diverges keeps that epoch's checkpoint untouched.
  const fs::path good = temp_dir("diverge_later");
  r = run_mpx("train " + kTiny + "--opt-level O0 --epochs 1 --out " + q(good));
  REQUIRE(r.rc == 0);
  const std::string before = mpx::testing::read_file(good / "checkpoint.safetensors");
  r = run_mpx("train --resume " + q(good / "checkpoint.safetensors") + " --epochs 2 --lr 1e6 --schedule constant");
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK(has(r.out, "training diverged at epoch 2 step "));
  CHECK(has(r.out, "the last good checkpoint is kept"));
  CHECK(mpx::testing::read_file(good / "checkpoint.safetensors") == before);
}

TEST_CASE("cli 1: a run whose amp steps are all skipped or whose test logits are all NaN stops instead of reporting accuracy", "[cli][cli_runs]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("diverge_o1");
  const Run r = run_mpx("train " + kTiny + "--opt-level O1 --lr 1e6 --epochs 2 --out " + q(out));
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK(has(r.out, "training diverged in epoch"));
  CHECK_FALSE(has(r.out, "best test top-1"));
}

TEST_CASE("cli 1: a checkpoint with a flipped bit or NaN weights is refused, not evaluated to 100%", "[cli][cli_runs]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("flipped");
  Run r = run_mpx("train " + kTiny + "--epochs 1 --out " + q(out));
  REQUIRE(r.rc == 0);
  const fs::path ck = out / "checkpoint.safetensors";
  {
    std::string bytes = mpx::testing::read_file(ck);
    bytes[bytes.size() - 100] ^= 0x40;  // in the tensor data
    std::ofstream(out / "flipped.safetensors", std::ios::binary) << bytes;
  }
  r = mpx_err("train --resume " + q(out / "flipped.safetensors") + " -e");
  CHECK(r.rc == 1);
  CHECK(has(r.out, "is damaged"));
  CHECK(has(r.out, "checksum"));

  // A file without a checksum (written by another tool) holding NaN weights is refused as well.
  mpx::Metadata meta;
  mpx::TensorDict t = mpx::load_tensors(ck.string(), &meta);
  meta.erase("checksum");
  mpx::Tensor b = t.at("model.fc.bias").clone();
  b.data_ptr<float>()[3] = NAN;
  t["model.fc.bias"] = b;
  mpx::save_tensors(t, (out / "nan.safetensors").string(), meta);
  r = mpx_err("train --resume " + q(out / "nan.safetensors") + " -e");
  CHECK(r.rc == 1);
  CHECK(has(r.out, "model.fc.bias holds 1 NaN or infinite value"));
}

TEST_CASE("cli 1: constant logits (all ties) score what torch.topk would: only the first classes hit", "[cli][cli_runs]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("ties");
  Run r = run_mpx("train " + kTiny + "--epochs 1 --out " + q(out));
  REQUIRE(r.rc == 0);
  mpx::Metadata meta;
  mpx::TensorDict t = mpx::load_tensors((out / "checkpoint.safetensors").string(), &meta);
  meta.erase("checksum");
  t["model.fc.weight"] = mpx::zeros(t.at("model.fc.weight").sizes());
  t["model.fc.bias"] = mpx::zeros(t.at("model.fc.bias").sizes());
  mpx::save_tensors(t, (out / "const.safetensors").string(), meta);
  r = run_mpx("train --resume " + q(out / "const.safetensors") + " -e");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  // Every logit ties: topk returns classes 0 and 0..4, so only those targets are hits.
  const mpx::data::FashionMNIST test(mpx::data::kFashionMnistDir, false);
  int64_t c0 = 0, c04 = 0;
  for (int64_t i = 0; i < 256; ++i) {
    const int64_t y = test.targets().data_ptr<int64_t>()[i];
    c0 += y == 0, c04 += y <= 4;
  }
  char want[128];
  std::snprintf(want, sizeof want, "evaluate: top-1 %.2f%%  top-5 %.2f%%", 100.0 * c0 / 256, 100.0 * c04 / 256);
  CHECK(has(r.out, want));
}

// ---------------------------------------------------------------- 2. resume into the same run

TEST_CASE("cli 2: --resume without --out continues in the checkpoint's folder, and skipped steps carry over", "[cli][cli_runs]") {
  if (!have_fashion()) return;
  const fs::path run = temp_dir("resume_here"), cwd = temp_dir("resume_cwd");
  // O2 at lr 1 overflows f16 gradients within the first steps: the loss scaler skips one.
  Run r = run_mpx("train " + kTiny + "--opt-level O2 --lr 1 --epochs 2 --prof 4 -p 1 --out " + q(run));
  REQUIRE(r.rc == 0);
  const int64_t skipped = std::stoll(meta_of(run / "checkpoint.safetensors").at("skipped_steps"));
  REQUIRE(skipped >= 1);
  r = mpx::testing::run_mpx_in(cwd.string(), "train --resume " + q(run / "checkpoint.safetensors") + " -p 1");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK_FALSE(fs::exists(cwd / "out"));
  CHECK(meta_of(run / "checkpoint.safetensors").at("epoch") == "2");
  // The count continues from the checkpoint's instead of restarting at 0: in the first progress
  // line after the resume, and in the metrics of the epoch that was interrupted.
  const size_t at = r.out.find("epoch 1/2 5/8");
  REQUIRE(at != std::string::npos);
  const size_t sk = r.out.find("skipped ", at);
  REQUIRE(sk != std::string::npos);
  CHECK(std::stoll(r.out.substr(sk + 8)) >= skipped);
  const std::string csv = mpx::testing::read_file(run / "metrics.csv");
  const size_t row = csv.find("\n1,8,");
  REQUIRE(row != std::string::npos);
  const std::string line = csv.substr(row + 1, csv.find('\n', row + 1) - row - 1);
  CHECK(std::stoll(line.substr(line.rfind(',') + 1)) >= skipped);
}

TEST_CASE("cli 2: an --out holding another run is refused unless --overwrite", "[cli][cli_runs]") {
  if (!have_fashion()) return;
  const fs::path a = temp_dir("own_a"), b = temp_dir("own_b");
  REQUIRE(run_mpx("train " + kTiny + "--prof 2 --out " + q(a)).rc == 0);
  REQUIRE(run_mpx("train " + kTiny + "--prof 2 --seed 1 --out " + q(b)).rc == 0);
  const std::string b_before = mpx::testing::read_file(b / "checkpoint.safetensors");

  Run r = mpx_err("train " + kTiny + "--prof 2 --out " + q(b));  // a fresh run into b
  CHECK(r.rc == 1);
  CHECK(has(r.out, "already holds a run (checkpoint.safetensors"));
  CHECK(has(r.out, "--resume " + (b / "checkpoint.safetensors").string()));
  CHECK(has(r.out, "--overwrite"));
  r = mpx_err("train --resume " + q(a / "checkpoint.safetensors") + " --out " + q(b));  // a's run into b
  CHECK(r.rc == 1);
  CHECK(has(r.out, "holds another run's files"));
  CHECK(mpx::testing::read_file(b / "checkpoint.safetensors") == b_before);

  r = run_mpx("train " + kTiny + "--prof 2 --out " + q(b) + " --overwrite");
  CHECK(r.rc == 0);
  CHECK(mpx::testing::read_file(b / "checkpoint.safetensors") != b_before);
  // Resuming into a new, empty folder forks the run there, its metrics history included.
  const fs::path fork = temp_dir("own_fork");
  REQUIRE(run_mpx("train " + kTiny + "--epochs 1 --out " + q(a) + " --overwrite").rc == 0);
  r = run_mpx("train --resume " + q(a / "checkpoint.safetensors") + " --epochs 2 --out " + q(fork));
  INFO(r.out);
  CHECK(r.rc == 0);
  const std::string csv = mpx::testing::read_file(fork / "metrics.csv");
  CHECK(has(csv, "\n1,8,"));
  CHECK(has(csv, "\n2,16,"));
}

TEST_CASE("cli 2: MPX_MAX_STEPS stops a run as --prof does, --prof wins, a malformed value is refused", "[cli][cli_runs]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("max_steps");
  Run r = run_mpx("train " + kTiny + "--epochs 3 --out " + q(out), "2>&1", "MPX_MAX_STEPS=2");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "MPX_MAX_STEPS=2: stopping after 2 training steps"));
  CHECK(has(r.out, "Profiling ended at iteration 2 (epoch 1 step 2)"));
  r = run_mpx("train --resume " + q(out / "checkpoint.safetensors") + " --prof 1", "2>&1", "MPX_MAX_STEPS=2");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(!has(r.out, "MPX_MAX_STEPS"));
  CHECK(has(r.out, "Profiling ended at iteration 1 (epoch 1 step 3)"));
  // Evaluation trains nothing, so the cap is not announced.
  r = run_mpx("train --resume " + q(out / "checkpoint.safetensors") + " -e", "2>&1", "MPX_MAX_STEPS=2");
  CHECK(r.rc == 0);
  CHECK(!has(r.out, "MPX_MAX_STEPS"));
  r = run_mpx("train " + kTiny + "--out " + q(temp_dir("max_steps_bad")), "2>&1", "MPX_MAX_STEPS=2x");
  CHECK(r.rc == 2);
  CHECK(has(r.out, "MPX_MAX_STEPS=2x is not a step count (a whole number, 0 or more); unset it to train fully"));
}

// ---------------------------------------------------------------- 3. no work lost

TEST_CASE("cli 3: a read-only --out fails before training, with the permission problem named", "[cli][cli_runs]") {
  if (!have_fashion()) return;
  const fs::path ro = temp_dir("readonly");
  if (geteuid() != 0) fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  const Run r = mpx::testing::mpx_err_unprivileged("train " + kTiny + "--epochs 1 --out " + q(ro / "run"));
  if (r.rc == -1) {
    WARN("cannot drop root rights here (setpriv missing); skipping");
    return;
  }
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK(has(r.out, "permission denied"));
  CHECK(has(r.out, "--out"));
  CHECK_FALSE(has(r.out, "epoch"));
  fs::permissions(ro, fs::perms::owner_all);
}

TEST_CASE("cli 3: SIGTERM checkpoints like Ctrl-C and exits 143, leftovers of a killed writer are removed", "[cli][cli_runs]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("sigterm");
  // A full epoch takes several seconds on two cores; the signal lands in the middle of it.
  Run r = run_mpx("train --limit-test 256 -b 32 --epochs 1 --out " + q(out), "2>&1", "timeout --preserve-status -s TERM 4");
  INFO(r.out);
  CHECK(r.rc == 143);
  CHECK(has(r.out, "interrupted by SIGTERM"));
  REQUIRE(fs::exists(out / "checkpoint.safetensors"));
  const mpx::Metadata m = meta_of(out / "checkpoint.safetensors");
  CHECK(std::stoll(m.at("step_in_epoch")) > 0);

  std::ofstream(out / "checkpoint.safetensors.tmp-0123456789abcdef") << "half a checkpoint";
  r = run_mpx("train --resume " + q(out / "checkpoint.safetensors") + " --prof 1");
  CHECK(r.rc == 0);
  CHECK(has(r.out, "removed 1 temporary file"));
  CHECK_FALSE(fs::exists(out / "checkpoint.safetensors.tmp-0123456789abcdef"));
}

#ifdef MPX_TEST_HAVE_STB_WRITE
TEST_CASE("cli 3: a corrupt image is found before training, --skip-bad-images trains without it and lists it", "[cli][cli_runs]") {
  const fs::path data = temp_dir("bad_header"), out = temp_dir("bad_header_out");
  make_image_folder(data, 2, 8, 2);
  std::ofstream(data / "train" / "class1" / "garbage.png") << "not an image at all";
  const std::string base = "train " + q(data) + " --image-size 28 -b 4 -j 0 --epochs 1 ";
  Run r = mpx_err(base + "--out " + q(out));
  CHECK(r.rc == 1);
  CHECK(has(r.out, "garbage.png"));
  CHECK(has(r.out, "--skip-bad-images"));
  CHECK_FALSE(fs::exists(out / "checkpoint.safetensors"));
  r = run_mpx(base + "--skip-bad-images --out " + q(out));
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(mpx::testing::read_file(out / "bad_images.txt"), "garbage.png"));
}

TEST_CASE("cli 3: an image failing mid-epoch or in validation ends the run with a checkpoint that resume continues", "[cli][cli_runs]") {
  const fs::path data = temp_dir("bad_late"), out = temp_dir("bad_late_out");
  make_image_folder(data, 2, 8, 2);
  const fs::path bad = data / "train" / "class0" / "img3.png";
  const std::string good_bytes = mpx::testing::read_file(bad);
  corrupt_png_data(bad);
  const std::string base = "train " + q(data) + " --image-size 28 -b 4 -j 0 --epochs 1 --seed 3 ";
  Run r = mpx_err(base + "--out " + q(out));
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK(has(r.out, "img3.png"));
  CHECK(has(r.out, "--resume"));
  REQUIRE(fs::exists(out / "checkpoint.safetensors"));
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << good_bytes;
  r = run_mpx("train --resume " + q(out / "checkpoint.safetensors"));
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "epoch 1/1: train loss"));

  // In the validation split: the epoch's training is kept and the resume evaluates it.
  const fs::path out2 = temp_dir("bad_val_out");
  const fs::path vbad = data / "val" / "class1" / "img1.png";
  const std::string vgood = mpx::testing::read_file(vbad);
  corrupt_png_data(vbad);
  r = mpx_err(base + "--out " + q(out2));
  CHECK(r.rc == 1);
  CHECK(has(r.out, "evaluating epoch 1 failed"));
  const mpx::Metadata m = meta_of(out2 / "checkpoint.safetensors");
  CHECK(m.at("step_in_epoch") == m.at("steps_per_epoch"));
  std::ofstream(vbad, std::ios::binary | std::ios::trunc) << vgood;
  r = run_mpx("train --resume " + q(out2 / "checkpoint.safetensors"));
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "evaluation pending"));
  CHECK(has(r.out, "epoch 1/1: train loss"));

  // With --skip-bad-images a file failing mid-epoch is replaced and listed.
  corrupt_png_data(bad);
  const fs::path out3 = temp_dir("bad_skip_out");
  r = run_mpx(base + "--skip-bad-images --out " + q(out3));
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(mpx::testing::read_file(out3 / "bad_images.txt"), "img3.png"));
}
#endif
