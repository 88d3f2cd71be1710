// Data-parallel runs of the built mpx command line under `mpirun -np 2`: accuracy, outputs, resume, --sync-bn, dcgan, errors.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/cli_util.h"

#include <mpx/mpx.h>

using namespace mpx::testing;
namespace fs = std::filesystem;

namespace {

#ifdef MPX_MPIRUN
// CI runs as root in a container (Open MPI refuses root unless told); two ranks may outnumber the
// cores; no pinning on a shared machine. A hang fails within the collective timeout, not CTest's.
std::string launch(int timeout_s) {
  return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MPX_DISTRIBUTED_TIMEOUT=" +
         std::to_string(timeout_s) + " MPX_PROGRESS=plain " + MPX_MPIRUN + " --oversubscribe --bind-to none";
}
const std::string kLaunch = launch(60);
#endif

bool have_mpi() {
#ifdef MPX_MPIRUN
  return true;
#else
  mpx::testing::skip_test("mpx was built without MPI (or mpirun is missing): no multi-rank CLI test");
  return false;
#endif
}

// Runs a whole shell command line, output (stderr too) and exit code.
CliRun shell(const std::string& cmd) { return mpx::testing::run_shell(cmd + " 2>&1"); }

#ifdef MPX_MPIRUN
// `mpirun -np N mpx <args>`.
CliRun mpirun(int n, const std::string& args) {
  return shell(kLaunch + " -np " + std::to_string(n) + " '" + mpx::testing::cli_path() + "' " + args);
}
#endif

fs::path tmp(const std::string& name) { return cli_temp_dir("mpx_cli_ddp_", name); }

int count(const std::string& s, const std::string& part) {
  int c = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++c;
  return c;
}

// The last value of `column` in a metrics.csv.
double last_metric(const fs::path& csv, const std::string& column) {
  std::istringstream in(read_file(csv));
  std::string header, line, last;
  std::getline(in, header);
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  std::vector<std::string> names, values;
  std::string cell;
  for (std::istringstream h(header); std::getline(h, cell, ',');) names.push_back(cell);
  for (std::istringstream v(last); std::getline(v, cell, ',');) values.push_back(cell);
  for (size_t i = 0; i < names.size() && i < values.size(); ++i)
    if (names[i] == column) return std::stod(values[i]);
  FAIL("no column " << column << " in " << csv);
  return 0;
}

size_t data_rows(const fs::path& csv) {
  const std::string s = read_file(csv);
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) - 1;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> n;
  for (const auto& e : fs::directory_iterator(dir)) n.push_back(e.path().filename().string());
  std::sort(n.begin(), n.end());
  return n;
}

const std::string kSmall = "--epochs 1 --limit-test 1000 --deterministic --print-freq 1000";

}  // namespace

TEST_CASE("mpirun -np 2 mpx train: the accuracy of one process with the global batch, and one set of outputs",
          "[cli][ddp]") {
  if (!have_mpi() || !have_fashion()) return;
#ifdef MPX_MPIRUN
  const fs::path one = tmp("one"), two = tmp("two");
  // Every rank takes every other image of the same order, so the two ranks' batches of 64 are
  // the one process's batches of 128: the same images per step, the same learning rate. What
  // differs is rounding and batch-norm statistics over 64 instead of 128 images. (A 2-step run
  // with --sync-bn at O0 matches one process to ~1e-7; at --lr 0.1 this short run is in its
  // unstable first phase, where such differences grow to points of accuracy, hence 0.05.)
  const std::string flags = "train " + kSmall + " --limit-train 6400 --lr 0.05";
  const CliRun a = run_mpx(flags + " --batch-size 128 --out " + q(one));
  REQUIRE(a.rc == 0);
  const CliRun b = mpirun(2, flags + " --batch-size 64 --out " + q(two));
  INFO(b.out);
  REQUIRE(b.rc == 0);
  CHECK(has(b.out, "batch 64 per rank x 2 ranks, lr 0.025 (0.05 x 64 x 2/256"));
  const double top1_one = last_metric(one / "metrics.csv", "test_top1");
  const double top1_two = last_metric(two / "metrics.csv", "test_top1");
  CHECK(top1_one > 75);  // it learned something: the comparison means something
  CHECK(std::abs(top1_two - top1_one) <= 0.5);
  // Rank 0 alone prints and writes: one epoch line, one summary, one metrics row, the same files.
  CHECK(count(b.out, "epoch 1/1: train loss") == 1);
  CHECK(count(b.out, "done in ") == 1);
  CHECK(data_rows(two / "metrics.csv") == 1);
  CHECK(names_in(two) == names_in(one));
  // The test split is shared out without padding: all 1000 images counted once.
  const CliRun e = mpirun(2, "train --evaluate --resume " + q(two / "checkpoint.safetensors") + " --limit-test 999");
  INFO(e.out);
  REQUIRE(e.rc == 0);
  CHECK(has(e.out, "(999 images,"));
  CHECK(count(e.out, "evaluate: top-1") == 1);
#endif
}

