// DistributedDataParallel: the cross-rank model check, the bucketed gradient reducer and no_sync.
#include "nn/distributed.h"

#include <chrono>
#include <map>
#include <sstream>

#include "autograd/engine.h"
#include "ops/elementwise.h"
#include "ops/shape.h"

namespace mpx::nn {

namespace dist = mpx::distributed;
using Clock = std::chrono::steady_clock;

namespace {

// "name dtype[shape] device" per parameter and buffer: what every rank must agree on.
std::vector<std::string> model_signature(Module& m) {
  std::vector<std::string> lines;
  for (const auto& [name, p] : m.named_parameters())
    lines.push_back("parameter '" + name + "' " + dtype_name(p.dtype()) + shape_str(p.sizes()) +
                    (p.requires_grad() ? "" : " (frozen)"));
  for (const auto& [name, b] : m.named_buffers())
    lines.push_back("buffer '" + name + "' " + dtype_name(b.dtype()) + shape_str(b.sizes()));
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

// Rank 0's values into `tensors` on every rank: one broadcast per dtype and device rather than
// one per tensor (a ResNet has dozens of small batch-norm buffers, broadcast every forward).
void broadcast_coalesced(const tensor_list& tensors) {
  if (dist::world_size() == 1 || tensors.empty()) return;
  NoGradGuard ng;
  std::map<std::pair<int, std::string>, tensor_list> groups;
  for (const auto& t : tensors) groups[{static_cast<int>(t.dtype()), t.device().str()}].push_back(t);
  std::vector<std::pair<dist::Work, Tensor>> works;
  for (auto& [key, list] : groups) {
    tensor_list flat;
    for (const auto& t : list) flat.push_back(t.reshape({-1}));
    Tensor block = cat(flat);
    works.emplace_back(dist::broadcast_async(block, 0), block);
  }
  auto it = groups.begin();
  for (auto& [work, block] : works) {
    work.wait();
    int64_t off = 0;
    for (const auto& t : it->second) {
      Tensor dst = t;
      dst.copy_(block.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
    ++it;
  }
}

}  // namespace

// ---- the reducer ----
struct DistributedDataParallelImpl::Reducer {
  struct Param {
    Tensor p;
    std::string name;
    int bucket = 0;
    int64_t offset = 0;  // in the bucket's flat buffer
  };
  struct Bucket {
    std::vector<int> params;
    DType reduce_dtype = kFloat32;
    int64_t numel = 0;
    int pending = 0;
    Tensor flat;
    dist::Work work;
  };

  DistributedDataParallelImpl& owner;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<uint64_t> hook_ids;
  std::vector<DType> dtypes;  // at construction
  std::vector<char> ready;
  int ready_count = 0;
  int next_launch = 0;
  bool callback_queued = false;
  // World size 1 on the CPU: nothing to average, so no bucket copies either (CUDA tensors still
  // go through NCCL, so one GPU exercises that path).
  bool passthrough = false;

  Reducer(DistributedDataParallelImpl& o, Module& m) : owner(o) {
    for (const auto& [name, p] : m.named_parameters())
      if (p.requires_grad()) params.push_back({p, name});
    // Reverse registration order approximates the order backward produces gradients. One
    // open bucket per dtype and device, since a bucket is one flat buffer.
    const double cap = std::max(owner.options_.bucket_cap_mb(), 0.0) * 1024 * 1024;
    std::map<std::pair<int, std::string>, int> open;
    for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
      const Tensor& p = params[i].p;
      const auto key = std::make_pair(static_cast<int>(p.dtype()), p.device().str());
      auto it = open.find(key);
      if (it == open.end()) {
        Bucket b;
        const bool low = p.dtype() == kFloat16 || p.dtype() == kBFloat16;
        b.reduce_dtype = low && owner.options_.allreduce_always_fp32() ? kFloat32 : p.dtype();
        buckets.push_back(std::move(b));
        it = open.emplace(key, static_cast<int>(buckets.size()) - 1).first;
      }
      Bucket& b = buckets[it->second];
      params[i].bucket = it->second;
      params[i].offset = b.numel;
      b.params.push_back(i);
      b.numel += p.numel();
      if (static_cast<double>(b.numel) * element_size(b.reduce_dtype) >= cap) open.erase(it);
    }
    ready.assign(params.size(), 0);
    passthrough = dist::world_size() == 1;
    for (const auto& p : params) {
      dtypes.push_back(p.p.dtype());
      passthrough = passthrough && p.p.device().is_cpu();
    }
    reset();
    for (int i = 0; i < static_cast<int>(params.size()); ++i)
      hook_ids.push_back(params[i].p.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_grad(i); }));
    owner.stats_.buckets = static_cast<int64_t>(buckets.size());
  }

  ~Reducer() {
    for (size_t i = 0; i < params.size(); ++i) params[i].p.remove_hook(hook_ids[i]);
  }

  // The hooks sit on the parameter tensors seen at construction: a model whose parameters were
  // replaced or recast since (amp::initialize or to() after wrapping) would silently train
  // without averaging, so that is an error.
  void check_parameters_unchanged(Module& m) const {
    size_t k = 0;
    for (const auto& [name, p] : m.named_parameters()) {
      if (!p.requires_grad()) continue;
      const bool same = k < params.size() && params[k].p.is_same(p) && params[k].p.dtype() == dtypes[k];
      MPX_CHECK(same, "DistributedDataParallel: parameter '", name, "' is not the tensor (or no longer has the dtype) "
                "it had when DDP wrapped the model; apply amp::initialize, to(device/dtype) and requires_grad changes "
                "before constructing DistributedDataParallel, as apex requires");
      ++k;
    }
    MPX_CHECK(k == params.size(), "DistributedDataParallel: the model has ", k, " trainable parameters, but had ",
              params.size(), " when DDP wrapped it; change the model before wrapping it");
  }

