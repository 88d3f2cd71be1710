// CPU GEMM, batched GEMM and linear's epilogue GEMM: oneDNN's matmul for f32 (and bf16 where the CPU runs
// it natively), Eigen otherwise: f32/f64 directly on the strided operands, f16/bf16 through f32 copies.
#include <Eigen/Core>

#include <vector>

#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/backends.h"
#include "ops/linalg.h"
#ifdef MPX_WITH_ONEDNN
#include "ops/cpu/conv_onednn.h"
#include "ops/cpu/matmul_onednn.h"
#endif

namespace mpx::cpu {
namespace {

template <typename S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename S>
using StridedMap = Eigen::Map<const Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
                              Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

template <typename S>
StridedMap<S> map(const S* p, const Tensor& t) {
  // Eigen's Stride is (outer, inner): for RowMajor, outer = row stride, inner = column stride.
  return StridedMap<S>(p, t.size(0), t.size(1), Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(t.stride(0), t.stride(1)));
}

template <typename S>
void gemm_native(S* o, const S* pa, const S* pb, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  Eigen::Map<Mat<S>> O(o, out.size(0), out.size(1));
  auto A = map(pa, a);
  auto B = map(pb, b);
  // Eigen's fast path needs unit inner stride on one side; copy otherwise.
  auto run = [&](const auto& AA, const auto& BB) {
    if (beta == 0.0) O.noalias() = static_cast<S>(alpha) * (AA * BB);
    else { O *= static_cast<S>(beta); O.noalias() += static_cast<S>(alpha) * (AA * BB); }
  };
  const bool a_ok = a.stride(1) == 1 || a.stride(0) == 1;
  const bool b_ok = b.stride(1) == 1 || b.stride(0) == 1;
  if (a_ok && b_ok) {
    if (a.stride(1) == 1 && b.stride(1) == 1) {
      Eigen::Map<const Mat<S>, 0, Eigen::OuterStride<>> AA(pa, a.size(0), a.size(1), Eigen::OuterStride<>(a.stride(0)));
      Eigen::Map<const Mat<S>, 0, Eigen::OuterStride<>> BB(pb, b.size(0), b.size(1), Eigen::OuterStride<>(b.stride(0)));
      run(AA, BB);
    } else if (a.stride(1) == 1) {
      using CM = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
      Eigen::Map<const Mat<S>, 0, Eigen::OuterStride<>> AA(pa, a.size(0), a.size(1), Eigen::OuterStride<>(a.stride(0)));
      Eigen::Map<const CM, 0, Eigen::OuterStride<>> BB(pb, b.size(0), b.size(1), Eigen::OuterStride<>(b.stride(1)));
      run(AA, BB);
    } else if (b.stride(1) == 1) {
      using CM = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
      Eigen::Map<const CM, 0, Eigen::OuterStride<>> AA(pa, a.size(0), a.size(1), Eigen::OuterStride<>(a.stride(1)));
      Eigen::Map<const Mat<S>, 0, Eigen::OuterStride<>> BB(pb, b.size(0), b.size(1), Eigen::OuterStride<>(b.stride(0)));
      run(AA, BB);
    } else {
      using CM = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
      Eigen::Map<const CM, 0, Eigen::OuterStride<>> AA(pa, a.size(0), a.size(1), Eigen::OuterStride<>(a.stride(1)));
      Eigen::Map<const CM, 0, Eigen::OuterStride<>> BB(pb, b.size(0), b.size(1), Eigen::OuterStride<>(b.stride(1)));
      run(AA, BB);
    }
  } else {
    Mat<S> AA = A, BB = B;
    run(AA, BB);
  }
}

template <typename T> struct Gemm {
  static void run(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
    if (out.numel() == 0) return;
    if (a.size(1) == 0) {  // empty inner dimension: the product is zero
      T* o = static_cast<T*>(out.raw_data());
      // beta = 0 writes zeros without reading out (it may hold uninitialized NaN bits).
      for (int64_t i = 0; i < out.numel(); ++i)
        o[i] = beta == 0.0 ? T(0.0f) : T(static_cast<acc_t<T>>(static_cast<acc_t<T>>(o[i]) * beta));
      return;
    }
#ifdef MPX_WITH_ONEDNN
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      if (onednn::matmul(out, a, b, alpha, beta)) return;
    }
#endif
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      gemm_native<T>(static_cast<T*>(out.raw_data()), static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()),
                     out, a, b, alpha, beta);
    } else {
      // f16/bf16: multiply f32 copies with f32 accumulation and round back once. The copy kernel
      // widens each operand in the order it lies in memory (a transposed weight stays transposed),
      // vectorized and in parallel: converting element by element across strides took longer than
      // the product itself (36 ms against 2 ms for a [2, 2048] x [2048, 1000] layer).
      auto widen = [](const Tensor& t) {
        return t.stride(0) == 1 && t.stride(1) != 1 ? t.t().to(kFloat32).t() : t.to(kFloat32);
      };
      const Tensor af = widen(a), bf = widen(b);
      const Tensor of = beta != 0.0 ? out.to(kFloat32) : empty(out.sizes(), TensorOptions(kFloat32));
      gemm_native<float>(static_cast<float*>(of.raw_data()), static_cast<const float*>(af.raw_data()),
                         static_cast<const float*>(bf.raw_data()), of, af, bf, alpha, beta);
      Tensor(out).copy_(of);
    }
  }
};

