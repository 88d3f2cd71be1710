// [cuda] tests of the fused amp and optimizer kernels: unscale + inf check, SGD/Adam steps with
// masters, the device-side overflow skip and scale update, all against the CPU kernels.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "amp/amp.h"
#include "amp/grad_scaler.h"
#include "core/random.h"
#include "ops/amp.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/test_util.h"

using namespace mpx;
using testing::rel_err;

namespace {

const Device kGpu = Device::cuda();

// Gradient-like tensors: many sizes, including more than one launch's worth of tensors (64) and
// of chunks, and sizes that are not multiples of anything.
tensor_list make_grads(DType dt, uint64_t seed) {
  manual_seed(seed);
  tensor_list gs;
  const int64_t sizes[] = {1, 7, 64, 1000, 32769, 70001, 1 << 20, 3 * (1 << 20) + 5};
  for (int rep = 0; rep < 10; ++rep)
    for (int64_t n : sizes)
      if (rep == 0 || n < 100000) gs.push_back(randn({n}).mul_(100.0).to(dt));
  return gs;
}

tensor_list to_dev(const tensor_list& ts, Device d) {
  tensor_list r;
  for (const auto& t : ts) r.push_back(t.to(d));
  return r;
}

}  // namespace

TEST_CASE("cuda unscale_check_inf_ matches the CPU and raises found_inf", "[cuda][amp]") {
  if (!testing::cuda_ready()) return;
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    INFO("dtype " << dtype_name(dt));
    const tensor_list cpu_in = make_grads(dt, 11);
    const DType odt = dt == kFloat64 ? kFloat64 : kFloat32;
    tensor_list cpu_out, gpu_out;
    for (const auto& g : cpu_in) {
      cpu_out.push_back(empty(g.sizes(), TensorOptions(odt)));
      gpu_out.push_back(empty(g.sizes(), TensorOptions(odt).device(kGpu)));
    }
    const tensor_list gpu_in = to_dev(cpu_in, kGpu);
    const Tensor inv = scalar_tensor(1.0 / 1024.0);
    Tensor found_c = zeros({}), found_g = zeros({}, TensorOptions().device(kGpu));
    unscale_check_inf_(cpu_in, cpu_out, inv, found_c);
    unscale_check_inf_(gpu_in, gpu_out, inv.to(kGpu), found_g);
    CHECK(found_g.item<float>() == 0.0f);
    for (size_t i = 0; i < cpu_out.size(); ++i) CHECK(rel_err(gpu_out[i], cpu_out[i]) == 0.0);

    // One inf (then one NaN) deep inside one tensor of the list raises the flag; check-only too.
    for (double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
      tensor_list g2 = to_dev(cpu_in, kGpu);
      g2[5].narrow(0, g2[5].size(0) - 1, 1).fill_(bad);
      Tensor f = zeros({}, TensorOptions().device(kGpu));
      unscale_check_inf_(g2, {}, inv.to(kGpu), f);
      CHECK(f.item<float>() == 1.0f);
      Tensor f2 = zeros({}, TensorOptions().device(kGpu));
      unscale_check_inf_(g2, g2.front().dtype() == odt ? g2 : to_dev(cpu_out, kGpu), inv.to(kGpu), f2);
      CHECK(f2.item<float>() == 1.0f);
    }
  }
}

namespace {

// Runs `steps` optimizer steps of the same random gradients on CPU and GPU parameters.
template <typename Make>
void compare_optimizer(Make make, DType param_dtype, int steps, double tol) {
  manual_seed(3);
  std::vector<Tensor> cpu_p, gpu_p;
  for (int64_t n : {int64_t{5}, int64_t{4097}, int64_t{100003}}) {
    Tensor p = randn({n}).to(param_dtype);
    cpu_p.push_back(p.clone().set_requires_grad(true));
    gpu_p.push_back(p.to(kGpu).set_requires_grad(true));
  }
  auto oc = make(cpu_p);
  auto og = make(gpu_p);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < cpu_p.size(); ++i) {
      Tensor g = randn(cpu_p[i].sizes()).to(param_dtype);
      cpu_p[i].set_grad(g);
      gpu_p[i].set_grad(g.to(kGpu));
    }
    oc->step();
    og->step();
  }
  for (size_t i = 0; i < cpu_p.size(); ++i) {
    CHECK(rel_err(og->master(gpu_p[i]), oc->master(cpu_p[i])) < tol);
    // The model copy is the master rounded once: equal up to one rounding step of the dtype.
    CHECK(rel_err(gpu_p[i], cpu_p[i]) < testing::cuda_tolerance(param_dtype));
  }
}

}  // namespace

