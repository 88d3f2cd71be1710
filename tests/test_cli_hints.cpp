// The CLI's error hints name the cause, and following each one makes the run succeed: the
// failing command, then the same command changed as the message says.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli_util.h"

namespace fs = std::filesystem;

namespace {

using mpx::testing::has;
using mpx::testing::have_fashion;
using mpx::testing::q;
using mpx::testing::run_mpx;
using Run = mpx::testing::CliRun;

fs::path temp_dir(const std::string& name) { return mpx::testing::cli_temp_dir("mpx_cli_hints_", name); }

// Four steps of 32 images and a small test split: a second or two per run.
const std::string kSmall = "train --limit-train 128 --limit-test 64 -b 32 --epochs 1 ";

// Runs `failing`, checks it fails with exit code `rc` saying each of `says` and none of
// `not_says`, then runs each of `fixed` (the same run, changed as the message says) and checks it succeeds.
void follow(const std::string& failing, int rc, const std::vector<std::string>& says,
            const std::vector<std::string>& not_says, const std::vector<std::string>& fixed) {
  const Run r = run_mpx(failing);
  INFO(failing << "\n" << r.out);
  CHECK(r.rc == rc);
  for (const auto& s : says) CHECK(has(r.out, s));
  for (const auto& s : not_says) CHECK_FALSE(has(r.out, s));
  for (const auto& f : fixed) {
    const Run ok = run_mpx(f);
    INFO("following the hint: " << f << "\n" << ok.out);
    CHECK(ok.rc == 0);
  }
}

}  // namespace

TEST_CASE("cli hints: every step overflowing a static --loss-scale blames the scale, not --lr, and dynamic or a lower scale trains",
          "[cli][cli_hints]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("scale");
  const std::string run = kSmall + "--opt-level O1 --out " + q(out) + " --overwrite --loss-scale ";
  follow(run + "1e30", 1,
         {"were skipped because their gradients overflowed under the static loss scale 1e+30",
          "lower --loss-scale", "--loss-scale dynamic"},
         {"--lr"}, {run + "dynamic", run + "128"});
}

TEST_CASE("cli hints: a diverged run points at --lr, and a lower --lr trains", "[cli][cli_hints]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("lr");
  // O0: the loss goes non-finite on a step that was taken. O1: steps are skipped, the test logits
  // go NaN. Eight steps of 64: four do not take the loss past f32's range.
  for (const char* level : {"O0", "O1"}) {
    const std::string run = "train --limit-train 512 --limit-test 64 -b 64 --epochs 1 --opt-level " + std::string(level) +
                            " --out " + q(out) + " --overwrite --lr ";
    follow(run + "1e6", 1, {"training diverged", "lower --lr (now 1e+06)"}, {"--loss-scale", "--opt-level O1"},
           {run + "0.1"});
  }
}

TEST_CASE("cli hints: too few images for a batch, and a start epoch past the end, each fixed as the message says",
          "[cli][cli_hints]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("sizes");
  const std::string o = " --out " + q(out) + " --overwrite";
  follow("train --limit-train 16 --limit-test 32 -b 32 --epochs 1" + o, 1,
         {"fewer than one batch of 32", "lower --batch-size or raise --limit-train"}, {},
         {"train --limit-train 16 --limit-test 32 -b 16 --epochs 1" + o,
          "train --limit-train 32 --limit-test 32 -b 32 --epochs 1" + o});
  follow(kSmall + "--start-epoch 1" + o, 2, {"is not below --epochs 1", "raise --epochs"}, {},
         {"train --limit-train 128 --limit-test 64 -b 32 --epochs 2 --start-epoch 1" + o});
}

TEST_CASE("cli hints: mpx dcgan's batch hint, followed, trains", "[cli][cli_hints]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("dcgan");
  const std::string run = "dcgan --prof 1 --ngf 8 --ndf 8 --out " + q(out) + " --overwrite ";
  follow(run + "--limit-train 16 -b 32", 1, {"fewer than one batch of 32", "lower --batch-size or raise --limit-train"},
         {}, {run + "--limit-train 16 -b 16", run + "--limit-train 32 -b 32"});
}

TEST_CASE("cli hints: mpx gpt's batch and context hints, followed, train", "[cli][cli_hints][gpt]") {
  const fs::path dir = temp_dir("gpt");
  {
    std::ofstream f(dir / "text.txt");
    for (int i = 0; i < 40; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  const std::string base = "gpt --arch gpt-tiny --text " + q(dir / "text.txt") + " --steps 2 --eval-iters 1 --out " +
                           q(dir / "o") + " --overwrite ";
  // 1800 characters give 14 windows of 128: fewer than a batch of 32.
  follow(base + "-b 32 --context 127", 1, {"fewer than one batch of 32", "lower --batch-size or --context"}, {},
         {base + "-b 8 --context 127", base + "-b 32 --context 31"});
  follow(base + "-b 4 --context 4096", 2, {"use --context 128 or less"}, {}, {base + "-b 4 --context 128"});
}
