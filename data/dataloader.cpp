// DataLoader epochs: batches are claimed by workers in order, parked in a bounded map and
// handed out strictly in index order, so worker count and timing never change the result.
#include "data/dataloader.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "autograd/grad_mode.h"
#include "core/cuda.h"
#include "core/random.h"

namespace mpx::data {

class EpochRun {
 public:
  EpochRun(const Dataset& ds, std::vector<std::vector<int64_t>> batches, uint64_t seed, int64_t epoch, int64_t workers,
           int64_t capacity, bool pin, CollateFn collate_fn)
      : ds_(ds), batches_(std::move(batches)), seed_(seed), epoch_(epoch), capacity_(static_cast<size_t>(capacity)),
        pin_(pin), collate_fn_(std::move(collate_fn)), t0_(Clock::now()), last_(t0_) {
    stats_.epoch = epoch;
    try {
      for (int64_t w = 0; w < workers; ++w) threads_.emplace_back([this] { worker_loop(); });
    } catch (const std::system_error& e) {
      // The destructor does not run for a constructor that throws: join the started workers here.
      const size_t started = threads_.size();
      stop();
      MPX_ERROR("DataLoader: the system refused worker thread ", started + 1, " of ", workers, " (", e.what(),
                "); use fewer workers");
    }
  }
  ~EpochRun() { stop(); }

  bool done() const { return cur_ >= batches_.size(); }
  Batch& current() { return current_; }
  LoaderStats stats() const {
    LoaderStats s = stats_;
    s.elapsed_s = std::chrono::duration<double>(last_ - t0_).count();
    s.load_s = static_cast<double>(load_ns_.load(std::memory_order_relaxed)) * 1e-9;
    return s;
  }
  void start() {
    if (!done()) fetch(cur_);
  }
  void advance() {
    ++cur_;
    if (!done()) fetch(cur_);
    else stop();
  }

 private:
  using Clock = std::chrono::steady_clock;

  Batch load(size_t b) const {
    const auto t = Clock::now();
    struct Count {  // counted on error too: the time was spent
      const EpochRun* r;
      Clock::time_point t;
      ~Count() {
        r->load_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count(),
                              std::memory_order_relaxed);
      }
    } count{this, t};
    NoGradGuard no_grad;  // data preparation never builds graphs
    const auto& idx = batches_[b];
    std::vector<uint64_t> seeds;
    seeds.reserve(idx.size());
    for (int64_t i : idx) seeds.push_back(sample_seed(seed_, epoch_, i));
    // Pinned on the loading thread, so the training thread's .to(cuda, true) is an async DMA;
    // filled there directly where the dataset allows, from blocks the pinned cache reuses.
    Batch out;
    out.pinned = pin_;
    if (collate_fn_ || !ds_.get_batch(idx, seeds, out)) {
      std::vector<Example<>> ex;
      ex.reserve(idx.size());
      for (size_t k = 0; k < idx.size(); ++k) ex.push_back(ds_.get_seeded(idx[k], seeds[k]));
      out = collate_fn_ ? collate_fn_(ex, pin_) : collate(ex, pin_);
    }
    out.indices = idx;
    if (pin_) {
      // A custom get_batch may have ignored the request: copy, as before.
      for (Tensor* t : {&out.data, &out.target})
        if (t->defined() && t->device().is_cpu() && !cuda::is_pinned(*t)) *t = cuda::pin_memory(*t);
      out.pinned = true;
    }
    return out;
  }

  void fetch(size_t b) {
    const auto t = Clock::now();
    fetch_wait(b);
    last_ = Clock::now();
    stats_.wait_s += std::chrono::duration<double>(last_ - t).count();
    ++stats_.batches;
    stats_.samples += static_cast<int64_t>(batches_[b].size());
  }

  void fetch_wait(size_t b) {
    if (threads_.empty()) {
      try {
        current_ = load(b);
      } catch (...) {
        cur_ = batches_.size();
        throw;
      }
      return;
    }
    std::unique_lock<std::mutex> l(m_);
    consumed_ = b;
    cv_work_.notify_all();  // the consumer moved on: room for more prefetching
    cv_ready_.wait(l, [&] { return ready_.count(b) != 0; });
    auto node = ready_.extract(b);
    l.unlock();
    cv_work_.notify_all();
    if (node.mapped().second) {
      cur_ = batches_.size();
      stop();
      std::rethrow_exception(node.mapped().second);
    }
    current_ = std::move(node.mapped().first);
  }

