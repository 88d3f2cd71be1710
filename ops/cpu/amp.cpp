// CPU kernel for the fused unscale + inf/NaN check over all of an optimizer's gradients.
#include <atomic>
#include <cmath>

#include "ops/amp.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"

namespace mpx::cpu {
namespace {

// One pass per gradient: read, check finiteness, multiply by inv_scale in the compute type, write.
// The flag is a relaxed atomic so chunks on different threads can raise it without a reduction.
template <typename G, typename O>
void unscale_one(const Tensor& in, const Tensor& out, float inv, std::atomic<bool>& found) {
  using A = std::conditional_t<std::is_same_v<O, double>, double, float>;
  const G* g = static_cast<const G*>(in.raw_data());
  O* o = static_cast<O*>(out.raw_data());
  const A s = static_cast<A>(inv);
  parallel_for(in.numel(), kGrain, [&](int64_t b, int64_t e) {
    bool bad = false;
    for (int64_t j = b; j < e; ++j) {
      A v;
      if constexpr (std::is_same_v<G, Half> || std::is_same_v<G, BFloat16>) v = static_cast<A>(static_cast<float>(g[j]));
      else v = static_cast<A>(g[j]);
      bad |= !std::isfinite(v);
      o[j] = static_cast<O>(v * s);
    }
    if (bad) found.store(true, std::memory_order_relaxed);
  });
}

struct UnscaleCheckInf {
  static void run(const tensor_list& in, const tensor_list& out, const Tensor& inv_scale, const Tensor& found_inf) {
    const float inv = *static_cast<const float*>(inv_scale.raw_data());
    std::atomic<bool> found{false};
    for (size_t i = 0; i < in.size(); ++i) {
      switch (in[i].dtype()) {
        case kFloat32: unscale_one<float, float>(in[i], out[i], inv, found); break;
        case kFloat16: unscale_one<Half, float>(in[i], out[i], inv, found); break;
        case kBFloat16: unscale_one<BFloat16, float>(in[i], out[i], inv, found); break;
        case kFloat64: unscale_one<double, double>(in[i], out[i], inv, found); break;
        default: MPX_ERROR("unscale_check_inf_: gradient ", i, " has dtype ", dtype_name(in[i].dtype()),
                           "; only floating gradients can be unscaled");
      }
    }
    if (found.load()) *static_cast<float*>(found_inf.raw_data()) = 1.0f;
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_amp) {
  dispatch::register_kernel(OpId::unscale_check_inf, DeviceType::kCPU, kFloat32,
                            reinterpret_cast<void*>(&UnscaleCheckInf::run));
}

}  // namespace mpx::cpu
