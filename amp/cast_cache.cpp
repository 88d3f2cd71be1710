// The autocast weight cast cache: keyed on (tensor, version, dtype, grad mode), process-wide, mutex-guarded.
#include "amp/cast_cache.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "autograd/grad_mode.h"

namespace mpx::amp {
namespace {

struct Key {
  const TensorImpl* impl;
  DType to;
  bool grad_mode;
  bool operator<(const Key& o) const { return std::tie(impl, to, grad_mode) < std::tie(o.impl, o.to, o.grad_mode); }
};
struct Entry {
  std::weak_ptr<TensorImpl> source;  // guards against a freed TensorImpl's address being reused
  uint64_t version = 0;
  Tensor cast;
};

struct Cache {
  std::mutex mu;
  std::map<Key, Entry> entries;
  int64_t hits = 0, misses = 0;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: casts may be released by threads during exit
  return *c;
}

bool cacheable(const Tensor& t) { return t.dtype() == kFloat32 && t.is_leaf() && t.requires_grad(); }

}  // namespace

Tensor cached_cast(const Tensor& t, DType to) {
  if (!t.defined() || t.dtype() == to || !cacheable(t)) return t.to(to);
  const Key key{t.impl(), to, GradMode::is_enabled()};
  const uint64_t version = t.version();
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.entries.find(key);
    if (it != c.entries.end() && it->second.version == version && it->second.source.lock() == t.impl_ptr()) {
      ++c.hits;
      return it->second.cast;
    }
  }
  // Cast outside the lock (it may be large); a racing thread may cast too, the last one is kept.
  Tensor cast = t.to(to);
  std::lock_guard<std::mutex> lock(c.mu);
  ++c.misses;
  c.entries[key] = Entry{t.impl_ptr(), version, cast};
  return cast;
}

void clear_cast_cache() {
  std::map<Key, Entry> dropped;  // released outside the lock: freeing graphs may run arbitrary code
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  dropped.swap(c.entries);
}

CastCacheStats cast_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return {c.hits, c.misses, static_cast<int64_t>(c.entries.size())};
}

void reset_cast_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.hits = c.misses = 0;
}

}  // namespace mpx::amp
