// CPU kernels for elementwise ops, casts, fills and counter-based random numbers.
#include <algorithm>
#include <cmath>

#include "core/random.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"

namespace mpx::cpu {
namespace {

template <typename T> T from_acc(acc_t<T> v) { return static_cast<T>(v); }

// ---- unary: functor F<A> maps (A x, double p0, double p1) -> A, A = acc_t<T> ----
#define MPX_UNARY(NAME, EXPR)                                                        \
  struct NAME {                                                                      \
    template <typename A> static A f(A x, double p0, double p1) {                    \
      (void)p0; (void)p1;                                                            \
      return EXPR;                                                                   \
    }                                                                                \
  };
MPX_UNARY(Neg, -x)
MPX_UNARY(Abs, std::abs(x))
MPX_UNARY(Sign, static_cast<A>((x > A(0)) - (x < A(0))))
MPX_UNARY(Sqrt, std::sqrt(x))
MPX_UNARY(Rsqrt, A(1) / std::sqrt(x))
MPX_UNARY(Reciprocal, A(1) / x)
MPX_UNARY(Exp, std::exp(x))
MPX_UNARY(Log, std::log(x))
MPX_UNARY(Sin, std::sin(x))
MPX_UNARY(Cos, std::cos(x))
MPX_UNARY(Erf, std::erf(x))
MPX_UNARY(Tanh, std::tanh(x))
MPX_UNARY(Sigmoid, A(1) / (A(1) + std::exp(-x)))
MPX_UNARY(LeakyRelu, x > A(0) ? x : static_cast<A>(x * p0))
MPX_UNARY(Gelu, static_cast<A>(0.5) * x * (A(1) + std::erf(x * static_cast<A>(0.70710678118654752440))))
MPX_UNARY(Silu, x / (A(1) + std::exp(-x)))
MPX_UNARY(Softplus, x * p0 > p1 ? x : static_cast<A>(std::log1p(std::exp(x * p0)) / p0))
MPX_UNARY(PowScalar, static_cast<A>(p0 == 2.0 ? x * x : std::pow(x, static_cast<A>(p0))))
MPX_UNARY(Clamp, std::isnan(x) ? x : static_cast<A>(std::min<double>(std::max<double>(x, p0), p1)))
#undef MPX_UNARY

template <typename Op>
struct Unary {
  template <typename T> struct K {
    static void run(const Tensor& out, const Tensor& in, double p0, double p1) {
      elementwise<T, T>(out, [p0, p1](T x) { return from_acc<T>(Op::template f<acc_t<T>>(static_cast<acc_t<T>>(x), p0, p1)); }, in);
    }
  };
};

// ---- binary ----
#define MPX_BINARY(NAME, EXPR)                                  \
  struct NAME {                                                 \
    template <typename A> static A f(A a, A b, double alpha) {  \
      (void)alpha;                                              \
      return EXPR;                                              \
    }                                                           \
  };
MPX_BINARY(Add, static_cast<A>(a + static_cast<A>(alpha) * b))
MPX_BINARY(Sub, static_cast<A>(a - static_cast<A>(alpha) * b))
MPX_BINARY(Mul, static_cast<A>(a * b))
MPX_BINARY(Div, static_cast<A>(a / b))
MPX_BINARY(Pow, static_cast<A>(std::pow(a, b)))
MPX_BINARY(Maximum, (std::isnan(static_cast<double>(a)) || a > b) ? a : b)
MPX_BINARY(Minimum, (std::isnan(static_cast<double>(a)) || a < b) ? a : b)
#undef MPX_BINARY

template <typename Op>
struct Binary {
  template <typename T> struct K {
    static void run(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
      elementwise<T, T, T>(out, [alpha](T x, T y) {
        return from_acc<T>(Op::template f<acc_t<T>>(static_cast<acc_t<T>>(x), static_cast<acc_t<T>>(y), alpha));
      }, a, b);
    }
  };
};

template <typename Cmp>
struct Compare {
  template <typename T> struct K {
    static void run(const Tensor& out, const Tensor& a, const Tensor& b, double) {
      elementwise<bool, T, T>(out, [](T x, T y) { return Cmp{}(static_cast<acc_t<T>>(x), static_cast<acc_t<T>>(y)); }, a, b);
    }
  };
};

template <typename T> struct Where {
  static void run(const Tensor& out, const Tensor& c, const Tensor& a, const Tensor& b, double) {
    elementwise<T, bool, T, T>(out, [](bool s, T x, T y) { return s ? x : y; }, c, a, b);
  }
};
template <typename T> struct Addcmul {
  static void run(const Tensor& out, const Tensor& s, const Tensor& a, const Tensor& b, double v) {
    using A = acc_t<T>;
    elementwise<T, T, T, T>(out, [v](T z, T x, T y) {
      return static_cast<T>(static_cast<A>(z) + static_cast<A>(v) * static_cast<A>(x) * static_cast<A>(y)); }, s, a, b);
  }
};
template <typename T> struct Addcdiv {
  static void run(const Tensor& out, const Tensor& s, const Tensor& a, const Tensor& b, double v) {
    using A = acc_t<T>;
    elementwise<T, T, T, T>(out, [v](T z, T x, T y) {
      return static_cast<T>(static_cast<A>(z) + static_cast<A>(v) * static_cast<A>(x) / static_cast<A>(y)); }, s, a, b);
  }
};
template <typename T> struct Relu {
  static void run(const Tensor& out, const Tensor& in, double, double) {
    elementwise<T, T>(out, [](T x) { return keep_or_zero(static_cast<acc_t<T>>(x) > acc_t<T>(0), x); }, in);
  }
};
template <typename T> struct ThresholdBackward {
  static void run(const Tensor& out, const Tensor& g, const Tensor& x, double thr) {
    elementwise<T, T, T>(out, [thr](T gv, T xv) { return keep_or_zero(static_cast<double>(xv) > thr, gv); }, g, x);
  }
};

// ---- copy (with conversion), fill, random ----
template <typename D, typename S> D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) return static_cast<float>(v) != 0.0f;
  else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) return D(static_cast<float>(v));
  else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) return static_cast<D>(static_cast<float>(v));
  else return static_cast<D>(v);
}
// Dense: the elements fill [0, numel) of the storage from the start, in some order of dims
// (strides a permutation of a contiguous layout's; size-1 dims' strides do not matter).
bool dense(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> d;  // (stride, size) of dims longer than 1
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.size(i) != 1) d.emplace_back(t.stride(i), t.size(i));
  std::sort(d.begin(), d.end());
  int64_t expect = 1;
  for (const auto& [stride, size] : d) {
    if (stride != expect) return false;
    expect *= size;
  }
  return true;
}
template <typename D> struct Copy {
  static void run(const Tensor& out, const Tensor& src) {
    visit_dtype(src.dtype(), [&]<typename S>() {
      if (out.is_contiguous()) {
        elementwise<D, S>(out, [](S v) { return convert<D>(v); }, src);
        return;
      }
      // Both dense with the same strides (channels-last to channels-last, say): one flat pass.
      if (out.sizes() == src.sizes() && out.strides() == src.strides() && dense(out)) {
        D* o = static_cast<D*>(out.raw_data());
        const S* s = static_cast<const S*>(src.raw_data());
        parallel_for(out.numel(), kGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) o[i] = convert<D>(s[i]);
        });
        return;
      }
      // Row-major to channels-last (a model or batch turned NHWC): per image, a transpose of
      // [C, HW] into [HW, C], in tiles that stay in cache.
      if (out.dim() == 4 && out.is_contiguous(MemoryFormat::ChannelsLast) && src.is_contiguous()) {
        const int64_t N = out.size(0), C = out.size(1), HW = out.size(2) * out.size(3), T = 32;
        D* o = static_cast<D*>(out.raw_data());
        const S* s = static_cast<const S*>(src.raw_data());
        const int64_t tiles = (HW + T - 1) / T;
#pragma omp parallel for schedule(static) if (N * C * HW > kGrain)
        for (int64_t nt = 0; nt < N * tiles; ++nt) {
          const int64_t n = nt / tiles, p0 = (nt % tiles) * T, p1 = std::min(HW, p0 + T);
          for (int64_t c0 = 0; c0 < C; c0 += T)
            for (int64_t p = p0; p < p1; ++p)
              for (int64_t c = c0; c < std::min(C, c0 + T); ++c)
                o[(n * HW + p) * C + c] = convert<D>(s[(n * C + c) * HW + p]);
        }
        return;
      }
      // Any other strided destination (copy_ into a view): walk both in logical order.
      D* o = static_cast<D*>(out.impl()->storage->data.get());
      std::vector<int64_t> dst_offsets;
      dst_offsets.reserve(out.numel());
      for_each_offset(out.sizes(), out.strides(), out.storage_offset(), [&](int64_t off) { dst_offsets.push_back(off); });
      const S* s = static_cast<const S*>(src.impl()->storage->data.get());
      int64_t i = 0;
      for_each_offset(src.sizes(), src.strides(), src.storage_offset(), [&](int64_t off) { o[dst_offsets[i++]] = convert<D>(s[off]); });
    });
  }
};
template <typename T> struct Fill {
  static void run(const Tensor& out, double v) {
    const T val = convert<T>(v);
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(out.numel(), kGrain, [&](int64_t b, int64_t e) { std::fill(o + b, o + e, val); });
  }
};
template <typename T> struct RandUniform {
  static void run(const Tensor& out, uint64_t seed, uint64_t offset, double lo, double hi) {
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(out.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const double u = random::uniform(seed, offset + static_cast<uint64_t>(i));
        o[i] = convert<T>(std::is_integral_v<T> ? std::floor(lo + u * (hi - lo)) : lo + u * (hi - lo));
      }
    });
  }
};
template <typename T> struct RandNormal {
  static void run(const Tensor& out, uint64_t seed, uint64_t offset, double mean, double std) {
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(out.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = convert<T>(mean + std * random::normal(seed, offset + static_cast<uint64_t>(i)));
    });
  }
};

