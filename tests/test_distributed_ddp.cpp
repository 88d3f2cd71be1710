// DistributedDataParallel; CTest runs this file as one process and again under `mpirun -np 2`.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>

#include <mpx/mpx.h>

namespace dist = mpx::distributed;
namespace F = mpx::nn::functional;
using namespace mpx;

namespace {

struct MlpImpl : nn::Module {
  explicit MlpImpl(int64_t hidden = 16, bool with_unused = false) {
    fc1 = register_module("fc1", nn::Linear(8, hidden));
    fc2 = register_module("fc2", nn::Linear(hidden, 8));
    fc3 = register_module("fc3", nn::Linear(8, 4));
    if (with_unused) unused = register_module("unused", nn::Linear(4, 4));
  }
  Tensor forward(Tensor x) { return fc3(F::relu(fc2(F::relu(fc1(x))))); }
  nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, unused{nullptr};
};
MPX_MODULE(Mlp);

constexpr int64_t kBatch = 8;  // the global batch; each of w ranks takes kBatch / w rows

std::pair<Tensor, Tensor> global_batch(int step) {
  manual_seed(1000 + step);
  return {randn({kBatch, 8}), randint(0, 4, {kBatch})};
}
Tensor my_rows(const Tensor& t) {
  const int64_t n = kBatch / dist::world_size();
  return t.narrow(0, dist::rank() * n, n);
}

struct Recipe {
  const char* level;
  DType low;
  bool adam;
  double rtol;
  double predivide = 1.0;
  bool always_fp32 = false;
  bool set_to_none = true;  // zero_grad(false) keeps gradients as views of DDP's buckets
};

// Trains from one seed, either as one process on the whole batch or data-parallel on this
// rank's rows; returns the model's parameters (f32 copies) after the steps.
std::vector<Tensor> train(const Recipe& rc, bool data_parallel, int steps = 3) {
  amp::reset();
  manual_seed(7);
  Mlp net;
  std::unique_ptr<optim::Optimizer> opt;
  if (rc.adam) opt = std::make_unique<optim::Adam>(net->parameters(), optim::AdamOptions(1e-2));
  else opt = std::make_unique<optim::SGD>(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  auto options = amp::Options().opt_level(rc.level).dtype(rc.low).verbosity(0);
  if (std::string(rc.level) != "O0") options.loss_scale(128.0);  // static: both runs scale alike
  amp::initialize(net, *opt, options);
  std::optional<nn::DistributedDataParallel> ddp;
  if (data_parallel)
    ddp.emplace(net, nn::DDPOptions()
                         .bucket_cap_mb(0.002)
                         .gradient_predivide_factor(rc.predivide)
                         .allreduce_always_fp32(rc.always_fp32));
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = global_batch(s);
    if (data_parallel) { x = my_rows(x); y = my_rows(y); }
    opt->zero_grad(rc.set_to_none);
    Tensor out = data_parallel ? (*ddp)(x) : net(x);
    amp::scale_loss(F::cross_entropy(out, y), *opt).backward();
    opt->step();
  }
  std::vector<Tensor> params;
  for (const auto& p : net->parameters()) params.push_back(p.detach().to(kFloat32, /*non_blocking=*/false, /*copy=*/true));
  amp::reset();
  return params;
}

}  // namespace

