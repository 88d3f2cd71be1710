// The gradient reducer: buckets in reverse registration order, all-reduces started from post-accumulate-grad hooks.
#include "distributed/reducer.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/shape.h"

namespace mpx::distributed {

using Clock = std::chrono::steady_clock;

struct Reducer::Impl {
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
    double cap = 0;  // bytes
    int pending = 0;
    Tensor flat;
    Work work;
  };

  ReducerOptions options;
  ReducerStats stats;
  bool require_sync = true;
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

  Impl(const std::vector<std::pair<std::string, Tensor>>& named, const ReducerOptions& o) : options(o) {
    for (const auto& [name, p] : named)
      if (p.requires_grad()) params.push_back({p, name});
    // Backward produces gradients roughly in reverse registration order, so buckets are
    // launched in that order. Their boundaries are drawn from the other end: the bucket of the
    // earliest-registered parameters, ready only when backward ends, is capped at 1 MiB so that
    // little communication is left to wait for then; the others take bucket_cap_mb. One open
    // bucket per dtype and device, since a bucket is one flat buffer.
    const double cap = std::max(options.bucket_cap_mb, 0.0) * 1024 * 1024;
    const double last_cap = std::min(cap, 1024.0 * 1024.0);
    std::map<std::pair<int, std::string>, int> open;
    std::map<std::pair<int, std::string>, bool> seen;
    for (int i = 0; i < static_cast<int>(params.size()); ++i) {
      const Tensor& p = params[i].p;
      const auto key = std::make_pair(static_cast<int>(p.dtype()), p.device().str());
      auto it = open.find(key);
      if (it == open.end()) {
        Bucket b;
        const bool low = p.dtype() == kFloat16 || p.dtype() == kBFloat16;
        b.reduce_dtype = low && options.allreduce_always_fp32 ? kFloat32 : p.dtype();
        b.cap = seen[key] ? cap : last_cap;
        seen[key] = true;
        buckets.push_back(std::move(b));
        it = open.emplace(key, static_cast<int>(buckets.size()) - 1).first;
      }
      Bucket& b = buckets[it->second];
      b.params.push_back(i);
      b.numel += p.numel();
      if (static_cast<double>(b.numel) * element_size(b.reduce_dtype) >= b.cap) open.erase(it);
    }
    std::reverse(buckets.begin(), buckets.end());
    for (int k = 0; k < static_cast<int>(buckets.size()); ++k) {
      Bucket& b = buckets[k];
      std::reverse(b.params.begin(), b.params.end());  // in the order their gradients arrive
      int64_t off = 0;
      for (int i : b.params) {
        params[i].bucket = k;
        params[i].offset = off;
        off += params[i].p.numel();
      }
    }
    ready.assign(params.size(), 0);
    passthrough = world_size() == 1;
    for (const auto& p : params) {
      dtypes.push_back(p.p.dtype());
      passthrough = passthrough && p.p.device().is_cpu();
    }
    reset();
    for (int i = 0; i < static_cast<int>(params.size()); ++i)
      hook_ids.push_back(params[i].p.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_grad(i); }));
    stats.buckets = static_cast<int64_t>(buckets.size());
  }

  ~Impl() {
    for (size_t i = 0; i < params.size(); ++i) params[i].p.remove_hook(hook_ids[i]);
  }

  // The hooks sit on the parameter tensors seen at construction: a model whose parameters were
  // replaced or recast since (amp::initialize or to() after wrapping) would silently train
  // without averaging, so that is an error.
  void check_parameters_unchanged(const std::vector<std::pair<std::string, Tensor>>& named) const {
    size_t k = 0;
    for (const auto& [name, p] : named) {
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

  // `drop_buffers`: after an error, when an all-reduce may still be writing into a bucket.
  void reset(bool drop_buffers = false) {
    std::fill(ready.begin(), ready.end(), 0);
    ready_count = 0;
    next_launch = 0;
    for (auto& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      if (drop_buffers) b.flat = Tensor();
      b.work = Work();
    }
  }

  Tensor slot(const Bucket& b, int i) const {
    return b.flat.narrow(0, params[i].offset, params[i].p.numel()).view(params[i].p.sizes());
  }
  // A gradient that already is its slot in the bucket (see finish) needs no copy.
  bool is_slot(const Bucket& b, int i, const Tensor& g) const {
    return g.defined() && g.dtype() == b.flat.dtype() && g.is_contiguous() && g.raw_data() == slot(b, i).raw_data();
  }

  void on_grad(int i) {
    if (!require_sync) return;
    if (!callback_queued) {
      callback_queued = true;
      stats.buckets_started_during_backward = 0;
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
      if (ready_count < static_cast<int>(params.size())) ++stats.buckets_started_during_backward;
      if (passthrough) continue;
      NoGradGuard ng;
      const Tensor& first = params[b.params.front()].p;
      if (!b.flat.defined()) b.flat = empty({b.numel}, TensorOptions().dtype(b.reduce_dtype).device(first.device()));
      for (int i : b.params) {
        const Tensor g = params[i].p.grad();
        if (!is_slot(b, i, g)) slot(b, i).copy_(g);
      }
      if (options.gradient_predivide_factor != 1.0) b.flat.div_(options.gradient_predivide_factor);
      b.work = all_reduce_async(b.flat, ReduceOp::Sum);
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
      if (!options.find_unused_parameters) {
        std::string names;
        for (size_t k = 0; k < missing.size() && k < 8; ++k) names += (k ? ", " : "") + missing[k];
        if (missing.size() > 8) names += ", ...";
        reset(/*drop_buffers=*/true);
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
      ++stats.synchronized_backwards;
      reset();
      return;
    }
    const auto t0 = Clock::now();
    double in_backend = 0;
    for (auto& b : buckets) {
      b.work.wait();
      in_backend += b.work.seconds_in_backend();
    }
    stats.wait_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    stats.allreduce_seconds = in_backend;
    NoGradGuard ng;
    const double post = options.gradient_predivide_factor / world_size();
    // Gradients become views of their bucket (PyTorch's gradient_as_bucket_view) where dtype and
    // layout allow: no copy back now, and none into the bucket next time unless zero_grad(true)
    // or create_graph gave a parameter a fresh gradient tensor.
    for (auto& b : buckets) {
      if (post != 1.0) b.flat.mul_(post);
      for (int i : b.params) {
        const Tensor& p = params[i].p;
        Tensor& g = p.mutable_grad();
        if (is_slot(b, i, g)) continue;
        if (b.flat.dtype() == p.dtype() && p.is_contiguous() && g.is_contiguous()) p.set_grad(slot(b, i));
        else g.copy_(slot(b, i));
      }
    }
    ++stats.synchronized_backwards;
    reset();
  }
};

Reducer::Reducer(const std::vector<std::pair<std::string, Tensor>>& params, const ReducerOptions& options)
    : impl_(std::make_unique<Impl>(params, options)) {}
Reducer::~Reducer() = default;
void Reducer::set_require_sync(bool on) { impl_->require_sync = on; }
bool Reducer::require_sync() const { return impl_->require_sync; }
void Reducer::reset() {
  if (!autograd::in_backward()) impl_->reset();
}
void Reducer::check_parameters_unchanged(const std::vector<std::pair<std::string, Tensor>>& params) const {
  impl_->check_parameters_unchanged(params);
}
const ReducerStats& Reducer::stats() const { return impl_->stats; }
std::vector<std::vector<std::string>> Reducer::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : impl_->buckets) {
    out.emplace_back();
    for (int i : b.params) out.back().push_back(impl_->params[i].name);
  }
  return out;
}

void broadcast_coalesced(const tensor_list& tensors, int root) {
  if (world_size() == 1 || tensors.empty()) return;
  NoGradGuard ng;
  std::map<std::pair<int, std::string>, tensor_list> groups;
  for (const auto& t : tensors) groups[{static_cast<int>(t.dtype()), t.device().str()}].push_back(t);
  std::vector<std::pair<Work, Tensor>> works;
  for (auto& [key, list] : groups) {
    tensor_list flat;
    for (const auto& t : list) flat.push_back(t.reshape({-1}));
    Tensor block = cat(flat);
    works.emplace_back(broadcast_async(block, root), block);
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

}  // namespace mpx::distributed
