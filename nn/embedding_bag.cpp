// EmbeddingBag: the bags' entries as (row, bag) pairs from the offsets, then one index_add per reduction (sum and
// mean) or a padded [B, longest, dim] gather reduced by amax (max).
#include "nn/embedding_bag.h"

#include <algorithm>
#include <limits>
#include <ostream>
#include <vector>

#include "nn/functional.h"
#include "nn/modules.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape.h"

namespace mpx::nn {
namespace functional {

Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagFuncOptions& o) {
  const char* op = "embedding_bag";
  MPX_CHECK(weight.defined() && weight.dim() == 2 && is_floating(weight.dtype()), op,
            ": weight must be a floating [num_embeddings, dim] table, got ",
            ops::describe(weight));
  MPX_CHECK(input.defined() && (input.dtype() == kInt64 || input.dtype() == kInt32) &&
                (input.dim() == 1 || input.dim() == 2),
            op, ": input must be i64 or i32 [B, L] or [N] (with offsets), got ",
            ops::describe(input));
  const std::string& mode = o.mode();
  MPX_CHECK(mode == "sum" || mode == "mean" || mode == "max", op, ": mode must be \"sum\", \"mean\" or \"max\", got \"",
            mode, "\"");
  const Tensor& psw = o.per_sample_weights();
  if (psw.defined()) {
    MPX_CHECK(mode == "sum", op, ": per_sample_weights work with mode \"sum\" only (got \"", mode, "\")");
    MPX_CHECK(psw.sizes() == input.sizes(), op, ": per_sample_weights ", ops::describe(psw), " must have input's shape ",
              shape_str(input.sizes()));
  }
  // bag_of[j]: the bag of entry j; start[b]: its first entry; B bags.
  const int64_t N = input.numel();
  int64_t B = 0;
  std::vector<int64_t> start;
  if (input.dim() == 2) {
    MPX_CHECK(!o.offsets().defined(), op, ": a 2-d input holds its bags as rows; pass offsets only with a 1-d input");
    B = input.size(0);
    for (int64_t b = 0; b < B; ++b) start.push_back(b * input.size(1));
  } else {
    MPX_CHECK(o.offsets().defined() && o.offsets().dim() == 1, op, ": a 1-d input needs 1-d offsets, one per bag");
    const Tensor off = o.offsets().to(Device::cpu()).to(kInt64).contiguous();
    start.assign(off.data_ptr<int64_t>(), off.data_ptr<int64_t>() + off.numel());
    if (o.include_last_offset()) {
      MPX_CHECK(!start.empty() && start.back() == N, op, ": with include_last_offset the last offset must be the ",
                "input's length ", N, ", got ", start.empty() ? -1 : start.back());
      start.pop_back();
    }
    B = static_cast<int64_t>(start.size());
    for (int64_t b = 0; b < B; ++b)
      MPX_CHECK((b == 0 ? start[0] == 0 : start[b] >= start[b - 1]) && start[b] <= N, op, ": offsets must start at 0, ",
                "not decrease and not pass the input's length ", N, "; offset ", b, " is ", start[b]);
  }
  std::vector<int64_t> bag_of(static_cast<size_t>(N));
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t end = b + 1 < B ? start[b + 1] : N;
    longest = std::max(longest, end - start[b]);
    for (int64_t j = start[b]; j < end; ++j) bag_of[static_cast<size_t>(j)] = b;
  }
  const int64_t D = weight.size(1);
  const Tensor idx = input.reshape({N});
  const Tensor rows = embedding(idx, weight, o.padding_idx(), o.max_norm(), o.norm_type());  // [N, D]
  // Entries that take no part: padding_idx's.
  Tensor drop;
  if (o.padding_idx()) {
    const int64_t pad = *o.padding_idx() < 0 ? *o.padding_idx() + weight.size(0) : *o.padding_idx();
    drop = eq(idx, static_cast<double>(pad));
  }
  const TensorOptions wo = weight.options();
  if (mode == "max") {
    // Bag b's entries at [b, 0 ...]; the rest (and padding entries) -inf, so amax takes the bag's own rows.
    std::vector<int64_t> slot(static_cast<size_t>(B * longest), N);  // N: the -inf row appended below
    for (int64_t j = 0; j < N; ++j) {
      const int64_t b = bag_of[static_cast<size_t>(j)];
      slot[static_cast<size_t>(b * longest + (j - start[static_cast<size_t>(b)]))] = j;
    }
    const double inf = std::numeric_limits<double>::infinity();
    Tensor src = drop.defined() ? masked_fill(rows, drop.unsqueeze(1), -inf) : rows;
    src = cat({src, full({1, D}, -inf, wo)}, 0);
    const Tensor slots = tensor(slot, {B * longest}).to(weight.device());
    const Tensor m = amax(index_select(src, 0, slots).view({B, longest, D}), {1});
    return masked_fill(m, eq(m, -inf), 0.0);  // an empty bag (or one of padding only) gives zeros
  }
  Tensor vals = rows;
  if (psw.defined()) vals = vals * psw.reshape({N, 1}).to(weight.dtype());
  if (drop.defined()) vals = masked_fill(vals, drop.unsqueeze(1), 0.0);
  const Tensor bags = tensor(bag_of, {N}).to(weight.device());
  Tensor out = index_add(zeros({B, D}, wo), 0, bags, vals);
  if (mode == "mean") {
    const Tensor one = drop.defined() ? 1.0 - drop.to(weight.dtype()) : ones({N}, wo);
    const Tensor count = index_add(zeros({B}, wo), 0, bags, one);
    out = out / clamp_min(count, 1.0).unsqueeze(1);
  }
  return out;
}

}  // namespace functional

EmbeddingBagImpl::EmbeddingBagImpl(const EmbeddingBagOptions& o) : options(o) {
  MPX_CHECK(o.mode() == "sum" || o.mode() == "mean" || o.mode() == "max",
            "EmbeddingBag: mode must be \"sum\", \"mean\" or \"max\", got \"", o.mode(), "\"");
  std::optional<int64_t> pad = o.padding_idx();
  weight = detail::register_embedding_table(*this, "EmbeddingBag", o.num_embeddings(), o.embedding_dim(), pad);
  options.padding_idx(pad);
}

void EmbeddingBagImpl::reset_parameters() { detail::reset_embedding_table(weight, options.padding_idx()); }

Tensor EmbeddingBagImpl::forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights) {
  return functional::embedding_bag(input, weight,
                                   functional::EmbeddingBagFuncOptions()
                                       .offsets(offsets)
                                       .max_norm(options.max_norm())
                                       .norm_type(options.norm_type())
                                       .mode(options.mode())
                                       .per_sample_weights(per_sample_weights)
                                       .include_last_offset(options.include_last_offset())
                                       .padding_idx(options.padding_idx()));
}

void EmbeddingBagImpl::pretty_print(std::ostream& os) const {
  os << "EmbeddingBag(" << options.num_embeddings() << ", " << options.embedding_dim() << ", mode=" << options.mode();
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  os << ")";
}

}  // namespace mpx::nn
