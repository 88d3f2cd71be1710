// LibTorch's Tensor::index / index_put_ with torch::indexing's Slice, None, Ellipsis, index tensors and masks, against
// values worked out by hand (PyTorch's results for the same expressions), and weight tying with replace_parameter.
#include <catch2/catch.hpp>

#include <cstdint>
#include <type_traits>
#include <vector>

#include <mpx/mpx.h>

#include "gradcheck.h"

using namespace mpx;
using namespace mpx::indexing;

namespace {
Tensor i64(std::vector<int64_t> v, IntList shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return tensor(v, shape);
}
std::vector<float> values(const Tensor& t) {
  const Tensor c = t.contiguous().to(kFloat32);
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}
}  // namespace

TEST_CASE("index with integers, slices, None and Ellipsis gives views", "[index][indexing]") {
  const Tensor x = arange(24.0).view({2, 3, 4});
  CHECK(equal(x.index({Slice(), 0}), x.select(1, 0)));
  CHECK(equal(x.index({"...", 1}), x.select(2, 1)));
  CHECK(equal(x.index({Ellipsis, -1}), x.select(2, 3)));
  CHECK(equal(x.index({1, Slice(None, 2)}), x[1].slice(0, 0, 2)));
  CHECK(values(x.index({0, 1, Slice(1, None, 2)})) == std::vector<float>{5, 7});
  CHECK(x.index({None}).sizes() == IntList{1, 2, 3, 4});
  CHECK(x.index({Slice(), None, 0}).sizes() == IntList{2, 1, 4});
  CHECK(x.index({true}).sizes() == IntList{1, 2, 3, 4});
  CHECK(x.index({false}).sizes() == IntList{0, 2, 3, 4});
  CHECK(x.index({1, 2, 3}).item<float>() == 23.0f);
  CHECK(x.index({}).is_same(x));
  // A view: writes through it reach x.
  Tensor y = x.clone();
  y.index({Slice(), 0}).fill_(-1);
  CHECK(y[1][0][2].item<float>() == -1.0f);
  CHECK(y[1][1][2].item<float>() == 18.0f);
}

TEST_CASE("index with index tensors and masks follows PyTorch's advanced indexing", "[index][indexing]") {
  const Tensor x = arange(24.0).view({2, 3, 4});
  // x[:, [2, 0]] -> [2, 2, 4]
  const Tensor a = x.index({Slice(), i64({2, 0})});
  CHECK(a.sizes() == IntList{2, 2, 4});
  CHECK(values(a[0][0]) == std::vector<float>{8, 9, 10, 11});
  CHECK(values(a[1][1]) == std::vector<float>{12, 13, 14, 15});
  // x[[1, 0], [2, -1]] -> rows (1, 2) and (0, 2): [2, 4]
  const Tensor b = x.index({i64({1, 0}), i64({2, -1})});
  CHECK(b.sizes() == IntList{2, 4});
  CHECK(values(b.select(1, 0)) == std::vector<float>{20, 8});
  // Broadcast index tensors: x[0, [[0], [2]], [1, 3]] -> [2, 2]
  const Tensor c = x.index({0, i64({0, 2}, {2, 1}), i64({1, 3})});
  CHECK(c.sizes() == IntList{2, 2});
  CHECK(values(c) == std::vector<float>{1, 3, 9, 11});
  // Index tensors on dims 0 and 2 (not adjacent): their dims go first, x[[0, 1], :, [3, 0]] -> [2, 3]
  const Tensor d = x.index({i64({0, 1}), Slice(), i64({3, 0})});
  CHECK(d.sizes() == IntList{2, 3});
  CHECK(values(d) == std::vector<float>{3, 7, 11, 12, 16, 20});
  // Adjacent after a slice: x[:, [0, 1], [1, 2]] -> [2, 2]
  const Tensor e = x.index({Slice(), i64({0, 1}), i64({1, 2})});
  CHECK(values(e) == std::vector<float>{1, 6, 13, 18});
  // A 2-d index: x[1, :, [[0, 1], [2, 3]]] -> [3, 2, 2]
  CHECK(x.index({1, Slice(), i64({0, 1, 2, 3}, {2, 2})}).sizes() == IntList{3, 2, 2});
  // Masks: a full mask flattens, a mask over leading dims keeps the rest.
  const Tensor m = gt(x, 20.0);
  CHECK(values(x.index({m})) == std::vector<float>{21, 22, 23});
  const Tensor rows = tensor(std::vector<bool>{false, true, true}, {3});
  CHECK(x.index({Slice(), rows}).sizes() == IntList{2, 2, 4});
  CHECK(values(x.index({0, rows, 0})) == std::vector<float>{4, 8});
  CHECK(x.index({gt(x, 100.0)}).numel() == 0);
  CHECK(x.index({i64({1}).to(kInt32)}).sizes() == IntList{1, 3, 4});
}

