// The process group's front end: init, ranks, argument checks and dtype staging for collectives.
#include "distributed/process_group.h"

#include <cstdlib>
#include <mutex>

#include "autograd/grad_mode.h"
#include "distributed/backend.h"
#include "ops/elementwise.h"

namespace mpx::distributed {
namespace {

struct Group {
  std::mutex mu;
  bool initialized = false;
  bool use_mpi = false;
  detail::Topology topo;
  double timeout = 600;
  uint64_t seq = 0;  // collectives issued, for error messages
};
Group& group() {
  static Group* g = new Group;  // never destroyed: the exit handler may still need it
  return *g;
}

double default_timeout() {
  if (const char* e = std::getenv("MPX_DISTRIBUTED_TIMEOUT")) {
    char* end = nullptr;
    double v = std::strtod(e, &end);
    MPX_CHECK(end != e && *end == 0 && v > 0, "distributed: MPX_DISTRIBUTED_TIMEOUT='", e,
              "' is not a positive number of seconds");
    return v;
  }
  return 600;
}

int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  long v = std::strtol(e, &end, 10);
  MPX_CHECK(end != e && *end == 0 && v >= 0, "distributed: the environment variable ", name, "='", e,
            "' is not a non-negative integer");
  return static_cast<int>(v);
}

void exit_handler() { finalize(); }

std::shared_ptr<Work::State> done_state(std::function<void()> finish = {}) {
  auto s = std::make_shared<Work::State>();
  s->finish = std::move(finish);
  s->done = true;
  return s;
}

const char* op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : op == ReduceOp::Avg ? "avg" : "max"; }

std::string describe(const char* op, uint64_t seq, const Tensor& t) {
  return std::string(op) + " #" + std::to_string(seq) + " (" + dtype_name(t.dtype()) + shape_str(t.sizes()) + ", " +
         t.device().str() + ")";
}

void check_tensor(const char* op, const Tensor& t) {
  MPX_CHECK(t.defined(), "distributed::", op, ": the tensor is undefined");
  MPX_CHECK(t.device().is_cpu() || t.device().is_cuda(), "distributed::", op, ": unsupported device ", t.device().str());
}

// The memory a transport works on: the tensor itself when it is dense and needs no conversion,
// else a copy (in f32 when `to_f32`). CUDA tensors go through the host when NCCL is absent.
Tensor staged(const Tensor& t, bool to_f32) {
  const bool host = t.device().is_cpu() || !detail::nccl_compiled();
  if (t.device().is_cpu()) return to_f32 ? t.to(kFloat32, /*non_blocking=*/false, /*copy=*/true) : t.contiguous();
  if (!host) return t.contiguous();
  return t.to(Device::cpu(), to_f32 ? kFloat32 : t.dtype()).contiguous();
}

// CUDA tensors go to NCCL even in a world of one (a device copy), so a single GPU exercises the
// same path as many; everything else short-circuits there.
bool trivial(const Tensor& t) { return group().topo.world == 1 && !(t.device().is_cuda() && detail::nccl_compiled()); }

// Sends `raw` to the transport that owns `t`'s device and returns the work.
Work submit(const Tensor& t, detail::RawOp raw, std::function<void()> finish,
            std::shared_ptr<Work::State> state = std::make_shared<Work::State>()) {
  if (finish) state->finish = std::move(finish);
  Group& g = group();
  if (t.defined() && t.device().is_cuda() && detail::nccl_submit(t, raw, state, g.topo)) return Work(state);
  MPX_CHECK(g.use_mpi, "distributed: ", raw.what, " needs MPI, which is not running");
  detail::mpi_submit(std::move(raw), state);
  return Work(state);
}

}  // namespace

