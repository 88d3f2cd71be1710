// Launchers of the fused multi-tensor amp and optimizer kernels (POD arguments, shared by .cu and .cpp).
#pragma once
#include <cstdint>

#include "ops/cuda/launch.h"

namespace mpx::cuda {

/// One gradient of an unscale + inf/NaN check: out may be null (check only).
struct UnscaleItem {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t n = 0;
  DType in_dtype = DType::kFloat32;
  DType out_dtype = DType::kFloat32;
  int aligned = 0;  // every pointer is 16-byte aligned: the kernel may use vector accesses
};
/// out = in * inv_scale over every item, *found_inf = 1 when any input is inf/NaN.
void launch_unscale_check(const UnscaleItem* items, int count, const float* inv_scale, float* found_inf,
                          cudaStream_t s);

/// Elements per block of the multi-tensor kernels (LAMB's partial norms come one per chunk).
constexpr int64_t kStepChunk = 16384;

/// One parameter of a fused optimizer step (see kernels::StepTensors).
struct StepItem {
  void* param = nullptr;        // the kernel's dtype, or f16/bf16 (no master) for f32 kernels; state alike
  const void* grad = nullptr;   // any floating dtype
  void* model = nullptr;        // low-precision copy to write, or null
  void* state[3] = {nullptr, nullptr, nullptr};  // param's dtype, or f32 for f16/bf16 under stochastic rounding
  double* count = nullptr;      // device count of steps taken (StepTensors::counts), or null
  void* partials = nullptr;     // LAMB: per chunk, the squared norms of the parameter and its update (kernel dtype)
  int64_t n = 0;
  int64_t step = 0;             // host step number, used without a count
  int fresh = 0;                // state buffers were just created
  uint32_t id = 0;              // the parameter's Philox stream (StepTensors::ids)
  DType param_dtype = DType::kFloat32;
  DType grad_dtype = DType::kFloat32;
  DType model_dtype = DType::kBool;  // kBool: no model copy
  DType state_dtype = DType::kBool;  // kBool: no state buffers
  int aligned = 0;  // every pointer is 16-byte aligned: the kernel may use vector accesses
};

/// sround: f16/bf16 stores round stochastically with sround::draw(seed, ...) (StepTensors::stochastic_rounding).
struct SgdArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
  bool sround;
  uint64_t seed;
};
struct AdamArgs {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad, maximize;
  bool sround;
  uint64_t seed;
};
struct RmspropArgs {
  double lr, alpha, eps, weight_decay, momentum;
  bool centered, maximize;
  bool sround;
  uint64_t seed;
};
struct AdagradArgs {
  double lr, lr_decay, weight_decay, eps, initial_accumulator_value;
  bool maximize;
  bool sround;
  uint64_t seed;
};
/// LAMB: state[0..1] exp_avg/exp_avg_sq; StepItem::partials the per-chunk norms.
struct LambArgs {
  double lr, beta1, beta2, eps, weight_decay, max_grad_norm;
  bool bias_correction, grad_averaging, adam_w_mode, use_nvlamb;
  bool sround;
  uint64_t seed;
  const double* grad_norm;  // the global gradient norm, unscaled (device)
};
/// The steps over all items; `a_dtype` is f32 or f64. found_inf / inv_scale may be null.
void launch_sgd_step(const StepItem* items, int count, const SgdArgs& h, DType a_dtype, const float* found_inf,
                     const float* inv_scale, cudaStream_t s);
void launch_adam_step(const StepItem* items, int count, const AdamArgs& h, DType a_dtype, const float* found_inf,
                      const float* inv_scale, cudaStream_t s);
void launch_rmsprop_step(const StepItem* items, int count, const RmspropArgs& h, DType a_dtype, const float* found_inf,
                         const float* inv_scale, cudaStream_t s);
void launch_adagrad_step(const StepItem* items, int count, const AdagradArgs& h, DType a_dtype, const float* found_inf,
                         const float* inv_scale, cudaStream_t s);
/// LAMB's two stages: moments, update and per-chunk norms; then the trust-ratio step.
void launch_lamb_step(const StepItem* items, int count, const LambArgs& h, DType a_dtype, const float* found_inf,
                      const float* inv_scale, cudaStream_t s);
/// *counts[i] += 1 for every i unless *found_inf != 0 (after the step that read them).
void launch_count_steps(double* const* counts, int n, const float* found_inf, cudaStream_t s);

/// torch.amp's _amp_update_scale_ on the device, plus the skip statistics:
/// overflow (found_inf != 0): scale *= backoff, tracker = 0, skipped += 1;
/// else tracker += 1, and at growth_interval the scale grows (only to a finite value <= max_scale).
void launch_update_scale(float* scale, float* tracker, float* skipped, const float* found_inf, double growth,
                         double backoff, int64_t interval, double max_scale, cudaStream_t s);

}  // namespace mpx::cuda
