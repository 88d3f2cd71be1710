// Tests for the regression, likelihood, margin and embedding losses of ops/loss.h, ops/margin_loss.h and nn/losses.h:
// PyTorch 2.15's values and gradients (tests/golden/loss_more.safetensors), modules, autocast and errors.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <string>

#include "amp/autocast.h"
#include "core/serialize.h"
#include "gradcheck.h"
#include "nn/nn.h"
#include "test_util.h"

using namespace mpx;
namespace F = mpx::nn::functional;

namespace {

const TensorDict& golden() {
  static const TensorDict g = load_tensors(mpx::testing::test_data_dir() + "/golden/loss_more.safetensors");
  return g;
}

using Inputs = std::map<std::string, Tensor>;
using LossFn = std::function<Tensor(const Inputs&, Reduction)>;

// Each golden case as mpx computes it (options as gen_golden.py's gen_loss_more recorded).
const std::map<std::string, LossFn>& cases() {
  static const std::map<std::string, LossFn> c = {
      {"huber", [](const Inputs& i, Reduction r) { return huber_loss(i.at("input"), i.at("target"), r, 0.7); }},
      {"poisson_log",
       [](const Inputs& i, Reduction r) { return poisson_nll_loss(i.at("input"), i.at("target"), true, true, 1e-8, r); }},
      {"poisson_rate",
       [](const Inputs& i, Reduction r) { return poisson_nll_loss(i.at("input"), i.at("target"), false, false, 1e-8, r); }},
      {"gaussian",
       [](const Inputs& i, Reduction r) { return gaussian_nll_loss(i.at("input"), i.at("target"), i.at("var"), true, 1e-3, r); }},
      {"gaussian_row",
       [](const Inputs& i, Reduction r) { return gaussian_nll_loss(i.at("input"), i.at("target"), i.at("var"), false, 1e-6, r); }},
      {"soft_margin", [](const Inputs& i, Reduction r) { return soft_margin_loss(i.at("input"), i.at("target"), r); }},
      {"multilabel_soft_margin",
       [](const Inputs& i, Reduction r) { return multilabel_soft_margin_loss(i.at("input"), i.at("target"), i.at("weight"), r); }},
      {"multi_margin",
       [](const Inputs& i, Reduction r) { return multi_margin_loss(i.at("input"), i.at("target"), 1, 0.8, {}, r); }},
      {"multi_margin_p2",
       [](const Inputs& i, Reduction r) { return multi_margin_loss(i.at("input"), i.at("target"), 2, 1.2, i.at("weight"), r); }},
      {"margin_ranking",
       [](const Inputs& i, Reduction r) { return margin_ranking_loss(i.at("input1"), i.at("input2"), i.at("target"), 0.3, r); }},
      {"hinge_embedding",
       [](const Inputs& i, Reduction r) { return hinge_embedding_loss(i.at("input"), i.at("target"), 1.5, r); }},
      {"cosine_embedding",
       [](const Inputs& i, Reduction r) { return cosine_embedding_loss(i.at("input1"), i.at("input2"), i.at("target"), 0.2, r); }},
      {"triplet",
       [](const Inputs& i, Reduction r) {
         return triplet_margin_loss(i.at("anchor"), i.at("positive"), i.at("negative"), 1.5, 2.0, 1e-6, false, r);
       }},
      {"triplet_swap_p1",
       [](const Inputs& i, Reduction r) {
         return triplet_margin_loss(i.at("anchor"), i.at("positive"), i.at("negative"), 2.0, 1.0, 1e-6, true, r);
       }},
  };
  return c;
}

}  // namespace

TEST_CASE("losses match PyTorch's values and gradients (huber, poisson/gaussian NLL, margin and embedding losses)",
          "[loss][golden]") {
  const TensorDict& g = golden();
  for (const auto& [name, fn] : cases()) {
    INFO(name);
    Inputs in;
    for (const auto& [k, v] : g)
      if (k.rfind(name + ".", 0) == 0) {
        const std::string field = k.substr(name.size() + 1);
        if (field == "none" || field == "mean" || field == "sum" || field.rfind("grad_", 0) == 0) continue;
        Tensor t = v.clone();
        if (field != "target" && field != "weight") t.set_requires_grad(true);
        in[field] = t;
      }
    REQUIRE_FALSE(in.empty());
    CHECK(testing::max_abs_diff(fn(in, Reduction::None), g.at(name + ".none")) < 1e-12);
    CHECK(testing::max_abs_diff(fn(in, Reduction::Sum), g.at(name + ".sum")) < 1e-12);
    const Tensor loss = fn(in, Reduction::Mean);
    CHECK(testing::max_abs_diff(loss, g.at(name + ".mean")) < 1e-12);
    loss.backward();
    for (const auto& [field, t] : in) {
      if (!t.requires_grad()) continue;
      INFO("gradient of " << field);
      REQUIRE(t.grad().defined());
      // Relative to the largest entry: a variance clamped to eps has gradients near 1 / eps.
      const Tensor& want = g.at(name + ".grad_" + field);
      CHECK(testing::max_abs_diff(t.grad(), want) < 1e-12 * (1.0 + max(abs(want)).item<double>()));
    }
  }
}

