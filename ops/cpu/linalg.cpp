// CPU GEMM, batched GEMM and linear's epilogue GEMM: oneDNN's matmul for f32 (and bf16 where the CPU runs it
// natively), f16 (and other bf16) on oneDNN's f32 kernels over f32 copies; Eigen for f64 and without oneDNN.
#include <Eigen/Core>

#include <algorithm>
#include <vector>

#include "ops/cpu/gemm_panels.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"
#include "ops/formulas.h"
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

// Products of a few rows (a token at a time when generating) with a f16/bf16 right operand: each
// element of b is read once, widened in registers and multiplied into f32 sums, rounded once.
// oneDNN 2.6 copies a bf16 b into its blocked layout on every call (9.4 GB/s of b's bytes for [1,
// 768] x [768, 3072] on a Zen 4 core, where the f32 product streams 13.3) and the Eigen path
// widens all of b to f32 first. b is w^T (linear's weight, rows of w contiguous: dot products) or
// row-major (rows of b scaled into sums). out = alpha * a b + beta * out (+ bias, then relu).
constexpr int64_t kFewRows = 4;

// sums[m] = x[m] . w over K for the M rows of x (row stride K): each element of w widened once.
template <int M, typename T> void row_dots(float* sums, const float* __restrict x, int64_t K, const T* __restrict w) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t k = 0; k < K; ++k) {
    const float wk = static_cast<float>(w[k]);
    s0 += x[k] * wk;
    if constexpr (M > 1) s1 += x[K + k] * wk;
    if constexpr (M > 2) s2 += x[2 * K + k] * wk;
    if constexpr (M > 3) s3 += x[3 * K + k] * wk;
  }
  sums[0] = s0;
  if constexpr (M > 1) sums[1] = s1;
  if constexpr (M > 2) sums[2] = s2;
  if constexpr (M > 3) sums[3] = s3;
}

// The activation after the bias in few_rows_gemm's store (the CPU counterpart of the epilogues).
enum class Act { kNone, kRelu, kGeluTanh, kGeluErf };

template <typename T>
bool few_rows_gemm(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta,
                   const Tensor& bias = {}, Act act = Act::kNone) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const bool dots = b.stride(0) == 1 && b.stride(1) >= K, rows = b.stride(1) == 1 && b.stride(0) >= N;
  if (M > kFewRows || M == 0 || K == 0 || N == 0 || !out.is_contiguous() || !(dots || rows) ||
      (bias.defined() && (!bias.is_contiguous() || bias.dtype() != out.dtype())))
    return false;
  std::vector<float> af(static_cast<size_t>(M * K));  // a widened once
  const T* pa = static_cast<const T*>(a.raw_data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) af[static_cast<size_t>(m * K + k)] = static_cast<float>(pa[m * a.stride(0) + k * a.stride(1)]);
  const T* pb = static_cast<const T*>(b.raw_data());
  const T* pbias = bias.defined() ? static_cast<const T*>(bias.raw_data()) : nullptr;
  T* po = static_cast<T*>(out.raw_data());
  const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
  auto store = [&](int64_t m, int64_t n, float sum) {
    float r = fa * sum;
    if (beta != 0.0) r += fb * static_cast<float>(po[m * N + n]);
    if (pbias) r += static_cast<float>(pbias[n]);
    if (act == Act::kRelu) r = r > 0.0f ? r : 0.0f;
    if (act == Act::kGeluTanh || act == Act::kGeluErf)
      r = formulas::Formula<OpId::gelu>::fwd(r, act == Act::kGeluTanh ? 1.0 : 0.0, 0.0);
    po[m * N + n] = static_cast<T>(r);
  };
  if (dots) {
    const int64_t ldw = b.stride(1);
    parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
      float sums[kFewRows];
      for (int64_t n = n0; n < n1; ++n) {
        switch (M) {
          case 1: row_dots<1>(sums, af.data(), K, pb + n * ldw); break;
          case 2: row_dots<2>(sums, af.data(), K, pb + n * ldw); break;
          case 3: row_dots<3>(sums, af.data(), K, pb + n * ldw); break;
          default: row_dots<4>(sums, af.data(), K, pb + n * ldw); break;
        }
        for (int64_t m = 0; m < M; ++m) store(m, n, sums[m]);
      }
    });
  } else {
    const int64_t ldb = b.stride(0);
    constexpr int64_t kCols = 512;  // a block of columns' sums stays in L1
    parallel_for((N + kCols - 1) / kCols, 1, [&](int64_t c0, int64_t c1) {
      float acc[kFewRows * kCols];
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t j0 = c * kCols, nc = std::min(kCols, N - j0);
        std::fill(acc, acc + M * kCols, 0.0f);
        for (int64_t k = 0; k < K; ++k) {
          const T* row = pb + k * ldb + j0;
          for (int64_t m = 0; m < M; ++m) {
            const float x = af[static_cast<size_t>(m * K + k)];
            float* __restrict s = acc + m * kCols;
#pragma omp simd
            for (int64_t j = 0; j < nc; ++j) s[j] += x * static_cast<float>(row[j]);
          }
        }
        for (int64_t m = 0; m < M; ++m)
          for (int64_t j = 0; j < nc; ++j) store(m, j0 + j, acc[m * kCols + j]);
      }
    });
  }
  return true;
}

