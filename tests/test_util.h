// Helpers shared by the tests: PyTorch golden files and max-error comparisons in f64.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "autograd/grad_mode.h"
#include "core/serialize.h"
#include "ops/elementwise.h"
#include "ops/reduction.h"

namespace mpx::testing {

/// A tensor from tests/golden/<file> (files are loaded once per process).
inline Tensor golden_tensor(const std::string& file, const std::string& name) {
  static std::map<std::string, TensorDict> files;
  auto f = files.find(file);
  if (f == files.end()) f = files.emplace(file, load_tensors(std::string(MPX_TEST_DATA) + "/golden/" + file)).first;
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

}  // namespace mpx::testing
