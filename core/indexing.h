// LibTorch's tensor indexing (torch::indexing): the index list Tensor::index and Tensor::index_put_ take.
#pragma once
#include <concepts>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/tensor.h"

namespace mpx::indexing {

/// `...`: as many full slices as the other indices leave dims.
struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis{};
/// A new axis of size 1 (Python's None), and an absent Slice bound.
inline constexpr std::nullopt_t None = std::nullopt;

/// start:stop:step with Python's defaults (0, the end, 1) for absent bounds; negative bounds count from the end.
struct Slice {
  Slice(std::optional<int64_t> start = None, std::optional<int64_t> stop = None,  // NOLINT
        std::optional<int64_t> step = None)
      : start(start), stop(stop), step(step) {}
  std::optional<int64_t> start, stop, step;
};

/// One entry of an index list: None, Ellipsis (or "..."), an integer, true/false, a Slice, or a tensor of
/// integer indices (advanced indexing) or a boolean mask.
class TensorIndex {
 public:
  enum class Kind { None, Ellipsis, Integer, Boolean, Slice, Tensor };
  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}                        // NOLINT
  TensorIndex(EllipsisIndexType) : kind_(Kind::Ellipsis) {}                 // NOLINT
  TensorIndex(const char* s) : kind_(Kind::Ellipsis) {                      // NOLINT: "..."
    MPX_CHECK(s != nullptr && std::string_view(s) == "...", "index: the only string index is \"...\" (Ellipsis), got \"",
              s ? s : "", "\"");
  }
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  TensorIndex(I i) : kind_(Kind::Integer), integer_(static_cast<int64_t>(i)) {}  // NOLINT
  // A template, so that a double or a pointer does not convert to bool here (LibTorch refuses them too).
  template <std::same_as<bool> B>
  TensorIndex(B b) : kind_(Kind::Boolean), boolean_(b) {}                        // NOLINT
  TensorIndex(Slice s) : kind_(Kind::Slice), slice_(s) {}                        // NOLINT
  TensorIndex(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}          // NOLINT

  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  bool boolean() const { return boolean_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  bool boolean_ = false;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace mpx::indexing
