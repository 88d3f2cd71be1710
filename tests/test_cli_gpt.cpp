// `mpx gpt` end to end: the default corpus, loss falling at O1 bf16/f16, the LSTM model, resume bit for bit (with stochastic rounding too), generation, token shards, Hugging Face export, bad input.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <mpx/mpx.h>

#include "models/gpt_hf.h"
#include "tests/cli_util.h"

namespace fs = std::filesystem;
using mpx::testing::CliRun;
using mpx::testing::has;
using mpx::testing::q;
using mpx::testing::require_same_model;
using mpx::testing::read_file;
using mpx::testing::run_mpx;

namespace {

fs::path tmp(const std::string& name) { return mpx::testing::cli_temp_dir("mpx_cli_gpt_", name); }

// A run small enough for CI: gpt-tiny on 64-token windows of the default corpus.
const std::string kTiny = "gpt --context 64 -b 8 --print-freq 5 --eval-iters 4";

// The values of `column` in a metrics CSV, in order.
std::vector<double> column(const fs::path& csv, const std::string& name) {
  std::istringstream in(read_file(csv));
  std::string header, line, cell;
  std::getline(in, header);
  int at = -1, i = 0;
  std::istringstream h(header);
  while (std::getline(h, cell, ',')) {
    if (cell == name) at = i;
    ++i;
  }
  REQUIRE(at >= 0);
  std::vector<double> v;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    for (int k = 0; std::getline(l, cell, ','); ++k)
      if (k == at) v.push_back(std::stod(cell));
  }
  return v;
}

// An llm.c token shard of `tokens`.
void write_shard(const fs::path& p, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(2 * tokens.size()));
}

// Resumes the stopped run in `parts` and checks it ends where the unbroken run in `whole` did:
// no warning, the same weights bit for bit, the same logged losses.
void resume_matches(const fs::path& whole, const fs::path& parts) {
  const CliRun go = run_mpx("gpt --resume " + q(parts / "checkpoint.safetensors"));
  INFO(go.out);
  REQUIRE(go.rc == 0);
  CHECK(!has(go.out, "warning"));
  require_same_model(whole / "checkpoint.safetensors", parts / "checkpoint.safetensors");
  CHECK(column(whole / "metrics.csv", "loss") == column(parts / "metrics.csv", "loss"));
  CHECK(column(whole / "eval.csv", "val_loss") == column(parts / "eval.csv", "val_loss"));
}

}  // namespace

TEST_CASE("mpx gpt trains gpt-tiny on the default corpus at O1 bf16 and f16 (f16 with --checkpoint-activations): the "
          "loss falls, no step is skipped in bf16", "[cli][gpt]") {
  if (!fs::exists("/usr/share/common-licenses")) {
    mpx::testing::skip_test("no /usr/share/common-licenses (the default corpus) on this machine");
    return;
  }
  for (const std::string dtype : {"bf16", "f16"}) {
    const fs::path out = tmp("o1_" + dtype);
    const std::string ckpt = dtype == "f16" ? " --checkpoint-activations" : "";
    const CliRun r = run_mpx(kTiny + " --steps 40 --lr 3e-3 --eval-interval 40 --sample 30 --dtype " + dtype + ckpt +
                             " --out " + q(out));
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(has(r.out, "mpx gpt: gpt-tiny"));
    CHECK(has(r.out, "the license texts of"));
    CHECK(has(r.out, "validation loss"));
    CHECK(has(r.out, "--- sample at step 40 ---"));
    const std::vector<double> loss = column(out / "metrics.csv", "loss");
    REQUIRE(loss.size() == 8);
    CHECK(loss.back() < loss.front() - 0.5);
    if (dtype == "bf16") CHECK(column(out / "metrics.csv", "skipped").back() == 0);
    const std::vector<double> val = column(out / "eval.csv", "val_loss");
    REQUIRE(val.size() == 1);
    CHECK(std::isfinite(val[0]));
    CHECK(val[0] < std::log(100.0));  // below a uniform guess over a vocabulary of ~100 characters
    CHECK(fs::exists(out / "checkpoint.safetensors"));
    CHECK(has(read_file(out / "loss.svg"), "<svg"));
  }
}

TEST_CASE("mpx gpt --arch lstm-lm trains the LSTM language model at O0", "[cli][gpt]") {
  if (!fs::exists("/usr/share/common-licenses")) return;
  const fs::path out = tmp("lstm");
  const CliRun r = run_mpx(kTiny + " --arch lstm-lm --opt-level O0 --steps 30 --lr 3e-3 --out " + q(out));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const std::vector<double> loss = column(out / "metrics.csv", "loss");
  REQUIRE(loss.size() == 6);
  CHECK(loss.back() < loss.front() - 0.5);
}