  void worker_loop() {
    for (;;) {
      size_t b;
      {
        std::unique_lock<std::mutex> l(m_);
        cv_work_.wait(l, [&] { return stop_ || next_claim_ >= batches_.size() || next_claim_ < consumed_ + capacity_; });
        if (stop_ || next_claim_ >= batches_.size()) return;
        b = next_claim_++;
      }
      std::pair<Batch, std::exception_ptr> r;
      try {
        r.first = load(b);
      } catch (...) {
        r.second = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> l(m_);
        if (stop_) return;
        ready_.emplace(b, std::move(r));
      }
      cv_ready_.notify_all();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
    ready_.clear();
  }

  const Dataset& ds_;
  const std::vector<std::vector<int64_t>> batches_;
  const uint64_t seed_;
  const int64_t epoch_;
  const size_t capacity_;
  const bool pin_;
  const CollateFn collate_fn_;
  size_t cur_ = 0;
  Batch current_;
  const Clock::time_point t0_;
  Clock::time_point last_;
  LoaderStats stats_;                           // the consumer's side; load_s comes from load_ns_
  mutable std::atomic<int64_t> load_ns_{0};

  std::mutex m_;
  std::condition_variable cv_work_, cv_ready_;
  size_t next_claim_ = 0;  // guarded by m_
  size_t consumed_ = 0;    // guarded by m_: the batch the consumer waits for
  bool stop_ = false;      // guarded by m_
  std::map<size_t, std::pair<Batch, std::exception_ptr>> ready_;
  std::vector<std::thread> threads_;
};

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options)
    : dataset_(&dataset, [](const Dataset*) {}), options_(std::move(options)) {
  init();
}
DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  MPX_CHECK(dataset_, "DataLoader: the dataset is null");
  init();
}
DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

void DataLoader::init() {
  const auto& o = options_;
  MPX_CHECK(o.batch_size_ >= 1, "DataLoader: batch_size must be >= 1, got ", o.batch_size_);
  MPX_CHECK(o.workers_ >= 0, "DataLoader: workers must be >= 0, got ", o.workers_);
  MPX_CHECK(o.prefetch_ >= 1, "DataLoader: prefetch must be >= 1, got ", o.prefetch_);
  seed_ = o.seed_ ? *o.seed_ : random::default_generator().current_seed();
  const int64_t n = dataset_->size();
  if (o.sampler_) {
    sampler_ = o.sampler_;
  } else if (o.world_size_ != 1 || o.rank_ != 0) {
    sampler_ = std::make_shared<DistributedSampler>(n, o.rank_, o.world_size_, o.shuffle_, seed_);
  } else if (o.shuffle_) {
    sampler_ = std::make_shared<RandomSampler>(n, seed_);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(n);
  }
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size_;
  return options_.drop_last_ ? n / b : (n + b - 1) / b;
}

std::vector<std::vector<int64_t>> DataLoader::batch_indices(int64_t epoch) const {
  const auto idx = sampler_->indices(epoch);
  const auto b = static_cast<size_t>(options_.batch_size_);
  std::vector<std::vector<int64_t>> out;
  for (size_t s = 0; s < idx.size(); s += b) {
    const size_t e = std::min(idx.size(), s + b);
    if (e - s < b && options_.drop_last_) break;
    out.emplace_back(idx.begin() + static_cast<std::ptrdiff_t>(s), idx.begin() + static_cast<std::ptrdiff_t>(e));
  }
  return out;
}

DataLoader::Iterator DataLoader::begin() {
  run_.reset();  // joins the workers of an unfinished epoch
  const int64_t e = epoch_++;
  const int64_t cap = std::max<int64_t>(1, options_.prefetch_ * options_.workers_);
  // Pinning needs the CUDA driver; without a GPU the option changes nothing.
  const bool pin = options_.pin_memory_ && cuda_is_available();
  run_ = std::make_unique<EpochRun>(*dataset_, batch_indices(e), seed_, e, options_.workers_, cap, pin, options_.collate_fn_);
  run_->start();
  Iterator it;
  it.run_ = run_.get();
  return it;
}

LoaderStats DataLoader::stats() const {
  LoaderStats s = run_ ? run_->stats() : LoaderStats{};
  s.transform_path = dataset_->transform_path();
  return s;
}

Batch& DataLoader::Iterator::operator*() const {
  MPX_CHECK(run_ && !run_->done(), "DataLoader: dereferencing an iterator past the last batch");
  return run_->current();
}
DataLoader::Iterator& DataLoader::Iterator::operator++() {
  MPX_CHECK(run_ && !run_->done(), "DataLoader: incrementing an iterator past the last batch");
  run_->advance();
  return *this;
}
bool DataLoader::Iterator::operator==(const Iterator& o) const {
  const bool a = !run_ || run_->done(), b = !o.run_ || o.run_->done();
  if (a || b) return a == b;
  return run_ == o.run_;
}

}  // namespace mpx::data