TEST_CASE("DDP over w ranks x batch B/w trains like one process with batch B", "[distributed][ddp]") {
  // Tolerances: the only difference is summation order. One process sums the per-sample
  // gradient contributions in one GEMM over B rows; DDP sums B/w rows per rank and then adds
  // the ranks' partial sums (in f32) and divides by w. f32 (O0): a few f32 ulps per step
  // (measured ~1e-7 relative), so 1e-5 after 3 steps. f16/bf16 (O1-O3): each rank's gradient is
  // rounded to 16 bits before the sum and activations round at different points of the split
  // GEMMs, so a parameter can move by about one 16-bit ulp more or less per step: 4 ulps
  // (3 steps plus headroom) are 4 x 2^-10 ~ 4e-3 relative for f16 and 4 x 2^-7 ~ 3e-2 for
  // bf16 (measured at 2 ranks: up to 7e-4 for f16, 5.5e-3 for bf16).
  const Recipe recipes[] = {
      {"O0", kFloat16, false, 1e-5},   {"O0", kFloat16, true, 1e-5},   {"O1", kFloat16, false, 4e-3},
      {"O1", kBFloat16, false, 3e-2},  {"O2", kFloat16, false, 4e-3},  {"O2", kBFloat16, false, 3e-2},
      {"O2", kFloat16, true, 4e-3},    {"O1", kBFloat16, true, 3e-2},
      // O3: parameters are 16-bit themselves, so a one-ulp difference of a parameter's value
      // (2^-10 of its size for f16) can appear at any step.
      {"O3", kFloat16, false, 4e-3},
      // apex's options: predivision only moves where the division happens; f32 buckets only
      // avoid rounding the sum to 16 bits.
      {"O2", kFloat16, false, 4e-3, 2.0, false}, {"O2", kBFloat16, false, 3e-2, 1.0, true},
      // Gradients zeroed in place: after the first step they are views of the buckets.
      {"O0", kFloat16, false, 1e-5, 1.0, false, false}, {"O2", kFloat16, true, 4e-3, 1.0, false, false},
  };
  for (const auto& rc : recipes) {
    INFO(rc.level << " " << dtype_name(rc.low) << (rc.adam ? " Adam" : " SGD momentum") << " predivide "
                  << rc.predivide << (rc.always_fp32 ? " fp32 all-reduce" : "")
                  << (rc.set_to_none ? "" : " zero_grad(false)"));
    auto ref = train(rc, false);
    auto got = train(rc, true);
    REQUIRE(ref.size() == got.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("parameter " << i);
      const double scale = max(abs(ref[i])).item<double>();
      const double diff = max(abs(ref[i] - got[i])).item<double>();
      INFO("max diff " << diff << " scale " << scale);
      REQUIRE(diff <= rc.rtol * std::max(scale, 1e-3));
      // Every rank holds the same parameters.
      auto all = dist::all_gather(got[i]);
      for (const auto& a : all) REQUIRE(allclose(a, all[0], 0, 0));
    }
  }
}

TEST_CASE("DDP buckets start during backward, last layers first", "[distributed][ddp]") {
  manual_seed(3);
  Mlp net;
  nn::DistributedDataParallel ddp(net, nn::DDPOptions().bucket_cap_mb(1e-9));  // one parameter per bucket
  auto layout = ddp->bucket_layout();
  REQUIRE(layout.size() == 6);
  REQUIRE(layout.front() == std::vector<std::string>{"fc3.bias"});
  REQUIRE(layout.back() == std::vector<std::string>{"fc1.weight"});
  auto [x, y] = global_batch(0);
  F::cross_entropy(ddp(my_rows(x)), my_rows(y)).backward();
  REQUIRE(ddp->stats().synchronized_backwards == 1);
  // All but the last bucket start while earlier layers' gradients are still being computed.
  REQUIRE(ddp->stats().buckets_started_during_backward == 5);
  // One big bucket: it can only start with the last gradient.
  Mlp big;
  nn::DistributedDataParallel one(big, nn::DDPOptions());
  REQUIRE(one->bucket_layout().size() == 1);
}