TEST_CASE("mpx train -a gpt-tiny --dataset text:FILE is mpx gpt on that file, other --dataset forms are clear errors",
          "[cli][gpt]") {
  const fs::path dir = tmp("train_a");
  {
    std::ofstream f(dir / "corpus.txt");
    for (int i = 0; i < 400; ++i) f << "the quick brown fox jumps over the lazy dog " << i % 7 << "\n";
  }
  const CliRun r = run_mpx("train -a gpt-tiny --context 32 -b 4 --steps 10 --print-freq 5 --eval-iters 2 --dataset text:" +
                           q(dir / "corpus.txt") + " --out " + q(dir / "o"));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "corpus.txt"));
  CHECK(column(dir / "o" / "metrics.csv", "loss").size() == 2);
  CliRun e = mpx::testing::mpx_err("train --arch=lstm-lm --dataset cifar10 --out " + q(dir / "e"));
  CHECK(e.rc == 2);
  CHECK(has(e.out, "--dataset text:FILE"));
  e = mpx::testing::mpx_err("train -a gpt-tiny --epochs 3 --dataset text:" + q(dir / "corpus.txt") + " --out " + q(dir / "e"));
  CHECK(e.rc == 2);
  CHECK(has(e.out, "--epochs"));
}

TEST_CASE("mpx gpt: a run stopped by --prof and resumed ends bit for bit where an unbroken one does, and generation is "
          "deterministic under a seed", "[cli][gpt]") {
  if (!fs::exists("/usr/share/common-licenses")) return;
  const fs::path whole = tmp("whole"), parts = tmp("parts");
  const std::string flags = kTiny + " --steps 12 --eval-interval 6 --dropout 0.1 --deterministic";
  REQUIRE(run_mpx(flags + " --out " + q(whole)).rc == 0);
  const CliRun stop = run_mpx(flags + " --prof 5 --out " + q(parts));
  INFO(stop.out);
  REQUIRE(stop.rc == 0);
  CHECK(has(stop.out, "Profiling ended at iteration 5"));
  // The checkpoint keeps --deterministic, so `--resume` alone runs on the stopped run's thread count.
  mpx::Metadata meta;
  (void)mpx::load_tensors((parts / "checkpoint.safetensors").string(), &meta);
  CHECK(!meta["flag.--deterministic"].empty());
  resume_matches(whole, parts);

  const std::string gen = "gpt --resume " + q(whole / "checkpoint.safetensors") + " --sample 40 --top-k 5 --generate 'The '";
  const CliRun a = run_mpx(gen + " --seed 3", "2>/dev/null"), b = run_mpx(gen + " --seed 3", "2>/dev/null");
  REQUIRE(a.rc == 0);
  CHECK(a.out.rfind("The ", 0) == 0);
  CHECK(a.out.size() == 4 + 40 + 1);  // the prompt, 40 characters and a newline
  CHECK(a.out == b.out);
  const CliRun g = run_mpx(gen + " --temperature 0", "2>/dev/null"), h = run_mpx(gen + " --temperature 0 --seed 9", "2>/dev/null");
  CHECK(g.out == h.out);  // greedy decoding does not draw
  CHECK(run_mpx(gen + " --top-p 1e-9 --seed 5", "2>/dev/null").out == g.out);  // a nucleus of one token is greedy
  const CliRun nucleus = run_mpx(gen + " --top-p 0.8 --seed 3", "2>/dev/null");
  CHECK(nucleus.rc == 0);
  CHECK(nucleus.out.size() == a.out.size());
}

TEST_CASE("mpx gpt --generate: the key/value cache and the LSTM's carried state give the tokens of the whole window, "
          "past the context too", "[cli][gpt]") {
  if (!fs::exists("/usr/share/common-licenses")) return;
  for (const std::string arch : {"gpt-tiny", "lstm-lm"}) {
    INFO(arch);
    const fs::path out = tmp("cache_" + arch);
    REQUIRE(run_mpx("gpt --arch " + arch + " --context 16 -b 8 --steps 4 --eval-iters 1 --opt-level O0 --out " +
                    q(out)).rc == 0);
    // 30 tokens after a 3-character prompt: 13 a token at a time, then the window slides past the context of 16.
    const std::string gen = "gpt --resume " + q(out / "checkpoint.safetensors") + " --sample 30 --seed 4 --generate 'The'";
    const CliRun cached = run_mpx(gen, "2>/dev/null"), whole = run_mpx(gen, "2>/dev/null", "MPX_GENERATE_CACHE=0");
    REQUIRE(cached.rc == 0);
    CHECK(cached.out.size() == 3 + 30 + 1);
    CHECK(cached.out == whole.out);
  }
}

