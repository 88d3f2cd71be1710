// LibTorch's c10d process-group calls on mpx (<mpx/c10d.h>); CTest runs this file as one process and under `mpirun -np 2`.
#include <catch2/catch.hpp>

#include <mpx/c10d.h>

#include "test_util.h"

namespace {
std::shared_ptr<c10d::ProcessGroupMPI> group() {
  static auto pg = c10d::ProcessGroupMPI::createProcessGroupMPI();
  return pg;
}
// Rank r's values: (r + 1) * 10 + i, so every reduction is known in closed form.
torch::Tensor rank_values(int r, torch::Dtype dt = torch::kFloat32) {
  return (torch::arange(4, torch::kFloat32) + (r + 1) * 10.0).to(dt);
}
}  // namespace

TEST_CASE("c10d: ProcessGroupMPI is the job's world", "[distributed][libtorch]") {
  auto pg = group();
  REQUIRE(pg->getSize() == mpx::distributed::world_size());
  REQUIRE(pg->getRank() == mpx::distributed::rank());
  REQUIRE(pg->getBackendName() == "mpi");
  // LibTorch 1.x and 2.x spellings of the work handle and the group pointer.
  std::shared_ptr<c10d::ProcessGroup::Work> w = pg->barrier();
  c10::intrusive_ptr<c10d::Work> same = w;
  REQUIRE(same->isCompleted());
  REQUIRE(same->wait());
  REQUIRE(same->isSuccess());
  // All ranks in order is the whole world; a subgroup is refused.
  std::vector<int> all;
  for (int r = 0; r < pg->getSize(); ++r) all.push_back(r);
  REQUIRE(c10d::ProcessGroupMPI::createProcessGroupMPI(all)->getSize() == pg->getSize());
  REQUIRE_THROWS_WITH(c10d::ProcessGroupMPI::createProcessGroupMPI({pg->getSize()}),
                      Catch::Contains("mpx has no subgroups"));
}

TEST_CASE("c10d: allreduce SUM, AVG, MAX, MIN and PRODUCT in place", "[distributed][libtorch]") {
  auto pg = group();
  const int w = pg->getSize(), r = pg->getRank();
  torch::Tensor sum = torch::zeros({4}), prod = torch::ones({4}), mn = rank_values(0), mx = rank_values(0);
  for (int k = 0; k < w; ++k) {
    sum += rank_values(k);
    prod *= rank_values(k);
    mn = torch::minimum(mn, rank_values(k));
    mx = torch::maximum(mx, rank_values(k));
  }
  const std::pair<c10d::ReduceOp::RedOpType, torch::Tensor> cases[] = {
      {c10d::ReduceOp::SUM, sum}, {c10d::ReduceOp::AVG, sum / w}, {c10d::ReduceOp::MAX, mx},
      {c10d::ReduceOp::MIN, mn}, {c10d::ReduceOp::PRODUCT, prod}};
  for (const auto& [op, expect] : cases) {
    INFO("ReduceOp " << int(op));
    torch::Tensor t = rank_values(r);
    torch::Tensor view = t;  // shares t's storage: the reduction lands in the caller's tensor
    std::vector<torch::Tensor> list = {view};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    auto work = pg->allreduce(list, opts);
    REQUIRE(work->wait());
    REQUIRE(work->isSuccess());
    REQUIRE(work->exception() == nullptr);
    REQUIRE(torch::equal(t, expect));
    REQUIRE(work->result().size() == 1);
    REQUIRE(work->result()[0].is_same(t));
  }
  // MIN gathers rather than negating: exact at an integer's smallest value.
  torch::Tensor i = torch::tensor({std::numeric_limits<int64_t>::min(), int64_t(5) + r});
  std::vector<torch::Tensor> li = {i};
  c10d::AllreduceOptions mo;
  mo.reduceOp = c10d::ReduceOp::MIN;
  pg->allreduce(li, mo)->wait();
  REQUIRE(i[0].item<int64_t>() == std::numeric_limits<int64_t>::min());
  REQUIRE(i[1].item<int64_t>() == 5);
}