// f16 products, and bf16 ones where oneDNN has no native bf16 kernels: f32 copies of the operands, each widened in
// the order it lies in memory and in parallel (converting element by element across strides took longer than the
// product itself: 36 ms against 2 ms for a [2, 2048] x [2048, 1000] layer), multiplied with f32 accumulation and
// rounded once into out. 2-d or batched 3-d operands; a broadcast batch (stride 0) is widened once.
Tensor widened(const Tensor& t) {
  if (t.dim() == 3 && t.stride(0) == 0) return widened(t.select(0, 0)).unsqueeze(0).expand(t.sizes());
  const bool transposed = t.stride(-1) != 1 && t.stride(-2) == 1;
  return transposed ? t.transpose(-1, -2).to(kFloat32).transpose(-1, -2) : t.to(kFloat32);
}
// out = alpha * a b + beta * out (+ bias, then act) over widened copies: oneDNN's f32 kernels, or Eigen's for a
// plain 2-d product. False (out untouched) where neither runs the case; the caller then computes it unfused.
bool widened_matmul(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta,
                    const Tensor& bias = {}, Act act = Act::kNone) {
  const bool eigen_ok = a.dim() == 2 && !bias.defined() && act == Act::kNone;
#ifndef MPX_WITH_ONEDNN
  if (!eigen_ok) return false;
#endif
  const Tensor af = widened(a), bf = widened(b);
  const Tensor of = beta != 0.0 ? out.to(kFloat32).contiguous() : empty(out.sizes(), TensorOptions(kFloat32));
  bool done = false;
#ifdef MPX_WITH_ONEDNN
  using onednn::Activation;
  const Activation f32_act = act == Act::kRelu       ? Activation::kRelu
                             : act == Act::kGeluTanh ? Activation::kGeluTanh
                             : act == Act::kGeluErf  ? Activation::kGeluErf
                                                     : Activation::kNone;
  done = onednn::matmul(of, af, bf, alpha, beta, bias.defined() ? bias.to(kFloat32) : Tensor(), f32_act);
#endif
  if (!done && eigen_ok) {
    gemm_native<float>(static_cast<float*>(of.raw_data()), static_cast<const float*>(af.raw_data()),
                       static_cast<const float*>(bf.raw_data()), of, af, bf, alpha, beta);
    done = true;
  }
  if (done) Tensor(out).copy_(of);
  return done;
}
// Whether T's products run on oneDNN's own kernels for T (else widened_matmul).
template <typename T> bool onednn_native() {
#ifdef MPX_WITH_ONEDNN
  if constexpr (std::is_same_v<T, float>) return true;
  if constexpr (std::is_same_v<T, BFloat16>) return onednn::matmul_bf16_native();
#endif
  return false;
}

