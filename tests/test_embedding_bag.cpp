// EmbeddingBag against f64 loops: 2-d bags and offsets (an empty bag, include_last_offset), sum/mean/max,
// padding_idx, per_sample_weights, gradients and errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <mpx/mpx.h>

#include "gradcheck.h"
#include "test_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {
// The bags of `idx` split at `start` (each to the next start, the last to the end) reduced by `mode` in f64.
std::vector<double> reference(const Tensor& weight, const std::vector<int64_t>& idx, const std::vector<int64_t>& start,
                              const std::string& mode, int64_t pad = -1, const std::vector<double>& psw = {}) {
  const Tensor w = weight.to(kFloat64).contiguous();
  const int64_t D = w.size(1), B = static_cast<int64_t>(start.size()), N = static_cast<int64_t>(idx.size());
  std::vector<double> out(static_cast<size_t>(B * D), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t end = b + 1 < B ? start[static_cast<size_t>(b + 1)] : N;
    int64_t count = 0;
    for (int64_t d = 0; d < D; ++d) {
      double acc = mode == "max" ? -std::numeric_limits<double>::infinity() : 0.0;
      count = 0;
      for (int64_t j = start[static_cast<size_t>(b)]; j < end; ++j) {
        const int64_t i = idx[static_cast<size_t>(j)];
        if (i == pad) continue;
        const double v = w.data_ptr<double>()[i * D + d] * (psw.empty() ? 1.0 : psw[static_cast<size_t>(j)]);
        acc = mode == "max" ? std::max(acc, v) : acc + v;
        ++count;
      }
      if (count == 0) acc = 0.0;
      if (mode == "mean" && count > 0) acc /= static_cast<double>(count);
      out[static_cast<size_t>(b * D + d)] = acc;
    }
  }
  return out;
}
Tensor i64(const std::vector<int64_t>& v) { return tensor(v, {static_cast<int64_t>(v.size())}); }
Tensor as_tensor(const std::vector<double>& v, int64_t D) { return tensor(v, {static_cast<int64_t>(v.size()) / D, D}); }
}  // namespace

TEST_CASE("embedding_bag: 2-d bags and offsets in every mode equal f64 loops", "[index][nn]") {
  manual_seed(3);
  const Tensor w = randn({7, 4}, TensorOptions(kFloat64));
  const std::vector<int64_t> idx = {1, 2, 4, 5, 4, 3, 2, 6, 0};
  for (const std::string mode : {"sum", "mean", "max"}) {
    INFO(mode);
    // Three bags of three as rows.
    const Tensor rows = F::embedding_bag(i64(idx).reshape({3, 3}), w, F::EmbeddingBagFuncOptions().mode(mode));
    CHECK(testing::max_abs_diff(rows, as_tensor(reference(w, idx, {0, 3, 6}, mode), 4)) < 1e-14);
    // Offsets with an empty bag (the second) and a last bag to the end; then the same with include_last_offset.
    const std::vector<int64_t> start = {0, 2, 2, 5};
    const Tensor got = F::embedding_bag(i64(idx), w, F::EmbeddingBagFuncOptions().mode(mode).offsets(i64(start)));
    CHECK(got.sizes() == IntList{4, 4});
    CHECK(testing::max_abs_diff(got, as_tensor(reference(w, idx, start, mode), 4)) < 1e-14);
    const Tensor last = F::embedding_bag(
        i64(idx), w, F::EmbeddingBagFuncOptions().mode(mode).offsets(i64({0, 2, 2, 5, 9})).include_last_offset(true));
    CHECK(testing::same_values(last, got));
    // padding_idx 4 takes no part, nor counts in a mean.
    const Tensor padded =
        F::embedding_bag(i64(idx), w, F::EmbeddingBagFuncOptions().mode(mode).offsets(i64(start)).padding_idx(4));
    CHECK(testing::max_abs_diff(padded, as_tensor(reference(w, idx, start, mode, 4), 4)) < 1e-14);
  }
  const std::vector<double> psw = {0.5, 2.0, -1.0, 1.0, 3.0, 0.25, 1.5, -2.0, 1.0};
  const Tensor weighted = F::embedding_bag(
      i64(idx), w,
      F::EmbeddingBagFuncOptions().mode("sum").offsets(i64({0, 4})).per_sample_weights(tensor(psw, {9})));
  CHECK(testing::max_abs_diff(weighted, as_tensor(reference(w, idx, {0, 4}, "sum", -1, psw), 4)) < 1e-14);
}

TEST_CASE("embedding_bag: gradients (f64 gradcheck), nn::EmbeddingBag, and clear errors", "[index][nn]") {
  const Tensor idx = i64({1, 2, 4, 1, 0, 3});
  const Tensor off = i64({0, 2, 3});
  for (const std::string mode : {"sum", "mean", "max"}) {
    INFO(mode);
    CHECK(testing::gradcheck([&](const tensor_list& t) {
            return F::embedding_bag(idx, t[0], F::EmbeddingBagFuncOptions().mode(mode).offsets(off).padding_idx(0));
          }, {testing::leaf({5, 3})}) == "");
  }
  CHECK(testing::gradcheck([&](const tensor_list& t) {
          return F::embedding_bag(idx, t[0], F::EmbeddingBagFuncOptions().mode("sum").offsets(off).per_sample_weights(t[1]));
        }, {testing::leaf({5, 3}), testing::leaf({6})}) == "");

  manual_seed(2);
  nn::EmbeddingBag bag(nn::EmbeddingBagOptions(10, 3).mode("sum").padding_idx(-1));
  CHECK(bag->options.padding_idx().value() == 9);
  CHECK(max(abs(bag->weight.select(0, 9))).item<double>() == 0.0);
  CHECK(bag->named_parameters().contains("weight"));
  std::ostringstream os;
  bag->pretty_print(os);
  CHECK(os.str() == "EmbeddingBag(10, 3, mode=sum, padding_idx=9)");
  const Tensor y = bag(i64({1, 9, 2}), i64({0, 1}));
  CHECK(y.sizes() == IntList{2, 3});
  sum(y).backward();
  CHECK(max(abs(bag->weight.grad().select(0, 9))).item<double>() == 0.0);

  const Tensor w = randn({5, 3});
  CHECK_THROWS_WITH(F::embedding_bag(idx, w, F::EmbeddingBagFuncOptions().mode("median").offsets(off)),
                    Catch::Contains("mode must be"));
  CHECK_THROWS_WITH(F::embedding_bag(idx, w, F::EmbeddingBagFuncOptions().offsets(off).per_sample_weights(ones({6}))),
                    Catch::Contains("mode \"sum\" only"));
  CHECK_THROWS_WITH(F::embedding_bag(idx, w, F::EmbeddingBagFuncOptions().offsets(i64({1, 3}))),
                    Catch::Contains("offsets must start at 0"));
  CHECK_THROWS_WITH(F::embedding_bag(idx, w, F::EmbeddingBagFuncOptions().offsets(i64({0, 4, 2}))),
                    Catch::Contains("offset 2 is 2"));
  CHECK_THROWS_WITH(F::embedding_bag(idx, w), Catch::Contains("needs 1-d offsets"));
  CHECK_THROWS_WITH(F::embedding_bag(idx.reshape({2, 3}), w, F::EmbeddingBagFuncOptions().offsets(off)),
                    Catch::Contains("2-d input holds its bags as rows"));
  CHECK_THROWS_WITH(F::embedding_bag(i64({0, 7}), w, F::EmbeddingBagFuncOptions().offsets(i64({0}))),
                    Catch::Contains("7"));
}
