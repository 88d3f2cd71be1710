// LibTorch's c10d calls mapped onto mpx::distributed's collectives: argument checks, MIN/PRODUCT by gathering, Work.
#include "distributed/c10d.h"

#include <cstdlib>
#include <thread>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "distributed/backend.h"
#include "ops/shape.h"

namespace mpx::c10d {
namespace {

const char* reduce_name(ReduceOp::RedOpType op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::PRODUCT: return "PRODUCT";
    case ReduceOp::MIN: return "MIN";
    case ReduceOp::MAX: return "MAX";
    case ReduceOp::BAND: return "BAND";
    case ReduceOp::BOR: return "BOR";
    case ReduceOp::BXOR: return "BXOR";
    case ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

void check_list(const char* call, const std::vector<Tensor>& tensors) {
  MPX_CHECK(!tensors.empty(), "c10d::ProcessGroup::", call, ": the tensor list is empty; pass the tensors to ", call);
  for (size_t i = 0; i < tensors.size(); ++i)
    MPX_CHECK(tensors[i].defined(), "c10d::ProcessGroup::", call, ": tensor ", i, " of the list is undefined");
}

}  // namespace

// ---- Work ----
bool Work::isCompleted() {
  if (finished_) return true;
  for (const Part& p : parts_)
    if (!p.work.is_completed()) return false;
  return true;
}
bool Work::isSuccess() const { return finished_ && !error_; }
std::exception_ptr Work::exception() const { return error_; }

bool Work::wait(std::chrono::milliseconds timeout) {
  if (error_) std::rethrow_exception(error_);
  if (finished_) return true;
  if (timeout > kNoTimeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!isCompleted()) {
      MPX_CHECK(std::chrono::steady_clock::now() < deadline, "c10d::Work::wait: the collective did not complete "
                "within ", timeout.count(), " ms; it is still running (wait again, or end the job with abort())");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  try {
    for (Part& p : parts_) {
      if (p.work.defined()) p.work.wait();
      if (p.finish) {
        NoGradGuard ng;
        p.finish(p.work);
      }
    }
  } catch (...) {
    error_ = std::current_exception();
    finished_ = true;
    throw;
  }
  finished_ = true;
  return true;
}

std::vector<Tensor> Work::result() { return result_; }

// ---- ProcessGroup ----
ProcessGroup::ProcessGroup() { distributed::init(); }
int ProcessGroup::getRank() const { return distributed::rank(); }
int ProcessGroup::getSize() const { return distributed::world_size(); }
const std::string ProcessGroup::getBackendName() const { return "mpi"; }

std::shared_ptr<Work> ProcessGroup::allreduce(std::vector<Tensor>& tensors, const AllreduceOptions& opts) {
  check_list("allreduce", tensors);
  const ReduceOp::RedOpType op = opts.reduceOp;
  auto w = std::make_shared<Work>();
  w->result_ = tensors;
  for (const Tensor& t : tensors) {
    Work::Part part;
    switch (op) {
      case ReduceOp::SUM: part.work = distributed::all_reduce_async(t, distributed::ReduceOp::Sum); break;
      case ReduceOp::AVG: part.work = distributed::all_reduce_async(t, distributed::ReduceOp::Avg); break;
      case ReduceOp::MAX: part.work = distributed::all_reduce_async(t, distributed::ReduceOp::Max); break;
      case ReduceOp::MIN:
      case ReduceOp::PRODUCT:
        // Exact in every dtype (no negation tricks that overflow at an integer's minimum).
        part.work = distributed::all_gather_async(t);
        part.finish = [t, op](distributed::Work& done) {
          Tensor all = stack(done.result(), 0);
          Tensor r = op == ReduceOp::MIN ? all.min(0).first : all.prod(0);
          Tensor dst = t;
          dst.copy_(r);
        };
        break;
      default:
        MPX_ERROR("c10d::ProcessGroup::allreduce: ReduceOp::", reduce_name(op), " is not supported; use SUM, AVG, "
                  "MAX, MIN or PRODUCT");
    }
    w->parts_.push_back(std::move(part));
  }
  return w;
}

std::shared_ptr<Work> ProcessGroup::allreduce_coalesced(std::vector<Tensor>& tensors,
                                                       const AllreduceCoalescedOptions& opts) {
  return allreduce(tensors, opts);
}

std::shared_ptr<Work> ProcessGroup::broadcast(std::vector<Tensor>& tensors, const BroadcastOptions& opts) {
  check_list("broadcast", tensors);
  const int world = getSize();
  MPX_CHECK(opts.rootRank >= 0 && opts.rootRank < world, "c10d::ProcessGroup::broadcast: rootRank ", opts.rootRank,
            " is not a rank of this group of ", world);
  MPX_CHECK(opts.rootTensor >= 0 && opts.rootTensor < static_cast<int64_t>(tensors.size()),
            "c10d::ProcessGroup::broadcast: rootTensor ", opts.rootTensor, " is not an index into the ",
            tensors.size(), " tensors passed");
  const Tensor& src = tensors[opts.rootTensor];
  for (size_t i = 0; i < tensors.size(); ++i)
    MPX_CHECK(tensors[i].sizes() == src.sizes() && tensors[i].dtype() == src.dtype(),
              "c10d::ProcessGroup::broadcast: tensor ", i, " is ", dtype_name(tensors[i].dtype()),
              shape_str(tensors[i].sizes()), " but tensor ", opts.rootTensor, " (the one sent) is ",
              dtype_name(src.dtype()), shape_str(src.sizes()), "; every tensor receives the same values");
  auto w = std::make_shared<Work>();
  w->result_ = tensors;
  Work::Part part;
  part.work = distributed::broadcast_async(src, static_cast<int>(opts.rootRank));
  if (tensors.size() > 1)
    part.finish = [tensors, src](distributed::Work&) {
      for (const Tensor& t : tensors)
        if (!t.is_same(src)) Tensor(t).copy_(src);
    };
  w->parts_.push_back(std::move(part));
  return w;
}

std::shared_ptr<Work> ProcessGroup::allgather(std::vector<std::vector<Tensor>>& outputs, std::vector<Tensor>& inputs,
                                              const AllgatherOptions&) {
  check_list("allgather", inputs);
  const int world = getSize();
  MPX_CHECK(outputs.size() == inputs.size(), "c10d::ProcessGroup::allgather: ", outputs.size(),
            " output lists for ", inputs.size(), " inputs; pass one list of ", world, " tensors per input");
  for (size_t i = 0; i < inputs.size(); ++i) {
    MPX_CHECK(static_cast<int>(outputs[i].size()) == world, "c10d::ProcessGroup::allgather: output list ", i,
              " holds ", outputs[i].size(), " tensors; it needs one per rank (", world, ")");
    for (size_t r = 0; r < outputs[i].size(); ++r) {
      const Tensor& o = outputs[i][r];
      MPX_CHECK(o.defined() && o.sizes() == inputs[i].sizes() && o.dtype() == inputs[i].dtype(),
                "c10d::ProcessGroup::allgather: outputs[", i, "][", r, "] is ",
                o.defined() ? dtype_name(o.dtype()) + shape_str(o.sizes()) : std::string("undefined"),
                "; it must be shaped like inputs[", i, "], ", dtype_name(inputs[i].dtype()),
                shape_str(inputs[i].sizes()));
    }
  }
  auto w = std::make_shared<Work>();
  w->result_ = outputs[0];
  for (size_t i = 0; i < inputs.size(); ++i) {
    Work::Part part;
    part.work = distributed::all_gather_async(inputs[i]);
    part.finish = [out = outputs[i]](distributed::Work& done) {
      const tensor_list& got = done.result();
      for (size_t r = 0; r < out.size(); ++r) Tensor(out[r]).copy_(got[r]);
    };
    w->parts_.push_back(std::move(part));
  }
  return w;
}

std::shared_ptr<Work> ProcessGroup::barrier(const BarrierOptions&) {
  distributed::barrier();
  auto w = std::make_shared<Work>();
  w->finished_ = true;
  return w;
}

void ProcessGroup::abort() { distributed::detail::mpi_abort(EXIT_FAILURE); }

std::shared_ptr<ProcessGroupMPI> ProcessGroupMPI::createProcessGroupMPI(std::vector<int> ranks) {
  distributed::init();
  const int world = distributed::world_size();
  bool whole = ranks.empty() || static_cast<int>(ranks.size()) == world;
  for (size_t i = 0; whole && i < ranks.size(); ++i) whole = ranks[i] == static_cast<int>(i);
  MPX_CHECK(whole, "c10d::ProcessGroupMPI::createProcessGroupMPI: mpx has no subgroups; pass no ranks (or all ",
            world, " in order) for the whole job");
  return std::make_shared<ProcessGroupMPI>();
}

}  // namespace mpx::c10d