  void reset() {
    std::fill(ready.begin(), ready.end(), 0);
    ready_count = 0;
    next_launch = 0;
    for (auto& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      b.flat = Tensor();
      b.work = dist::Work();
    }
  }

  void on_grad(int i) {
    if (!owner.require_sync_) return;
    if (!callback_queued) {
      callback_queued = true;
      owner.stats_.buckets_started_during_backward = 0;
      autograd::queue_callback([this] { finish(); });
    }
    if (ready[i]) return;
    ready[i] = 1;
    ++ready_count;
    if (--buckets[params[i].bucket].pending == 0) launch_ready();
  }

  // Buckets start strictly in index order, so every rank issues the same collectives in the
  // same order even when gradients arrive in a different order.
  void launch_ready() {
    while (next_launch < static_cast<int>(buckets.size()) && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch++];
      if (ready_count < static_cast<int>(params.size())) ++owner.stats_.buckets_started_during_backward;
      if (passthrough) continue;
      NoGradGuard ng;
      tensor_list parts;
      parts.reserve(b.params.size());
      for (int i : b.params) parts.push_back(params[i].p.grad().reshape({-1}).to(b.reduce_dtype));
      b.flat = parts.size() == 1 ? parts[0].clone() : cat(parts);
      if (owner.options_.gradient_predivide_factor() != 1.0) b.flat.div_(owner.options_.gradient_predivide_factor());
      b.work = dist::all_reduce_async(b.flat, dist::ReduceOp::Sum);
    }
  }

  // Runs when backward has processed every node: the unused-parameter check, then waits for
  // the all-reduces and writes the averaged gradients back.
  void finish() {
    callback_queued = false;
    if (ready_count < static_cast<int>(params.size())) {
      std::vector<std::string> missing;
      for (size_t i = 0; i < params.size(); ++i)
        if (!ready[i]) missing.push_back(params[i].name);
      if (!owner.options_.find_unused_parameters()) {
        std::string names;
        for (size_t k = 0; k < missing.size() && k < 8; ++k) names += (k ? ", " : "") + missing[k];
        if (missing.size() > 8) names += ", ...";
        reset();
        MPX_ERROR("DistributedDataParallel: ", missing.size(), " of ", params.size(), " parameters got no gradient in "
                  "this backward (", names, "), so their gradients cannot be averaged across ranks. Use every "
                  "parameter in forward, set requires_grad(false) on the ones you do not train, or construct DDP with "
                  "DDPOptions().find_unused_parameters(true)");
      }
      NoGradGuard ng;
      for (size_t i = 0; i < params.size(); ++i) {
        if (ready[i]) continue;
        const Tensor& p = params[i].p;
        if (!p.grad().defined()) p.set_grad(zeros_like(p));
        ready[i] = 1;
        ++ready_count;
        --buckets[params[i].bucket].pending;
      }
      launch_ready();
    }
    if (passthrough) {  // one CPU process: the gradients already are the average
      ++owner.stats_.synchronized_backwards;
      reset();
      return;
    }
    const auto t0 = Clock::now();
    double in_backend = 0;
    for (auto& b : buckets) {
      b.work.wait();
      in_backend += b.work.seconds_in_backend();
    }
    owner.stats_.wait_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    owner.stats_.allreduce_seconds = in_backend;
    NoGradGuard ng;
    const double post = owner.options_.gradient_predivide_factor() / dist::world_size();
    for (auto& b : buckets) {
      if (post != 1.0) b.flat.mul_(post);
      for (int i : b.params) {
        const Tensor& p = params[i].p;
        Tensor& g = p.mutable_grad();
        g.copy_(b.flat.narrow(0, params[i].offset, p.numel()).view(g.sizes()));
      }
    }
    ++owner.stats_.synchronized_backwards;
    reset();
  }
};

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
  broadcast_coalesced(state);
  reducer_ = std::make_unique<Reducer>(*this, m);
}

DistributedDataParallelImpl::~DistributedDataParallelImpl() = default;

void DistributedDataParallelImpl::prepare_forward() {
  if (options_.broadcast_buffers()) broadcast_coalesced(module_.ptr()->buffers());
  reducer_->check_parameters_unchanged(*module_.ptr());
  if (!autograd::in_backward()) reducer_->reset();
}

Tensor DistributedDataParallelImpl::forward(const Tensor& x) {
  prepare_forward();
  return module_.forward(x);
}

DistributedDataParallelImpl::NoSyncGuard::NoSyncGuard(DistributedDataParallelImpl& ddp)
    : ddp_(ddp), prev_(ddp.require_sync_) {
  ddp_.require_sync_ = false;
}
DistributedDataParallelImpl::NoSyncGuard::~NoSyncGuard() { ddp_.require_sync_ = prev_; }

std::vector<std::vector<std::string>> DistributedDataParallelImpl::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : reducer_->buckets) {
    out.emplace_back();
    for (int i : b.params) out.back().push_back(reducer_->params[i].name);
  }
  return out;
}

void DistributedDataParallelImpl::pretty_print(std::ostream& os) const {
  os << "DistributedDataParallel(world_size=" << dist::world_size() << ", buckets=" << reducer_->buckets.size()
     << ", bucket_cap_mb=" << options_.bucket_cap_mb() << ")";
}

}  // namespace mpx::nn