TEST_CASE("index treats 0-dim integer tensors as integers and bools as index tensors beside others",
          "[index][indexing]") {
  static_assert(!std::is_constructible_v<TensorIndex, double>, "a double must not become a bool index");
  const Tensor x = arange(24.0).view({2, 3, 4});
  // x[t0, :, [0, 2]] with t0 = 1: the integer selects first, so the index tensor's dim is alone -> [3, 2].
  const Tensor a = x.index({scalar_tensor(1, kInt64), Slice(), i64({0, 2})});
  CHECK(a.sizes() == IntList{3, 2});
  CHECK(values(a.select(0, 1)) == std::vector<float>{16, 18});
  CHECK(x.index({scalar_tensor(1, kInt64)}).sizes() == IntList{3, 4});
  // x[True, [0, 1]]: the new axis indexes with [0], broadcast with [0, 1] -> [2, 3, 4].
  CHECK(equal(x.index({true, i64({0, 1})}), x));
  CHECK_THROWS_WITH(x.index({false, i64({0, 1})}), Catch::Contains("cannot be broadcast"));
  CHECK(x.index({tensor(std::vector<bool>{true}).reshape({}), 1}).sizes() == IntList{1, 3, 4});
  // A value with leading size-1 dims drops them (x[0] = row of shape [1, 4]).
  Tensor y = zeros({2, 4});
  y.index_put_({0}, ones({1, 4}));
  y.index_put_({i64({1})}, full({1, 1, 4}, 2.0));
  CHECK(values(y) == std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2});
}

TEST_CASE("index is differentiable, repeated indices accumulate", "[index][indexing][autograd]") {
  Tensor w = arange(6.0).view({2, 3}).requires_grad_();
  Tensor y = w.index({Slice(), i64({0, 0, 2})});
  y.sum().backward();
  CHECK(values(w.grad()) == std::vector<float>{2, 0, 1, 2, 0, 1});
  Tensor v = arange(6.0).view({2, 3}).requires_grad_();
  (v.index({gt(v, 2.0)}) * 2.0).sum().backward();
  CHECK(values(v.grad()) == std::vector<float>{0, 0, 0, 2, 2, 2});
}

TEST_CASE("index and index_put_ pass f64 gradchecks through every index kind", "[index][indexing][autograd]") {
  const Tensor x = randn({3, 4, 5}, TensorOptions(kFloat64).requires_grad(true));
  const Tensor rows = i64({2, 0, 2}), cols = i64({4, 1, 1});
  const Tensor mask = gt(randn({3, 4}, kFloat64), 0.0);
  CHECK(testing::gradcheck([&](const tensor_list& in) { return in[0].index({Slice(1, None), None, "...", 3}); },
                           {x}) == "");
  CHECK(testing::gradcheck([&](const tensor_list& in) { return in[0].index({rows, Slice(), cols}); }, {x}) == "");
  CHECK(testing::gradcheck([&](const tensor_list& in) { return in[0].index({mask}); }, {x}) == "");
  const Tensor val = randn({3, 4}, TensorOptions(kFloat64).requires_grad(true));
  CHECK(testing::gradcheck(
            [&](const tensor_list& in) {
              Tensor y = in[0] * 1.0;  // a non-leaf to write into
              y.index_put_({rows.slice(0, 0, 2), Slice(), cols.slice(0, 0, 2)}, in[1].select(0, 0));
              return y;
            },
            {x, val}) == "");
}

