// CPU kernels for elementwise ops, casts, fills and counter-based random numbers.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/random.h"
#include "autograd/grad_mode.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/formulas.h"

namespace mpx::cpu {
namespace {

template <typename T> T from_acc(acc_t<T> v) { return static_cast<T>(v); }

// ---- unary and binary ops: the formulas of ops/formulas.h, computed in acc_t<T> ----
template <typename F>
struct Unary {
  template <typename T> struct K {
    static void run(const Tensor& out, const Tensor& in, double p0, double p1) {
      using A = acc_t<T>;
      if constexpr (requires(A x) { F::keep(x); })
        elementwise<T, T>(out, [](T x) { return keep_or_zero(F::keep(static_cast<A>(x)), x); }, in);
      else if constexpr (std::is_same_v<F, formulas::Formula<OpId::gelu>>) {
        // gelu's form is p0: a compile-time p0 folds the choice out of the loop, so each form's loop
        // computes only its own formula.
        const auto run_form = [&](auto form) {
          elementwise<T, T>(out, [](T x) {
            return from_acc<T>(F::template fwd<A>(static_cast<A>(x), static_cast<double>(decltype(form)::value), 0.0));
          }, in);
        };
        if (p0 == 0.0) run_form(std::integral_constant<int, 0>{});
        else run_form(std::integral_constant<int, 1>{});
      } else
        elementwise<T, T>(out, [p0, p1](T x) { return from_acc<T>(F::template fwd<A>(static_cast<A>(x), p0, p1)); }, in);
    }
  };
};

template <typename F>
struct Binary {
  template <typename T> struct K {
    static void run(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
      using A = acc_t<T>;
      if constexpr (F::kCompare)
        elementwise<bool, T, T>(out, [alpha](T x, T y) { return F::template fwd<A>(static_cast<A>(x), static_cast<A>(y), alpha); }, a, b);
      else if constexpr (requires(A x) { F::keep(x, x, 0.0); })
        elementwise<T, T, T>(out, [alpha](T x, T y) {
          return keep_or_zero(F::keep(static_cast<A>(x), static_cast<A>(y), alpha), x); }, a, b);
      else if constexpr (std::is_same_v<F, formulas::Formula<OpId::gelu_backward>>) {
        // As gelu's forward: a compile-time form, one formula per loop.
        const auto run_form = [&](auto form) {
          elementwise<T, T, T>(out, [](T x, T y) {
            return from_acc<T>(F::template fwd<A>(static_cast<A>(x), static_cast<A>(y),
                                                  static_cast<double>(decltype(form)::value)));
          }, a, b);
        };
        if (alpha == 0.0) run_form(std::integral_constant<int, 0>{});
        else run_form(std::integral_constant<int, 1>{});
      } else
        elementwise<T, T, T>(out, [alpha](T x, T y) {
          return from_acc<T>(F::template fwd<A>(static_cast<A>(x), static_cast<A>(y), alpha)); }, a, b);
    }
  };
};

template <typename T> struct Where {
  static void run(const Tensor& out, const Tensor& c, const Tensor& a, const Tensor& b, double) {
    elementwise<T, bool, T, T>(out, [](bool s, T x, T y) { return select_bits(s, x, y); }, c, a, b);
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
// ---- copy (with conversion), fill, random ----
template <typename D, typename S> D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) return static_cast<float>(v) != 0.0f;
  else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) return D(static_cast<float>(v));
  else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) return static_cast<D>(static_cast<float>(v));
  else return static_cast<D>(v);
}
// out[r, :] = src[r, :] for every row r of the last dim, when out's last dim is contiguous and
// its other dims have non-zero strides (no element written twice). Returns false otherwise.
template <typename D, typename S>
bool copy_by_rows(const Tensor& out, const Tensor& src) {
  const int64_t nd = out.dim();
  if (nd == 0 || out.numel() == 0 || out.stride(nd - 1) != 1 || out.sizes() != src.sizes()) return false;
  for (int64_t d = 0; d < nd - 1; ++d)
    if (out.size(d) > 1 && out.stride(d) == 0) return false;
  const int64_t inner = out.size(nd - 1), rows = out.numel() / inner, s_in = src.stride(nd - 1);
  D* o = static_cast<D*>(out.raw_data());
  const S* s = static_cast<const S*>(src.raw_data());
  parallel_for(rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      int64_t rem = r, oo = 0, so = 0;
      for (int64_t d = nd - 2; d >= 0; --d) {
        const int64_t idx = rem % out.size(d);
        rem /= out.size(d);
        oo += idx * out.stride(d);
        so += idx * src.stride(d);
      }
      D* orow = o + oo;
      const S* srow = s + so;
      if (s_in == 1) {
        for (int64_t i = 0; i < inner; ++i) orow[i] = convert<D>(srow[i]);
      } else {
        for (int64_t i = 0; i < inner; ++i) orow[i] = convert<D>(srow[i * s_in]);
      }
    }
  });
  return true;
}

