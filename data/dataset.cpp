// Per-sample seeds, batch collation and the loader's warning channel.
#include "data/dataset.h"

#include <algorithm>
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
              "(images: add a Resize/CenterCrop transform; sequences of different lengths: "
              "DataLoaderOptions().collate_fn(data::pad_collate()))");
    Tensor c = t.cpu().contiguous();
    std::memcpy(dst + i * bytes, c.raw_data(), bytes);
  }
  return out;
}
}  // namespace

Batch collate(const std::vector<Example<>>& examples, bool pinned) {
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

namespace {
// Pads `parts` ([T_i, ...], one dtype and trailing shape) along dim 0 into [B, T_max, ...] or [T_max, B, ...].
Tensor pad_along_first(const std::vector<const Tensor*>& parts, double value, bool batch_first, bool pinned,
                       const char* what) {
  const Tensor& first = *parts[0];
  MPX_CHECK(first.defined() && first.dim() >= 1, "pad_collate: example 0's ", what, " is ",
            first.defined() ? shape_str(first.sizes()) : std::string("missing"),
            "; padding needs a length dim first ([T, ...])");
  const IntList rest(first.sizes().begin() + 1, first.sizes().end());
  int64_t longest = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = *parts[i];
    MPX_CHECK(t.defined() && t.dim() == first.dim() && IntList(t.sizes().begin() + 1, t.sizes().end()) == rest &&
                  t.dtype() == first.dtype(),
              "pad_collate: example ", i, "'s ", what, " is ",
              t.defined() ? dtype_name(t.dtype()) + shape_str(t.sizes()) : std::string("missing"), " but example 0's is ",
              dtype_name(first.dtype()), shape_str(first.sizes()), "; only the first (length) dim may differ");
    longest = std::max(longest, t.size(0));
  }
  const int64_t B = static_cast<int64_t>(parts.size());
  IntList shape = batch_first ? IntList{B, longest} : IntList{longest, B};
  shape.insert(shape.end(), rest.begin(), rest.end());
  Tensor out = full(shape, value, TensorOptions(first.dtype()).pinned_memory(pinned));
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = *parts[i];
    const int64_t b = static_cast<int64_t>(i);
    (batch_first ? out.select(0, b) : out.select(1, b)).narrow(0, 0, t.size(0)).copy_(t.cpu());
  }
  return out;
}
}  // namespace

CollateFn pad_collate(double padding_value, double target_padding_value, bool batch_first) {
  return [=](const std::vector<Example<>>& examples, bool pinned) {
    MPX_CHECK(!examples.empty(), "pad_collate: no examples");
    std::vector<const Tensor*> d, t;
    std::vector<int64_t> lengths;
    bool scalar_targets = true;
    for (const auto& e : examples) {
      d.push_back(&e.data);
      t.push_back(&e.target);
      lengths.push_back(e.data.defined() && e.data.dim() >= 1 ? e.data.size(0) : 0);
      scalar_targets = scalar_targets && e.target.defined() && e.target.numel() == 1 && e.target.dim() <= 1;
    }
    Batch b;
    b.data = pad_along_first(d, padding_value, batch_first, pinned, "data");
    if (examples[0].target.defined())
      b.target = scalar_targets ? stack_contiguous(t, true, pinned, "target")
                                : pad_along_first(t, target_padding_value, batch_first, pinned, "target");
    b.lengths = tensor(lengths, {static_cast<int64_t>(lengths.size())});
    b.pinned = pinned;
    return b;
  };
}

void warn(const std::string& msg) {
  static std::mutex m;
  std::lock_guard<std::mutex> l(m);
  std::cerr << "mpx: warning: " << msg << std::endl;
}

}  // namespace mpx::data
