// The MPI module (libmpx_mpi): one worker thread owns every MPI call; nonblocking collectives polled against a deadline.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <thread>

#include <mpi.h>

#include "distributed/backend.h"

namespace mpx::distributed::detail {

namespace {

using Clock = std::chrono::steady_clock;

struct Task {
  RawOp op;
  std::shared_ptr<Work::State> state;
};

MPI_Datatype mpi_type(DType t, const std::string& what) {
  switch (t) {
    case kFloat32: return MPI_FLOAT;
    case kFloat64: return MPI_DOUBLE;
    case kInt64: return MPI_INT64_T;
    case kInt32: return MPI_INT32_T;
    case kUInt8: return MPI_UINT8_T;
    default: MPX_ERROR("distributed: ", what, ": no MPI reduction for ", dtype_name(t));
  }
}

std::string mpi_error_string(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return std::string(msg, len);
}

// Every MPI call after MPI_Init happens on this thread (MPI_THREAD_SERIALIZED is then enough,
// and collectives are issued in exactly the order the program asked for them on every rank).
class Worker {
 public:
  Worker(MPI_Comm comm, int rank, int world, double timeout)
      : comm_(comm), rank_(rank), world_(world), timeout_(timeout), thread_([this] { loop(); }) {}

  void submit(Task t) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(t));
    }
    cv_.notify_one();
  }
  void set_timeout(double s) { timeout_.store(s); }
  bool broken() const { return broken_.load(); }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  void loop() {
    for (;;) {
      Task t;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        t = std::move(queue_.front());
        queue_.pop_front();
      }
      if (broken_) {
        t.state->complete("distributed: " + t.op.what + " on rank " + std::to_string(rank_) + " was not started: " +
                              broken_msg_, 0);
        continue;
      }
      run(t);
    }
  }

  int post(const RawOp& op, MPI_Request* req) {
    const int64_t bytes = op.count * static_cast<int64_t>(element_size(op.dtype));
    MPX_CHECK(bytes <= INT32_MAX, "distributed: ", op.what, " moves ", bytes, " bytes; MPI counts stop at 2 GiB, so "
              "split the tensor");
    switch (op.kind) {
      case RawOp::Kind::AllReduce:
        return MPI_Iallreduce(MPI_IN_PLACE, op.buffer, static_cast<int>(op.count), mpi_type(op.dtype, op.what),
                              op.op == ReduceOp::Max ? MPI_MAX : MPI_SUM, comm_, req);
      case RawOp::Kind::Broadcast:
        return MPI_Ibcast(op.buffer, static_cast<int>(bytes), MPI_BYTE, op.root, comm_, req);
      case RawOp::Kind::AllGather:
        return MPI_Iallgather(op.buffer, static_cast<int>(bytes), MPI_BYTE, op.recv, static_cast<int>(bytes), MPI_BYTE,
                              comm_, req);
      case RawOp::Kind::Barrier: return MPI_Ibarrier(comm_, req);
    }
    return MPI_ERR_OTHER;
  }

  void fail(Task& t, const std::string& msg) {
    broken_msg_ = msg;
    broken_ = true;
    // Also on stderr: the caller may be a hook deep inside backward, or may swallow the error.
    std::fprintf(stderr, "%s\n", msg.c_str());
    std::fflush(stderr);
    t.state->complete(msg, 0);
  }

  // Polls `req` until it completes; returns "" or why it failed (an MPI error, the timeout).
  // Open MPI progresses nonblocking collectives only inside MPI calls, so poll: tightly at
  // first (small collectives finish in microseconds), then with growing sleeps so a long wait
  // does not take a core away from the computation it is meant to overlap. (Spinning while the
  // caller waits was tried: a rank done with backward then stole the core of a rank still in it.)
  std::string await(MPI_Request& req, Clock::time_point deadline, double limit, const std::string& where) {
    int flag = 0;
    int polls = 0;
    auto nap = std::chrono::microseconds(5);
    for (;;) {
      const int rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS)
        return "mpx distributed: " + where + " failed: " + mpi_error_string(rc) +
               " (a peer rank has probably died; see its output)";
      if (flag) return "";
      if (Clock::now() > deadline)
        return "mpx distributed: " + where + " got no answer from the other ranks within " +
               std::to_string(static_cast<int>(limit)) + " s (timeout): a rank has died, hangs, or "
               "called a different collective (every rank must call the same collectives in the same "
               "order). Ending the job; look at the other ranks' messages for the cause, and raise "
               "MPX_DISTRIBUTED_TIMEOUT if a rank is just slow.";
      if (++polls < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, max_nap_);
      }
    }
  }

  // Every rank compares what it is about to call (collective, dtype, element count, root, op)
  // with the others' in one tiny all-reduce of (value, -value) under MAX: a mismatch is then the
  // same error on every rank instead of a hang or silently mixed data. "" when all agree.
  std::string check_same_call(const RawOp& op, Clock::time_point deadline, double limit, const std::string& where,
                              bool& transport_failed) {
    constexpr int kFields = 5;
    const int64_t mine[kFields] = {static_cast<int64_t>(op.kind), static_cast<int64_t>(op.dtype), op.count, op.root,
                                   static_cast<int64_t>(op.op)};
    int64_t fp[2 * kFields];
    for (int k = 0; k < kFields; ++k) {
      fp[k] = mine[k];
      fp[kFields + k] = -mine[k];
    }
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, fp, 2 * kFields, MPI_INT64_T, MPI_MAX, comm_, &req);
    std::string err = rc == MPI_SUCCESS ? await(req, deadline, limit, where)
                                        : "mpx distributed: " + where + " failed to start: " + mpi_error_string(rc);
    if (!err.empty()) {
      transport_failed = true;
      return err;
    }
    static const char* const names[kFields] = {"collective", "dtype", "element count", "root rank", "reduce op"};
    std::string diff;
    for (int k = 0; k < kFields; ++k) {
      const int64_t hi = fp[k], lo = -fp[kFields + k];
      if (hi == lo) continue;
      diff += std::string(diff.empty() ? "" : ", ") + names[k];
      if (k == 2 || k == 3) diff += " (" + std::to_string(lo) + " to " + std::to_string(hi) + ")";
    }
    if (diff.empty()) return "";
    return "mpx distributed: " + where + " does not match what the other ranks called: the " + diff +
           " differs across ranks. Every rank must call the same collectives in the same order, with tensors of "
           "the same shape and dtype";
  }

  void run(Task& t) {
    const auto start = Clock::now();
    const std::string where = t.op.what + " on rank " + std::to_string(rank_) + " of " + std::to_string(world_);
    const double limit = timeout_.load();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
    if (check_calls_) {
      bool transport_failed = false;
      std::string err = check_same_call(t.op, deadline, limit, where, transport_failed);
      if (transport_failed) return fail(t, err);
      if (!err.empty()) {  // every rank saw the same mismatch and skips the call: nothing is left pending
        t.state->complete(err, 0);
        return;
      }
    }
    // A large all-reduce goes as consecutive pieces of chunk_bytes_: each piece's temporaries stay
    // in cache, which made a 47 MB f32 all-reduce 3x faster on a 2-rank, shared-memory run
    // (bench/RESULTS.md). Every rank cuts the same pieces, since the agreement check passed.
    const int64_t elem = static_cast<int64_t>(element_size(t.op.dtype));
    const bool cut = t.op.kind == RawOp::Kind::AllReduce && t.op.count * elem > chunk_bytes_;
    const int64_t piece = cut ? std::max<int64_t>(1, chunk_bytes_ / elem) : t.op.count;
    int64_t off = 0;
    do {
      RawOp part = t.op;
      part.count = std::min(piece, t.op.count - off);
      part.buffer = static_cast<char*>(t.op.buffer) + off * elem;
      MPI_Request req = MPI_REQUEST_NULL;
      int rc = MPI_SUCCESS;
      try {
        rc = post(part, &req);
      } catch (const std::exception& e) {
        t.state->complete(e.what(), 0);
        return;
      }
      if (rc != MPI_SUCCESS) return fail(t, "mpx distributed: " + where + " failed to start: " + mpi_error_string(rc));
      std::string err = await(req, deadline, limit, where);
      if (!err.empty()) return fail(t, err);
      off += piece;
    } while (off < t.op.count);
    t.state->complete("", std::chrono::duration<double>(Clock::now() - start).count());
  }

  MPI_Comm comm_;
  int rank_, world_;
  std::atomic<double> timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::atomic<bool> broken_{false};
  std::string broken_msg_;
  std::chrono::microseconds max_nap_{[] {
    const char* e = std::getenv("MPX_DISTRIBUTED_POLL_US");
    return e ? std::atoi(e) : 500;
  }()};
  // MPX_DISTRIBUTED_CHECK=0 skips the per-call agreement check (one tiny all-reduce each).
  bool check_calls_ = [] {
    const char* e = std::getenv("MPX_DISTRIBUTED_CHECK");
    return !(e && std::string(e) == "0");
  }();
  // MPX_DISTRIBUTED_CHUNK_KB: the size of the pieces a large all-reduce is cut into (default 1 MiB).
  int64_t chunk_bytes_ = [] {
    const char* e = std::getenv("MPX_DISTRIBUTED_CHUNK_KB");
    const long kb = e ? std::atol(e) : 1024;
    return static_cast<int64_t>(kb > 0 ? kb : 1024) * 1024;
  }();
  std::thread thread_;  // last: starts after the members it uses
};