TEST_CASE("no_sync accumulates locally, the next backward reduces the sum", "[distributed][ddp]") {
  manual_seed(5);
  Mlp ref;
  manual_seed(5);
  Mlp net;
  nn::DistributedDataParallel ddp(net, nn::DDPOptions().bucket_cap_mb(0.001));
  for (int k = 0; k < 3; ++k) {
    auto [x, y] = global_batch(10 + k);
    F::cross_entropy(ref(x), y).backward();
    if (k < 2) {
      auto guard = ddp->no_sync();
      F::cross_entropy(ddp(my_rows(x)), my_rows(y)).backward();
    } else {
      F::cross_entropy(ddp(my_rows(x)), my_rows(y)).backward();
    }
  }
  REQUIRE(ddp->stats().synchronized_backwards == 1);
  // The reduced gradients are views of their bucket (fc3's weight and bias share one).
  if (dist::world_size() > 1)
    REQUIRE(net->fc3->weight.grad().impl()->storage == net->fc3->bias.grad().impl()->storage);
  auto pr = ref->parameters(), pd = net->parameters();
  // f32, summation order only (see the tolerance note of the training test).
  for (size_t i = 0; i < pr.size(); ++i) REQUIRE(allclose(pd[i].grad(), pr[i].grad(), 1e-5, 1e-6));
}

TEST_CASE("an overflow on one rank makes every rank skip the step and back off", "[distributed][ddp][amp]") {
  amp::reset();
  manual_seed(9);
  Mlp net;
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
  amp::initialize(net, opt, amp::Options().opt_level("O1").dtype(kFloat16).verbosity(0));
  nn::DistributedDataParallel ddp(net);
  const double scale0 = amp::loss_scale();
  std::vector<Tensor> before;
  for (const auto& p : net->parameters()) before.push_back(p.detach().clone());
  auto [x, y] = global_batch(20);
  Tensor mine = my_rows(x).clone();
  if (dist::rank() == dist::world_size() - 1) {
    NoGradGuard ng;
    mine[0][0].fill_(std::numeric_limits<double>::infinity());  // only the last rank sees it
  }
  opt.zero_grad();
  amp::scale_loss(F::cross_entropy(ddp(mine), my_rows(y)), opt).backward();
  opt.step();
  REQUIRE(amp::skipped_steps(opt) == 1);
  REQUIRE(amp::loss_scale() == scale0 / 2);
  auto after = net->parameters();
  for (size_t i = 0; i < before.size(); ++i) REQUIRE(allclose(after[i], before[i], 0, 0));
  // A clean step afterwards steps everywhere.
  opt.zero_grad();
  amp::scale_loss(F::cross_entropy(ddp(my_rows(x)), my_rows(y)), opt).backward();
  opt.step();
  REQUIRE(amp::skipped_steps(opt) == 1);
  amp::reset();
}

TEST_CASE("GradScaler: an inf on one rank makes every rank skip and halve the scale", "[distributed][ddp][amp]") {
  manual_seed(10);
  Mlp net;
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
  nn::DistributedDataParallel ddp(net);
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024));
  std::vector<Tensor> before;
  for (const auto& p : net->parameters()) before.push_back(p.detach().clone());
  auto [x, y] = global_batch(21);
  Tensor mine = my_rows(x).clone();
  if (dist::rank() == dist::world_size() - 1) {
    NoGradGuard ng;
    mine[1][2].fill_(std::numeric_limits<double>::quiet_NaN());
  }
  opt.zero_grad();
  {
    amp::AutocastGuard autocast(kBFloat16);
    scaler.scale(F::cross_entropy(ddp(mine), my_rows(y))).backward();
  }
  const bool stepped = scaler.step(opt);
  scaler.update();
  REQUIRE_FALSE(stepped);
  REQUIRE(scaler.get_scale() == 512);
  auto after = net->parameters();
  for (size_t i = 0; i < before.size(); ++i) REQUIRE(allclose(after[i], before[i], 0, 0));
}