TEST_CASE("mpx gpt --stochastic-rounding without masters: a stopped and resumed run adopts the flags and ends bit for "
          "bit where an unbroken one does", "[cli][gpt]") {
  if (!fs::exists("/usr/share/common-licenses")) return;
  const fs::path whole = tmp("sr_whole"), parts = tmp("sr_parts");
  const std::string flags = kTiny + " --steps 6 --eval-interval 3 --print-freq 3 --eval-iters 2 --opt-level O2 "
                                    "--dtype bf16 --master-weights false --stochastic-rounding --deterministic";
  const CliRun w = run_mpx(flags + " --out " + q(whole));
  INFO(w.out);
  REQUIRE(w.rc == 0);
  // Stopped where a progress line falls (--print-freq 3), so both runs log the same windows.
  REQUIRE(run_mpx(flags + " --prof 3 --out " + q(parts)).rc == 0);
  mpx::Metadata meta;
  mpx::load_tensors((parts / "checkpoint.safetensors").string(), &meta);
  CHECK(meta.at("flag.--stochastic-rounding") == "1");
  CHECK(meta.at("opt.stochastic_rounding.enabled") == "1");
  resume_matches(whole, parts);
}

TEST_CASE("mpx gpt --grad-accum 2 with half the batch equals the whole batch in one step, within float rounding",
          "[cli][gpt]") {
  if (!fs::exists("/usr/share/common-licenses")) return;
  const fs::path whole = tmp("accum1"), halves = tmp("accum2");
  // Validation reads --eval-iters batches of -b sequences: twice as many halves see the same windows.
  const std::string flags = "gpt --context 32 --steps 6 --print-freq 3 --eval-interval 6 --opt-level O0";
  const CliRun a = run_mpx(flags + " -b 8 --eval-iters 2 --out " + q(whole)),
               b = run_mpx(flags + " -b 4 --grad-accum 2 --eval-iters 4 --out " + q(halves));
  INFO(a.out << b.out);
  REQUIRE(a.rc == 0);
  REQUIRE(b.rc == 0);
  CHECK(has(b.out, "256 tokens per step (batch 4 x 2 accumulated)"));
  const std::vector<double> la = column(whole / "metrics.csv", "loss"), lb = column(halves / "metrics.csv", "loss");
  REQUIRE(la.size() == 2);
  REQUIRE(lb.size() == 2);
  for (size_t i = 0; i < la.size(); ++i) CHECK(lb[i] == Approx(la[i]).epsilon(1e-4));
  CHECK(column(halves / "eval.csv", "val_loss")[0] == Approx(column(whole / "eval.csv", "val_loss")[0]).epsilon(1e-4));
}

TEST_CASE("mpx gpt on llm.c token shards: trains, exports Hugging Face weights that --pretrained loads again", "[cli][gpt]") {
  const fs::path dir = tmp("shards");
  std::vector<uint16_t> tok;
  for (int i = 0; i < 6000; ++i) tok.push_back(static_cast<uint16_t>((i * 7 + (i / 13)) % 50257));
  write_shard(dir / "train_000.bin", tok);
  write_shard(dir / "val_000.bin", std::vector<uint16_t>(tok.begin(), tok.begin() + 1000));
  const fs::path out = dir / "run", hf = dir / "hf.safetensors";
  const CliRun r = run_mpx("gpt --tokens " + q(dir / "train_*.bin") + " --val-tokens " + q(dir / "val_*.bin") +
                           " --context 32 -b 4 --steps 3 --eval-iters 2 --export-hf " + q(hf) + " --out " + q(out));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "vocabulary 50257"));
  CHECK(has(r.out, "wrote " + hf.string()));
  const mpx::TensorDict t = mpx::load_tensors(hf.string());
  CHECK(t.count("transformer.h.0.attn.c_attn.weight") == 1);
  const CliRun g = run_mpx("gpt --tokens " + q(dir / "train_*.bin") + " --context 32 --pretrained " + q(hf) +
                               " --generate '464 2068' --sample 5 --temperature 0",
                           "2>&1");
  INFO(g.out);
  REQUIRE(g.rc == 0);
  CHECK(g.out.rfind("[464 2068 ", 0) == 0);
  // Generating needs no data: the checkpoint gives the vocabulary and, without --arch, the preset.
  const CliRun g2 = run_mpx("gpt --pretrained " + q(hf) + " --generate '464 2068' --sample 5 --temperature 0", "2>&1");
  INFO(g2.out);
  CHECK(g2.rc == 0);
  CHECK(g2.out == g.out);
  const CliRun no_data = mpx::testing::mpx_err("gpt --pretrained " + q(hf) + " --steps 2 --out " + q(dir / "nd"));
  CHECK(no_data.rc == 2);
  CHECK(has(no_data.out, "give --tokens GLOB"));
  // A GPT-2 of a shape no preset has is named as such.
  mpx::models::GPTConfig odd = mpx::models::GPTConfig::preset("gpt-tiny", 300);
  odd.n_layer = 2;
  mpx::models::save_hf_gpt2(*mpx::models::GPT(odd), (dir / "odd.safetensors").string());
  const CliRun o = mpx::testing::mpx_err("gpt --pretrained " + q(dir / "odd.safetensors") + " --generate '1 2'");
  CHECK(o.rc == 2);
  CHECK(has(o.out, "2 layers, width 128 and context 128, which is none of the presets"));

  // A shard cut short is refused, naming the file and where.
  std::vector<char> bytes;
  {
    const std::string all = read_file(dir / "train_000.bin");
    std::ofstream(dir / "bad_000.bin", std::ios::binary).write(all.data(), 3000);
  }
  const CliRun bad = mpx::testing::mpx_err("gpt --tokens " + q(dir / "bad_*.bin") + " --out " + q(dir / "bad"));
  CHECK(bad.rc == 1);
  CHECK(has(bad.out, "bad_000.bin"));
}

