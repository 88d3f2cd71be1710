// Per-sample seeds, batch collation and the loader's warning channel.
#include "data/dataset.h"

#include <cstring>
#include <iostream>
#include <mutex>

#include "core/random.h"

namespace mpx::data {

uint64_t sample_seed(uint64_t loader_seed, int64_t epoch, int64_t index) {
  // Stream 0x5a3 keeps these seeds apart from the shuffle's draws over the same (seed, epoch).
  return random::hash(random::hash(loader_seed, static_cast<uint64_t>(epoch), 0x5a3), static_cast<uint64_t>(index),
                      0x5a4);
}

namespace {
Tensor stack_contiguous(const std::vector<const Tensor*>& parts, bool flatten_scalars, bool pinned, const char* what) {
  const Tensor& first = *parts[0];
  MPX_CHECK(first.defined(), "collate: example 0 has no ", what);
  IntList shape = first.sizes();
  const bool scalar = flatten_scalars && first.numel() == 1;
  IntList out_shape{static_cast<int64_t>(parts.size())};
  if (!scalar) out_shape.insert(out_shape.end(), shape.begin(), shape.end());
  Tensor out = empty(out_shape, TensorOptions(first.dtype()).pinned_memory(pinned));
  const size_t bytes = static_cast<size_t>(first.numel()) * first.element_size();
  auto* dst = static_cast<unsigned char*>(out.raw_data());
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = *parts[i];
    MPX_CHECK(t.defined(), "collate: example ", i, " has no ", what);
    MPX_CHECK(t.dtype() == first.dtype() && (scalar ? t.numel() == 1 : t.sizes() == shape), "collate: example ", i,
              "'s ", what, " is ", dtype_name(t.dtype()), shape_str(t.sizes()), " but example 0's is ",
              dtype_name(first.dtype()), shape_str(shape), "; every example of a batch needs the same shape and dtype "
              "(add a Resize/CenterCrop transform)");
    Tensor c = t.cpu().contiguous();
    std::memcpy(dst + i * bytes, c.raw_data(), bytes);
  }
  return out;
}
}  // namespace

Batch collate(const std::vector<Example>& examples, bool pinned) {
  MPX_CHECK(!examples.empty(), "collate: no examples");
  std::vector<const Tensor*> d, t;
  for (auto& e : examples) {
    d.push_back(&e.data);
    t.push_back(&e.target);
  }
  Batch b;
  b.data = stack_contiguous(d, false, pinned, "data");
  b.target = stack_contiguous(t, true, pinned, "target");
  b.pinned = pinned;
  return b;
}

void warn(const std::string& msg) {
  static std::mutex m;
  std::lock_guard<std::mutex> l(m);
  std::cerr << "mpx: warning: " << msg << std::endl;
}

}  // namespace mpx::data