TEST_CASE("mpx train started by a launcher with one rank trains through DDP and ends bit for bit as without it",
          "[cli][ddp]") {
  // WORLD_SIZE=1 needs no MPI: it is how a GPU machine without MPI runs DDP's NCCL path.
  if (!have_fashion()) return;
  const fs::path plain = tmp("plain1"), env = tmp("env1");
  const std::string flags = "train " + kSmall + " --limit-train 1280 --batch-size 64";
  const CliRun a = run_mpx(flags + " --out " + q(plain));
  INFO(a.out);
  REQUIRE(a.rc == 0);
  CHECK(has(a.out, "batch 64, lr"));
  const CliRun b = run_mpx(flags + " --out " + q(env), "2>&1", "env WORLD_SIZE=1 RANK=0");
  INFO(b.out);
  REQUIRE(b.rc == 0);
  CHECK(has(b.out, "batch 64 per rank x 1 rank, lr"));
  require_same_model(plain / "checkpoint.safetensors", env / "checkpoint.safetensors");
#ifdef MPX_MPIRUN
  const fs::path one = tmp("np1");
  const CliRun c = mpirun(1, flags + " --out " + q(one));
  INFO(c.out);
  REQUIRE(c.rc == 0);
  CHECK(has(c.out, "batch 64 per rank x 1 rank, lr"));
  require_same_model(plain / "checkpoint.safetensors", one / "checkpoint.safetensors");
#endif
}

TEST_CASE("mpirun -np 2 mpx train: a run stopped by --prof and resumed ends bit for bit where an unbroken run does",
          "[cli][ddp]") {
  if (!have_mpi() || !have_fashion()) return;
#ifdef MPX_MPIRUN
  const fs::path whole = tmp("whole"), parts = tmp("parts"), other = tmp("other_world");
  const std::string flags = "train " + kSmall + " --limit-train 2560 --batch-size 64";  // 20 steps at 2 ranks
  REQUIRE(mpirun(2, flags + " --out " + q(whole)).rc == 0);
  const CliRun stop = mpirun(2, flags + " --prof 7 --out " + q(parts));
  INFO(stop.out);
  REQUIRE(stop.rc == 0);
  REQUIRE(has(stop.out, "Profiling ended at iteration 7 (epoch 1 step 7)"));
  fs::copy_file(parts / "checkpoint.safetensors", other / "stopped.safetensors");

  const CliRun go = mpirun(2, "train --resume " + q(parts / "checkpoint.safetensors"));
  INFO(go.out);
  REQUIRE(go.rc == 0);
  CHECK(has(go.out, "resumed from"));
  CHECK(!has(go.out, "warning"));
  require_same_model(whole / "checkpoint.safetensors", parts / "checkpoint.safetensors");
  CHECK(last_metric(whole / "metrics.csv", "test_top1") == last_metric(parts / "metrics.csv", "test_top1"));
  CHECK(last_metric(whole / "metrics.csv", "train_loss") == last_metric(parts / "metrics.csv", "train_loss"));

  // Another world size resumes, and says where: 7 global batches of 128 are 14 of 64.
  const CliRun alone = run_mpx("train --resume " + q(other / "stopped.safetensors") + " --out " + q(other / "run"));
  INFO(alone.out);
  REQUIRE(alone.rc == 0);
  CHECK(has(alone.out, "was written by 2 ranks, this run has 1: the global batch is now 64"));
  CHECK(has(alone.out, "epoch 1 goes on at step 14 of 40"));
  CHECK(has(alone.out, "epoch 1/1: train loss"));
#endif
}

TEST_CASE("mpirun -np 2 mpx train --sync-bn (and apex's --sync_bn) trains with synchronized batch norm", "[cli][ddp]") {
  if (!have_mpi() || !have_fashion()) return;
#ifdef MPX_MPIRUN
  for (const char* flag : {"--sync-bn", "--sync_bn"}) {
    const fs::path out = tmp(std::string("syncbn") + flag);
    const CliRun r = mpirun(2, "train " + kSmall + " --limit-train 1280 --batch-size 64 " + flag + " --out " + q(out));
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(has(r.out, "synchronized batch norm (--sync-bn)"));
    CHECK(has(r.out, "epoch 1/1: train loss"));
  }
#endif
}

TEST_CASE("mpirun -np 2 mpx dcgan trains both networks data-parallel, rank 0 writing the samples and one loss log",
          "[cli][ddp]") {
  if (!have_mpi() || !have_fashion()) return;
#ifdef MPX_MPIRUN
  const fs::path out = tmp("dcgan");
  const CliRun r = mpirun(2, "dcgan --epochs 1 --limit-train 256 --batch-size 32 --ngf 8 --ndf 8 --print-freq 1000 "
                             "--out " + q(out));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "batch 32 per rank x 2 ranks"));
  CHECK(count(r.out, "epoch 1/1: loss D") == 1);
  CHECK(fs::exists(out / "samples_epoch1.png"));
  CHECK(fs::exists(out / "checkpoint.safetensors"));
  CHECK(data_rows(out / "losses.csv") == 4);  // 256 images / (32 x 2) = 4 steps, logged once
#endif
}