TEST_CASE("mpx gpt: bad flags and data are clear errors", "[cli][gpt]") {
  const fs::path dir = tmp("errors");
  auto err = [&](const std::string& a) { return mpx::testing::mpx_err("gpt " + a + " --out " + q(dir / "o")); };
  struct Case {
    std::string args;
    int rc;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"--arch gpt-tinny", 2, "did you mean gpt-tiny"},
      {"--context 4096", 2, "longer than gpt-tiny's 128 learned positions"},
      {"--text " + q(dir / "missing.txt"), 1, "missing.txt"},
      {"--generate hello", 2, "--generate needs a model"},
      {"--top-p 0", 2, "--top-p must be in (0, 1]"},
      {"--arch lstm-lm --pretrained " + q(dir / "x.safetensors"), 2, "not a GPT-2 model"},
      {"--text " + q(dir / "a") + " --tokens " + q(dir / "b"), 2, "not both"},
      {"--opt-level O2 --stochastic-rounding", 2, "add --master-weights false"},
      {"--opt-level O1 --stochastic-rounding", 2, "use --opt-level O3, or O2 with --master-weights false"},
      {"--opt-level O3 --low-precision-state", 2, "add --stochastic-rounding"},
      {"--text --steps 2", 2, "--text needs a value (FILE), got the flag --steps"},
      {"--threads 100000", 2, "--threads must be at most 4096"},
      {"--context 99999999999999999999", 2, "--context must be at most"},
      {"--min-lr 1 --lr 0.001", 2, "--min-lr (the cosine's floor) must not exceed --lr"},
      {"--beta2 1", 2, "--beta2 must be below 1"},
      {"--opt-level O0 --dtype f16 --context 4096", 2, "--dtype f16 has no effect at --opt-level O0"},
  };
  CliRun r;
  for (const Case& c : cases) {
    INFO(c.args);
    r = err(c.args);
    CHECK(r.rc == c.rc);
    CHECK(has(r.out, c.says));
  }
  {
    std::ofstream(dir / "short.txt") << "tiny";
  }
  // A static scale that overflows every step names the scale, and its advice works.
  if (fs::exists("/usr/share/common-licenses")) {
    const std::string small = "--context 32 -b 4 --steps 4 --print-freq 4 --eval-interval 4 --eval-iters 1 --dtype f16 ";
    r = err(small + "--arch lstm-lm --checkpoint-activations");
    CHECK(r.rc == 2);
    CHECK(has(r.out, "--checkpoint-activations recomputes GPT blocks; --arch lstm-lm has none"));
    r = err(small + "--loss-scale 1e30");
    CHECK(r.rc == 1);
    CHECK(has(r.out, "the static --loss-scale 1e30 overflows the gradients: lower it or use --loss-scale dynamic"));
    CHECK(run_mpx("gpt " + small + "--loss-scale dynamic --out " + q(dir / "dyn")).rc == 0);
  }
  r = err("--text " + q(dir / "short.txt"));
  CHECK(r.rc == 1);
  CHECK(has(r.out, "use a shorter context or more tokens"));
  // Out of memory names the flags that size memory, not only the bytes (1.2 GB of address space: GPT-2's 124 M
  // parameters and their AdamW state do not fit).
  r = run_mpx("gpt --arch gpt2 --steps 1 --out " + q(dir / "oom"), "2>&1 1>/dev/null", "ulimit -v 1200000 &&");
  CHECK(r.rc == 1);
  if (has(r.out, "out of memory")) CHECK(has(r.out, "lower --batch-size or --context"));
}

