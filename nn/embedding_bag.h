// EmbeddingBag: bags of embedding rows summed, averaged or maxed without the [bags, length, dim] tensor in between
// (PyTorch's nn.EmbeddingBag and F.embedding_bag).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/arg.h"
#include "core/tensor.h"
#include "nn/module.h"

namespace mpx::nn {

/// Options of nn::EmbeddingBag and F::embedding_bag (LibTorch's names).
struct EmbeddingBagOptions {
  EmbeddingBagOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  MPX_ARG(int64_t, num_embeddings);
  MPX_ARG(int64_t, embedding_dim);
  /// Rows looked up with a norm above max_norm are renormalized in place first.
  MPX_ARG(std::optional<double>, max_norm) = std::nullopt;
  MPX_ARG(double, norm_type) = 2.0;
  /// "sum", "mean" or "max".
  MPX_ARG(std::string, mode) = "mean";
  /// offsets has one more entry, the end of the last bag.
  MPX_ARG(bool, include_last_offset) = false;
  /// Entries with this index take no part (nor count in a mean) and its row gets no gradient.
  MPX_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};

namespace functional {
/// Options of F::embedding_bag: EmbeddingBagOptions' behaviour flags plus the call's tensors.
struct EmbeddingBagFuncOptions {
  MPX_ARG(Tensor, offsets) = {};
  MPX_ARG(std::optional<double>, max_norm) = std::nullopt;
  MPX_ARG(double, norm_type) = 2.0;
  MPX_ARG(std::string, mode) = "mean";
  /// Per-entry weights of input's shape; mode "sum" only.
  MPX_ARG(Tensor, per_sample_weights) = {};
  MPX_ARG(bool, include_last_offset) = false;
  MPX_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};
/// input i64/i32 [B, L] (B bags of L entries; no offsets) or [N] with offsets [B] (bag b = input[offsets[b] ...
/// offsets[b+1]), the last to the end; offsets[0] must be 0 and they must not decrease) -> [B, dim] in weight's
/// dtype: each bag's rows summed (weighted by per_sample_weights), averaged over the entries that are not
/// padding_idx, or their elementwise max. An empty bag gives zeros. Differentiable in weight and
/// per_sample_weights; the offsets are read on the host.
Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagFuncOptions& options = {});
}  // namespace functional

/// A bag-of-embeddings layer: weight [num_embeddings, dim], N(0, 1) init (the padding row zero).
class EmbeddingBagImpl : public Module {
 public:
  explicit EmbeddingBagImpl(const EmbeddingBagOptions& options);
  EmbeddingBagImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingBagImpl(EmbeddingBagOptions(num_embeddings, embedding_dim)) {}
  void reset_parameters();
  /// F::embedding_bag with this module's options.
  Tensor forward(const Tensor& input, const Tensor& offsets = {}, const Tensor& per_sample_weights = {});
  std::string name() const override { return "EmbeddingBag"; }
  void pretty_print(std::ostream& os) const override;

  EmbeddingBagOptions options;
  Tensor weight;
};
MPX_MODULE(EmbeddingBag);

}  // namespace mpx::nn
