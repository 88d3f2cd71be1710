// End-to-end tests of the mpx command line (train, dcgan, info): files written, resume, determinism, error handling.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <mpx/mpx.h>

#include "tests/cli_util.h"

namespace fs = std::filesystem;

namespace {

using mpx::testing::mpx_err;
using mpx::testing::run_mpx;
using mpx::testing::have_fashion;
using mpx::testing::require_same_model;
using Run = mpx::testing::CliRun;
std::string read(const fs::path& p) { return mpx::testing::read_file(p); }

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

fs::path temp_dir(const std::string& name) { return mpx::testing::cli_temp_dir("mpx_cli_", name); }

// A tiny deterministic run: 512 training images in 8 steps of 64, 256 test images.
const std::string kTiny = "--limit-train 512 --limit-test 256 -b 64 --deterministic --opt-level O1 ";

}  // namespace

TEST_CASE("mpx info prints the version line and the build", "[cli]") {
  const Run r = run_mpx("info");
  CHECK(r.rc == 0);
  CHECK(r.out.rfind("mpx 0.1.0\n", 0) == 0);
  CHECK(r.out.find("CPU features:") != std::string::npos);
  CHECK(r.out.find("CPU attention: f32 FMA tiles; bf16 ") != std::string::npos);
  CHECK(r.out.find("CUDA") != std::string::npos);
}

TEST_CASE("mpx train: one short epoch writes metrics and curves and a checkpoint that resume continues and -e evaluates", "[cli]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("train");
  Run r = run_mpx("train " + kTiny + "--epochs 1 --out '" + out.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("epoch 1/1") != std::string::npos);

  const std::string csv = read(out / "metrics.csv");
  CHECK(csv.rfind("epoch,global_step,lr,train_loss,train_top1,test_loss,test_top1,test_top5,", 0) == 0);
  CHECK(lines(csv) == 2);
  const std::string jsonl = read(out / "metrics.jsonl");
  CHECK(lines(jsonl) == 1);
  CHECK(jsonl.rfind("{\"epoch\": 1, \"global_step\": 8,", 0) == 0);
  CHECK(jsonl.find("\"test_top5\": ") != std::string::npos);
  const std::string svg = read(out / "curves.svg");
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.find("<polyline") != std::string::npos);
  CHECK(svg.find("test top-1") != std::string::npos);
  CHECK(svg.find("</svg>") != std::string::npos);

  mpx::Metadata meta;
  const mpx::TensorDict ck = mpx::load_tensors((out / "checkpoint.safetensors").string(), &meta);
  CHECK(meta.at("mpx.checkpoint") == "train");
  CHECK(meta.at("epoch") == "1");
  CHECK(meta.at("step_in_epoch") == "0");
  CHECK(meta.count("amp.loss_scaler0.loss_scale") == 1);
  CHECK(meta.count("rng.offset") == 1);
  CHECK(ck.count("model.fc.weight") == 1);
  CHECK(ck.count("optimizer.state.0.momentum_buffer") == 1);
  // No temp files left behind by the atomic writes.
  for (const auto& e : fs::directory_iterator(out)) CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);

  // --resume alone (run flags come from the checkpoint) with more epochs continues at epoch 2.
  r = run_mpx("train --resume '" + (out / "checkpoint.safetensors").string() + "' --epochs 2 --out '" + out.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("resumed from") != std::string::npos);
  CHECK(r.out.find("epoch 2/2") != std::string::npos);
  CHECK(r.out.find("epoch 1/2") == std::string::npos);
  CHECK(lines(read(out / "metrics.csv")) == 3);
  mpx::Metadata meta2;
  mpx::load_tensors((out / "checkpoint.safetensors").string(), &meta2);
  CHECK(meta2.at("epoch") == "2");
  CHECK(meta2.at("global_step") == "16");

  // Evaluate only.
  r = run_mpx("train --resume '" + (out / "checkpoint.safetensors").string() + "' -e");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(r.out.find("evaluate: top-1 ") != std::string::npos);
  CHECK(r.out.find("top-5 ") != std::string::npos);
}