void init(const InitOptions& options) {
  Group& g = group();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.initialized) return;
  g.timeout = options.timeout_seconds > 0 ? options.timeout_seconds : default_timeout();
  const int env_world = env_int("WORLD_SIZE", -1);
  const int env_rank = env_int("RANK", -1);
  const int env_local = env_int("LOCAL_RANK", -1);
  MPX_CHECK(env_world != 0, "distributed::init: WORLD_SIZE=0, but a job has at least one process; set it to the "
            "number of ranks, or unset it");
  if (detail::launched_by_mpi()) {
    MPX_CHECK(detail::mpi_compiled(), "distributed::init: this process was started by an MPI launcher, but ",
              detail::mpi_problem(), "; or start a single process without mpirun");
    g.topo = detail::mpi_init(g.timeout);
    g.use_mpi = true;
    MPX_CHECK(env_world < 0 || env_world == g.topo.world, "distributed::init: WORLD_SIZE=", env_world,
              " but mpirun started ", g.topo.world, " processes; unset WORLD_SIZE or make them agree");
    MPX_CHECK(env_rank < 0 || env_rank == g.topo.rank, "distributed::init: RANK=", env_rank, " but MPI says rank ",
              g.topo.rank, "; unset RANK or make them agree");
  } else {
    MPX_CHECK(env_world <= 1, "distributed::init: WORLD_SIZE=", env_world, " is set but this process was not "
              "started by an MPI launcher; mpx starts its ranks with MPI: run `mpirun -np ", env_world,
              " PROGRAM ...` (or unset WORLD_SIZE for one process)");
    MPX_CHECK(env_rank <= 0, "distributed::init: RANK=", env_rank, " without an MPI launcher; a single process is "
              "rank 0 (unset RANK, or start the ranks with mpirun)");
    g.topo = detail::Topology{};
  }
  if (env_local >= 0) g.topo.local_rank = env_local;
  // torchrun's variables, for code that reads them to find rank 0 (amp prints only there).
  if (g.use_mpi) {
    setenv("RANK", std::to_string(g.topo.rank).c_str(), 0);
    setenv("WORLD_SIZE", std::to_string(g.topo.world).c_str(), 0);
    setenv("LOCAL_RANK", std::to_string(g.topo.local_rank).c_str(), 0);
  }
  g.initialized = true;
  std::atexit(exit_handler);
}

void finalize() {
  Group& g = group();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.initialized) return;
  detail::nccl_finalize();
  if (g.use_mpi) detail::mpi_finalize();
  g.use_mpi = false;
}

bool is_initialized() { return group().initialized; }
int rank() { init(); return group().topo.rank; }
int world_size() { init(); return group().topo.world; }
int local_rank() { init(); return group().topo.local_rank; }
int local_world_size() { init(); return group().topo.local_world; }
bool mpi_available() { return detail::mpi_compiled(); }
bool nccl_available() { return detail::nccl_compiled(); }

std::string backend_info() {
  std::string s = detail::mpi_compiled() ? "MPI " + detail::mpi_version() : "off (" + detail::mpi_problem() + ")";
  s += detail::nccl_compiled() ? ", NCCL " + detail::nccl_version() : std::string(", NCCL off");
  return s;
}

double timeout() { init(); return group().timeout; }
void set_timeout(double seconds) {
  MPX_CHECK(seconds > 0, "distributed::set_timeout: the timeout must be positive, got ", seconds);
  init();
  group().timeout = seconds;
  if (group().use_mpi) detail::mpi_set_timeout(seconds);
}

// ---- Work ----
void Work::wait() {
  MPX_CHECK(state_ != nullptr, "distributed::Work::wait: the work is empty");
  State& s = *state_;
  if (s.device_wait) {
    auto device_wait = std::move(s.device_wait);  // once: it owns the event it waits on
    s.device_wait = nullptr;
    device_wait();
  }
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&] { return s.done; });
    MPX_CHECK(s.error.empty(), s.error);
    if (s.finished) return;
    s.finished = true;
  }
  if (s.finish) {
    NoGradGuard ng;
    s.finish();
    s.finish = nullptr;
  }
}
bool Work::is_completed() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}
double Work::seconds_in_backend() const {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->backend_seconds;
}
const tensor_list& Work::result() const {
  static const tensor_list empty;
  return state_ ? state_->result : empty;
}

