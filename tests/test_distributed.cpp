// Process group collectives; CTest runs this file as one process and again under `mpirun -np 2`.
#include <catch2/catch.hpp>

#include <mpx/mpx.h>

#include "test_util.h"

namespace dist = mpx::distributed;
using namespace mpx;

namespace {
// Rank r holds (r + 1) * base + i: sums, maxima and averages are then known in closed form.
Tensor rank_tensor(int64_t n, DType dt, int r) {
  return (arange(0.0, static_cast<double>(n), 1.0, kFloat32) * 0.25 + (r + 1) * 1.5).to(dt);
}
double world_sum_factor(int w) { return w * (w + 1) / 2.0; }
}  // namespace

TEST_CASE("process group: ranks from the launcher, world size 1 without one", "[distributed]") {
  dist::init();
  REQUIRE(dist::is_initialized());
  REQUIRE(dist::world_size() >= 1);
  REQUIRE(dist::rank() >= 0);
  REQUIRE(dist::rank() < dist::world_size());
  REQUIRE(dist::local_rank() >= 0);
  REQUIRE(dist::local_rank() < dist::local_world_size());
  REQUIRE(!dist::backend_info().empty());
  if (dist::world_size() > 1) {  // exported for code that follows torchrun's convention
    REQUIRE(std::getenv("RANK") != nullptr);
    REQUIRE(std::string(std::getenv("RANK")) == std::to_string(dist::rank()));
  }
  dist::barrier();
}

TEST_CASE("all_reduce sum/avg/max in every floating dtype", "[distributed]") {
  const int w = dist::world_size(), r = dist::rank();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    const int64_t n = 37;
    Tensor s = rank_tensor(n, dt, r);
    dist::all_reduce(s, dist::ReduceOp::Sum);
    REQUIRE(s.dtype() == dt);
    // Expected, computed in f64 from what each rank held (its values rounded to dt), then rounded once.
    Tensor expect = zeros({n}, kFloat64);
    for (int k = 0; k < w; ++k) expect = expect + rank_tensor(n, dt, k).to(kFloat64);
    REQUIRE(allclose(s.to(kFloat64), expect.to(dt).to(kFloat64), 0, 0));
    Tensor a = rank_tensor(n, dt, r);
    dist::all_reduce(a, dist::ReduceOp::Avg);
    REQUIRE(allclose(a.to(kFloat64), (expect / w).to(dt).to(kFloat64), 0, 0));
    Tensor m = rank_tensor(n, dt, r);
    dist::all_reduce(m, dist::ReduceOp::Max);
    REQUIRE(allclose(m.to(kFloat64), rank_tensor(n, dt, w - 1).to(kFloat64), 0, 0));
  }
}

TEST_CASE("a large all_reduce goes in pieces and every element is reduced", "[distributed]") {
  // Above 1 MiB (MPX_DISTRIBUTED_CHUNK_KB) MPI all-reduces go in consecutive pieces: 1.3 pieces
  // of f32, 2.6 of f64 and i64, so piece boundaries and an uneven last piece are covered.
  const int w = dist::world_size(), r = dist::rank();
  const int64_t n = 340000;
  for (DType dt : {kFloat32, kFloat64}) {
    INFO(dtype_name(dt));
    Tensor s = rank_tensor(n, dt, r);
    dist::all_reduce(s, dist::ReduceOp::Avg);
    Tensor expect = zeros({n}, kFloat64);
    for (int k = 0; k < w; ++k) expect = expect + rank_tensor(n, dt, k).to(kFloat64);
    REQUIRE(allclose(s.to(kFloat64), (expect / w).to(dt).to(kFloat64), 0, 0));
    Tensor m = rank_tensor(n, dt, r);
    dist::all_reduce(m, dist::ReduceOp::Max);
    REQUIRE(allclose(m.to(kFloat64), rank_tensor(n, dt, w - 1).to(kFloat64), 0, 0));
  }
  Tensor i = arange(0.0, static_cast<double>(n), 1.0, kInt64) + r;
  dist::all_reduce(i);
  REQUIRE(equal(i, arange(0.0, static_cast<double>(n), 1.0, kInt64) * w + static_cast<int64_t>(world_sum_factor(w) - w)));
}

TEST_CASE("16-bit sums on the CPU are exact sums rounded once", "[distributed]") {
  // Summed in f32 and rounded once: 2048 + 1 + 1 + ... keeps the ones that an f16 running sum
  // (spacing 2 above 2048) would drop from the third rank on.
  const int w = dist::world_size(), r = dist::rank();
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor t = full({4}, r == 0 ? 2048.0 : 1.0, dt);
    dist::all_reduce(t);
    const double expect = full({1}, 2048.0 + (w - 1), kFloat32).to(dt).to(kFloat64).item<double>();
    REQUIRE(t.to(kFloat64)[3].item<double>() == expect);
  }
  Tensor i = full({3}, r + 1.0, kInt64);
  dist::all_reduce(i);
  REQUIRE(i[2].item<int64_t>() == static_cast<int64_t>(world_sum_factor(w)));
}