TEST_CASE("c10d: several tensors per call, the gradient-averaging loop of LibTorch's example", "[distributed][libtorch]") {
  auto pg = group();
  const int w = pg->getSize(), r = pg->getRank();
  torch::manual_seed(1);  // the same model on every rank
  torch::nn::Linear fc(3, 2);
  auto x = torch::full({4, 3}, 1.0 + r);
  fc->forward(x).sum().backward();
  std::vector<std::shared_ptr<c10d::ProcessGroup::Work>> works;
  for (auto& p : fc->named_parameters()) {
    std::vector<torch::Tensor> tmp = {p.value().grad()};
    works.push_back(pg->allreduce(tmp));
  }
  for (auto& work : works) work->wait();
  for (auto& p : fc->named_parameters()) p.value().grad().data() = p.value().grad().data() / w;
  // The mean over ranks of d/dW sum(x W^T + b) = 4 * mean(1 + r) per entry; bias 4.
  const double mean_x = 1.0 + (w - 1) / 2.0;
  REQUIRE(torch::allclose(fc->weight.grad(), torch::full({2, 3}, 4 * mean_x)));
  REQUIRE(torch::allclose(fc->bias.grad(), torch::full({2}, 4.0)));

  // Two tensors in one call: both reduced, in order.
  torch::Tensor a = rank_values(r), b = rank_values(r, torch::kFloat64) * 2;
  std::vector<torch::Tensor> two = {a, b};
  pg->allreduce_coalesced(two)->wait();
  torch::Tensor s = torch::zeros({4});
  for (int k = 0; k < w; ++k) s += rank_values(k);
  REQUIRE(torch::equal(a, s));
  REQUIRE(torch::equal(b, s.to(torch::kFloat64) * 2));
}

TEST_CASE("c10d: broadcast and allgather", "[distributed][libtorch]") {
  auto pg = group();
  const int w = pg->getSize(), r = pg->getRank();
  const int root = w - 1;
  torch::Tensor t = rank_values(r), u = torch::zeros({4});
  std::vector<torch::Tensor> list = {t, u};
  c10d::BroadcastOptions bo;
  bo.rootRank = root;
  bo.rootTensor = 0;
  auto bw = pg->broadcast(list, bo);
  REQUIRE(bw->wait(std::chrono::milliseconds(60000)));
  REQUIRE(torch::equal(t, rank_values(root)));
  REQUIRE(torch::equal(u, rank_values(root)));  // every tensor of the call receives the root's

  torch::Tensor mine = rank_values(r, torch::kInt64);
  std::vector<torch::Tensor> in = {mine};
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int k = 0; k < w; ++k) out[0].push_back(torch::zeros({4}, torch::kInt64));
  auto gw = pg->allgather(out, in);
  gw->wait();
  for (int k = 0; k < w; ++k) REQUIRE(torch::equal(out[0][k], rank_values(k, torch::kInt64)));
  REQUIRE(gw->result().size() == static_cast<size_t>(w));
  REQUIRE(gw->result()[0].is_same(out[0][0]));
}

TEST_CASE("c10d: wrong arguments name what is wrong", "[distributed][libtorch]") {
  auto pg = group();
  const int w = pg->getSize();
  std::vector<torch::Tensor> none;
  REQUIRE_THROWS_WITH(pg->allreduce(none), Catch::Contains("the tensor list is empty"));
  std::vector<torch::Tensor> one = {torch::ones({2})};
  c10d::AllreduceOptions band;
  band.reduceOp = c10d::ReduceOp::BAND;
  REQUIRE_THROWS_WITH(pg->allreduce(one, band), Catch::Contains("ReduceOp::BAND is not supported"));
  c10d::BroadcastOptions far;
  far.rootRank = w;
  REQUIRE_THROWS_WITH(pg->broadcast(one, far), Catch::Contains("rootRank " + std::to_string(w)));
  std::vector<torch::Tensor> mixed = {torch::ones({2}), torch::ones({3})};
  REQUIRE_THROWS_WITH(pg->broadcast(mixed), Catch::Contains("every tensor receives the same values"));
  std::vector<std::vector<torch::Tensor>> short_out(1);
  REQUIRE_THROWS_WITH(pg->allgather(short_out, one), Catch::Contains("it needs one per rank"));
  std::vector<std::vector<torch::Tensor>> bad_out(1, std::vector<torch::Tensor>(w, torch::ones({3})));
  REQUIRE_THROWS_WITH(pg->allgather(bad_out, one), Catch::Contains("must be shaped like inputs[0]"));
  // AVG of an integer tensor: mpx::distributed's own error, thrown when the call is made.
  std::vector<torch::Tensor> ints = {torch::ones({2}, torch::kInt64)};
  c10d::AllreduceOptions avg;
  avg.reduceOp = c10d::ReduceOp::AVG;
  REQUIRE_THROWS_WITH(pg->allreduce(ints, avg), Catch::Contains("not supported"));
  pg->barrier()->wait();  // every rank leaves together
}
