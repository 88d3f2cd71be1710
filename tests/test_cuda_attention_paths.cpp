// CUDA attention's three f16/bf16 paths (cuDNN's fused attention, mpx's flash kernels, the row kernels), each and mixed, against the CPU.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/cuda.h"
#include "core/random.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"
#include "ops/shape.h"
#include "test_util.h"

using namespace mpx;

namespace {

// Puts the process-wide switches back however a case ends.
struct RestorePaths {
  bool cudnn = cuda::cudnn_sdp_enabled(), flash = cuda::flash_sdp_enabled(), det = cuda::cudnn_deterministic_enabled();
  ~RestorePaths() {
    cuda::enable_cudnn_sdp(cudnn);
    cuda::enable_flash_sdp(flash);
    cuda::cudnn_deterministic(det);
  }
};

// Which kernels may run: the forward's, then the backward's (cuDNN, flash).
struct Paths {
  const char* name;
  bool cudnn_fwd, flash_fwd, cudnn_bwd, flash_bwd;
};
const Paths kPaths[] = {
    {"cuDNN", true, true, true, true},
    {"flash", false, true, false, true},
    {"row kernels", false, false, false, false},
    {"cuDNN forward, flash backward", true, true, false, true},
    {"flash forward, cuDNN backward", false, true, true, true},
};

struct Case {
  std::string name;
  int64_t B, H, Hk, L, S, E, Ev;
  bool causal;
};

bool cudnn_built() { return cuda::cudnn_version().find("frontend") != std::string::npos; }

// Output and the gradients of sum(w * out), on the CPU; q, k and v optionally GPT-2's split heads.
tensor_list run(const Case& c, DType dt, Device dev, const Paths& p, bool split = false) {
  Tensor q, k, v, x;
  if (split) {  // heads viewed out of one [B, T, 3C] projection: strided rows
    x = testing::seeded_randn({c.B, c.L, 3 * c.H * c.E}, dt, 1).to(dev).set_requires_grad(true);
    auto head = [&](int n) {
      return x.narrow(2, n * c.H * c.E, c.H * c.E).reshape({c.B, c.L, c.H, c.E}).transpose(1, 2);
    };
    q = head(0), k = head(1), v = head(2);
  } else {
    q = testing::seeded_randn({c.B, c.H, c.L, c.E}, dt, 1).to(dev).set_requires_grad(true);
    k = testing::seeded_randn({c.B, c.Hk, c.S, c.E}, dt, 2).to(dev).set_requires_grad(true);
    v = testing::seeded_randn({c.B, c.Hk, c.S, c.Ev}, dt, 3).to(dev).set_requires_grad(true);
  }
  const Tensor w = testing::seeded_randn({c.B, c.H, c.L, c.Ev}, dt, 4).to(dev);
  cuda::enable_cudnn_sdp(p.cudnn_fwd);
  cuda::enable_flash_sdp(p.flash_fwd);
  const Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, c.causal, std::nullopt, c.Hk != c.H);
  cuda::enable_cudnn_sdp(p.cudnn_bwd);
  cuda::enable_flash_sdp(p.flash_bwd);
  if (split) return {out.detach().cpu(), autograd::grad({sum(out * w)}, {x})[0].cpu()};
  const tensor_list g = autograd::grad({sum(out * w)}, {q, k, v});
  return {out.detach().cpu(), g[0].cpu(), g[1].cpu(), g[2].cpu()};
}

}  // namespace

TEST_CASE("every CUDA attention path, and a forward of one with the backward of another, agrees with the CPU",
          "[cuda][attention]") {
  if (!testing::cuda_ready()) return;
  const RestorePaths restore;
  const std::vector<Case> cases = {
      {"no mask, L != S", 2, 3, 3, 37, 45, 64, 64, false},
      {"causal, head dim 128, three tiles", 1, 2, 2, 150, 150, 128, 128, true},
      {"causal GQA", 1, 6, 2, 70, 70, 64, 64, true},
      {"causal L > S, value dim apart", 1, 2, 2, 90, 33, 32, 16, true},
      {"head dim 40", 2, 2, 2, 33, 65, 40, 40, false},
  };
  // cuDNN's support check takes every one of these on sm_80 and sm_90 (tests/cudnn_plans), so none may fall back.
  for (const Case& c : cases)
    for (DType dt : {kFloat16, kBFloat16}) {
      const tensor_list ref = run(c, dt, Device::cpu(), kPaths[0]);
      for (const Paths& p : kPaths) {
        const int64_t fallbacks = cuda::cudnn_fallbacks();
        const tensor_list got = run(c, dt, Device::cuda(), p);
        const char* what[] = {"out", "dq", "dk", "dv"};
        for (int n = 0; n < 4; ++n) {
          INFO(c.name << ", " << p.name << ", " << what[n] << " " << dtype_name(dt) << " rel_err "
                      << testing::rel_err(got[n], ref[n]));
          CHECK(testing::rel_err(got[n], ref[n]) < testing::cuda_tolerance(dt) * 4);
        }
        if (cudnn_built() && (p.cudnn_fwd || p.cudnn_bwd)) {
          INFO(c.name << ", " << p.name << " " << dtype_name(dt) << ": " << cuda::cudnn_last_fallback());
          CHECK(cuda::cudnn_fallbacks() == fallbacks);
        }
      }
    }
}

TEST_CASE("cuDNN's fused attention takes GPT-2's split heads in place", "[cuda][attention]") {
  if (!testing::cuda_ready()) return;
  const RestorePaths restore;
  const Case c{"GPT-2 split", 2, 4, 4, 129, 129, 64, 64, true};
  for (DType dt : {kFloat16, kBFloat16}) {
    const tensor_list ref = run(c, dt, Device::cpu(), kPaths[0], true);
    const int64_t fallbacks = cuda::cudnn_fallbacks();
    const tensor_list got = run(c, dt, Device::cuda(), kPaths[0], true);
    INFO(dtype_name(dt) << ": " << cuda::cudnn_last_fallback());
    CHECK(testing::rel_err(got[0], ref[0]) < testing::cuda_tolerance(dt) * 4);
    CHECK(testing::rel_err(got[1], ref[1]) < testing::cuda_tolerance(dt) * 4);
    if (cudnn_built()) CHECK(cuda::cudnn_fallbacks() == fallbacks);
  }
}

TEST_CASE("cuDNN's attention backward repeats bit for bit under cudnn_deterministic", "[cuda][attention]") {
  if (!testing::cuda_ready()) return;
  const RestorePaths restore;
  cuda::cudnn_deterministic(true);
  const Case c{"causal", 2, 4, 4, 300, 300, 64, 64, true};
  const tensor_list a = run(c, kBFloat16, Device::cuda(), kPaths[0]);
  const tensor_list b = run(c, kBFloat16, Device::cuda(), kPaths[0]);
  for (int n = 0; n < 4; ++n) CHECK(max(abs(a[n].to(kFloat32) - b[n].to(kFloat32))).item<double>() == 0.0);
}