// The right operand packed once for many products (a recurrent layer's steps): oneDNN's, f32 and bf16; false
// elsewhere (the caller runs Gemm).
template <typename T> struct GemmPacked {
  static bool run(const Tensor& out, const Tensor& a, const Tensor& b, double beta, std::shared_ptr<void>& plan) {
#ifdef MPX_WITH_ONEDNN
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) return onednn::matmul_packed(out, a, b, beta, plan);
#endif
    return false;
  }
};

// Batched GEMM: one oneDNN primitive for the whole batch where it runs the case, else one GEMM per
// batch element (Eigen parallelizes inside each product).
template <typename T> struct Bmm {
  static void run(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
#ifdef MPX_WITH_ONEDNN
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      if (out.numel() > 0 && a.size(2) > 0 && onednn::matmul(out, a, b, alpha, beta)) return;
    }
#endif
    for (int64_t i = 0; i < out.size(0); ++i) Gemm<T>::run(out.select(0, i), a.select(0, i), b.select(0, i), alpha, beta);
  }
};

// bias[i] = sum_j a[i, j] in f32 for a [n, k] with a unit stride in either dim, rounded once.
template <typename T>
void row_sums(const Tensor& bias, const Tensor& a) {
  const int64_t n = a.size(0), k = a.size(1), s0 = a.stride(0), s1 = a.stride(1);
  const T* pa = static_cast<const T*>(a.raw_data());
  T* pb = static_cast<T*>(bias.raw_data());
  std::vector<float> acc(static_cast<size_t>(n), 0.0f);
  if (s0 == 1) {
    // a is a transposed g [k, n]: add its rows, each a contiguous run of n, in order.
    for (int64_t j = 0; j < k; ++j) {
      const T* row = pa + j * s1;
      for (int64_t i = 0; i < n; ++i) acc[static_cast<size_t>(i)] += static_cast<float>(row[i]);
    }
  } else {
    parallel_for(n, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float sum = 0.0f;
        for (int64_t j = 0; j < k; ++j) sum += static_cast<float>(pa[i * s0 + j * s1]);
        acc[static_cast<size_t>(i)] = sum;
      }
    });
  }
  for (int64_t i = 0; i < n; ++i) pb[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
}

// linear's fused forms: bias (and bias + ReLU) as oneDNN post-ops, and the weight gradient with
// the bias gradient beside it. Every case oneDNN does not run returns false, and the op layer
// computes it unfused.
template <typename T> struct GemmEpilogueKernel {
  static bool run(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                  kernels::GemmEpilogue epilogue) {
#ifdef MPX_WITH_ONEDNN
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      if (out.numel() == 0 || a.size(1) == 0) return false;
      if (epilogue != kernels::GemmEpilogue::kBiasGrad)
        return onednn::matmul(out, a, b, 1.0, 0.0, bias, epilogue == kernels::GemmEpilogue::kBiasRelu);
      // The weight gradient g^T x on oneDNN, and the bias gradient (row sums of a = g^T) in the
      // same call: one f32 pass over g instead of a separate reduction op.
      if (!bias.is_contiguous() || bias.dtype() != out.dtype() || !onednn::matmul(out, a, b, 1.0, 0.0)) return false;
      row_sums<T>(bias, a);
      return true;
    }
#endif
    return false;
  }
};

}  // namespace

MPX_REGISTER_KERNELS(cpu_linalg) {
  dispatch::register_types<OpId::mm, Gemm, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::mm_packed, GemmPacked, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::bmm, Bmm, float, double, Half, BFloat16>(DeviceType::kCPU);
  dispatch::register_types<OpId::linear, GemmEpilogueKernel, float, double, Half, BFloat16>(DeviceType::kCPU);
}

}  // namespace mpx::cpu

namespace mpx {

std::string cpu_matmul_backend() {
#ifdef MPX_WITH_ONEDNN
  return cpu::onednn::version() + ", bf16 " + (cpu::onednn::matmul_bf16_native() ? "native" : "on Eigen with f32 copies");
#else
  return "Eigen (built without oneDNN)";
#endif
}

}  // namespace mpx
