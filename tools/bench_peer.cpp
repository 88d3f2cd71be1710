// `mpx bench`'s PyTorch peer: runs bench/peer_bench.py with the same rows and parses what it reports.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <utility>

#include "tools/bench_internal.h"

namespace mpx::cli::bench {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

namespace {

double peer_num(const std::string& s) { return s == "nan" ? NAN : std::atof(s.c_str()); }

// Runs the peer's command line and hands every line starting with `tag` (split at commas, at least
// `min_fields` of them) to `on_row`; everything else it prints is passed through, indented, so the
// user sees its versions, parameter counts and progress. Sets `failure` when no row came back.
// Without `echo` (the repeated calls of an alternated run) that output is held back and shown only
// when the call fails, so the failure's reason is never lost.
void stream_peer(const Args& args, const std::string& cmd, const std::string& tag, size_t min_fields,
                 std::string& failure, const std::function<void(const std::vector<std::string>&)>& on_row,
                 bool echo = true) {
  std::string held = "\npeer: " + cmd + "\n";
  if (echo) {
    std::printf("%s", held.c_str());
    std::fflush(stdout);
  }
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
    // The script's first line is "torch VERSION, device, N threads": figures against a PyTorch
    // from before 2.0 (Debian 12's is 1.13) understate what users run today.
    static bool warned = false;
    if (line.rfind("torch ", 0) == 0 && std::atoi(line.c_str() + 6) < 2 && !std::exchange(warned, true))
      std::fprintf(stderr, "mpx bench: warning: the peer runs PyTorch %s, older than 2.x; its figures are not what "
                   "a current PyTorch does: pass --python with a PyTorch 2 (e.g. a virtual environment with torch "
                   "from PyPI)\n", line.substr(6, line.find(',') == std::string::npos ? std::string::npos
                                                                                      : line.find(',') - 6).c_str());
    if (line.rfind(tag, 0) != 0) {
      if (echo) {
        std::printf("  peer| %s\n", line.c_str());
        std::fflush(stdout);
      } else {
        held += "  peer| " + line + "\n";
      }
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
  if (!echo && rows == 0) std::printf("%s", held.c_str());
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
  for (const auto& l : levels)
    if (peer_level(l)) ll += (ll.empty() ? "" : ",") + l;
  if (ll.empty()) return "";  // no level the peer has a recipe for: nothing to run, nothing failed
  for (const auto& d : dtypes) dl += (dl.empty() ? "" : ",") + d;
  return "OMP_NUM_THREADS=" + std::to_string(threads) + " " + shell_quote(args.str("--python")) + " " +
         shell_quote(script);
}

}  // namespace

std::map<std::string, PeerRow> run_peer(const Args& args, const std::vector<std::string>& models,
                                        const std::vector<std::string>& levels, const std::vector<std::string>& dtypes,
                                        const SpeedConfig& c, int threads, bool compiled, std::string& failure,
                                        bool echo) {
  std::map<std::string, PeerRow> out;
  std::string ml, ll, dl;
  const std::string prefix = peer_prefix(args, threads, models, levels, dtypes, ml, ll, dl, failure);
  if (prefix.empty()) return out;
  std::ostringstream cmd;
  cmd << prefix << " --models " << ml << " --opt-levels " << ll << " --dtype " << dl << " --batch " << c.batch << " --steps "
      << c.steps << " --warmup " << c.warmup << " --windows " << c.windows << " --image-size " << c.image_size
      << " --device " << (c.device.is_cuda() ? "cuda" : "cpu") << " --threads " << threads << " --seed " << c.seed
      << (c.channels_last ? " --channels-last" : "") << (c.tf32 ? " --tf32" : "") << (compiled ? " --compile" : "")
      << (c.profile ? " --profile" : "")
      << " --gpt-dir " << shell_quote(args.str("--out")) << " 2>&1";
  // row,model,level,dtype,params,ips,ips_min,ips_max,step_ms,peak_mib,final_loss,status
  stream_peer(args, cmd.str(), "row,", 12, failure, [&](const std::vector<std::string>& f) {
    PeerRow r;
    r.params = std::atoll(f[4].c_str());
    r.ips = peer_num(f[5]), r.ips_min = peer_num(f[6]), r.ips_max = peer_num(f[7]), r.step_ms = peer_num(f[8]),
    r.peak_mib = peer_num(f[9]), r.final_loss = peer_num(f[10]);
    r.status = f[11];
    for (size_t i = 12; i < f.size(); ++i) r.status += ";" + f[i];
    out[f[1] + "/" + f[2] + "/" + f[3]] = r;
  }, echo);
  return out;
}

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

std::map<std::string, PeerAccuracy> run_peer_gpt_accuracy(const Args& args, const std::vector<std::string>& models,
                                                          const std::vector<std::string>& levels,
                                                          const std::vector<std::string>& dtypes, int threads,
                                                          std::string& failure) {
  std::map<std::string, PeerAccuracy> out;
  std::string ml, ll, dl;
  const std::string prefix = peer_prefix(args, threads, models, levels, dtypes, ml, ll, dl, failure);
  if (prefix.empty()) return out;
  std::ostringstream cmd;
  cmd << prefix << " --accuracy --models " << ml << " --opt-levels " << ll << " --dtype " << dl << " --gpt-dir "
      << shell_quote(args.str("--out")) << " --device " << (parse_device(args.str("--device")).is_cuda() ? "cuda" : "cpu")
      << " --threads " << threads << " 2>&1";
  // acc,model,level,dtype,params,nan,nan,train_loss,val_loss,wall_s,tokens_per_s,status
  stream_peer(args, cmd.str(), "acc,", 12, failure, [&](const std::vector<std::string>& f) {
    PeerAccuracy r;
    r.params = std::atoll(f[4].c_str());
    r.train_loss = peer_num(f[7]), r.test_loss = peer_num(f[8]), r.wall_s = peer_num(f[9]), r.ips = peer_num(f[10]);
    r.status = f[11];
    for (size_t i = 12; i < f.size(); ++i) r.status += ";" + f[i];
    out[f[1] + "/" + f[2] + "/" + f[3]] = r;
  });
  return out;
}

}  // namespace mpx::cli::bench
