// CPU kernel for the fused unscale + inf/NaN check over all of an optimizer's gradients.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cmath>
#include <type_traits>

#include "ops/amp.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"

namespace mpx::cpu {
namespace {

// 1 when x is inf or NaN, read off its exponent bits: an integer test in the element loop keeps
// it vectorized, where std::isfinite on the widened value kept it scalar (ten times slower than a
// plain f16 -> f32 copy).
template <typename G> inline uint32_t non_finite(const G* p) {
  if constexpr (std::is_same_v<G, Half> || std::is_same_v<G, BFloat16>) {
    // Through the bits: a copied struct is a second memory reference GCC will not vectorize.
    constexpr uint16_t exp = std::is_same_v<G, Half> ? 0x7c00u : 0x7f80u;
    return (*reinterpret_cast<const uint16_t*>(p) & exp) == exp;
  } else {
    using U = std::conditional_t<sizeof(G) == 8, uint64_t, uint32_t>;
    constexpr U exp = sizeof(G) == 8 ? U(0x7ff0000000000000ull) : U(0x7f800000u);
    return (std::bit_cast<U>(*p) & exp) == exp;
  }
}

// One pass per gradient: read, check finiteness, multiply by inv_scale in the compute type, write.
// The flag is a relaxed atomic so chunks on different threads can raise it without a reduction.
template <typename G, typename O>
void unscale_one(const Tensor& in, const Tensor& out, float inv, std::atomic<bool>& found) {
  using A = std::conditional_t<std::is_same_v<G, double>, double, float>;
  const G* g = static_cast<const G*>(in.raw_data());
  O* o = static_cast<O*>(out.raw_data());
  const A s = static_cast<A>(inv);
  parallel_for(in.numel(), kGrain, [&](int64_t b, int64_t e) {
    uint32_t bad = 0;
    for (int64_t j = b; j < e; ++j) {
      bad |= non_finite(g + j);
      A v;
      if constexpr (std::is_same_v<G, Half> || std::is_same_v<G, BFloat16>) v = static_cast<A>(static_cast<float>(g[j]));
      else v = static_cast<A>(g[j]);
      if constexpr (std::is_same_v<O, Half> || std::is_same_v<O, BFloat16>) o[j] = O(v * s);
      else o[j] = static_cast<O>(v * s);
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
        case kFloat16:
          if (out[i].dtype() == kFloat16) unscale_one<Half, Half>(in[i], out[i], inv, found);
          else unscale_one<Half, float>(in[i], out[i], inv, found);
          break;
        case kBFloat16:
          if (out[i].dtype() == kBFloat16) unscale_one<BFloat16, BFloat16>(in[i], out[i], inv, found);
          else unscale_one<BFloat16, float>(in[i], out[i], inv, found);
          break;
        case kFloat64: unscale_one<double, double>(in[i], out[i], inv, found); break;
        default: MPX_ERROR("unscale_check_inf_: gradient ", i, " has dtype ", dtype_name(in[i].dtype()),
                           "; only floating gradients can be unscaled");
      }
    }
    if (found.load()) *static_cast<float*>(found_inf.raw_data()) = 1.0f;
  }
};

// Check only: the unscale happens in the optimizer step that follows.
struct CheckInf {
  static void run(const tensor_list& in, std::atomic<bool>& found) {
    for (const Tensor& t : in) {
      visit_dtype(t.dtype(), [&]<typename T>() {
        if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          const T* g = static_cast<const T*>(t.raw_data());
          parallel_for(t.numel(), kGrain, [&](int64_t b, int64_t e) {
            uint32_t bad = 0;
            for (int64_t j = b; j < e; ++j) bad |= non_finite(g + j);
            if (bad) found.store(true, std::memory_order_relaxed);
          });
        }
      });
    }
  }
};

void unscale_check_inf(const tensor_list& in, const tensor_list& out, const Tensor& inv_scale, const Tensor& found_inf) {
  if (!out.empty()) return UnscaleCheckInf::run(in, out, inv_scale, found_inf);
  std::atomic<bool> found{false};
  CheckInf::run(in, found);
  if (found.load()) *static_cast<float*>(found_inf.raw_data()) = 1.0f;
}

// torch.amp's _amp_update_scale_, in f32 like its kernel.
void update_scale(const Tensor& scale, const Tensor& tracker, const Tensor& skipped, const Tensor& found_inf,
                  double growth, double backoff, int64_t interval, double max_scale) {
  float* s = static_cast<float*>(scale.raw_data());
  float* t = static_cast<float*>(tracker.raw_data());
  const float cur = *s;
  if (*static_cast<const float*>(found_inf.raw_data()) != 0.0f) {
    *s = cur * static_cast<float>(backoff);
    *t = 0.0f;
    if (skipped.defined()) *static_cast<float*>(skipped.raw_data()) += 1.0f;
    return;
  }
  const float successful = *t + 1.0f;
  if (successful >= static_cast<float>(interval)) {
    const float grown = cur * static_cast<float>(growth);
    float next = cur;
    if (std::isfinite(grown)) next = std::min(grown, static_cast<float>(max_scale));
    *s = next < cur ? cur : next;  // never shrink on a clean step
    *t = 0.0f;
  } else {
    *t = successful;
  }
}

}  // namespace

MPX_REGISTER_KERNELS(cpu_amp) {
  dispatch::register_kernel<OpId::unscale_check_inf>(DeviceType::kCPU, kFloat32, &unscale_check_inf);
  dispatch::register_kernel<OpId::update_scale>(DeviceType::kCPU, kFloat32, &update_scale);
}

}  // namespace mpx::cpu