TEST_CASE("DDP broadcasts parameters at construction and buffers every forward", "[distributed][ddp]") {
  manual_seed(11 + dist::rank());  // different weights per rank: construction must unify them
  nn::Sequential seq(nn::Linear(8, 6), nn::BatchNorm1d(6), nn::Linear(6, 2));
  nn::DistributedDataParallel ddp(seq);
  for (const auto& p : seq->parameters()) {
    auto all = dist::all_gather(p.detach());
    for (const auto& a : all) REQUIRE(allclose(a, all[0], 0, 0));
  }
  auto buffers = seq->named_buffers();
  {
    NoGradGuard ng;
    buffers["1.running_mean"].fill_(static_cast<double>(dist::rank()));
  }
  ddp->eval();
  ddp(zeros({2, 8}));
  REQUIRE(allclose(buffers["1.running_mean"], zeros({6}), 0, 0));  // rank 0's value everywhere
}

TEST_CASE("DDP errors: a parameter without gradient, a different model on another rank", "[distributed][ddp]") {
  manual_seed(13);
  Mlp net(16, /*with_unused=*/true);
  nn::DistributedDataParallel ddp(net);
  auto [x, y] = global_batch(30);
  REQUIRE_THROWS_WITH(F::cross_entropy(ddp(my_rows(x)), my_rows(y)).backward(),
                      Catch::Contains("got no gradient") && Catch::Contains("unused.weight") &&
                          Catch::Contains("find_unused_parameters(true)"));
  Mlp net2(16, true);
  nn::DistributedDataParallel tolerant(net2, nn::DDPOptions().find_unused_parameters(true));
  F::cross_entropy(tolerant(my_rows(x)), my_rows(y)).backward();
  REQUIRE(allclose(net2->unused->weight.grad(), zeros({4, 4}), 0, 0));
  // amp::initialize after wrapping recasts the parameters DDP hooked: an error, not unaveraged training.
  amp::reset();
  Mlp late;
  optim::SGD opt(late->parameters(), optim::SGDOptions(0.1));
  nn::DistributedDataParallel wrapped_first(late);
  amp::initialize(late, opt, amp::Options().opt_level("O3").dtype(kBFloat16).verbosity(0));
  REQUIRE_THROWS_WITH(wrapped_first(my_rows(x)), Catch::Contains("before constructing DistributedDataParallel"));
  amp::reset();
  if (dist::world_size() > 1) {
    Mlp other(dist::rank() == 1 ? 17 : 16);
    REQUIRE_THROWS_WITH(nn::DistributedDataParallel(other),
                        Catch::Contains("the model on rank 1 differs from rank 0's") &&
                            Catch::Contains("rank 0 has parameter 'fc1.weight' f32[16, 8] on cpu") &&
                            Catch::Contains("rank 1 has parameter 'fc1.weight' f32[17, 8] on cpu"));
    Mlp half;
    if (dist::rank() == 1) half->fc3->to(kFloat16);
    REQUIRE_THROWS_WITH(nn::DistributedDataParallel(half), Catch::Contains("'fc3.weight' f16[4, 8]"));
  }
}

TEST_CASE("DDP on a GPU (NCCL even at world size 1) trains like the plain model", "[distributed][ddp][cuda]") {
  if (!cuda_is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const Device dev = Device::cuda(dist::local_rank() % cuda_device_count());
  auto run = [&](bool data_parallel) {
    manual_seed(17);
    Mlp net;
    net->to(dev);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    std::optional<nn::DistributedDataParallel> ddp;
    if (data_parallel) ddp.emplace(net, nn::DDPOptions().bucket_cap_mb(0.002));
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = global_batch(50 + s);
      if (data_parallel) { x = my_rows(x); y = my_rows(y); }
      opt.zero_grad();
      Tensor out = data_parallel ? (*ddp)(x.to(dev)) : net(x.to(dev));
      F::cross_entropy(out, y.to(dev)).backward();
      opt.step();
    }
    tensor_list ps;
    for (const auto& p : net->parameters()) ps.push_back(p.detach().cpu());
    return ps;
  };
  auto ref = run(false), got = run(true);
  // Summation order only (see the first test's note): f32.
  for (size_t i = 0; i < ref.size(); ++i) REQUIRE(allclose(got[i], ref[i], 1e-5, 1e-6));
}
