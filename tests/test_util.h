// Helpers shared by the tests: PyTorch golden files, max-error comparisons in f64, kernel call counts.
#pragma once
#include <catch2/catch.hpp>

#include "tests/paths.h"
#include "tests/skip.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "autograd/grad_mode.h"
#include "core/cuda.h"
#include "core/random.h"
#include "core/serialize.h"
#include "ops/elementwise.h"
#include "ops/profiler.h"
#include "ops/reduction.h"

namespace mpx::testing {

/// How many times the kernel of `op` ran while f did (the profiler records around f; what it had
/// recorded before is dropped).
template <typename F> int64_t kernel_calls(const std::string& op, F&& f) {
  profiler::reset();
  profiler::start();
  f();
  profiler::stop();
  int64_t calls = 0;
  for (const auto& r : profiler::results())
    if (r.op == op) calls += r.calls;
  profiler::reset();
  return calls;
}

/// A tensor from tests/golden/<file> (files are loaded once per process).
inline Tensor golden_tensor(const std::string& file, const std::string& name) {
  static std::map<std::string, TensorDict> files;
  auto f = files.find(file);
  if (f == files.end()) f = files.emplace(file, load_tensors(mpx::testing::test_data_dir() + "/golden/" + file)).first;
  auto it = f->second.find(name);
  INFO("golden tensor " << name << " in " << file);
  REQUIRE(it != f->second.end());
  return it->second;
}

/// max |a - ref| <= atol + rtol * max(min_scale, max |ref|), compared in f64.
inline bool close(const Tensor& a, const Tensor& ref, double rtol, double atol = 0.0, double min_scale = 0.0) {
  if (a.sizes() != ref.sizes()) {
    INFO("shape " << shape_str(a.sizes()) << " vs " << shape_str(ref.sizes()));
    return false;
  }
  NoGradGuard ng;
  Tensor ad = a.to(kFloat64).contiguous(), rd = ref.to(kFloat64).contiguous();
  const double* pa = ad.data_ptr<double>();
  const double* pr = rd.data_ptr<double>();
  double diff = 0, scale = min_scale;
  for (int64_t i = 0; i < ad.numel(); ++i) {
    diff = std::max(diff, std::abs(pa[i] - pr[i]));
    scale = std::max(scale, std::abs(pr[i]));
  }
  INFO("max abs diff " << diff << ", scale " << scale);
  return diff <= atol + rtol * scale;
}

/// Largest |a - b| over all elements, in f64 (shapes must match).
/// A golden file's model weights: every tensor but the "ref." ones (the reference run's inputs and outputs), as
/// the PyTorch scripts in tests/golden write them.
inline std::map<std::string, Tensor> model_weights(const TensorDict& file) {
  std::map<std::string, Tensor> weights;
  for (const auto& [k, v] : file)
    if (k.rfind("ref.", 0) != 0) weights[k] = v;
  return weights;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard ng;
  REQUIRE(a.sizes() == b.sizes());
  if (a.numel() == 0) return 0.0;
  return max(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
}

/// The message f throws, or "" when it does not throw.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/// ||a - ref|| / ||ref|| over all elements in f64, after moving both to the CPU. A NaN where
/// the reference has none (an unwritten, poisoned element) gives NaN, which fails every `<`
/// comparison; a NaN where the reference has one too (a mean over nothing) is agreement.
inline double rel_err(const Tensor& a, const Tensor& ref) {
  NoGradGuard ng;
  REQUIRE(a.sizes() == ref.sizes());
  const Tensor ad = a.cpu().to(kFloat64).contiguous(), rd = ref.cpu().to(kFloat64).contiguous();
  const double* pa = ad.data_ptr<double>();
  const double* pr = rd.data_ptr<double>();
  double num = 0, den = 0;
  for (int64_t i = 0; i < ad.numel(); ++i) {
    if (std::isnan(pa[i]) && std::isnan(pr[i])) continue;
    num += (pa[i] - pr[i]) * (pa[i] - pr[i]);
    den += pr[i] * pr[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

/// Exact equality of values on the host (same shape and dtype; NaN equals NaN): indices,
/// integer results, and ops that select values rather than compute them.
inline bool same_values(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  NoGradGuard ng;
  const Tensor x = a.cpu().to(kFloat64).contiguous(), y = b.cpu().to(kFloat64).contiguous();
  const double* px = x.data_ptr<double>();
  const double* py = y.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!(px[i] == py[i] || (std::isnan(px[i]) && std::isnan(py[i])))) {
      INFO("first difference at " << i << ": " << px[i] << " vs " << py[i]);
      return false;
    }
  return true;
}

/// Normal samples drawn in f64 from a fixed seed, then rounded to `dt`: the same values on every device.
inline Tensor seeded_randn(const IntList& shape, DType dt, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, TensorOptions(kFloat64)).to(dt);
}

/// Relative-error bound for a device result against the CPU kernels in `dt` (issue 5's table).
inline double cuda_tolerance(DType dt) {
  switch (dt) {
    case kFloat16: return 1e-3;
    case kBFloat16: return 1e-2;
    case kFloat32: return 1e-5;
    default: return 1e-12;
  }
}

/// Checks a device result against the CPU reference: on the device, same dtype, and
/// rel_err within cuda_tolerance(dt).
inline void check_cuda_close(const Tensor& got, const Tensor& ref, DType dt, const std::string& what) {
  INFO(what << " dtype " << dtype_name(dt) << " shape " << shape_str(ref.sizes()));
  REQUIRE(got.defined());
  CHECK(got.device().is_cuda());
  CHECK(got.dtype() == ref.dtype());
  const double e = rel_err(got, ref);
  INFO("rel_err " << e << " (tolerance " << cuda_tolerance(dt) << ")");
  CHECK(e < cuda_tolerance(dt));
}

/// True (and device allocations poisoned with NaN bytes) when a CUDA device is present.
/// [cuda] tests start with `if (!cuda_ready()) return;`; without a GPU the case is skipped (skip_test).
inline bool cuda_ready() {
  if (!cuda_is_available()) {
    skip_test("no CUDA device");
    return false;
  }
  cuda::poison_allocations(true);
  return true;
}

}  // namespace mpx::testing