TEST_CASE("index_put_ writes scalars and broadcast tensors through every index kind", "[index][indexing]") {
  Tensor x = zeros({2, 3});
  x.index_put_({Slice(), 1}, 5.0);
  CHECK(values(x) == std::vector<float>{0, 5, 0, 0, 5, 0});
  x.index_put_({0}, tensor(std::vector<float>{1, 2, 3}));
  CHECK(values(x[0]) == std::vector<float>{1, 2, 3});
  x.index_put_({gt(x, 2.0)}, -1.0);
  CHECK(values(x) == std::vector<float>{1, 2, -1, 0, -1, 0});
  x.index_put_({i64({1, 0}), i64({0, 2})}, tensor(std::vector<float>{7, 8}));
  CHECK(values(x) == std::vector<float>{1, 2, 8, 7, -1, 0});
  // A non-contiguous tensor is written where its elements are.
  Tensor t = zeros({3, 2}).t();
  t.index_put_({Slice(), i64({2})}, 4.0);
  CHECK(values(t) == std::vector<float>{0, 0, 4, 0, 0, 4});
  // Through autograd: the overwritten elements get no gradient, the value gets theirs.
  Tensor base = ones({4}).requires_grad_();
  Tensor val = full({}, 3.0).requires_grad_();
  Tensor h = base * 2.0;
  h.index_put_({i64({1, 3})}, val);
  h.sum().backward();
  CHECK(values(base.grad()) == std::vector<float>{2, 0, 2, 0});
  CHECK(val.grad().item<float>() == 2.0f);
}

TEST_CASE("index refuses bad index lists with a message naming them", "[index][indexing][checks]") {
  const Tensor x = arange(6.0).view({2, 3});
  CHECK_THROWS_WITH(x.index({0, 0, 0}), Catch::Contains("too many indices"));
  CHECK_THROWS_WITH(x.index({"...", 0, "..."}), Catch::Contains("at most one Ellipsis"));
  CHECK_THROWS_WITH(x.index({"::"}), Catch::Contains("\"...\""));
  CHECK_THROWS_WITH(x.index({Slice(), i64({3})}), Catch::Contains("out of bounds for dim 1 with size 3"));
  CHECK_THROWS_WITH(x.index({i64({-3})}), Catch::Contains("out of bounds"));
  CHECK_THROWS_WITH(x.index({ones({2})}), Catch::Contains("integers"));
  CHECK_THROWS_WITH(x.index({tensor(std::vector<bool>{true, false})}).index({Slice(), tensor(std::vector<bool>{true})}),
                    Catch::Contains("does not match"));
  CHECK_THROWS_WITH(x.index({Slice(None, None, -1)}), Catch::Contains("step must be positive"));
  CHECK_THROWS_WITH(x.index({5}), Catch::Contains("out of range"));
  Tensor y = zeros({2, 3});
  CHECK_THROWS_WITH(y.index_put_({i64({0, 1})}, ones({4})), Catch::Contains("cannot be broadcast"));
  CHECK_THROWS_WITH(y.index_put_({i64({0, 1})}, ones({2, 2, 3})), Catch::Contains("does not broadcast"));
}

TEST_CASE("replace_parameter ties weights as PyTorch's attribute assignment does", "[nn][module]") {
  struct TiedImpl : nn::Module {
    nn::Embedding emb{nullptr};
    nn::Linear head{nullptr};
    TiedImpl() {
      emb = register_module("emb", nn::Embedding(10, 4));
      head = register_module("head", nn::Linear(4, 10));
      head->weight = head->replace_parameter("weight", emb->weight);
    }
    Tensor forward(const Tensor& idx) { return head(emb(idx)); }
  };
  auto m = std::make_shared<TiedImpl>();
  CHECK(m->parameters().size() == 2);  // the shared weight once, the head's bias
  CHECK(m->named_parameters().size() == 2);
  const auto sd = m->state_dict();
  CHECK(sd.contains("emb.weight"));
  CHECK(sd.contains("head.weight"));
  CHECK(m->head->weight.is_same(m->emb->weight));
  m->forward(i64({1, 2})).sum().backward();
  // One gradient with both uses' shares: the head's (every row: the summed inputs) and the embedding's rows 1, 2.
  const Tensor g = m->emb->weight.grad();
  REQUIRE(g.defined());
  const Tensor e = m->emb->weight.detach();
  CHECK(allclose(g[0], e[1] + e[2]));
  CHECK(allclose(g[1], e[1] + e[2] + m->head->weight.detach().sum(0)));
  CHECK_THROWS_WITH(m->head->replace_parameter("nope", m->emb->weight), Catch::Contains("has no parameter 'nope'"));
  CHECK_THROWS_WITH(m->head->replace_parameter("weight", m->emb->weight * 2.0), Catch::Contains("leaf"));
}