Worker* g_worker = nullptr;
MPI_Comm g_comm = MPI_COMM_NULL;
bool g_we_initialized = false;

struct Mpi final : MpiTransport {
  std::string version() override;
  Topology init(double timeout_seconds) override;
  void submit(RawOp op, std::shared_ptr<Work::State> state) override;
  void set_timeout(double seconds) override;
  void finalize() override;
  [[noreturn]] void abort(int code) override;
};

std::string Mpi::version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, len);
  if (auto nl = s.find_first_of("\n,"); nl != std::string::npos) s.resize(nl);
  return s;
}

Topology Mpi::init(double timeout_seconds) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    // Open MPI's nonblocking all-reduce picks recursive doubling or binomial by default; its ring
    // was 2-5x faster for gradient-sized buffers here (bench/RESULTS.md). A value the user set wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    MPX_CHECK(provided >= MPI_THREAD_SERIALIZED, "distributed::init: the MPI library offers thread level ", provided,
              " but mpx needs MPI_THREAD_SERIALIZED (its collectives run on a worker thread)");
    g_we_initialized = true;
  } else {
    int provided = 0;
    MPI_Query_thread(&provided);
    MPX_CHECK(provided >= MPI_THREAD_SERIALIZED, "distributed::init: MPI was initialized with thread level ",
              provided, ", but mpx calls MPI from a worker thread; initialize it with MPI_Init_thread and "
              "MPI_THREAD_MULTIPLE (if the program calls MPI itself) or MPI_THREAD_SERIALIZED");
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  // Errors come back as return codes, so a lost peer becomes an mpx::Error naming the collective.
  MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
  Topology t;
  MPI_Comm_rank(g_comm, &t.rank);
  MPI_Comm_size(g_comm, &t.world);
  MPI_Comm local;
  MPI_Comm_split_type(g_comm, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &t.local_rank);
  MPI_Comm_size(local, &t.local_world);
  MPI_Comm_free(&local);
  g_worker = new Worker(g_comm, t.rank, t.world, timeout_seconds);
  return t;
}

