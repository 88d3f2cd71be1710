// SyncBatchNorm; CTest runs this file as one process and again under `mpirun -np 2`.
#include <catch2/catch.hpp>

#include <optional>

#include <mpx/mpx.h>

namespace dist = mpx::distributed;
namespace F = mpx::nn::functional;
using namespace mpx;

namespace {
constexpr int64_t kBatch = 8;
Tensor my_rows(const Tensor& t) {
  const int64_t n = kBatch / dist::world_size();
  return t.narrow(0, dist::rank() * n, n);
}
// Sum of a tensor over the ranks (parameter gradients of SyncBN are per rank, as in PyTorch;
// DDP then reduces them).
Tensor rank_sum(const Tensor& t) {
  Tensor s = t.detach().clone();
  dist::all_reduce(s);
  return s;
}

struct NetImpl : nn::Module {
  NetImpl() { bn = register_module("bn", nn::BatchNorm2d(3)); }
  Tensor forward(Tensor x) { return bn->forward(x); }  // a typed member, not the child list
  nn::BatchNorm2d bn{nullptr};
};
MPX_MODULE(Net);
}  // namespace

// Tolerance: SyncBN takes the variance as E[x^2] - E[x]^2 from f32 sums over ranks, BatchNorm
// from a per-channel pass over the whole batch; for unit-scale data the two differ by a few f32
// ulps, so 1e-5 relative is ample and any real mistake (a wrong count, a missing reduction of
// the backward sums) shows up at the 1e-1 level.
TEST_CASE("SyncBatchNorm equals BatchNorm over the global batch", "[distributed][syncbn]") {
  manual_seed(21);
  Tensor x = randn({kBatch, 3, 4, 5}) * 2.0 + 1.0;
  Tensor gy = randn({kBatch, 3, 4, 5});
  nn::BatchNorm2d ref(3);
  nn::SyncBatchNorm sync(3);
  {
    NoGradGuard ng;
    Tensor w = tensor<float>({0.5f, 1.5f, -1.0f}), b = tensor<float>({0.1f, 0.0f, -0.2f});
    ref->weight.copy_(w); ref->bias.copy_(b);
    sync->weight.copy_(w); sync->bias.copy_(b);
  }
  for (int step = 0; step < 2; ++step) {
    Tensor xr = x.clone().set_requires_grad();
    Tensor yr = ref(xr);
    (yr * gy).sum().backward();
    Tensor xs = my_rows(x).clone().set_requires_grad();
    Tensor ys = sync(xs);
    (ys * my_rows(gy)).sum().backward();
    REQUIRE(allclose(ys, my_rows(yr), 1e-5, 1e-5));
    REQUIRE(allclose(xs.grad(), my_rows(xr.grad()), 1e-4, 1e-5));
    REQUIRE(allclose(rank_sum(sync->weight.grad()), ref->weight.grad(), 1e-4, 1e-5));
    REQUIRE(allclose(rank_sum(sync->bias.grad()), ref->bias.grad(), 1e-4, 1e-5));
    REQUIRE(allclose(sync->running_mean, ref->running_mean, 1e-5, 1e-6));
    REQUIRE(allclose(sync->running_var, ref->running_var, 1e-5, 1e-6));
    REQUIRE(sync->num_batches_tracked.item<int64_t>() == step + 1);
  }
  // Running statistics are identical on every rank; eval uses them.
  for (const auto& t : dist::all_gather(sync->running_var)) REQUIRE(allclose(t, sync->running_var, 0, 0));
  ref->eval();
  sync->eval();
  REQUIRE(allclose(sync(my_rows(x)), my_rows(ref(x)), 1e-5, 1e-6));
}

TEST_CASE("convert_sync_batchnorm reaches typed members, works under autocast", "[distributed][syncbn]") {
  manual_seed(22);
  Tensor x = randn({kBatch, 3, 2, 2});
  Net net, plain;
  REQUIRE(nn::convert_sync_batchnorm(net) == 1);
  Tensor y = net(my_rows(x));
  Tensor r = plain(x);
  REQUIRE(allclose(y, my_rows(r), 1e-5, 1e-5));
  REQUIRE(allclose(net->bn->running_mean, plain->bn->running_mean, 1e-5, 1e-6));
  // bf16 activations, f32 statistics and parameters (keep_batchnorm_fp32): bf16 out, and the
  // same as f32 batch norm of the same bf16 input up to the output's rounding (2^-8 relative).
  Tensor xb = x.to(kBFloat16);
  amp::AutocastGuard guard(kBFloat16);
  Tensor yb = net(my_rows(xb));
  REQUIRE(yb.dtype() == kBFloat16);
  Tensor rb = plain(xb.to(kFloat32));
  REQUIRE(allclose(yb.to(kFloat32), my_rows(rb), 8e-3, 8e-3));
}

TEST_CASE("SyncBatchNorm checks its input", "[distributed][syncbn]") {
  nn::SyncBatchNorm bn(4);
  REQUIRE_THROWS_WITH(bn(zeros({4})), Catch::Contains("at least 2 dimensions"));
  REQUIRE_THROWS_WITH(bn(zeros({2, 3})), Catch::Contains("expected 4 channels"));
}

namespace {
struct ConvNetImpl : nn::Module {
  ConvNetImpl() {
    conv = register_module("conv", nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)));
    bn = register_module("bn", nn::BatchNorm2d(4));
    fc = register_module("fc", nn::Linear(4 * 4 * 4, 3));
  }
  Tensor forward(Tensor x) { return fc(F::relu(bn(conv(x))).flatten(1)); }
  nn::Conv2d conv{nullptr};
  nn::BatchNorm2d bn{nullptr};
  nn::Linear fc{nullptr};
};
MPX_MODULE(ConvNet);
}  // namespace

TEST_CASE("DDP with synchronized batch norm trains like one process with the global batch", "[distributed][syncbn]") {
  // With SyncBN, batch statistics cover the global batch, so even a model with batch norm
  // matches one process exactly up to summation order (f32: 1e-4 relative after 3 steps; the
  // variance from sums differs from BatchNorm's by a few ulps, see above).
  auto run = [](bool data_parallel) {
    manual_seed(31);
    ConvNet net;
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    std::optional<nn::DistributedDataParallel> ddp;
    if (data_parallel) {
      nn::convert_sync_batchnorm(net);
      ddp.emplace(net, nn::DDPOptions().bucket_cap_mb(0.001));
    }
    for (int s = 0; s < 3; ++s) {
      manual_seed(40 + s);
      Tensor x = randn({kBatch, 1, 4, 4}), y = randint(0, 3, {kBatch});
      opt.zero_grad();
      Tensor out = data_parallel ? (*ddp)(my_rows(x)) : net(x);
      F::cross_entropy(out, data_parallel ? my_rows(y) : y).backward();
      opt.step();
    }
    tensor_list state = net->parameters();
    state.push_back(net->bn->running_mean);
    state.push_back(net->bn->running_var);
    return state;
  };
  auto ref = run(false), got = run(true);
  REQUIRE(ref.size() == got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("tensor " << i);
    REQUIRE(allclose(got[i], ref[i], 1e-4, 1e-5));
  }
}