TEST_CASE("the new loss modules and F:: forms, f32 under autocast, second derivatives", "[loss]") {
  const TensorDict& g = golden();
  nn::HuberLoss huber(nn::HuberLossOptions().delta(0.7));
  CHECK(testing::max_abs_diff(huber(g.at("huber.input"), g.at("huber.target")), g.at("huber.mean")) < 1e-12);
  CHECK(testing::max_abs_diff(F::huber_loss(g.at("huber.input"), g.at("huber.target"), nn::HuberLossFuncOptions(nn::kSum).delta(0.7)),
                              g.at("huber.sum")) < 1e-12);
  nn::TripletMarginLoss triplet(nn::TripletMarginLossOptions().margin(2.0).p(1.0).swap(true));
  CHECK(testing::max_abs_diff(triplet(g.at("triplet_swap_p1.anchor"), g.at("triplet_swap_p1.positive"),
                                      g.at("triplet_swap_p1.negative")),
                              g.at("triplet_swap_p1.mean")) < 1e-12);
  nn::GaussianNLLLoss gauss(nn::GaussianNLLLossOptions().full(true).eps(1e-3));
  CHECK(testing::max_abs_diff(gauss(g.at("gaussian.input"), g.at("gaussian.target"), g.at("gaussian.var")),
                              g.at("gaussian.mean")) < 1e-12);
  nn::CosineEmbeddingLoss cosine(nn::CosineEmbeddingLossOptions("none").margin(0.2));
  CHECK(testing::max_abs_diff(cosine(g.at("cosine_embedding.input1"), g.at("cosine_embedding.input2"),
                                     g.at("cosine_embedding.target")),
                              g.at("cosine_embedding.none")) < 1e-12);
  nn::PairwiseDistance dist(nn::PairwiseDistanceOptions().keepdim(true));
  const Tensor a = g.at("triplet.anchor"), p = g.at("triplet.positive");
  CHECK(dist(a, p).sizes() == IntList{5, 1});
  CHECK(testing::max_abs_diff(dist(a, p).reshape({5}), sqrt(sum((a - p + 1e-6) * (a - p + 1e-6), {1}))) < 1e-12);
  CHECK(nn::MultiMarginLoss()->name() == "MultiMarginLoss");
  // Under autocast the losses compute in f32, as PyTorch's fp32 list has them.
  {
    amp::AutocastGuard ac(kBFloat16);
    CHECK(F::soft_margin_loss(g.at("soft_margin.input").to(kBFloat16), g.at("soft_margin.target").to(kBFloat16)).dtype() ==
          kFloat32);
    CHECK(F::margin_ranking_loss(g.at("margin_ranking.input1").to(kBFloat16), g.at("margin_ranking.input2").to(kBFloat16),
                                 g.at("margin_ranking.target").to(kBFloat16))
              .dtype() == kFloat32);
  }
  CHECK(testing::gradgradcheck([](const tensor_list& t) { return huber_loss(t[0], t[1], Reduction::Mean, 0.5); },
                               {testing::leaf({3, 4}), testing::leaf({3, 4})}) == "");
  CHECK(testing::gradgradcheck(
            [](const tensor_list& t) { return triplet_margin_loss(t[0], t[1], t[2], 3.0); },
            {testing::leaf({3, 4}), testing::leaf({3, 4}), testing::leaf({3, 4})}) == "");
}

TEST_CASE("the new losses name what is wrong with their inputs", "[loss]") {
  const Tensor x = ones({4, 5}, kFloat64), y = ones({4, 5}, kFloat64);
  CHECK_THROWS_WITH(huber_loss(x, ones({4, 4}, kFloat64)), Catch::Contains("same shape"));
  CHECK_THROWS_WITH(huber_loss(x, y, Reduction::Mean, 0.0), Catch::Contains("delta must be positive"));
  CHECK_THROWS_WITH(gaussian_nll_loss(x, y, -ones({4, 5}, kFloat64)), Catch::Contains("negative entries"));
  CHECK_THROWS_WITH(gaussian_nll_loss(x, y, ones({3}, kFloat64)), Catch::Contains("var") && Catch::Contains("shape"));
  CHECK_THROWS_WITH(multi_margin_loss(x, tensor<int64_t>({0, 1, 5, 2})), Catch::Contains("outside [0, 5)"));
  CHECK_THROWS_WITH(multi_margin_loss(x, tensor<int64_t>({0, 1, 2, 3}), 3), Catch::Contains("p must be 1 or 2"));
  CHECK_THROWS_WITH(multi_margin_loss(x, ones({4}, kFloat64)), Catch::Contains("one i64 class per row"));
  CHECK_THROWS_WITH(cosine_embedding_loss(x, y, ones({3}, kFloat64)), Catch::Contains("one label per row"));
  CHECK_THROWS_WITH(triplet_margin_loss(x, y, ones({5}, kFloat64)), Catch::Contains("all be [N, D]"));
  CHECK_THROWS_WITH(multilabel_soft_margin_loss(x, y, ones({4}, kFloat64)), Catch::Contains("one per class"));
  CHECK_THROWS_WITH(soft_margin_loss(tensor<int64_t>({1, 2}), tensor<int64_t>({1, -1})), Catch::Contains("floating"));
  CHECK_THROWS_WITH(pairwise_distance(x, y, 0.5), Catch::Contains("p must be at least 1"));
}
