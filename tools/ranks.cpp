// The data-parallel side of the training commands: joining the ranks, rank-0 output, sums over ranks, the mpirun re-launch.
#include "tools/ranks.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "tools/cli_args.h"

namespace mpx::cli {

namespace fs = std::filesystem;
namespace dist = distributed;

namespace {
Ranks g_ranks;

// The first executable `name` on PATH ("" when there is none).
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::string dirs = path;
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start);
    const std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const fs::path p = fs::path(dir.empty() ? "." : dir) / name;
    if (access(p.c_str(), X_OK) == 0) return p.string();
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

// Open MPI, MPICH and Slurm set these in the processes they start.
bool under_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}
}  // namespace

Ranks join_ranks() {
  Ranks r;
  r.launched = under_launcher() || std::getenv("WORLD_SIZE") != nullptr;  // before init() sets WORLD_SIZE
  dist::init();
  r.rank = dist::rank();
  r.world = dist::world_size();
  r.local_rank = dist::local_rank();
  r.local_world = dist::local_world_size();
  if (r.rank != 0) {
    std::fflush(stdout);
    if (std::freopen("/dev/null", "w", stdout) == nullptr) {
      // Without /dev/null every rank prints; harmless, only noisier.
    }
  }
  g_ranks = r;
  return r;
}

const Ranks& ranks() { return g_ranks; }

std::string batch_per_rank_text(int64_t batch, const Ranks& r) {
  std::string s = std::to_string(batch);
  if (r.data_parallel()) s += " per rank x " + std::to_string(r.world) + (r.world == 1 ? " rank" : " ranks");
  return s;
}

std::vector<double> sum_over_ranks(std::vector<double> values) {
  if (g_ranks.world <= 1 || values.empty()) return values;
  Tensor t = tensor(values, {static_cast<int64_t>(values.size())}, TensorOptions(kFloat64));
  dist::all_reduce(t, dist::ReduceOp::Sum);
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

bool any_rank(bool flag) {
  if (g_ranks.world <= 1) return flag;
  Tensor t = tensor(std::vector<int32_t>{flag ? 1 : 0}, {1}, TensorOptions(kInt32));
  dist::all_reduce(t, dist::ReduceOp::Max);
  return t.data_ptr<int32_t>()[0] != 0;
}

void check_same_flags(const std::string& command, const std::string& canonical) {
  if (g_ranks.world <= 1) return;
  // 53 bits of the hash: exact in the f64 all-gather, and enough to tell flag sets apart.
  const double h = static_cast<double>(std::hash<std::string>{}(canonical) & ((uint64_t{1} << 53) - 1));
  const tensor_list all = dist::all_gather(tensor(std::vector<double>{h}, {1}, TensorOptions(kFloat64)));
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r].data_ptr<double>()[0] != all[0].data_ptr<double>()[0])
      MPX_ERROR(command, ": rank ", r, " was started with other run flags than rank 0 (this is rank ", g_ranks.rank,
                ": ", canonical, "); every rank must get the same command line");
}

void sync_buffers_from_rank0(nn::Module& m) {
  if (g_ranks.world <= 1) return;
  for (const auto& [name, b] : m.named_buffers())
    if (b.defined()) dist::broadcast(b, 0);
}

StrideSampler::StrideSampler(int64_t n, int64_t rank, int64_t world) : n_(n), rank_(rank), world_(world) {}

std::vector<int64_t> StrideSampler::indices(int64_t) const {
  std::vector<int64_t> idx;
  for (int64_t i = rank_; i < n_; i += world_) idx.push_back(i);
  return idx;
}

int64_t StrideSampler::size() const { return n_ > rank_ ? (n_ - rank_ + world_ - 1) / world_ : 0; }

void relaunch_under_mpirun(const std::string& command, int argc, char** argv) {
  // argv: the program, the command, then its flags.
  std::vector<std::string> rest;
  std::string n_text;
  bool found = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nproc-per-node" || a == "--nproc_per_node") {
      if (i + 1 >= argc) throw UsageError("mpx " + command + ": flag " + a + " needs a value (N)");
      n_text = argv[++i], found = true;
    } else if (a.rfind("--nproc-per-node=", 0) == 0 || a.rfind("--nproc_per_node=", 0) == 0) {
      n_text = a.substr(a.find('=') + 1), found = true;
    } else {
      rest.push_back(a);
    }
  }
  if (!found) return;
  char* end = nullptr;
  const long n = std::strtol(n_text.c_str(), &end, 10);
  if (n_text.empty() || *end != 0 || n < 1 || n > 4096)
    throw UsageError("mpx " + command + ": --nproc-per-node expects a number of processes from 1 to 4096, got '" +
                     n_text + "'");
  if (under_launcher())
    throw UsageError("mpx " + command + ": --nproc-per-node starts mpirun itself, but this process is already one "
                     "rank of an MPI job; drop --nproc-per-node or start mpx without mpirun");
  if (!dist::mpi_available())
    throw UsageError("mpx " + command + ": --nproc-per-node needs the distributed build (" + dist::backend_info() +
                     "); install Open MPI (openmpi-bin, libopenmpi-dev) and rebuild with -DMPX_DISTRIBUTED=ON");
  const std::string mpirun = on_path("mpirun");
  if (mpirun.empty())
    throw UsageError("mpx " + command + ": --nproc-per-node re-launches mpx under mpirun, which is not on PATH; "
                     "install Open MPI's launcher (openmpi-bin) or start the ranks yourself: mpirun -np " + n_text +
                     " mpx " + command + " ...");
  std::vector<std::string> cmd = {mpirun, "-np", std::to_string(n)};
  // As torchrun does: root may start ranks (containers), more ranks than cores are allowed, and
  // no pinning, since each rank sizes its own thread pool to its share of the cores.
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  if (n > static_cast<long>(std::thread::hardware_concurrency())) cmd.push_back("--oversubscribe");
  cmd.insert(cmd.end(), {"--bind-to", "none"});
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  cmd.push_back(ec ? std::string(argv[0]) : self.string());
  cmd.push_back(command);
  cmd.insert(cmd.end(), rest.begin(), rest.end());
  std::vector<char*> cargv;
  for (auto& s : cmd) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  execv(mpirun.c_str(), cargv.data());
  throw UsageError("mpx " + command + ": could not start " + mpirun + ": " + std::strerror(errno));
}

int end_failed_rank(int code) {
  if (g_ranks.world <= 1) return code;
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

}  // namespace mpx::cli
