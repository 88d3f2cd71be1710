// DistributedDataParallel: the cross-rank model check, rank 0's state everywhere, and the reducer hooked up.
#include "nn/distributed.h"

#include <sstream>

#include "distributed/reducer.h"
#include "ops/elementwise.h"

namespace mpx::nn {

namespace dist = mpx::distributed;

namespace {

// "name dtype[shape] on device-type" per parameter and buffer: what every rank must agree on.
std::vector<std::string> model_signature(Module& m) {
  std::vector<std::string> lines;
  // The device type, not its index: ranks drive different GPUs, but CPU and CUDA tensors go to
  // different transports.
  auto where = [](const Tensor& t) { return t.device().is_cuda() ? " on cuda" : " on cpu"; };
  for (const auto& [name, p] : m.named_parameters())
    lines.push_back("parameter '" + name + "' " + dtype_name(p.dtype()) + shape_str(p.sizes()) + where(p) +
                    (p.requires_grad() ? "" : " (frozen)"));
  for (const auto& [name, b] : m.named_buffers())
    lines.push_back("buffer '" + name + "' " + dtype_name(b.dtype()) + shape_str(b.sizes()) + where(b));
  return lines;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Gathers every rank's signature and throws the same error on every rank when one differs.
void check_same_model(Module& m) {
  const int world = dist::world_size();
  if (world == 1) return;
  const std::string mine = join(model_signature(m));
  tensor_list lens = dist::all_gather(full({1}, static_cast<double>(mine.size()), kInt64));
  int64_t longest = 0;
  for (const auto& l : lens) longest = std::max(longest, l.item<int64_t>());
  Tensor bytes = zeros({longest}, kUInt8);
  std::copy(mine.begin(), mine.end(), bytes.data_ptr<uint8_t>());
  tensor_list all = dist::all_gather(bytes);
  auto text = [&](int r) {
    const auto* p = reinterpret_cast<const char*>(all[r].contiguous().data_ptr<uint8_t>());
    return std::string(p, static_cast<size_t>(lens[r].item<int64_t>()));
  };
  const std::vector<std::string> ref = split_lines(text(0));
  for (int r = 1; r < world; ++r) {
    const std::vector<std::string> other = split_lines(text(r));
    if (other == ref) continue;
    size_t i = 0;
    while (i < ref.size() && i < other.size() && ref[i] == other[i]) ++i;
    const std::string a = i < ref.size() ? ref[i] : "nothing (it has " + std::to_string(ref.size()) + " entries)";
    const std::string b = i < other.size() ? other[i] : "nothing (it has " + std::to_string(other.size()) + " entries)";
    MPX_ERROR("DistributedDataParallel: the model on rank ", r, " differs from rank 0's at entry ", i, ": rank 0 has ",
              a, ", rank ", r, " has ", b, ". Every rank must build the same model (same layers in the same order, "
              "same dtypes: apply amp::initialize with the same options on every rank) before wrapping it");
  }
}

std::vector<std::pair<std::string, Tensor>> named_vector(Module& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, p] : m.named_parameters()) out.emplace_back(name, p);
  return out;
}

}  // namespace

// ---- the module ----
DistributedDataParallelImpl::DistributedDataParallelImpl(AnyModule module, const DDPOptions& options)
    : Module("DistributedDataParallel"), module_(std::move(module)), options_(options) {
  MPX_CHECK(!module_.is_empty(), "DistributedDataParallel: the module is empty");
  MPX_CHECK(options_.bucket_cap_mb() > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
            options_.bucket_cap_mb());
  MPX_CHECK(options_.gradient_predivide_factor() > 0, "DistributedDataParallel: gradient_predivide_factor must be "
            "positive, got ", options_.gradient_predivide_factor());
  register_module("module", module_.ptr());
  Module& m = *module_.ptr();
  dist::init();
  check_same_model(m);
  // Rank 0's initial values everywhere: every replica starts identical.
  tensor_list state = m.parameters();
  for (const auto& b : m.buffers()) state.push_back(b);
  dist::broadcast_coalesced(state);
  dist::ReducerOptions ro;
  ro.bucket_cap_mb = options_.bucket_cap_mb();
  ro.gradient_predivide_factor = options_.gradient_predivide_factor();
  ro.allreduce_always_fp32 = options_.allreduce_always_fp32();
  ro.find_unused_parameters = options_.find_unused_parameters();
  reducer_ = std::make_unique<dist::Reducer>(named_vector(m), ro);
}

DistributedDataParallelImpl::~DistributedDataParallelImpl() = default;

void DistributedDataParallelImpl::prepare_forward() {
  if (options_.broadcast_buffers()) dist::broadcast_coalesced(module_.ptr()->buffers());
  reducer_->check_parameters_unchanged(named_vector(*module_.ptr()));
  reducer_->reset();
}

Tensor DistributedDataParallelImpl::forward(const Tensor& x) {
  prepare_forward();
  return module_.forward(x);
}

DistributedDataParallelImpl::NoSyncGuard::NoSyncGuard(DistributedDataParallelImpl& ddp)
    : ddp_(ddp), prev_(ddp.reducer_->require_sync()) {
  ddp_.reducer_->set_require_sync(false);
}
DistributedDataParallelImpl::NoSyncGuard::~NoSyncGuard() { ddp_.reducer_->set_require_sync(prev_); }

std::vector<std::vector<std::string>> DistributedDataParallelImpl::bucket_layout() const {
  return reducer_->bucket_layout();
}
const DDPStats& DistributedDataParallelImpl::stats() const { return reducer_->stats(); }

void DistributedDataParallelImpl::pretty_print(std::ostream& os) const {
  os << "DistributedDataParallel(world_size=" << dist::world_size() << ", buckets=" << reducer_->stats().buckets
     << ", bucket_cap_mb=" << options_.bucket_cap_mb() << ")";
}

}  // namespace mpx::nn
