// pack_padded_sequence, pad_packed_sequence, pad_sequence and pack_sequence: the step-major packing of variable-length
// batches.
#include "nn/packed_sequence.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "ops/index.h"
#include "ops/op_utils.h"
#include "ops/shape.h"

namespace mpx::nn::utils::rnn {

PackedSequence::PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices, Tensor unsorted_indices)
    : data_(std::move(data)), batch_sizes_(std::move(batch_sizes)), sorted_indices_(std::move(sorted_indices)),
      unsorted_indices_(std::move(unsorted_indices)) {
  MPX_CHECK(batch_sizes_.defined() && batch_sizes_.dim() == 1 && batch_sizes_.dtype() == kInt64 &&
                batch_sizes_.device().is_cpu(),
            "PackedSequence: batch_sizes must be i64 [steps] on the CPU, got ", ops::describe(batch_sizes_));
}

std::vector<int64_t> PackedSequence::batch_size_vector() const {
  const Tensor b = batch_sizes_.contiguous();
  return std::vector<int64_t>(b.data_ptr<int64_t>(), b.data_ptr<int64_t>() + b.numel());
}

PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first, bool enforce_sorted) {
  MPX_CHECK(input.defined() && input.dim() >= 2, "pack_padded_sequence: input must be [T, N, *] ([N, T, *] with ",
            "batch_first), got ", ops::describe(input));
  const Tensor x = batch_first ? input.transpose(0, 1) : input;  // [T, N, *]
  const int64_t T = x.size(0), N = x.size(1);
  MPX_CHECK(lengths.defined() && lengths.dim() == 1 && lengths.size(0) == N &&
                (lengths.dtype() == kInt64 || lengths.dtype() == kInt32),
            "pack_padded_sequence: lengths must be i64 (or i32) [", N, "], one per sequence of input ",
            ops::describe(input), ", got ", ops::describe(lengths));
  const Tensor lc = lengths.to(Device::cpu(), kInt64).contiguous();
  std::vector<int64_t> len(lc.data_ptr<int64_t>(), lc.data_ptr<int64_t>() + N);
  for (int64_t n = 0; n < N; ++n)
    MPX_CHECK(len[static_cast<size_t>(n)] >= 1 && len[static_cast<size_t>(n)] <= T, "pack_padded_sequence: ",
              "sequence ", n, " has length ", len[static_cast<size_t>(n)], "; lengths must be in [1, ", T,
              "] (the input's ", batch_first ? "dim 1" : "dim 0", "); ",
              len[static_cast<size_t>(n)] < 1 ? "drop empty sequences first"
                                               : "a length cannot pass the padded input's time steps");
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  Tensor sorted = x, sorted_idx, unsorted_idx;
  if (enforce_sorted) {
    for (int64_t n = 1; n < N; ++n)
      MPX_CHECK(len[static_cast<size_t>(n)] <= len[static_cast<size_t>(n - 1)], "pack_padded_sequence: lengths must ",
                "be sorted in decreasing order with enforce_sorted = true (sequence ", n, " has ",
                len[static_cast<size_t>(n)], " steps after ", len[static_cast<size_t>(n - 1)],
                "); sort them or pass enforce_sorted = false");
  } else {
    std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
      return len[static_cast<size_t>(p)] > len[static_cast<size_t>(q)];
    });
    std::vector<int64_t> inverse(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) inverse[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
    sorted_idx = tensor(order, {N}).to(input.device());
    unsorted_idx = tensor(inverse, {N}).to(input.device());
    sorted = index_select(x, 1, sorted_idx);
  }
  const int64_t longest = len[static_cast<size_t>(order[0])];
  std::vector<int64_t> bs(static_cast<size_t>(longest));
  tensor_list rows;
  for (int64_t t = 0; t < longest; ++t) {
    int64_t b = 0;
    while (b < N && len[static_cast<size_t>(order[static_cast<size_t>(b)])] > t) ++b;
    bs[static_cast<size_t>(t)] = b;
    rows.push_back(sorted.select(0, t).narrow(0, 0, b));
  }
  return PackedSequence(cat(rows, 0), tensor(bs, {longest}), sorted_idx, unsorted_idx);
}