TEST_CASE("mpx train data-parallel errors: flags that differ between ranks, a rank that fails alone", "[cli][ddp]") {
  if (!have_mpi() || !have_fashion()) return;
#ifdef MPX_MPIRUN
  const fs::path out = tmp("errors");
  const std::string base = "'" + mpx::testing::cli_path() + "' train --limit-train 640 --epochs 1 --out " + q(out);
  // MPMD: rank 1 gets another learning rate.
  const CliRun differ = shell(kLaunch + " -np 1 " + base + " --lr 0.1 : -np 1 " + base + " --lr 0.2");
  INFO(differ.out);
  CHECK(differ.rc != 0);
  CHECK(has(differ.out, "rank 1 was started with other run flags than rank 0"));
  // Rank 1 stops on its own bad flag while rank 0 waits for it: the job ends, with rank 1's reason.
  const CliRun alone = shell(kLaunch + " -np 1 " + base + " : -np 1 " + base + " --threads 0");
  INFO(alone.out);
  CHECK(alone.rc != 0);
  CHECK(has(alone.out, "[rank 1/2] mpx train: --threads must be at least 1"));
#endif
}

TEST_CASE("mpirun -np 2 mpx train: a rank that stops answering ends the run with the timeout error, not a hang",
          "[cli][ddp]") {
  if (!have_mpi() || !have_fashion()) return;
#ifdef MPX_MPIRUN
  const fs::path out = tmp("frozen");
  // Rank 1 freezes (SIGSTOP) two seconds in, in the middle of its set-up or training; rank 0's
  // next collective then fails after MPX_DISTRIBUTED_TIMEOUT=3 s and mpirun ends the job.
  const std::string rank1_freezes = "sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then (sleep 2; kill -STOP $$) & fi; "
                                    "exec \"$0\" \"$@\"' '" + mpx::testing::cli_path() + "'";
  const CliRun r = shell(launch(3) + " -np 2 " + rank1_freezes + " train " + kSmall +
                         " --limit-train 12800 --batch-size 64 --out " + q(out));
  INFO(r.out);
  CHECK(r.rc != 0);
  CHECK(has(r.out, "[rank 0/2] mpx: error: mpx distributed:"));
  CHECK(has(r.out, "on rank 0 of 2 got no answer from the other ranks within 3 s"));
#endif
}

TEST_CASE("mpx train --nproc-per-node 2 re-launches itself under mpirun, and says so when mpirun is missing", "[cli][ddp]") {
  if (!have_mpi() || !have_fashion()) return;
#ifdef MPX_MPIRUN
  const fs::path out = tmp("nproc");
  const std::string cli = "'" + mpx::testing::cli_path() + "'";
  const CliRun r = shell("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MPX_DISTRIBUTED_TIMEOUT=60 "
                         "MPX_PROGRESS=plain PATH='" + fs::path(MPX_MPIRUN).parent_path().string() + ":/usr/bin:/bin' " +
                         cli + " train --nproc-per-node 2 --limit-train 1280 --batch-size 64 --prof 3 --out " + q(out));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "per rank x 2 ranks"));
  CHECK(has(r.out, "Profiling ended at iteration 3"));
  const CliRun none = shell("env PATH=/nonexistent " + cli + " train --nproc-per-node 2 --out " + q(out));
  CHECK(none.rc == 2);
  CHECK(has(none.out, "--nproc-per-node re-launches mpx under mpirun, which is not on PATH"));
  const CliRun bad = shell(cli + " train --nproc-per-node zero --out " + q(out));
  CHECK(bad.rc == 2);
  CHECK(has(bad.out, "--nproc-per-node expects a number of processes"));
#endif
}

TEST_CASE("mpirun -np 2 mpx gpt equals one process with twice the batch, within float rounding", "[cli][ddp][gpt]") {
  if (!have_mpi()) return;
  if (!fs::exists("/usr/share/common-licenses")) {
    mpx::testing::skip_test("no /usr/share/common-licenses (mpx gpt's default corpus) on this machine");
    return;
  }
#ifdef MPX_MPIRUN
  const fs::path two = tmp("gpt_np2"), one = tmp("gpt_np1");
  const std::string flags = "gpt --context 32 --steps 8 --eval-interval 8 --eval-iters 2 --print-freq 4 --opt-level O0";
  const CliRun b = mpirun(2, flags + " -b 4 --out " + q(two));
  INFO(b.out);
  REQUIRE(b.rc == 0);
  CHECK(has(b.out, "per rank x 2 ranks"));
  CHECK(count(b.out, "mpx gpt: gpt-tiny") == 1);  // rank 0 alone prints
  const CliRun a = run_mpx(flags + " -b 8 --out " + q(one));
  INFO(a.out);
  REQUIRE(a.rc == 0);
  CHECK(last_metric(two / "metrics.csv", "loss") == Approx(last_metric(one / "metrics.csv", "loss")).epsilon(1e-4));
  CHECK(last_metric(two / "eval.csv", "val_loss") == Approx(last_metric(one / "eval.csv", "val_loss")).epsilon(1e-4));
#endif
}