TEST_CASE("mpx gpt keeps what a run did when it goes wrong: no diverged checkpoint, trained steps saved on a data "
          "error, --export-hf checked before training, generation without the training text",
          "[cli][gpt]") {
  const fs::path dir = tmp("keeps");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(dir / "t.txt") << text;
  const std::string base = "gpt --text " + q(dir / "t.txt") + " --context 32 -b 4 --eval-iters 1 --opt-level O0 ";
  const fs::path ck = dir / "run" / "checkpoint.safetensors";
  REQUIRE(run_mpx(base + "--steps 4 --eval-interval 2 --out " + q(dir / "run")).rc == 0);
  auto all_finite = [](const fs::path& p) {
    for (const auto& [name, t] : mpx::load_tensors(p.string()))
      if (t.is_floating_point() && !t.all_finite()) return false;
    return true;
  };
  REQUIRE(all_finite(ck));
  // Too few held-out tokens for one batch: said at the start, not silently skipped.
  const CliRun few = run_mpx(base + "--steps 1 --val-fraction 0.001 --out " + q(dir / "few"), "2>&1");
  CHECK(few.rc == 0);
  CHECK(has(few.out, "no validation loss will be reported"));
  // A learning rate that blows the weights up: the run stops without writing the diverged model over the checkpoint.
  const CliRun up = mpx::testing::mpx_err("gpt --resume " + q(ck) + " --steps 40 --lr 1e4 --print-freq 1000 --eval-interval 2");
  CHECK(up.rc == 1);
  CHECK(has(up.out, "training diverged"));
  CHECK(has(up.out, "the last checkpoint is"));
  CHECK(all_finite(ck));

  // Generation reads the vocabulary from the checkpoint, not from the (moved) training text; a temperature so small
  // that logits / T overflow is greedy decoding.
  fs::rename(dir / "t.txt", dir / "moved.txt");
  const std::string gen = "gpt --resume " + q(ck) + " --generate 'the ' --sample 12";
  const CliRun greedy = run_mpx(gen + " --temperature 0", "2>/dev/null"), tiny = run_mpx(gen + " --temperature 1e-45", "2>/dev/null");
  CHECK(greedy.rc == 0);
  CHECK(tiny.rc == 0);
  CHECK(tiny.out == greedy.out);
  fs::rename(dir / "moved.txt", dir / "t.txt");

  // --export-hf is refused before any step: the wrong model, a folder, the run's own checkpoint.
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--arch lstm-lm --export-hf " + q(dir / "m.safetensors"), "--arch lstm-lm is not a GPT-2 model"},
           {"--export-hf " + q(dir), "is a folder"},
           {"--export-hf " + q(dir / "e" / "checkpoint.safetensors"), "is the run's own checkpoint.safetensors"},
           {"--export-hf " + q(dir / "none" / "m.safetensors"), "does not exist"}}) {
    INFO(args);
    const CliRun r = run_mpx(base + "--steps 2 --out " + q(dir / "e") + " " + args, "2>&1");
    CHECK(r.rc == 2);
    CHECK(has(r.out, says));
    CHECK(!has(r.out, "step 1/2"));
  }

  // A validation shard with a token id beyond GPT-2's vocabulary: the error names it, and the step trained is saved.
  std::vector<uint16_t> good(2048), bad(256, 60000);
  for (size_t i = 0; i < good.size(); ++i) good[i] = static_cast<uint16_t>((i * 7919) % 300);
  write_shard(dir / "train.bin", good);
  write_shard(dir / "val.bin", bad);
  const CliRun v = mpx::testing::mpx_err("gpt --tokens " + q(dir / "train.bin") + " --val-tokens " + q(dir / "val.bin") +
                                         " --context 16 -b 2 --steps 2 --eval-interval 1 --eval-iters 1 --opt-level O0 "
                                         "--out " + q(dir / "v"));
  CHECK(v.rc == 1);
  CHECK(has(v.out, "60000"));
  CHECK(has(v.out, "the model after step 1 is saved in"));
  CHECK(fs::exists(dir / "v" / "checkpoint.safetensors"));
}