template <typename Op>
void reg_unary(OpId op) {
  dispatch::register_types<Unary<Op>::template K, float, double, Half, BFloat16>(op, DeviceType::kCPU);
}

}  // namespace

MPX_REGISTER_KERNELS(cpu_elementwise) {
  using D = DeviceType;
  reg_unary<Neg>(OpId::neg);
  dispatch::register_types<Unary<Neg>::K, int64_t, int32_t>(OpId::neg, D::kCPU);
  reg_unary<Abs>(OpId::abs);
  dispatch::register_types<Unary<Abs>::K, int64_t, int32_t>(OpId::abs, D::kCPU);
  reg_unary<Sign>(OpId::sign);
  reg_unary<Sqrt>(OpId::sqrt);
  reg_unary<Rsqrt>(OpId::rsqrt);
  reg_unary<Reciprocal>(OpId::reciprocal);
  reg_unary<Exp>(OpId::exp);
  reg_unary<Log>(OpId::log);
  reg_unary<Sin>(OpId::sin);
  reg_unary<Cos>(OpId::cos);
  reg_unary<Erf>(OpId::erf);
  reg_unary<Tanh>(OpId::tanh);
  reg_unary<Sigmoid>(OpId::sigmoid);
  dispatch::register_types<Relu, float, double, Half, BFloat16>(OpId::relu, D::kCPU);
  reg_unary<LeakyRelu>(OpId::leaky_relu);
  reg_unary<Gelu>(OpId::gelu);
  reg_unary<Silu>(OpId::silu);
  reg_unary<Softplus>(OpId::softplus);
  reg_unary<PowScalar>(OpId::pow_scalar);
  reg_unary<Clamp>(OpId::clamp);
  dispatch::register_types<Unary<Clamp>::K, int64_t, int32_t, uint8_t>(OpId::clamp, D::kCPU);

#define MPX_FLOATS float, double, Half, BFloat16
#define MPX_ALL float, double, Half, BFloat16, int64_t, int32_t, uint8_t
  dispatch::register_types<Binary<Add>::K, MPX_ALL>(OpId::add, D::kCPU);
  dispatch::register_types<Binary<Sub>::K, MPX_ALL>(OpId::sub, D::kCPU);
  dispatch::register_types<Binary<Mul>::K, MPX_ALL>(OpId::mul, D::kCPU);
  dispatch::register_types<Binary<Div>::K, MPX_FLOATS>(OpId::div, D::kCPU);
  dispatch::register_types<Binary<Pow>::K, MPX_FLOATS>(OpId::pow, D::kCPU);
  dispatch::register_types<Binary<Maximum>::K, MPX_ALL>(OpId::maximum, D::kCPU);
  dispatch::register_types<Binary<Minimum>::K, MPX_ALL>(OpId::minimum, D::kCPU);
  dispatch::register_types<Compare<std::equal_to<>>::K, MPX_ALL, bool>(OpId::eq, D::kCPU);
  dispatch::register_types<Compare<std::not_equal_to<>>::K, MPX_ALL, bool>(OpId::ne, D::kCPU);
  dispatch::register_types<Compare<std::less<>>::K, MPX_ALL>(OpId::lt, D::kCPU);
  dispatch::register_types<Compare<std::less_equal<>>::K, MPX_ALL>(OpId::le, D::kCPU);
  dispatch::register_types<Compare<std::greater<>>::K, MPX_ALL>(OpId::gt, D::kCPU);
  dispatch::register_types<Compare<std::greater_equal<>>::K, MPX_ALL>(OpId::ge, D::kCPU);
  dispatch::register_types<Where, MPX_ALL, bool>(OpId::where, D::kCPU);
  dispatch::register_types<Addcmul, MPX_FLOATS>(OpId::addcmul, D::kCPU);
  dispatch::register_types<Addcdiv, MPX_FLOATS>(OpId::addcdiv, D::kCPU);
  dispatch::register_types<ThresholdBackward, MPX_FLOATS>(OpId::threshold_backward, D::kCPU);
  dispatch::register_types<Copy, MPX_ALL, bool>(OpId::copy, D::kCPU);
  dispatch::register_types<Fill, MPX_ALL, bool>(OpId::fill, D::kCPU);
  dispatch::register_types<RandUniform, MPX_ALL>(OpId::rand_uniform, D::kCPU);
  dispatch::register_types<RandNormal, MPX_FLOATS>(OpId::rand_normal, D::kCPU);
#undef MPX_FLOATS
#undef MPX_ALL
}

}  // namespace mpx::cpu