TEST_CASE("mpx train --deterministic: stopped and resumed runs equal an uninterrupted one bit for bit", "[cli]") {
  if (!have_fashion()) return;
  const fs::path full = temp_dir("full"), split = temp_dir("split"), mid = temp_dir("mid");
  // Uninterrupted: 2 epochs.
  Run r = run_mpx("train " + kTiny + "--epochs 2 --out '" + full.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  // Stopped at the end of epoch 1 (--prof 8 = one epoch of 8 steps), then resumed.
  r = run_mpx("train " + kTiny + "--epochs 2 --prof 8 --out '" + split.string() + "'");
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("Profiling ended at iteration 8") != std::string::npos);
  r = run_mpx("train --resume '" + (split / "checkpoint.safetensors").string() + "' --out '" + split.string() + "'");
  REQUIRE(r.rc == 0);
  require_same_model(full / "checkpoint.safetensors", split / "checkpoint.safetensors");
  // Stopped in the middle of epoch 1 (step 5 of 8), then resumed: the data position is restored too.
  r = run_mpx("train " + kTiny + "--epochs 2 --prof 5 --out '" + mid.string() + "'");
  REQUIRE(r.rc == 0);
  mpx::Metadata meta;
  mpx::load_tensors((mid / "checkpoint.safetensors").string(), &meta);
  CHECK(meta.at("step_in_epoch") == "5");
  r = run_mpx("train --resume '" + (mid / "checkpoint.safetensors").string() + "' --out '" + mid.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  require_same_model(full / "checkpoint.safetensors", mid / "checkpoint.safetensors");
  // The epoch metrics of the resumed run match too (same loss, accuracy, loss scale).
  auto strip_timing = [](const std::string& csv) {
    std::string o;
    std::stringstream ss(csv);
    for (std::string line; std::getline(ss, line);) {
      std::vector<std::string> cells;
      std::stringstream ls(line);
      for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
      for (size_t i = 0; i < cells.size(); ++i)
        if (i < 8 || i > 10) o += cells[i] + ",";  // drop images_per_s, epoch_seconds, eval_seconds
      o += "\n";
    }
    return o;
  };
  CHECK(strip_timing(read(full / "metrics.csv")) == strip_timing(read(mid / "metrics.csv")));
}

TEST_CASE("mpx: wrong flags and missing data and bad checkpoints give one line and the right exit code", "[cli]") {
  Run r = mpx_err("train --epoch 2");
  CHECK(r.rc == 2);
  CHECK(lines(r.out) == 1);
  CHECK(r.out.find("unknown flag --epoch") != std::string::npos);
  CHECK(r.out.find("did you mean --epochs?") != std::string::npos);

  r = mpx_err("train --opt-level O4");
  CHECK(r.rc == 2);
  CHECK(lines(r.out) == 1);
  CHECK(r.out.find("O0, O1, O2, O3") != std::string::npos);

  r = mpx_err("train -b many");
  CHECK(r.rc == 2);
  CHECK(r.out.find("--batch-size expects an integer") != std::string::npos);

  r = mpx_err("train -j 100000");  // beyond what the OS gives a process: refused before any thread starts
  CHECK(r.rc == 2);
  CHECK(r.out.find("--workers must be at most 1024") != std::string::npos);
  r = mpx_err("train --threads 100000");
  CHECK(r.rc == 2);
  CHECK(r.out.find("--threads must be at most 4096") != std::string::npos);
  r = mpx_err("dcgan --nz 1000000000");  // a 256 GB layer before
  CHECK(r.rc == 2);
  CHECK(r.out.find("--nz must be at most 65536") != std::string::npos);

  r = mpx_err("trian");
  CHECK(r.rc == 2);
  CHECK(r.out.find("did you mean train?") != std::string::npos);

  r = mpx_err("train --dataset cifar10 --data /nonexistent/cifar");
  CHECK(r.rc == 1);
  CHECK(lines(r.out) == 1);
  CHECK(r.out.find("/nonexistent/cifar") != std::string::npos);
  CHECK(r.out.find("--data DIR") != std::string::npos);

  const fs::path dir = temp_dir("errors");
  {
    std::ofstream f(dir / "bad.safetensors", std::ios::binary);
    f << "this is not a checkpoint at all, just some bytes";
  }
  r = mpx_err("train --resume '" + (dir / "bad.safetensors").string() + "'");
  CHECK(r.rc == 1);
  CHECK(lines(r.out) == 1);
  CHECK(r.out.find("unreadable") != std::string::npos);
  CHECK(r.out.find("bad.safetensors") != std::string::npos);

  // IDX images of another size than 28 x 28 are named as such, not found out by the first linear layer.
  {
    auto idx = [&](const std::string& name, std::vector<uint32_t> dims) {
      std::ofstream f(dir / name, std::ios::binary);
      const char magic[4] = {0, 0, 0x08, static_cast<char>(dims.size())};
      f.write(magic, 4);
      int64_t n = 1;
      for (uint32_t d : dims) {
        const char be[4] = {static_cast<char>(d >> 24), static_cast<char>(d >> 16), static_cast<char>(d >> 8),
                            static_cast<char>(d)};
        f.write(be, 4);
        n *= d;
      }
      f << std::string(static_cast<size_t>(n), '\0');
    };
    fs::create_directories(dir / "fm32");
    idx("fm32/train-images-idx3-ubyte", {4, 32, 32});
    idx("fm32/train-labels-idx1-ubyte", {4});
    idx("fm32/t10k-images-idx3-ubyte", {4, 28, 28});
    idx("fm32/t10k-labels-idx1-ubyte", {4});
    r = mpx_err("train --epochs 1 -b 2 --data '" + (dir / "fm32").string() + "'");
    CHECK(r.rc == 1);
    CHECK(r.out.find("holds 32 x 32 images; fashion-mnist is 28 x 28") != std::string::npos);
  }

  r = mpx_err("train --resume '" + (dir / "missing.safetensors").string() + "'");
  CHECK(r.rc == 1);
  CHECK(r.out.find("no such file") != std::string::npos);

#ifndef MPX_WITH_CUDA
  r = mpx_err("train --device cuda");
  CHECK(r.rc == 1);
  CHECK(lines(r.out) == 1);
  CHECK(r.out.find("without the CUDA backend") != std::string::npos);
#endif
}

TEST_CASE("mpx without its CUDA module: info says why CUDA is off, --device cuda is a one-line error naming it", "[cli]") {
#ifdef MPX_WITH_CUDA
  const auto has = mpx::testing::has;
  Run r = run_mpx("info", "2>&1", "MPX_DISABLE_CUDA=1");
  CHECK(r.rc == 0);
  CHECK(has(r.out, "CUDA: off: the CUDA module is disabled by MPX_DISABLE_CUDA; unset it to use the GPU"));
  CHECK(has(r.out, "GPU JPEG decoding: off (the CUDA module is disabled by MPX_DISABLE_CUDA"));
  CHECK(has(r.out, "distributed: MPI") == mpx::distributed::mpi_available());
  CHECK_FALSE(has(r.out, "CUDA devices:"));
  r = run_mpx("train --device cuda --synthetic --prof 1", "2>&1 1>/dev/null", "MPX_DISABLE_CUDA=1");
  CHECK(r.rc == 1);
  CHECK(lines(r.out) == 1);
  CHECK(has(r.out, "--device cuda: the CUDA module is disabled by MPX_DISABLE_CUDA"));
#endif
}

TEST_CASE("mpx train --gpu-decode: needs --device cuda, an image folder and nvJPEG, each said in one line", "[cli]") {
  const auto has = mpx::testing::has;
  Run r = run_mpx("info");
  CHECK(has(r.out, mpx::data::have_nvjpeg() ? "GPU JPEG decoding: nvJPEG (mpx train --gpu-decode)"
                                            : "GPU JPEG decoding: off (no nvJPEG at build time"));
  r = mpx_err("train --gpu-decode");
  CHECK(r.rc == 2);
  CHECK(lines(r.out) == 1);
  CHECK(has(r.out, "mpx train: --gpu-decode decodes on the GPU the run trains on; add --device cuda (this run "
                   "trains on cpu)"));
  // apex-style spelling too; the data set is checked before the machine's GPUs.
  r = mpx_err("train --gpu_decode --device cuda --dataset fashion-mnist");
  CHECK(r.rc == 2);
  CHECK(lines(r.out) == 1);
  CHECK(has(r.out, "--gpu-decode decodes JPEG files, so it needs --dataset imagefolder (this run has fashion-mnist"));
  r = mpx_err("train --gpu-decode --device cuda --dataset imagefolder --synthetic");
  CHECK(r.rc == 2);
  CHECK(has(r.out, "--gpu-decode has nothing to decode with --synthetic"));
  r = mpx_err("train --gpu-decode --device cuda --dataset imagefolder --data /nonexistent/images");
  CHECK(lines(r.out) == 1);
  if (!mpx::data::have_nvjpeg()) {
    CHECK(r.rc == 2);
    CHECK(has(r.out, "--gpu-decode needs nvJPEG, which this build lacks"));
    CHECK(has(r.out, "tools/install-deps.sh"));
    CHECK(has(r.out, "-DMPX_NVJPEG=ON"));
  } else if (!mpx::cuda_is_available()) {
    CHECK(r.rc == 1);
    CHECK(has(r.out, "no CUDA device is visible"));
  }
}

TEST_CASE("mpx dcgan --prof 3 writes a valid PNG sample grid and loss curves", "[cli]") {
  if (!have_fashion()) return;
  const fs::path out = temp_dir("dcgan");
  const Run r = run_mpx("dcgan --prof 3 -b 16 --limit-train 64 --ngf 16 --ndf 16 --out '" + out.string() + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const std::string png = read(out / "samples_epoch1.png");
  REQUIRE(png.size() > 33);
  CHECK(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(png.substr(12, 4) == "IHDR");
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(png[at])) << 24) | (uint32_t(uint8_t(png[at + 1])) << 16) |
           (uint32_t(uint8_t(png[at + 2])) << 8) | uint32_t(uint8_t(png[at + 3]));
  };
  // 64 samples of 28 px in an 8 x 8 grid with 2-pixel gaps: 8 * 30 + 2.
  CHECK(be32(16) == 242);
  CHECK(be32(20) == 242);
  CHECK(png.substr(png.size() - 8, 4) == "IEND");
  // The image decodes (stb_image through the library's reader) to the same size.
  const mpx::Tensor img = mpx::data::read_image((out / "samples_epoch1.png").string(), 0);
  CHECK(img.sizes() == mpx::IntList{242, 242, 1});
  const std::string csv = read(out / "losses.csv");
  CHECK(csv.rfind("epoch,step,global_step,loss_d,loss_g,", 0) == 0);
  CHECK(lines(csv) == 4);
  CHECK(read(out / "losses.svg").find("<polyline") != std::string::npos);
  mpx::Metadata meta;
  mpx::load_tensors((out / "checkpoint.safetensors").string(), &meta);
  CHECK(meta.at("mpx.checkpoint") == "dcgan");
  CHECK(meta.count("amp.loss_scaler2.loss_scale") == 1);  // three scalers
}
