// Packed batches of variable-length sequences for the recurrent modules (PyTorch's torch.nn.utils.rnn).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/tensor.h"

namespace mpx::nn::utils::rnn {

/// A batch of sequences of different lengths, packed step by step (PyTorch's PackedSequence): data holds step
/// t's batch_sizes[t] rows after the earlier steps', the sequences sorted by decreasing length; sorted_indices[i]
/// is the input batch position of sorted sequence i and unsorted_indices its inverse (both undefined when the
/// input was already sorted). nn::LSTM/GRU/RNN::forward_with_packed_input take it.
class PackedSequence {
 public:
  PackedSequence() = default;
  PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices = {}, Tensor unsorted_indices = {});
  const Tensor& data() const { return data_; }
  /// i64 on the CPU, [steps].
  const Tensor& batch_sizes() const { return batch_sizes_; }
  const Tensor& sorted_indices() const { return sorted_indices_; }
  const Tensor& unsorted_indices() const { return unsorted_indices_; }
  /// batch_sizes as a vector, for the ops.
  std::vector<int64_t> batch_size_vector() const;
  /// The same packing with other data (a module's output rows, one per input row).
  PackedSequence with_data(Tensor data) const { return PackedSequence(std::move(data), batch_sizes_, sorted_indices_, unsorted_indices_); }

 private:
  Tensor data_, batch_sizes_, sorted_indices_, unsorted_indices_;
};

/// Packs input [T, N, *] ([N, T, *] with batch_first) whose sequence n has lengths[n] (1 ... T) valid steps
/// (lengths: i64 or i32 [N], on any device). enforce_sorted: lengths must be non-increasing (an error says so
/// otherwise); false sorts them (stably) and records the order. Differentiable in input.
PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);

/// The inverse: (padded [T, N, *] or [N, T, *], lengths i64 [N]) in the input's batch order, positions past a
/// sequence's length filled with padding_value; total_length pads T up to it (not below the longest sequence).
std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                               double padding_value = 0.0,
                                               std::optional<int64_t> total_length = std::nullopt);

/// Stacks a list of [L_i, *] sequences (one trailing shape, dtype and device) into [T, N, *] ([N, T, *] with
/// batch_first), T the longest L_i, the shorter ones filled with padding_value after their end (padding_side
/// "right") or before their start ("left"). PyTorch's pad_sequence; differentiable.
Tensor pad_sequence(const tensor_list& sequences, bool batch_first = false, double padding_value = 0.0,
                    const std::string& padding_side = "right");

/// The inverse of pad_sequence (PyTorch's unpad_sequence): sequence n of padded [T, N, *] ([N, T, *] with
/// batch_first) cut to its lengths[n] steps (lengths i64 or i32 [N], 0 ... T); views, differentiable.
tensor_list unpad_sequence(const Tensor& padded, const Tensor& lengths, bool batch_first = false);

/// Packs a list of [L_i, *] sequences (PyTorch's pack_sequence).
PackedSequence pack_sequence(const tensor_list& sequences, bool enforce_sorted = true);
/// The inverse of pack_sequence (PyTorch's unpack_sequence): the sequences in the input's batch order.
tensor_list unpack_sequence(const PackedSequence& packed);

}  // namespace mpx::nn::utils::rnn
