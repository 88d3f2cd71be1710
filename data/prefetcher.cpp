// DevicePrefetcher: side-stream copies and device normalization of the loader's next batch, ordered against the consumer's stream with events.
#include "data/prefetcher.h"

#include <array>
#include <exception>
#include <mutex>
#include <utility>

#include "autograd/grad_mode.h"
#include "core/cuda.h"
#include "core/error.h"
#include "ops/elementwise.h"

namespace mpx::data {

struct DevicePrefetcher::Slot {
  Batch batch;
  // Recorded on the side stream after the batch's copies (CUDA only); the consumer's stream
  // waits for it when the batch is handed out.
  std::unique_ptr<cuda::Event> ready;
  // The consumer's stream `batch` was allocated on (and is freed on).
  cuda::Stream consumer;
  // Loader tensors that already lived on the device: the side stream reads them, so they are
  // kept until the consumer's stream has waited for `ready` (PyTorch's record_stream); freed
  // earlier, their memory could be reused on their stream while the side stream still reads it.
  Batch source;
  // A failure to load this batch, rethrown when it would have been handed out, so the
  // batches before it still arrive (as from the loader itself).
  std::exception_ptr error;

  Slot() = default;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot() {
    // A batch dropped before it was handed out (a new epoch, the prefetcher destroyed) is freed
    // on the consumer's stream, which never waited for the side stream's copies into it: the
    // pool could hand its memory to the next allocation there while those copies still write.
    if (ready) {
      try {
        ready->wait(consumer);
      } catch (...) {  // a destructor cannot report it; the next checked CUDA call will
      }
    }
  }
};

namespace {
// One prefetch stream per device, shared by every prefetcher (streams live until exit).
cuda::Stream prefetch_stream(int device) {
  static std::mutex m;
  static std::array<cuda::Stream, 64> streams{};
  MPX_CHECK(device >= 0 && device < static_cast<int>(streams.size()), "DevicePrefetcher: bad device ", device);
  std::lock_guard<std::mutex> l(m);
  auto& s = streams[static_cast<size_t>(device)];
  if (!s.handle) s = cuda::new_stream(device);
  return s;
}
}  // namespace

DevicePrefetcher::DevicePrefetcher(DataLoader& loader, Device device, PrefetchOptions options)
    : loader_(loader), device_(device), options_(std::move(options)) {
  const auto& o = options_;
  MPX_CHECK(is_floating(o.dtype()), "DevicePrefetcher: dtype must be floating (f32, f16, bf16 or f64), got ",
            dtype_name(o.dtype()));
  MPX_CHECK(o.mean().size() == o.std().size(), "DevicePrefetcher: mean and std need the same length, got ",
            o.mean().size(), " and ", o.std().size());
  for (double s : o.std()) MPX_CHECK(s != 0, "DevicePrefetcher: std must be non-zero");
  if (device_.is_cuda()) {
    MPX_CHECK(device_.index >= 0 && device_.index < cuda_device_count(), "DevicePrefetcher: ", device_.str(),
              " does not exist (", cuda_device_count(), " CUDA device(s) visible)");
  }
}

DevicePrefetcher::~DevicePrefetcher() = default;

Batch DevicePrefetcher::transfer(const Batch& host) {
  MPX_CHECK(host.data.defined(), "DevicePrefetcher: the loader gave a batch without data");
  Tensor x = host.data.to(device_, /*non_blocking=*/true);
  if (x.dtype() == kUInt8) x = x.to(kFloat32) * static_cast<double>(1.0f / 255.0f);  // ToTensor's scaling
  const auto& o = options_;
  if (!o.mean().empty()) {
    MPX_CHECK(x.dim() >= 2, "DevicePrefetcher: normalization needs [N, C, ...] data, got ", shape_str(x.sizes()));
    const int64_t c = x.size(1), k = static_cast<int64_t>(o.mean().size());
    MPX_CHECK(k == 1 || k == c, "DevicePrefetcher: ", k, " means for data with ", c, " channels (dim 1) ",
              shape_str(x.sizes()));
    if (!mean_.defined() || mean_.size(1) != c) {
      // transforms::Normalize's arithmetic exactly: (v - mean) * f32(1 / std).
      std::vector<float> m(static_cast<size_t>(c)), inv(static_cast<size_t>(c));
      for (int64_t i = 0; i < c; ++i) {
        const auto j = static_cast<size_t>(k == 1 ? 0 : i);
        m[static_cast<size_t>(i)] = static_cast<float>(o.mean()[j]);
        inv[static_cast<size_t>(i)] = static_cast<float>(1.0 / o.std()[j]);
      }
      IntList shape(static_cast<size_t>(x.dim()), 1);
      shape[1] = c;
      mean_ = tensor(m, shape).to(device_);
      inv_std_ = tensor(inv, shape).to(device_);
    }
    x = (x.to(kFloat32) - mean_) * inv_std_;
  }
  Batch b;
  b.data = x;
  if (host.target.defined()) b.target = host.target.to(device_, /*non_blocking=*/true);
  b.indices = host.indices;
  return b;
}

void DevicePrefetcher::preload() {
  next_.reset();
  if (failed_ || it_ == loader_.end()) return;
  auto slot = std::make_unique<Slot>();
  try {
    stage(*it_, *slot);
    ++it_;  // loads the following host batch (on this thread when the loader has no workers)
  } catch (...) {
    // A failed staging loses this batch (its slot carries the error); a failed ++ belongs
    // to the following batch, so this one is still handed out first.
    if (!slot->batch.data.defined()) slot->error = std::current_exception();
    else failed_ = std::current_exception();
  }
  next_ = std::move(slot);
}

void DevicePrefetcher::stage(const Batch& host, Slot& slot) {
  NoGradGuard no_grad;
  if (!device_.is_cuda()) {
    Batch b = transfer(host);
    b.data = b.data.to(options_.dtype()).contiguous(options_.memory_format());
    slot.batch = std::move(b);
  } else {
    cuda::DeviceGuard on_device(device_.index);  // the events below belong to device_
    const cuda::Stream main = cuda::current_stream(device_.index);
    if (!side_) side_ = prefetch_stream(device_.index).handle;
    const cuda::Stream side{side_, device_.index};
    // The handed-out tensors are allocated on the consumer's stream: their memory then returns
    // to the pool on that stream after the last step that reads them. The side stream waits
    // for the allocation point before writing into them.
    Batch out;
    out.data = empty(host.data.sizes(),
                     TensorOptions(options_.dtype()).device(device_).memory_format(options_.memory_format()));
    if (host.target.defined()) out.target = empty(host.target.sizes(), TensorOptions(host.target.dtype()).device(device_));
    out.indices = host.indices;
    slot.consumer = main;
    cuda::Event allocated(false);
    allocated.record(main);
    try {
      cuda::StreamGuard on_side(side);
      allocated.wait(side);
      // Temporaries made here are allocated and freed on the side stream, where they are used.
      Batch staged = transfer(host);
      out.data.copy_(staged.data);
      if (out.target.defined()) out.target.copy_(staged.target);
      slot.ready = std::make_unique<cuda::Event>(false);
      slot.ready->record(side);
    } catch (...) {
      // `out` is freed on `main`: keep the pool from reusing it under copies already queued.
      try {
        cuda::Event failed(false);
        failed.record(side);
        failed.wait(main);
      } catch (...) {
      }
      throw;
    }
    if ((host.data.defined() && host.data.is_cuda()) || (host.target.defined() && host.target.is_cuda()))
      slot.source = host;
    slot.batch = std::move(out);
  }
}

bool DevicePrefetcher::promote() {
  current_ = std::move(next_);
  if (!current_) {
    if (failed_) std::rethrow_exception(std::exchange(failed_, nullptr));
    return false;
  }
  if (current_->error) std::rethrow_exception(current_->error);
  if (current_->ready) current_->ready->wait(cuda::current_stream(device_.index));
  preload();  // the copy of the following batch overlaps the caller's step on this one
  return true;
}

DevicePrefetcher::Iterator DevicePrefetcher::begin() {
  current_.reset();
  next_.reset();
  failed_ = nullptr;
  it_ = loader_.begin();
  preload();
  Iterator i;
  if (promote()) i.p_ = this;
  return i;
}

Batch& DevicePrefetcher::Iterator::operator*() const {
  MPX_CHECK(p_ && p_->current_, "DevicePrefetcher: dereferenced the end iterator");
  return p_->current_->batch;
}

DevicePrefetcher::Iterator& DevicePrefetcher::Iterator::operator++() {
  MPX_CHECK(p_, "DevicePrefetcher: incremented the end iterator");
  if (!p_->promote()) p_ = nullptr;
  return *this;
}

}  // namespace mpx::data