TEST_CASE("cuda fused SGD, Adam, RMSprop, Adagrad and LAMB steps match the CPU, with f32 masters for f16/bf16", "[cuda][optim]") {
  if (!testing::cuda_ready()) return;
  using namespace optim;
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    INFO("param dtype " << dtype_name(dt));
    const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
    compare_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<SGD>(p, SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
    }, dt, 3, tol);
    compare_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<SGD>(p, SGDOptions(0.1).momentum(0.9).nesterov(true));
    }, dt, 3, tol);
    compare_optimizer([](std::vector<Tensor> p) { return std::make_unique<SGD>(p, SGDOptions(0.05)); }, dt, 2, tol);
    compare_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<Adam>(p, AdamOptions(1e-3).weight_decay(1e-2));
    }, dt, 3, tol);
    compare_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<AdamW>(p, AdamWOptions(1e-3).amsgrad(true));
    }, dt, 3, tol);
    compare_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<RMSprop>(p, RMSpropOptions(1e-3).momentum(0.9).centered(true).weight_decay(1e-2));
    }, dt, 3, tol);
    compare_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<Adagrad>(p, AdagradOptions(1e-2).lr_decay(0.1).initial_accumulator_value(0.1));
    }, dt, 3, tol);
    // 100,003 elements: several chunks' partial norms per tensor; the clip is active (norm >> 1).
    compare_optimizer([](std::vector<Tensor> p) { return std::make_unique<LAMB>(p, LAMBOptions(1e-2)); }, dt, 3, tol);
    compare_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<LAMB>(p, LAMBOptions(1e-2).adam_w_mode(false).max_grad_norm(0).weight_decay(0).use_nvlamb(true));
    }, dt, 3, tol);
  }
}

TEST_CASE("cuda GradScaler skips on the device and keeps Adam's step count exact", "[cuda][amp]") {
  if (!testing::cuda_ready()) return;
  using namespace optim;
  // The same sequence of clean and overflowing iterations on the CPU and the GPU.
  const std::vector<bool> overflow = {false, true, false, true, true, false, false};
  auto run = [&](Device d, DType dt) {
    manual_seed(5);
    Tensor p = randn({3001}).to(dt).to(d).set_requires_grad(true);
    Adam opt({p}, AdamOptions(1e-2));
    amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0).growth_interval(2));
    scaler.scale(zeros({}, TensorOptions().device(d)));  // puts the scale state where the gradients are
    std::vector<int> stepped;
    for (bool bad : overflow) {
      Tensor g = randn({3001}).mul_(scaler.get_scale());
      if (bad) g.narrow(0, 17, 1).fill_(std::numeric_limits<double>::infinity());
      p.set_grad(g.to(dt).to(d));
      stepped.push_back(scaler.step(opt) ? 1 : 0);
      scaler.update();
    }
    return std::make_tuple(opt.master(p).cpu(), scaler.get_scale(), scaler.skipped_steps(), stepped,
                           opt.state_dict().scalars.at("state.0.step"));
  };
  for (DType dt : {kFloat32, kFloat16}) {
    INFO("param dtype " << dtype_name(dt));
    auto [mc, sc, kc, stc, nc] = run(Device::cpu(), dt);
    auto [mg, sg, kg, stg, ng] = run(kGpu, dt);
    CHECK(rel_err(mg, mc) < 1e-5);
    CHECK(sg == sc);
    CHECK(kg == 3);
    CHECK(kc == 3);
    CHECK(stg == stc);
    CHECK(ng == 4.0);
    CHECK(nc == 4.0);
  }
}

TEST_CASE("cuda update_scale_ follows torch.amp's state machine", "[cuda][amp]") {
  if (!testing::cuda_ready()) return;
  const TensorOptions o = TensorOptions().device(kGpu);
  Tensor scale = scalar_tensor(8.0, o), tracker = zeros({}, o), skipped = zeros({}, o);
  Tensor clean = zeros({}, o), bad = ones({}, o);
  update_scale_(scale, tracker, skipped, clean, 2.0, 0.5, 2, 1e9);
  CHECK(scale.item<double>() == 8.0);
  CHECK(tracker.item<double>() == 1.0);
  update_scale_(scale, tracker, skipped, clean, 2.0, 0.5, 2, 1e9);
  CHECK(scale.item<double>() == 16.0);
  CHECK(tracker.item<double>() == 0.0);
  update_scale_(scale, tracker, skipped, bad, 2.0, 0.5, 2, 1e9);
  CHECK(scale.item<double>() == 8.0);
  CHECK(skipped.item<double>() == 1.0);
  update_scale_(scale, tracker, skipped, clean, 2.0, 0.5, 1, 10.0);  // capped at max_scale
  CHECK(scale.item<double>() == 10.0);
}