void Mpi::submit(RawOp op, std::shared_ptr<Work::State> state) {
  MPX_CHECK(g_worker != nullptr, "distributed: ", op.what, ": MPI has been finalized");
  g_worker->submit(Task{std::move(op), std::move(state)});
}

void Mpi::set_timeout(double seconds) {
  if (g_worker) g_worker->set_timeout(seconds);
}

void Mpi::finalize() {
  if (!g_worker) return;
  const bool broken = g_worker->broken();
  g_worker->stop();
  delete g_worker;
  g_worker = nullptr;
  int finalized = 0;
  MPI_Finalized(&finalized);  // the program may have finalized an MPI it initialized itself
  if (finalized) return;
  if (broken) {
    // A collective is still pending on this rank and its peers are stuck or gone: MPI_Finalize
    // would wait forever, so end every rank.
    MPI_Abort(g_comm, 3);
  }
  MPI_Comm_free(&g_comm);
  if (g_we_initialized) MPI_Finalize();
}

void Mpi::abort(int code) {
  // Straight from the caller's thread, even while the worker is inside a collective: MPI_Abort
  // is the one call meant for a job that can no longer make progress.
  MPI_Abort(g_worker ? g_comm : MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort returned (it should not): end this rank at least
}

}  // namespace
}  // namespace mpx::distributed::detail

/// The module's one entry point: libmpx looks it up by name once the module has loaded.
extern "C" __attribute__((visibility("default"))) mpx::distributed::detail::MpiTransport* mpx_mpi_transport() {
  static mpx::distributed::detail::Mpi mpi;
  return &mpi;
}