// Whether a @ b with a read transposed (a weight gradient g^T x: a's unit stride along its rows) runs on the AVX2
// panels rather than oneDNN 2.6's f32 GEMM (bf16/f16 without native kernels: over widened copies): 1,024 rows or more
// against 64-320 columns, where that GEMM ran at about half its own rate on a Zen 3 core for k from 1,024 to 4,096
// (37-40 GFLOP/s at one thread, 72-86 at two; the panels 63-87 and 100-161). Elsewhere the two are level, or oneDNN
// is ahead, or the panels' gain in isolation did not show in a model's step (bench/RESULTS.md).
bool weight_gradient_on_panels(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  return a.stride(0) == 1 && m >= 1024 && n >= 64 && n <= 320 && m * k * n >= (int64_t{1} << 22) &&
         panels::preferred();
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
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      if (few_rows_gemm<T>(out, a, b, alpha, beta)) return;
    }
    if constexpr (!std::is_same_v<T, double>) {
      if (weight_gradient_on_panels(a, b) && panels::matmul(out, a, b, alpha, beta)) return;
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
      widened_matmul(out, a, b, alpha, beta);  // 2-d: always runs (oneDNN or Eigen)
    }
  }
};

// The right operand packed once for many products (a recurrent layer's steps): on our AVX2 panels where they beat
// oneDNN (gemm_panels.h: f32, bf16 and f16 on f32 panels), else oneDNN's, f32 and native bf16; false elsewhere (the
// caller runs Gemm).
template <typename T> struct GemmPacked {
  static bool run(const Tensor& out, const Tensor& a, const Tensor& b, double beta, std::shared_ptr<void>& plan) {
    if constexpr (!std::is_same_v<T, double>)
      if (panels::preferred()) return panels::matmul_packed(out, a, b, beta, plan);
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
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      // One product over the whole batch's f32 copies, not a copy and a product per batch element.
      if (out.numel() > 0 && a.size(2) > 0 && widened_matmul(out, a, b, alpha, beta)) return;
    }
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

// linear's fused forms: bias (and bias + ReLU or GELU) as oneDNN post-ops, and the weight gradient with
// the bias gradient beside it. Every case oneDNN does not run returns false, and the op layer
// computes it unfused.
template <typename T> struct GemmEpilogueKernel {
  static bool run(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                  kernels::GemmEpilogue epilogue) {
    using kernels::GemmEpilogue;
    if constexpr (!std::is_same_v<T, double>) {
      if (epilogue == GemmEpilogue::kBiasGrad && out.numel() > 0 && a.size(1) > 0 && bias.is_contiguous() &&
          bias.dtype() == out.dtype() && weight_gradient_on_panels(a, b) && panels::matmul(out, a, b, 1.0, 0.0)) {
        row_sums<T>(bias, a);
        return true;
      }
    }
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      const Act act = epilogue == GemmEpilogue::kBiasRelu       ? Act::kRelu
                      : epilogue == GemmEpilogue::kBiasGeluTanh ? Act::kGeluTanh
                      : epilogue == GemmEpilogue::kBiasGeluErf  ? Act::kGeluErf
                                                                : Act::kNone;
      if (out.numel() == 0 || a.size(1) == 0) return false;
      if (epilogue != GemmEpilogue::kBiasGrad && few_rows_gemm<T>(out, a, b, 1.0, 0.0, bias, act)) return true;
      if (!onednn_native<T>()) {
        // The same epilogue on f32 copies, each output rounded once after its bias and activation.
        if (epilogue != GemmEpilogue::kBiasGrad) return widened_matmul(out, a, b, 1.0, 0.0, bias, act);
        if (!bias.is_contiguous() || bias.dtype() != out.dtype() || !widened_matmul(out, a, b, 1.0, 0.0)) return false;
        row_sums<T>(bias, a);
        return true;
      }
    }
#ifdef MPX_WITH_ONEDNN
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      if (out.numel() == 0 || a.size(1) == 0) return false;
      using onednn::Activation;
      if (epilogue != GemmEpilogue::kBiasGrad)
        return onednn::matmul(out, a, b, 1.0, 0.0, bias,
                              epilogue == GemmEpilogue::kBiasRelu       ? Activation::kRelu
                              : epilogue == GemmEpilogue::kBiasGeluTanh ? Activation::kGeluTanh
                              : epilogue == GemmEpilogue::kBiasGeluErf  ? Activation::kGeluErf
                                                                        : Activation::kNone);
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
  return cpu::onednn::version() + ", bf16 " + (cpu::onednn::matmul_bf16_native() ? "native" : "on f32 copies");
#else
  return "Eigen (built without oneDNN)";
#endif
}

}  // namespace mpx