std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& seq, bool batch_first, double padding_value,
                                               std::optional<int64_t> total_length) {
  const std::vector<int64_t> bs = seq.batch_size_vector();
  const Tensor& data = seq.data();
  MPX_CHECK(!bs.empty() && data.defined() && data.dim() >= 1, "pad_packed_sequence: the packed sequence is empty");
  const int64_t steps = static_cast<int64_t>(bs.size()), N = bs[0];
  const int64_t T = total_length.value_or(steps);
  MPX_CHECK(T >= steps, "pad_packed_sequence: total_length ", T, " is shorter than the longest sequence (", steps,
            " steps)");
  IntList row_shape(data.sizes().begin() + 1, data.sizes().end());
  auto padding = [&](int64_t rows) {
    IntList shape = {rows};
    shape.insert(shape.end(), row_shape.begin(), row_shape.end());
    return full(shape, padding_value, data.options());
  };
  tensor_list steps_padded;
  int64_t offset = 0;
  for (int64_t t = 0; t < steps; ++t) {
    const int64_t b = bs[static_cast<size_t>(t)];
    const Tensor rows = data.narrow(0, offset, b);
    steps_padded.push_back(b < N ? cat({rows, padding(N - b)}, 0) : rows);
    offset += b;
  }
  for (int64_t t = steps; t < T; ++t) steps_padded.push_back(padding(N));
  Tensor out = stack(steps_padded, 0);  // [T, N, *] in sorted order
  std::vector<int64_t> len(static_cast<size_t>(N), 0);
  for (int64_t b : bs)
    for (int64_t n = 0; n < b; ++n) ++len[static_cast<size_t>(n)];
  Tensor lengths = tensor(len, {N});
  if (seq.unsorted_indices().defined()) {
    out = index_select(out, 1, seq.unsorted_indices());
    lengths = index_select(lengths, 0, seq.unsorted_indices().to(Device::cpu()));
  }
  return {batch_first ? out.transpose(0, 1) : out, lengths};
}

Tensor pad_sequence(const tensor_list& sequences, bool batch_first, double padding_value,
                    const std::string& padding_side) {
  MPX_CHECK(!sequences.empty(), "pad_sequence: no sequences given");
  MPX_CHECK(padding_side == "right" || padding_side == "left", "pad_sequence: padding_side must be \"right\" or ",
            "\"left\", got \"", padding_side, "\"");
  int64_t longest = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    MPX_CHECK(s.defined() && s.dim() >= 1, "pad_sequence: every sequence must be [L, *]; sequence ", i, " is ",
              ops::describe(s));
    const Tensor& first = sequences[0];
    MPX_CHECK(IntList(s.sizes().begin() + 1, s.sizes().end()) == IntList(first.sizes().begin() + 1, first.sizes().end()) &&
                  s.dtype() == first.dtype() && s.device() == first.device(),
              "pad_sequence: sequence ", i, " ", ops::describe(s), " must match sequence 0 ", ops::describe(first),
              " in every dim but the first, in dtype and in device");
    longest = std::max(longest, s.size(0));
  }
  tensor_list padded;
  for (const Tensor& s : sequences) {
    if (s.size(0) == longest) {
      padded.push_back(s);
      continue;
    }
    IntList shape = s.sizes();
    shape[0] = longest - s.size(0);
    const Tensor fill = full(shape, padding_value, s.options());
    padded.push_back(padding_side == "right" ? cat({s, fill}, 0) : cat({fill, s}, 0));
  }
  return stack(padded, batch_first ? 0 : 1);
}

tensor_list unpad_sequence(const Tensor& padded, const Tensor& lengths, bool batch_first) {
  MPX_CHECK(padded.defined() && padded.dim() >= 2, "unpad_sequence: padded must be [T, N, *] ([N, T, *] with ",
            "batch_first), got ", ops::describe(padded));
  const Tensor x = batch_first ? padded : padded.transpose(0, 1);  // [N, T, *]
  MPX_CHECK(lengths.defined() && lengths.dim() == 1 && lengths.size(0) == x.size(0) &&
                (lengths.dtype() == kInt64 || lengths.dtype() == kInt32),
            "unpad_sequence: lengths must be i64 or i32 with one per sequence (", x.size(0), "), got ",
            ops::describe(lengths));
  const Tensor len = lengths.to(Device::cpu()).to(kInt64).contiguous();
  tensor_list out;
  for (int64_t n = 0; n < x.size(0); ++n) {
    const int64_t l = len.data_ptr<int64_t>()[n];
    MPX_CHECK(l >= 0 && l <= x.size(1), "unpad_sequence: length ", l, " of sequence ", n, " is outside [0, ",
              x.size(1), "]");
    out.push_back(x.select(0, n).narrow(0, 0, l));
  }
  return out;
}

PackedSequence pack_sequence(const tensor_list& sequences, bool enforce_sorted) {
  MPX_CHECK(!sequences.empty(), "pack_sequence: no sequences given");
  std::vector<int64_t> len;
  for (const Tensor& s : sequences) {
    MPX_CHECK(s.defined() && s.dim() >= 1, "pack_sequence: every sequence must be [L, *]");
    len.push_back(s.size(0));
  }
  return pack_padded_sequence(pad_sequence(sequences), tensor(len, {static_cast<int64_t>(len.size())}), false,
                              enforce_sorted);
}

tensor_list unpack_sequence(const PackedSequence& packed) {
  auto [padded, lengths] = pad_packed_sequence(packed, true);
  return unpad_sequence(padded, lengths, true);
}

}  // namespace mpx::nn::utils::rnn