TEST_CASE("cuda amp::scale_loss (apex's API) skips on the device and reports overflows a step late", "[cuda][amp]") {
  if (!testing::cuda_ready()) return;
  struct Run {
    Tensor weight;
    double scale = 0;
    int64_t skipped = 0;
    std::vector<std::string> messages;
    std::map<std::string, double> state;
  };
  auto run = [](Device d) {
    Run r;
    amp::reset();
    amp::set_message_sink([&r](const std::string& m) { r.messages.push_back(m); });
    manual_seed(9);
    nn::Linear lin(16, 4);
    lin->to(d);
    optim::SGD opt(lin->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    amp::initialize(lin, opt, amp::Options().opt_level("O2").verbosity(1));
    for (int i = 0; i < 6; ++i) {
      Tensor x = randn({8, 16});
      if (i == 1 || i == 3) x = x * 1e4;  // scaled f16 gradients overflow at these steps
      opt.zero_grad();
      Tensor loss = mse_loss(lin(x.to(d)).to(kFloat32), zeros({8, 4}, TensorOptions().device(d)));
      amp::scale_loss(loss, opt).backward();
      opt.step();
      if (d.is_cuda()) cuda::synchronize();  // lets the lagging message land before the next step
    }
    r.weight = opt.master(lin->weight).cpu();
    r.scale = amp::loss_scale();
    r.skipped = amp::skipped_steps(opt);
    r.state = amp::state_dict();
    amp::reset();
    amp::set_message_sink(nullptr);
    return r;
  };
  const Run c = run(Device::cpu());
  const Run g = run(kGpu);
  CHECK(c.skipped == 2);  // the two forced overflows
  CHECK(g.skipped == c.skipped);
  CHECK(g.scale == c.scale);
  CHECK(g.state == c.state);
  CHECK(rel_err(g.weight, c.weight) < 1e-5);
  // initialize's own report plus one overflow message per skip, in the same order.
  const auto overflows = std::count_if(c.messages.begin(), c.messages.end(), [](const std::string& m) {
    return m.find("Gradient overflow") != std::string::npos;
  });
  CHECK(overflows == c.skipped);
  CHECK(g.messages == c.messages);
}

TEST_CASE("cuda amp::scale_loss over two Adam optimizers counts one skip per overflow", "[cuda][amp]") {
  if (!testing::cuda_ready()) return;
  // Both optimizers' overflow flags are added up on the device (a flag of 2 here); each must
  // still count one skipped step, or Adam's bias correction uses a wrong step number. The
  // overflow messages (one per skipped optimizer step, the last one's too) match the CPU's.
  struct Run {
    Tensor wa, wb;
    std::map<std::string, double> sa, sb;
    int64_t skipped = 0;
    std::vector<std::string> messages;
  };
  auto run = [](Device d) {
    Run r;
    amp::reset();
    amp::set_message_sink([&r](const std::string& m) { r.messages.push_back(m); });
    manual_seed(11);
    nn::Linear a(16, 8), b(8, 4);
    a->to(d);
    b->to(d);
    optim::Adam oa(a->parameters(), optim::AdamOptions(1e-2));
    optim::Adam ob(b->parameters(), optim::AdamOptions(1e-2));
    amp::initialize({a, b}, {oa, ob}, amp::Options().opt_level("O2").verbosity(1));
    for (int i = 0; i < 6; ++i) {
      Tensor x = randn({8, 16});
      if (i == 1 || i == 5) x = x * 1e4;  // both layers' f16 gradients overflow
      oa.zero_grad();
      ob.zero_grad();
      Tensor loss = mse_loss(b(a(x.to(d))).to(kFloat32), zeros({8, 4}, TensorOptions().device(d)));
      amp::scale_loss(loss, {oa, ob}).backward();
      oa.step();
      ob.step();
    }
    r.wa = oa.master(a->weight).cpu();
    r.wb = ob.master(b->weight).cpu();
    r.sa = oa.state_dict().scalars;
    r.sb = ob.state_dict().scalars;
    r.skipped = amp::skipped_steps(oa);
    amp::reset();  // reports the last step's overflow, still in flight on the device
    amp::set_message_sink(nullptr);
    return r;
  };
  const Run c = run(Device::cpu());
  const Run g = run(kGpu);
  CHECK(c.skipped == 2);
  CHECK(g.skipped == 2);
  CHECK(c.sa.at("state.0.step") == 4.0);
  CHECK(g.sa == c.sa);
  CHECK(g.sb == c.sb);
  CHECK(rel_err(g.wa, c.wa) < 1e-4);
  CHECK(rel_err(g.wb, c.wb) < 1e-4);
  const auto overflows = std::count_if(c.messages.begin(), c.messages.end(), [](const std::string& m) {
    return m.find("Gradient overflow") != std::string::npos;
  });
  CHECK(overflows == 4);  // two skips of two optimizers
  CHECK(g.messages == c.messages);
}