TEST_CASE("broadcast, all_gather and async work handles", "[distributed]") {
  const int w = dist::world_size(), r = dist::rank();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kUInt8}) {
    INFO(dtype_name(dt));
    Tensor b = rank_tensor(10, dt, r);
    dist::broadcast(b, w - 1);
    REQUIRE(allclose(b.to(kFloat64), rank_tensor(10, dt, w - 1).to(kFloat64), 0, 0));
    tensor_list g = dist::all_gather(rank_tensor(6, dt, r).view({2, 3}));
    REQUIRE(static_cast<int>(g.size()) == w);
    for (int k = 0; k < w; ++k) {
      REQUIRE(g[k].sizes() == IntList{2, 3});
      REQUIRE(allclose(g[k].to(kFloat64), rank_tensor(6, dt, k).view({2, 3}).to(kFloat64), 0, 0));
    }
  }
  // Several collectives in flight at once complete in order; a non-contiguous tensor gets its result.
  Tensor x = rank_tensor(8, kFloat32, r);
  Tensor y = rank_tensor(12, kFloat32, r).view({3, 4}).t();
  auto w1 = dist::all_reduce_async(x, dist::ReduceOp::Sum);
  auto w2 = dist::all_reduce_async(y, dist::ReduceOp::Max);
  auto w3 = dist::all_gather_async(full({1}, static_cast<double>(r)));
  w2.wait();
  w1.wait();
  w3.wait();
  REQUIRE(w1.is_completed());
  REQUIRE(allclose(x, rank_tensor(8, kFloat32, 0) * world_sum_factor(w) -
                          arange(0.0, 8.0, 1.0, kFloat32) * 0.25 * (world_sum_factor(w) - w), 1e-6, 1e-5));
  REQUIRE(allclose(y, rank_tensor(12, kFloat32, w - 1).view({3, 4}).t(), 0, 0));
  for (int k = 0; k < w; ++k) REQUIRE(w3.result()[k].item<double>() == k);
}

TEST_CASE("ranks calling different collectives or shapes get the same error, not a hang", "[distributed]") {
  if (dist::world_size() == 1) return;  // nothing to disagree with
  const int r = dist::rank();
  REQUIRE_THROWS_WITH(dist::all_reduce(zeros({4 + r})),
                      Catch::Contains("element count (4 to 5) differs across ranks") &&
                          Catch::Contains("on rank " + std::to_string(r)));
  auto call_one = [&] {
    if (r == 0) dist::broadcast(zeros({3}), 0);
    else dist::all_reduce(zeros({3}));
  };
  REQUIRE_THROWS_WITH(call_one(), Catch::Contains("the collective") && Catch::Contains("differs across ranks"));
  // The group is still usable afterwards.
  Tensor t = ones({2});
  dist::all_reduce(t);
  REQUIRE(t[0].item<double>() == dist::world_size());
}

TEST_CASE("collectives reject what they cannot reduce, with the reason", "[distributed]") {
  REQUIRE_THROWS_WITH(dist::all_reduce(full({2}, 1.0, kInt64), dist::ReduceOp::Avg),
                      Catch::Contains("avg of a i64 tensor is not supported"));
  REQUIRE_THROWS_WITH(dist::all_reduce(Tensor()), Catch::Contains("undefined"));
  REQUIRE_THROWS_WITH(dist::broadcast(zeros({2}), dist::world_size()), Catch::Contains("is not a rank"));
  REQUIRE_THROWS_WITH(dist::set_timeout(0), Catch::Contains("positive"));
}

TEST_CASE("collectives on CUDA tensors (NCCL when built with it)", "[distributed][cuda]") {
  if (!cuda_is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const int w = dist::world_size(), r = dist::rank();
  const Device dev = Device::cuda(dist::local_rank() % cuda_device_count());
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    INFO(dtype_name(dt));
    Tensor s = rank_tensor(33, dt, r).to(dev);
    dist::all_reduce(s, dist::ReduceOp::Sum);
    Tensor expect = zeros({33}, kFloat64);
    for (int k = 0; k < w; ++k) expect = expect + rank_tensor(33, dt, k).to(kFloat64);
    // NCCL sums 16-bit tensors in their own dtype (one rounding per rank added).
    REQUIRE(allclose(s.cpu().to(kFloat64), expect, dt == kFloat32 ? 1e-6 : 1e-2, 0));
    Tensor a = rank_tensor(33, dt, r).to(dev);
    dist::all_reduce(a, dist::ReduceOp::Avg);
    REQUIRE(allclose(a.cpu().to(kFloat64), expect / w, dt == kFloat32 ? 1e-6 : 1e-2, 0));
    Tensor b = rank_tensor(9, dt, r).to(dev);
    dist::broadcast(b, 0);
    REQUIRE(allclose(b.cpu(), rank_tensor(9, dt, 0), 0, 0));
    auto g = dist::all_gather(rank_tensor(4, dt, r).to(dev));
    for (int k = 0; k < w; ++k) {
      REQUIRE(g[k].device() == dev);
      REQUIRE(allclose(g[k].cpu(), rank_tensor(4, dt, k), 0, 0));
    }
  }
}