// ---- collectives ----
Work all_reduce_async(const Tensor& tensor, ReduceOp op) {
  init();
  check_tensor("all_reduce", tensor);
  const DType dt = tensor.dtype();
  MPX_CHECK(is_floating(dt) || ((dt == kInt32 || dt == kInt64) && op != ReduceOp::Avg), "distributed::all_reduce: ",
            op_name(op), " of a ", dtype_name(dt), " tensor is not supported; use a floating tensor (f32, f64, f16, "
            "bf16), or i32/i64 with sum or max");
  Group& g = group();
  const uint64_t seq = ++g.seq;
  const int world = g.topo.world;
  if (trivial(tensor)) return Work(done_state());
  const bool low = dt == kFloat16 || dt == kBFloat16;
  // Host 16-bit sums go through f32 so each element is rounded once, after the whole sum.
  Tensor buf = staged(tensor, low);
  detail::RawOp raw;
  raw.kind = detail::RawOp::Kind::AllReduce;
  raw.buffer = buf.raw_data();
  raw.count = buf.numel();
  raw.dtype = buf.dtype();
  raw.op = op == ReduceOp::Max ? ReduceOp::Max : ReduceOp::Sum;
  raw.average = op == ReduceOp::Avg;
  raw.what = describe("all_reduce", seq, tensor) + " " + op_name(op);
  return submit(buf, std::move(raw), [tensor, buf, op, world] {
    Tensor b = buf;
    if (op == ReduceOp::Avg && !b.device().is_cuda()) b.div_(static_cast<double>(world));
    Tensor dst = tensor;
    if (!b.is_same(dst)) dst.copy_(b);
  });
}
void all_reduce(const Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }

Work broadcast_async(const Tensor& tensor, int root) {
  init();
  check_tensor("broadcast", tensor);
  Group& g = group();
  MPX_CHECK(root >= 0 && root < g.topo.world, "distributed::broadcast: root ", root, " is not a rank of a world of ",
            g.topo.world);
  const uint64_t seq = ++g.seq;
  if (trivial(tensor)) return Work(done_state());
  Tensor buf = staged(tensor, false);
  detail::RawOp raw;
  raw.kind = detail::RawOp::Kind::Broadcast;
  raw.buffer = buf.raw_data();
  raw.count = buf.numel();
  raw.dtype = buf.dtype();
  raw.root = root;
  raw.what = describe("broadcast", seq, tensor) + " from rank " + std::to_string(root);
  return submit(buf, std::move(raw), [tensor, buf] {
    Tensor dst = tensor;
    if (!buf.is_same(dst)) dst.copy_(buf);
  });
}
void broadcast(const Tensor& tensor, int root) { broadcast_async(tensor, root).wait(); }

Work all_gather_async(const Tensor& tensor) {
  init();
  check_tensor("all_gather", tensor);
  Group& g = group();
  const uint64_t seq = ++g.seq;
  const int world = g.topo.world;
  if (trivial(tensor)) {
    auto s = done_state();
    s->result = {tensor.detach().clone()};
    return Work(s);
  }
  Tensor buf = staged(tensor, false);
  IntList shape = tensor.sizes();
  shape.insert(shape.begin(), world);
  Tensor out = empty(shape, buf.options());
  detail::RawOp raw;
  raw.kind = detail::RawOp::Kind::AllGather;
  raw.buffer = buf.raw_data();
  raw.recv = out.raw_data();
  raw.count = buf.numel();
  raw.dtype = buf.dtype();
  raw.what = describe("all_gather", seq, tensor);
  auto state = std::make_shared<Work::State>();
  // The result list is built on the waiting thread, from the gathered block (a raw pointer:
  // finish runs inside wait(), while the work holds the state).
  state->finish = [st = state.get(), out, buf, world, dev = tensor.device()] {
    (void)buf;  // kept alive until the transport is done with it
    for (int r = 0; r < world; ++r) st->result.push_back(out.select(0, r).to(dev));
  };
  Work w = submit(buf, std::move(raw), {}, state);
  return w;
}
tensor_list all_gather(const Tensor& tensor) {
  Work w = all_gather_async(tensor);
  w.wait();
  return w.result();
}

void barrier() {
  init();
  Group& g = group();
  const uint64_t seq = ++g.seq;
  if (g.topo.world == 1) return;
  detail::RawOp raw;
  raw.kind = detail::RawOp::Kind::Barrier;
  raw.what = "barrier #" + std::to_string(seq);
  submit(Tensor(), std::move(raw), {}).wait();
}

}  // namespace mpx::distributed