// A contiguous destination whose source has its unit stride on another dim than the last (a transposed matrix, a
// channels-last tensor made row-major): those two dims walked in 32 x 32 tiles. Element by element, a [2048, 512]
// f32 transpose read a new cache line for every element (4.6 ms at one thread on a Zen 3 core, PyTorch 0.8 ms).
// Returns false for other layouts.
template <typename D, typename S>
bool copy_transposed(const Tensor& out, const Tensor& src) {
  const int64_t nd = out.dim();
  if (nd < 2 || out.numel() == 0 || !out.is_contiguous() || out.sizes() != src.sizes() || src.stride(nd - 1) == 1)
    return false;
  int64_t d = nd - 2;  // the dim the source walks with unit stride
  while (d >= 0 && !(src.stride(d) == 1 && src.size(d) > 1)) --d;
  if (d < 0) return false;
  constexpr int64_t T = 32;
  const int64_t A = out.size(d), B = out.size(nd - 1), oa = out.stride(d), sb = src.stride(nd - 1);
  const int64_t tiles = (A + T - 1) / T, outer = out.numel() / (A * B);
  D* o = static_cast<D*>(out.raw_data());
  const S* s = static_cast<const S*>(src.raw_data());
  parallel_for(outer * tiles, std::max<int64_t>(1, kGrain / (T * B)), [&](int64_t wb, int64_t we) {
    for (int64_t w = wb; w < we; ++w) {
      const int64_t a0 = (w % tiles) * T, a1 = std::min(A, a0 + T);
      int64_t rem = w / tiles, oo = 0, so = 0;  // the other dims' offsets
      for (int64_t k = nd - 2; k >= 0; --k) {
        if (k == d) continue;
        const int64_t idx = rem % out.size(k);
        rem /= out.size(k);
        oo += idx * out.stride(k);
        so += idx * src.stride(k);
      }
      // Each tile goes through a local buffer: its source lines read whole, then its destination lines written
      // whole. Walking the tile in place, rows a power-of-two bytes apart (2 KiB for [2048, 512]) share a few L1
      // sets and evicted each other mid-tile.
      D buf[T][T];
      for (int64_t b0 = 0; b0 < B; b0 += T) {
        const int64_t b1 = std::min(B, b0 + T);
        for (int64_t j = b0; j < b1; ++j) {
          const S* srow = s + so + j * sb;
          for (int64_t a = a0; a < a1; ++a) buf[j - b0][a - a0] = convert<D>(srow[a]);
        }
        for (int64_t a = a0; a < a1; ++a) {
          D* orow = o + oo + a * oa;
          for (int64_t j = b0; j < b1; ++j) orow[j] = buf[j - b0][a - a0];
        }
      }
    }
  });
  return true;
}

template <typename D> struct Copy {
  static void run(const Tensor& out0, const Tensor& src0) {
    // Size-1 dims dropped first: they carry no elements but can leave a row path with rows of
    // one element (the backward of select on a trailing dim copies into a [.., n, 1] view: 13 ms
    // for a 512 x 512 x 3 x 3 weight's tap, against under 1 ms without them).
    Tensor out = out0, src = src0;
    if (out.numel() > 1 && out.sizes() == src.sizes() &&
        std::find(out.sizes().begin(), out.sizes().end(), int64_t{1}) != out.sizes().end()) {
      NoGradGuard ng;
      out = out0.squeeze(), src = src0.squeeze();
    }
    visit_dtype(src.dtype(), [&]<typename S>() {
      if (out.is_contiguous()) {
        if (copy_transposed<D, S>(out, src)) return;
        elementwise<D, S>(out, [](S v) { return convert<D>(v); }, src);
        return;
      }
      // Both dense with the same strides (channels-last to channels-last, say): one flat pass.
      if (out.sizes() == src.sizes() && out.strides() == src.strides() && !memory_order(out).empty()) {
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
      // A destination whose rows are contiguous and never overlap (copy_ into a slice, the
      // backward of narrow): row by row in parallel, each row one vectorizable run.
      if (copy_by_rows<D, S>(out, src)) return;
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
    parallel_for(out.numel(), kGrain, [&](int64_t b, int64_t e) { fill_bits(o + b, e - b, val); });
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

}  // namespace

MPX_REGISTER_KERNELS(cpu_elementwise) {
  using D = DeviceType;
  using formulas::Formula;
  // Every formula op, for the CPU dtypes its ops.def row promises.
#define MPX_REG_UNARY(op) \
  dispatch::register_mask<OpId::op, Unary<Formula<OpId::op>>::template K, kCpuDTypes[static_cast<int>(OpId::op)]>(D::kCPU);
#define MPX_REG_BINARY(op) \
  dispatch::register_mask<OpId::op, Binary<Formula<OpId::op>>::template K, kCpuDTypes[static_cast<int>(OpId::op)]>(D::kCPU);
  MPX_UNARY_OPS(MPX_REG_UNARY)
  MPX_PARAM_UNARY_OPS(MPX_REG_UNARY)
  MPX_BINARY_OPS(MPX_REG_BINARY)
#undef MPX_REG_UNARY
#undef MPX_REG_BINARY

#define MPX_FLOATS float, double, Half, BFloat16
#define MPX_ALL float, double, Half, BFloat16, int64_t, int32_t, uint8_t
  dispatch::register_types<OpId::where, Where, MPX_ALL, bool>(D::kCPU);
  dispatch::register_types<OpId::addcmul, Addcmul, MPX_FLOATS>(D::kCPU);
  dispatch::register_types<OpId::addcdiv, Addcdiv, MPX_FLOATS>(D::kCPU);
  dispatch::register_types<OpId::copy, Copy, MPX_ALL, bool>(D::kCPU);
  dispatch::register_types<OpId::fill, Fill, MPX_ALL, bool>(D::kCPU);
  dispatch::register_types<OpId::rand_uniform, RandUniform, MPX_ALL>(D::kCPU);
  dispatch::register_types<OpId::rand_normal, RandNormal, MPX_FLOATS>(D::kCPU);
#undef MPX_FLOATS
#undef MPX_ALL
}

}  // namespace mpx::cpu
